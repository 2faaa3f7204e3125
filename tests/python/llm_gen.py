"""Writes small random-weight GGUF language models for llm/tests (the llama.cpp reference test) and
prints, as JSON on stdout, the list of models written.

    llm_gen.py OUT_DIR SEED
    llm_gen.py --bench SHAPE TYPE OUT.gguf     (a random llama of a real shape, for timing)
    llm_gen.py --types OUT_DIR SEED T1,T2,...  (llama-<T> for the given weight types only)

Every model has 2 blocks, embedding length 256, feed-forward length 512 (in-dimensions are
multiples of 256, so every K-quant fits) and the same small SentencePiece-style vocabulary:
<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, single characters and merged pieces with
scores (the llama tokenizer merges the highest-scoring pair first). output.weight is scaled up so
the logits are peaked and greedy decoding is stable under quantization.

Models (name: architecture, weight type):
  llama-<T>      llama, heads 8 / kv heads 4, T in F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K
  llama-tied-F32 llama without output.weight (tied embeddings)
  mistral-<T>    llama tensors with Mistral's shapes (kv heads 2, rope base 1e6), T in F32 Q4_K
  qwen2-<T>      qwen2: Q/K/V biases, NeoX rope, T in F32 F16 Q8_0
  qwen3-<T>      qwen3: per-head RMSNorm of Q and K before rope (attn_q_norm/attn_k_norm), NeoX
                 rope, head size 64 (key_length: twice embedding / heads, as Qwen3-0.6B), T in F32
                 F16 Q8_0
  qwen2-bpe-F32, llama-bpe-F32, gpt2-bpe-F32: a byte-level BPE vocabulary (tokenizer.ggml.model
                 gpt2, 41 merges) with the qwen2, llama-bpe (Llama 3) and gpt-2 pre-tokenizers
llama-F32, llama-tied-F32, qwen2-bpe-F32 and qwen3-F32 also as Hugging Face checkpoints ("hf": the file to
open in a folder with model.safetensors, config.json and tokenizer.json; llama-tied-F32's is
sharded: two shards and model.safetensors.index.json): the same weights, Q/K rows in HF order.
Broken files for the error tests ("broken" in the JSON): bad-arch (gptj), missing-tensor (no
blk.1.ffn_up.weight), misshapen-tensor (blk.0.attn_k.weight half as wide), qwen2-no-bias.

Weights are drawn as floats and quantized with gguf.quants where it can (Q8_0, Q4_0, F16, BF16);
gguf.quants cannot quantize K-quants, so Q4_K and Q6_K tensors are random blocks whose super-block
scale is set so the dequantized values have the standard deviation asked for. Norm weights and
biases are F32, as llama.cpp's converter writes them. Q and K rows are random, so they need no
permutation: a GGUF llama's adjacent-pair rotation is what llama.cpp applies to them.
Used by llm/tests/llama_reference.rs.
"""
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as Q, TokenType, quants
from gguf.constants import GGML_QUANT_SIZES

HIDDEN = 256
FFN = 512
LAYERS = 2

# Pieces beyond single characters, highest score first (the order a BPE would have learned them).
MERGES = [
    "▁t", "he", "▁the", "in", "er", "▁a", "on", "re", "at", "en", "▁s", "or", "▁w", "an", "is",
    "ed", "▁o", "it", "ing", "▁c", "ar", "▁th", "es", "al", "ou", "le", "▁b", "▁f", "▁h", "▁m",
    "▁in", "▁is", "▁wor", "ld", "▁world", "ll", "ello", "▁hello", "▁he", "lo", "▁1", "12", "23",
    "▁12", "▁123", "▁é", "é", "ü", "ö", "ér", "▁ü", "▁da", "ta", "▁data", "ten", "sor", "▁ten",
    "▁tensor", "▁▁", "▁▁▁", "▁▁▁▁", "▁model", "ode", "▁mod", "el", "ing▁",
]
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()\"") + ["▁"]


def vocab():
    tokens, scores, types = [], [], []
    for t, ty in (("<unk>", TokenType.UNKNOWN), ("<s>", TokenType.CONTROL), ("</s>", TokenType.CONTROL)):
        tokens.append(t)
        scores.append(0.0)
        types.append(ty)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(TokenType.BYTE)
    for i, p in enumerate(MERGES):
        tokens.append(p)
        scores.append(-float(i))
        types.append(TokenType.NORMAL)
    for i, c in enumerate(CHARS):
        if c in tokens:
            continue
        tokens.append(c)
        scores.append(-1000.0 - i)
        types.append(TokenType.NORMAL)
    assert len(set(tokens)) == len(tokens)
    return tokens, scores, types


def byte_chars():
    """GPT-2's printable character for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# Byte-level BPE merges (GPT-2 characters: Ġ is a space, Ċ a newline, Ã© is é's two bytes), in rank
# order; each merge's result is a token, after the 256 byte tokens.
BPE_MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "n"), ("e", "r"), ("Ġ", "a"), ("o", "n"), ("r", "e"),
    ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"), ("l", "l"), ("e", "l"),
    ("Ġ", "h"), ("Ġh", "el"), ("l", "o"), ("Ġhel", "lo"), ("1", "2"), ("12", "3"), ("Ã", "©"),
    ("Ġ", "d"), ("a", "t"), ("Ġd", "at"), ("Ġdat", "a"), ("Ġ", "Ġ"), ("ĠĠ", "Ġ"), ("Ċ", "Ċ"),
    ("in", "g"), ("Ġt", "en"), ("s", "or"), ("Ġten", "sor"), ("'", "s"), ("H", "el"), ("Hel", "lo"),
    ("Ġ", "m"), ("o", "d"), ("Ġm", "od"), ("Ġmod", "el"),
]


def bpe_vocab():
    """tokens, types, merges of a small byte-level BPE vocabulary; <|endoftext|> last."""
    bc = byte_chars()
    tokens = [bc[b] for b in range(256)]
    types = [TokenType.NORMAL] * 256
    for a, b in BPE_MERGES:
        assert a in tokens and b in tokens, (a, b)
        tokens.append(a + b)
        types.append(TokenType.NORMAL)
    tokens += ["<|endoftext|>", "<|im_start|>"]
    types += [TokenType.CONTROL, TokenType.CONTROL]
    assert len(set(tokens)) == len(tokens)
    return tokens, types, [f"{a} {b}" for a, b in BPE_MERGES]


class Gen:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def kquant(self, qtype: Q, rows: int, cols: int, std: float) -> np.ndarray:
        """Random K-quant blocks (rows x cols values) whose values have about `std`."""
        block, size = GGML_QUANT_SIZES[qtype]
        n = rows * cols // block
        raw = self.rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        one = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
        if qtype == Q.Q4_K:
            # d, dmin (f16) then 12 bytes of 6-bit scales and mins, then 128 bytes of nibbles.
            raw[:, 0:2] = one
            raw[:, 2:4] = np.frombuffer(np.float16(67.5).tobytes(), dtype=np.uint8)
            # scales 16..47 (never 0), mins 0..15: keep each sub-block's offset near zero
            sc = self.rng.integers(16, 48, size=(n, 8))
            mn = self.rng.integers(0, 8, size=(n, 8))
            s = np.zeros((n, 12), dtype=np.uint8)
            s[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
            s[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
            s[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
            raw[:, 4:16] = s
            d_off, dmin_off = 0, 2
        elif qtype == Q.Q6_K:
            # 128 bytes low nibbles, 64 bytes high bits, 16 int8 scales, d (f16)
            raw[:, 192:208] = self.rng.integers(-40, 41, size=(n, 16)).astype(np.int8).view(np.uint8)
            raw[:, 208:210] = one
            d_off, dmin_off = 208, None
        else:
            raise ValueError(qtype)
        vals = quants.dequantize(raw, qtype)
        scale = std / float(np.std(vals))
        if dmin_off is not None:
            dmin = np.frombuffer(raw[0, dmin_off:dmin_off + 2].tobytes(), dtype=np.float16)[0]
            raw[:, dmin_off:dmin_off + 2] = np.frombuffer(np.float16(float(dmin) * scale).tobytes(), dtype=np.uint8)
        raw[:, d_off:d_off + 2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
        return raw.reshape(rows, -1)


def stored(g: Gen, w: np.ndarray, qtype: Q):
    """(array, raw_dtype) for GGUFWriter.add_tensor: w (rows x cols float32) in qtype."""
    if qtype == Q.F32:
        return w, None
    if qtype in (Q.Q4_K, Q.Q6_K):
        return g.kquant(qtype, w.shape[0], w.shape[1], float(np.std(w))), qtype
    return quants.quantize(w, qtype), qtype


def write_model(path: Path, g: Gen, arch: str, qtype: Q, *, kv_heads: int, rope_base: float,
                bias: bool, tied: bool, out_std: float, drop: str = "", narrow: str = "", bpe: str = "",
                head_dim: int = HIDDEN // 8, qk_norm: bool = False):
    heads = 8
    if bpe:
        tokens, types, merges = bpe_vocab()
    else:
        tokens, scores, types = vocab()
    n_vocab = len(tokens)
    w = GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if head_dim != HIDDEN // heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(rope_base)
    w.add_file_type(int(qtype) if qtype != Q.F32 else 0)
    if bpe:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(bpe)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(len(tokens) - 2)
        w.add_eos_token_id(len(tokens) - 2)
        w.add_add_bos_token(True)
    else:
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    floats = {}

    def mat(name, rows, cols, std):
        if name == drop:
            return
        if name == narrow:
            cols //= 2
        f = g.normal((rows, cols), std)
        floats[name] = f
        arr, raw = stored(g, f, qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    def vec(name, n, mean, std):
        f = (mean + g.normal((n,), std)).astype(np.float32)
        floats[name] = f
        w.add_tensor(name, f)

    mat("token_embd.weight", n_vocab, HIDDEN, 1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        vec(f"{p}.attn_norm.weight", HIDDEN, 1.0, 0.1)
        mat(f"{p}.attn_q.weight", heads * head_dim, HIDDEN, 0.08)
        mat(f"{p}.attn_k.weight", kv_heads * head_dim, HIDDEN, 0.08)
        mat(f"{p}.attn_v.weight", kv_heads * head_dim, HIDDEN, 0.08)
        if bias:
            vec(f"{p}.attn_q.bias", heads * head_dim, 0.0, 0.2)
            vec(f"{p}.attn_k.bias", kv_heads * head_dim, 0.0, 0.2)
            vec(f"{p}.attn_v.bias", kv_heads * head_dim, 0.0, 0.2)
        if qk_norm:
            vec(f"{p}.attn_q_norm.weight", head_dim, 1.0, 0.2)
            vec(f"{p}.attn_k_norm.weight", head_dim, 1.0, 0.2)
        mat(f"{p}.attn_output.weight", HIDDEN, heads * head_dim, 0.08)
        vec(f"{p}.ffn_norm.weight", HIDDEN, 1.0, 0.1)
        mat(f"{p}.ffn_gate.weight", FFN, HIDDEN, 0.1)
        mat(f"{p}.ffn_up.weight", FFN, HIDDEN, 0.1)
        mat(f"{p}.ffn_down.weight", HIDDEN, FFN, 0.08)
    vec("output_norm.weight", HIDDEN, 1.0, 0.1)
    if not tied:
        mat("output.weight", n_vocab, HIDDEN, out_std)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return floats, dict(heads=heads, kv_heads=kv_heads, rope_base=rope_base, tied=tied, bias=bias, head_dim=head_dim)


# Benchmark shapes: (layers, embedding, heads, kv heads, feed-forward, vocabulary).
BENCH_SHAPES = {
    "smollm-135m": (30, 576, 9, 3, 1536, 49152),
    "tinyllama-1.1b": (22, 2048, 32, 4, 5632, 32000),
}


def bench_model(path: Path, shape: str, qtype: Q, seed: int):
    """A random-weight llama of a real model's shape for timing (scripts/bench_llm.sh); written
    tensor by tensor so memory stays at one tensor."""
    layers, embd, heads, kv, ff, n_vocab = BENCH_SHAPES[shape]
    g = Gen(seed)
    base, _, _ = vocab()
    tokens = base + [f"<extra_{i}>" for i in range(n_vocab - len(base))]
    scores = [0.0] * n_vocab
    types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    types += [TokenType.NORMAL] * (n_vocab - len(types))
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(2048)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    hd = embd // heads

    def mat(name, rows, cols, std):
        arr, raw = stored(g, g.normal((rows, cols), std), qtype)
        w.add_tensor(name, arr, raw_dtype=raw)

    mat("token_embd.weight", n_vocab, embd, 1.0)
    for i in range(layers):
        p = f"blk.{i}"
        w.add_tensor(f"{p}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.attn_q.weight", embd, embd, 0.02)
        mat(f"{p}.attn_k.weight", kv * hd, embd, 0.02)
        mat(f"{p}.attn_v.weight", kv * hd, embd, 0.02)
        mat(f"{p}.attn_output.weight", embd, embd, 0.02)
        w.add_tensor(f"{p}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        mat(f"{p}.ffn_gate.weight", ff, embd, 0.02)
        mat(f"{p}.ffn_up.weight", ff, embd, 0.02)
        mat(f"{p}.ffn_down.weight", embd, ff, 0.02)
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    mat("output.weight", n_vocab, embd, 0.05)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of convert_hf_to_gguf's LlamaModel.permute: GGUF Q/K rows back to HF order."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def spm_merges(tokens, scores):
    """tokenizer.json merges for a SentencePiece vocabulary, as transformers' SpmConverter makes
    them: for every piece by descending score, every split into two pieces of the vocabulary."""
    ids = {t: i for i, t in enumerate(tokens)}
    order = sorted(range(len(tokens)), key=lambda i: -scores[i])
    merges = []
    for i in order:
        t = tokens[i]
        if len(t) < 2 or t.startswith("<"):
            continue
        splits = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ids and t[k:] in ids]
        splits.sort(key=lambda ab: (ids[ab[0]], ids[ab[1]]))
        merges += [f"{a} {b}" for a, b in splits]
    return merges


def write_hf(folder: Path, arch: str, floats: dict, info: dict, bpe: str, sharded: bool = False) -> Path:
    """The same weights as a Hugging Face checkpoint: model.safetensors (HF names, Q/K rows in HF
    order for llama), config.json and tokenizer.json; `sharded`: two shards
    (model-0000N-of-00002.safetensors) and model.safetensors.index.json instead. Returns the
    file to open."""
    from safetensors.numpy import save_file
    folder.mkdir(parents=True, exist_ok=True)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    parts = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
             "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
             "attn_v.bias": "self_attn.v_proj.bias", "ffn_gate.weight": "mlp.gate_proj.weight",
             "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
             "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
    out = {}
    for name, f in floats.items():
        if name in names:
            hf = names[name]
        else:
            _, i, rest = name.split(".", 2)
            hf = f"model.layers.{i}.{parts[rest]}"
        if arch == "llama" and name.endswith("attn_q.weight"):
            f = unpermute(f, info["heads"])
        if arch == "llama" and name.endswith("attn_k.weight"):
            f = unpermute(f, info["kv_heads"])
        out[hf] = np.ascontiguousarray(f)
    if sharded:
        names = sorted(out)
        weight_map = {}
        for k, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
            shard = f"model-{k + 1:05d}-of-00002.safetensors"
            save_file({n: out[n] for n in part}, str(folder / shard), metadata={"format": "pt"})
            weight_map.update({n: shard for n in part})
        root = folder / "model.safetensors.index.json"
        root.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    else:
        root = folder / "model.safetensors"
        save_file(out, str(root), metadata={"format": "pt"})
    n_vocab = floats["token_embd.weight"].shape[0]
    config = {
        "architectures": [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}.get(arch, "LlamaForCausalLM")],
        "model_type": arch, "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": info["heads"], "num_key_value_heads": info["kv_heads"],
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": info["rope_base"],
        "vocab_size": n_vocab, "tie_word_embeddings": info["tied"], "torch_dtype": "float32",
        "head_dim": info["head_dim"],
        "bos_token_id": 1 if not bpe else n_vocab - 2, "eos_token_id": 2 if not bpe else n_vocab - 2,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    if bpe:
        tokens, types, merges = bpe_vocab()
        # the pre-tokenizer regex as Qwen2's tokenizer.json has it
        pattern = {"qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}[bpe]
        tok = {
            "version": "1.0",
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}
                             for i, t in enumerate(tokens) if t.startswith("<|")],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            # BOS first, as the GGUF's add_bos_token says
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {"<|endoftext|>": {
                                   "id": "<|endoftext|>", "ids": [len(tokens) - 2], "tokens": ["<|endoftext|>"]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens) if not t.startswith("<|")},
                      "merges": merges},
        }
    else:
        tokens, scores, types = vocab()
        tok = {
            "version": "1.0",
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, t in enumerate(tokens[:3])],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)}, "merges": spm_merges(tokens, scores)},
        }
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1))
    return root


def main():
    if sys.argv[1] == "--types":
        types_main(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","))
        return
    if sys.argv[1] == "--bench":
        # llm_gen.py --bench SHAPE TYPE OUT.gguf
        bench_model(Path(sys.argv[4]), sys.argv[2], Q[sys.argv[3]], 1)
        return
    out = Path(sys.argv[1])
    seed = int(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    g = Gen(seed)
    models = []
    specs = [("llama", t, dict(kv_heads=4, rope_base=10000.0, bias=False, tied=False))
             for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")]
    specs.append(("llama-tied", "F32", dict(kv_heads=4, rope_base=10000.0, bias=False, tied=True)))
    specs += [("mistral", t, dict(kv_heads=2, rope_base=1e6, bias=False, tied=False)) for t in ("F32", "Q4_K")]
    specs += [("qwen2", t, dict(kv_heads=2, rope_base=1e6, bias=True, tied=False)) for t in ("F32", "F16", "Q8_0")]
    # Byte-level BPE vocabularies (tokenizer.ggml.model gpt2) with each pre-tokenizer.
    specs += [("qwen2-bpe", "F32", dict(kv_heads=2, rope_base=1e6, bias=True, tied=False, bpe="qwen2")),
              ("llama-bpe", "F32", dict(kv_heads=4, rope_base=5e5, bias=False, tied=False, bpe="llama-bpe")),
              ("gpt2-bpe", "F32", dict(kv_heads=4, rope_base=1e4, bias=False, tied=False, bpe="gpt-2"))]
    # Last, so the models above keep the bytes they had before these were added.
    specs += [("qwen3", t, dict(kv_heads=4, rope_base=1e6, bias=False, tied=False, head_dim=2 * HIDDEN // 8, qk_norm=True))
              for t in ("F32", "F16", "Q8_0")]
    for name, t, kw in specs:
        arch = next((a for a in ("qwen2", "qwen3") if name.startswith(a)), "llama")
        path = out / f"{name}-{t}.gguf"
        floats, info = write_model(path, g, arch, Q[t], out_std=0.6, **kw)
        entry = {"name": f"{name}-{t}", "arch": arch, "type": t, "path": str(path)}
        if f"{name}-{t}" in ("llama-F32", "qwen2-bpe-F32", "llama-tied-F32", "qwen3-F32"):
            hf = out / f"{name}-{t}-hf"
            # the tied one as a sharded checkpoint (two shards and an index)
            root = write_hf(hf, arch, floats, info, kw.get("bpe", ""), sharded=name == "llama-tied")
            entry["hf"] = str(root)
        models.append(entry)
    # Broken files for the error tests: an architecture outside the supported list, a missing and
    # a misshapen tensor.
    broken = {}
    base = dict(kv_heads=4, rope_base=10000.0, bias=False, tied=False, out_std=0.6)
    for name, arch, kw in (("bad-arch", "gptj", {}),
                           ("missing-tensor", "llama", {"drop": "blk.1.ffn_up.weight"}),
                           ("misshapen-tensor", "llama", {"narrow": "blk.0.attn_k.weight"}),
                           ("qwen2-no-bias", "qwen2", {})):
        path = out / f"{name}.gguf"
        write_model(path, g, arch, Q.F32, **base, **kw)
        broken[name] = str(path)
    json.dump({"models": models, "broken": broken}, sys.stdout)


def types_main(out: Path, seed: int, types: list):
    """`llm_gen.py --types OUT_DIR SEED T1,T2,...`: llama-<T> for each weight type T (any type
    gguf-py quantizes, e.g. Q4_1 Q5_0 Q5_1, which the default set leaves out because the device
    executors' tests run every model of it), the default set's shapes and vocabulary; prints
    {"models": [...]} as the default mode does."""
    out.mkdir(parents=True, exist_ok=True)
    g = Gen(seed)
    models = []
    for t in types:
        path = out / f"llama-{t}.gguf"
        write_model(path, g, "llama", Q[t], out_std=0.6, kv_heads=4, rope_base=10000.0, bias=False, tied=False)
        models.append({"name": f"llama-{t}", "arch": "llama", "type": t, "path": str(path)})
    json.dump({"models": models}, sys.stdout)


if __name__ == "__main__":
    main()
