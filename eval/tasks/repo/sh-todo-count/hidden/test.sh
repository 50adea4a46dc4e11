#!/usr/bin/env bash
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TODO_FILE="$tmp/list.txt"
t=$(pwd)/todo.sh
got=$(bash "$t" count)
[ "$got" = "0 open, 0 done" ] || { echo "empty: '$got'"; exit 1; }
bash "$t" add buy milk
bash "$t" add write report
bash "$t" add call bob
bash "$t" done 2
got=$(bash "$t" count)
[ "$got" = "2 open, 1 done" ] || { echo "after adds: '$got'"; exit 1; }
bash "$t" list | grep -q "2. \[x\] write report" || { echo "list broke"; exit 1; }
echo ok
