"""Sparse cross kernels between the cloud and its induced points (r nearest only).

Two kernels, as in He et al. (FLGP, Sec. 3.2):

* squared exponential, ``K_ij = exp(-||x_i - u_j||^2 / (4 eps^2))``, returned as its
  logarithm so that normalisation can be done without underflow;
* local anchor embedding (LAE), the convex weights that best reconstruct ``x_i`` from its
  ``r`` nearest induced points, solved exactly (see :func:`lae_weights`).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

__all__ = ["default_bandwidth", "se_log_weights", "lae_weights"]


def default_bandwidth(sq_distances: np.ndarray, scale: float = 1.0) -> float:
    r"""Data-driven SE bandwidth ``eps``.

    .. math:: 4\varepsilon^2 = a \cdot \overline{d^2}

    where :math:`\overline{d^2}` is the mean of the kept squared distances (each point to
    its ``r`` nearest induced points) and ``a = scale`` (the authors' ``a2``; 1 by default).
    The kernel then reads ``exp(-d^2 / (a * mean d^2))``, which does not depend on the units
    of ``X``.
    """
    mean_d2 = float(np.mean(sq_distances))
    if not np.isfinite(mean_d2) or mean_d2 <= 0:
        raise ValueError("all points coincide with their induced points (mean squared "
                         "distance 0); the SE bandwidth cannot be set from the data. Pass "
                         "bandwidth= explicitly or remove duplicate points.")
    return float(np.sqrt(scale * mean_d2 / 4.0))


def se_log_weights(sq_distances: np.ndarray, bandwidth: float) -> np.ndarray:
    """``log K_ij = -d_ij^2 / (4 eps^2)`` for the kept pairs."""
    return -sq_distances / (4.0 * bandwidth * bandwidth)


def lae_weights(X: np.ndarray, U: np.ndarray, indices: np.ndarray, *,
                regularization: float = 0.0, chunk_size: int = 200_000) -> np.ndarray:
    r"""Local anchor embedding weights: for each row,

    .. math:: \min_w \|x_i - \textstyle\sum_k w_k u_{i_k}\|^2
              \quad\text{s.t.}\quad w \ge 0,\ \textstyle\sum_k w_k = 1.

    Exact and vectorised: with ``G = (U_i - x_i)(U_i - x_i)^T`` (``r x r``) the objective is
    ``w^T G w``. With ``regularization = γ > 0`` the local Gram becomes
    ``G + γ tr(G) I`` — the regularisation of locally linear embedding (scikit-learn's
    ``LocallyLinearEmbedding(reg=1e-3)``) — which pulls the weights towards uniform: a point
    that coincides with an anchor then keeps a positive weight on at least one other anchor
    instead of weight 1 on itself alone. The minimiser lies in the relative interior of
    some face of the simplex, on
    which it is the affine-constrained least-squares solution; we solve the KKT system for
    every non-empty support (``2^r - 1`` of them, all rows at once), keep the feasible ones and
    take the one with the smallest objective. For ``r > 8`` (255 supports) an accelerated
    projected-gradient solver is used instead.

    Returns
    -------
    weights : ndarray of shape (n, r), rows on the probability simplex.
    """
    n, r = indices.shape
    out = np.empty((n, r), dtype=np.float64)
    for start in range(0, n, chunk_size):
        stop = min(n, start + chunk_size)
        D = torch.from_numpy(U[indices[start:stop]] - X[start:stop, None, :])  # (c, r, p)
        G = D @ D.transpose(1, 2)  # (c, r, r)
        if regularization > 0:
            tr = torch.diagonal(G, dim1=1, dim2=2).sum(1)
            G = G + (regularization * tr)[:, None, None] * torch.eye(r, dtype=G.dtype)
        if r == 1:
            out[start:stop] = 1.0
        elif r <= 8:
            out[start:stop] = _simplex_qp_exact(G).numpy()
        else:
            out[start:stop] = _simplex_qp_pgd(G).numpy()
    return out


def _simplex_qp_exact(G: torch.Tensor) -> torch.Tensor:
    """min w^T G w on the simplex, by enumeration of supports (batched)."""
    c, r, _ = G.shape
    scale = torch.diagonal(G, dim1=1, dim2=2).mean(1).clamp_min(1e-300)  # (c,)
    Gs = G / scale[:, None, None]
    best_val = torch.full((c,), float("inf"), dtype=G.dtype)
    best_w = torch.zeros((c, r), dtype=G.dtype)
    for size in range(1, r + 1):
        for support in itertools.combinations(range(r), size):
            S = torch.tensor(support)
            if size == 1:
                w_S = torch.ones((c, 1), dtype=G.dtype)
            else:
                GS = Gs[:, S][:, :, S]
                # KKT: [G_S 1; 1^T 0] [w; nu] = [0; 1]; tiny ridge keeps collinear anchors solvable
                kkt = torch.zeros((c, size + 1, size + 1), dtype=G.dtype)
                kkt[:, :size, :size] = GS + 1e-12 * torch.eye(size, dtype=G.dtype)
                kkt[:, :size, size] = 1.0
                kkt[:, size, :size] = 1.0
                rhs = torch.zeros((c, size + 1), dtype=G.dtype)
                rhs[:, size] = 1.0
                sol, info = torch.linalg.solve_ex(kkt, rhs)
                w_S = sol[:, :size]
                ok = (info == 0) & torch.isfinite(w_S).all(1)
                w_S = torch.where(ok[:, None], w_S, torch.full_like(w_S, -1.0))
            feasible = (w_S >= -1e-12).all(1)
            w_S = w_S.clamp_min(0.0)
            w_S = w_S / w_S.sum(1, keepdim=True).clamp_min(1e-300)
            w = torch.zeros((c, r), dtype=G.dtype)
            w[:, S] = w_S
            val = torch.einsum("ci,cij,cj->c", w, Gs, w)
            better = feasible & (val < best_val - 1e-15 * val.abs().clamp_min(1.0))
            best_val = torch.where(better, val, best_val)
            best_w = torch.where(better[:, None], w, best_w)
    return best_w


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
