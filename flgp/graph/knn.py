r"""k-nearest-neighbour graphs on the points themselves.

* The Gaussian k-NN graph ``exp(-|x - y|^2 / eps)`` (Gigante et al. Sec. II-A, the
  compressed diffusion map's graph), ``eps`` from :func:`knn_epsilon` (not the FLGP
  engine's SE bandwidth), and its :class:`~flgp.graph.PointGraph` form
  :func:`knn_point_graph`;
* Poisson learning's self-tuning graph (:func:`self_tuning_knn_graph`), searched by
  :func:`bucket_knn` in many dimensions.

The graph builders and :func:`bucket_knn` raise ``ValueError`` for ``X`` with NaN or
infinite rows (counting them and naming the first).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree
from sklearn.neighbors import NearestNeighbors

from .._validation import check_points
from .._chunks.blocks import map_threads
from ..backends import cpu_threads, limit_blas_threads
from .induced_points import kmeans_centres
from .neighbors import KDTREE_MAX_DIM, nearest_induced_points, smallest_columns
from .point_graph import PointGraph

__all__ = ["knn_epsilon", "NeighborIndex", "gaussian_knn_graph", "knn_point_graph",
           "bucket_knn", "self_tuning_knn_graph"]


def knn_epsilon(sq_dist: np.ndarray, n_neighbors: int) -> float:
    """``eps = mean_x d_m(x)^2``, ``d_m`` the distance to the ``m = ceil(k / 3)``-th nearest
    other point: on a 2-d manifold the weight at the k-th neighbour is then about
    ``exp(-3)``, so the kept graph carries nearly the whole Gaussian."""
    m = max(1, int(np.ceil(n_neighbors / 3)))
    return float(np.mean(sq_dist[:, m]))


class NeighborIndex:
    """Exact k-nearest-neighbour search over a fixed cloud: ``scipy.spatial.cKDTree``
    (sliding-midpoint splits) up to ``KDTREE_MAX_DIM`` features, scikit-learn's
    ``NearestNeighbors`` above."""

    def __init__(self, X: np.ndarray):
        if X.shape[1] <= KDTREE_MAX_DIM:
            self._tree, self._nn = cKDTree(X, balanced_tree=False), None
        else:
            self._tree, self._nn = None, NearestNeighbors().fit(X)

    def kneighbors(self, X: np.ndarray, n_neighbors: int):
        """``(distances, indices)``, both ``(len(X), n_neighbors)``, nearest first."""
        k = int(n_neighbors)
        if self._tree is None:
            return self._nn.kneighbors(X, n_neighbors=k)
        dist, ind = self._tree.query(X, k=k, workers=cpu_threads())
        return (np.asarray(dist, dtype=np.float64).reshape(-1, k),
                np.asarray(ind, dtype=np.int64).reshape(-1, k))


def gaussian_knn_graph(X: np.ndarray, n_neighbors: int, bandwidth: float | None = None):
    r"""Sparse symmetric Gaussian graph on the k nearest neighbours (Sec. II-A).

    ``G_xy = exp(-||x - y||^2 / eps)`` whenever ``y`` is among the ``k`` nearest neighbours
    of ``x`` or ``x`` among those of ``y``; ``G_xx = 1``.

    Returns
    -------
    G : csr_matrix (n, n), float64, symmetric
    eps : float
    nn : :class:`NeighborIndex` over ``X`` (search ``k + 1`` neighbours, self included)
    kth_sq_dist : ndarray (n,)
        Squared distance from each point to the last of its ``k + 1`` neighbours (self
        included): ``x in kNN(y)`` iff ``||x - y||^2 <= kth_sq_dist[y]``.

    Raises
    ------
    ValueError
        ``X`` with NaN or infinite rows, or coordinates too large for squared distances.
    """
    X = _cloud(X)
    G, eps, nn, dist = _gaussian_knn(X, n_neighbors, bandwidth)
    return G, eps, nn, dist[:, -1] ** 2


def _cloud(X) -> np.ndarray:
    """``X`` as a C-contiguous float64 cloud with no NaN or infinite rows."""
    return check_points(X, name="X", min_samples=1)


def _gaussian_knn(X: np.ndarray, n_neighbors: int, bandwidth: float | None = None):
    """:func:`gaussian_knn_graph` with the search's distances: ``(G, eps, nn, dist)``,
    ``dist`` ``(n, k + 1)`` to each point's ``k + 1`` nearest points, self included."""
    n = X.shape[0]
    k = int(n_neighbors)
    nn = NeighborIndex(X)
    dist, ind = nn.kneighbors(X, k + 1)
    sq = dist ** 2
    if bandwidth is None:
        eps = knn_epsilon(sq, k)
        if not eps > 0:
            raise ValueError("the default bandwidth is 0: most points coincide with their "
                             "nearest neighbours. Remove duplicate rows or pass bandwidth=.")
    else:
        eps = float(bandwidth)
    rows = np.repeat(np.arange(n), k + 1)
    G = sp.csr_matrix((np.exp(-sq.ravel() / eps), (rows, ind.ravel())), shape=(n, n))
    # symmetrise (union of the k-NN sets; g is symmetric) and set g(x, x) = 1 even where a
    # duplicate displaced x from its own neighbour list (all weights are <= 1)
    G = G.maximum(G.T)
    if not np.array_equal(ind[:, 0], np.arange(n)):
        G = G.maximum(sp.identity(n, format="csr"))
    G = G.tocsr()
    G.sort_indices()
    return G, eps, nn, dist


def knn_point_graph(X: np.ndarray, n_neighbors: int = 10) -> "PointGraph":
    r"""The k-nearest-neighbour graph of a cloud as a :class:`~flgp.graph.PointGraph`.

    Weights ``w_ij = exp(-|x_i - x_j|² / ε)`` on the union of the k-NN sets (``ε``:
    :func:`knn_epsilon`); stiffness ``G = D - W``, lumped mass ``C = D ε / 4``, so that
    ``C⁻¹ G ≈ -Δ`` in ``1 / length²`` (``Σ_j w_ij (f_j - f_i) ≈ D_i (ε/4) Δf``, whatever
    the sampling density). ``spacing``: the median nearest-neighbour distance. ValueError
    for ``n_neighbors`` outside ``1 .. n - 1``, duplicate points without other neighbours,
    or outliers whose weights vanish.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).random((500, 2))
    >>> g = knn_point_graph(X, 10)
    >>> g.n_nodes, g.kind
    (500, 'knn')
    """
    X = _cloud(X)
    n = X.shape[0]
    k = int(n_neighbors)
    if not 1 <= k < n:
        raise ValueError(f"n_neighbors must be between 1 and n - 1 = {n - 1}; got {k}.")
    G, eps, _, dist = _gaussian_knn(X, k)
    W = G.tocsr(copy=True)
    W.setdiag(0.0)
    W.eliminate_zeros()
    degree = np.asarray(W.sum(axis=1)).ravel()
    d1 = dist[:, 1]                 # to the nearest other point (the search's own)
    if np.any((degree <= 0) & (d1 <= 0)):
        raise ValueError(f"{int(np.sum((degree <= 0) & (d1 <= 0)))} point(s) have no "
                         f"neighbour at a non-zero distance (duplicates of each other?); "
                         f"remove duplicate rows or raise n_neighbors.")
    # one bandwidth for the whole cloud: a point far from all others gets a degree below
    # float64 resolution (mass 0, or a row of C⁻¹G beyond float64)
    cut = np.finfo(np.float64).eps * float(np.median(degree))
    if np.any(degree <= cut):
        far = np.flatnonzero(degree <= cut)
        worst = int(far[np.argmax(d1[far])])
        raise ValueError(f"{far.size} point(s) lie so far from all others that their "
                         f"weights under the cloud's bandwidth vanish (row {worst}: its "
                         f"nearest neighbour at {d1[worst]:.3g}, {d1[worst] / np.sqrt(eps):.0f} "
                         f"bandwidths away; typical spacing {np.median(d1[d1 > 0]):.3g}). "
                         f"Remove the outliers, or give a graph that joins them.")
    stiffness = (sp.diags(degree) - W).tocsr()
    spacing = float(np.median(d1[d1 > 0])) if np.any(d1 > 0) else float(np.sqrt(eps))
    return PointGraph(stiffness=stiffness, mass=degree * eps / 4.0, points=X, kind="knn",
                      spacing=spacing)


def bucket_knn(X: np.ndarray, n_neighbors: int, *, n_probe: int = 6, n_buckets=None,
               random_state=0):
    """The ``n_neighbors`` nearest other rows of every row of ``X``, approximately, for
    clouds in many dimensions: ``(indices, squared distances)``, nearest first.

    k-means centres cut the cloud into buckets (``n_buckets`` default
    ``min(1000, max(1, n // 64))``); a point's candidates are the points of the buckets of
    its ``n_probe`` nearest centres, searched by one float32 GEMM per bucket, and the kept
    distances are recomputed in float64. A true neighbour is missed only when its bucket's
    centre is not among the point's ``n_probe`` nearest (recall: docs/few_labels.md).
    Below 16 features the exact ``NeighborIndex`` is cheaper.
    """
    return _bucket_knn(_cloud(X), n_neighbors, n_probe=n_probe, n_buckets=n_buckets,
                       random_state=random_state)


def _bucket_knn(X: np.ndarray, n_neighbors: int, *, n_probe: int = 6, n_buckets=None,
                random_state=0):
    """:func:`bucket_knn` of a checked cloud (C-contiguous float64, finite)."""
    n = X.shape[0]
    k = int(n_neighbors)
    if not 1 <= k < n:
        raise ValueError(f"n_neighbors must be between 1 and n - 1 = {n - 1}; got {k}.")
    s = int(n_buckets) if n_buckets is not None else int(min(1000, max(1, n // 64)))
    s = max(1, min(s, n))
    # the buckets need centres that cover the cloud, not converged ones
    centres = kmeans_centres(X, s, random_state=random_state, n_iter=3).points
    probe = int(min(n_probe, centres.shape[0]))
    near, _ = nearest_induced_points(X, centres, probe)          # (n, probe), nearest first
    primary = near[:, 0]
    order = np.argsort(primary, kind="stable")
    starts = np.searchsorted(primary[order], np.arange(s + 1))
    Xf = X.astype(np.float32)
    half = 0.5 * np.einsum("ij,ij->i", Xf, Xf)
    indices = np.empty((n, k), dtype=np.int64)
    # many small GEMMs, where BLAS threads synchronise more than they compute: the buckets
    # are shared among threads, each on one BLAS thread; each bucket writes its own rows
    threads = cpu_threads()
    groups = np.array_split(np.arange(s), min(s, 8 * threads))
    with limit_blas_threads(1):
        map_threads(lambda group: _bucket_search(group, order, starts, near, half, Xf, k,
                                                 indices), groups, threads)
    sq = np.empty((n, k))
    step = max(1, 4_000_000 // max(1, k * X.shape[1]))
    for a in range(0, n, step):
        diff = X[indices[a:a + step]] - X[a:a + step, None, :]
        sq[a:a + step] = np.einsum("ijk,ijk->ij", diff, diff)
    srt = np.argsort(sq, axis=1, kind="stable")
    return np.take_along_axis(indices, srt, 1), np.take_along_axis(sq, srt, 1)


def _bucket_search(group, order, starts, near, half, Xf, k, indices):
    """The candidates' search of :func:`bucket_knn` for the buckets ``group``, bucket by
    bucket, into ``indices``."""
    for c in group:
        members = order[starts[c]:starts[c + 1]]
        if members.size == 0:
            continue
        buckets = np.unique(near[members])
        sizes = starts[buckets + 1] - starts[buckets]
        cand = np.concatenate([order[starts[b]:starts[b + 1]] for b in buckets])
        # |x|²/2 - x·y ranks the candidates of each member as |x - y|² does
        S = half[cand][None, :] - Xf[members] @ Xf[cand].T
        S[cand[None, :] == members[:, None]] = np.inf               # not the point itself
        kk = min(k, cand.size - 1)
        if 0 < kk < members.size:
            # the members' own bucket (c is among the probed ones) bounds each member's
            # kk-th smallest from above: only the entries under the bound are ranked
            at = int(np.searchsorted(buckets, c))
            own = slice(int(sizes[:at].sum()), int(sizes[:at + 1].sum()))
            pick = _smallest_under_bound(S, kk, S[:, own])
        else:
            pick = smallest_columns(S, kk) if kk > 0 else np.empty((members.size, 0), int)
        got = cand[pick]
        if kk < k:       # fewer candidates than neighbours: these members against every row
            S = half[None, :] - Xf[members] @ Xf.T
            S[np.arange(members.size), members] = np.inf
            got = smallest_columns(S, k)
        indices[members] = got


def _smallest_under_bound(S: np.ndarray, k: int, subset: np.ndarray) -> np.ndarray:
    """Column indices of the ``k`` smallest entries of each row of ``S`` (unsorted).
    ``subset`` (some of ``S``'s columns, at least ``k`` finite entries a row) bounds each
    row's ``k``-th smallest from above, so only the entries under the bound are ranked."""
    bound = np.partition(subset, k - 1, axis=1)[:, k - 1]
    rows, cols = np.nonzero(S <= bound[:, None])
    o = np.lexsort((S[rows, cols], rows))
    rows, cols = rows[o], cols[o]
    first = np.searchsorted(rows, np.arange(S.shape[0]))
    return cols[first[:, None] + np.arange(k)]


# above this many features the k-NN graphs are searched by buckets (bucket_knn)
BUCKET_MIN_DIM = 17


def self_tuning_knn_graph(X: np.ndarray, n_neighbors: int = 10, *, random_state=0):
    """Poisson learning's k-NN graph (Calder et al. 2020; graphlearning's default) as a
    :class:`~flgp.graph.PointGraph`: ``w_ij = exp(-4 |x_i - x_j|² / d_k(x_i)²)`` on each
    point's ``k`` nearest neighbours, symmetrised as ``(W + Wᵀ)/2``, stiffness ``D - W``,
    unit mass. Exact neighbours up to 16 features, :func:`bucket_knn` above."""
    X = _cloud(X)
    n = X.shape[0]
    k = int(n_neighbors)
    if not 1 <= k < n:
        raise ValueError(f"n_neighbors must be between 1 and n - 1 = {n - 1}; got {k}.")
    if X.shape[1] >= BUCKET_MIN_DIM:
        ind, sq = _bucket_knn(X, k, random_state=random_state)
    else:
        dist, ind = NeighborIndex(X).kneighbors(X, k + 1)
        # drop each point's own entry (the first, or wherever a duplicate put it)
        own = ind == np.arange(n)[:, None]
        keep = ~own
        keep[own.sum(1) == 0, -1] = False
        ind = ind[keep].reshape(n, k)
        sq = (dist[keep].reshape(n, k)) ** 2
    if np.any(sq == 0):                         # repeated rows (found among the neighbours)
        _, first, where = np.unique(X, axis=0, return_index=True, return_inverse=True)
        if 1 < first.size < n:
            # the distinct positions in the order they first appear (the search then sees
            # the rows it would see without the copies)
            order = np.argsort(first)
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            return _with_duplicates(X, X[first[order]], rank[np.asarray(where).ravel()], k,
                                    random_state)
    scale = sq[:, -1:].copy()
    scale[scale <= 0] = 1.0                   # a point whose k neighbours coincide with it
    w = np.exp(-4.0 * sq / scale)
    W = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(n), k), ind.ravel())), shape=(n, n))
    W = (0.5 * (W + W.T)).tocsr()
    W.setdiag(0.0)
    W.eliminate_zeros()
    degree = np.asarray(W.sum(axis=1)).ravel()
    if np.any(degree <= 0):
        raise ValueError(f"{int(np.sum(degree <= 0))} point(s) have no neighbour with a "
                         f"non-zero weight; remove duplicate rows or raise n_neighbors.")
    positive = np.sqrt(sq[:, 0][sq[:, 0] > 0])
    spacing = float(np.median(positive)) if positive.size else 1.0
    return PointGraph(stiffness=(sp.diags(degree) - W).tocsr(), mass=np.ones(n), points=X,
                      kind="knn", spacing=spacing)


def _with_duplicates(X, positions, where, k, random_state):
    """:func:`self_tuning_knn_graph` of a cloud with repeated rows: the graph of its
    distinct positions, every copy joined to every copy of its neighbours (their weight)
    and to its own copies (weight 1), so that copies do not fill each other's neighbour
    slots and split the graph."""
    n = X.shape[0]
    distinct = self_tuning_knn_graph(positions, min(k, positions.shape[0] - 1),
                                     random_state=random_state)
    W_positions = sp.diags(distinct.stiffness.diagonal()) - distinct.stiffness
    copies = sp.csr_matrix((np.ones(n), (np.arange(n), where)),
                           shape=(n, positions.shape[0]))
    W = (copies @ W_positions @ copies.T + copies @ copies.T).tocsr()
    W.setdiag(0.0)
    W.eliminate_zeros()
    degree = np.asarray(W.sum(axis=1)).ravel()
    return PointGraph(stiffness=(sp.diags(degree) - W).tocsr(), mass=np.ones(n), points=X,
                      kind="knn", spacing=distinct.spacing)
