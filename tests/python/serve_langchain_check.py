"""LangChain's `ChatOpenAI` (langchain-openai from PyPI, unmodified) against `tensorlane serve
--model`: `.bind_tools(...)` with tool_choice required and a named tool, streamed and not, a round
trip with a `ToolMessage`, and `.with_structured_output(...)` with a pydantic model by JSON schema
and by function calling. Run by cli/tests/serve_openai.rs:

    serve_langchain_check.py TOOLS_URL

TOOLS_URL serves tools-F32.gguf (random weights, a Hermes-style template that reads `tools`): it
writes noise unconstrained, so every call that parses here does so because the server constrained
it. Prints one line per check; exits 1 on the first failure.
"""
import sys

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

url = sys.argv[1]
llm = ChatOpenAI(base_url=url + "/v1", api_key="unused", model="tools-F32.gguf", temperature=0,
                 max_tokens=200, max_retries=0, timeout=120, seed=3)


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def ok(what):
    print("ok -", what, file=sys.stderr)


# Every string and number of the arguments is bounded, so that a random model's call ends within
# max_tokens (an unbounded string is noise until the tokens run out, and an unfinished call is
# returned as text, as OpenAI returns it with finish_reason "length").
class WeatherArgs(BaseModel):
    city: str = Field(max_length=8)


class AddArgs(BaseModel):
    a: int = Field(ge=-100, le=100)
    b: int = Field(ge=-100, le=100)


@tool(args_schema=WeatherArgs)
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@tool(args_schema=AddArgs)
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


TOOLS = {"get_weather": get_weather, "add": add}


def valid_call(call, names):
    if call["name"] not in names:
        return False
    args = call["args"]
    if call["name"] == "get_weather":
        return set(args) == {"city"} and isinstance(args["city"], str)
    return set(args) == {"a", "b"} and all(isinstance(args[k], int) for k in "ab")


ask = [HumanMessage("hello there")]

# Tool calls: required (any declared tool), then each tool by name.
msg = llm.bind_tools([get_weather, add], tool_choice="required").invoke(ask)
check(msg.tool_calls and all(valid_call(c, TOOLS) for c in msg.tool_calls),
      f"bind_tools(required): a valid call of a declared tool, got {msg.tool_calls!r} / {msg.content!r}")
ok(f"bind_tools(tool_choice='required'): {msg.tool_calls[0]['name']}({msg.tool_calls[0]['args']})")
for name in TOOLS:
    msg = llm.bind_tools([get_weather, add], tool_choice=name).invoke(ask)
    check(msg.tool_calls and all(valid_call(c, [name]) for c in msg.tool_calls),
          f"bind_tools(tool_choice={name!r}): got {msg.tool_calls!r}")
    ok(f"bind_tools(tool_choice={name!r}): {msg.tool_calls[0]['args']}")

# Streamed: LangChain assembles the tool-call deltas into the same calls.
bound = llm.bind_tools([get_weather, add], tool_choice="required")
whole = None
for chunk in bound.stream(ask):
    whole = chunk if whole is None else whole + chunk
check(whole is not None and whole.tool_calls and all(valid_call(c, TOOLS) for c in whole.tool_calls),
      f"streamed bind_tools: got {whole and whole.tool_calls!r}")
ok(f"stream(): the deltas assemble into {whole.tool_calls[0]['name']}({whole.tool_calls[0]['args']})")

# A round trip: the call, the tool's answer as a ToolMessage, the model's reply.
call = bound.invoke(ask)
results = [ToolMessage(str(TOOLS[c["name"]].invoke(c["args"])), tool_call_id=c["id"]) for c in call.tool_calls]
reply = llm.bind_tools([get_weather, add]).invoke(ask + [call] + results)
check(isinstance(reply.content, str), f"the reply after a ToolMessage: {reply!r}")
ok(f"round trip with a ToolMessage: {len(reply.content)} characters, {len(reply.tool_calls)} further calls")


# Structured output, both ways LangChain asks for it.
class City(BaseModel):
    """A city."""
    name: str = Field(max_length=8)
    population: int = Field(ge=0, le=1000)
    capital: bool


for method in ("json_schema", "function_calling"):
    out = llm.with_structured_output(City, method=method).invoke(ask)
    check(isinstance(out, City), f"with_structured_output(method={method!r}): got {out!r}")
    ok(f"with_structured_output(City, method={method!r}): {out!r}")
