#!/usr/bin/env bash
# Passes when the hidden test script passes.
set -eu
bash "$TASK_DIR/hidden/test.sh"
