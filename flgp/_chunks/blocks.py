"""Block sizes, thread maps that carry the caller's settings, array-kind checks and the merge
of per-block partials: the parts of both drivers (see :mod:`flgp._chunks`)."""

from __future__ import annotations

import collections
import contextlib
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from .._config import in_settings, thread_settings, working_memory_bytes
from ..backends import limit_blas_threads

__all__ = ["row_bytes", "default_chunk_size", "row_ranges", "map_threads", "map_row_ranges",
           "imap_threads", "one_thread_each", "is_dask_array", "is_zarr_array", "take_rows",
           "merge_partials"]

_MIN_CHUNK = 1024
_MAX_CHUNK = 2**20


def row_bytes(n_features: int, n_neighbors: int = 3, n_eigenpairs: int = 100) -> int:
    """Estimated bytes one row occupies while a block is processed: its coordinates and
    neighbour arrays, the LAE solver's temporaries (about ``30 r^2`` floats), and an
    eigenvector row with the products made from it (about ``6 M`` floats)."""
    p, r, m = int(n_features), int(n_neighbors), int(n_eigenpairs)
    return 8 * (4 * p + 30 * r * r + 6 * m + 16)


def default_chunk_size(bytes_per_row: int, chunk_size: int | None = None) -> int:
    """``chunk_size`` when given (validated), else the rows that fit in the working-memory
    budget (:func:`flgp.get_config`), clipped to ``[1024, 2**20]``."""
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) \
                or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of rows (or None for "
                             f"the working-memory budget); got {chunk_size!r}.")
        return int(chunk_size)
    budget = working_memory_bytes()
    return int(np.clip(budget // max(int(bytes_per_row), 1), _MIN_CHUNK, _MAX_CHUNK))


def row_ranges(n: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in blocks of ``chunk_size`` rows."""
    return [(a, min(n, a + chunk_size)) for a in range(0, n, chunk_size)]


def map_threads(fn, items, threads: int = 1) -> list:
    """``[fn(item) for item in items]``, on ``threads`` threads when there is more than one
    item, with BLAS and torch on one thread each meanwhile (:func:`one_thread_each`; nested
    threading slowed passes 2x). Results keep the order of ``items``; the first exception is
    re-raised. ``fn`` must not depend on which thread runs it."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    fn = _with_caller_settings(fn)
    with one_thread_each(), \
            ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def _with_caller_settings(fn):
    """``fn`` run under the calling thread's :func:`flgp.config_context` values (a worker
    thread has none of its own)."""
    settings = thread_settings()
    if not settings:
        return fn

    def run(item):
        with in_settings(settings):
            return fn(item)
    return run


def map_row_ranges(fn, ranges, threads: int = 1) -> list:
    """``[fn(start, stop) for start, stop in ranges]`` by :func:`map_threads`."""
    return map_threads(lambda ab: fn(*ab), ranges, threads)


def imap_threads(fn, items, threads: int = 1):
    """:func:`map_threads` as an iterator, in the order of ``items``, with at most
    ``2 * threads`` results pending, so a folding caller holds only a few at a time."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item)
        return
    fn = _with_caller_settings(fn)
    with one_thread_each(), \
            ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        pending = iter(items)
        window = collections.deque(pool.submit(fn, item)
                                   for item in itertools.islice(pending, 2 * threads))
        while window:
            result = window.popleft().result()
            item = next(pending, _END)
            if item is not _END:
                window.append(pool.submit(fn, item))
            yield result


_END = object()


@contextlib.contextmanager
def one_thread_each():
    """Limit BLAS (threadpoolctl) and torch intra-op threads to one while blocks run on their own
    threads; restored afterwards. torch's OpenMP workers spin on every small operation, which
    made small products far slower under contention (benchmarks/profile.py)."""
    import torch

    threads = torch.get_num_threads()
    with limit_blas_threads(1):
        if threads > 1:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if threads > 1:
                torch.set_num_threads(threads)


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


# -- partials --------------------------------------------------------------------------

# how a partial's field combines across blocks (every other field is summed)
MAX_FIELDS = ("nearest_max",)
LSE_FIELDS = ("lse",)


def merge_partials(parts: list[dict]) -> dict:
    """Combine block partials: sums, maxima (``nearest_max``) and log-sum-exp pairs
    (``lse``: column maxima and sums of ``exp(value - maximum)``, merged without
    underflow)."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    out = {}
    for key in parts[0]:
        vals = [p[key] for p in parts]
        if key in MAX_FIELDS:
            out[key] = np.max(np.stack(vals), axis=0)
        elif key in LSE_FIELDS:
            maxima = np.stack([v[0] for v in vals])
            col_max = maxima.max(axis=0)
            safe = np.where(np.isfinite(col_max), col_max, 0.0)
            with np.errstate(invalid="ignore"):
                scale = np.where(np.isfinite(maxima), np.exp(maxima - safe), 0.0)
            out[key] = np.stack([col_max, (np.stack([v[1] for v in vals]) * scale).sum(0)])
        else:
            total = vals[0].copy() if not sp.issparse(vals[0]) else vals[0]
            for v in vals[1:]:
                if sp.issparse(total) and not sp.issparse(v):
                    total = v + total.toarray()
                else:
                    total = total + v
            out[key] = total
    return out


def _add_into(total: dict, part: dict) -> None:
    """``merge_partials([total, part])`` (no log-sum-exp fields) in place in ``total``'s arrays."""
    for key, v in part.items():
        t = total[key]
        if key in MAX_FIELDS:
            np.maximum(t, v, out=t)
        elif isinstance(t, np.ndarray) and not sp.issparse(v):
            np.add(t, v, out=t)
        else:
            total[key] = v + t.toarray() if sp.issparse(t) and not sp.issparse(v) else t + v
