"""Estimators and inference: :class:`FLGPRegressor`, :class:`FLGPClassifier`, the
expectation-propagation, Laplace and low-rank Gaussian inference they use, the RBF
baselines, and :class:`MultinomialProbitLikelihood` for users' own GPyTorch models."""

from .classifier import FLGPClassifier
from .likelihoods import MultinomialProbitLikelihood
from .regressor import FLGPRegressor

__all__ = ["FLGPClassifier", "FLGPRegressor", "MultinomialProbitLikelihood"]
