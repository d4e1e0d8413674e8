#!/usr/bin/env bash
# Create .venv (if needed) and install flgp with the given extras, CPU torch first.
# Usage: source scripts/setup_env.sh [extras]   e.g. "test" or "plot"
set -euo pipefail
EXTRAS="${1:-plot}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# the CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e ".[${EXTRAS}]"
