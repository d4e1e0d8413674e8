r"""The spectrum of an operator that falls apart into pieces, assembled from the pieces'.

A symmetric operator block-diagonal over ``c`` pieces has as eigenpairs the union of its
blocks' (vectors zero-padded). Each block has top eigenvalue 1, so 1 is ``c``-fold, its
eigenspace spanned by the blocks' unit top vectors ``g_P``. :func:`unit_basis` fixes one
orthonormal basis of it:

* first, the stationary direction ``g = sum_P sqrt(m_P) g_P`` (``m_P`` the piece's share
  of the stationary distribution), i.e. ``sqrt(pi)``, dropped by the diffusion map as for
  a connected operator;
* then Gram-Schmidt of the ``g_P`` against ``g`` and each other, pieces by decreasing
  mass: coordinate ``j`` contrasts the ``j``-th largest piece with those after it, constant
  on each piece in Markov coordinates ``psi = phi / sqrt(pi)``, positive on its piece.

This is the limit of a connected operator's eigenvectors as the links between pieces
vanish (cf. García-Heredia et al., after eq. 15). The remaining eigenpairs are the
pieces' own non-trivial ones, sorted by eigenvalue (ties in piece order).
"""

from __future__ import annotations

import numpy as np

__all__ = []


def unit_basis(masses: np.ndarray) -> np.ndarray:
    """Orthogonal ``c x c`` matrix ``R``: coefficients over the pieces' top vectors of the
    eigenvalue-1 basis (module notes; column 0: the stationary direction ``sqrt(masses)``)."""
    masses = np.asarray(masses, dtype=np.float64)
    c = masses.size
    w = np.sqrt(masses / masses.sum())
    cols = [w]
    for j in np.argsort(-masses, kind="stable")[:c - 1]:
        e = np.zeros(c)
        e[j] = 1.0
        for _ in range(2):                      # Gram-Schmidt, twice for orthogonality
            for q in cols:
                e -= (q @ e) * q
        cols.append(e / np.linalg.norm(e))
    return np.column_stack(cols)


def assemble(index: list, spectra: list, masses: np.ndarray, n: int, m: int):
    """The top ``m`` eigenpairs of the block-diagonal operator.

    ``index``: each piece's point indices (into ``0..n-1``); ``spectra``: each piece's
    ``(mu, vectors)``, descending, ``mu[0] = 1`` with top vector ``vectors[:, 0]``;
    ``masses``: each piece's share of the stationary distribution; ``m``: eigenpairs wanted
    (fewer when the pieces have fewer).

    Returns ``(mu, vectors)``: ``min(c, m)`` ones, then the pieces' other eigenvalues
    descending; orthonormal ``(n, m)`` vectors, the :func:`unit_basis` eigenvalue-1 basis
    first, then each piece's other eigenvectors zero-padded.
    """
    c = len(index)
    R = unit_basis(masses)
    G = np.zeros((n, c))
    for p, (idx, (_, vec)) in enumerate(zip(index, spectra)):
        top = vec[:, 0]
        G[idx, p] = top if top.sum() >= 0 else -top
    n_unit = min(c, m)
    unit = G @ R[:, :n_unit]
    tail = [(-float(mu[j]), p, j) for p, (mu, _) in enumerate(spectra)
            for j in range(1, mu.shape[0])]
    tail.sort()
    tail = tail[:max(0, m - c)]
    vectors = np.zeros((n, n_unit + len(tail)))
    vectors[:, :n_unit] = unit
    for col, (_, p, j) in enumerate(tail, start=n_unit):
        vectors[index[p], col] = spectra[p][1][:, j]
    mu = np.concatenate([np.ones(n_unit), [-v for v, _, _ in tail]])
    return mu, vectors
