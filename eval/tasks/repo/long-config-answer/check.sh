#!/usr/bin/env bash
# Passes when ANSWER.txt holds the right section, key and default.
set -eu
[ -f ANSWER.txt ] || { echo "no ANSWER.txt"; exit 1; }
tr -d ' \t\r`' < ANSWER.txt | grep -qx 'scheduler\.retry_backoff_ms=2750' || { echo "wrong answer: $(head -c 200 ANSWER.txt)"; exit 1; }
