"""Row chunks: how big a block of points one pass works on, and how passes run over them.

Every pass of flgp over the points of a cloud (neighbour search, cross-kernel weights,
column sums, the ``s x s`` Gram matrix, eigenvector rows, predictions) is a function of a
block of rows. This module decides the block size and runs such functions over numpy
arrays; :mod:`flgp._dask` runs the same functions as Dask tasks.

Block size
----------
``chunk_size`` (rows) is, unless given, chosen from a memory budget: the largest number of
rows whose working set, estimated by :func:`row_bytes`, fits in ``working_memory`` MiB
(:func:`get_config`; 64 MiB by default), clipped to ``[1024, 2**20]``. At the package
defaults (``p = 3``, ``r = 3``, ``M = 100``) a row costs about 5 kB, so a block holds about
13,000 rows. 64 MiB was measured (docs/distributed.md): at n = 10^6, blocks of 16-256 MiB
ran the engine within 5% of each other, and 64 MiB keeps a pass's working set small
beside the ``O(n r)`` arrays it stores.

Nothing here imports dask.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["get_config", "set_config", "config_context", "row_bytes", "default_chunk_size",
           "row_ranges", "map_row_ranges", "is_dask_array", "is_zarr_array", "take_rows",
           "record_stages", "stage"]

_MIN_CHUNK = 1024
_MAX_CHUNK = 2**20
_CONFIG = {"working_memory": 64}
_LOCK = threading.Lock()


def get_config() -> dict:
    """flgp's global settings: ``working_memory``, the memory budget (MiB) of one block of
    rows in a pass over the points (default 64)."""
    return dict(_CONFIG)


def set_config(*, working_memory: float | None = None) -> None:
    """Set flgp's global settings (see :func:`get_config`)."""
    if working_memory is not None:
        if isinstance(working_memory, bool) or not isinstance(working_memory, (int, float)) \
                or not np.isfinite(working_memory) or working_memory <= 0:
            raise ValueError(f"working_memory must be a positive number of MiB; got "
                             f"{working_memory!r}.")
        with _LOCK:
            _CONFIG["working_memory"] = float(working_memory)


@contextlib.contextmanager
def config_context(*, working_memory: float | None = None):
    """Temporarily change flgp's settings (:func:`set_config`); the old ones come back on
    exit.

    Parameters
    ----------
    working_memory : float, optional
        Memory budget (MiB) of one block of rows in a pass over the points (see
        :func:`get_config`); ``None`` keeps the current value.

    Examples
    --------
    >>> import flgp
    >>> before = flgp.get_config()
    >>> with flgp.config_context(working_memory=256):
    ...     print(flgp.get_config())
    {'working_memory': 256.0}
    >>> flgp.get_config() == before
    True
    """
    old = get_config()
    set_config(working_memory=working_memory)
    try:
        yield
    finally:
        with _LOCK:
            _CONFIG.update(old)


def row_bytes(n_features: int, n_neighbors: int = 3, n_eigenpairs: int = 100) -> int:
    """Estimated bytes one row occupies while a block is processed: its coordinates and
    neighbour arrays, the LAE solver's temporaries (about ``30 r^2`` floats), and an
    eigenvector row with the products made from it (about ``6 M`` floats)."""
    p, r, m = int(n_features), int(n_neighbors), int(n_eigenpairs)
    return 8 * (4 * p + 30 * r * r + 6 * m + 16)


def default_chunk_size(bytes_per_row: int, chunk_size: int | None = None) -> int:
    """``chunk_size`` when given (validated), else the rows that fit in the working-memory
    budget (:func:`get_config`), clipped to ``[1024, 2**20]``."""
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) \
                or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of rows (or None for "
                             f"the working-memory budget); got {chunk_size!r}.")
        return int(chunk_size)
    budget = _CONFIG["working_memory"] * 2**20
    return int(np.clip(budget // max(int(bytes_per_row), 1), _MIN_CHUNK, _MAX_CHUNK))


def row_ranges(n: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in blocks of ``chunk_size`` rows."""
    return [(a, min(n, a + chunk_size)) for a in range(0, n, chunk_size)]


def map_row_ranges(fn, ranges, threads: int = 1) -> list:
    """``[fn(start, stop) for start, stop in ranges]``, on ``threads`` threads when there is
    more than one block (numpy and scipy release the GIL in the heavy parts). BLAS runs on
    one thread meanwhile: each block's products are small, and two levels of threads on the
    same cores slowed a pass down 2x on a loaded machine. Results keep the order of
    ``ranges``; the first exception is re-raised."""
    if threads <= 1 or len(ranges) <= 1:
        return [fn(a, b) for a, b in ranges]
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"), \
            ThreadPoolExecutor(max_workers=min(threads, len(ranges))) as pool:
        return list(pool.map(lambda ab: fn(*ab), ranges))


def is_dask_array(X) -> bool:
    """Whether ``X`` is a dask array (checked without importing dask)."""
    return type(X).__module__.split(".")[0] == "dask" and hasattr(X, "__dask_graph__") \
        and hasattr(X, "chunks")


def is_zarr_array(X) -> bool:
    """Whether ``X`` is a zarr array (checked without importing zarr)."""
    return type(X).__module__.split(".")[0] == "zarr" and hasattr(X, "shape")


def take_rows(X, index: np.ndarray) -> np.ndarray:
    """``X[index]`` as a float64 numpy array, in the order of ``index``: numpy fancy
    indexing, or one dask computation reading only the blocks that hold the rows."""
    index = np.asarray(index, dtype=np.int64)
    if not is_dask_array(X):
        return np.ascontiguousarray(X[index], dtype=np.float64)
    order = np.argsort(index, kind="stable")
    rows = np.asarray(X[index[order]].compute(), dtype=np.float64)
    out = np.empty_like(rows)
    out[order] = rows
    return out


_RECORDER: list | None = None


@contextlib.contextmanager
def record_stages():
    """Collect ``(stage, seconds)`` of the passes that run while active (the benchmarks'
    stage timers; a fit records its induced points, each pass over the points, the
    eigendecomposition, the hyperparameter search and the transduction)::

        with record_stages() as stages:
            model.fit(X, y)
    """
    global _RECORDER
    previous, _RECORDER = _RECORDER, []
    try:
        yield _RECORDER
    finally:
        _RECORDER = previous


@contextlib.contextmanager
def stage(name: str):
    """Time a stage into the active :func:`record_stages` list (no cost otherwise)."""
    recorder = _RECORDER
    if recorder is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        recorder.append((name, time.perf_counter() - start))
