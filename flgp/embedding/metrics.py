r"""Quality measures for embeddings: :func:`bilipschitz_distortion` (Gilbert and O'Neill,
eq. 32), :func:`diffusion_distances` (their eq. 26), :func:`mean_relative_error`
(García-Heredia et al., eq. 40), and :func:`embedding_sse` / :func:`align_components`
(Gigante et al., Sec. VI-A).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import pdist, squareform

from .._validation import check_points, check_positive
from ..graph.affinity import build_dense_affinity

__all__ = ["bilipschitz_distortion", "diffusion_distances", "mean_relative_error",
           "embedding_sse", "align_components"]


def _condensed_reference(D, n: int, name: str = "D") -> np.ndarray:
    D = np.asarray(D, dtype=np.float64)
    if D.ndim == 2:
        if D.shape != (n, n):
            raise ValueError(f"{name} must be an ({n}, {n}) distance matrix matching the "
                             f"embedding's {n} rows; got shape {D.shape}.")
        d = squareform(D, checks=False)
    elif D.ndim == 1 and D.shape[0] == n * (n - 1) // 2:
        d = D
    else:
        raise ValueError(f"{name} must be an ({n}, {n}) distance matrix or a condensed "
                         f"vector of length {n * (n - 1) // 2}; got shape {D.shape}.")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{name} contains NaN or infinite distances.")
    if np.any(d <= 0):
        raise ValueError(f"{name} has {int(np.sum(d <= 0))} zero (or negative) distance(s) "
                         f"between distinct points: the dilation |f(x) - f(y)| / d(x, y) is "
                         f"undefined there. Remove duplicate points first.")
    return d


def bilipschitz_distortion(Y, D) -> float:
    r"""The rescaled bi-Lipschitz constant of an embedding (Gilbert and O'Neill, eq. 32).

    .. math:: L = \frac{\max_{i \ne j} |y_i - y_j| / D_{ij}}{\min_{i \ne j} |y_i - y_j| / D_{ij}}

    ``L >= 1``; ``L = 1`` exactly when the embedding is a scaled isometry of ``D``. Returns
    ``inf`` when the embedding sends two points with ``D_ij > 0`` to the same place.

    Parameters
    ----------
    Y : ndarray (n, k)
        The embedding.
    D : ndarray (n, n) or condensed (n (n - 1) / 2,)
        Reference distances (e.g. :func:`diffusion_distances` or Euclidean).
    """
    Y = check_points(Y, name="Y")
    d = _condensed_reference(D, Y.shape[0])
    ratio = pdist(Y) / d
    lo = float(ratio.min())
    return float("inf") if lo <= 0 else float(ratio.max() / lo)


def diffusion_distances(X, epsilon: float, t: float, normalization: str = "symmetric",
                        alpha: float | None = None, tol: float = 1e-8,
                        max_iter: int = 1000) -> np.ndarray:
    r"""The ``n x n`` diffusion distances ``|a_i - a_j|`` between rows of ``A^t`` (Gilbert and
    O'Neill, eq. 26), ``A`` from Algorithm 1 ("symmetric") or 2 ("bistochastic"), by a full
    eigendecomposition (``O(n^3)``: a few thousand points at most).
    """
    epsilon = check_positive(epsilon, "epsilon")
    t = check_positive(t, "t")
    aff = build_dense_affinity(X, epsilon=epsilon, normalization=normalization, alpha=alpha,
                               tol=tol, max_iter=max_iter)
    mu, phi = scipy.linalg.eigh(aff.matrix, check_finite=False)
    mu = np.clip(mu, 0.0, None)           # PSD up to rounding
    G = (phi * mu ** (2.0 * t)) @ phi.T   # A^{2t} = (A^t)(A^t)^T: Gram of the rows a_i
    g = np.diag(G)
    sq = g[:, None] + g[None, :] - (G + G.T)      # exactly symmetric
    np.fill_diagonal(sq, 0.0)
    return np.sqrt(np.clip(sq, 0.0, None))


def mean_relative_error(Y, Y_ref) -> float:
    r"""Mean relative error of pairwise distances (García-Heredia et al., eq. 40).

    .. math:: \mathrm{MRE} = \frac{2}{N (N - 1)} \sum_{i < j}
              \frac{\big| |y_i - y_j| - |\tilde y_i - \tilde y_j| \big|}
                   {|\tilde y_i - \tilde y_j|}

    ``Y_ref`` (the ``tilde y``) is the reference embedding, e.g. exact diffusion maps.
    """
    Y = check_points(Y, name="Y")
    Y_ref = check_points(Y_ref, name="Y_ref")
    if Y.shape[0] != Y_ref.shape[0]:
        raise ValueError(f"Y and Y_ref must embed the same points; got {Y.shape[0]} and "
                         f"{Y_ref.shape[0]} rows.")
    d_ref = pdist(Y_ref)
    if np.any(d_ref <= 0):
        raise ValueError(f"Y_ref puts {int(np.sum(d_ref <= 0))} pair(s) of points at the same "
                         f"place; the relative error is undefined for them. Remove duplicate "
                         f"points first.")
    return float(np.mean(np.abs(pdist(Y) - d_ref) / d_ref))


def align_components(reference, approx):
    r"""Match approximate components to reference ones up to sign and order.

    Columns are scaled to unit norm; the matching ``pi`` maximises
    ``sum_l |<r_l, a_{pi(l)}>|`` (scipy ``linear_sum_assignment``), and each matched column
    takes the sign of its inner product.

    Returns
    -------
    ref_unit, approx_aligned : ndarrays (n, k_ref) - unit columns, the second permuted and
        sign-flipped onto the first.
    """
    R = np.asarray(reference, dtype=np.float64)
    B = np.asarray(approx, dtype=np.float64)
    if R.ndim != 2 or B.ndim != 2 or R.shape[0] != B.shape[0]:
        raise ValueError(f"reference {R.shape} and approx {B.shape} must be 2-d with the same "
                         f"number of rows (points).")
    if B.shape[1] < R.shape[1]:
        raise ValueError(f"approx has {B.shape[1]} components, fewer than the reference's "
                         f"{R.shape[1]}; compute at least as many.")
    Rn = R / np.linalg.norm(R, axis=0, keepdims=True)
    nb = np.linalg.norm(B, axis=0, keepdims=True)
    Bn = B / np.where(nb > 0, nb, 1.0)
    C = Rn.T @ Bn
    rows, cols = linear_sum_assignment(-np.abs(C))
    signs = np.sign(C[rows, cols])
    signs[signs == 0] = 1.0
    return Rn, Bn[:, cols] * signs


def embedding_sse(reference, approx) -> float:
    r"""SSE over diffusion components up to sign and order (Gigante et al., Sec. VI-A).

    ``SSE = sum_l ||r_l - s_l a_{pi(l)}||^2`` over unit columns after
    :func:`align_components`, i.e. ``2 sum_l (1 - |cos angle_l|)`` in ``[0, 2 k]``,
    independent of eigenvalue scaling and eigenvector normalisation.
    """
    Rn, Ba = align_components(reference, approx)
    return float(np.sum((Rn - Ba) ** 2))
