"""flgp's compiled row kernels (``rows.c``, bound by Cython in ``_rows.pyx``), and whether
to use them.

The passes over the points do little arithmetic per row - a few distances, a ``3 x 3``
simplex problem, ``r²`` products - so in numpy their time goes to creating arrays, not to
arithmetic. ``rows.c`` (built by ``pip install``, see ``setup.py``) does each row's work
in one loop, without the interpreter lock, so the blocks of a pass run on threads in
parallel. Each kernel, and its numpy twin:

* :func:`build_tree`, :func:`query` - the ``r`` nearest induced points of each point
  (``p <= 16``), exact, ties to the smaller index; twin: ``scipy.spatial.cKDTree`` in
  :func:`flgp.graph.neighbors.nearest_induced_points`;
* :func:`lae3` - LAE weights with three anchors; twin:
  :func:`flgp.graph.cross_kernel.lae_weights`;
* :func:`products` - ``Λ``, ``AᵀA`` and the argmax counts of a block; twin:
  :func:`flgp.graph.passes.products_partial`'s sparse product;
* :func:`transition_rows`, :func:`column_lse` - the rows of ``A`` from the log kernel, the
  column sums as log-sum-exp pairs; twins in :mod:`flgp.graph.transition`;
* :func:`rows_times`, :func:`rows_quadratic` - ``A_b P`` (float64) and ``a S aᵀ`` for a
  block of transition rows; twins: scipy's sparse product, a gather and ``einsum``
  (:class:`flgp.spectral.flgp.FLGPRowMap`);
* :func:`kmeanspp` - greedy k-means++ seeding (``p <= 4``); twin:
  :func:`flgp.graph.induced_points._kmeanspp`;
* :func:`scan_cloud` - finiteness, ``max |x|``, column ranges and row hashes in one read;
  twin: :mod:`flgp._validation`.

Each kernel gives its twin's result to rounding (the tests compare them on the same
inputs); :func:`flgp.set_config` ``(compiled=False)`` runs the twins, and where the
extension was not built (no C compiler at install) the twins run without being asked.

The search (``build_tree``): a k-d tree over the induced points, plus each induced point's
``K`` nearest induced points. A query descends the tree once to a leaf, takes the leaf's
nearest point ``j`` as an anchor at distance ``δ`` and scans ``j``'s list in order of
``D = |u_j - u_k|``: every point not yet scanned is at least ``D - δ`` away (triangle
inequality), so the scan stops, exactly, as soon as ``D - δ`` exceeds the ``r``-th best
distance. On a cloud of low intrinsic dimension that is 10-15 distances a point; where the
list runs out (high intrinsic dimension) the query searches the tree instead, and a block
whose first 256 rows mostly run out searches the tree from then on. The answer is the same
either way: the ``r`` smallest ``(squared distance, index)`` pairs.
"""

from __future__ import annotations

import numpy as np

from .._config import get_config

try:
    import flgp.backends._rows as _rows
except ImportError:          # not built (no compiler at install): the numpy twins run
    _rows = None

__all__ = ["available", "enabled", "build_tree", "query", "lae3", "products",
           "rows_times", "rows_quadratic", "transition_rows", "column_lse", "kmeanspp",
           "scan_cloud", "LIST_PER_NEIGHBOUR", "LEAF_SIZE"]

# points a leaf of the search tree; each induced point's list holds 16 (r + 1) points (64
# for r = 3: on a curve in R^3 0.4% of the queries outrun it, 5% with 32)
LEAF_SIZE = 8
LIST_PER_NEIGHBOUR = 16
# a query splits its rows over threads only when each gets at least this many
_MIN_ROWS_A_THREAD = 50_000


def available() -> bool:
    """Whether the compiled kernels were built and import."""
    return _rows is not None


def enabled() -> bool:
    """Whether the passes use the compiled kernels now: built, and not switched off by
    ``flgp.set_config(compiled=False)``."""
    return _rows is not None and bool(get_config()["compiled"])


def build_tree(U: np.ndarray, n_neighbors: int):
    """The search structure (a compiled ``Tree``, picklable) of the rows of ``U``
    (``s x p``) for queries of ``n_neighbors`` nearest rows."""
    K = LIST_PER_NEIGHBOUR * (int(n_neighbors) + 1)
    return _rows.Tree(np.ascontiguousarray(U, dtype=np.float64), LEAF_SIZE, K)


def query(tree, X: np.ndarray, n_neighbors: int,
          threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, squared distances)`` of each row's ``n_neighbors`` nearest rows of the
    tree's points, nearest first (ties: the smaller index first); ``threads`` split the
    rows (each row's answer does not depend on the split)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, r = X.shape[0], int(n_neighbors)
    idx = np.empty((n, r), dtype=np.int64)
    sq = np.empty((n, r))
    threads = max(1, min(int(threads), n // _MIN_ROWS_A_THREAD))
    if threads == 1:
        tree.query(X, r, idx, sq)
        return idx, sq
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, n, threads + 1).astype(np.int64)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda k: tree.query(X[bounds[k]:bounds[k + 1]], r,
                                           idx[bounds[k]:bounds[k + 1]],
                                           sq[bounds[k]:bounds[k + 1]]), range(threads)))
    return idx, sq


def lae3(X: np.ndarray, U: np.ndarray, indices: np.ndarray, regularization: float,
         coincident_regularization: float) -> np.ndarray:
    """LAE weights of three anchors a row (:func:`flgp.graph.cross_kernel.lae_weights`)."""
    out = np.empty((X.shape[0], 3))
    _rows.lae3(np.ascontiguousarray(X, dtype=np.float64),
               np.ascontiguousarray(U, dtype=np.float64),
               np.ascontiguousarray(indices, dtype=np.int64), float(regularization),
               float(coincident_regularization), out)
    return out


def products(indices: np.ndarray, values: np.ndarray, n_induced: int):
    """``(degrees, gram, top)`` of a block of transition rows: ``Σ_i A_ij``, ``AᵀA``
    (dense ``s x s``) and how many rows have their largest entry at each induced point."""
    s = int(n_induced)
    deg, top = np.zeros(s), np.zeros(s)
    gram = np.zeros((s, s))
    _rows.products(np.ascontiguousarray(indices, dtype=np.int64),
                   np.ascontiguousarray(values, dtype=np.float64), deg, gram, top)
    return deg, gram, top


def rows_times(indices: np.ndarray, values: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``A_b P`` (float64) for transition rows ``(indices, values)`` and a dense ``P``."""
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    out = np.empty((idx.shape[0], P.shape[1]))
    _rows.rows_times(idx, np.ascontiguousarray(values, dtype=np.float64),
                     np.ascontiguousarray(P, dtype=np.float64), out)
    return out


def rows_quadratic(indices: np.ndarray, values: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``a S aᵀ`` for each transition row ``a``."""
    out = np.empty(indices.shape[0])
    _rows.rows_quadratic(np.ascontiguousarray(indices, dtype=np.int64),
                         np.ascontiguousarray(values, dtype=np.float64),
                         np.ascontiguousarray(S, dtype=np.float64), out)
    return out


def transition_rows(log_kernel: np.ndarray, indices: np.ndarray, log_colsum: np.ndarray,
                    log_sizes: np.ndarray | None):
    """``(values, bad)``: the rows of ``A`` and how many rows have no usable entry
    (:func:`flgp.graph.transition.transition_rows`)."""
    lk = np.ascontiguousarray(log_kernel, dtype=np.float64)
    out = np.empty(lk.shape)
    bad = _rows.transition_rows(lk, np.ascontiguousarray(indices, dtype=np.int64),
                                np.ascontiguousarray(log_colsum, dtype=np.float64),
                                None if log_sizes is None
                                else np.ascontiguousarray(log_sizes, dtype=np.float64), out)
    return out, int(bad)


def column_lse(log_kernel: np.ndarray, indices: np.ndarray, n_induced: int):
    """``(2, s)`` column maxima and sums of ``exp(log K - max)``
    (:func:`flgp.graph.transition.column_lse`), or None when a value is NaN or +inf."""
    out = np.empty((2, int(n_induced)))
    ok = _rows.column_lse(np.ascontiguousarray(log_kernel, dtype=np.float64),
                          np.ascontiguousarray(indices, dtype=np.int64), out[0], out[1])
    return out if ok else None


def kmeanspp(X: np.ndarray, k: int, uniforms: np.ndarray, first: int):
    """Greedy k-means++ seeding (:func:`flgp.graph.induced_points._kmeanspp`): the rows of
    ``X`` chosen as centres, from the step's uniforms (``(k - 1) x L``) and the first row.
    Returns ``(indices, steps)``: fewer than ``k`` steps when every point became a centre
    (the caller draws the rest)."""
    idx = np.zeros(int(k), dtype=np.int64)
    done = _rows.kmeanspp(np.ascontiguousarray(X, dtype=np.float64), int(k),
                          np.ascontiguousarray(uniforms, dtype=np.float64), int(first), idx)
    if done < 0:
        raise MemoryError("k-means++ seeding: out of memory for its distance rows.")
    return idx, int(done)


def scan_cloud(X: np.ndarray, multipliers: np.ndarray, hashes: bool = True):
    """One read of ``X`` (C-contiguous float64): ``(finite, max |x|, column minima, column
    maxima, row hashes)`` (the hashes None when not asked for)."""
    n, p = X.shape
    lo, hi = np.empty(p), np.empty(p)
    row_hashes = np.empty(n, dtype=np.uint64) if hashes else None
    finite, absmax = _rows.scan_cloud(X, np.ascontiguousarray(multipliers, dtype=np.uint64),
                                      lo, hi, row_hashes)
    return finite, absmax, lo, hi, row_hashes
