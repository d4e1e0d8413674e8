"""Estimators and inference: :class:`FLGPRegressor`, :class:`FLGPClassifier`, the Laplace
and low-rank Gaussian inference they use, and the RBF baselines."""

from .classifier import FLGPClassifier
from .regressor import FLGPRegressor

__all__ = ["FLGPClassifier", "FLGPRegressor"]
