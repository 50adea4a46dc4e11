#!/usr/bin/env bash
# Passes when the hidden test program, built with hashmap.c, exits 0.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -std=c99 -Wall -I. -o "$tmp/t" "$TASK_DIR/hidden/test.c" hashmap.c
"$tmp/t"
