"""Estimators and inference: :class:`FLGPRegressor`, :class:`FLGPClassifier`, the
expectation-propagation, Laplace and low-rank Gaussian inference they use, the RBF
baselines, and :class:`MultinomialProbitLikelihood` for users' own GPyTorch models. The
labelling loop's suggestions live in :mod:`flgp.models.labelling`, the count model in
:mod:`flgp.models.poisson`."""

from .classifier import FLGPClassifier
from .likelihoods import MultinomialProbitLikelihood
from .regressor import FLGPRegressor

__all__ = ["FLGPClassifier", "FLGPRegressor", "MultinomialProbitLikelihood"]
