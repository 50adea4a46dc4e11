#!/usr/bin/env bash
# Side-by-side speed of two builds of `redlite` on one GPU: the same
# `redlite bench` runs alternated between them (before, after, before, ...),
# on the full-size synthetic cf2 model, then one table.
#
#   scripts/gpu-ab.sh --before BIN --after BIN [--model FILE] [--vocab GGUF]
#                     [--rounds N] [-- BENCH_ARGS...]
#
# --before / --after  the two `redlite` binaries
# --model    the model file (default /tmp/redlite-models/cf2-512.gguf; written with
#            `redlite synth --preset qwen3-coder-next --mix cf2` by --after when absent)
# --vocab    the tokenizer GGUF for the synth (default: the fixtures' ggml-vocab-qwen2.gguf)
# --rounds   rounds of (before, after) (default 2)
# BENCH_ARGS `redlite bench` arguments (default: -p 1738 -n 128 -r 3: prefill pp1738 and
#            decode tg128 in one run)
#
# Each binary keeps its own kernel cache ($REDLITE_CUDA_CACHE/before and /after when
# set). Writes ab.jsonl (every test's JSON with its build and round) and ab.md (the
# table) to $OUT when set, else ./gpu-ab-out.
set -uo pipefail
cd "$(dirname "$0")/.."
BEFORE=""
AFTER=""
MODEL=/tmp/redlite-models/cf2-512.gguf
VOCAB="${REDLITE_FIXTURES:-../shared/fixtures}/tokenizer/ggml-vocab-qwen2.gguf"
ROUNDS=2
while [ $# -gt 0 ]; do
    case "$1" in
        --before) BEFORE="$2"; shift 2 ;;
        --after) AFTER="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --vocab) VOCAB="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$BEFORE" ] && [ -x "$AFTER" ] || { echo "--before and --after must be executables" >&2; exit 2; }
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(-p 1738 -n 128 -r 3)
LOG="${OUT:-gpu-ab-out}"
mkdir -p "$LOG" "$(dirname "$MODEL")"
if [ ! -f "$MODEL" ]; then
    echo "== writing $MODEL"
    "$AFTER" synth --preset qwen3-coder-next --mix cf2 --vocab-from "$VOCAB" -o "$MODEL" 2>&1 | tail -1
fi
CACHE="${REDLITE_CUDA_CACHE:-}"
status=0
for round in $(seq 1 "$ROUNDS"); do
    for build in before after; do
        bin=$BEFORE
        [ "$build" = after ] && bin=$AFTER
        echo "== round $round, $build: redlite bench ${ARGS[*]}"
        j="$LOG/$build-$round.json"
        if REDLITE_CUDA_CACHE="${CACHE:+$CACHE/$build}" timeout "${BENCH_TIMEOUT:-240}" \
            "$bin" bench "$MODEL" --device cuda --json "${ARGS[@]}" > "$j" 2>> "$LOG/ab.err"; then
            python3 -c "import json,sys; [print(json.dumps(dict(t, ab_build=sys.argv[2], ab_round=int(sys.argv[3])))) for t in json.load(open(sys.argv[1]))]" \
                "$j" "$build" "$round" >> "$LOG/ab.jsonl"
        else
            echo "round $round, $build: FAILED ($(tail -1 "$LOG/ab.err"))"
            status=1
        fi
        rm -f "$j"
    done
done
python3 - "$LOG/ab.jsonl" <<'PY' | tee "$LOG/ab.md"
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t = json.loads(line)
    name = f"pp{t['n_prompt']}" if t.get("n_prompt") else f"tg{t['n_gen']}"
    ts = t.get("redlite_median_ts") or statistics.median(t["samples_ts"])
    rows.setdefault((name, t["ab_round"]), {})[t["ab_build"]] = ts
print("| test | round | before (tok/s) | after (tok/s) | after / before |")
print("| --- | --- | --- | --- | --- |")
for (name, rnd), v in sorted(rows.items()):
    b, a = v.get("before"), v.get("after")
    ratio = f"{a / b:.3f}" if a and b else ""
    fmt = lambda x: f"{x:,.1f}" if x else "FAILED"
    print(f"| {name} | {rnd} | {fmt(b)} | {fmt(a)} | {ratio} |")
PY
exit $status
