r"""The Dask driver: passes over a dask-array cloud as Dask tasks on the active scheduler
(threaded default, or a ``dask.distributed`` ``Client``).

It runs the same block functions as :class:`flgp._chunks.InMemoryBlocks`:

* :meth:`DaskBlocks.reduce` - one packed partial per chunk, tree-summed by
  ``dask.array.reduction`` into a small numpy dict on the client;
* :meth:`DaskBlocks.map` - a lazy ``n``-row dask array;
* :meth:`DaskBlocks.take` - rows by index;
* :meth:`DaskBlocks.check` - one pass checking NaN/infinity, coordinate scale and duplicate
  rows (counted per chunk: a lower bound).

Chunks are split into blocks of the budgeted size (:func:`default_chunk_size`); a
``ValueError`` in a block is re-raised naming its rows. The block function is sent to the
tasks as a ``dask.delayed`` object, so it must pickle.

Imported only when a dask (or zarr) array is passed: ``pip install 'flgp[dask]'``.
"""

from __future__ import annotations

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - only reached without the extra
    raise ImportError("dask arrays need the optional dependency dask: "
                      "pip install 'flgp[dask]'") from exc

from .._config import in_settings, thread_settings
from .._validation import check_2d, check_coordinate_scale, count_distinct_rows
from .blocks import (default_chunk_size, is_dask_array, is_zarr_array, merge_partials,
                     row_ranges)

__all__ = ["as_dask_points", "DaskBlocks", "flatnonzero_blocks"]


# -- input ------------------------------------------------------------------------------

def as_dask_points(X, name: str = "X", min_samples: int = 0):
    """A dask array of points ``(n, p)``, float64, one chunk across the features (zarr is opened
    with ``dask.array.from_zarr``). Checks shape, dtype and ``min_samples``; values are
    checked by :meth:`DaskBlocks.check`."""
    if is_zarr_array(X):
        X = da.from_zarr(X)
    if not is_dask_array(X):
        raise TypeError(f"{name} must be a dask or zarr array here; got {type(X).__name__}.")
    check_2d(X, name)
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(f"{name} has unknown chunk sizes (e.g. after boolean indexing); call "
                         f"{name}.compute_chunk_sizes() first.")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"{name} must be numeric; got dtype {X.dtype}.")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has 0 features; it needs at least one column.")
    if X.shape[0] < min_samples:
        raise ValueError(f"{name} has {X.shape[0]} sample(s); at least {min_samples} are "
                         f"required.")
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    return X


def _row_offsets(X) -> list[tuple[int, int]]:
    stops = np.cumsum(X.chunks[0])
    return [(int(b - c), int(b)) for b, c in zip(stops, X.chunks[0])]


def _check_block(Xb):
    bad = ~np.isfinite(Xb).all(axis=1)
    n_bad = int(bad.sum())
    first = int(np.argmax(bad)) if n_bad else -1
    good = Xb[~bad]
    big = float(np.abs(good).max()) if good.size else 0.0
    spread = float((good.max(axis=0) - good.min(axis=0)).max()) if len(good) else 0.0
    distinct = count_distinct_rows(Xb) if n_bad == 0 and len(Xb) else len(Xb)
    return np.array([[n_bad, first, big, distinct, spread]], dtype=np.float64)


# -- packed partials: one row per chunk, merged by a dask tree reduction ------------------

def _pack(parts: dict, layout) -> np.ndarray:
    out = []
    for key, shape in layout:
        v = parts[key]
        v = v.toarray() if hasattr(v, "toarray") else np.asarray(v, dtype=np.float64)
        out.append(v.reshape(-1))
    return np.concatenate(out)[None, :]


def _unpack(row: np.ndarray, layout) -> dict:
    out, at = {}, 0
    for key, shape in layout:
        size = int(np.prod(shape)) if shape else 1
        out[key] = row[at:at + size].reshape(shape)
        at += size
    return out


def _merge_packed(x, layout, keepdims=True):
    x = np.atleast_2d(x)
    if x.size == 0:                      # dask probing the output type (meta)
        return x if keepdims else x.reshape(-1)
    merged = merge_partials([_unpack(row, layout) for row in np.atleast_2d(x)])
    packed = _pack(merged, layout)
    return packed if keepdims else packed[0]


def _identity(x, axis=None, keepdims=True):
    return x


def _start(block_info) -> int:
    return int(block_info[0]["array-location"][0][0]) if block_info else 0


def _located(err: ValueError, start: int, a: int, b: int) -> ValueError:
    return ValueError(f"{err} (in rows {start + a}-{start + b - 1} of X)")


def _blocks(Xb, fn, chunk: int, start: int):
    """``(a, b, fn(X[a:b], start + a, start + b))`` over the blocks of one chunk."""
    for a, b in row_ranges(Xb.shape[0], chunk):
        try:
            yield a, b, fn(Xb[a:b], start + a, start + b)
        except ValueError as err:
            raise _located(err, start, a, b) from err


def _reduce_chunk(Xb, fn, chunk: int, layout, block_info=None, settings=None):
    with in_settings(settings):
        parts = [part for _, _, part in _blocks(Xb, fn, chunk, _start(block_info))]
    return _pack(merge_partials(parts), layout)


def _map_chunk(Xb, fn, chunk: int, out_shape, dtype, block_info=None, settings=None):
    out = np.empty((Xb.shape[0],) + out_shape, dtype=dtype)
    with in_settings(settings):
        for a, b, rows in _blocks(Xb, fn, chunk, _start(block_info)):
            out[a:b] = rows
    return out


class DaskBlocks:
    """The rows of a dask array ``X`` (``n x p``, one chunk across the features) as blocks."""

    is_dask = True

    def __init__(self, X):
        self.X = X

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    def __repr__(self) -> str:
        return f"DaskBlocks(n_samples={self.n_samples}, chunks={self.X.numblocks[0]})"

    def reduce(self, fn, *, layout, bytes_per_row: int, chunk_size: int | None = None,
               threads=None) -> dict:
        """:func:`merge_partials` of ``fn(X_block, start, stop)`` over the blocks as a dask tree
        reduction; ``layout``: ``[(field, shape), ...]`` of the partial. Returns the merged
        partial (numpy)."""
        layout = list(layout)
        chunk = default_chunk_size(bytes_per_row, chunk_size)
        width = sum(int(np.prod(s)) if s else 1 for _, s in layout)
        parts = self.X.map_blocks(_reduce_chunk, dask.delayed(fn, pure=True), chunk, layout,
                                  settings=thread_settings(),
                                  chunks=((1,) * self.X.numblocks[0], (width,)),
                                  dtype=np.float64)

        def combine(x, axis=None, keepdims=True):
            return _merge_packed(x, layout, keepdims=True)

        def aggregate(x, axis=None, keepdims=False):
            return _merge_packed(x, layout, keepdims=keepdims)

        total = da.reduction(parts, chunk=_identity, combine=combine, aggregate=aggregate,
                             axis=0, dtype=np.float64, concatenate=True)
        return _unpack(np.asarray(total.compute()), layout)

    def map(self, fn, *, bytes_per_row: int, chunk_size: int | None = None,
            n_columns: int | None = None, dtype=np.float64, parallel: bool = False):
        """``fn(X_block, start, stop)`` over the blocks as a lazy dask array with ``X``'s row
        chunks: ``(n,)`` (``n_columns`` None) or ``(n, n_columns)`` of ``dtype``."""
        chunk = default_chunk_size(bytes_per_row, chunk_size)
        out_shape = () if n_columns is None else (int(n_columns),)
        kwargs = dict(dtype=dtype, meta=np.empty((0,) + out_shape, dtype=dtype))
        if n_columns is None:
            kwargs["drop_axis"] = 1
        else:
            kwargs["chunks"] = (self.X.chunks[0], (int(n_columns),))
        return self.X.map_blocks(_map_chunk, dask.delayed(fn, pure=True), chunk, out_shape,
                                 np.dtype(dtype), settings=thread_settings(), **kwargs)

    def take(self, index) -> np.ndarray:
        """Rows ``index`` of ``X`` (float64, in the order of ``index``), reading only their
        chunks."""
        index = np.asarray(index, dtype=np.int64)
        order = np.argsort(index, kind="stable")
        rows = np.asarray(self.X[index[order]].compute(), dtype=np.float64)
        out = np.empty_like(rows)
        out[order] = rows
        return out

    def compute(self) -> np.ndarray:
        """All of ``X`` as a float64 numpy array (for clouds small enough to hold)."""
        return np.ascontiguousarray(self.X.compute(), dtype=np.float64)

    def check(self, name: str = "X", min_samples: int = 2) -> None:
        """One pass over the chunks: NaN or infinity (naming the chunk's rows), coordinate scale
        (:func:`flgp._validation.check_coordinate_scale`) and mostly duplicate rows."""
        X = self.X
        n, p = X.shape
        if n < min_samples:
            raise ValueError(f"{name} has {n} sample(s); at least {min_samples} are "
                             f"required.")
        stats = X.map_blocks(_check_block, chunks=((1,) * X.numblocks[0], (5,)),
                             dtype=np.float64).compute()
        for (a, b), (n_bad, first, _, _, _) in zip(_row_offsets(X), stats):
            if n_bad:
                raise ValueError(f"{name} contains NaN or infinity in {int(n_bad)} row(s) of "
                                 f"its chunk of rows {a}-{b - 1} (first at row "
                                 f"{a + int(first)}); remove or impute those rows before "
                                 f"fitting.")
        big = float(stats[:, 2].max()) if len(stats) else 0.0
        check_coordinate_scale(big, float(stats[:, 4].max()) if len(stats) else 0.0, p,
                               name)
        duplicates = n - float(stats[:, 3].sum())
        if duplicates > 0.5 * n:
            raise ValueError(f"{name} has at least {int(duplicates)} duplicate rows out of {n} "
                             f"(within its chunks); the graph would collapse onto the "
                             f"distinct points. Fit on the distinct rows "
                             f"(np.unique(..., axis=0)).")


# -- a 1-d array's selected entries --------------------------------------------------------

def _selected_block(yb, select, block_info=None):
    return np.flatnonzero(select(yb)) + _start(block_info)


def flatnonzero_blocks(y, select):
    """``(indices, values)`` of the entries of a 1-d dask array ``y`` where
    ``select(block) -> bool mask`` holds: one pass, only those entries come back."""
    if y.ndim != 1:
        raise ValueError(f"y must be 1-d; got shape {y.shape}.")
    idx = y.map_blocks(_selected_block, select, chunks=((np.nan,) * y.numblocks[0],),
                       dtype=np.int64, meta=np.empty(0, dtype=np.int64)).compute()
    idx = np.asarray(idx, dtype=np.int64)
    values = np.asarray(y[idx].compute()) if idx.size else np.empty(0, dtype=y.dtype)
    return idx, values
