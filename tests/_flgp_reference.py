"""The dense FLGP path as it was before the engine worked in blocks of rows (kept as the
reference the chunked and Dask engines are tested against).

Everything over the whole cloud at once: the neighbour search, the kernel, the column sums
(per-column maximum, then sums), the sparse ``B = A Λ^{-1/2}``, its Gram matrix ``BᵀB``
by a sparse product, ``numpy.linalg.eigh`` and ``V = B W Σ^{-1}`` as one ``n x M`` product;
regression predictions from that ``n x M`` matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from flgp.graph.cross_kernel import default_bandwidth, lae_weights
from flgp.graph.neighbors import nearest_induced_points
from flgp.spectral.gaussian import LowRankGaussianEvidence


def reference_transition(X, U, *, r=3, kernel="lae", sizes_from_nearest=True,
                         bandwidth=None, lae_regularization=1e-3):
    """``(indices, A values, degrees, bandwidth)`` of the cloud, whole-array."""
    s = U.shape[0]
    idx, sq = nearest_induced_points(X, U, r)
    if kernel == "se":
        bandwidth = default_bandwidth(sq) if bandwidth is None else bandwidth
        log_k = -sq / (4.0 * bandwidth ** 2)
    else:
        with np.errstate(divide="ignore"):
            log_k = np.log(lae_weights(X, U, idx, regularization=lae_regularization))
    flat_k, flat_i = log_k.ravel(), idx.ravel()
    col_max = np.full(s, -np.inf)
    np.maximum.at(col_max, flat_i, flat_k)
    safe = np.where(np.isfinite(col_max), col_max, 0.0)
    with np.errstate(divide="ignore"):
        log_c = np.log(np.bincount(flat_i, weights=np.exp(flat_k - safe[flat_i]),
                                   minlength=s)) + safe
    with np.errstate(invalid="ignore"):
        logits = np.where(np.isfinite(log_c[idx]), log_k - log_c[idx], -np.inf)
    if sizes_from_nearest:
        with np.errstate(divide="ignore"):
            logits = logits + np.log(np.bincount(idx[:, 0], minlength=s).astype(float))[idx]
    w = np.exp(logits - logits.max(1, keepdims=True))
    values = w / w.sum(1, keepdims=True)
    degrees = np.bincount(flat_i, weights=values.ravel(), minlength=s)
    return idx, values, degrees, bandwidth


def reference_eigenpairs(X, U, n_eigenpairs, *, spectrum="one_step", **kw):
    """``(eigenvalues, eigenvectors n x M, component labels)`` by the dense path."""
    n, s = X.shape[0], U.shape[0]
    idx, values, degrees, _ = reference_transition(X, U, **kw)
    r = idx.shape[1]
    A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, n * r + 1, r)),
                      shape=(n, s))
    used = degrees > 0
    inv_sqrt = np.zeros(s)
    inv_sqrt[used] = 1.0 / np.sqrt(degrees[used])
    B = (A @ sp.diags(inv_sqrt)).tocsr()
    G = (B.T @ B).toarray()
    G = 0.5 * (G + G.T)
    evals, W = np.linalg.eigh(G)
    evals, W = evals[::-1][:n_eigenpairs], W[:, ::-1][:, :n_eigenpairs]
    sigma = np.sqrt(np.clip(evals, 0.0, 1.0))
    V = B @ (W / sigma[None, :])
    lam = 1.0 - sigma if spectrum == "one_step" else 1.0 - sigma ** 2
    # components of the used induced points (nonzero pattern of G), numbered in the order
    # of their first induced point; a point joins that of its most probable induced point
    _, raw = connected_components(sp.csr_matrix(G != 0), directed=False)
    labels = np.full(s, -1)
    order = {}
    for j in np.flatnonzero(used):
        labels[j] = order.setdefault(raw[j], len(order))
    return (np.clip(lam, 0.0, 1.0), np.asarray(V),
            labels[idx[np.arange(n), values.argmax(1)]])


def reference_regression(V, labelled, y_lab, eigenvalues, kernel_scale, t, s2, noise):
    """Posterior mean and sd of ``f`` at every row of ``V`` (``n x M``) in the standardised
    units of the fit, from the whole matrix."""
    y_mean, y_scale = y_lab.mean(), y_lab.std()
    z = (y_lab - y_mean) / y_scale
    ev = LowRankGaussianEvidence(V[labelled], z)
    sd, w_mean, w_cov = ev.posterior(np.log(s2 * kernel_scale) - t * eigenvalues, noise)
    sd = np.where(sd < 1e-8 * sd.max(), 0.0, sd)
    F = V * sd
    mean = F @ w_mean
    var = np.einsum("ij,ij->i", F @ w_cov, F)
    return y_mean + y_scale * mean, y_scale * np.sqrt(np.maximum(var, 0.0))
