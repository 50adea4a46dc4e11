#!/usr/bin/env bash
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'a\nb\n' > "$tmp/one.txt"
printf 'x\ny\nz\n' > "$tmp/two words.txt"
printf 'ignored\n' > "$tmp/other.md"
got=$(bash ./countlines.sh "$tmp")
[ "$got" = 5 ] || { echo "countlines.sh gave '$got', want 5"; exit 1; }
got=$(bash ./countlines.sh "$tmp/empty-does-not-exist" 2>/dev/null || true)
[ "$got" = 0 ] || { echo "empty directory gave '$got', want 0"; exit 1; }
echo ok
