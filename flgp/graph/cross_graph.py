"""The FLGP graph of a point cloud: induced points, r-nearest sparse kernel, transition.

:func:`build_cross_graph` runs steps 1-4 of He et al.'s Algorithm 1 and returns a
:class:`CrossGraph`, which extends the transition to new points with the same arithmetic
(a cloud point gets back its own row). Each pass over the points is a block function
(:mod:`flgp.graph.passes`) run by the cloud's driver (:func:`flgp._chunks.blocks_of`):
numpy blocks on threads, or Dask tasks for a dask or zarr array. An in-memory graph keeps
its ``r`` transition entries per point; a Dask graph recomputes them where used.
:func:`cross_graph` is the non-validating entry point (validated :class:`GraphOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .._chunks import InMemoryBlocks, blocks_of, default_chunk_size, is_lazy, stage
from .._validation import (check_cloud, check_int, check_option, check_points,
                           check_positive)
from ..backends import BACKENDS, cpu_threads
from .cross_kernel import bandwidth_from_mean, check_bandwidth
from .induced_points import InducedPoints, kmeans_centres, random_induced_points
from .passes import (CloudRows, ColumnSumPass, CrossStep, NeighbourPass, ProductsPass,
                     TransitionPass, induced_search_tree)
from .transition import CrossTransition, lse_finish

__all__ = ["CrossGraph", "GraphOptions", "build_cross_graph", "cross_graph",
           "SUBSAMPLES", "KERNELS"]

SUBSAMPLES = ("kmeans", "random")
KERNELS = ("lae", "se")


@dataclass(frozen=True)
class GraphOptions:
    """Validated settings of :func:`build_cross_graph` (``n_induced``, ``n_neighbors``:
    the resolved ``s`` and ``r``; ``induced_points``: the user's or None)."""

    n_induced: int
    n_neighbors: int = 3
    subsample: str = "kmeans"
    kernel: str = "lae"
    bandwidth: float | None = None
    bandwidth_scale: float = 1.0
    lae_regularization: float = 1e-3
    random_state: object = None
    kmeans_iter: int | None = None
    backend: str = "auto"
    induced_points: np.ndarray | None = None
    chunk_size: int | None = None


@dataclass
class CrossGraph:
    """Sparse two-step random-walk graph between a cloud ``X`` (n x p) and ``U`` (s x p).

    Attributes
    ----------
    induced : InducedPoints
        ``U`` and how it was chosen.
    kernel : {"se", "lae"}
    n_neighbors : int
        ``r``.
    bandwidth : float or None
        SE ``eps`` in ``exp(-d^2 / (4 eps^2))``; None for LAE.
    sizes : ndarray (s,) or None
        k-means cluster sizes ``n_j`` (None for random subsampling).
    log_colsum : ndarray (s,)
        ``log Σ_q K_qj`` over the cloud.
    degrees : ndarray (s,)
        ``Λ_jj = Σ_i A_ij``.
    nearest_sq_max : float
        The largest squared distance from a point of the cloud to its nearest induced
        point.
    blocks : InMemoryBlocks or DaskBlocks
        The driver of the cloud's passes.
    rows : CloudRows or None
        Each point's ``r`` nearest induced points, squared distances and transition
        values; None for a Dask graph (recomputed from ``blocks.X``).
    chunk_size : int or None
        Rows per block (None: from the working-memory budget).
    tree : object or None
        The induced points' compiled search structure
        (:func:`flgp.graph.neighbors.search_tree`); not pickled, rebuilt at first use.
    """

    induced: InducedPoints
    kernel: str
    n_neighbors: int
    bandwidth: float | None
    sizes: np.ndarray | None
    log_colsum: np.ndarray
    degrees: np.ndarray
    nearest_sq_max: float
    blocks: object
    rows: CloudRows | None
    lae_regularization: float = 0.0
    backend: str = "auto"
    chunk_size: int | None = None
    tree: object = field(default=None, repr=False, compare=False)
    _products: dict | None = field(default=None, repr=False, compare=False)

    @property
    def is_dask(self) -> bool:
        return self.blocks.is_dask

    @property
    def n_samples(self) -> int:
        return self.blocks.n_samples

    @property
    def n_induced(self) -> int:
        return self.induced.points.shape[0]

    @property
    def indices(self) -> np.ndarray:
        """``(n, r)`` nearest induced points of each point (in-memory graphs)."""
        return self._stored().indices

    @property
    def sq_distances(self) -> np.ndarray:
        """``(n, r)`` squared distances to them (in-memory graphs)."""
        return self._stored().sq_distances

    @property
    def transition(self) -> CrossTransition:
        """``A`` as ``r`` stored entries per row (in-memory graphs)."""
        rows = self._stored()
        return CrossTransition(indices=rows.indices, values=rows.values,
                               degrees=self.degrees)

    def _stored(self) -> CloudRows:
        if self.rows is None:
            raise TypeError("this graph was built on a dask array and keeps no rows; they "
                            "are recomputed from the points (CrossGraph.block_rows).")
        return self.rows

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_products"] = None      # s x s; recomputed from the rows if needed
        state["tree"] = None           # rebuilt at first use (step())
        return state

    def step(self) -> CrossStep:
        """The block functions' ``O(s p)`` view of this graph."""
        return CrossStep(points=self.induced.points, kernel=self.kernel,
                         n_neighbors=self.n_neighbors, bandwidth=self.bandwidth,
                         lae_regularization=self.lae_regularization, backend=self.backend,
                         log_colsum=self.log_colsum, log_sizes=_log_sizes(self.sizes),
                         tree=self._search())

    def _search(self):
        """:meth:`CrossStep.search`, kept on the graph (built once, not once a call)."""
        if self.tree is None:
            self.tree = induced_search_tree(self.induced.points, self.n_neighbors,
                                            self.backend)
        return self.tree

    def transition_rows(self, X_new: np.ndarray, return_sq: bool = False):
        """Indices and values of ``a(x)``, the transition rows of new points to ``U``
        (``return_sq``: also the squared distances to those induced points, nearest
        first)."""
        X_new = check_points(X_new, name="X", min_samples=1)
        if X_new.shape[1] != self.induced.points.shape[1]:
            raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                             f"{self.induced.points.shape[1]}.")
        idx, rows, sq = self.step().transition_rows(X_new)
        return (idx, rows, sq) if return_sq else (idx, rows)

    def row_source(self) -> "CloudRowSource":
        """The cloud's transition rows block by block (:class:`CloudRowSource`)."""
        return CloudRowSource(self.step(), self.rows)

    def cross_products(self) -> dict:
        """``{"degrees", "gram", "argmax"}``: ``Λ``, the dense ``s x s`` ``AᵀA`` and the
        number of points whose largest transition probability goes to each induced point
        (a pass over the cloud unless the build kept them)."""
        if self._products is None:
            if self.rows is not None:
                pass3 = ProductsPass(self.n_induced, self.rows)
                blocks = InMemoryBlocks(n_samples=self.n_samples)
            else:
                pass3, blocks = TransitionPass(self.step(), None), self.blocks
            self._products = _products(blocks, pass3, self.chunk_size)
        return self._products

    def with_bandwidth(self, bandwidth: float) -> "CrossGraph":
        """Same induced points and neighbours, new SE bandwidth (``O(n r)``)."""
        if self.kernel != "se":
            raise ValueError("with_bandwidth applies to the 'se' kernel only.")
        bandwidth = check_bandwidth(bandwidth)
        step = replace(self.step(), bandwidth=bandwidth, log_colsum=None)
        rows = None if self.rows is None else CloudRows(
            self.rows.indices, self.rows.sq_distances, np.empty(self.rows.values.shape))
        step, products = _finish(self.blocks, step, rows, None, self.chunk_size)
        return replace(self, bandwidth=bandwidth, log_colsum=step.log_colsum,
                       degrees=products["degrees"], rows=rows, _products=products)


class CloudRowSource:
    """``(indices, values)`` of the cloud's transition rows of a block ``(X_block, start,
    stop)``: stored, or recomputed through the graph's step (Dask). Picklable."""

    def __init__(self, step: CrossStep, rows: CloudRows | None):
        self.step = step
        self.rows = rows

    def __call__(self, Xb, a, b):
        if self.rows is not None:
            return self.rows.indices[a:b], self.rows.values[a:b]
        idx, values, _ = self.step.transition_rows(Xb, workers=1)
        return idx, values

    def at(self, blocks, index: np.ndarray):
        """``(indices, values)`` of the cloud rows ``index`` (an index array or a slice)."""
        if self.rows is not None:
            return self.rows.indices[index], self.rows.values[index]
        if isinstance(index, slice):
            index = np.arange(blocks.n_samples)[index]
        index = np.asarray(index, dtype=np.int64) % blocks.n_samples
        idx, values, _ = self.step.transition_rows(blocks.take(index))
        return idx, values


def _log_sizes(sizes):
    if sizes is None:
        return None
    with np.errstate(divide="ignore"):
        return np.log(sizes.astype(np.float64))


def _products(blocks, pass3, chunk_size) -> dict:
    """Pass 3 over the cloud: the dense products."""
    p = blocks.X.shape[1] if blocks.is_dask else 0
    products = blocks.reduce(pass3, layout=pass3.layout(),
                             bytes_per_row=pass3.bytes_per_row(p), chunk_size=chunk_size)
    return _dense_products(products, pass3.n_induced)


def _dense_products(products: dict, s: int) -> dict:
    gram = products["gram"]
    gram = gram.toarray() if hasattr(gram, "toarray") else np.asarray(gram)
    return {"degrees": products["degrees"], "gram": gram.reshape(s, s),
            "argmax": products["argmax"]}


def _finish(blocks, step: CrossStep, rows: CloudRows | None, lse, chunk_size):
    """Steps 3-4 after pass 1: the column sums (pass 2, unless ``lse`` holds them), then
    the transition and its products (pass 3). Returns ``(step, products)``."""
    p = blocks.X.shape[1] if blocks.is_dask else 0
    if lse is None:
        pass2 = ColumnSumPass(step, rows)
        with stage("column sums"):
            lse = blocks.reduce(pass2, layout=pass2.layout(),
                                bytes_per_row=pass2.bytes_per_row(p),
                                chunk_size=chunk_size)["lse"]
    step = replace(step, log_colsum=lse_finish(lse))
    with stage("transition + products"):
        return step, _products(blocks, TransitionPass(step, rows), chunk_size)


def choose_induced_points(cloud, options: GraphOptions) -> InducedPoints:
    """The user's induced points, a random subsample, or k-means centres."""
    if options.induced_points is not None:
        return InducedPoints(points=options.induced_points, method="given")
    if options.subsample == "random":
        return random_induced_points(cloud, options.n_induced, options.random_state)
    return kmeans_centres(cloud, options.n_induced, random_state=options.random_state,
                          n_iter=options.kmeans_iter, backend=options.backend)


def cross_graph(X, options: GraphOptions) -> CrossGraph:
    """:func:`build_cross_graph` on a cloud checked by :func:`validate_cloud`, with
    validated :class:`GraphOptions`."""
    blocks = blocks_of(X)
    n, p = X.shape
    r, kernel = options.n_neighbors, options.kernel
    with stage("induced points"):
        induced = choose_induced_points(X, options)
    kmeans = options.subsample == "kmeans"
    rows = None if blocks.is_dask else CloudRows.empty(n, r)
    threads = cpu_threads()
    known = kernel == "lae" or options.bandwidth is not None
    with stage("neighbours + kernel"):
        step = CrossStep(points=induced.points, kernel=kernel, n_neighbors=r,
                         bandwidth=options.bandwidth,
                         lae_regularization=float(options.lae_regularization),
                         backend=options.backend)
        step.search()                 # built once, before the blocks share the step
        pass1 = NeighbourPass(step, kmeans, rows,
                              workers=1 if (blocks.is_dask or threads > 1) else None)
        first = blocks.reduce(pass1, layout=pass1.layout(known),
                              bytes_per_row=pass1.bytes_per_row(p),
                              chunk_size=options.chunk_size)
    sizes = np.rint(first["sizes"]).astype(np.int64) if kmeans else None
    bandwidth = options.bandwidth
    if kernel == "se" and bandwidth is None:
        bandwidth = bandwidth_from_mean(first["sq_sum"][0] / first["count"][0],
                                        options.bandwidth_scale)
    step = replace(step, bandwidth=bandwidth, log_sizes=_log_sizes(sizes))
    if not blocks.is_dask:
        blocks = InMemoryBlocks(n_samples=n)          # the passes below read stored rows
    step, products = _finish(blocks, step, rows, first["lse"] if known else None,
                             options.chunk_size)
    return CrossGraph(induced=induced, kernel=kernel, n_neighbors=r,
                      bandwidth=bandwidth if kernel == "se" else None, sizes=sizes,
                      log_colsum=step.log_colsum, degrees=products["degrees"],
                      nearest_sq_max=float(first["nearest_max"][0]), blocks=blocks,
                      rows=rows, lae_regularization=float(options.lae_regularization),
                      backend=options.backend, chunk_size=options.chunk_size,
                      tree=step.tree, _products=products)


def check_graph_options(n: int, n_features: int, *, n_induced, n_neighbors, subsample,
                        kernel, bandwidth, bandwidth_scale, lae_regularization, backend,
                        induced_points, random_state=None, kmeans_iter=None,
                        chunk_size=None) -> GraphOptions:
    """:class:`GraphOptions` validated against a cloud of shape ``(n, n_features)``."""
    check_option(subsample, "subsample", SUBSAMPLES)
    check_option(kernel, "kernel", KERNELS)
    U = validate_induced_points(induced_points, n_induced, n_features)
    if U is not None:
        s = U.shape[0]
    else:
        if n_induced is None:
            raise TypeError("build_cross_graph needs n_induced (or induced_points).")
        s = check_int(n_induced, "n_induced", low=2, high=n, high_name="n_samples",
                      fix="Use at most as many induced points as there are points.")
    r = check_int(n_neighbors, "n_neighbors", low=1, high=s, high_name="n_induced",
                  fix="Each point can keep at most n_induced nearest induced points.")
    if bandwidth is not None:
        bandwidth = check_bandwidth(bandwidth)
    check_positive(bandwidth_scale, "bandwidth_scale")
    if not (np.isfinite(lae_regularization) and lae_regularization >= 0):
        raise ValueError(f"lae_regularization must be a finite number >= 0; got "
                         f"{lae_regularization}.")
    check_option(backend, "backend", BACKENDS)
    default_chunk_size(1, chunk_size)                      # validates chunk_size
    return GraphOptions(n_induced=s, n_neighbors=r, subsample=subsample, kernel=kernel,
                        bandwidth=None if bandwidth is None else float(bandwidth),
                        bandwidth_scale=float(bandwidth_scale),
                        lae_regularization=float(lae_regularization),
                        random_state=random_state, kmeans_iter=kmeans_iter, backend=backend,
                        induced_points=U, chunk_size=chunk_size)


def validate_induced_points(induced_points, n_induced, n_features: int):
    """The user's induced points as a checked ``(s, p)`` array, or None."""
    if induced_points is None:
        return None
    U = check_points(induced_points, name="induced_points", min_samples=2)
    if U.shape[1] != n_features:
        raise ValueError(f"induced_points has {U.shape[1]} features but X has "
                         f"{n_features}; pass an (n_induced, {n_features}) array.")
    if n_induced is not None and int(n_induced) != U.shape[0]:
        raise ValueError(f"n_induced={n_induced} but induced_points has {U.shape[0]} "
                         f"rows; leave n_induced=None when passing induced_points.")
    return U


def validate_cloud(X, name: str = "X", min_samples: int = 2):
    """A cloud checked once: numpy by :func:`flgp._validation.check_cloud`, dask or zarr by
    one pass over its chunks."""
    if is_lazy(X):
        from .._chunks.dask_blocks import DaskBlocks, as_dask_points

        X = as_dask_points(X, name=name)
        with stage("check"):
            DaskBlocks(X).check(name, min_samples=min_samples)
        return X
    return check_cloud(X, name=name, min_samples=min_samples)


def build_cross_graph(X, *, n_induced: int | None = None, n_neighbors: int = 3,
                      subsample: str = "kmeans", kernel: str = "lae",
                      bandwidth: float | None = None, bandwidth_scale: float = 1.0,
                      lae_regularization: float = 1e-3, random_state=None,
                      kmeans_iter: int | None = None, backend: str = "auto",
                      induced_points=None, chunk_size: int | None = None) -> CrossGraph:
    """Steps 1-4 of FLGP: induced points, sparse cross kernel, ``Z``, ``A`` and ``Λ``.

    Parameters
    ----------
    X : array-like, dask array or zarr array of shape (n_samples, n_features)
        The whole cloud (labelled and unlabelled). A dask or zarr array runs the passes as
        Dask tasks (``pip install 'flgp[dask]'``).
    n_induced : int
        ``s``, number of induced points (``2 <= s <= n``); may be left out when
        ``induced_points`` is given.
    n_neighbors : int, default=3
        ``r``, induced points kept per row (``r <= s``).
    subsample : {"kmeans", "random"}, default="kmeans"
        How the induced points are chosen, and the weight of each in ``Z``: its cluster
        size ``n_j`` ("kmeans") or 1 ("random"); with ``induced_points``, only the weight.
    kernel : {"lae", "se"}, default="lae"
    bandwidth : float, optional
        SE ``eps``; default from the data, ``4 eps^2 = bandwidth_scale * mean d^2``
        (see :func:`flgp.graph.cross_kernel.default_bandwidth`).
    bandwidth_scale : float, default=1.0
        The multiplier ``a`` of that rule.
    lae_regularization : float, default=1e-3
        ``γ`` of the LAE local Gram ``G + γ tr(G) I`` (see
        :func:`flgp.graph.cross_kernel.lae_weights`); 0 is the paper's exact LAE.
    random_state : int, Generator or None
    kmeans_iter : int, optional
        Lloyd iterations of the k-means induced points (:func:`kmeans_centres`).
    backend : {"auto", "torch", "keops"}, default="auto"
        Who does the distance work (:mod:`flgp.backends`).
    induced_points : array-like of shape (n_induced, n_features), optional
        Use these induced points instead of choosing them.
    chunk_size : int, optional
        Rows per block of each pass; default from the working-memory budget
        (:func:`flgp.get_config`). The result depends on it only by rounding.

    Returns
    -------
    CrossGraph
    """
    X = validate_cloud(X)
    options = check_graph_options(
        X.shape[0], X.shape[1], n_induced=n_induced, n_neighbors=n_neighbors,
        subsample=subsample, kernel=kernel, bandwidth=bandwidth,
        bandwidth_scale=bandwidth_scale, lae_regularization=lae_regularization,
        backend=backend, induced_points=induced_points, random_state=random_state,
        kmeans_iter=kmeans_iter, chunk_size=chunk_size)
    return cross_graph(X, options)
