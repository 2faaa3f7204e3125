"""Structured output and tool calls of `tensorlane serve --model`, checked with the official
`openai` client and validated with `jsonschema` (both from PyPI). Run by cli/tests/serve_openai.rs:

    serve_structured_check.py TOOLS_URL CHAT_URL

TOOLS_URL serves tools-F32.gguf (random weights, a Hermes-style template that reads `tools`);
CHAT_URL serves chat-F32.gguf (a template without tool support). A random-weight model writes
noise unconstrained, so every reply that parses and validates here does so because of the grammar.
Prints one line per check; exits 1 on the first failure.
"""
import json
import sys

import jsonschema
import openai

tools_url, chat_url = sys.argv[1:3]
client = openai.OpenAI(base_url=tools_url + "/v1", api_key="unused", max_retries=0, timeout=120)
plain = openai.OpenAI(base_url=chat_url + "/v1", api_key="unused", max_retries=0, timeout=120)
MODEL = "tools-F32.gguf"
ASK = [{"role": "user", "content": "hello there"}]


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def ok(what):
    print("ok -", what, file=sys.stderr)


# Five schemas: nested objects, enums, arrays, numbers with bounds, strings with lengths. Every
# string and list is bounded so that a random model's reply ends within max_tokens.
SCHEMAS = {
    "flat": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                              "ok": {"type": "boolean"}},
             "required": ["name", "ok"], "additionalProperties": False},
    "enum": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                              "size": {"type": "string", "enum": ["S", "M", "L"]}},
             "required": ["color", "size"], "additionalProperties": False},
    "nested": {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                                  "tags": {"type": "array", "items": {"enum": ["a", "b"]},
                                                           "maxItems": 3}},
                 "required": ["id", "tags"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
    "array": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
              "minItems": 2, "maxItems": 4},
    "numbers": {"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1},
                                                 "n": {"type": "integer", "minimum": 10, "maximum": 20}},
                "required": ["p", "n"], "additionalProperties": False},
}

for name, schema in SCHEMAS.items():
    for temperature in (0, 0.9):
        r = client.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=200, temperature=temperature, seed=3,
            response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}})
        c = r.choices[0]
        check(c.finish_reason == "stop", f"{name} T={temperature}: the value ended the reply: {c.finish_reason} {c.message.content!r}")
        value = json.loads(c.message.content)
        jsonschema.validate(value, schema)
    ok(f"response_format json_schema '{name}': replies parse and validate (greedy and sampled)")

r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200, temperature=0,
                                   response_format={"type": "json_object"})
content = r.choices[0].message.content
check(content.startswith("{"), f"json_object starts an object: {content!r}")
if r.choices[0].finish_reason == "stop":
    check(isinstance(json.loads(content), dict), f"json_object: {content!r}")
ok("response_format json_object: an object")

# Streamed, the deltas join into the same constrained value.
schema = SCHEMAS["nested"]
chunks = client.chat.completions.create(
    model=MODEL, messages=ASK, max_tokens=200, temperature=0, stream=True,
    response_format={"type": "json_schema", "json_schema": {"name": "nested", "schema": schema}})
text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
jsonschema.validate(json.loads(text), schema)
ok("response_format streamed: the deltas join into a valid value")

for bad in ({"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nope"}}}):
    try:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, response_format=bad)
        check(False, f"{bad} accepted")
    except openai.BadRequestError as e:
        check(e.body and e.body.get("param") == "response_format", f"{bad}: {e.body}")
ok("response_format: unknown types and bad schemas are 400 naming it")

# Tools.
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]},
                                                      "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                    "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                         "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def valid_calls(calls, only=None):
    check(calls, "tool calls were returned")
    for c in calls:
        check(c.type == "function" and c.id.startswith("call-") and len(c.id) == 29, f"call id/type: {c}")
        check(c.function.name in PARAMS and (only is None or c.function.name == only), f"declared function: {c}")
        jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])


for temperature in (0, 0.9):
    for seed in range(3):
        r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                           max_tokens=120, temperature=temperature, seed=seed)
        c = r.choices[0]
        check(c.finish_reason == "tool_calls", f"required: finish_reason {c.finish_reason} {c.message}")
        valid_calls(c.message.tool_calls)
ok("tools, tool_choice required: every reply is a valid call of a declared function")

r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=120, temperature=0,
                                   tool_choice={"type": "function", "function": {"name": "add"}})
valid_calls(r.choices[0].message.tool_calls, only="add")
ok("tools, a named tool_choice: a call of that function")

stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                        max_tokens=120, temperature=0, stream=True)
deltas, reason = [], None
for ch in stream:
    if ch.choices:
        deltas += ch.choices[0].delta.tool_calls or []
        reason = ch.choices[0].finish_reason or reason
check(reason == "tool_calls" and deltas, f"streamed: {reason} {deltas}")
check([d.index for d in deltas] == list(range(len(deltas))), f"delta indices: {deltas}")
valid_calls(deltas)
ok("tools streamed: tool_calls deltas with their index, finish_reason tool_calls")

# A round trip: the call and its result go back through the template.
call = r.choices[0].message.tool_calls[0]
history = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
    {"role": "tool", "tool_call_id": call.id, "content": "42"},
]
r2 = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=8, temperature=0)
r1 = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=8, temperature=0)
check(r2.usage.prompt_tokens > r1.usage.prompt_tokens + 10, f"the call and result are in the prompt: {r2.usage} vs {r1.usage}")
check(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"{r2.choices[0]}")
ok("tools round trip: an assistant tool_calls message and a tool message are rendered")

r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=6, temperature=0)
check(r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls", f"none: {r.choices[0]}")
ok("tool_choice none: prose, no calls")

try:
    plain.chat.completions.create(model="chat-F32.gguf", messages=ASK, tools=TOOLS, max_tokens=4)
    check(False, "a template without tool support accepted tools")
except openai.BadRequestError as e:
    check(e.body.get("param") == "tools" and "does not support tools" in e.body.get("message", ""), f"{e.body}")
for kw, param in ((dict(tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
                  (dict(response_format={"type": "json_object"}, tool_choice="required"), "response_format")):
    try:
        client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=4, **kw)
        check(False, f"{kw} accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == param, f"{kw}: {e.body}")
ok("tools refused with 400 naming the field: a template without tools, an unknown function, two grammars")
print("serve_structured_check: all checks passed", file=sys.stderr)
