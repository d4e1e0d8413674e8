"""Gaussian-process estimators on a point cloud, by role:

* the estimators - :class:`FLGPClassifier`, :class:`FLGPRegressor` - over one shared core
  (``flgp.models._base``: inputs validated once, the prior objects, the fit of the
  representation chosen);
* their priors as objects (:mod:`flgp.models.priors`): :class:`HeatKernelPrior`,
  :class:`GraphMaternPrior`, :class:`RBFPrior`, each holding its representation's
  settings and giving its GPyTorch kernel;
* :mod:`flgp.models.inference` - the inference engines they use (expectation
  propagation, Laplace, exact low-rank Gaussian, Poisson counts), which know nothing of
  estimators;
* :mod:`flgp.models.representation` - what the estimators ask of a representation of
  their prior; the three they register are :mod:`flgp.models.graph_matern` (the
  full-resolution graph Matérn prior, ``method="graph_matern"``), :mod:`flgp.models.baselines`
  (the extrinsic RBF-kernel GPs, ``method="rbf"``) and :mod:`flgp.models.heat_kernel`
  (the low-rank heat kernel, ``method="flgp"``, ``"glgp"``, ``"nystrom"``, on the engine
  of :mod:`flgp.models.eigenbasis`: candidate eigenbases, warm start);
* :mod:`flgp.models.labelling` - the labelling loop, through the estimators' documented
  interface (``eigenpairs_``, ``labelled_indices_``, ``latent_posterior()``);
* :func:`predict_image` - regression on the voxels of a NIfTI image (or several maps),
  mean and sd images out (``flgp.models.image``); :func:`seed_correlation` - the fitted
  prior's seed-correlation maps (``flgp.models.seeds``); :func:`predict_surface` - on the
  vertices of a surface mesh (``flgp.models.surface``); :func:`excursion_set` - where a
  full-resolution map exceeds a level jointly, from its posterior's sparse factor
  (``flgp.models.excursion``); :func:`group_map` - the population map of many subjects'
  maps on one mask under a two-level graph Matérn model, and :func:`group_contrast` of
  two groups (``flgp.models.group``);
* :class:`MultinomialProbitLikelihood` for users' own GPyTorch models.
"""

from .classifier import FLGPClassifier
from .excursion import excursion_set, posterior_draws_of
from .group import GroupContrast, GroupMap, group_contrast, group_map
from .image import ImagePrediction, predict_image
from .likelihoods import MultinomialProbitLikelihood
from .priors import Eigenbasis, GraphMaternPrior, HeatKernelPrior, RBFPrior
from .regressor import FLGPRegressor
from .seeds import SeedCorrelation, atlas_seeds, seed_correlation
from .surface import SurfacePrediction, predict_surface

__all__ = ["FLGPClassifier", "FLGPRegressor", "ImagePrediction",
           "MultinomialProbitLikelihood", "predict_image", "SurfacePrediction",
           "predict_surface", "SeedCorrelation", "seed_correlation", "atlas_seeds",
           "HeatKernelPrior", "Eigenbasis", "GraphMaternPrior", "RBFPrior", "excursion_set",
           "posterior_draws_of", "GroupMap", "GroupContrast", "group_map", "group_contrast"]
