#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the CPU test suite; GPU tests skip themselves without a GPU.
# pytest's "no tests collected" (exit 5) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
.venv/bin/python -m pytest -q tests "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
