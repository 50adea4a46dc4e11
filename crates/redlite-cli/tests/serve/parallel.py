"""--parallel 4: four concurrent greedy requests produce exactly the tokens
each produces alone. Also prints aggregate decode tokens/s against one stream.

REDLITE_BASE: a server started with --parallel 4 and --state-cache 0 (so
every request is computed from scratch). With REDLITE_BASE_REF, the "alone"
runs go to that server instead (e.g. one without --lookup, to check that
speculation changes no token).
"""
import json
import os
import threading
import time
import urllib.request

import openai

BASE = os.environ["REDLITE_BASE"]
N = int(os.environ.get("REDLITE_TOKENS", "48"))
REF = os.environ.get("REDLITE_BASE_REF", BASE)
client = openai.OpenAI(base_url=BASE + "/v1", api_key="x", max_retries=0, timeout=600)
ref_client = openai.OpenAI(base_url=REF + "/v1", api_key="x", max_retries=0, timeout=600)
PROMPTS = ["def quicksort(xs):", "Explain the borrow checker.",
           "SELECT name FROM users WHERE", "Rewrite: let x = 1; let y = 2; let x = 1; let y = 2;"]


def run(prompt, c=None):
    r = (c or client).chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], temperature=0,
        max_tokens=N, logprobs=True, extra_body={"ignore_eos": True})
    toks = [tuple(e.bytes or []) for e in r.choices[0].logprobs.content]
    return toks, r


def decode_steps():
    text = urllib.request.urlopen(BASE + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith("redlite_decode_steps_total "):
            return float(line.split()[1])
    raise AssertionError("no decode step metric")


alone = {}
t0 = time.time()
gen_alone = 0
for p in PROMPTS:
    toks, r = run(p, ref_client)
    alone[p] = toks
    gen_alone += r.usage.completion_tokens
t_alone = time.time() - t0

together = {}
errors = []
steps0 = decode_steps()


def worker(p):
    try:
        together[p] = run(p)
    except Exception as e:  # reported below
        errors.append(repr(e))


threads = [threading.Thread(target=worker, args=(p,)) for p in PROMPTS]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
t_together = time.time() - t0
steps = decode_steps() - steps0
assert not errors, errors
gen_together = 0
for p in PROMPTS:
    toks, r = together[p]
    gen_together += r.usage.completion_tokens
    assert toks == alone[p], f"{p!r}: tokens differ under batching"
# The four really shared decode steps (fewer steps than tokens).
assert steps < gen_together, (steps, gen_together)
print("parallel ok:", json.dumps({
    "requests": len(PROMPTS), "tokens_each": N,
    "sequential_seconds": round(t_alone, 3), "sequential_tok_s": round(gen_alone / t_alone, 1),
    "parallel_seconds": round(t_together, 3), "parallel_tok_s": round(gen_together / t_together, 1),
    "decode_steps": steps, "tokens": gen_together}))
