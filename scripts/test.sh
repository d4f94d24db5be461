#!/usr/bin/env bash
# Sets up (scripts/setup.sh), lints, and runs the CPU test suite; GPU tests skip themselves without a GPU.
# pytest's "no tests collected" (exit 5) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# lint, format and types before the tests (pinned in the test extra): Python with ruff and mypy
# (pyproject.toml), C++ and CUDA with clang-format (.clang-format)
.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || { echo "scripts/test.sh: run .venv/bin/ruff format ." >&2; exit 1; }
# types (mypy, pyproject.toml's [tool.mypy]): the installed package and the test helpers
.venv/bin/mypy || exit 1
mapfile -t cxx < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
.venv/bin/clang-format --dry-run --Werror "${cxx[@]}" ||
  { echo "scripts/test.sh: run .venv/bin/clang-format -i on the files above" >&2; exit 1; }
.venv/bin/python -m pytest -q tests "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
