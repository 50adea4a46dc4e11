#!/usr/bin/env bash
# The quality table of bench/RESULTS.md, made with Red Lite's tools only:
# an importance matrix of tiny-s-bf16.gguf over the calibration text
# (redlite imatrix), every file type the quantizer makes from it
# (redlite quantize), and each one's KL divergence from the exact bf16 model
# on held-out text (redlite perplexity --kl-divergence), with its size and
# bits per weight.
#
#   scripts/quality-table.sh [OUT_DIR]          (from the repository root,
#                                                 after cargo build --release)
#
# REDLITE (the binary), FIXTURES (the fixtures folder) and TYPES override the
# defaults. The held-out text is the last 100,000 bytes of calib.txt, which
# the importance matrix's 16 chunks (its first ~23,000 bytes) never see.
# Every model runs on the CPU with f32 activations (exact math on its
# stored weights), so the divergence is the quantization's alone.
set -euo pipefail
R=${REDLITE:-target/release/redlite}
FIX=${FIXTURES:-../shared/fixtures}
OUT=${1:-quality-out}
TYPES=${TYPES:-"Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S Q4_0 IQ4_NL IQ4_XS Q3_K_L Q3_K_M Q3_K_S IQ3_M IQ3_S IQ3_XS IQ3_XXS Q2_K IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 cf2"}
RUN=(--device cpu --f32-activations -t 2)
mkdir -p "$OUT"
tail -c 100000 "$FIX/quantize/calib.txt" > "$OUT/heldout.txt"
"$R" imatrix "$FIX/tiny-s-bf16.gguf" -f "$FIX/quantize/calib.txt" --chunks 16 -c 512 \
    -o "$OUT/imatrix.gguf" -t 2 > "$OUT/imatrix.log"
"$R" perplexity "$FIX/tiny-s-bf16.gguf" -f "$OUT/heldout.txt" --chunks 32 \
    --kl-divergence-base "$OUT/base-exact.kld" "${RUN[@]}" > "$OUT/bf16.log"
for T in $TYPES; do
    if ! "$R" quantize --imatrix "$OUT/imatrix.gguf" "$FIX/tiny-s-bf16.gguf" "$OUT/$T.gguf" "$T" \
        -t 2 > "$OUT/$T.quantize.log" 2>&1; then
        echo "$T: not made ($(tail -n 1 "$OUT/$T.quantize.log"))"
        rm -f "$OUT/$T.gguf"
        continue
    fi
    "$R" perplexity "$OUT/$T.gguf" --kl-divergence --kl-divergence-base "$OUT/base-exact.kld" \
        "${RUN[@]}" --json > "$OUT/$T.json" 2> "$OUT/$T.kld.log"
done
PY=${PYTHON:-.venv/bin/python}
"$PY" - "$OUT" "$FIX/tiny-s-bf16.gguf" $TYPES <<'EOF'
import json, os, sys
import gguf
out, bf16, types = sys.argv[1], sys.argv[2], sys.argv[3:]
def tensor_stats(path):
    r = gguf.GGUFReader(path)
    n = sum(int(t.n_elements) for t in r.tensors)
    b = sum(int(t.n_bytes) for t in r.tensors)
    return n, b
print("| type | file bytes | bits/weight | mean KLD ± | 99 % KLD | max KLD | same top % | RMS Δp % | PPL(Q)/PPL(base) |")
print("|---|---|---|---|---|---|---|---|---|")
n, b = tensor_stats(bf16)
print(f"| bf16 | {os.path.getsize(bf16):,} | {8*b/n:.3f} | 0 | 0 | 0 | 100 | 0 | 1 |")
for t in types:
    p = os.path.join(out, f"{t}.json")
    g = os.path.join(out, f"{t}.gguf")
    if not os.path.exists(p) or not os.path.exists(g):
        continue
    j = json.load(open(p))
    n, b = tensor_stats(g)
    pct = dict(j["kld_percentiles"])
    print(f"| {t} | {os.path.getsize(g):,} | {8*b/n:.3f} | {j['kld_mean'][0]:.5f} ± {j['kld_mean'][1]:.5f} | "
          f"{pct['99.0%']:.4f} | {pct['Maximum']:.4f} | {100*j['same_top'][0]:.2f} | {100*j['rms_p_diff'][0]:.3f} | "
          f"{j['ppl_ratio'][0]:.4f} |")
EOF
