"""Point cloud -> sparse transition operators.

* :mod:`~flgp.graph.induced_points` - induced points (random subsample, k-means centres);
* :mod:`~flgp.graph.neighbors` - each point's ``r`` nearest induced points;
* :mod:`~flgp.graph.cross_kernel` - SE and LAE weights on those pairs;
* :mod:`~flgp.graph.transition` - ``Z``, ``A``, ``Λ`` (He et al., eq. 4);
* :mod:`~flgp.graph.cross_graph` - all of the above in one call, with the out-of-sample rows;
* :mod:`~flgp.graph.dense` - the full ``n x n`` graph of GLGP and the Nyström graph;
* :mod:`~flgp.graph.pieces` - connected pieces of any of these graphs;
* graphs on the data points themselves (:class:`~flgp.graph.PointGraph`):
  :mod:`~flgp.graph.lattice` (a voxel mask), :mod:`~flgp.graph.mesh` (a triangle mesh),
  :mod:`~flgp.graph.knn` (any cloud; Poisson learning's self-tuning graph).

Nothing here imports GPyTorch or scikit-learn's estimators.
"""

from .pieces import Pieces, connected_pieces, kernel_pieces
from .cross_graph import CrossGraph, build_cross_graph
from .cross_kernel import default_bandwidth, lae_weights
from .dense import DenseGraph, build_dense_graph, build_nystrom_graph, NystromGraph
from .induced_points import InducedPoints, kmeans_centres, random_induced_points
from .neighbors import nearest_induced_points
from .knn import bucket_knn, knn_point_graph, self_tuning_knn_graph
from .lattice import lattice_graph
from .mesh import mesh_graph
from .point_graph import PointGraph
from .transition import CrossTransition

__all__ = ["CrossGraph", "build_cross_graph", "default_bandwidth", "lae_weights",
           "DenseGraph", "build_dense_graph", "NystromGraph", "build_nystrom_graph",
           "InducedPoints", "kmeans_centres", "random_induced_points", "nearest_induced_points",
           "CrossTransition", "Pieces", "connected_pieces", "kernel_pieces", "PointGraph",
           "lattice_graph", "knn_point_graph", "mesh_graph", "self_tuning_knn_graph",
           "bucket_knn"]
