"""A server started with --expert-cache reports the cache in /metrics: per-layer
hit, miss, byte and eviction counters that add up after a request.

REDLITE_BASE: the server.
"""
import json
import os
import urllib.request

BASE = os.environ["REDLITE_BASE"]


def metrics():
    text = urllib.request.urlopen(BASE + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def total(m, name):
    return sum(v for k, v in m.items() if k.startswith(name + "{"))


req = urllib.request.Request(
    BASE + "/v1/chat/completions",
    data=json.dumps({"model": "m", "max_tokens": 6, "temperature": 0,
                     "messages": [{"role": "user", "content": "Write a loop."}]}).encode(),
    headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=120).read())
assert r["usage"]["completion_tokens"] >= 1, r

m = metrics()
hits = total(m, "redlite_expert_cache_hits_total")
misses = total(m, "redlite_expert_cache_misses_total")
read = total(m, "redlite_expert_cache_read_bytes_total")
assert misses > 0, m
assert read > 0 and read % misses == 0, (read, misses)
assert m["redlite_expert_cache_budget_bytes"] == 1 << 20, m
assert m["redlite_expert_cache_resident_bytes"] <= 1 << 20, m
rate = m["redlite_expert_cache_hit_rate"]
assert abs(rate - hits / (hits + misses)) < 1e-9, (rate, hits, misses)
layers = [k for k in m if k.startswith("redlite_expert_cache_misses_total{")]
assert len(layers) == 4, layers
print(f"expert cache metrics ok: {hits:.0f} hits, {misses:.0f} misses, {read:.0f} bytes")
