r"""The spectrum of an operator that falls apart into pieces, assembled from the pieces'.

A symmetric operator that is block-diagonal over ``c`` pieces (no entry between them) has
as eigenpairs the union of its blocks' eigenpairs, each block's vectors padded with zeros.
Every block has a top eigenvalue 1, so 1 is ``c``-fold: its eigenspace is spanned by the
blocks' top vectors ``g_P`` (unit norm, supported on piece ``P``), and any orthonormal basis
of that span is as good as any other. We fix one (:func:`unit_basis`):

* the first vector is the operator's stationary direction ``g = sum_P sqrt(m_P) g_P``
  (``m_P`` the piece's share of the stationary distribution): ``sqrt(pi)``, the top
  eigenvector that a connected operator would have, dropped by the diffusion map as usual;
* the other ``c - 1`` come from Gram-Schmidt of ``g_P`` against ``g`` and each other,
  pieces in decreasing order of mass: coordinate ``j`` contrasts the ``j``-th largest piece
  with the pieces after it, constant on each piece (in the Markov coordinates ``psi =
  phi / sqrt(pi)``); it is positive on the piece it singles out.

This is the limit of a connected operator's eigenvectors as the links between its pieces
weaken to zero (the second eigenvector of two weakly linked pieces tends to the contrast
of the two). García-Heredia et al. (paper 004, after eq. 15) note that a connected graph's
``P`` has eigenvalue 1 once, with the constant right eigenvector; a graph in ``c`` pieces
has it ``c`` times, with right eigenvectors constant on each piece, and the expansion of
the diffusion distance keeps them all. The remaining eigenpairs are the pieces' own
non-trivial ones, sorted by eigenvalue across pieces (ties in piece order).
"""

from __future__ import annotations

import numpy as np

__all__ = []


def unit_basis(masses: np.ndarray) -> np.ndarray:
    """Orthogonal ``c x c`` matrix ``R``: the coefficients, over the pieces' top vectors,
    of the basis of the eigenvalue-1 space described in the module notes (column 0: the
    stationary direction ``sqrt(masses)``)."""
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

    Parameters
    ----------
    index : list of ndarray
        Indices (into ``0..n-1``) of each piece's points.
    spectra : list of (mu, vectors)
        Each piece's top eigenpairs, descending, ``mu[0]`` its eigenvalue 1 and
        ``vectors[:, 0]`` (orthonormal columns over the piece) its top vector.
    masses : ndarray (c,)
        Each piece's share of the stationary distribution.
    n, m : int
        Points in all; eigenpairs wanted (fewer come back when the pieces have fewer).

    Returns
    -------
    mu : ndarray (m,)
        ``c`` ones (``min(c, m)``), then the pieces' other eigenvalues, descending.
    vectors : ndarray (n, m)
        Orthonormal: the eigenvalue-1 basis of :func:`unit_basis`, then each piece's other
        eigenvectors padded with zeros.
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
