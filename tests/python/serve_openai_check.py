"""Checks `tensorlane serve --model` with the official `openai` client (and raw HTTP where the
client hides what is checked). Run by cli/tests/serve_openai.rs:

    serve_openai_check.py CHAT_URL PLAIN_URL EXPECT.json

CHAT_URL serves chat-F32.gguf (a chat template; --max-batch 2 --max-queue 2); PLAIN_URL serves
llama-F32.gguf (no template; --max-batch 1 --max-queue 0). EXPECT.json holds what the library
(Session) and `tensorlane run` give for the same prompts. Prints one line per check; exits 1 on
the first failure.
"""
import http.client
import json
import socket
import sys
import threading
import time
from urllib.parse import urlparse

import openai

chat_url, plain_url, expect_path = sys.argv[1:4]
E = json.load(open(expect_path))
client = openai.OpenAI(base_url=chat_url + "/v1", api_key="unused", max_retries=0, timeout=60)
plain = openai.OpenAI(base_url=plain_url + "/v1", api_key="unused", max_retries=0, timeout=60)
MODEL = E["model"]


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def ok(what):
    print("ok -", what, file=sys.stderr)


def raw(url, method, path, body=None, headers=None):
    """(status, parsed JSON or text) of one request."""
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    text = r.read()
    c.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text.decode(errors="replace")


def is_error(body, kind=None, code=None):
    return (isinstance(body, dict) and isinstance(body.get("error"), dict)
            and isinstance(body["error"].get("message"), str) and body["error"]["message"]
            and isinstance(body["error"].get("type"), str)
            and (kind is None or body["error"]["type"] == kind)
            and (code is None or body["error"].get("code") == code))


# -- models
ids = [m.id for m in client.models.list().data]
check(ids == [MODEL], f"models.list: {ids}")
check(client.models.retrieve(MODEL).id == MODEL, "models.retrieve")
ok("GET /v1/models")

# -- completions, greedy, not streamed: equal to Session::generate and `tensorlane run`
r = client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"], temperature=0)
check(r.choices[0].text == E["text"], f"greedy text {r.choices[0].text!r} != {E['text']!r}")
check(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason}")
check(r.usage.prompt_tokens == len(E["prompt_ids"]) and r.usage.completion_tokens == E["max_tokens"]
      and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"usage {r.usage}")
check(r.object == "text_completion" and r.model == MODEL, "object and model")
ok("completions: greedy text equals tensorlane run, usage")

# token ids as the prompt
r = client.completions.create(model=MODEL, prompt=E["prompt_ids"], max_tokens=E["max_tokens"], temperature=0)
check(r.choices[0].text == E["text"], "token-id prompt")
ok("completions: a token-id prompt")

# streamed, with the usage chunk
chunks = list(client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"],
                                        temperature=0, stream=True, stream_options={"include_usage": True}))
text = "".join(c.choices[0].text for c in chunks if c.choices)
check(text == E["text"], f"streamed text {text!r}")
check([c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length", "streamed finish_reason")
check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == E["max_tokens"], "streamed usage")
ok(f"completions: streamed ({len(chunks)} chunks) equals the same text")

# logprobs: equal to the log-softmax of Session::logits
r = client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"], temperature=0, logprobs=5)
lp = r.choices[0].logprobs
check(len(lp.token_logprobs) == E["max_tokens"], "one log-probability per token")
worst = 0.0
for got, top, want in zip(lp.token_logprobs, lp.top_logprobs, E["logprobs"]):
    worst = max(worst, abs(got - want["token"]))
    # pieces may share a text (invalid bytes): compare the values present
    vals = sorted(top.values(), reverse=True)
    for v in vals:
        worst = max(worst, min(abs(v - w) for w in want["top"]))
    check(abs(vals[0] - want["top"][0]) < 1e-4, "the most likely alternative")
check(worst < 1e-4, f"log-probabilities differ from Session::logits by {worst}")
check("".join(lp.tokens) == E["text"], "logprobs tokens join to the text")
ok(f"completions: logprobs equal Session::logits (largest difference {worst:.2e})")

# stop strings: the text ends before the first one, finish_reason stop
full = E["text"]
stop = full[5:7] if len(full) >= 8 else None
if stop:
    r = client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"], temperature=0, stop=[stop, "\u2603never"])
    check(r.choices[0].text == full[:full.index(stop)], f"stop: {r.choices[0].text!r}")
    check(r.choices[0].finish_reason == "stop", "stop finish_reason")
    chunks = list(client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"],
                                            temperature=0, stop=stop, stream=True))
    check("".join(c.choices[0].text for c in chunks) == full[:full.index(stop)], "streamed stop")
    ok(f"completions: stop {stop!r}, streamed and not")

# seeded sampling: reproducible and equal to a session with the same sampling
S = E["seeded"]
texts = [client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"], seed=S["seed"],
                                   temperature=S["temperature"], top_p=S["top_p"]).choices[0].text for _ in range(2)]
check(texts[0] == texts[1] == S["text"], f"seeded: {texts} vs {S['text']!r}")
ok("completions: seed, temperature, top_p reproduce a session's sampling")

# -- chat
C = E["chat"]
messages = [{"role": "system", "content": C["system"]}, {"role": "user", "content": C["user"]}]
r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=C["max_tokens"], temperature=0)
check(r.choices[0].message.content == C["text"], f"chat {r.choices[0].message.content!r} != {C['text']!r}")
check(r.choices[0].message.role == "assistant" and r.object == "chat.completion", "chat object")
check(r.usage.prompt_tokens == C["prompt_tokens"], f"chat usage {r.usage}")
stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=C["max_tokens"], temperature=0,
                                        stream=True, stream_options={"include_usage": True})
chunks = list(stream)
check(chunks[0].choices[0].delta.role == "assistant", "the first delta carries the role")
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(text == C["text"], f"streamed chat {text!r}")
check(chunks[-1].usage.completion_tokens == len(C["ids"]), "streamed chat usage")
# content as parts
r = client.chat.completions.create(model=MODEL, messages=[messages[0], {"role": "user", "content": [
    {"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}], max_tokens=C["max_tokens"], temperature=0)
check(r.choices[0].message.content == C["text"], "content parts")
r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
check(len(r.choices[0].logprobs.content) == 3 and len(r.choices[0].logprobs.content[0].top_logprobs) == 2, "chat logprobs")
ok("chat: greedy reply equals Session::generate of the rendered template, streamed and not")

# chat without a template: 400
try:
    plain.chat.completions.create(model=E["plain_model"], messages=messages, max_tokens=2)
    check(False, "chat without a template must fail")
except openai.BadRequestError as e:
    check("chat template" in str(e), f"no template: {e}")
ok("chat: a model without a template answers 400")

# -- errors: OpenAI error objects, and the server keeps serving
path = "/v1/completions"
st, b = raw(chat_url, "POST", path, b"{not json")
check(st == 400 and is_error(b, "invalid_request_error"), f"invalid JSON: {st} {b}")
st, b = raw(chat_url, "POST", path, {"model": "gpt-4", "prompt": "x"})
check(st == 404 and is_error(b, code="model_not_found"), f"unknown model: {st} {b}")
try:
    client.completions.create(model="nope", prompt="x")
    check(False, "unknown model")
except openai.NotFoundError:
    pass
st, b = raw(chat_url, "POST", path, {"model": MODEL, "prompt": "hi", "max_tokens": E["context"] * 2})
check(st == 400 and is_error(b, code="context_length_exceeded"), f"max_tokens beyond the context: {st} {b}")
st, b = raw(chat_url, "POST", path, {"model": MODEL, "prompt": [1] * (E["context"] + 5), "max_tokens": 1})
check(st == 400 and is_error(b, code="context_length_exceeded"), f"prompt too long: {st} {b}")
st, b = raw(chat_url, "POST", path, {"model": MODEL, "prompt": "x" * (2 << 20)})
check(st == 413 and is_error(b), f"body too large: {st} {b}")
for bad in ({"prompt": 5}, {"prompt": [1, "a"]}, {"prompt": "x", "n": 2}, {"prompt": "x", "temperature": "hot"},
            {"prompt": "x", "top_p": 0}, {"prompt": "x", "stop": [1]}, {"prompt": "x", "max_tokens": -1},
            {"prompt": [99999999]}, {"prompt": []}, [1, 2], {"prompt": "x", "logprobs": 50}):
    st, b = raw(chat_url, "POST", path, bad)
    check(st == 400 and is_error(b, "invalid_request_error"), f"{bad}: {st} {b}")
st, b = raw(chat_url, "POST", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user"}, 5]})
check(st == 400 and is_error(b), f"bad messages: {st} {b}")
st, b = raw(chat_url, "POST", "/models", {})
check(st == 405, f"POST outside /v1/ stays refused: {st}")
r = client.completions.create(model=MODEL, prompt=E["prompt"], max_tokens=E["max_tokens"], temperature=0)
check(r.choices[0].text == E["text"], "still serving after the errors")
ok("errors: invalid JSON, unknown model, context, body size, bad parameters; still serving")

# -- concurrency: 8 clients at once against 2 slots + 2 queue places
L = E["long"]
results = []
lock = threading.Lock()
# all eight send at once (a thread started late could find a finished request's place free)
barrier = threading.Barrier(8)


def one(i):
    barrier.wait()
    try:
        s = client.completions.create(model=MODEL, prompt=L["prompt"], max_tokens=L["max_tokens"], temperature=0,
                                      stream=(i % 2 == 0))
        text = "".join(c.choices[0].text for c in s) if i % 2 == 0 else s.choices[0].text
        out = ("done", text)
    except openai.RateLimitError as e:
        out = ("429", e.body)
    except Exception as e:  # noqa: BLE001 - reported as a failure below
        out = ("error", repr(e))
    with lock:
        results.append(out)


t0 = time.time()
threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
kinds = [k for k, _ in results]
check(len(results) == 8 and "error" not in kinds, f"concurrent results: {results}")
check(all(t == L["text"] for k, t in results if k == "done"), "every concurrent answer is the solo greedy text")
check(kinds.count("done") >= 4 and kinds.count("429") >= 1, f"4 in flight, the rest 429: {kinds}")
check(all(is_error(b) or (isinstance(b, dict) and "message" in b) for k, b in results if k == "429"), "429 bodies")
ok(f"concurrency: {kinds.count('done')} complete and equal, {kinds.count('429')} answered 429 ({time.time() - t0:.1f} s)")

# -- disconnects free the slot (PLAIN_URL has one slot and no queue)
u = urlparse(plain_url)


def open_stream(stream):
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    body = json.dumps({"model": E["plain_model"], "prompt": "hello", "max_tokens": E["plain_context"] - 8,
                       "temperature": 0, "stream": stream, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def slot_frees(what):
    """The next request runs within 5 s (retrying 429s)."""
    deadline = time.time() + 5
    while time.time() < deadline:
        st, b = raw(plain_url, "POST", "/v1/completions", {"model": E["plain_model"], "prompt": "a", "max_tokens": 2})
        if st == 200:
            return
        check(st == 429, f"{what}: {st} {b}")
        time.sleep(0.05)
    check(False, f"{what}: the slot was not freed within 5 s")


for stream in (True, False):
    s = open_stream(stream)
    if stream:
        got = b""
        while b"data:" not in got:
            got += s.recv(4096)
    else:
        time.sleep(0.3)
    st, b = raw(plain_url, "POST", "/v1/completions", {"model": E["plain_model"], "prompt": "a", "max_tokens": 2})
    check(st == 429 and is_error(b, code="rate_limit_exceeded"), f"the slot is taken: {st} {b}")
    s.close()
    slot_frees("streamed" if stream else "not streamed")
ok("disconnect: a client that leaves (streamed or waiting) frees its slot at once")
print("serve_openai_check: all checks passed", file=sys.stderr)
