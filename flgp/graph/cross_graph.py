"""The FLGP graph of a point cloud: induced points, r-nearest sparse kernel, transition.

:func:`build_cross_graph` runs steps 1-4 of He et al.'s Algorithm 1 and returns a
:class:`CrossGraph`, which also extends the transition to new points with exactly the same
arithmetic (so a point of the cloud gets back its own row).

Every pass over the points runs over blocks of at most ``chunk_size`` rows
(:mod:`flgp._chunks`; the per-block functions are in :mod:`flgp.graph.passes`), on as many
threads as torch uses. A dask array (or a zarr array) goes to the Dask engine
(:mod:`flgp._dask`), which runs the same block functions as Dask tasks and returns a
:class:`flgp._dask.DaskCrossGraph` holding no ``n``-sized array.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .._chunks import (default_chunk_size, is_dask_array, is_zarr_array, map_row_ranges,
                       row_bytes, row_ranges, stage)
from ..backends import BACKENDS, cpu_threads
from .._validation import (check_duplicates, check_int, check_option, check_points,
                           check_positive)
from .cross_kernel import bandwidth_from_mean
from .landmarks import Landmarks, kmeans_centres, random_landmarks
from .passes import (PRODUCT_ROW_BYTES, CrossStep, lse_finish, lse_partial, merge_partials,
                     products_partial)
from .transition import CrossTransition

__all__ = ["CrossGraph", "OutOfSampleRows", "build_cross_graph"]

SUBSAMPLE_METHODS = ("kmeans", "random")
KERNELS = ("se", "lae")


class OutOfSampleRows:
    """What the in-memory and the Dask graph share: the transition rows of any points
    from the induced points, the kernel and the cloud's column sums and sizes."""

    def _log_sizes(self):
        if self.sizes is None:
            return None
        with np.errstate(divide="ignore"):
            return np.log(self.sizes.astype(np.float64))

    def step(self) -> CrossStep:
        """The block functions' view of this graph (induced points, kernel, column sums,
        sizes): everything :meth:`transition_rows` needs, ``O(s p)`` numbers."""
        return CrossStep(points=self.landmarks.points, kernel=self.kernel,
                         n_neighbors=self.n_neighbors, bandwidth=self.bandwidth,
                         lae_regularization=self.lae_regularization, backend=self.backend,
                         log_colsum=self.log_colsum, log_sizes=self._log_sizes())

    @property
    def n_induced(self) -> int:
        return self.landmarks.points.shape[0]

    def transition_rows(self, X_new: np.ndarray, return_sq: bool = False):
        """Indices and values of ``a(x)``, the transition rows of new points to ``U``
        (``return_sq``: also the squared distances to those induced points, nearest
        first)."""
        X_new = check_points(X_new, name="X", min_samples=1)
        if X_new.shape[1] != self.landmarks.points.shape[1]:
            raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                             f"{self.landmarks.points.shape[1]}.")
        step = self.step()
        idx, sq, log_k = step.rows(X_new)
        rows = step.transition(idx, log_k)
        return (idx, rows, sq) if return_sq else (idx, rows)


@dataclass
class CrossGraph(OutOfSampleRows):
    """Sparse two-step random-walk graph between a cloud ``X`` (n x p) and ``U`` (s x p).

    Attributes
    ----------
    landmarks : Landmarks
    kernel : {"se", "lae"}
    n_neighbors : int
        ``r``.
    bandwidth : float or None
        SE ``eps`` in ``exp(-d^2 / (4 eps^2))``; None for LAE.
    indices, sq_distances : ndarray (n, r)
        Each point's nearest induced points and squared distances to them.
    sizes : ndarray (s,) or None
        k-means cluster sizes ``n_j`` (None for random subsampling).
    transition : CrossTransition
        ``A`` and ``Λ``.
    log_colsum : ndarray (s,)
        ``log Σ_q K_qj`` over the cloud.
    chunk_size : int or None
        Rows per block of the passes over the cloud (None: from the working-memory budget,
        :mod:`flgp._chunks`).

    Notes
    -----
    The graph stores ``O(n r)`` numbers and never an ``n x s`` or ``n x M`` dense array.
    """

    landmarks: Landmarks
    kernel: str
    n_neighbors: int
    bandwidth: float | None
    indices: np.ndarray
    sq_distances: np.ndarray
    sizes: np.ndarray | None
    transition: CrossTransition
    log_colsum: np.ndarray
    lae_regularization: float = 0.0
    backend: str = "auto"
    chunk_size: int | None = None
    _products: dict | None = field(default=None, repr=False, compare=False)

    is_dask = False

    @property
    def n_samples(self) -> int:
        return self.indices.shape[0]

    @property
    def degrees(self) -> np.ndarray:
        """``Λ_jj = Σ_i A_ij``."""
        return self.transition.degrees

    @property
    def nearest_sq_max(self) -> float:
        """The largest squared distance from a point of the cloud to its nearest induced
        point."""
        return float(self.sq_distances[:, 0].max())

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_products"] = None      # s x s; recomputed from the stored rows if needed
        return state

    def cross_products(self) -> dict:
        """``{"degrees", "gram", "argmax"}``: ``Λ``, the ``s x s`` matrix ``AᵀA`` (dense)
        and the number of points whose largest transition probability goes to each induced
        point - sums over blocks of rows (:func:`flgp.graph.passes.products_partial`)."""
        if self._products is None:
            T = self.transition
            s = self.n_induced
            chunk = default_chunk_size(PRODUCT_ROW_BYTES, self.chunk_size)
            parts = map_row_ranges(
                lambda a, b: products_partial(T.indices[a:b], T.values[a:b], s),
                row_ranges(self.n_samples, chunk), cpu_threads())
            self._products = _dense_products(merge_partials(parts), s)
        return self._products

    def with_bandwidth(self, bandwidth: float) -> "CrossGraph":
        """Same induced points and neighbours, new SE bandwidth (cost O(n r))."""
        if self.kernel != "se":
            raise ValueError("with_bandwidth applies to the 'se' kernel only.")
        bandwidth = check_positive(bandwidth, "bandwidth")
        step = replace(self.step(), bandwidth=bandwidth, log_colsum=None)
        transition, log_colsum, products = _finish_numpy(
            step, self.indices, self.sq_distances, None, self.chunk_size)
        return replace(self, bandwidth=bandwidth, transition=transition,
                       log_colsum=log_colsum, _products=products)


def _dense_products(products: dict, s: int) -> dict:
    gram = products["gram"]
    gram = gram.toarray() if hasattr(gram, "toarray") else np.asarray(gram)
    return {"degrees": products["degrees"], "gram": gram.reshape(s, s),
            "argmax": products["argmax"]}


def _finish_numpy(step: CrossStep, idx, sq, log_k, chunk_size):
    """Steps 3-4 over stored neighbour rows: the column sums (unless ``step`` has them),
    the transition rows (written over ``log_k``) and the products. Returns
    ``(CrossTransition, log_colsum, products)``."""
    n, r = idx.shape
    s = step.n_induced
    threads = cpu_threads()
    ranges = row_ranges(n, default_chunk_size(row_bytes(0, r, 0), chunk_size))
    if log_k is None:                                   # SE: from the squared distances
        log_k = np.empty((n, r))

        def fill(a, b):
            log_k[a:b] = step.log_kernel(None, idx[a:b], sq[a:b])
            return {"lse": lse_partial(log_k[a:b], idx[a:b], s)}

        with stage("column sums"):
            lse = merge_partials(map_row_ranges(fill, ranges, threads))["lse"]
        step = replace(step, log_colsum=lse_finish(lse))
    values = log_k

    def rows(a, b):
        v = step.transition(idx[a:b], log_k[a:b])
        values[a:b] = v
        return products_partial(idx[a:b], v, s)

    ranges = row_ranges(n, default_chunk_size(PRODUCT_ROW_BYTES, chunk_size))
    with stage("transition + products"):
        products = _dense_products(merge_partials(map_row_ranges(rows, ranges, threads)), s)
    return (CrossTransition(indices=idx, values=values, degrees=products["degrees"]),
            step.log_colsum, products)


def check_graph_options(n, *, n_induced, n_neighbors, subsample, kernel, bandwidth,
                        bandwidth_scale, lae_regularization, backend, induced_points,
                        n_features):
    """Validate the graph options (shared by the in-memory and the Dask engine); returns
    ``(s, r, induced_points or None)``."""
    check_option(subsample, "subsample", SUBSAMPLE_METHODS)
    check_option(kernel, "kernel", KERNELS)
    if induced_points is not None:
        U = check_points(induced_points, name="induced_points", min_samples=2)
        if U.shape[1] != n_features:
            raise ValueError(f"induced_points has {U.shape[1]} features but X has "
                             f"{n_features}; pass an (n_induced, {n_features}) array.")
        if n_induced is not None and int(n_induced) != U.shape[0]:
            raise ValueError(f"n_induced={n_induced} but induced_points has {U.shape[0]} "
                             f"rows; leave n_induced=None when passing induced_points.")
        s = U.shape[0]
    else:
        U = None
        if n_induced is None:
            raise TypeError("build_cross_graph needs n_induced (or induced_points).")
        s = check_int(n_induced, "n_induced", low=2, high=n, high_name="n_samples",
                      fix="Use at most as many induced points as there are points.")
    r = check_int(n_neighbors, "n_neighbors", low=1, high=s, high_name="n_induced",
                  fix="Each point can keep at most n_induced nearest induced points.")
    check_positive(bandwidth, "bandwidth", allow_none=True)
    check_positive(bandwidth_scale, "bandwidth_scale")
    if not (np.isfinite(lae_regularization) and lae_regularization >= 0):
        raise ValueError(f"lae_regularization must be a finite number >= 0; got "
                         f"{lae_regularization}.")
    check_option(backend, "backend", BACKENDS)
    return s, r, U


def choose_landmarks(X, s, subsample, induced_points, random_state, kmeans_iter, backend):
    """The induced points: the user's, a random subsample, or k-means centres."""
    if induced_points is not None:
        return Landmarks(points=induced_points, method="given")
    if subsample == "random":
        return random_landmarks(X, s, random_state)
    return kmeans_centres(X, s, random_state=random_state, n_iter=kmeans_iter,
                          backend=backend)


def build_cross_graph(X, *, n_induced: int | None = None, n_neighbors: int = 3,
                      subsample: str = "kmeans", kernel: str = "lae",
                      bandwidth: float | None = None, bandwidth_scale: float = 1.0,
                      lae_regularization: float = 1e-3, random_state=None,
                      kmeans_iter: int | None = None, backend: str = "auto",
                      induced_points=None, chunk_size: int | None = None):
    """Steps 1-4 of FLGP: induced points, sparse cross kernel, ``Z``, ``A`` and ``Λ``.

    Parameters
    ----------
    X : array-like, dask array or zarr array of shape (n_samples, n_features)
        The whole cloud (labelled and unlabelled points). A dask or zarr array runs the
        Dask engine (:mod:`flgp._dask`; ``pip install 'flgp[dask]'``) and returns a
        :class:`flgp._dask.DaskCrossGraph`.
    n_induced : int
        ``s``, number of induced points (``2 <= s <= n``); may be left out when
        ``induced_points`` is given.
    n_neighbors : int, default=3
        ``r``, induced points kept per row (``r <= s``).
    subsample : {"kmeans", "random"}, default="kmeans"
        How the induced points are chosen, and the normalisation of ``Z``: "kmeans"
        weights each induced point by its cluster size ``n_j`` (the points whose nearest
        induced point it is), "random" by 1. With ``induced_points`` it only picks the
        normalisation.
    kernel : {"lae", "se"}, default="lae"
    bandwidth : float, optional
        SE ``eps``; default from the data, ``4 eps^2 = bandwidth_scale * mean d^2``
        (see :func:`flgp.graph.cross_kernel.default_bandwidth`).
    bandwidth_scale : float, default=1.0
        The multiplier ``a`` of that rule.
    lae_regularization : float, default=1e-3
        ``γ`` of the LAE local Gram ``G + γ tr(G) I`` (see
        :func:`flgp.graph.cross_kernel.lae_weights`); 0 is the paper's exact LAE. Exact LAE
        gives a point that coincides with an induced point (every induced point under random
        subsampling) weight 1 on it alone, which splits the graph into many pieces.
    random_state : int, Generator or None
    backend : {"auto", "torch", "keops"}, default="auto"
        Who does the distance work (k-means assignments, nearest induced points); see
        :mod:`flgp.backends`.
    induced_points : array-like of shape (n_induced, n_features), optional
        Use these induced points instead of choosing them (the same points make the
        in-memory and the Dask engine give the same graph).
    chunk_size : int, optional
        Rows per block of each pass; default from the working-memory budget
        (:func:`flgp.get_config`). The result does not depend on it beyond rounding.
    """
    if is_dask_array(X) or is_zarr_array(X):
        from .._dask import build_cross_graph_dask

        return build_cross_graph_dask(
            X, n_induced=n_induced, n_neighbors=n_neighbors, subsample=subsample,
            kernel=kernel, bandwidth=bandwidth, bandwidth_scale=bandwidth_scale,
            lae_regularization=lae_regularization, random_state=random_state,
            kmeans_iter=kmeans_iter, backend=backend, induced_points=induced_points,
            chunk_size=chunk_size)
    X = check_points(X)
    n, p = X.shape
    s, r, U = check_graph_options(
        n, n_induced=n_induced, n_neighbors=n_neighbors, subsample=subsample, kernel=kernel,
        bandwidth=bandwidth, bandwidth_scale=bandwidth_scale,
        lae_regularization=lae_regularization, backend=backend,
        induced_points=induced_points, n_features=p)
    default_chunk_size(1, chunk_size)                      # validates chunk_size
    check_duplicates(X)
    with stage("induced points"):
        landmarks = choose_landmarks(X, s, subsample, U, random_state, kmeans_iter, backend)
    step = CrossStep(points=landmarks.points, kernel=kernel, n_neighbors=r,
                     bandwidth=bandwidth, lae_regularization=float(lae_regularization),
                     backend=backend)
    threads = cpu_threads()
    workers = 1 if threads > 1 else None
    idx = np.empty((n, r), dtype=np.int64)
    sq = np.empty((n, r))
    log_k = np.empty((n, r)) if (kernel == "lae" or bandwidth is not None) else None
    kmeans = subsample == "kmeans"

    def first(a, b):
        i, d, lk = step.rows(X[a:b], workers)
        idx[a:b] = i
        sq[a:b] = d
        if lk is not None:
            log_k[a:b] = lk
        return step.cloud_partial(i, d, lk, sizes=kmeans)

    ranges = row_ranges(n, default_chunk_size(row_bytes(p, r, 0), chunk_size))
    with stage("neighbours + kernel"):
        first_pass = merge_partials(map_row_ranges(first, ranges, threads))
    sizes = first_pass["sizes"].astype(np.int64) if kmeans else None
    if kernel == "se" and bandwidth is None:
        bandwidth = bandwidth_from_mean(first_pass["sq_sum"][0] / first_pass["count"][0],
                                        bandwidth_scale)
        step = replace(step, bandwidth=bandwidth)
    if log_k is not None:
        step = replace(step, log_colsum=lse_finish(first_pass["lse"]))
    if sizes is not None:
        with np.errstate(divide="ignore"):
            step = replace(step, log_sizes=np.log(sizes.astype(np.float64)))
    transition, log_colsum, products = _finish_numpy(step, idx, sq, log_k, chunk_size)
    return CrossGraph(landmarks=landmarks, kernel=kernel, n_neighbors=r,
                      bandwidth=bandwidth if kernel == "se" else None, indices=idx,
                      sq_distances=sq, sizes=sizes, transition=transition,
                      log_colsum=log_colsum, lae_regularization=float(lae_regularization),
                      backend=backend, chunk_size=chunk_size, _products=products)
