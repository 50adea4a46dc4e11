#!/usr/bin/env bash
# Passes when the hidden tests pass against the project in the current directory.
set -eu
export PYTHONDONTWRITEBYTECODE=1
PYTHONPATH=. python3 -B "$TASK_DIR/hidden/test_billing.py"
