#!/usr/bin/env bash
# Passes when the project's own tests and the hidden ones pass.
set -eu
export PYTHONDONTWRITEBYTECODE=1
python3 -B test_report.py
PYTHONPATH=. python3 -B "$TASK_DIR/hidden/test_hidden.py"
