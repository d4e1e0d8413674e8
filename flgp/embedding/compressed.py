r"""Compressed diffusion maps (Gigante et al., *Compressed Diffusion*, papers/003): diffusion
geometry between data *regions*, interpolated back to the points (docs/compressed_diffusion.md).

1. Gaussian kNN graph ``g(x, y) = exp(-||x - y||^2 / eps)`` (``g(x, x) = 1``), degrees ``q``,
   ``P = Q^{-1} G``, ``A = Q^{-1/2} G Q^{-1/2}`` [Sec. II-A, Def. 3].
2. Centroids sampled proportionally to the coherence ``rho_t(x) = [A^{2t}]_{xx}`` [Prop. 4];
   partition by least angular diffusion distance [Def. 5, Prop. 5].
3. Compressed inverse-density kernel ``K_S = chi^T G Q^{-1} G chi`` (``chi``: ``n x N``
   membership), ``P_S = D_S^{-1} K_S`` [Defs. 1-2, Theorem 2].
4. Region diffusion map ``(lambda_l^t phi_l(S))_l`` from the eigenpairs of ``P_S`` [Sec. V],
   interpolated to points by Theorem 2's transition probabilities.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.neighbors import NearestNeighbors
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_cloud, check_int, check_random_state
from ..graph.pieces import KERNEL_FLOOR, Pieces, connected_pieces
from ..graph.knn import gaussian_knn_graph
from ..graph.induced_points import kmeans_centres
from ._base import DISCONNECTED, POSITIVE, _user_stacklevel, check_powering_cost
from ._pieces import assemble

__all__ = ["CompressedDiffusionMap", "compressed_kernel",
           "diffusion_coherence", "sample_centroids", "snapped_kmeans_centroids",
           "assign_partitions", "region_diffusion_map"]

INTERPOLATIONS = ("point_to_region", "region_to_point")
CENTROIDS = ("coherence", "kmeans")

# centroid columns diffused together in the assignment step (memory: n x chunk floats)
_ASSIGN_CHUNK = 256


# --------------------------------------------------------------------------- graph


def _affinity(G: sp.csr_matrix, q: np.ndarray) -> sp.csr_matrix:
    """``A = Q^{-1/2} G Q^{-1/2}`` (Definition 3), the symmetric conjugate of ``P``."""
    s = 1.0 / np.sqrt(q)
    G = sp.csr_matrix(G)
    rows = np.repeat(np.arange(G.shape[0]), np.diff(G.indptr))
    return sp.csr_matrix((G.data * s[rows] * s[G.indices], G.indices.copy(),
                          G.indptr.copy()), shape=G.shape)


# --------------------------------------------------------------------------- partition


def diffusion_coherence(A: sp.csr_matrix, t: int, *, n_probes: int = 64,
                        random_state=None) -> np.ndarray:
    r"""Diffusion coherence ``rho_t(x) = [A^{2t}]_{xx}`` (Proposition 4).

    Exact for ``t = 1``; for ``t > 1`` the unbiased estimate ``||(A^t R)_{x,.}||^2 / n_probes``
    from Rademacher probes ``R`` (relative error about ``sqrt(2 / n_probes)``).
    """
    if t == 1:
        return np.asarray(A.multiply(A).sum(axis=1)).ravel()
    rng = check_random_state(random_state)
    Y = rng.choice([-1.0, 1.0], size=(A.shape[0], n_probes))
    for _ in range(t):
        Y = A @ Y
    return np.einsum("ij,ij->i", Y, Y) / n_probes


def sample_centroids(coherence: np.ndarray, n_partitions: int, random_state=None):
    """Centroids by random sampling without replacement biased by coherence (Sec. V)."""
    rng = check_random_state(random_state)
    p = np.asarray(coherence, dtype=np.float64)
    p = p / p.sum()
    return np.sort(rng.choice(p.size, size=n_partitions, replace=False, p=p))


def snapped_kmeans_centroids(X: np.ndarray, n_partitions: int, random_state=None) -> np.ndarray:
    """Sorted indices of the free data points nearest to k-means centres (among each centre's
    8 nearest, else a random free one); not the paper's rule (docs/compressed_diffusion.md)."""
    rng = check_random_state(random_state)
    n = X.shape[0]
    U = kmeans_centres(X, n_partitions, random_state=rng).points
    cand = NearestNeighbors(n_neighbors=min(n, 8)).fit(X).kneighbors(
        np.asarray(U, dtype=np.float64), return_distance=False)
    taken = np.zeros(n, dtype=bool)
    out = []
    for row in cand:
        free = row[~taken[row]]
        i = int(free[0]) if free.size else int(rng.choice(np.flatnonzero(~taken)))
        taken[i] = True
        out.append(i)
    return np.sort(np.asarray(out, dtype=np.int64))


def _neighbours(G: sp.csr_matrix, rows: np.ndarray) -> np.ndarray:
    """Boolean mask of the columns that the given rows of ``G`` touch."""
    mask = np.zeros(G.shape[0], dtype=bool)
    mask[G[rows].indices] = True
    return mask


def _hop_levels(G: sp.csr_matrix, sources: np.ndarray) -> np.ndarray:
    """Graph hop distance from the nearest source (-1 where unreachable)."""
    level = np.full(G.shape[0], -1, dtype=np.int64)
    frontier = np.unique(np.asarray(sources, dtype=np.int64))
    level[frontier] = 0
    step = 0
    while frontier.size:
        step += 1
        frontier = np.flatnonzero(_neighbours(G, frontier) & (level < 0))
        level[frontier] = step
    return level


def assign_partitions(A: sp.csr_matrix, centroids: np.ndarray, t: int,
                      X: np.ndarray | None = None, max_steps: int | None = None) -> np.ndarray:
    r"""Assign every point to the centroid of least angular diffusion distance (Def. 5):
    ``argmax_y a^{2t}(x, y) / sqrt(rho_t(y))`` (Proposition 5), from the columns ``A^{2t} e_y``.

    A point more than ``2t`` hops from every centroid (a tie at ``pi / 2``) uses the smallest
    ``tau > t`` reaching a centroid, while ``2 tau <= max_steps`` (``None``: no limit); the
    rest join, level by level outward, the region maximising ``sum_{y in S_j} A_xy``. Points
    in a piece without a centroid go to the Euclidean-nearest centroid (without ``X``, to
    region 0; warns).

    Returns
    -------
    labels : ndarray (n,), int64, values in ``0..len(centroids)-1``
    """
    n = A.shape[0]
    centroids = np.asarray(centroids, dtype=np.int64)
    level = _hop_levels(A, centroids)
    reach = level >= 0
    # step at which each point is scored: smallest even number >= max(2t, hop level)
    step_of = np.maximum(2 * t, level + (level % 2))
    step_of[~reach] = -1
    max_step = int(step_of.max()) if reach.any() else 0
    if max_steps is not None:
        max_step = min(max_step, max(2 * t, int(max_steps)))
    best = np.full(n, -np.inf)
    labels = np.full(n, -1, dtype=np.int64)
    A_step = _restricted_operators(A, step_of, max_step)
    for start in range(0, centroids.size, _ASSIGN_CHUNK):
        cols = centroids[start:start + _ASSIGN_CHUNK]
        c = cols.size
        # A^s e_y lives on the s-hop ball of y: sparse until a quarter of the block fills
        Y = sp.csr_matrix((np.ones(c), (cols, np.arange(c))), shape=(n, c))
        rho = {}  # rho_tau(y) = ||A^tau e_y||^2 = [A^{2 tau}]_yy
        for step in range(1, max_step + 1):
            Y = A_step[step] @ Y
            if sp.issparse(Y) and Y.nnz > 0.25 * n * c:
                Y = Y.toarray()
            if t <= step and 2 * step <= max_step:   # a scored step 2 * step needs it
                if sp.issparse(Y):
                    rho[2 * step] = np.bincount(Y.indices, weights=Y.data * Y.data,
                                                minlength=c)
                else:
                    rho[2 * step] = (Y * Y).sum(axis=0)
            if step % 2 or step < 2 * t:
                continue
            rows = np.flatnonzero(step_of == step)
            if rows.size == 0:
                continue
            inv_root = 1.0 / np.sqrt(rho[step])
            if sp.issparse(Y):
                # rows no centroid of this chunk reaches are left to the other chunks
                score = sp.csr_matrix(Y[rows])
                hit = np.diff(score.indptr) > 0
                if not hit.all():
                    rows, score = rows[hit], score[hit]
                score.data = score.data * inv_root[score.indices]
                j, s = _row_max(score)
            else:
                score = Y[rows] * inv_root[None, :]
                j = score.argmax(axis=1)
                s = score[np.arange(rows.size), j]
            better = s > best[rows]
            best[rows[better]] = s[better]
            labels[rows[better]] = start + j[better]
    grow = reach & (labels < 0)
    if grow.any():
        _grow_regions(A, labels, grow, level)
    if (~reach).any():
        where = ("the first centroid's region (no coordinates given)" if X is None
                 else "the Euclidean-nearest centroid")
        warnings.warn(f"{int((~reach).sum())} point(s) lie in graph pieces without any "
                      f"centroid; they are assigned to {where}. Increase n_neighbors to "
                      f"connect the graph.", stacklevel=3)
        if X is None:
            labels[~reach] = 0
        else:
            nn = NearestNeighbors(n_neighbors=1).fit(X[centroids])
            labels[~reach] = nn.kneighbors(X[~reach], return_distance=False)[:, 0]
    return labels


def _restricted_operators(A: sp.csr_matrix, step_of: np.ndarray, max_step: int) -> dict:
    """``{step: A}`` keeping only the rows each step of the centroid diffusion needs: those
    scored at it and the neighbours of those the next step needs; the first
    ``max_step // 2`` steps stay whole (the coherences are read off them)."""
    n = A.shape[0]
    ops = {}
    need = step_of == max_step
    for step in range(max_step, 0, -1):
        if step % 2 == 0:
            need = need | (step_of == step)
        if 2 * step <= max_step or need.all():
            ops.update({s: A for s in range(1, step + 1)})
            break
        rows = np.flatnonzero(need)
        sub = A[rows]
        counts = np.zeros(n, dtype=np.int64)
        counts[rows] = np.diff(sub.indptr)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        ops[step] = sp.csr_matrix((sub.data, sub.indices, indptr), shape=A.shape)
        need = _neighbours(A, rows)
    return ops


def _row_max(W: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Column (first on ties) and value of each row's largest entry; every row holds a
    positive entry (vectorised: scipy's sparse ``argmax`` loops in Python)."""
    W = sp.csr_matrix(W)
    W.sort_indices()
    counts = np.diff(W.indptr)
    rowmax = np.maximum.reduceat(W.data, W.indptr[:-1])
    row_of = np.repeat(np.arange(W.shape[0]), counts)
    first = np.flatnonzero(W.data == rowmax[row_of])
    _, pos = np.unique(row_of[first], return_index=True)
    return W.indices[first[pos]].astype(np.int64), rowmax


def _row_argmax(W: sp.csr_matrix) -> np.ndarray:
    """Column of each row's largest entry (:func:`_row_max`)."""
    return _row_max(W)[0]


def _grow_regions(A: sp.csr_matrix, labels: np.ndarray, todo: np.ndarray,
                  level: np.ndarray) -> None:
    """Label ``todo`` points by hop level, each to the region maximising
    ``sum_{y in S_j} A_xy``."""
    todo = todo.copy()
    for lev in np.unique(level[todo]):
        done = np.flatnonzero(labels >= 0)
        chi = sp.csr_matrix((np.ones(done.size), (done, labels[done])),
                            shape=(A.shape[0], int(labels.max()) + 1))
        rows = np.flatnonzero(todo & (level == lev))
        W = sp.csr_matrix(A[rows] @ chi)
        hit = np.diff(W.indptr) > 0
        if not hit.any():
            break
        labels[rows[hit]] = _row_argmax(W[hit])
        todo[rows[hit]] = False


# --------------------------------------------------------------------------- compression


def membership(labels: np.ndarray, n_partitions: int) -> sp.csr_matrix:
    """``chi`` (n x N): ``chi[x, j] = 1`` iff ``x`` is in ``S_j``."""
    n = labels.size
    return sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, n_partitions))


def compressed_kernel(G: sp.csr_matrix, labels: np.ndarray, n_partitions: int) -> np.ndarray:
    r"""Compressed inverse-density MGC kernel (Definitions 1-2), a dense symmetric ``(N, N)``
    array, computed as ``M^T Q^{-1} M`` with sparse ``M = G chi``.

    .. math:: [K_S]_{ij} = \sum_{x \in S_i} \sum_{y \in S_j} \sum_r
              \frac{g(x, r) g(r, y)}{q(r)} = [\chi^T G Q^{-1} G \chi]_{ij}
    """
    q = np.asarray(G.sum(axis=1)).ravel()
    return _kernel_from_blocks(sp.csr_matrix(G @ membership(labels, n_partitions)), q)


def _kernel_from_blocks(M: sp.csr_matrix, q: np.ndarray) -> np.ndarray:
    """``K_S = M^T Q^{-1} M`` from ``M = G chi``, dense and exactly symmetric."""
    K = (M.T @ sp.diags(1.0 / q) @ M).toarray()
    return 0.5 * (K + K.T)


def region_diffusion_map(K_S: np.ndarray, n_components: int,
                         region_pieces: np.ndarray | None = None):
    r"""Eigenpairs of ``P_S = D_S^{-1} K_S`` (Sec. V), largest first, via its symmetric
    conjugate. Eigenvectors have unit norm under ``pi = d_S / sum d_S`` (``phi_0 = 1``) and
    their largest-magnitude entry positive. ``region_pieces`` (N,): each region's piece when
    the graph falls apart; eigenvalue 1 then gets the basis of :mod:`flgp.embedding._pieces`.

    Returns
    -------
    eigenvalues : ndarray (n_components + 1,)
    eigenvectors : ndarray (N, n_components + 1)
    """
    N = K_S.shape[0]
    d = K_S.sum(axis=1)
    s = 1.0 / np.sqrt(d)
    S = K_S * s[:, None] * s[None, :]
    k = n_components + 1
    if region_pieces is not None and region_pieces.max() > 0:
        index = [np.flatnonzero(region_pieces == j) for j in range(region_pieces.max() + 1)]
        spectra = []
        for idx in index:
            vals, vecs = np.linalg.eigh(S[np.ix_(idx, idx)])
            vals, vecs = vals[::-1], vecs[:, ::-1]
            big = np.abs(vecs).argmax(axis=0)
            signs = np.sign(vecs[big, np.arange(vecs.shape[1])])
            signs[signs == 0] = 1.0
            spectra.append((vals, vecs * signs))
        masses = np.array([d[idx].sum() for idx in index])
        vals, psi = assemble(index, spectra, masses, N, k)
        return np.clip(vals, 0.0, 1.0), psi * s[:, None] * np.sqrt(d.sum())
    vals, vecs = scipy.linalg.eigh(S, subset_by_index=[N - k, N - 1])
    if vals.size < k:
        # LAPACK's subset solver may return fewer pairs for a highly repeated top eigenvalue
        vals, vecs = scipy.linalg.eigh(S)
        vals, vecs = vals[N - k:], vecs[:, N - k:]
    vals, vecs = vals[::-1], vecs[:, ::-1]
    phi = vecs * s[:, None] * np.sqrt(d.sum())
    if phi[0, 0] < 0:
        phi[:, 0] = -phi[:, 0]
    big = np.abs(phi).argmax(axis=0)
    signs = np.sign(phi[big, np.arange(k)])
    signs[signs == 0] = 1.0
    phi = phi * signs
    return np.clip(vals, 0.0, 1.0), phi


# --------------------------------------------------------------------------- pieces


def graph_pieces(G: sp.csr_matrix) -> Pieces:
    """Pieces of the kNN graph over its edges of weight ``>= 1e-9 / n`` (``KERNEL_FLOOR``)."""
    coo = sp.coo_matrix(G)
    strong = coo.data >= KERNEL_FLOOR / G.shape[0]
    return connected_pieces(sp.coo_matrix((coo.data[strong], (coo.row[strong],
                                                              coo.col[strong])),
                                          shape=G.shape))


def _within_pieces(G: sp.csr_matrix, labels: np.ndarray) -> sp.csr_matrix:
    """``G`` without its entries between different pieces (block-diagonal)."""
    coo = sp.coo_matrix(G)
    keep = labels[coo.row] == labels[coo.col]
    out = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=G.shape)
    out.sort_indices()
    return out


def share_regions(sizes: np.ndarray, n_partitions: int) -> np.ndarray:
    """Regions per piece: at least one each, the rest by size (largest remainders), at most a
    piece's point count."""
    sizes = np.asarray(sizes, dtype=np.int64)
    c = sizes.size
    share = np.ones(c, dtype=np.int64)
    left = int(n_partitions) - c
    while left > 0:
        room = share < sizes
        want = left * sizes * room / sizes[room].sum()
        add = np.minimum(np.floor(want).astype(np.int64), sizes - share)
        if add.sum() == 0:          # the remainder one by one, largest first
            order = np.lexsort((np.arange(c), -(want - np.floor(want))))
            order = order[room[order]][:left]
            add[order] = 1
        share += add
        left -= int(add.sum())
    return share


# --------------------------------------------------------------------------- estimator


class CompressedDiffusionMap(TransformerMixin, BaseEstimator):
    r"""Compression-based fast diffusion map (CFDM; Gigante et al., Sec. IV-V; module notes).

    Parameters
    ----------
    n_components : int, default=2
        Number of diffusion coordinates (the constant eigenvector is dropped).
    n_partitions : int or None, default=None
        Number of regions; ``None``: ``min(150, n_samples)`` (the paper's Fig. VI.1).
        At most ``n_samples`` and larger than ``n_components``.
    t : int, default=1
        Diffusion steps of the coherence, the partition and the region map.
    n_neighbors : int, default=15
        ``k`` of the nearest-neighbour Gaussian graph (capped at ``n_samples - 1``).
    bandwidth : float or None, default=None
        ``eps`` in ``exp(-d^2 / eps)``; ``None``: :func:`flgp.graph.knn.knn_epsilon` (mean
        squared distance to the ``ceil(k / 3)``-th neighbour).
    interpolation : {"point_to_region", "region_to_point"}, default="point_to_region"
        ``"point_to_region"``: the convex combination with weights
        ``Pr[x -> S_j] = sum_{y in S_j} p(x, y)`` (with ``n_partitions = n`` exactly the
        diffusion map at time ``2t + 1``, Theorem 1). ``"region_to_point"``: Sec. V's
        ``sum_j Phi_S(S_j) Pr[S_j -> x]`` (Theorem 2), weights scaling with the density at ``x``.
    centroids : {"coherence", "kmeans"}, default="coherence"
        ``"coherence"``: Sec. V's sampling proportional to ``rho_t``. ``"kmeans"`` (not in the
        paper): :func:`snapped_kmeans_centroids`, more regular regions, lower error.
    n_probes : int, default=64
        Random probes for the coherence estimate when ``t > 1``.
    max_assign_steps : int or None, default=8
        Longest diffusion (at least ``2t`` steps) for assigning points far from every
        centroid (:func:`assign_partitions`; 8 keeps the Swiss-roll SSE at a large speed-up).
        ``None``: diffuse until every point is reached.
    disconnected : {"warn", "raise"}, default="warn"
        When the kNN graph falls apart (weights below ``1e-9 / n`` dropped). "warn": a
        ``UserWarning``; each piece gets its own regions, the first ``n_pieces - 1``
        coordinates tell pieces apart, and a new point joins its nearest fitted point's piece.
        "raise": a ``ValueError``.
    random_state : int, Generator or None, default=None

    Attributes
    ----------
    embedding_ : ndarray (n_samples, n_components)
    region_embedding_ : ndarray ``(n_partitions_, n_components)``
    eigenvalues_ : ndarray (n_components + 1,)
        Eigenvalues of ``P_S``, descending, first is 1.
    region_eigenvectors_ : ndarray ``(n_partitions_, n_components + 1)``
    labels_ : ndarray (n_samples,)
        Region of each point.
    centroid_indices_, compressed_kernel_, coherence_ : ndarray
    n_pieces_, piece_labels_ :
        Connected pieces of the kNN graph (1 when connected); piece of each point.
    bandwidth_, n_neighbors_, n_partitions_, n_features_in_

    Examples
    --------
    >>> from flgp.datasets import make_swiss_roll
    >>> X, _ = make_swiss_roll(2000, random_state=0)
    >>> Y = CompressedDiffusionMap(n_components=2, n_partitions=100,
    ...                            random_state=0).fit_transform(X)
    >>> Y.shape
    (2000, 2)
    """

    def __init__(self, n_components=2, n_partitions=None, t=1, *, n_neighbors=15,
                 bandwidth=None, interpolation="point_to_region", centroids="coherence",
                 n_probes=64, max_assign_steps=8, disconnected="warn", random_state=None):
        self.n_components = n_components
        self.n_partitions = n_partitions
        self.t = t
        self.n_neighbors = n_neighbors
        self.bandwidth = bandwidth
        self.interpolation = interpolation
        self.centroids = centroids
        self.n_probes = n_probes
        self.max_assign_steps = max_assign_steps
        self.disconnected = disconnected
        self.random_state = random_state

    # -- validation ------------------------------------------------------------------

    _parameter_constraints: dict = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_partitions": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "t": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "bandwidth": [POSITIVE, None],
        "interpolation": [StrOptions(set(INTERPOLATIONS))],
        "centroids": [StrOptions(set(CENTROIDS))],
        "n_probes": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_assign_steps": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "disconnected": [StrOptions(set(DISCONNECTED))],
        "random_state": ["random_state", np.random.Generator],
    }

    def _check_params(self, n):
        """``(k, N, t, n_neighbors)`` checked against the cloud's size."""
        if self.bandwidth is not None and not np.isfinite(self.bandwidth):
            raise ValueError(f"bandwidth must be finite; got {self.bandwidth!r}.")
        k = int(self.n_components)
        if self.n_partitions is None:
            N = min(150, n)
        else:
            N = check_int(self.n_partitions, "n_partitions", low=2, high=n,
                          high_name="n_samples",
                          fix="Use at most one region per point (n_partitions <= n_samples).")
        if k >= N:
            raise ValueError(f"n_components={k} must be smaller than the number of regions "
                             f"n_partitions={N}: the region diffusion map has at most "
                             f"{N - 1} non-constant coordinates. Lower n_components or raise "
                             f"n_partitions.")
        return k, N, int(self.t), min(int(self.n_neighbors), n - 1)

    def _check_cost(self, A, t: int, N: int) -> None:
        """Refuse a ``t`` whose sparse powers would take hours (``check_powering_cost``)."""
        steps = (t if t > 1 else 0) + (2 * t if N < A.shape[0] else 0)
        work = A.nnz * max(int(self.n_probes), min(N, _ASSIGN_CHUNK))
        check_powering_cost(steps, work, what="the sparse diffusion operator",
                            fix=f"Use a smaller t (t={t} diffuses over {t} steps of the "
                                f"nearest-neighbour graph), or a larger bandwidth, which "
                                f"shortens the time scale.")

    # -- fit -------------------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Partition the cloud, compress the kernel and embed the regions and the points."""
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3,
                          ensure_all_finite=False)
        X = check_cloud(X, min_samples=3)        # once: NaN, scale, duplicates
        n = X.shape[0]
        k, N, t, nn = self._check_params(n)
        rng = check_random_state(self.random_state)

        G, eps, nbrs, kth = gaussian_knn_graph(X, nn, self.bandwidth)
        pieces = graph_pieces(G)
        if pieces.n_pieces > 1:
            if self.disconnected == "raise":
                raise ValueError(
                    f"the nearest-neighbour graph falls apart into {pieces.describe()}: the "
                    f"compressed diffusion operator has eigenvalue 1 more than once, so the "
                    f"leading coordinates would only label the pieces. Increase n_neighbors "
                    f"or bandwidth, or embed each piece separately (disconnected='warn' "
                    f"does that for you).")
            warnings.warn(
                f"the nearest-neighbour graph falls apart into {pieces.describe()}: each "
                f"piece gets regions of its own, and the first "
                f"{min(k, pieces.n_pieces - 1)} coordinate(s) (eigenvalue 1) only tell the "
                f"pieces apart. Increase n_neighbors or bandwidth to connect them, or pass "
                f"disconnected='raise' to make this an error.", UserWarning,
                stacklevel=_user_stacklevel())
            G = _within_pieces(G, pieces.labels)
        q = np.asarray(G.sum(axis=1)).ravel()
        A = _affinity(G, q)
        self._check_cost(A, t, N)
        rho = diffusion_coherence(A, t, n_probes=self.n_probes, random_state=rng)
        if N == n:
            centroids = np.arange(n)
        elif pieces.n_pieces > 1:
            centroids = self._piece_centroids(X, rho, pieces, N, rng)
            N = centroids.size
        elif self.centroids == "kmeans":
            centroids = snapped_kmeans_centroids(X, N, rng)
        else:
            centroids = sample_centroids(rho, N, rng)
        if N == n:
            labels = np.arange(n)
        else:
            labels = assign_partitions(A, centroids, t, X, max_steps=self.max_assign_steps)
        used = np.unique(labels)
        if used.size < N:  # only duplicates can empty a region; drop them
            warnings.warn(f"{N - used.size} region(s) received no point and were dropped.",
                          stacklevel=2)
            centroids = centroids[used]
            labels = np.searchsorted(used, labels)
            N = used.size
            if k >= N:
                raise ValueError(f"only {N} non-empty regions remain; lower n_components.")
        M = sp.csr_matrix(G @ membership(labels, N))  # G chi: kernel and interpolation
        K_S = _kernel_from_blocks(M, q)
        region_pieces = pieces.labels[centroids] if pieces.n_pieces > 1 else None
        vals, phi = region_diffusion_map(K_S, k, region_pieces)
        if pieces.n_pieces == 1 and vals[1] > 1 - 1e-10:
            msg = ("the nearest-neighbour graph nearly falls apart: the compressed diffusion "
                   "operator has eigenvalue 1 more than once (to 1e-10) although its pieces "
                   "are linked, so the leading coordinates are ill-determined. Increase "
                   "n_neighbors or bandwidth")
            if self.disconnected == "raise":
                raise ValueError(msg + ", or embed each piece separately.")
            warnings.warn(msg + ".", UserWarning, stacklevel=_user_stacklevel())
        region = phi[:, 1:] * vals[1:] ** t
        d_S = K_S.sum(axis=1)

        self.X_fit_ = X
        self.n_pieces_ = pieces.n_pieces
        self.piece_labels_ = pieces.labels
        self.nn_ = nbrs
        self.kth_sq_dist_ = kth
        self.bandwidth_ = eps
        self.n_neighbors_ = nn
        self.n_partitions_ = N
        self.coherence_ = rho
        self.centroid_indices_ = centroids
        self.labels_ = labels
        self.compressed_kernel_ = K_S
        self.region_degrees_ = d_S
        self.eigenvalues_ = vals
        self.region_eigenvectors_ = phi
        self.region_embedding_ = region
        self.embedding_ = self._interpolate(G, q, M)
        return self

    def _piece_centroids(self, X, rho, pieces: Pieces, N: int, rng) -> np.ndarray:
        """Centroids of each piece's share of the ``N`` regions (:func:`share_regions`)."""
        out = []
        for j, N_j in enumerate(share_regions(pieces.sizes, N)):
            idx = pieces.members(j)
            if N_j == idx.size:
                out.append(idx)
            elif self.centroids == "kmeans":
                out.append(idx[snapped_kmeans_centroids(X[idx], N_j, rng)])
            else:
                out.append(idx[sample_centroids(rho[idx], N_j, rng)])
        return np.sort(np.concatenate(out))

    def _interpolate(self, G_rows: sp.csr_matrix, q_rows: np.ndarray,
                     M: sp.csr_matrix | None = None) -> np.ndarray:
        """Region coordinates to points through Gaussian rows ``g(x, .)`` (``M = G_rows chi``
        if at hand)."""
        if M is None:
            M = sp.csr_matrix(G_rows @ membership(self.labels_, self.n_partitions_))
        if self.interpolation == "point_to_region":
            W = sp.diags(1.0 / q_rows) @ M  # Pr[x -> S_j] = sum_{y in S_j} p(x, y)
        else:
            W = M @ sp.diags(1.0 / self.region_degrees_)  # Pr[S_j -> x] (Theorem 2)
        return np.asarray(W @ self.region_embedding_)

    def fit_transform(self, X, y=None):
        return self.fit(X).embedding_

    # -- out of sample ---------------------------------------------------------------

    def _gaussian_rows(self, X: np.ndarray, shift: bool = False) -> sp.csr_matrix:
        """``g(x, y)`` for new ``x`` on the cloud's symmetrised neighbour pattern: ``y`` among
        the ``k + 1`` nearest, or with ``||x - y||^2 <= kth_sq_dist_[y]`` (among the
        ``4 (k + 1)`` nearest), so a cloud point gets its row of ``G``. ``shift=True`` divides
        each row by ``exp(-min_y d^2 / eps)`` (same ``p(x, .)``, no underflow)."""
        n = self.X_fit_.shape[0]
        k1 = self.n_neighbors_ + 1
        kc = min(n, 4 * k1)
        dist, ind = self.nn_.kneighbors(X, kc)
        sq = dist ** 2
        keep = np.zeros_like(sq, dtype=bool)
        keep[:, :k1] = True
        keep |= sq <= self.kth_sq_dist_[ind] * (1 + 1e-12)
        if self.n_pieces_ > 1:
            labels = self.piece_labels_[ind]
            keep &= labels == labels[:, :1]
        rows = np.repeat(np.arange(X.shape[0]), kc)[keep.ravel()]
        if shift:
            sq = sq - sq[:, :1]
        vals = np.exp(-sq[keep] / self.bandwidth_)
        return sp.csr_matrix((vals, (rows, ind[keep])), shape=(X.shape[0], n))

    def transform(self, X):
        """Diffusion coordinates of new points, by the same interpolation as in ``fit``."""
        check_is_fitted(self, "embedding_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        G_rows = self._gaussian_rows(X, shift=self.interpolation == "point_to_region")
        q = np.asarray(G_rows.sum(axis=1)).ravel()
        if not (q > 0).all():
            raise ValueError(f"{int((q <= 0).sum())} new point(s) are so far from the cloud "
                             f"that all their Gaussian weights underflow, so Pr[S -> x] is 0; "
                             f"use interpolation='point_to_region' or a larger bandwidth.")
        return self._interpolate(G_rows, q)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
