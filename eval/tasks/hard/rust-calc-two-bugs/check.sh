#!/usr/bin/env bash
# Passes when the hidden tests, compiled together with src/lib.rs, pass.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat src/lib.rs "$TASK_DIR/hidden/tests.rs" > "$tmp/all.rs"
rustc --edition 2021 --test -A warnings -o "$tmp/t" "$tmp/all.rs"
"$tmp/t" -q
