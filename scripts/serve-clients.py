#!/usr/bin/env python3
"""N concurrent clients through `redlite serve` (e.g. `--parallel 8`).

    scripts/serve-clients.py PORT MAX_TOKENS N1,N2,...

Each client asks `/v1/completions` for MAX_TOKENS greedy tokens
(`ignore_eos`) at once; prints, per N, the aggregate generated tokens per
second from the first request sent to the last answer received (prompt
prefill included). A first single-client run is a warm-up and is not
printed.
"""
import json
import sys
import threading
import time
import urllib.request


def ask(port, max_tokens, i, out):
    body = json.dumps({"model": "m", "prompt": f"def f{i}(x):", "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=600))
    out[i] = r["usage"]["completion_tokens"]


def main():
    port, max_tokens = int(sys.argv[1]), int(sys.argv[2])
    counts = [int(x) for x in sys.argv[3].split(",")]
    for k, n in enumerate([1] + counts):
        out = [0] * n
        t = time.time()
        th = [threading.Thread(target=ask, args=(port, max_tokens, i, out)) for i in range(n)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        dt = time.time() - t
        if k == 0:
            continue
        print(f"{n} clients: {sum(out)} tokens in {dt:.2f} s = {sum(out) / dt:.1f} tok/s aggregate")


if __name__ == "__main__":
    main()
