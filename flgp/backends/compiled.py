"""flgp's compiled row kernels (``rows.c``, bound by Cython in ``_rows.pyx``), and whether to
use them.

The passes do little arithmetic per row, so in numpy their time goes to creating arrays.
``rows.c`` (built by ``pip install``, see ``setup.py``) does each row's work in one loop
without the GIL, so a pass's blocks run on threads in parallel. Each kernel has a numpy
twin that gives the same result to rounding (tested), run when
``flgp.set_config(compiled=False)`` or when no C compiler was available at install:
:func:`build_tree`/:func:`query` (twin ``cKDTree`` in
:func:`flgp.graph.neighbors.nearest_induced_points`), :func:`lae3`
(:func:`flgp.graph.cross_kernel.lae_weights`), :func:`products`
(:func:`flgp.graph.passes.products_partial`), :func:`transition_rows`/:func:`column_lse`
(:mod:`flgp.graph.transition`), :func:`rows_times`/:func:`rows_quadratic`
(:class:`flgp.spectral.flgp.FLGPRowMap`), :func:`kmeanspp`
(:func:`flgp.graph.induced_points._kmeanspp`) and :func:`scan_cloud`
(:mod:`flgp._validation`).

The search (``build_tree``, ``p <= 16``, exact, ties to the smaller index): a k-d tree over
the induced points plus each one's ``K`` nearest induced points. A query descends to a
leaf, takes its nearest point ``j`` (distance ``δ``) as anchor and scans ``j``'s list by
``D = |u_j - u_k|``, stopping exactly once ``D - δ`` exceeds the ``r``-th best distance
(triangle inequality). Where the list runs out the query searches the tree, and a block
whose first 256 rows mostly run out uses the tree from then on.
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

# points per tree leaf; each induced point's list holds 16 (r + 1) points (few queries
# outrun 64 for r = 3)
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
    """``(indices, squared distances)`` of each row's ``n_neighbors`` nearest tree points,
    nearest first (ties: smaller index); ``threads`` split the rows (results independent of
    the split)."""
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
    """Greedy k-means++ seeding (:func:`flgp.graph.induced_points._kmeanspp`) from the first row
    and the steps' uniforms (``(k - 1) x L``). Returns ``(indices, steps)``; fewer than ``k``
    steps when every point became a centre (the caller draws the rest)."""
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
