"""Turn-to-turn state reuse as a tool-using agent drives it.

REDLITE_BASE: a server with state reuse (the default); REDLITE_BASE_FRESH: the
same model with `--state-cache 0`. Each turn re-sends the whole history, with
the previous assistant turn's tool-call arguments re-serialised (other key
order and spacing), as clients do. Turns 2 and later must prefill only their
new tokens, the metrics must agree, and the resumed sequence's log-probs must
equal a fresh run's within 1e-4.
"""
import json
import os
import urllib.request

import openai

BASE = os.environ["REDLITE_BASE"]
FRESH = os.environ["REDLITE_BASE_FRESH"]
warm = openai.OpenAI(base_url=BASE + "/v1", api_key="x", max_retries=0)
fresh = openai.OpenAI(base_url=FRESH + "/v1", api_key="x", max_retries=0)

TOOLS = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "limit": {"type": "integer"}}}}}]


def metrics(base):
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def ask(client, messages, **kw):
    return client.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, temperature=0, max_tokens=8,
        logprobs=True, top_logprobs=20, **kw)


def same_logprobs(a, b, what):
    la, lb = a.choices[0].logprobs.content, b.choices[0].logprobs.content
    assert [e.token for e in la] == [e.token for e in lb], what
    worst = 0.0
    for ea, eb in zip(la, lb):
        ta = {t.token: t.logprob for t in ea.top_logprobs}
        tb = {t.token: t.logprob for t in eb.top_logprobs}
        for tok in set(ta) & set(tb):
            worst = max(worst, abs(ta[tok] - tb[tok]))
        worst = max(worst, abs(ea.logprob - eb.logprob))
    assert worst <= 1e-4, f"{what}: log-probs differ by {worst}"
    return worst


history = [
    {"role": "system", "content": "You are a coding agent. Use the tools."},
    {"role": "user", "content": "What does src/main.rs do?"},
]
prev_prompt = 0
report = []
for turn in range(1, 5):
    before = metrics(BASE)
    r = ask(warm, history)
    after = metrics(BASE)
    u = r.usage
    cached = u.prompt_tokens_details.cached_tokens
    prefilled = after["redlite_prompt_tokens_total"] - before["redlite_prompt_tokens_total"]
    reused = (after["redlite_prompt_tokens_cached_total"]
              - before["redlite_prompt_tokens_cached_total"])
    if turn > 1:
        assert cached >= prev_prompt, f"turn {turn}: cached {cached} < previous prompt {prev_prompt}"
    # The metrics agree with the usage the client saw.
    assert reused == cached, (turn, reused, cached)
    assert prefilled == u.prompt_tokens - cached, (turn, prefilled, u.prompt_tokens, cached)
    # The resumed sequence computes what a fresh one computes.
    worst = same_logprobs(r, ask(fresh, history), f"turn {turn}")
    report.append({"turn": turn, "prompt": u.prompt_tokens, "cached": cached,
                   "prefilled": int(prefilled), "max_logprob_diff": worst})
    prev_prompt = u.prompt_tokens
    # The client records the reply as a tool call, re-serialising the
    # arguments its own way, then runs the tool and asks again.
    args = {"limit": 40 + turn, "path": f"src/file{turn}.rs"}
    history.append({
        "role": "assistant", "content": r.choices[0].message.content or "",
        "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": {
            "name": "read", "arguments": json.dumps(args, indent=turn % 2 or None)}}]})
    history.append({"role": "tool", "tool_call_id": f"call_{turn}",
                    "content": f"// contents of file {turn}\nfn f{turn}() {{}}\n"})

m = metrics(BASE)
assert m['redlite_state_restores_total{result="hit"}'] >= 3, m
assert m["redlite_state_snapshots"] >= 1 and m["redlite_state_snapshot_bytes"] > 0, m
print("multiturn ok:", json.dumps(report))
