"""Graphs whose nodes are the data points themselves, for the sparse-precision priors of
:mod:`flgp.precision`, in the form of the SPDE approach (Lindgren, Rue and Lindström 2011):

* the **stiffness** ``G = D - W``: symmetric, rows summing to 0, PSD (a mesh may have
  negative weights ``W_ij`` at obtuse angles);
* the **mass** ``C``: a positive diagonal, so that ``C⁻¹ G`` approximates ``-Δ`` in the
  units of ``points`` (``1 / length²``).

Builders: :func:`flgp.graph.lattice.lattice_graph` (a voxel mask),
:func:`flgp.graph.mesh.mesh_graph` (a triangle mesh) and
:func:`flgp.graph.knn.knn_point_graph` (any cloud).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

__all__ = ["PointGraph"]


@dataclass
class PointGraph:
    """A graph on the data points (see the module notes).

    Attributes
    ----------
    stiffness : scipy.sparse.csr_matrix (n, n)
        ``G = D - W``: symmetric, rows summing to 0, positive semi-definite.
    mass : ndarray (n,)
        The lumped mass ``C`` (positive).
    points : ndarray (n, p)
        Node coordinates (world units, e.g. mm).
    kind : str
        ``"lattice"``, ``"mesh"`` or ``"knn"``.
    spacing : float
        A typical distance between neighbouring nodes; the priors' ranges are set from it.
    """

    stiffness: sp.csr_matrix
    mass: np.ndarray
    points: np.ndarray
    kind: str
    spacing: float
    _pieces: tuple | None = field(default=None, repr=False)

    def __post_init__(self):
        self.check()

    def __repr__(self) -> str:
        return (f"PointGraph(kind={self.kind!r}, n_nodes={self.n_nodes}, "
                f"spacing={self.spacing:.4g})")

    def check(self) -> None:
        """ValueError for no node, arrays of different lengths, a non-finite weight or a
        mass that is not finite and positive (naming the first bad node)."""
        n = self.stiffness.shape[0]
        if n == 0:
            raise ValueError("a graph needs at least one node; this one has none (an empty "
                             "mask or cloud?).")
        if self.stiffness.shape != (n, n) or self.mass.shape != (n,) \
                or self.points.shape[0] != n:
            raise ValueError(f"stiffness {self.stiffness.shape}, mass {self.mass.shape} and "
                             f"points {self.points.shape} must describe the same nodes.")
        bad = np.flatnonzero(~(np.isfinite(self.mass) & (self.mass > 0)))
        if bad.size:
            first = float(self.mass[bad[0]])
            raise ValueError(f"the mass of every node must be positive and finite; "
                             f"{bad.size} are not (node {bad[0]}: {first!r}).")
        weights = self.stiffness.data if sp.issparse(self.stiffness) else self.stiffness
        if not np.all(np.isfinite(weights)):
            raise ValueError("the graph's stiffness (its edge weights) holds NaN or "
                             "infinite entries; rebuild the graph from finite points.")

    @property
    def n_nodes(self) -> int:
        return self.stiffness.shape[0]

    @property
    def adjacency(self) -> sp.csr_matrix:
        """``W``: the off-diagonal weights (non-negative, but for a mesh's obtuse angles)."""
        W = -self.stiffness.tocsr(copy=True)
        W.setdiag(0.0)
        W.eliminate_zeros()
        return W

    # how far a node may lie from its row of X, in spacings (float32 rounding is ~1e-5)
    ROW_TOLERANCE = 1e-3

    def check_rows(self, X) -> "PointGraph":
        """This graph if its nodes are the rows of ``X``, in order, each within
        ``ROW_TOLERANCE`` spacings; else a ``ValueError`` saying which."""
        X = np.asarray(X)
        if self.n_nodes != X.shape[0]:
            raise ValueError(f"graph has {self.n_nodes} nodes but the cloud has {X.shape[0]} "
                             f"rows; build the graph on the same points (X stacked above "
                             f"X_unlabeled).")
        if self.points.shape[1] != X.shape[1]:
            raise ValueError(f"graph's points have {self.points.shape[1]} coordinates but X "
                             f"has {X.shape[1]} features; build the graph on X's rows.")
        gap = np.sqrt(np.max(np.sum((self.points - X) ** 2, axis=1))) if X.size else 0.0
        if not gap <= self.ROW_TOLERANCE * self.spacing:
            row = int(np.argmax(np.sum((self.points - X) ** 2, axis=1)))
            raise ValueError(f"graph's nodes are not the rows of X: node {row} lies "
                             f"{gap:.3g} from row {row} (the graph's spacing is "
                             f"{self.spacing:.3g}). Build the graph on X's rows, in their "
                             f"order and units (X stacked above X_unlabeled; for an image, "
                             f"lattice_graph(ijk, affine) and X the voxels' world "
                             f"coordinates).")
        return self

    def pieces(self) -> tuple[int, np.ndarray]:
        """``(number of connected pieces, label of each node)``."""
        if self._pieces is None:
            self._pieces = connected_components(self.adjacency, directed=False)
        return self._pieces

    def subgraph(self, nodes: np.ndarray) -> "PointGraph":
        """The graph induced by ``nodes`` (indices), the diagonal recomputed so that rows
        sum to 0 (a free boundary where edges were cut)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        W = self.adjacency[nodes][:, nodes].tocsr()
        degree = np.asarray(W.sum(axis=1)).ravel()
        G = (sp.diags(degree) - W).tocsr()
        return PointGraph(stiffness=G, mass=self.mass[nodes].copy(),
                          points=self.points[nodes], kind=self.kind, spacing=self.spacing)

    def own_units(self) -> tuple[float, float]:
        """``(length, mass)``: the graph's own units, ``length = s^{-1/2}`` with ``s`` the
        median of ``G_ii / C_ii`` and ``mass`` the mean of ``C``; they scale with the units
        of the points (docs/full_resolution.md, "Units")."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = self.stiffness.diagonal() / self.mass
        ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
        scale = float(np.median(ratio)) if ratio.size else 1.0
        return 1.0 / float(np.sqrt(scale)), float(np.mean(self.mass))

    def in_units(self, length: float, mass: float) -> "PointGraph":
        """This graph in units ``length`` and ``mass``: points and spacing divided by
        ``length``, the mass by ``mass``, the stiffness multiplied by ``length² / mass``.
        ValueError unless both are finite and positive."""
        length, mass = float(length), float(mass)
        if not (np.isfinite(length) and length > 0 and np.isfinite(mass) and mass > 0):
            raise ValueError(f"units must be finite and positive; got length={length!r}, "
                             f"mass={mass!r}.")
        factor = (length / mass) * length
        return PointGraph(stiffness=(self.stiffness * factor).tocsr(),
                          mass=self.mass / mass, points=self.points / length,
                          kind=self.kind, spacing=self.spacing / length,
                          _pieces=self._pieces)

    def in_own_units(self) -> "PointGraph":
        """:meth:`in_units` of :meth:`own_units`: the same graph, unit-free."""
        return self.in_units(*self.own_units())

    def operator(self) -> sp.csr_matrix:
        """``C⁻¹ G`` (the discrete ``-Δ``)."""
        return sp.diags(1.0 / self.mass) @ self.stiffness
