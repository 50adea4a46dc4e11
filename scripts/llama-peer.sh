#!/usr/bin/env bash
# The llama.cpp peer for side-by-side GPU benchmarks, from the source that the
# `llama-cpp-python` package vendors (never part of this repository, never
# built in CI).
#
#   scripts/llama-peer.sh fetch OUT.tar.xz [VERSION]
#       (on a machine with network) download llama-cpp-python's source package
#       (default 0.3.36, the llama.cpp of the fixtures), keep only what a
#       CUDA build of llama-bench needs, and pack it (a few MiB: small enough
#       to carry to a GPU machine).
#   scripts/llama-peer.sh build SRC.tar.xz BUILD_DIR [ARCH]
#       (on the GPU machine) unpack and build llama-bench with CUDA for ARCH
#       (default 90), linked statically (one file that can be kept and carried);
#       prints the path of the binary last.
set -euo pipefail
cmd="${1:-}"
case "$cmd" in
fetch)
    out="$2"
    ver="${3:-0.3.36}"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # The source package straight from PyPI's simple index (pip would build
    # it to read its metadata), its sha256 checked.
    python3 - "$ver" "$tmp" <<'PY'
import hashlib, re, sys, urllib.request
ver, dst = sys.argv[1], sys.argv[2]
page = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
name = f"llama_cpp_python-{ver}.tar.gz"
link = next(u for u in re.findall(r'href="([^"]+)"', page) if f"/{name}#" in u)
url, want = link.split("#sha256=")
data = urllib.request.urlopen(url).read()
if hashlib.sha256(data).hexdigest() != want:
    sys.exit(f"{name}: sha256 mismatch")
open(f"{dst}/{name}", "wb").write(data)
PY
    tar xzf "$tmp"/llama_cpp_python-"$ver".tar.gz -C "$tmp"
    src="$tmp/llama_cpp_python-$ver/vendor/llama.cpp"
    [ -f "$src/CMakeLists.txt" ] || { echo "no vendored llama.cpp in the package" >&2; exit 1; }
    # What the build of llama-bench does not read.
    rm -rf "$src"/{docs,models,media,gguf-py,benches,tests,examples,pocs,build,.github,.devops} \
        "$src"/tools/ui
    for b in vulkan sycl opencl metal hexagon cann webgpu openvino et virtgpu musa kompute zdnn rpc blas; do
        rm -rf "$src/ggml/src/ggml-$b"
    done
    mkdir -p "$(dirname "$out")"
    tar cJf "$out" -C "$(dirname "$src")" llama.cpp
    ls -la "$out" >&2
    ;;
build)
    srctar="$2"
    dir="$3"
    arch="${4:-90}"
    mkdir -p "$dir"
    tar xJf "$srctar" -C "$dir"
    cmake -S "$dir/llama.cpp" -B "$dir/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release >"$dir/cmake.log" 2>&1 \
        || { tail -30 "$dir/cmake.log"; exit 1; }
    cmake --build "$dir/build" --target llama-bench -j "$(nproc)" >"$dir/build.log" 2>&1 \
        || { tail -30 "$dir/build.log"; exit 1; }
    echo "$dir/build/bin/llama-bench"
    ;;
*)
    sed -n '2,15p' "$0"
    exit 2
    ;;
esac
