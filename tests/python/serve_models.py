"""Writes the random-weight GGUF models of the serving tests (llm/tests/batch.rs,
cli/tests/serve_openai.rs) with llm_gen.py's writer and prints them as JSON on stdout.

    serve_models.py OUT_DIR

Models (llm_gen.py's shapes and vocabularies, seed 11):
  chat-F32     llama F32 with a `tokenizer.chat_template` (role: content lines, then "assistant:")
  llama-<T>    llama, T in F32 F16 Q8_0 Q4_K, no chat template
  qwen2-F32    qwen2 (biases, NeoX rope), no chat template
  tools-F32    llama F32 with a Hermes-style template that reads `tools` (Qwen 2.5's shape:
               the tools as JSON in a system block, calls as <tool_call> JSON, results as
               <tool_response>)
"""
import json
import sys
from pathlib import Path

import llm_gen
from gguf import GGMLQuantizationType as Q

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}[{{ m['content'] | trim }}]\n"
    "{% else %}{{ m['role'] }}: {{ m['content'] | trim }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

TOOLS_TEMPLATE = (
    "{{ bos_token }}{% if tools %}[tools: <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools> "
    "answer with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>]\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}tool: <tool_response>{{ m['content'] }}</tool_response>\n"
    "{% elif m['role'] == 'assistant' and m['tool_calls'] %}assistant:"
    "{% for c in m['tool_calls'] %}<tool_call>{\"name\": \"{{ c['function']['name'] }}\", "
    "\"arguments\": {{ c['function']['arguments'] | tojson }}}</tool_call>{% endfor %}\n"
    "{% else %}{{ m['role'] }}: {{ m['content'] | trim }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    g = llm_gen.Gen(11)
    base = dict(kv_heads=4, rope_base=10000.0, bias=False, tied=False, out_std=0.6)
    models = {}
    plain = llm_gen.GGUFWriter

    class ChatWriter(plain):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.add_chat_template(CHAT_TEMPLATE)

    llm_gen.GGUFWriter = ChatWriter
    path = out / "chat-F32.gguf"
    llm_gen.write_model(path, g, "llama", Q.F32, **base)
    models["chat-F32"] = str(path)

    llm_gen.GGUFWriter = plain
    for t in ("F32", "F16", "Q8_0", "Q4_K"):
        path = out / f"llama-{t}.gguf"
        llm_gen.write_model(path, g, "llama", Q[t], **base)
        models[f"llama-{t}"] = str(path)
    path = out / "qwen2-F32.gguf"
    llm_gen.write_model(path, g, "qwen2", Q.F32, **dict(base, kv_heads=2, rope_base=1e6, bias=True))
    models["qwen2-F32"] = str(path)

    class ToolsWriter(plain):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.add_chat_template(TOOLS_TEMPLATE)

    llm_gen.GGUFWriter = ToolsWriter
    path = out / "tools-F32.gguf"
    llm_gen.write_model(path, g, "llama", Q.F32, **base)
    models["tools-F32"] = str(path)
    llm_gen.GGUFWriter = plain
    json.dump({"models": models, "chat_template": CHAT_TEMPLATE}, sys.stdout)


if __name__ == "__main__":
    main()
