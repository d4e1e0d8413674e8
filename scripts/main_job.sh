#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv and run `flgp circles` on built-in data
# (six concentric circles, n = 4800, m = 100, every method of the FLGP paper's Table 1).
# Extra arguments go to `flgp circles` (e.g. --repetitions 5).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" plot
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" MPLBACKEND=Agg
cd "$ROOT"
flgp circles "$@"
