#!/usr/bin/env bash
# Passes when ANSWER.txt lists exactly the direct callers (any order).
set -eu
[ -f ANSWER.txt ] || { echo "no ANSWER.txt"; exit 1; }
got=$(tr -d ' \t\r`' < ANSWER.txt | sed -e 's/()$//' -e '/^$/d' | sort)
want=$(sort "$TASK_DIR/hidden/expected.txt")
[ "$got" = "$want" ] || { echo "got:"; echo "$got"; exit 1; }
