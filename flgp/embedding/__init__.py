"""Embeddings from the heat kernel, as scikit-learn transformers.

* :class:`DiffusionMap` - diffusion maps (Gilbert and O'Neill, Algorithm 3), dense or from
  FLGP eigenpairs;
* :class:`GPEmbedding` - Gaussian-process embeddings, a sketch of the heat kernel
  (Algorithms 4-5), dense or from FLGP eigenpairs;
* :class:`CompressedDiffusionMap` - compressed diffusion maps over data regions
  (Gigante et al.), with the paper's baselines in :mod:`~flgp.embedding.compressed_baselines`;
* :class:`DeepDiffusionMap` - a network trained to output the diffusion map
  (García-Heredia et al.), for points inside and outside the training sample;
* :mod:`~flgp.embedding.metrics` - bi-Lipschitz distortion, diffusion distances, MRE.
"""

from . import metrics
from ._base import auto_diffusion_steps
from .compressed import CompressedDiffusionMap
from .deep import DeepDiffusionMap, conv_network
from .diffusion_map import DiffusionMap
from .gp_embedding import GPEmbedding

__all__ = ["DiffusionMap", "GPEmbedding", "CompressedDiffusionMap", "DeepDiffusionMap",
           "conv_network",
           "auto_diffusion_steps", "metrics"]
