"""A bounded load test, loopback only: 8 concurrent streaming clients for
about REDLITE_LOAD_SECONDS (default 50), plus clients that disconnect
mid-stream. Passes when no response was a 5xx, no slot leaked (the metrics
show nothing running or waiting afterwards) and memory stayed steady.

REDLITE_BASE: the server; REDLITE_PID: its process id (for its RSS).
"""
import json
import os
import random
import threading
import time
import urllib.request

import http.client
import urllib.parse

BASE = os.environ["REDLITE_BASE"]
PID = os.environ["REDLITE_PID"]
SECONDS = float(os.environ.get("REDLITE_LOAD_SECONDS", "50"))


def rss_mib():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def metrics():
    text = urllib.request.urlopen(BASE + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


lock = threading.Lock()
stats = {"ok": 0, "disconnected": 0, "status": {}, "errors": [], "tokens": 0}
deadline = time.time() + SECONDS


def body(rng):
    words = " ".join(rng.choice(["fn", "let", "x", "map", "vec", "loop", "ok"])
                     for _ in range(rng.randint(5, 120)))
    return {"model": "m", "stream": True, "max_tokens": rng.randint(4, 40),
            "temperature": rng.choice([0, 0.8]), "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": words}]}


HOST = urllib.parse.urlparse(BASE)


def post(b):
    """Open a streaming POST; returns (connection, response)."""
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(b),
              headers={"content-type": "application/json"})
    r = c.getresponse()
    with lock:
        stats["status"][r.status] = stats["status"].get(r.status, 0) + 1
    return c, r


def lines(r):
    while True:
        line = r.readline()
        if not line:
            return
        yield line.decode().rstrip("\r\n")


def streamer(i):
    rng = random.Random(i)
    while time.time() < deadline:
        try:
            c, r = post(body(rng))
            if r.status != 200:
                r.read()
                c.close()
                continue
            done = False
            for line in lines(r):
                if line == "data: [DONE]":
                    done = True
                    break
                if line.startswith("data: "):
                    d = json.loads(line[6:])
                    assert "error" not in d, d
                    if d.get("usage"):
                        with lock:
                            stats["tokens"] += d["usage"]["completion_tokens"]
            c.close()
            assert done, "stream ended without [DONE]"
            with lock:
                stats["ok"] += 1
        except Exception as e:
            with lock:
                stats["errors"].append(repr(e))


def quitter(i):
    """Opens a long stream, reads a couple of events, hangs up."""
    rng = random.Random(1000 + i)
    while time.time() < deadline:
        b = body(rng)
        b["max_tokens"] = 2000
        try:
            c, r = post(b)
            n = 0
            for line in lines(r):
                if line.startswith("data: "):
                    n += 1
                    if n >= 3:
                        break
            c.close()  # hang up mid-stream
            with lock:
                stats["disconnected"] += 1
        except Exception as e:
            with lock:
                stats["errors"].append(repr(e))
        time.sleep(rng.uniform(0.2, 1.0))


threads = [threading.Thread(target=streamer, args=(i,)) for i in range(8)]
threads += [threading.Thread(target=quitter, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
time.sleep(min(10, SECONDS / 4))
rss_warm = rss_mib()
for t in threads:
    t.join()
rss_end = rss_mib()

# Every slot comes back: nothing running or waiting once the clients are gone.
for _ in range(100):
    m = metrics()
    if m["redlite_requests_running"] == 0 and m["redlite_requests_waiting"] == 0:
        break
    time.sleep(0.1)
assert m["redlite_requests_running"] == 0, m
assert m["redlite_requests_waiting"] == 0, m
five = {s: n for s, n in stats["status"].items() if s >= 500}
assert not five, f"5xx responses: {five}"
assert not stats["errors"], stats["errors"][:5]
assert stats["ok"] > 20 and stats["disconnected"] > 2, stats
# Memory steady: growth after warm-up bounded by the state cache budget plus slack.
budget = m["redlite_state_cache_budget_bytes"] / 2**20
assert rss_end - rss_warm < budget + 64, (rss_warm, rss_end, budget)
# The server still answers normally.
c, r = post({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
assert r.status == 200, r.read()
c.close()
print("load ok:", json.dumps({"seconds": SECONDS, "completed": stats["ok"],
                              "disconnected": stats["disconnected"], "status": stats["status"],
                              "tokens": stats["tokens"], "rss_warm_mib": round(rss_warm, 1),
                              "rss_end_mib": round(rss_end, 1)}))
