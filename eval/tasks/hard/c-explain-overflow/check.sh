#!/usr/bin/env bash
# Passes when the unchanged test passes and ANSWER.md names the overflow.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$TASK_DIR/project/test_search.c" "$tmp/"
cc -std=c99 -Wall -I. -o "$tmp/t" "$tmp/test_search.c" search.c
"$tmp/t"
[ -f ANSWER.md ] || { echo "no ANSWER.md"; exit 1; }
grep -qiE "overflow|wrap" ANSWER.md || { echo "ANSWER.md does not name the cause"; exit 1; }
