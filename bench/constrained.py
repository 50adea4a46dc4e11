"""Decode speed with and without a constraint, through a running server.

    python bench/constrained.py http://127.0.0.1:PORT [tokens] [rounds]

Alternates an unconstrained chat request and the same request with a
`response_format` json_schema (an object with one long string field, so the
constrained reply also runs to `max_tokens`), `rounds` times each, and prints
the server's decode tok/s (`timings.predicted_per_second`) per run and the
best of each. Temperature 1, fixed seeds, `ignore_eos` on both.
"""
import json
import sys
import urllib.request

BASE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 64
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "minLength": 100000}},
          "required": ["text"]}


def run(constrained, seed):
    body = {"messages": [{"role": "user", "content": "Write a long JSON document."}],
            "max_tokens": N, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": seed,
            "ignore_eos": True}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "doc", "schema": SCHEMA}}
    req = urllib.request.Request(BASE + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        v = json.loads(r.read())
    t = v["timings"]
    assert t["predicted_n"] == N, t
    if constrained:
        assert '"text"' in v["choices"][0]["message"]["content"], v
    return t["predicted_per_second"]


def metric(name):
    with urllib.request.urlopen(BASE + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


MASK, WAIT = "redlite_constraint_mask_seconds_total", "redlite_constraint_wait_seconds_total"
m0, w0 = metric(MASK), metric(WAIT)
decode_s = 0.0
best = {False: 0.0, True: 0.0}
for i in range(ROUNDS):
    for c in (False, True):
        tps = run(c, 100 + i)
        if c:
            decode_s += N / tps
        best[c] = max(best[c], tps)
        print(f"round {i + 1} {'constrained  ' if c else 'unconstrained'} {tps:.3f} tok/s", flush=True)
print(f"best of {ROUNDS}: unconstrained {best[False]:.3f}, constrained {best[True]:.3f} tok/s, "
      f"ratio {best[True] / best[False]:.3f}")
mask, wait = metric(MASK) - m0, metric(WAIT) - w0
print(f"constrained decode {decode_s:.2f} s for {ROUNDS * N} tokens: masks computed {mask * 1e3:.1f} ms "
      f"({mask / (ROUNDS * N) * 1e6:.0f} us a token) beside the forward pass, of which the steps waited "
      f"{wait * 1e3:.2f} ms ({wait / decode_s * 100:.3f} % of decode time)")
