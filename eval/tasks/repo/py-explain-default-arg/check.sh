#!/usr/bin/env bash
# Passes when ANSWER.md names the mutable default argument and the code is unchanged.
set -eu
[ -f ANSWER.md ] || { echo "no ANSWER.md"; exit 1; }
grep -qiE "mutable default|default (argument|parameter|value)|tags=\[\]|tags = \[\]" ANSWER.md || { echo "ANSWER.md does not name the cause"; exit 1; }
grep -qiE "once|shared|same list|reused|persist" ANSWER.md || { echo "ANSWER.md does not say why"; exit 1; }
grep -q 'def add_tag(tag, tags=\[\]):' tags.py || { echo "tags.py was changed"; exit 1; }
