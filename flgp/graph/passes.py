r"""The FLGP graph as functions of a block of rows ``(X_block, start, stop)``, run by a
driver (:mod:`flgp._chunks`), and their per-block *partials*, merged by
:func:`flgp._chunks.merge_partials`. Passes (He et al., Algorithm 1, steps 2-4):

1. :class:`NeighbourPass` - nearest induced points, squared distances, log kernel; partial:
   cluster sizes, sum of kept squared distances, largest nearest distance, and column sums
   ``c_j = Σ_i K_ij`` as ``(max, Σ exp(· - max))`` pairs;
2. :class:`ColumnSumPass` (SE with the default bandwidth only) - the column sums;
3. :class:`TransitionPass` - the rows of ``A``; partial :func:`products_partial`.

An in-memory cloud stores its rows (:class:`CloudRows`) in pass 1; a Dask cloud
recomputes them in each pass. Nothing here imports dask, GPyTorch or scikit-learn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..backends import compiled
from .._chunks import row_bytes, stage
from .._config import working_memory_bytes
from .cross_kernel import lae_weights, se_log_weights
from .neighbors import nearest_induced_points, search_tree
from .transition import column_lse, transition_rows

__all__ = ["CrossStep", "CloudRows", "NeighbourPass", "ColumnSumPass", "TransitionPass",
           "ProductsPass", "products_partial", "lse_partial", "dense_products",
           "induced_search_tree",
           "PRODUCT_ROW_BYTES", "COMPILED_PRODUCT_ROW_BYTES"]

# bytes per row charged to the products pass over stored rows: more than its working set,
# to keep blocks near 32,768 rows, where the sparse AᵀA stays in cache
PRODUCT_ROW_BYTES = 2048
# the compiled products add each row into a dense s x s partial: large blocks keep them few
COMPILED_PRODUCT_ROW_BYTES = 256


def dense_products(n_induced: int) -> bool:
    """Whether a pass over stored rows forms its products with the compiled kernel: the
    kernels are in use and a dense ``s x s`` partial fits in the working-memory budget."""
    return compiled.enabled() and 8 * int(n_induced) ** 2 <= working_memory_bytes()


def induced_search_tree(points: np.ndarray, n_neighbors: int, backend: str):
    """:func:`flgp.graph.neighbors.search_tree` of a graph's induced points, or None where
    its searches do not use one (``backend="keops"`` as well)."""
    return None if backend == "keops" else search_tree(points, n_neighbors)


@dataclass
class CrossStep:
    """What the per-block functions need to know about the graph (``O(s p)``).

    ``bandwidth``: None for LAE, and for SE until the default is known; ``log_colsum`` and
    ``log_sizes``: None until pass 1 has run; ``tree``: the shared compiled search
    structure of ``points``, not pickled (rebuilt at first use).
    """

    points: np.ndarray
    kernel: str
    n_neighbors: int
    bandwidth: float | None = None
    lae_regularization: float = 0.0
    backend: str = "auto"
    log_colsum: np.ndarray | None = None
    log_sizes: np.ndarray | None = None
    tree: object = field(default=None, repr=False, compare=False)

    @property
    def n_induced(self) -> int:
        return int(self.points.shape[0])

    def rows(self, X: np.ndarray, workers: int | None = None):
        """``(indices, sq_distances, log_kernel)`` of a block (``log_kernel`` None for SE
        while its bandwidth is unknown)."""
        idx, sq = self.nearest(X, workers)
        return idx, sq, self.log_kernel(X, idx, sq)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["tree"] = None
        return state

    def search(self):
        """The compiled search structure of the induced points, built at first use (None
        where the search does not use one)."""
        if self.tree is None:
            self.tree = induced_search_tree(self.points, self.n_neighbors, self.backend)
        return self.tree

    def nearest(self, X: np.ndarray, workers: int | None = None):
        """``(indices, squared distances)`` of each row's ``r`` nearest induced points."""
        return nearest_induced_points(X, self.points, self.n_neighbors, backend=self.backend,
                                      workers=workers, tree=self.search())

    def log_kernel(self, X, idx, sq):
        """``log K`` on the kept pairs (``-inf`` where an LAE weight is 0)."""
        if self.kernel == "se":
            return None if self.bandwidth is None else se_log_weights(sq, self.bandwidth)
        with np.errstate(divide="ignore"):
            return np.log(lae_weights(X, self.points, idx,
                                      regularization=self.lae_regularization))

    def cloud_partial(self, idx, sq, log_kernel, sizes: bool) -> dict:
        """Pass 1's partial of a block."""
        s = self.n_induced
        out = {"sq_sum": np.array([float(sq.sum())]), "count": np.array([float(sq.size)]),
               "nearest_max": np.array([float(sq[:, 0].max()) if len(sq) else -np.inf])}
        if sizes:
            out["sizes"] = np.bincount(idx[:, 0], minlength=s).astype(np.float64)
        if log_kernel is not None:
            out["lse"] = lse_partial(log_kernel, idx, s)
        return out

    def transition(self, idx, log_kernel):
        """Rows of ``A`` (``r`` values each) from the log kernel."""
        return transition_rows(log_kernel, idx, self.log_colsum, self.log_sizes)

    def transition_rows(self, X: np.ndarray, workers: int | None = None):
        """``(indices, values, sq_distances)``: the rows of ``A`` of any points, recomputed
        from their coordinates (nearest first)."""
        idx, sq, log_k = self.rows(X, workers)
        return idx, self.transition(idx, log_k), sq


@dataclass
class CloudRows:
    """An in-memory cloud's ``(n, r)`` rows: nearest induced points, squared distances and
    ``values`` (the log kernel, overwritten by the rows of ``A`` in pass 3)."""

    indices: np.ndarray
    sq_distances: np.ndarray
    values: np.ndarray

    @classmethod
    def empty(cls, n: int, r: int) -> "CloudRows":
        return cls(np.empty((n, r), dtype=np.int64), np.empty((n, r)), np.empty((n, r)))


def layout_of_cloud_partial(s: int, sizes: bool, lse: bool) -> list:
    """The Dask driver's layout of :meth:`CrossStep.cloud_partial`."""
    out = [("sq_sum", (1,)), ("count", (1,)), ("nearest_max", (1,))]
    if sizes:
        out.append(("sizes", (s,)))
    if lse:
        out.append(("lse", (2, s)))
    return out


class NeighbourPass:
    """Pass 1: neighbours, squared distances, log kernel (into ``rows`` if kept) and
    :meth:`CrossStep.cloud_partial`."""

    def __init__(self, step: CrossStep, sizes: bool, rows: CloudRows | None,
                 workers: int | None):
        self.step, self.sizes, self.rows, self.workers = step, sizes, rows, workers

    def bytes_per_row(self, n_features: int) -> int:
        return row_bytes(n_features, self.step.n_neighbors, 0)

    def layout(self, lse: bool) -> list:
        return layout_of_cloud_partial(self.step.n_induced, self.sizes, lse)

    def __call__(self, Xb, a, b):
        with stage("pass 1/neighbour search"):
            idx, sq = self.step.nearest(Xb, self.workers)
        with stage("pass 1/kernel weights"):
            log_k = self.step.log_kernel(Xb, idx, sq)
        if self.rows is not None:
            self.rows.indices[a:b] = idx
            self.rows.sq_distances[a:b] = sq
            if log_k is not None:
                self.rows.values[a:b] = log_k
        with stage("pass 1/partials"):
            return self.step.cloud_partial(idx, sq, log_k, sizes=self.sizes)


class ColumnSumPass:
    """Pass 2 (SE with the default bandwidth): the log kernel (into ``rows`` if kept) and
    its column sums."""

    def __init__(self, step: CrossStep, rows: CloudRows | None):
        self.step, self.rows = step, rows

    def bytes_per_row(self, n_features: int) -> int:
        return row_bytes(0 if self.rows is not None else n_features, self.step.n_neighbors, 0)

    def layout(self) -> list:
        return [("lse", (2, self.step.n_induced))]

    def __call__(self, Xb, a, b):
        if self.rows is None:
            idx, _, log_k = self.step.rows(Xb, workers=1)
        else:
            idx = self.rows.indices[a:b]
            log_k = self.step.log_kernel(None, idx, self.rows.sq_distances[a:b])
            self.rows.values[a:b] = log_k
        return {"lse": lse_partial(log_k, idx, self.step.n_induced)}


class TransitionPass:
    """Pass 3: the rows of ``A`` (into ``rows`` if kept) and :func:`products_partial`."""

    def __init__(self, step: CrossStep, rows: CloudRows | None):
        self.step, self.rows = step, rows

    def bytes_per_row(self, n_features: int) -> int:
        if self.rows is not None:
            return COMPILED_PRODUCT_ROW_BYTES if dense_products(self.n_induced) \
                else PRODUCT_ROW_BYTES
        return row_bytes(n_features, self.step.n_neighbors, 0)

    @property
    def n_induced(self) -> int:
        return self.step.n_induced

    def layout(self) -> list:
        return products_layout(self.n_induced)

    def __call__(self, Xb, a, b):
        if self.rows is None:
            idx, _, log_k = self.step.rows(Xb, workers=1)
        else:
            idx, log_k = self.rows.indices[a:b], self.rows.values[a:b]
        values = self.step.transition(idx, log_k)
        if self.rows is not None:
            self.rows.values[a:b] = values
        return products_partial(idx, values, self.step.n_induced,
                                dense=self.rows is not None)


class ProductsPass:
    """:func:`products_partial` of stored transition rows (an unpickled in-memory graph)."""

    def __init__(self, n_induced: int, rows: CloudRows):
        self.n_induced, self.rows = int(n_induced), rows

    def bytes_per_row(self, n_features: int) -> int:
        return COMPILED_PRODUCT_ROW_BYTES if dense_products(self.n_induced) \
            else PRODUCT_ROW_BYTES

    def layout(self) -> list:
        return products_layout(self.n_induced)

    def __call__(self, Xb, a, b):
        return products_partial(self.rows.indices[a:b], self.rows.values[a:b],
                                self.n_induced, dense=True)


def products_layout(s: int) -> list:
    return [("degrees", (s,)), ("gram", (s, s)), ("argmax", (s,))]


def lse_partial(log_kernel: np.ndarray, idx: np.ndarray, s: int) -> np.ndarray:
    """:func:`flgp.graph.transition.column_lse` of a block (or its compiled twin);
    ValueError for NaN or ``+inf`` kernel values."""
    pair = compiled.column_lse(log_kernel, idx, s) if compiled.enabled() else None
    if pair is not None:
        return pair
    if not np.all(np.isfinite(log_kernel) | (log_kernel == -np.inf)):
        raise ValueError("kernel values must be finite or zero; got NaN or +inf.")
    return column_lse(log_kernel, idx, s)


def products_partial(idx: np.ndarray, values: np.ndarray, s: int,
                     dense: bool = False) -> dict:
    """Pass 3's partial of a block of rows of ``A``: ``degrees`` (``Σ_i A_ij``), ``gram``
    (``AᵀA``, sparse CSR) and ``argmax`` (rows whose largest entry is at each induced
    point, i.e. the piece sizes). ``dense``: a dense ``gram`` from the compiled kernel where
    :func:`dense_products` allows (for partials that stay in the process)."""
    if dense and dense_products(s):
        degrees, gram, top = compiled.products(idx, values, s)
        return {"degrees": degrees, "gram": gram, "argmax": top}
    n, r = idx.shape
    A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, n * r + 1, r)),
                      shape=(n, s))
    gram = (A.T @ A).tocsr()
    top = idx[np.arange(n), values.argmax(axis=1)] if n else np.zeros(0, dtype=np.int64)
    return {"degrees": np.bincount(idx.ravel(), weights=values.ravel(), minlength=s),
            "gram": gram,
            "argmax": np.bincount(top, minlength=s).astype(np.float64)}
