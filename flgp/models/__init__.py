"""Gaussian-process estimators on a point cloud, by role:

* :class:`FLGPClassifier`, :class:`FLGPRegressor` - the estimators, over one shared core
  (``flgp.models._base``);
* :mod:`flgp.models.priors` - their priors as objects (:class:`HeatKernelPrior`,
  :class:`GraphMaternPrior`, :class:`RBFPrior`), each giving its GPyTorch kernel;
* :mod:`flgp.models.inference` - the inference engines (EP, Laplace, exact low-rank
  Gaussian, Poisson counts);
* :mod:`flgp.models.representation` - what the estimators ask of a representation of their
  prior: :mod:`flgp.models.graph_matern`, :mod:`flgp.models.baselines` (the RBF GPs) and
  :mod:`flgp.models.heat_kernel` (on the engine of :mod:`flgp.models.eigenbasis`);
* :mod:`flgp.models.labelling` - the labelling loop;
* :func:`predict_image`, :func:`predict_surface` - regression on the voxels of NIfTI maps
  or the vertices of a surface mesh; :func:`seed_correlation` - seed-correlation maps;
  :func:`excursion_set` - where a full-resolution map exceeds a level jointly;
  :func:`group_map`, :func:`group_contrast` - population maps of many subjects;
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
