#!/usr/bin/env python3
"""Turn 2 of a long agent conversation through `redlite serve`.

    scripts/turn2-ttft.py PORT PROMPT_TOKENS [TURNS]

Turn 1 sends a system prompt and a user message of about PROMPT_TOKENS
tokens (greedy, 16 tokens of reply); each later turn sends the same
messages, the previous reply as the assistant's message and a new short user
message, streamed: the time to its first token is what the agent waits for.
Prints turn 1's prompt tokens and wall time, then each later turn's time to
first token with the server's `timings` (`cache_n`: tokens resumed from a
snapshot, `prompt_n`: tokens prefilled).
"""
import json
import sys
import time
import urllib.request


def body_lines(n):
    return "".join(
        f"def handler_{i}(request, ctx):\n"
        f"    value = ctx.lookup({i * 7919 % 10007}) + request.size * {i % 97}\n"
        f"    return value\n"
        for i in range(n))


def post(url, msgs, max_tokens, stream):
    b = {"model": "m", "messages": msgs, "max_tokens": max_tokens, "temperature": 0,
         "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(url, json.dumps(b).encode(),
                                 {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)


def main():
    port, target = int(sys.argv[1]), int(sys.argv[2])
    turns = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    # About 51 tokens a function with the qwen2 vocabulary.
    msgs = [{"role": "system", "content": "You are a coding agent. Answer with code."},
            {"role": "user",
             "content": "Read this file and summarise it:\n" + body_lines(max(1, target // 51))}]
    t = time.time()
    r = json.load(post(url, msgs, 16, False))
    print(f"turn 1: {r['usage']['prompt_tokens']} prompt tokens, "
          f"{r['usage']['completion_tokens']} generated, {time.time() - t:.2f} s wall, "
          f"timings {json.dumps(r.get('timings'))}")
    reply = r["choices"][0]["message"].get("content") or "ok"
    for k in range(2, turns + 1):
        msgs = msgs + [{"role": "assistant", "content": reply},
                       {"role": "user", "content": f"Now write test number {k} for handler_{k}."}]
        t = time.time()
        first, text, timings = None, [], None
        for raw in post(url, msgs, 16, True):
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ev = json.loads(line[5:])
            for ch in ev.get("choices", []):
                d = ch.get("delta", {})
                c = d.get("content") or d.get("reasoning_content") or d.get("tool_calls")
                if c:
                    if first is None:
                        first = time.time() - t
                    text.append(c if isinstance(c, str) else json.dumps(c))
            timings = ev.get("timings") or timings
        reply = "".join(text) or "ok"
        ftxt = f"{first * 1000:.1f} ms" if first is not None else "no content"
        print(f"turn {k}: time to first token {ftxt}, whole reply {time.time() - t:.2f} s, "
              f"timings {json.dumps(timings)}")


if __name__ == "__main__":
    main()
