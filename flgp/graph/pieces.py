r"""Connected pieces of a graph: the one piece finder of flgp (:func:`connected_pieces`),
used by the FLGP engine on its ``s x s`` Gram matrix, the compressed diffusion map on its
k-NN graph, and the dense embeddings through :func:`kernel_pieces`. Pieces are numbered in
the order of their first vertex.

Two points are joined in the Gaussian kernel graph when

.. math:: K_{ij} \ge \tau = 10^{-9} / n, \quad\text{i.e.}\quad
          |x_i - x_j|^2 \le \epsilon \log(10^9 n):

a random walk then leaves its piece with probability below ``1e-9`` per step, the
tolerance at which the spectral checks count an eigenvalue as 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .neighbors import nearest_induced_points

__all__ = ["Pieces", "connected_pieces", "kernel_pieces", "kernel_join_radius",
           "KERNEL_FLOOR"]

# two points are joined when their Gaussian kernel weight is at least KERNEL_FLOOR / n
KERNEL_FLOOR = 1e-9
# nearest neighbours searched for the first, sparse guess of the kernel graph's pieces
_GUESS_NEIGHBOURS = 10


@dataclass(frozen=True)
class Pieces:
    """The connected pieces of a graph.

    Attributes
    ----------
    labels : ndarray (n_vertices,) of int64
        Piece of each vertex, ``0 .. n_pieces - 1`` in the order of each piece's first
        vertex; ``-1`` for vertices left out (``active=False`` in :func:`connected_pieces`).
    sizes : ndarray (n_pieces,) of int64
        Vertices in each piece.
    """

    labels: np.ndarray
    sizes: np.ndarray

    @property
    def n_pieces(self) -> int:
        return int(self.sizes.shape[0])

    def members(self, piece: int) -> np.ndarray:
        """Indices of the vertices in ``piece``, ascending."""
        return np.flatnonzero(self.labels == piece)

    def describe(self, max_listed: int = 8) -> str:
        """``"3 pieces (sizes 60, 60, 1)"``: the count and the sizes, largest first."""
        sizes = np.sort(self.sizes)[::-1]
        listed = ", ".join(str(int(v)) for v in sizes[:max_listed])
        if sizes.size > max_listed:
            rest = sizes[max_listed:]
            span = (f"size {int(rest.min())}" if rest.min() == rest.max()
                    else f"sizes {int(rest.min())}-{int(rest.max())}")
            listed += f", and {rest.size} more of {span}"
        return f"{self.n_pieces} pieces (sizes {listed})"


def connected_pieces(adjacency, *, active=None) -> Pieces:
    """Connected pieces of an undirected graph.

    Parameters
    ----------
    adjacency : ndarray or scipy sparse matrix (n, n)
        An edge joins ``i`` and ``j`` wherever entry ``(i, j)`` or ``(j, i)`` is nonzero
        (explicitly stored zeros are no edge).
    active : ndarray (n,) of bool, optional
        Vertices to count; the others are left out (label ``-1``) and must have no edges
        (e.g. FLGP's induced points that no point uses).

    Returns
    -------
    Pieces
    """
    if sp.issparse(adjacency):
        coo = sp.coo_matrix(adjacency)
        edge = coo.data != 0
        pattern = sp.csr_matrix((np.ones(int(edge.sum()), dtype=bool),
                                 (coo.row[edge], coo.col[edge])), shape=coo.shape)
    else:
        pattern = sp.csr_matrix(np.asarray(adjacency) != 0)
    n = pattern.shape[0]
    if pattern.shape != (n, n):
        raise ValueError(f"the adjacency matrix must be square; got shape {pattern.shape}.")
    n_raw, raw = connected_components(pattern, directed=False)
    active = np.ones(n, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    if active.shape != (n,):
        raise ValueError(f"active must have one entry per vertex ({n}); got shape "
                         f"{active.shape}.")
    # number the pieces that hold an active vertex by their first active vertex
    found, first = np.unique(raw[active], return_index=True)
    relabel = np.full(n_raw, -1, dtype=np.int64)
    relabel[found[np.argsort(first)]] = np.arange(found.size)
    labels = relabel[raw]
    labels[~active] = -1
    sizes = np.bincount(labels[labels >= 0], minlength=found.size).astype(np.int64)
    return Pieces(labels=labels, sizes=sizes)


def kernel_join_radius(epsilon: float, n_samples: int) -> float:
    """Squared distance below which two of ``n`` points are joined in the Gaussian kernel
    graph: ``exp(-d^2 / epsilon) >= 1e-9 / n``, i.e. ``d^2 <= epsilon log(1e9 n)``."""
    return float(epsilon) * float(np.log(n_samples / KERNEL_FLOOR))


def kernel_pieces(X: np.ndarray, epsilon: float, *, backend: str = "auto") -> Pieces:
    r"""Pieces of the Gaussian kernel graph ``exp(-|x_i - x_j|^2 / epsilon) >= 1e-9 / n``,
    without the ``n x n`` kernel: points within the join radius of one of their 10 nearest
    neighbours are linked first, then those pieces are merged breadth-first by
    nearest-point searches between the unreached points and the last round's.

    Parameters
    ----------
    X : ndarray (n, p)
        Validated points.
    epsilon : float
        Kernel scale (``exp(-d^2 / epsilon)``).
    backend : {"auto", "torch", "keops"}, default="auto"
        Who runs the nearest-point searches.
    """
    n = X.shape[0]
    if n == 1:
        return Pieces(labels=np.zeros(1, dtype=np.int64), sizes=np.ones(1, dtype=np.int64))
    r2 = kernel_join_radius(epsilon, n)
    k = min(n, _GUESS_NEIGHBOURS + 1)
    idx, sq = nearest_induced_points(X, X, k, backend=backend)
    keep = sq <= r2
    rows = np.repeat(np.arange(n), k)[keep.ravel()]
    graph = sp.csr_matrix((np.ones(rows.size, dtype=bool), (rows, idx[keep])), shape=(n, n))
    guess = connected_pieces(graph)
    if guess.n_pieces == 1:
        return guess
    bridges_from, bridges_to = [], []
    reached = np.zeros(guess.n_pieces, dtype=bool)
    while not reached.all():
        start = int(np.flatnonzero(~reached)[0])
        reached[start] = True
        frontier = guess.members(start)
        while True:
            rest = np.flatnonzero(~reached[guess.labels])
            if rest.size == 0:
                break
            near, near_sq = nearest_induced_points(X[rest], X[frontier], 1, backend=backend)
            hit = near_sq[:, 0] <= r2
            if not hit.any():
                break
            bridges_from.append(rest[hit])
            bridges_to.append(frontier[near[hit, 0]])
            joined = np.unique(guess.labels[rest[hit]])
            reached[joined] = True
            frontier = np.flatnonzero(np.isin(guess.labels, joined))
    if bridges_from:
        a = np.concatenate(bridges_from)
        b = np.concatenate(bridges_to)
        graph = graph + sp.csr_matrix((np.ones(a.size, dtype=bool), (a, b)), shape=(n, n))
    return connected_pieces(graph)
