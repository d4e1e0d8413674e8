"""flgp - heat-kernel Gaussian processes and diffusion embeddings on point clouds.

Data flows one way: points -> :mod:`flgp.graph` (induced points, sparse transition) ->
:mod:`flgp.spectral` (eigenpairs with an out-of-sample map) -> :mod:`flgp.heat` (heat kernel)
-> Gaussian processes and embeddings.
"""

from . import datasets, graph, heat, kernels, models, spectral
from ._chunks import config_context, get_config, set_config
from .models import FLGPClassifier, FLGPRegressor, predict_image
from .spectral import Eigenpairs, compute_eigenpairs

__version__ = "0.1.0"

__all__ = ["FLGPClassifier", "FLGPRegressor", "Eigenpairs", "compute_eigenpairs", "datasets",
           "graph", "heat", "kernels", "models", "spectral", "config_context", "get_config",
           "set_config", "predict_image", "__version__"]
