"""Estimators and inference: :class:`FLGPRegressor`, :class:`FLGPClassifier`, the
expectation-propagation, Laplace and low-rank Gaussian inference they use, the RBF
baselines, :class:`MultinomialProbitLikelihood` for users' own GPyTorch models, and
:func:`predict_image` (regression on the voxels of a NIfTI image). The labelling loop's
suggestions live in :mod:`flgp.models.labelling`, the count model in
:mod:`flgp.models.poisson`."""

from .classifier import FLGPClassifier
from .image import ImagePrediction, predict_image
from .likelihoods import MultinomialProbitLikelihood
from .regressor import FLGPRegressor

__all__ = ["FLGPClassifier", "FLGPRegressor", "ImagePrediction",
           "MultinomialProbitLikelihood", "predict_image"]
