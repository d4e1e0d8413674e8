"""Graphs whose nodes are the data points themselves: a voxel lattice, a surface mesh, a
k-nearest-neighbour graph.

The induced-point graph of :mod:`flgp.graph.cross_graph` summarises ``n`` points by
``s`` induced points; a :class:`PointGraph` keeps every point as a node, for the
sparse-precision priors of :mod:`flgp.precision`. It holds what those priors read, in the
form of the SPDE approach (Lindgren, Rue and Lindström 2011):

* the **stiffness** ``G`` - symmetric, rows summing to 0, positive semi-definite: a graph
  Laplacian ``D - W`` (a mesh's cotangent stiffness may have positive entries off the
  diagonal at edges opposite obtuse angles: negative weights ``W_ij``, still PSD);
* the **mass** ``C`` - a positive diagonal (lumped masses), so that ``C⁻¹ G`` approximates
  ``-Δ``, the Laplace-Beltrami operator of the space the points sample, in the units of
  ``points`` (``1 / length²``).

The builders: :func:`flgp.graph.lattice.lattice_graph` (a voxel mask: ``G`` the
finite-difference Laplacian, ``C = I``), :func:`flgp.graph.mesh.mesh_graph` (a triangle
mesh: cotangent stiffness and lumped vertex areas) and
:func:`flgp.graph.knn.knn_point_graph` (any cloud: self-tuning Gaussian weights, scaled so
that ``C⁻¹ G`` approximates ``-Δ``).
"""

from __future__ import annotations

import warnings
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
        Node coordinates (world units: mm for voxels and meshes), for predictions at new
        points and for the Euclidean baselines.
    kind : str
        ``"lattice"``, ``"mesh"`` or ``"knn"``.
    spacing : float
        A typical distance between neighbouring nodes (the lattice's voxel size, the
        mesh's median edge, the cloud's median nearest-neighbour distance): the scale the
        priors' ranges are set from.
    """

    stiffness: sp.csr_matrix
    mass: np.ndarray
    points: np.ndarray
    kind: str
    spacing: float
    _pieces: tuple | None = field(default=None, repr=False)

    def __setstate__(self, state):
        # pickled before 2026-11-27, when a graph's components became its pieces
        self.__dict__.update({k.replace("component", "piece"): v for k, v in state.items()})

    def __post_init__(self):
        n = self.stiffness.shape[0]
        if self.stiffness.shape != (n, n) or self.mass.shape != (n,) \
                or self.points.shape[0] != n:
            raise ValueError(f"stiffness {self.stiffness.shape}, mass {self.mass.shape} and "
                             f"points {self.points.shape} must describe the same nodes.")
        if not np.all(np.isfinite(self.mass)) or np.any(self.mass <= 0):
            raise ValueError("the mass of every node must be positive and finite.")

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

    def check_rows(self, n_rows: int) -> "PointGraph":
        """This graph, if it has one node per row of a cloud of ``n_rows`` rows; else a
        ``ValueError`` saying so (an estimator's ``graph=`` against its ``X``)."""
        if self.n_nodes != int(n_rows):
            raise ValueError(f"graph has {self.n_nodes} nodes but the cloud has {n_rows} "
                             f"rows; build the graph on the same points (X stacked above "
                             f"X_unlabeled).")
        return self

    def pieces(self) -> tuple[int, np.ndarray]:
        """``(number of connected pieces, label of each node)``."""
        if self._pieces is None:
            self._pieces = connected_components(self.adjacency, directed=False)
        return self._pieces

    def components(self) -> tuple[int, np.ndarray]:
        """Deprecated name of :meth:`pieces` (until 2026-11-27; goes in the next release)."""
        warnings.warn("PointGraph.components() is now PointGraph.pieces() (a graph's "
                      "connected components are its pieces in flgp).", FutureWarning,
                      stacklevel=2)
        return self.pieces()

    def subgraph(self, nodes: np.ndarray) -> "PointGraph":
        """The graph induced by ``nodes`` (indices): their weights among themselves, the
        stiffness's diagonal recomputed so that rows sum to 0 (a free boundary where
        edges were cut), their masses and points."""
        nodes = np.asarray(nodes, dtype=np.int64)
        W = self.adjacency[nodes][:, nodes].tocsr()
        degree = np.asarray(W.sum(axis=1)).ravel()
        G = (sp.diags(degree) - W).tocsr()
        return PointGraph(stiffness=G, mass=self.mass[nodes].copy(),
                          points=self.points[nodes], kind=self.kind, spacing=self.spacing)

    def operator(self) -> sp.csr_matrix:
        """``C⁻¹ G`` (the discrete ``-Δ``)."""
        return sp.diags(1.0 / self.mass) @ self.stiffness
