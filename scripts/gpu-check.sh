#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, run the GPU parity tests and the
# CUDA benchmarks, and print one table at the end.
#
#   scripts/gpu-check.sh [--bin DIR] [--fixtures DIR] [--models DIR] [--types LIST]
#                        [--no-tests] [--no-bench] [--peer LLAMA_BENCH]
#
# --bin       where `redlite` and `gpu-tests` are (default: target/release, and the
#             newest target/release/deps/gpu-* test binary; build them with
#             `cargo build --release && cargo test --release -p redlite-cuda --test gpu --no-run`)
# --fixtures  the fixture directory (default: $REDLITE_FIXTURES or ../shared/fixtures)
# --models    where the full-size synthetic model is written / found (default: /tmp/redlite-models)
# --types     only these quantized fixture types (comma list), e.g. Q8_0,CF2mix
# --quick     only decode at position 0 and prefill of 1,738 tokens
# --peer      a llama-bench built with CUDA, measured on the same file in the same run
# --peer-src  llama.cpp's source packed by `scripts/llama-peer.sh fetch`: built here
#             (CUDA, this GPU's architecture), then used as --peer
#
# The peer build runs (niced) beside the parity tests and Red Lite's benchmarks; rerun
# those for figures to report. Logs go to $OUT (when set) or ./gpu-check-out.
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
        --quick) QUICK=1; shift ;;
        -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
LOG="${OUT:-gpu-check-out}"
mkdir -p "$LOG" "$MODELS"
RL="$BIN/redlite"
GT="$BIN/gpu-tests"
[ -x "$GT" ] || GT=$(ls -t target/release/deps/gpu-* 2>/dev/null | grep -v '\.d$' | head -1)
export REDLITE_FIXTURES="$FIX" REDLITE_REQUIRE_CUDA=1 RUST_BACKTRACE=1
[ -n "$TYPES" ] && export REDLITE_GPU_TYPES="$TYPES"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$LOG/gpu.txt"
declare -a ROWS
status=0
if [ -n "$PEER_SRC" ]; then
    # Built on the CPU cores while the GPU runs the parity tests.
    echo "== building llama.cpp's llama-bench with CUDA (in the background)"
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
    peer_t0=$(date +%s)
    nice -n 19 scripts/llama-peer.sh build "$PEER_SRC" /tmp/llama-peer "$arch" > "$LOG/peer-build.txt" 2>&1 &
    peer_pid=$!
fi
if [ "$TESTS" = 1 ]; then
    echo "== GPU parity tests ($GT)"
    if "$GT" --test-threads 1 --nocapture 2>&1 | tee "$LOG/gpu-tests.log"; then
        ROWS+=("parity tests | passed | $(grep "^test result" "$LOG/gpu-tests.log")")
    else
        ROWS+=("parity tests | FAILED | see gpu-tests.log")
        status=1
    fi
    grep -E '^gpu |^matvec' "$LOG/gpu-tests.log" > "$LOG/parity.txt" || true
fi
if [ -n "$PEER_SRC" ]; then
    if wait "$peer_pid" && PEER=$(tail -1 "$LOG/peer-build.txt") && [ -x "$PEER" ]; then
        ROWS+=("llama.cpp build | ok | $(( $(date +%s) - peer_t0 )) s, sm_$arch")
        # Kept (compressed) so that a later run can pass it as --peer.
        strip -o "$LOG/llama-bench" "$PEER" && xz -T0 -f "$LOG/llama-bench" || true
    else
        ROWS+=("llama.cpp build | FAILED | $(tail -1 "$LOG/peer-build.txt")")
        PEER=""
        status=1
    fi
fi
if [ "$BENCH" = 1 ]; then
    M="$MODELS/cf2-512.gguf"
    if [ ! -f "$M" ]; then
        echo "== writing the full-size cf2 model"
        "$RL" synth --preset qwen3-coder-next --mix cf2 --vocab-from "$FIX/tokenizer/ggml-vocab-qwen2.gguf" -o "$M" 2>&1 | tail -2
    fi
    bench() { # label, args...
        local label="$1"; shift
        if timeout "${BENCH_TIMEOUT:-240}" "$RL" bench "$M" --device cuda --json "$@" > "$LOG/$label.json" 2> "$LOG/$label.err"; then
            local ts
            ts=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' / '.join(f\"{t['redlite_median_ts']:.1f}\" for t in d))" "$LOG/$label.json")
            ROWS+=("$label | $ts tok/s | $*")
        else
            ROWS+=("$label | FAILED | $(tail -1 "$LOG/$label.err")")
            status=1
        fi
    }
    bench decode-d0 -p 0 -n 128 -r 3
    bench prefill-1738 -p 1738 -n 0 -r 3
    if [ "$QUICK" = 0 ]; then
        bench decode-d32k -p 0 -n 64 -r 3 --start-position 32768 --fill-state random
        bench decode-d128k -p 0 -n 64 -r 3 --start-position 131072 --fill-state random
        bench prefill-32k -p 32768 -n 0 -r 1
    fi
    if [ -n "$PEER" ]; then
        # The same tests, side by side: prefill 1738 and 32K, decode at 0, 32K, 128K.
        peer() { # label, llama-bench args...
            local label="$1"; shift
            if timeout "${BENCH_TIMEOUT:-240}" "$PEER" -m "$M" -ngl 99 -fa 1 -o json "$@" \
                > "$LOG/llama-$label.json" 2> "$LOG/llama-$label.err"; then
                local ts
                ts=$(python3 -c "import json,sys,statistics as s; d=json.load(open(sys.argv[1])); print(' / '.join(f\"{s.median(t['samples_ts']):.1f}\" for t in d))" "$LOG/llama-$label.json")
                ROWS+=("llama.cpp $label | $ts tok/s | $*")
            else
                ROWS+=("llama.cpp $label | FAILED | $(tail -1 "$LOG/llama-$label.err")")
            fi
        }
        peer decode-d0 -p 0 -n 128 -r 3
        peer prefill-1738 -p 1738 -n 0 -r 3
        if [ "$QUICK" = 0 ]; then
            peer decode-d32k -p 0 -n 64 -r 3 -d 32768
            peer decode-d128k -p 0 -n 64 -r 3 -d 131072
            peer prefill-32k -p 32768 -n 0 -r 1
        fi
    fi
fi
echo
echo "| check | result | detail |"
echo "| --- | --- | --- |"
for r in "${ROWS[@]}"; do echo "| $r |"; done
[ -f "$LOG/parity.txt" ] && cat "$LOG/parity.txt"
exit $status
