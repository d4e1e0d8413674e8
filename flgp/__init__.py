"""flgp - heat-kernel Gaussian processes and diffusion embeddings on point clouds.

Layers, each using only those before it:

1. :mod:`flgp.graph` - points -> induced points and the sparse transition between them;
2. :mod:`flgp.spectral` - eigenpairs with an out-of-sample map, and the priors' spectra
   (:mod:`flgp.spectral.families`: the heat kernel ``c Σ e^{-tλ} v vᵀ``);
3. :mod:`flgp.kernels` - the priors as GPyTorch kernels;
4. :mod:`flgp.models` (Gaussian-process estimators) and :mod:`flgp.embedding`
   (scikit-learn transformers).

Support: :mod:`flgp.backends` (distance work), ``flgp._chunks`` (block driver, numpy or
Dask), ``flgp._validation`` (input checks) and :mod:`flgp.datasets`.
"""

from . import datasets, graph, kernels, models, precision, spectral
from ._chunks import record_stages
from ._config import config_context, get_config, set_config
from .models import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior,
                     HeatKernelPrior, RBFPrior, excursion_set, group_contrast, group_map,
                     predict_image, predict_surface)
from .spectral import Eigenpairs, compute_eigenpairs

__version__ = "0.1.0"

__all__ = ["FLGPClassifier", "FLGPRegressor", "HeatKernelPrior", "Eigenbasis",
           "GraphMaternPrior", "RBFPrior", "Eigenpairs", "compute_eigenpairs", "datasets",
           "graph", "kernels", "models", "precision", "spectral", "config_context", "get_config",
           "set_config", "predict_image", "predict_surface", "excursion_set", "group_map",
           "group_contrast", "record_stages", "__version__"]
