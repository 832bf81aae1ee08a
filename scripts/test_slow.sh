#!/usr/bin/env bash
# The tests CI does not run: the slow tier (long statistical grids, the README's
# examples, multi-process runs), in the two code generations the default suite uses.
#   1. `pytest --slow -m slow` under the cheaper code generation (tests/conftest.py);
#   2. the slow tests that compare compiled programs bit for bit (`slow` and
#      `default_codegen`), which only XLA's default code generation runs.
# About half an hour on 2 CPU cores. Extra arguments go to both pytest runs (e.g. -x,
# or -k NAME). Uses .venv as .ci/run makes it (run that first).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    echo "no .venv: run 'bash .ci/run' first (it creates it and installs the test extras)" >&2
    exit 2
fi
. .venv/bin/activate
W="${JAXEVAL_TEST_WORKERS:-2}"
python -m pytest tests --slow -m slow -n "$W" "$@"
JAXEVAL_TEST_XLA_OPT=1 python -m pytest tests --slow -m "slow and default_codegen" -n "$W" "$@"
