"""Thread counts for CPU work: torch's setting, and a limit on the BLAS libraries
(threadpoolctl)."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["cpu_threads", "limit_blas_threads"]


@functools.lru_cache(maxsize=None)
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def limit_blas_threads(n: int = 1):
    """Context in which the loaded BLAS libraries run on ``n`` threads, through one cached
    threadpoolctl controller (making one scans the loaded libraries; a fit enters many limits)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"limit_blas_threads needs a whole number of threads >= 1; got "
                         f"{n!r}.")
    return _blas_controller().limit(limits=int(n), user_api="blas")


def cpu_threads() -> int:
    """Threads for CPU work outside torch (``cKDTree`` queries): torch's own setting
    (``torch.set_num_threads`` or ``OMP_NUM_THREADS``), so one knob limits everything."""
    import torch

    return max(1, int(torch.get_num_threads()))
