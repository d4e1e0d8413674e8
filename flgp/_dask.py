r"""The Dask engine: the FLGP graph, its eigenpairs and every pass over the points as Dask
tasks, on whatever scheduler is active (the threaded default, or a ``dask.distributed``
cluster a ``Client`` is connected to).

The block functions are those of the in-memory engine (:mod:`flgp.graph.passes`,
:class:`flgp.spectral.flgp.FLGPRowMap`); this module only wires them into dask graphs:

* each pass over the cloud is ``X.map_blocks(f)`` producing one packed *partial* per block
  (``s``-vectors, an ``s x s`` matrix), tree-summed by ``dask.array.reduction``; the merged
  partials are small numpy arrays on the client (as the ``l x l`` blocks of dask-ml's
  ``SpectralClustering``);
* eigenvector rows, predictions and transforms of the cloud (or of new points) are
  ``X.map_blocks`` producing lazy ``n``-row dask arrays; nothing ``n``-sized is computed
  unless the caller computes it;
* the induced points come from uniform samples of the rows (one computation reading the
  blocks that hold them; :func:`flgp.graph.kmeans_centres`).

Passes over the cloud, each one task per block: a check (finite values, coordinate size,
duplicate rows within the block), the neighbour search with the cross kernel (cluster sizes,
column sums), for SE with the default bandwidth a second kernel pass, and the transition
with the ``s x s`` products. The kernel rows are recomputed from ``X`` in each pass instead of
being held: ``O(n r)`` numbers would not fit where ``X`` itself does not.

Imported only when a dask (or zarr) array is passed: ``pip install 'flgp[dask]'``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - only reached without the extra
    raise ImportError("dask arrays need the optional dependency dask: "
                      "pip install 'flgp[dask]'") from exc

from ._chunks import (default_chunk_size, is_dask_array, is_zarr_array, row_bytes,
                      row_ranges, stage, take_rows)
from ._validation import _MAX_COORDINATE, count_distinct_rows
from .graph.cross_graph import OutOfSampleRows, check_graph_options, choose_landmarks
from .graph.cross_kernel import bandwidth_from_mean
from .graph.passes import (CrossStep, lse_finish, lse_partial, merge_partials,
                           products_partial)
from .spectral.flgp import rows_to_vectors

__all__ = ["as_dask_points", "build_cross_graph_dask", "DaskCrossGraph", "DaskCloud",
           "map_new_points", "labelled_rows"]


# -- input -----------------------------------------------------------------------------

def as_dask_points(X, name: str = "X", min_samples: int = 0):
    """A dask array of points ``(n, p)``, float64, one chunk across the features; a zarr
    array is opened with ``dask.array.from_zarr``. Shape, dtype and at least
    ``min_samples`` rows are checked here; the values (NaN, size) by :func:`check_blocks`,
    in a pass over the blocks."""
    if is_zarr_array(X):
        X = da.from_zarr(X)
    if not is_dask_array(X):
        raise TypeError(f"{name} must be a dask or zarr array here; got {type(X).__name__}.")
    if X.ndim == 1:
        raise ValueError(f"{name} is 1-d with shape {X.shape}; a point cloud must be 2-d "
                         f"(n_samples, n_features). Use {name}.reshape(-1, 1) for one "
                         f"feature.")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-d (n_samples, n_features); got {X.ndim} dimensions "
                         f"with shape {X.shape}.")
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
    big = float(np.abs(Xb[~bad]).max()) if (~bad).any() else 0.0
    distinct = count_distinct_rows(Xb) if n_bad == 0 and len(Xb) else len(Xb)
    return np.array([[n_bad, first, big, distinct]], dtype=np.float64)


def check_blocks(X, name: str = "X", min_samples: int = 2) -> None:
    """One pass over the blocks: NaN or infinity (the error names the block's rows), too
    large coordinates, and mostly duplicate rows (counted within each block, a lower bound
    of the cloud's duplicates)."""
    n, p = X.shape
    if n < min_samples:
        raise ValueError(f"{name} has {n} sample(s); at least {min_samples} are required.")
    stats = X.map_blocks(_check_block, chunks=((1,) * X.numblocks[0], (4,)),
                         dtype=np.float64).compute()
    for (a, b), (n_bad, first, _, _) in zip(_row_offsets(X), stats):
        if n_bad:
            raise ValueError(f"{name} contains NaN or infinity in {int(n_bad)} row(s) of its "
                             f"chunk of rows {a}-{b - 1} (first at row {a + int(first)}); "
                             f"remove or impute those rows before fitting.")
    big = float(stats[:, 2].max()) if len(stats) else 0.0
    if big * np.sqrt(p) > _MAX_COORDINATE:
        raise ValueError(f"{name} has coordinates as large as {big:.3g}: squared distances "
                         f"would overflow float64. Rescale {name} (e.g. standardise each "
                         f"feature) before fitting and predicting.")
    duplicates = n - float(stats[:, 3].sum())
    if duplicates > 0.5 * n:
        raise ValueError(f"{name} has at least {int(duplicates)} duplicate rows out of {n} "
                         f"(within its chunks); the graph would collapse onto the distinct "
                         f"points. Fit on the distinct rows (np.unique(..., axis=0)).")


# -- partials: one packed row per block, merged by a dask tree reduction ------------------

def _layout(fields: dict) -> list[tuple[str, tuple]]:
    return [(k, tuple(np.shape(v))) for k, v in fields.items()]


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


def _reduce_blocks(X, block_fn, layout, *args) -> dict:
    """``merge_partials`` of ``block_fn(X_b, *args)`` over the blocks, as a dask tree
    reduction; returns the merged partial (numpy, on the client)."""
    width = sum(int(np.prod(s)) if s else 1 for _, s in layout)
    parts = X.map_blocks(block_fn, *args, layout=layout,
                         chunks=((1,) * X.numblocks[0], (width,)), dtype=np.float64)

    def combine(x, axis=None, keepdims=True):
        return _merge_packed(x, layout, keepdims=True)

    def aggregate(x, axis=None, keepdims=False):
        return _merge_packed(x, layout, keepdims=keepdims)

    total = da.reduction(parts, chunk=_identity, combine=combine, aggregate=aggregate,
                         axis=0, dtype=np.float64, concatenate=True)
    return _unpack(np.asarray(total.compute()), layout)


def _located(err: ValueError, start: int, a: int, b: int) -> ValueError:
    return ValueError(f"{err} (in rows {start + a}-{start + b - 1} of X)")


def _start(block_info) -> int:
    return int(block_info[0]["array-location"][0][0]) if block_info else 0


def _cloud_block(Xb, step: CrossStep, sizes: bool, chunk: int, layout, block_info=None):
    start, parts = _start(block_info), []
    for a, b in row_ranges(Xb.shape[0], chunk):
        try:
            idx, sq, log_k = step.rows(Xb[a:b], workers=1)
            parts.append(step.cloud_partial(idx, sq, log_k, sizes=sizes))
        except ValueError as err:
            raise _located(err, start, a, b) from err
    return _pack(merge_partials(parts), layout)


def _lse_block(Xb, step: CrossStep, chunk: int, layout, block_info=None):
    start, parts = _start(block_info), []
    for a, b in row_ranges(Xb.shape[0], chunk):
        try:
            idx, _, log_k = step.rows(Xb[a:b], workers=1)
            parts.append({"lse": lse_partial(log_k, idx, step.n_induced)})
        except ValueError as err:
            raise _located(err, start, a, b) from err
    return _pack(merge_partials(parts), layout)


def _products_block(Xb, step: CrossStep, chunk: int, layout, block_info=None):
    start, parts = _start(block_info), []
    for a, b in row_ranges(Xb.shape[0], chunk):
        try:
            idx, _, log_k = step.rows(Xb[a:b], workers=1)
            values = step.transition(idx, log_k)
            parts.append(products_partial(idx, values, step.n_induced))
        except ValueError as err:
            raise _located(err, start, a, b) from err
    return _pack(merge_partials(parts), layout)


def _products_layout(s: int):
    return [("degrees", (s,)), ("gram", (s, s)), ("argmax", (s,))]


def _products(X, step: CrossStep, chunk_size) -> dict:
    chunk = default_chunk_size(row_bytes(X.shape[1], step.n_neighbors, 0), chunk_size)
    return _reduce_blocks(X, _products_block, _products_layout(step.n_induced),
                          dask.delayed(step, pure=True), chunk)


# -- the graph --------------------------------------------------------------------------

class DaskCrossGraph(OutOfSampleRows):
    """The FLGP graph of a cloud held as a dask array: everything the out-of-sample map
    needs (induced points, kernel, column sums ``c_j``, sizes ``n_j``, degrees ``Λ``) and
    the lazy cloud ``X``; its transition rows are recomputed block by block where they are
    used, never stored.

    Attributes
    ----------
    X : dask array (n, p)
    landmarks, kernel, n_neighbors, bandwidth, sizes, log_colsum, lae_regularization,
    backend, chunk_size :
        As in :class:`flgp.graph.CrossGraph`.
    degrees : ndarray (s,)
    nearest_sq_max : float
        The largest squared distance from a point of the cloud to its nearest induced point.
    """

    is_dask = True

    def __init__(self, X, landmarks, kernel, n_neighbors, bandwidth, sizes, log_colsum,
                 lae_regularization, backend, chunk_size, nearest_sq_max, products):
        self.X = X
        self.landmarks = landmarks
        self.kernel = kernel
        self.n_neighbors = n_neighbors
        self.bandwidth = bandwidth
        self.sizes = sizes
        self.log_colsum = log_colsum
        self.lae_regularization = lae_regularization
        self.backend = backend
        self.chunk_size = chunk_size
        self.nearest_sq_max = nearest_sq_max
        self.degrees = products["degrees"]
        self._products = products

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_products"] = None
        return state

    def __repr__(self) -> str:
        return (f"DaskCrossGraph(n_samples={self.n_samples}, n_induced={self.n_induced}, "
                f"kernel={self.kernel!r}, blocks={self.X.numblocks[0]})")

    def cross_products(self) -> dict:
        """``Λ``, ``AᵀA`` and the argmax counts (a pass over the blocks unless the build
        kept them)."""
        if self._products is None:
            self._products = _products(self.X, self.step(), self.chunk_size)
        return self._products

    def with_bandwidth(self, bandwidth: float) -> "DaskCrossGraph":
        """Same induced points, new SE bandwidth: two passes (column sums, products)."""
        if self.kernel != "se":
            raise ValueError("with_bandwidth applies to the 'se' kernel only.")
        from ._validation import check_positive

        bandwidth = check_positive(bandwidth, "bandwidth")
        step = CrossStep(points=self.landmarks.points, kernel="se",
                         n_neighbors=self.n_neighbors, bandwidth=bandwidth,
                         backend=self.backend, log_sizes=self._log_sizes())
        step, products = _finish_dask(self.X, step, None, self.chunk_size)
        return DaskCrossGraph(self.X, self.landmarks, "se", self.n_neighbors, bandwidth,
                              self.sizes, step.log_colsum, self.lae_regularization,
                              self.backend, self.chunk_size, self.nearest_sq_max, products)

    def eigen_cloud(self, row_map):
        return DaskCloud(self.X, self.step(), row_map, self.chunk_size)


def _finish_dask(X, step: CrossStep, lse, chunk_size):
    chunk = default_chunk_size(row_bytes(X.shape[1], step.n_neighbors, 0), chunk_size)
    if lse is None:
        with stage("column sums"):
            lse = _reduce_blocks(X, _lse_block, [("lse", (2, step.n_induced))],
                                 dask.delayed(step, pure=True), chunk)["lse"]
    step = replace(step, log_colsum=lse_finish(lse))
    with stage("transition + products"):
        return step, _products(X, step, chunk_size)


def build_cross_graph_dask(X, *, n_induced, n_neighbors, subsample, kernel, bandwidth,
                           bandwidth_scale, lae_regularization, random_state, kmeans_iter,
                           backend, induced_points, chunk_size) -> DaskCrossGraph:
    """:func:`flgp.graph.build_cross_graph` on a dask (or zarr) array: the same block
    functions, run as Dask tasks; see the module notes for the passes."""
    X = as_dask_points(X)
    n, p = X.shape
    s, r, U = check_graph_options(
        n, n_induced=n_induced, n_neighbors=n_neighbors, subsample=subsample, kernel=kernel,
        bandwidth=bandwidth, bandwidth_scale=bandwidth_scale,
        lae_regularization=lae_regularization, backend=backend,
        induced_points=induced_points, n_features=p)
    default_chunk_size(1, chunk_size)
    with stage("check"):
        check_blocks(X)
    with stage("induced points"):
        landmarks = choose_landmarks(X, s, subsample, U, random_state, kmeans_iter, backend)
    step = CrossStep(points=landmarks.points, kernel=kernel, n_neighbors=r,
                     bandwidth=bandwidth, lae_regularization=float(lae_regularization),
                     backend=backend)
    kmeans = subsample == "kmeans"
    chunk = default_chunk_size(row_bytes(p, r, 0), chunk_size)
    known = kernel == "lae" or bandwidth is not None
    layout = [("sq_sum", (1,)), ("count", (1,)), ("nearest_max", (1,))]
    if kmeans:
        layout.append(("sizes", (s,)))
    if known:
        layout.append(("lse", (2, s)))
    with stage("neighbours + kernel"):
        first = _reduce_blocks(X, _cloud_block, layout, dask.delayed(step, pure=True), kmeans,
                               chunk)
    sizes = np.rint(first["sizes"]).astype(np.int64) if kmeans else None
    if kernel == "se" and bandwidth is None:
        bandwidth = bandwidth_from_mean(first["sq_sum"][0] / first["count"][0],
                                        bandwidth_scale)
    log_sizes = None
    if sizes is not None:
        with np.errstate(divide="ignore"):
            log_sizes = np.log(sizes.astype(np.float64))
    step = CrossStep(points=landmarks.points, kernel=kernel, n_neighbors=r,
                     bandwidth=bandwidth, lae_regularization=float(lae_regularization),
                     backend=backend, log_sizes=log_sizes)
    step, products = _finish_dask(X, step, first["lse"] if known else None, chunk_size)
    return DaskCrossGraph(X, landmarks, kernel, r, bandwidth if kernel == "se" else None,
                          sizes, step.log_colsum, float(lae_regularization), backend,
                          chunk_size, float(first["nearest_max"][0]), products)


# -- eigenvector rows as lazy dask arrays ---------------------------------------------------

def _block_rows(Xb, step: CrossStep, row_map, chunk: int, start: int, restrict=False):
    """Yield ``(a, b, vectors, components)`` over sub-blocks of a block of points."""
    for a, b in row_ranges(Xb.shape[0], chunk):
        try:
            idx, sq, log_k = step.rows(Xb[a:b], workers=1)
            values = step.transition(idx, log_k)
        except ValueError as err:
            raise _located(err, start, a, b) from err
        yield (a, b) + rows_to_vectors(row_map, idx, values, sq, False, restrict)


def _map_block(Xb, step: CrossStep, row_map, func, chunk: int, out_shape, dtype, restrict,
               block_info=None):
    out = np.empty((Xb.shape[0],) + out_shape, dtype=dtype)
    for a, b, V, comp in _block_rows(Xb, step, row_map, chunk, _start(block_info), restrict):
        out[a:b] = func(V, comp)
    return out


def _lazy_map(X, step, row_map, func, n_columns, dtype, chunk_size, restrict=False):
    M = row_map.projection.shape[1]
    chunk = default_chunk_size(row_bytes(X.shape[1], step.n_neighbors, M), chunk_size)
    out_shape = () if n_columns is None else (int(n_columns),)
    kwargs = dict(dtype=dtype, meta=np.empty((0,) + out_shape, dtype=dtype))
    if n_columns is None:
        kwargs["drop_axis"] = 1
    else:
        kwargs["chunks"] = (X.chunks[0], (int(n_columns),))
    return X.map_blocks(_map_block, dask.delayed(step, pure=True),
                        dask.delayed(row_map, pure=True), func, chunk, out_shape,
                        np.dtype(dtype), bool(restrict), **kwargs)


def _reduce_block(Xb, step: CrossStep, row_map, func, chunk: int, layout, block_info=None):
    start = _start(block_info)
    total = None
    for a, _, V, comp in _block_rows(Xb, step, row_map, chunk, start):
        term = np.asarray(func(V, comp, start + a), dtype=np.float64)
        total = term if total is None else total + term
    if total is None:
        total = np.zeros(layout[0][1])
    return _pack({"total": total}, layout)


def _vectors_only(V, comp):
    return V


def _components_only(V, comp):
    return comp


class DaskCloud:
    """Eigenvector rows of a Dask fit: the cloud's transition rows recomputed block by
    block from ``X`` and mapped through an :class:`flgp.spectral.flgp.FLGPRowMap`."""

    is_dask = True
    tracks_components = True

    def __init__(self, X, step: CrossStep, row_map, chunk_size=None):
        self.X = X
        self.step = step
        self.row_map = row_map
        self.chunk_size = chunk_size

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    def _rows(self, index):
        if isinstance(index, slice):
            index = np.arange(self.n_samples)[index]
        index = np.asarray(index, dtype=np.int64) % self.n_samples
        Xi = take_rows(self.X, index)
        idx, _, log_k = self.step.rows(Xi)
        return idx, self.step.transition(idx, log_k)

    def vectors(self, index):
        return self.row_map.vectors(*self._rows(index))

    def components(self, index):
        return self.row_map.components(*self._rows(index))

    def map(self, func, *, n_columns=None, dtype=np.float64, chunk_size=None):
        return _lazy_map(self.X, self.step, self.row_map, func, n_columns, dtype,
                         chunk_size if chunk_size is not None else self.chunk_size)

    def reduce(self, func, shape, *, chunk_size=None):
        M = self.row_map.projection.shape[1]
        chunk = default_chunk_size(row_bytes(self.X.shape[1], self.step.n_neighbors, M),
                                   chunk_size if chunk_size is not None else self.chunk_size)
        shape = tuple(int(v) for v in np.atleast_1d(shape))
        return _reduce_blocks(self.X, _reduce_block, [("total", shape)],
                              dask.delayed(self.step, pure=True),
                              dask.delayed(self.row_map, pure=True), func, chunk)["total"]

    def projected(self, project: np.ndarray) -> "DaskCloud":
        """The rows of ``V L`` (:meth:`flgp.spectral.flgp.FLGPRowMap.projected`)."""
        return DaskCloud(self.X, self.step, self.row_map.projected(project), self.chunk_size)

    def all_vectors(self):
        return self.map(_vectors_only, n_columns=self.row_map.projection.shape[1])

    def all_components(self):
        return self.map(_components_only, dtype=np.int64)


def map_new_points(eigenpairs, X_new, func, *, n_columns=None, dtype=np.float64,
                   chunk_size=None, restrict=False, project=None):
    """``func(vectors, components)`` over the blocks of a dask array of new points: a lazy
    dask array (FLGP eigenpairs only: their out-of-sample map is small enough to ship)."""
    graph = getattr(eigenpairs.extension, "graph", None)
    if eigenpairs.method != "flgp" or not hasattr(graph, "step"):
        raise ValueError(f"dask arrays of new points need FLGP eigenpairs; these are "
                         f"{eigenpairs.method!r}. Compute the points first "
                         f"(X.compute()) or fit with method='flgp'.")
    X_new = as_dask_points(X_new)
    if X_new.shape[1] != graph.landmarks.points.shape[1]:
        raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                         f"{graph.landmarks.points.shape[1]}.")
    row_map = eigenpairs.extension.row_map
    if project is not None:
        row_map = row_map.projected(project)
    return _lazy_map(X_new, graph.step(), row_map, func, n_columns, dtype, chunk_size,
                     restrict)


# -- labels ------------------------------------------------------------------------------

def _labelled_block(yb, is_labelled, block_info=None):
    return np.flatnonzero(is_labelled(yb)) + _start(block_info)


def labelled_rows(y, is_labelled):
    """``(indices, values)`` of the labelled entries of a 1-d dask array ``y``
    (``is_labelled(block) -> bool mask``): one pass, only the labelled entries come back."""
    if y.ndim != 1:
        raise ValueError(f"y must be 1-d; got shape {y.shape}.")
    idx = y.map_blocks(_labelled_block, is_labelled, chunks=((np.nan,) * y.numblocks[0],),
                       dtype=np.int64, meta=np.empty(0, dtype=np.int64)).compute()
    idx = np.asarray(idx, dtype=np.int64)
    values = np.asarray(y[idx].compute()) if idx.size else np.empty(0, dtype=y.dtype)
    return idx, values
