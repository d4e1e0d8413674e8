"""Sparse-precision Gaussian priors at the data's own resolution.

The low-rank engine (:mod:`flgp.spectral`) keeps the top ``M`` eigenpairs of an
induced-point graph; this package works on the graph of the data points themselves (a
voxel lattice, a surface mesh, a k-nearest-neighbour graph: :class:`flgp.graph.PointGraph`)
with a prior given by its sparse precision matrix, so that nothing is truncated:

* :mod:`flgp.precision.matern` - the graph Matérn family ``Q = (κ²C + L) (C⁻¹(κ²C + L))^{ν-1}``
  and its limits;
* :mod:`flgp.precision.cholesky` - sparse Cholesky factors of one pattern (CHOLMOD);
* :mod:`flgp.precision.gaussian` - Gaussian regression under such a prior: the exact
  posterior mean, the exact log marginal likelihood (amplitude profiled), its
  hyperparameters by that evidence, and predictive variances;
* :mod:`flgp.precision.maps` - many maps observed at the same nodes, each its own prior
  by its own evidence, the whole graph's factorisations and variances shared among maps
  whose optima round alike;
* :mod:`flgp.precision.prior` - the graph Matérn prior behind the estimators' prior
  interface (:class:`flgp.prior.GraphPrior`): covariance blocks by sparse solves;
* :mod:`flgp.precision.classification` - classification on such a graph: the graph
  Matérn GP classifier in its small-amplitude limit (Poisson learning's solution for
  ``ν = 1``), probabilities at a spread set from the cloud, and a prior on the classes'
  sizes;
* :mod:`flgp.precision.excursion` - excursion sets of a Gaussian posterior: joint draws
  from the factor of its precision, the excursion function in the marginal ordering
  (Bolin and Lindgren 2015);
* :mod:`flgp.precision.group` - many subjects' maps on one graph: the two-level model's
  group map (a graph Matérn field, each subject's deviation another, noise), its joint
  posterior from one sparse factor of ``(g, d̄)``'s precision, and its hyperparameters.

It knows nothing of estimators: :class:`flgp.FLGPRegressor` and
:class:`flgp.FLGPClassifier` (``method="graph_matern"``),
:func:`flgp.predict_image` and :func:`flgp.predict_surface` call it. ``MATERN_ORDERS``:
the orders the estimators compare (docs/full_resolution.md).
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
