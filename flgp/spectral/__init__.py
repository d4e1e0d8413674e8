"""Graph operators -> :class:`Eigenpairs` (values, vectors, out-of-sample map), and the
spectral families of the priors built on them.

* :func:`flgp_eigenpairs` - truncated SVD of ``A Λ^{-1/2}`` (FLGP);
* :func:`glgp_eigenpairs` - dense eigendecomposition (GLGP);
* :func:`nystrom_eigenpairs` - induced-point eigenpairs extended to the cloud;
* :func:`compute_eigenpairs` - graph and eigenpairs in one call;
* :mod:`~flgp.spectral.families` - the weights ``w(λ)`` of the priors
  ``C = c Σ w(λ_l) v_l v_lᵀ`` (the heat kernel ``e^{-tλ}``), the diffusion-time range, and
  the feature map, in numpy and torch;
* :class:`LowRankPrior` - the prior ``V diag(w) Vᵀ`` behind :class:`flgp.prior.GraphPrior`,
  with its exact Gaussian evidence and posterior in ``O(m M² + M³)``
  (:mod:`~flgp.spectral.gaussian`, the Woodbury identities).

Nothing here imports GPyTorch or scikit-learn.
"""

from . import families
from .candidates import eigenpair_candidates
from .compute import compute_eigenpairs
from .dense import glgp_eigenpairs, nystrom_eigenpairs
from .eigenpairs import Eigenpairs, RowSquaredNorm
from .families import default_diffusion_time, diffusion_time_range
from .flgp import SPECTRA, flgp_eigenpairs
from .gaussian import LowRankGaussianEvidence
from .prior import LowRankPrior

__all__ = ["Eigenpairs", "compute_eigenpairs", "flgp_eigenpairs", "glgp_eigenpairs",
           "nystrom_eigenpairs", "SPECTRA", "families", "diffusion_time_range",
           "default_diffusion_time", "RowSquaredNorm", "eigenpair_candidates",
           "LowRankPrior", "LowRankGaussianEvidence"]
