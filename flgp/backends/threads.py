"""Threads of the engine's CPU work: torch's setting for everything outside BLAS, and
a limit on the loaded BLAS libraries (threadpoolctl)."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["cpu_threads", "limit_blas_threads"]


@functools.lru_cache(maxsize=None)
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def limit_blas_threads(n: int = 1):
    """Context in which the loaded BLAS libraries run on ``n`` threads (threadpoolctl),
    through one controller made at first use: making one scans the process's loaded
    libraries (about 5 ms), and one fit enters some 30 such limits."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"limit_blas_threads needs a whole number of threads >= 1; got "
                         f"{n!r}.")
    return _blas_controller().limit(limits=int(n), user_api="blas")


def cpu_threads() -> int:
    """Threads for the engine's CPU work outside torch (``scipy.spatial.cKDTree`` queries):
    torch's own setting (``torch.set_num_threads``, or ``OMP_NUM_THREADS`` at start-up), so
    one knob limits everything."""
    import torch

    return max(1, int(torch.get_num_threads()))
