#!/usr/bin/env bash
# Passes when the project's test passes, a log function exists and is the only place lines are formatted.
set -eu
bash test.sh
grep -Eq '^[[:space:]]*(function[[:space:]]+)?log[[:space:]]*(\(\))?[[:space:]]*\{?' deploy.sh || { echo "no log function"; exit 1; }
[ "$(grep -c 'date +' deploy.sh)" = 1 ] || { echo "the timestamp is still formatted in several places"; exit 1; }
[ "$(grep -cE '(^|[^[:alnum:]_])log ' deploy.sh)" -ge 3 ] || { echo "log is not used for every line"; exit 1; }
