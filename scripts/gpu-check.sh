#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, run the GPU parity tests and the
# CUDA benchmarks, and print one table at the end.
#
#   scripts/gpu-check.sh [--bin DIR] [--fixtures DIR] [--models DIR] [--types LIST]
#                        [--no-tests] [--no-bench] [--quick] [--peer LLAMA_BENCH | --peer-src TAR]
#
# --bin       where `redlite` and `gpu-tests` are (default: target/release, and the
#             newest target/release/deps/gpu-* test binary; build them with
#             `cargo build --release && cargo test --release -p redlite-cuda --test gpu --no-run`)
# --fixtures  the fixture directory (default: $REDLITE_FIXTURES or ../shared/fixtures)
# --models    where the full-size synthetic model is written / found (default: /tmp/redlite-models)
# --types     only these quantized fixture types (comma list), e.g. Q8_0,CF2mix
# --quick     only decode at position 0, prefill of 1,738 tokens and speculative decoding
# --peer      a llama-bench built with CUDA, measured on the same file in the same run
# --peer-src  llama.cpp's source packed by `scripts/llama-peer.sh fetch`: built here
#             (CUDA, this GPU's architecture, niced, beside the parity tests and Red Lite's
#             benchmarks), then used as --peer. Its depth tests prefill the context first,
#             so they run once (`-r 1 --no-warmup`), and 128K only with --peer-deep.
#
# Kernels compile at first use into $REDLITE_CUDA_CACHE (default: a folder under the
# log folder); a cache filled ahead (see tests/kernels_compile.rs) saves the compile.
# Writes at most six files to $OUT (when set) or ./gpu-check-out: summary.md,
# gpu-tests.log, bench.jsonl (every test's JSON, one line each), bench.err,
# profile.txt (per-kernel time of a decode step) and peer-build.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=target/release
FIX="${REDLITE_FIXTURES:-../shared/fixtures}"
MODELS=/tmp/redlite-models
TYPES=""
TESTS=1
BENCH=1
PEER=""
PEER_SRC=""
PEER_DEEP=0
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN="$2"; shift 2 ;;
        --fixtures) FIX="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        --types) TYPES="$2"; shift 2 ;;
        --no-tests) TESTS=0; shift ;;
        --no-bench) BENCH=0; shift ;;
        --peer) PEER="$2"; shift 2 ;;
        --peer-src) PEER_SRC="$2"; shift 2 ;;
        --peer-deep) PEER_DEEP=1; shift ;;
        --quick) QUICK=1; shift ;;
        -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
LOG="${OUT:-gpu-check-out}"
WORK="${TMPDIR:-/tmp}/redlite-gpu-check"
mkdir -p "$LOG" "$MODELS" "$WORK"
export REDLITE_CUDA_CACHE="${REDLITE_CUDA_CACHE:-$WORK/kernel-cache}"
RL="$BIN/redlite"
GT="$BIN/gpu-tests"
[ -x "$GT" ] || GT=$(ls -t target/release/deps/gpu-* 2>/dev/null | grep -v '\.d$' | head -1)
export REDLITE_FIXTURES="$FIX" REDLITE_REQUIRE_CUDA=1 RUST_BACKTRACE=1
[ -n "$TYPES" ] && export REDLITE_GPU_TYPES="$TYPES"
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }
declare -a ROWS
status=0
ROWS+=("GPU | $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -1) | nvidia-smi")
if [ -n "$PEER_SRC" ]; then
    echo "== building llama.cpp's llama-bench with CUDA (in the background)"
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
    peer_t0=$(date +%s)
    nice -n 19 scripts/llama-peer.sh build "$PEER_SRC" "$WORK/llama-peer" "$arch" > "$LOG/peer-build.txt" 2>&1 &
    peer_pid=$!
fi
if [ "$TESTS" = 1 ]; then
    echo "== GPU parity tests ($GT) [$(elapsed)]"
    if "$GT" --test-threads 1 --nocapture > "$LOG/gpu-tests.log" 2>&1; then
        ROWS+=("parity tests | passed | $(grep "^test result" "$LOG/gpu-tests.log")")
    else
        ROWS+=("parity tests | FAILED | see gpu-tests.log")
        status=1
    fi
fi
if [ "$BENCH" = 1 ]; then
    M="$MODELS/cf2-512.gguf"
    if [ ! -f "$M" ]; then
        echo "== writing the full-size cf2 model [$(elapsed)]"
        "$RL" synth --preset qwen3-coder-next --mix cf2 --vocab-from "$FIX/tokenizer/ggml-vocab-qwen2.gguf" -o "$M" 2>&1 | tail -2
    fi
    # One row per test of a run: its label and median tok/s (and, for a
    # speculative test, the ratio to plain generation in the same run).
    summarize() { # json, label prefix
        python3 - "$1" "$2" <<'PY'
import json, statistics, sys
for t in json.load(open(sys.argv[1])):
    ts = t.get("redlite_median_ts") or statistics.median(t["samples_ts"])
    extra = ""
    if t.get("redlite_draft"):
        extra = f" ({t['redlite_draft']} drafts: {t.get('redlite_vs_plain') or 1.0:.2f}x plain, {t.get('redlite_accepted')} accepted)"
    elif t.get("redlite_gbps"):
        extra = f" ({t['redlite_gbps']:.0f} GB/s of weights)"
    print(f"{sys.argv[2]} | {ts:.1f} tok/s{extra}")
PY
    }
    bench() { # label, args...
        local label="$1"; shift
        echo "== $label [$(elapsed)]"
        local j="$WORK/$label.json"
        if timeout "${BENCH_TIMEOUT:-240}" "$RL" bench "$M" --device cuda --json "$@" > "$j" 2>> "$LOG/bench.err"; then
            python3 -c "import json,sys; [print(json.dumps(dict(t, check_label=sys.argv[2]))) for t in json.load(open(sys.argv[1]))]" "$j" "$label" >> "$LOG/bench.jsonl"
            while IFS= read -r r; do ROWS+=("$r | $*"); done < <(summarize "$j" "$label")
        else
            ROWS+=("$label | FAILED | $(tail -1 "$LOG/bench.err")")
            status=1
        fi
    }
    bench decode-d0 -p 0 -n 128 -r 3
    bench prefill-1738 -p 1738 -n 0 -r 3
    bench speculative -p 0 -n 128 -r 3 --draft replay,random --draft-max 8
    if [ "$QUICK" = 0 ]; then
        bench decode-d32k -p 0 -n 64 -r 3 --start-position 32768 --fill-state random
        bench decode-d128k -p 0 -n 64 -r 3 --start-position 131072 --fill-state random
        bench prefill-32k -p 32768 -n 0 -r 1
    fi
    REDLITE_CUDA_PROFILE=1 timeout 120 "$RL" bench "$M" --device cuda -p 0 -n 32 -r 1 > "$LOG/profile.txt" 2>&1
    if [ -n "$PEER_SRC" ]; then
        echo "== waiting for the llama.cpp build [$(elapsed)]"
        if wait "$peer_pid" && PEER=$(tail -1 "$LOG/peer-build.txt") && [ -x "$PEER" ]; then
            ROWS+=("llama.cpp build | ok | $(( $(date +%s) - peer_t0 )) s, sm_$arch")
        else
            ROWS+=("llama.cpp build | FAILED | $(tail -1 "$LOG/peer-build.txt")")
            PEER=""
            status=1
        fi
    fi
    if [ -n "$PEER" ]; then
        peer() { # label, llama-bench args...
            local label="$1"; shift
            echo "== llama.cpp $label [$(elapsed)]"
            local j="$WORK/llama-$label.json"
            if timeout "${PEER_TIMEOUT:-400}" "$PEER" -m "$M" -ngl 99 -fa 1 -o json "$@" > "$j" 2>> "$LOG/bench.err"; then
                python3 -c "import json,sys; [print(json.dumps(dict(t, check_label=sys.argv[2]))) for t in json.load(open(sys.argv[1]))]" "$j" "llama.cpp $label" >> "$LOG/bench.jsonl"
                while IFS= read -r r; do ROWS+=("$r | $*"); done < <(summarize "$j" "llama.cpp $label")
            else
                ROWS+=("llama.cpp $label | FAILED | $(tail -1 "$LOG/bench.err")")
            fi
        }
        peer decode-d0 -p 0 -n 128 -r 3
        peer prefill-1738 -p 1738 -n 0 -r 3
        if [ "$QUICK" = 0 ]; then
            peer decode-d32k -p 0 -n 32 -d 32768 -r 1 --no-warmup
            peer prefill-32k -p 32768 -n 0 -r 1 --no-warmup
            [ "$PEER_DEEP" = 1 ] && peer decode-d128k -p 0 -n 32 -d 131072 -r 1 --no-warmup
        fi
    fi
elif [ -n "$PEER_SRC" ]; then
    wait "$peer_pid"
fi
{
    echo "| check | result | detail |"
    echo "| --- | --- | --- |"
    for r in "${ROWS[@]}"; do echo "| $r |"; done
    echo
    [ -f "$LOG/gpu-tests.log" ] && grep -E '^gpu |^matvec' "$LOG/gpu-tests.log"
    echo "($(elapsed))"
} | tee "$LOG/summary.md"
exit $status
