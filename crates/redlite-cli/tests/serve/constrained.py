"""Constrained decoding through the official clients, on a random-weight
model (so the grammar does all the work): forced tool calls name a declared
tool and their arguments validate against its schema (Python `jsonschema`),
`response_format` output validates / parses, streaming equals non-streaming,
a constraint cut by `max_tokens` ends with `length`, invalid constraints are
400s naming the field.

REDLITE_BASE: a server started with --parallel 4 on a random-weight model.
"""
import concurrent.futures as cf
import json
import os
import re
import urllib.error
import urllib.request

import anthropic
import jsonschema
import openai

BASE = os.environ["REDLITE_BASE"]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=300)
an = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0, timeout=300)
POOL = cf.ThreadPoolExecutor(4)

# Bounded strings and arrays: a random model never chooses to stop a free
# string (its closing tag is one choice among hundreds of tokens).
READ = {"type": "object", "properties": {
    "path": {"type": "string", "maxLength": 8},
    "limit": {"type": "integer", "minimum": 0, "maximum": 500},
    "ratio": {"type": "number"},
    "follow": {"type": "boolean"},
    "mode": {"type": "string", "enum": ["text", "hex", "base64"]},
    "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    "range": {"type": "object", "properties": {"start": {"type": "integer"},
                                               "end": {"type": "integer"}},
              "required": ["start", "end"], "additionalProperties": False},
    "note": {"type": ["string", "null"], "maxLength": 6},
}, "required": ["path", "limit", "follow"]}
GREP = {"type": "object", "properties": {
    "pattern": {"type": "string", "minLength": 1, "maxLength": 6},
    "level": {"enum": [1, 2, 3]},
    "case": {"type": "boolean"},
}, "required": ["pattern", "level"]}
LS = {"type": "object", "properties": {}}
SCHEMAS = {"read": READ, "grep": GREP, "ls": LS}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
         for n, s in SCHEMAS.items()]
MESSAGES = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Look at the project."}]


def check_calls(calls, only=None, one=False):
    assert calls, "no tool call"
    if one:
        assert len(calls) == 1, calls
    for c in calls:
        name = c["name"]
        assert name in SCHEMAS, name
        if only:
            assert name == only, name
        jsonschema.validate(c["arguments"], SCHEMAS[name])


def chat(seed, **kw):
    r = oa.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=1.0,
                                   top_p=1.0, extra_body={"top_k": 0}, seed=seed,
                                   max_tokens=kw.pop("max_tokens", 400), **kw)
    c = r.choices[0]
    calls = [{"name": t.function.name, "arguments": json.loads(t.function.arguments),
              "raw": t.function.arguments} for t in (c.message.tool_calls or [])]
    return c.finish_reason, c.message.content, calls


def chat_stream(seed, **kw):
    s = oa.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=1.0,
                                   top_p=1.0, extra_body={"top_k": 0}, seed=seed,
                                   max_tokens=kw.pop("max_tokens", 400), stream=True, **kw)
    calls, content, finish = {}, "", None
    for ch in s:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            e = calls.setdefault(t.index, {"name": None, "raw": ""})
            if t.function.name:
                e["name"] = t.function.name
            e["raw"] += t.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    out = [{"name": calls[i]["name"], "arguments": json.loads(calls[i]["raw"]), "raw": calls[i]["raw"]}
           for i in sorted(calls)]
    return finish, content or None, out


# 50 forced calls over typed parameters (half with parallel_tool_calls off).
def required(seed):
    one = seed % 2 == 1
    fin, content, calls = chat(seed, tool_choice="required", parallel_tool_calls=not one)
    assert fin == "tool_calls", (seed, fin, content, calls)
    assert not content, (seed, content)
    check_calls(calls, one=one)
    return calls


results = list(POOL.map(required, range(50)))
names = {c["name"] for calls in results for c in calls}
print(f"required: 50 requests, {sum(map(len, results))} calls, tools used {sorted(names)}")


# A named tool.
def named(seed):
    fin, _, calls = chat(seed, tool_choice={"type": "function", "function": {"name": "grep"}})
    assert fin == "tool_calls", (seed, fin, calls)
    check_calls(calls, only="grep")


list(POOL.map(named, range(100, 110)))
print("named: 10 requests ok")

# Streaming equals non-streaming (same seed: same tokens).
for seed in (3, 4, 7):
    a = chat(seed, tool_choice="required")
    b = chat_stream(seed, tool_choice="required")
    assert a == b, (seed, a, b)
print("streaming equals non-streaming")

# Anthropic: tool_choice any / tool, input_schema.
A_TOOLS = [{"name": n, "description": f"{n} tool", "input_schema": s} for n, s in SCHEMAS.items()]


def anthropic_any(seed):
    choice = {"type": "any"} if seed % 2 == 0 else {"type": "tool", "name": "read",
                                                     "disable_parallel_tool_use": True}
    m = an.messages.create(model="m", max_tokens=400, tools=A_TOOLS, tool_choice=choice,
                           messages=[{"role": "user", "content": "Look."}],
                           extra_body={"seed": seed, "temperature": 1.0, "top_p": 1.0, "top_k": 0})
    assert m.stop_reason == "tool_use", (seed, m)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and not [b for b in m.content if b.type == "text" and b.text.strip()], m.content
    check_calls([{"name": u.name, "arguments": u.input} for u in uses],
                only=None if seed % 2 == 0 else "read", one=seed % 2 == 1)


list(POOL.map(anthropic_any, range(200, 210)))
print("anthropic any/tool: 10 requests ok")

# response_format json_schema (strict) and json_object.
OUT = {"type": "object", "properties": {
    "answer": {"type": "string", "maxLength": 10},
    "score": {"type": "integer", "minimum": 0, "maximum": 10},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "ok": {"type": "boolean"}},
    "required": ["answer", "score", "tags", "ok"], "additionalProperties": False}


def json_schema(seed):
    r = oa.chat.completions.create(
        model="m", messages=MESSAGES, temperature=1.0, top_p=1.0, extra_body={"top_k": 0},
        seed=seed, max_tokens=300,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "out", "schema": OUT, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop", (seed, c)
    jsonschema.validate(json.loads(c.message.content), OUT)


list(POOL.map(json_schema, range(300, 310)))
print("json_schema: 10 requests ok")


def json_object(seed):
    r = oa.chat.completions.create(model="m", messages=MESSAGES, temperature=1.0, top_p=1.0,
                                   extra_body={"top_k": 0}, seed=seed, max_tokens=600,
                                   response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "length":
        return 0
    assert c.finish_reason == "stop", (seed, c)
    assert isinstance(json.loads(c.message.content), dict), c.message.content
    return 1


done = sum(POOL.map(json_object, range(400, 410)))
assert done >= 5, done
print(f"json_object: {done} of 10 complete within max_tokens, each parses as an object")

# Completions with a GBNF grammar (llama-server's field).
for seed in range(3):
    r = oa.completions.create(model="m", prompt="Answer:", max_tokens=40, temperature=1.0, seed=seed,
                              top_p=1.0, extra_body={"top_k": 0, "grammar": 'root ::= ("yes" | "no") " " [0-9]{2,3} "."'})
    t = r.choices[0].text
    assert re.fullmatch(r"(yes|no) [0-9]{2,3}\.", t), t
    assert r.choices[0].finish_reason == "stop", r.choices[0]
print("gbnf ok")

# A call cut by max_tokens: finish_reason length, never a half-parsed call.
fin, content, calls = chat(5, tool_choice="required", max_tokens=6)
assert fin == "length" and not calls, (fin, content, calls)


# Invalid constraints: 400 naming the field.
def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


for body, field in [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "wat"}}}},
     "response_format"),
    ({"grammar": "root ::= (\"a\""}, "grammar"),
    ({"json_schema": {"type": "object", "properties": {"a": {"minimum": "x"}}}}, "json_schema"),
    ({"tools": [{"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {}, "required": ["gone"]}}}], "tool_choice": "required"},
     "tool_choice"),
]:
    s, v = post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 5, **body})
    assert s == 400, (s, v)
    assert field in v["error"]["message"] or v["error"].get("param") == field, v
print("invalid constraints are 400s")
print("constrained ok")
