"""Sparse-precision Gaussian priors at the data's own resolution.

Where :mod:`flgp.spectral` keeps the top ``M`` eigenpairs of an induced-point graph, this
package works on the graph of the data points themselves (a voxel lattice, a surface mesh,
a k-NN graph: :class:`flgp.graph.PointGraph`) with a prior given by its sparse precision,
so that nothing is truncated:

* :mod:`~flgp.precision.matern` - the graph Matérn family
  ``Q = (κ²C + L) (C⁻¹(κ²C + L))^{ν-1}``; :mod:`~flgp.precision.cholesky` - sparse
  Cholesky factors of one pattern (CHOLMOD);
* :mod:`~flgp.precision.gaussian` - Gaussian regression under such a prior (exact posterior
  mean, evidence, hyperparameters, predictive variances); :mod:`~flgp.precision.maps` -
  many maps on the same nodes;
* :mod:`~flgp.precision.prior` - the prior behind :class:`flgp.prior.GraphPrior`;
* :mod:`~flgp.precision.classification` - classification on such a graph (Poisson
  learning's limit, least squares, a prior on the classes' sizes);
* :mod:`~flgp.precision.excursion` - excursion sets from joint posterior draws (Bolin and
  Lindgren 2015); :mod:`~flgp.precision.group` - a two-level model of many subjects' maps.

The estimators (:class:`flgp.FLGPRegressor`, :class:`flgp.FLGPClassifier` with
``method="graph_matern"``, :func:`flgp.predict_image`, :func:`flgp.predict_surface`) call
it. ``MATERN_ORDERS``: the orders the estimators compare (docs/full_resolution.md).
"""

from .classification import (balance_to_prior, balanced_log_odds, class_size_prior,
                             chosen_candidate, graph_edges, graph_total_variation,
                             green_scores, labels_kept, score_scale,
                             scores_to_probabilities)
from .cholesky import NotPositiveDefiniteError, PatternCholesky
from .excursion import (ExcursionFunction, ExcursionSet, PosteriorDraws,
                        excursion_function, graph_matern_posterior_draws)
from .gaussian import MaternFit, MaternRegression, fit_matern, rbmc_variances, search_matern
from .group import GroupParameters, GroupPosterior, fit_group, group_log_likelihood
from .maps import fit_matern_maps
from .matern import MATERN_ORDERS, matern_precision
from .posterior import NodePosterior
from .prior import SparsePrecisionPrior

__all__ = ["NotPositiveDefiniteError", "PatternCholesky", "MaternFit", "MaternRegression",
           "fit_matern", "fit_matern_maps", "search_matern", "rbmc_variances", "MATERN_ORDERS",
           "matern_precision",
           "NodePosterior", "green_scores", "scores_to_probabilities", "class_size_prior",
           "balanced_log_odds", "balance_to_prior", "graph_edges", "graph_total_variation",
           "chosen_candidate", "labels_kept", "score_scale",
           "SparsePrecisionPrior", "ExcursionFunction", "ExcursionSet", "PosteriorDraws",
           "excursion_function", "graph_matern_posterior_draws", "GroupParameters",
           "GroupPosterior", "fit_group", "group_log_likelihood"]
