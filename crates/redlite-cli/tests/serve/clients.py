"""The official openai and anthropic Python clients against `redlite serve`.

Run by tests/serve.rs with REDLITE_BASE=http://127.0.0.1:PORT. The tiny model's
text is random: what is checked is the protocol as the SDKs parse it.
"""
import json
import os
import sys

import anthropic
import openai

BASE = os.environ["REDLITE_BASE"]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
an = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]},
        "strict": False,
    },
}]
MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Open src/main.rs and tell me what it does."},
]


def check_usage(u, cached_at_least=0):
    assert u.prompt_tokens > 0, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    assert u.prompt_tokens_details.cached_tokens >= cached_at_least, u
    assert u.prompt_tokens_details.cached_tokens <= u.prompt_tokens, u


# Models.
models = oa.models.list()
ids = [m.id for m in models.data]
assert ids == ["qwen3-coder-next"], ids

# Chat, non-streaming, with tools.
r = oa.chat.completions.create(model="whatever", messages=MESSAGES, tools=TOOLS,
                               tool_choice="auto", temperature=0, max_tokens=12, seed=1)
c = r.choices[0]
assert r.object == "chat.completion"
assert c.message.role == "assistant"
assert c.finish_reason in ("stop", "length", "tool_calls"), c.finish_reason
check_usage(r.usage)
first_text = c.message.content or ""

# The same request streamed, with usage: the accumulated text equals the
# non-streamed one (greedy), and the usage chunk comes last.
stream = oa.chat.completions.create(model="whatever", messages=MESSAGES, tools=TOOLS,
                                    temperature=0, max_tokens=12, stream=True,
                                    stream_options={"include_usage": True})
text, finish, usage, n_chunks = "", None, None, 0
roles = []
for chunk in stream:
    n_chunks += 1
    if chunk.usage is not None:
        usage = chunk.usage
        assert chunk.choices == []
        continue
    d = chunk.choices[0].delta
    if d.role:
        roles.append(d.role)
    text += d.content or ""
    if chunk.choices[0].finish_reason:
        finish = chunk.choices[0].finish_reason
assert roles == ["assistant"], roles
assert finish in ("stop", "length", "tool_calls"), finish
assert usage is not None
check_usage(usage, cached_at_least=1)  # the identical prompt was just served
assert text == first_text, (text, first_text)

# Tool choice "none", stop strings, sampling extensions via extra_body.
r = oa.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none",
                               temperature=0.7, top_p=0.9, max_completion_tokens=6,
                               stop=["\n\n"], extra_body={"top_k": 20, "min_p": 0.05,
                                                          "chat_template_kwargs": {}})
assert r.choices[0].message.tool_calls in (None, [])
assert r.usage.completion_tokens <= 6

# Logprobs.
r = oa.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=4,
                               logprobs=True, top_logprobs=2)
lp = r.choices[0].logprobs.content
assert len(lp) == r.usage.completion_tokens and all(len(e.top_logprobs) == 2 for e in lp)

# Errors come back as the SDK's typed exceptions, not retries of 5xx.
try:
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "x " * 5000}],
                               max_tokens=4)
    raise AssertionError("expected a context error")
except openai.BadRequestError as e:
    assert e.status_code == 400
    assert "context" in str(e), str(e)
try:
    oa.chat.completions.create(model="m", messages=[], max_tokens=4)
    raise AssertionError("expected a 400")
except openai.BadRequestError as e:
    assert "messages" in str(e)

# Legacy completions, streaming and not.
r = oa.completions.create(model="m", prompt="def fib(n):", max_tokens=8, temperature=0)
assert r.object == "text_completion" and r.choices[0].finish_reason in ("stop", "length")
comp_text = r.choices[0].text
parts = [ch.choices[0].text for ch in oa.completions.create(
    model="m", prompt="def fib(n):", max_tokens=8, temperature=0, stream=True) if ch.choices]
assert "".join(parts) == comp_text, (parts, comp_text)

# Anthropic Messages, non-streaming, with a tool.
ATOOLS = [{"name": "read", "description": "Read a file",
           "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
# (Newer SDKs take sampling settings through extra_body.)
m = an.messages.create(model="claude-whatever", max_tokens=10, extra_body={"temperature": 0},
                       system="You are a coding agent.", tools=ATOOLS,
                       messages=[{"role": "user", "content": "Open src/main.rs"}])
assert m.type == "message" and m.role == "assistant"
assert m.stop_reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence"), m.stop_reason
assert m.usage.output_tokens > 0
a_text = "".join(b.text for b in m.content if b.type == "text")

# Streaming, through the SDK's event accumulator; the identical prompt is reused.
with an.messages.stream(model="claude-whatever", max_tokens=10, extra_body={"temperature": 0},
                        system="You are a coding agent.", tools=ATOOLS,
                        messages=[{"role": "user", "content": "Open src/main.rs"}]) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == a_text, (streamed, a_text)
assert final.stop_reason == m.stop_reason
assert final.usage.cache_read_input_tokens > 0, final.usage
assert final.usage.output_tokens == m.usage.output_tokens

# A tool round trip in history (tool_use then tool_result).
m2 = an.messages.create(model="c", max_tokens=6, tools=ATOOLS, messages=[
    {"role": "user", "content": "Open src/main.rs"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "src/main.rs"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}"}]},
])
assert m2.usage.output_tokens > 0
try:
    an.messages.create(model="c", max_tokens=5, messages=[])
    raise AssertionError("expected a 400")
except anthropic.BadRequestError as e:
    assert e.status_code == 400

print("clients ok:", json.dumps({"chat_text": first_text[:40], "anthropic_text": a_text[:40]}))
