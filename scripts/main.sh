#!/usr/bin/env bash
# The main job: on a fresh machine with Python >= 3.10 and this repository,
# install jaxeval (with plots) into .venv and run the default study on the
# bundled Open LLM Leaderboard v2 data:
#   - best-model identification: PULSE vs UCB-E vs naive pooling vs SySRs (IFEval, K = 10)
#   - accuracy from anchor items: the recommended estimator vs baselines (MuSR)
# It prints a summary and leaves summary.json files and PNG plots in the output folder.
#
# Usage: bash scripts/main.sh [OUT_DIR] [extra `jaxeval main` flags, e.g. --quick]
#   OUT_DIR defaults to jaxeval-out in the repository; a relative OUT_DIR is taken from
#   the directory the script is called from. `bash scripts/main.sh --quick` works too.
# Environment: JAXEVAL_COMPILATION_CACHE (default .venv/xla-cache) speeds up reruns.
set -euo pipefail
case "${1-}" in
    "")  # no argument, or an empty one (an unset variable): the default
        OUT=jaxeval-out
        [ $# -gt 0 ] && shift
        ;;
    -*) OUT=jaxeval-out ;;
    *)
        OUT="$1"
        shift
        case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
        ;;
esac
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    "$PY" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import jaxeval, matplotlib" >/dev/null 2>&1; then
    echo "== installing jaxeval[plots] into .venv"
    python -m pip install -q --upgrade pip
    python -m pip install -q -e ".[plots]"
fi
export JAXEVAL_COMPILATION_CACHE="${JAXEVAL_COMPILATION_CACHE:-$PWD/.venv/xla-cache}"
echo "== jaxeval main --out $OUT $*"
time jaxeval main --out "$OUT" "$@"
echo "== output folder: $(cd "$OUT" && pwd)"
