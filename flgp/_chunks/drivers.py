"""The drivers that run a block function over a cloud's rows: :class:`InMemoryBlocks` for
numpy, :class:`flgp._chunks.dask_blocks.DaskBlocks` for dask or zarr (see :mod:`flgp._chunks`)."""

from __future__ import annotations

import numpy as np

from ..backends import cpu_threads
from .blocks import (LSE_FIELDS, _add_into, default_chunk_size, imap_threads, is_dask_array,
                     is_zarr_array, map_row_ranges, merge_partials, row_ranges, take_rows)

__all__ = ["is_lazy", "InMemoryBlocks", "blocks_of"]


def is_lazy(X) -> bool:
    """Whether ``X`` is a dask or zarr array (its passes then run as Dask tasks)."""
    root = type(X).__module__.split(".")[0]
    return (root == "dask" and is_dask_array(X)) or (root == "zarr" and is_zarr_array(X))


def _threads() -> int:
    return cpu_threads()


class InMemoryBlocks:
    """The rows of an in-memory cloud as blocks.

    ``X`` is the numpy array of points, or None when the passes read stored rows (then
    ``n_samples`` gives the row count and block functions get ``None`` for points).
    """

    is_dask = False

    def __init__(self, X: np.ndarray | None = None, n_samples: int | None = None):
        self.X = X
        self.n_samples = int(X.shape[0] if X is not None else n_samples)

    def _block(self, a: int, b: int):
        return None if self.X is None else self.X[a:b]

    def reduce(self, fn, *, bytes_per_row: int, chunk_size: int | None = None,
               layout=None, threads: int | None = None) -> dict:
        """:func:`merge_partials` of ``fn(X_block, start, stop)`` over the blocks, on torch's
        thread count or ``threads`` (``layout`` is for the Dask driver; ignored). Partials are
        added in block order as they finish, so only a few ``s x s`` arrays are alive; log-sum-exp
        pairs are merged at the end. Same arithmetic as merging all at once."""
        ranges = row_ranges(self.n_samples, default_chunk_size(bytes_per_row, chunk_size))
        threads = _threads() if threads is None else threads
        total, lse_parts, owned = None, [], False
        for part in imap_threads(lambda ab: fn(self._block(*ab), *ab), ranges, threads):
            if not part:
                continue
            lse_parts.append({key: part.pop(key) for key in LSE_FIELDS if key in part})
            if total is None:
                total = part
            elif not owned:                  # the first merge makes arrays of our own
                total, owned = merge_partials([total, part]), True
            else:
                _add_into(total, part)
        if total is None:
            return {}
        total.update(merge_partials(lse_parts))
        return total

    def map(self, fn, *, bytes_per_row: int, chunk_size: int | None = None,
            n_columns: int | None = None, dtype=np.float64, parallel: bool = False):
        """``fn(X_block, start, stop)`` over the blocks, stacked into one array (on threads with
        ``parallel``; ``fn`` must then be thread-safe). ``n_columns``/``dtype`` are for the Dask
        driver; here the first block sets them."""
        ranges = row_ranges(self.n_samples, default_chunk_size(bytes_per_row, chunk_size))
        if not ranges:
            raise ValueError("no rows to map over.")
        a0, b0 = ranges[0]
        first = np.asarray(fn(self._block(a0, b0), a0, b0))
        out = np.empty((self.n_samples,) + first.shape[1:], dtype=first.dtype)
        out[a0:b0] = first

        def fill(a, b):
            out[a:b] = fn(self._block(a, b), a, b)

        map_row_ranges(fill, ranges[1:], _threads() if parallel else 1)
        return out

    def take(self, index) -> np.ndarray:
        """Rows ``index`` of the points (float64)."""
        return take_rows(self.X, index)


def blocks_of(X):
    """The driver for ``X``: :class:`InMemoryBlocks` for numpy, the Dask driver for dask or zarr
    (shape checked first by :func:`flgp._chunks.dask_blocks.as_dask_points`)."""
    if is_lazy(X):
        from .dask_blocks import DaskBlocks      # imports dask: only for a dask array

        return DaskBlocks(X)
    return InMemoryBlocks(X)
