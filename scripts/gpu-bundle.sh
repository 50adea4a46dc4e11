#!/usr/bin/env bash
# Pack what scripts/gpu-check.sh needs on a GPU machine that has no Rust
# toolchain: the release binaries (stripped), a subset of the fixtures, and
# the kernels compiled ahead for the GPU's architecture.
#
#   scripts/gpu-bundle.sh OUT_DIR [--types LIST] [--arch sm_90] [--no-cache]
#
# OUT_DIR/bin            redlite and gpu-tests (the GPU test binary)
# OUT_DIR/fixtures.tar.xz  bf16 models, references, the long-context fixture,
#                        the tokenizer vocabulary and the quantized fixtures of
#                        --types (default Q8_0,Q4_K_M,CF2mix) with their exact
#                        references: about 40 MB
# OUT_DIR/kernel-cache   the kernel images for --arch (default sm_90), compiled
#                        here with NVRTC ($REDLITE_NVRTC_DIR, e.g. the
#                        nvidia-cuda-nvrtc wheel that .ci/run installs in .venv);
#                        used there when its NVRTC has the same major.minor
#                        version, else the kernels compile at first use
#
# On the GPU machine, from the repository root:
#   tar xJf OUT_DIR/fixtures.tar.xz -C OUT_DIR
#   REDLITE_CUDA_CACHE=$PWD/OUT_DIR/kernel-cache scripts/gpu-check.sh \
#       --bin OUT_DIR/bin --fixtures OUT_DIR/fixtures --types Q8_0,Q4_K_M,CF2mix
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-}"
[ -n "$OUT" ] && [ "${OUT#-}" = "$OUT" ] || { sed -n '2,/^set /p' "$0" | grep '^#'; exit 2; }
shift
TYPES="Q8_0,Q4_K_M,CF2mix"
ARCH="sm_90"
CACHE=1
while [ $# -gt 0 ]; do
    case "$1" in
        --types) TYPES="$2"; shift 2 ;;
        --arch) ARCH="$2"; shift 2 ;;
        --no-cache) CACHE=0; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
FIX="${REDLITE_FIXTURES:-../shared/fixtures}"
[ -f "$FIX/prompts.json" ] || { echo "no fixtures at $FIX (set REDLITE_FIXTURES)" >&2; exit 1; }
mkdir -p "$OUT/bin"
echo "== building"
cargo build --release --quiet
GT=$(cargo test --release -p redlite-cuda --test gpu --no-run 2>&1 | sed -n 's/.*Executable tests\/gpu.rs (\(.*\))/\1/p' | tail -1)
[ -x "$GT" ] || { echo "could not find the GPU test binary" >&2; exit 1; }
cp target/release/redlite "$OUT/bin/redlite"
cp "$GT" "$OUT/bin/gpu-tests"
strip "$OUT/bin/redlite" "$OUT/bin/gpu-tests"
echo "== packing fixtures ($TYPES)"
files=(README.md prompts.json refs.npz long32k.json long32k.npz llamacpp-vs-exact.json
       tiny-a-bf16.gguf tiny-s-bf16.gguf tokenizer/ggml-vocab-qwen2.gguf)
IFS=',' read -ra types <<< "$TYPES"
for t in "${types[@]}"; do
    for f in "tiny-s-$t.gguf" "exact-$t.npz"; do
        [ -f "$FIX/$f" ] || { echo "no fixture $f" >&2; exit 1; }
        files+=("$f")
    done
    [ -f "$FIX/tiny-s-$t-legacy.gguf" ] && files+=("tiny-s-$t-legacy.gguf")
done
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/fixtures/tokenizer"
for f in "${files[@]}"; do
    [ -f "$FIX/$f" ] && cp "$FIX/$f" "$staging/fixtures/$f"
done
tar cJf "$OUT/fixtures.tar.xz" -C "$staging" fixtures
if [ "$CACHE" = 1 ]; then
    echo "== compiling the kernels for $ARCH"
    mkdir -p "$OUT/kernel-cache"
    REDLITE_KERNEL_ARCHS="$ARCH" REDLITE_CUDA_CACHE="$(cd "$OUT/kernel-cache" && pwd)" REDLITE_REQUIRE_NVRTC=1 \
        cargo test --release --quiet -p redlite-cuda --test kernels_compile -- --nocapture 2>&1 | grep -E "sm_|FAILED|panicked" || true
fi
du -sh "$OUT"/* | sed 's/^/  /'
