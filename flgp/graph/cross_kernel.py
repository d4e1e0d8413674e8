"""Sparse cross kernels between the cloud and its induced points (r nearest only).

Two kernels, as in He et al. (FLGP, Sec. 3.2):

* squared exponential, ``K_ij = exp(-||x_i - u_j||^2 / (4 eps^2))``, returned as its
  logarithm so that normalisation can be done without underflow;
* local anchor embedding (LAE), the convex weights that best reconstruct ``x_i`` from its
  ``r`` nearest induced points, solved exactly (see :func:`lae_weights`).
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np
import torch

from ..backends import compiled

__all__ = ["default_bandwidth", "bandwidth_from_mean", "check_bandwidth", "se_log_weights",
           "lae_weights", "local_gram"]

# a row "sits on" its nearest anchor when d_1^2 <= _COINCIDENT_RATIO * d_2^2
_COINCIDENT_RATIO = 1e-8
# entries of the (rows x r x p) difference block formed at once by local_gram
_GRAM_BLOCK_ENTRIES = 2_000_000


def default_bandwidth(sq_distances: np.ndarray, scale: float = 1.0) -> float:
    r"""Data-driven SE bandwidth: :math:`4\varepsilon^2 = a \cdot \overline{d^2}`, the mean
    of the kept squared distances (each point to its ``r`` nearest induced points) times
    ``a = scale`` (the authors' ``a2``), so the kernel does not depend on the units of ``X``.
    """
    return bandwidth_from_mean(float(np.mean(sq_distances)), scale)


def bandwidth_from_mean(mean_d2: float, scale: float = 1.0) -> float:
    """:func:`default_bandwidth` from the mean kept squared distance."""
    if not np.isfinite(mean_d2) or mean_d2 <= 0:
        raise ValueError("all points coincide with their induced points (mean squared "
                         "distance 0); the SE bandwidth cannot be set from the data. Pass "
                         "bandwidth= explicitly or remove duplicate points.")
    return float(np.sqrt(scale * mean_d2 / 4.0))


def check_bandwidth(bandwidth, name: str = "bandwidth") -> float:
    """A positive SE bandwidth ``eps`` whose ``4 eps^2`` is a normal float64 number (so
    that ``-d^2 / (4 eps^2)`` is never ``0 / 0``)."""
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(f"{name} must be a positive number; got {bandwidth!r}.")
    bandwidth = float(bandwidth)
    if not np.isfinite(bandwidth) or bandwidth <= 0:
        raise ValueError(f"{name} must be a finite positive number; got {bandwidth}.")
    four_eps2 = 4.0 * bandwidth * bandwidth
    if not (np.isfinite(four_eps2) and four_eps2 >= np.finfo(np.float64).tiny):
        flow = "overflows" if four_eps2 > 1 else "underflows"
        raise ValueError(f"{name}={bandwidth:.3g} is out of float64's range for the SE kernel "
                         f"exp(-d^2 / (4 {name}^2)): 4 {name}^2 {flow}. Choose a {name} "
                         f"comparable to the distances between neighbouring points, or "
                         f"leave {name}=None for the data-driven rule.")
    return bandwidth


def se_log_weights(sq_distances: np.ndarray, bandwidth: float) -> np.ndarray:
    """``log K_ij = -d_ij^2 / (4 eps^2)`` for the kept pairs."""
    return -sq_distances / (4.0 * bandwidth * bandwidth)


def lae_weights(X: np.ndarray, U: np.ndarray, indices: np.ndarray, *,
                regularization: float = 0.0, coincident_regularization: float = 0.1,
                chunk_size: int = 200_000) -> np.ndarray:
    r"""Local anchor embedding weights: for each row,

    .. math:: \min_w \|x_i - \textstyle\sum_k w_k u_{i_k}\|^2
              \quad\text{s.t.}\quad w \ge 0,\ \textstyle\sum_k w_k = 1,

    i.e. ``min w^T G w`` with ``G = (U_i - x_i)(U_i - x_i)^T``. ``regularization = γ > 0``
    uses ``G + γ tr(G) I`` (locally linear embedding's regularisation), which pulls the
    weights towards uniform. A row that sits on its nearest anchor (``d_1^2 <= 1e-8
    d_2^2``) gets ``γ = max(regularization, coincident_regularization)``, so that it keeps
    weight on other anchors instead of hanging, almost cut off, on its own (docs/engine.md).

    Solved exactly by enumerating the supports (:func:`_simplex_qp_exact`) for ``r <= 8``,
    by projected gradient above; ``r = 3`` uses the compiled kernel
    :func:`flgp.backends.compiled.lae3` (the same weights to rounding).

    Returns
    -------
    weights : ndarray of shape (n, r), rows on the probability simplex.
    """
    n, r = indices.shape
    if r == 3 and compiled.enabled():
        return compiled.lae3(X, U, indices, regularization, coincident_regularization)
    out = np.empty((n, r), dtype=np.float64)
    for start in range(0, n, chunk_size):
        stop = min(n, start + chunk_size)
        G = local_gram(X[start:stop], U, indices[start:stop])  # (c, r, r)
        gamma = np.full(stop - start, float(regularization))
        if r > 1 and coincident_regularization > 0:
            d2 = np.sort(np.einsum("cii->ci", G), axis=1)
            on_anchor = d2[:, 0] <= _COINCIDENT_RATIO * d2[:, 1]
            gamma[on_anchor] = np.maximum(gamma[on_anchor], coincident_regularization)
        if np.any(gamma > 0):
            tr = np.einsum("cii->c", G)
            G += (gamma * tr)[:, None, None] * np.eye(r)
        if r == 1:
            out[start:stop] = 1.0
        elif r <= 8:
            out[start:stop] = _simplex_qp_exact(G)
        else:
            out[start:stop] = _simplex_qp_pgd(torch.from_numpy(G)).numpy()
    return out


def local_gram(X: np.ndarray, U: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``G_i = (U_i - x_i)(U_i - x_i)^T`` for every row (``(n, r, r)``, float64), ``U_i``
    the rows ``indices[i]`` of ``U``; formed in cache-sized blocks."""
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] != X.shape[0] or X.shape[1] != U.shape[1]:
        raise ValueError(f"indices must be (n_points, r) with one row per point of X and "
                         f"X, U must have the same number of features; got indices "
                         f"{indices.shape}, X {X.shape}, U {U.shape}.")
    n, r = indices.shape
    G = np.empty((n, r, r), dtype=np.float64)
    step = max(1, _GRAM_BLOCK_ENTRIES // max(1, r * X.shape[1]))
    for start in range(0, n, step):
        stop = min(n, start + step)
        D = U[indices[start:stop]] - X[start:stop, None, :]  # (c, r, p)
        np.einsum("cip,cjp->cij", D, D, out=G[start:stop])
    return G


def _simplex_qp_exact(G: np.ndarray) -> np.ndarray:
    """min w^T G w on the simplex, by enumeration of supports (batched numpy).

    The minimiser is the affine minimiser of the face in whose relative interior it lies:
    on each support ``S`` solve ``H z = -g`` (the sum constraint eliminated,
    :func:`_affine_minimiser`), keep non-negative candidates, take the smallest objective.
    A singular ``H`` is skipped: its minimum is also attained on a smaller face."""
    G = np.asarray(G, dtype=np.float64)
    c, r, _ = G.shape
    scale = np.maximum(np.einsum("cii->c", G) / r, 1e-300)
    Gs = G / scale[:, None, None]
    if r >= 2 and c and _mostly_interior(Gs[:_PROBE_ROWS]):
        # rows whose minimiser lies well inside the simplex (every weight above 1e-6) are
        # solved by the full support alone, the others enumerate the faces; only worth it
        # where most rows are inside
        w_all, ok, _ = _affine_minimiser(Gs, np.arange(r))
        inside = ok & (w_all > _INTERIOR_WEIGHT).all(1) & _stationary(Gs, w_all)
        if inside.any():
            out = np.empty((c, r))
            w = w_all[inside]
            out[inside] = w / w.sum(1, keepdims=True)
            rest = ~inside
            if rest.any():
                out[rest] = _enumerate_faces(Gs[rest])
            return out
    return _enumerate_faces(Gs)


_INTERIOR_WEIGHT = 1e-6
_PROBE_ROWS = 512
# the interior solution is taken only where it is stationary: (G w)_k equal to this
# (G scaled to trace r) - a nearly singular system (affinely dependent anchors) can give
# weights inside the simplex that are not its minimiser
_STATIONARY_TOL = 1e-9


def _stationary(Gs: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows where ``Gs w`` is constant to ``_STATIONARY_TOL``: the affine minimiser's
    condition (the gradient ``2 G w`` orthogonal to the face)."""
    g = np.einsum("cij,cj->ci", Gs, w)
    return (g.max(1) - g.min(1)) <= _STATIONARY_TOL


def _objective(Gs: np.ndarray, S: np.ndarray, w_S: np.ndarray) -> np.ndarray:
    """``w_Sᵀ G_S w_S`` per row, summed in the order that :func:`_enumerate_faces_3` and
    the compiled kernel repeat."""
    val = None
    for a in range(len(S)):
        for b in range(len(S)):
            term = w_S[:, a] * Gs[:, S[a], S[b]] * w_S[:, b]
            val = term if val is None else val + term
    return val


def _mostly_interior(Gs: np.ndarray) -> bool:
    """Whether at least half of these rows have their minimiser inside the simplex."""
    w, ok, _ = _affine_minimiser(Gs, np.arange(Gs.shape[1]))
    return bool(np.mean(ok & (w > _INTERIOR_WEIGHT).all(1)) >= 0.5)


def _enumerate_faces(Gs: np.ndarray) -> np.ndarray:
    """:func:`_simplex_qp_exact` by trying every support (``Gs``: the scaled Grams):
    :func:`_enumerate_faces_3` for ``r = 3``, :func:`_enumerate_faces_general` otherwise."""
    return _enumerate_faces_3(Gs) if Gs.shape[1] == 3 else _enumerate_faces_general(Gs)


def _enumerate_faces_general(Gs: np.ndarray) -> np.ndarray:
    """Every support of any ``r``; a row's weights are written once, from the winning
    support."""
    c, r, _ = Gs.shape
    best_val = np.full(c, np.inf)
    winner = np.full(c, -1, dtype=np.int64)
    candidates = []
    for size in range(1, r + 1):
        for support in itertools.combinations(range(r), size):
            S = np.array(support)
            if size == 1:
                w_S = None
                val = Gs[:, S[0], S[0]].copy()
                better = val < best_val - 1e-15 * np.maximum(np.abs(val), 1.0)
            else:
                w_S, ok, val = _affine_minimiser(Gs, S)
                ok &= (w_S >= -1e-12).all(1)
                better = ok & (val < best_val - 1e-15 * np.maximum(np.abs(val), 1.0))
            best_val = np.where(better, val, best_val)
            winner[better] = len(candidates)
            candidates.append((S, w_S))
    best_w = np.zeros((c, r))
    for k, (S, w_S) in enumerate(candidates):
        rows = np.flatnonzero(winner == k)
        if rows.size == 0:
            continue
        if w_S is None:
            best_w[rows, S[0]] = 1.0
        else:
            w = np.maximum(w_S[rows], 0.0)
            best_w[rows[:, None], S[None, :]] = w / w.sum(1, keepdims=True)
    return best_w


def _enumerate_faces_3(Gs: np.ndarray) -> np.ndarray:
    """:func:`_enumerate_faces` for ``r = 3`` on flat arrays of Gram entries: the same
    supports, order and arithmetic as the general path (bit-identical weights), without
    its gathers."""
    G = [[np.ascontiguousarray(Gs[:, i, j]) for j in range(3)] for i in range(3)]
    c = Gs.shape[0]
    best_val = np.full(c, np.inf)
    winner = np.full(c, -1, dtype=np.int8)
    weights = {}

    def improve(k, val, ok=None):
        better = val < best_val - 1e-15 * np.maximum(np.abs(val), 1.0)
        if ok is not None:
            better &= ok
        np.copyto(best_val, val, where=better)
        winner[better] = k

    for k in range(3):                                   # the vertices
        improve(k, G[k][k].copy())
    for k, (i, j) in enumerate(((0, 1), (0, 2), (1, 2)), start=3):   # the edges
        g_ia, g_aa = G[i][j], G[j][j]
        h = G[i][i] - g_ia - g_ia + g_aa
        ok = h > 1e-12 * np.maximum(h, 1e-300)
        g = g_ia - g_aa
        z = -g / np.where(ok, h, 1.0)
        w_last = 1.0 - z
        ok &= (z >= -1e-12) & (w_last >= -1e-12)
        weights[k] = (z, w_last)
        val = z * G[i][i] * z
        val = val + z * G[i][j] * w_last
        val = val + w_last * G[j][i] * z
        val = val + w_last * G[j][j] * w_last
        improve(k, val, ok)
    # the triangle: last = 2, rest = (0, 1)
    g_aa, g0, g1 = G[2][2], G[0][2], G[1][2]
    a = G[0][0] - g0 - g0 + g_aa
    b = G[0][1] - g0 - g1 + g_aa
    d = G[1][1] - g1 - g1 + g_aa
    tiny = 1e-12 * np.maximum(a + d, 1e-300)
    det = a * d - b * b
    ok = det > tiny * tiny
    det = np.where(ok, det, 1.0)
    e0, e1 = g0 - g_aa, g1 - g_aa
    z0 = -(d * e0 - b * e1) / det
    z1 = -(a * e1 - b * e0) / det
    w2 = 1.0 - (z0 + z1)
    ok &= (z0 >= -1e-12) & (z1 >= -1e-12) & (w2 >= -1e-12)
    w = (z0, z1, w2)
    val = None
    for a in range(3):
        for b in range(3):
            term = w[a] * G[a][b] * w[b]
            val = term if val is None else val + term
    improve(6, val, ok)

    out = np.zeros((c, 3))
    for k in range(3):
        out[winner == k, k] = 1.0
    for k, (i, j) in enumerate(((0, 1), (0, 2), (1, 2)), start=3):
        rows = winner == k
        if rows.any():
            wi, wj = np.maximum(weights[k][0][rows], 0.0), np.maximum(weights[k][1][rows], 0.0)
            total = wi + wj
            out[rows, i], out[rows, j] = wi / total, wj / total
    rows = winner == 6
    if rows.any():
        w = np.maximum(np.stack([z0[rows], z1[rows], w2[rows]], 1), 0.0)
        out[rows] = w / w.sum(1, keepdims=True)
    return out


def _affine_minimiser(Gs: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``argmin w^T G w`` over ``sum w = 1`` supported on ``S`` (``|S| >= 2``), per row:
    ``(weights on S, mask of rows with a unique minimiser, objective)``. With
    ``w = e_last + P z``, ``P = [I; -1^T]``, it solves ``H z = -g``, ``H = P^T G_S P``."""
    last, rest = S[-1], S[:-1]
    g_aa = Gs[:, last, last]
    g_ia = Gs[:, rest, last]                                     # (c, k-1)
    H = Gs[:, rest][:, :, rest] - g_ia[:, :, None] - g_ia[:, None, :] + g_aa[:, None, None]
    g = g_ia - g_aa[:, None]
    tiny = 1e-12 * np.maximum(np.einsum("cii->c", H), 1e-300)
    if rest.size == 1:
        h = H[:, 0, 0]
        ok = h > tiny
        z = -g / np.where(ok, h, 1.0)[:, None]
    elif rest.size == 2:
        a, b, d = H[:, 0, 0], H[:, 0, 1], H[:, 1, 1]
        det = a * d - b * b
        ok = det > tiny * tiny
        det = np.where(ok, det, 1.0)
        z = -np.stack([d * g[:, 0] - b * g[:, 1], a * g[:, 1] - b * g[:, 0]], 1) / det[:, None]
    else:
        z = _batched_solve(H, -g[:, :, None])[:, :, 0]
        ok = np.isfinite(z).all(1)
        z = np.where(ok[:, None], z, 0.0)
    w_S = np.concatenate([z, 1.0 - z.sum(1, keepdims=True)], axis=1)
    return w_S, ok, _objective(Gs, S, w_S)


def _batched_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.linalg.solve`` over a batch; a singular system gives NaN in its row only."""
    try:
        return np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        out = np.full(b.shape, np.nan)
        for i in range(A.shape[0]):
            try:
                out[i] = np.linalg.solve(A[i], b[i])
            except np.linalg.LinAlgError:
                pass
        return out


def _simplex_qp_pgd(G: torch.Tensor, n_iter: int = 500) -> torch.Tensor:
    """Nesterov-accelerated projected gradient for min w^T G w on the simplex (large r)."""
    c, r, _ = G.shape
    L = torch.linalg.matrix_norm(G, ord=2).clamp_min(1e-300)  # Lipschitz constant / 2
    w = torch.full((c, r), 1.0 / r, dtype=G.dtype)
    v = w.clone()
    for k in range(n_iter):
        grad = 2.0 * torch.einsum("cij,cj->ci", G, v)
        w_new = _project_simplex(v - grad / (2.0 * L[:, None]))
        v = w_new + (k / (k + 3.0)) * (w_new - w)
        w = w_new
    return w


def _project_simplex(V: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row onto the probability simplex (Duchi et al. 2008)."""
    r = V.shape[1]
    mu, _ = torch.sort(V, dim=1, descending=True)
    cums = mu.cumsum(1) - 1.0
    ks = torch.arange(1, r + 1, dtype=V.dtype)
    cond = mu - cums / ks > 0
    rho = cond.to(torch.int64).cumsum(1).argmax(1)
    theta = cums.gather(1, rho[:, None]) / (rho[:, None] + 1).to(V.dtype)
    return (V - theta).clamp_min(0.0)
