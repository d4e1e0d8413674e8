"""Graph operators -> :class:`Eigenpairs` (values, vectors, out-of-sample map).

* :func:`flgp_eigenpairs` - truncated SVD of ``A Λ^{-1/2}`` (FLGP);
* :func:`glgp_eigenpairs` - dense eigendecomposition (GLGP);
* :func:`nystrom_eigenpairs` - induced-point eigenpairs extended to the cloud;
* :func:`compute_eigenpairs` - graph and eigenpairs in one call.

Nothing here imports GPyTorch or scikit-learn.
"""

from .compute import compute_eigenpairs
from .dense import glgp_eigenpairs, nystrom_eigenpairs
from .eigenpairs import Eigenpairs
from .flgp import SPECTRA, flgp_eigenpairs

__all__ = ["Eigenpairs", "compute_eigenpairs", "flgp_eigenpairs", "glgp_eigenpairs",
           "nystrom_eigenpairs", "SPECTRA"]
