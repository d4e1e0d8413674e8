"""Point cloud -> sparse transition operators.

* :mod:`~flgp.graph.landmarks` - induced points (random subsample, k-means centres);
* :mod:`~flgp.graph.neighbors` - each point's ``r`` nearest induced points;
* :mod:`~flgp.graph.cross_kernel` - SE and LAE weights on those pairs;
* :mod:`~flgp.graph.transition` - ``Z``, ``A``, ``Λ`` (He et al., eq. 4);
* :mod:`~flgp.graph.cross_graph` - all of the above in one call, with the out-of-sample rows;
* :mod:`~flgp.graph.dense` - the full ``n x n`` graph of GLGP and the Nyström graph;
* :mod:`~flgp.graph.components` - connected pieces of any of these graphs (the one
  component finder shared by the engine, the estimators and the transformers).

Nothing here imports GPyTorch or scikit-learn.
"""

from .components import Pieces, connected_pieces, kernel_pieces
from .cross_graph import CrossGraph, build_cross_graph
from .cross_kernel import default_bandwidth, lae_weights
from .dense import DenseGraph, build_dense_graph, build_nystrom_graph, NystromGraph
from .landmarks import Landmarks, kmeans_centres, random_landmarks
from .neighbors import nearest_landmarks
from .transition import CrossTransition

__all__ = ["CrossGraph", "build_cross_graph", "default_bandwidth", "lae_weights",
           "DenseGraph", "build_dense_graph", "NystromGraph", "build_nystrom_graph",
           "Landmarks", "kmeans_centres", "random_landmarks", "nearest_landmarks",
           "CrossTransition", "Pieces", "connected_pieces", "kernel_pieces"]
