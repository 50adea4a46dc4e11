#!/usr/bin/env bash
# Tests deploy.sh: bash test.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/sub"
echo a > "$tmp/build/a.txt"
echo b > "$tmp/build/sub/b.txt"
n=$(bash "$here/deploy.sh" "$tmp/build" "$tmp/rel" 2> "$tmp/log")
[ "$n" = 2 ] || { echo "deploy.sh printed '$n', want 2"; exit 1; }
[ -f "$tmp/rel/sub/b.txt" ] || { echo "sub/b.txt not copied"; exit 1; }
grep -Eq '^\[deploy\] [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8} copying ' "$tmp/log" || { echo "bad log:"; cat "$tmp/log"; exit 1; }
grep -Eq '^\[deploy\] [0-9T:-]{19} done: 2 files$' "$tmp/log" || { echo "bad log:"; cat "$tmp/log"; exit 1; }
if bash "$here/deploy.sh" "$tmp/nothing" "$tmp/rel2" 2> "$tmp/log2"; then echo "missing build accepted"; exit 1; fi
grep -Eq '^\[deploy\] [0-9T:-]{19} error: no build at ' "$tmp/log2" || { echo "bad error log"; exit 1; }
echo ok
