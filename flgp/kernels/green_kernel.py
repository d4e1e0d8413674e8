"""GPyTorch adapter: the graph Laplacian's pseudo-inverse (Green's function) kernel."""

from __future__ import annotations

from ..spectral import Eigenpairs
from .spectral_kernel import SpectralKernel

__all__ = ["GreenKernel"]


class GreenKernel(SpectralKernel):
    r"""The graph Laplacian's pseudo-inverse as a kernel, from precomputed eigenpairs.

    .. math:: k(x, x') = c \sum_{l:\,\lambda_l > 0} \frac{\lambda_2}{\lambda_l}\,
              v_l(x)\, v_l(x') + c \sum_{l:\,\lambda_l = 0} v_l(x)\, v_l(x')

    the Green's function Poisson learning solves with (Calder et al. 2020), scaled to 1 at
    the smallest positive eigenvalue ``λ_2``; the zero modes (the connected pieces'
    indicators) keep weight 1. It has no hyperparameter of its own: wrap it in
    ``gpytorch.kernels.ScaleKernel`` for an amplitude.

    Examples
    --------
    >>> import numpy as np, torch, flgp
    >>> X = np.random.default_rng(0).standard_normal((200, 2))
    >>> ep = flgp.compute_eigenpairs(X, n_induced=40, n_eigenpairs=10, random_state=0)
    >>> flgp.kernels.GreenKernel(ep)(torch.from_numpy(X[:5])).shape
    torch.Size([5, 5])
    """

    def __init__(self, eigenpairs: Eigenpairs, **kwargs):
        super().__init__(eigenpairs, "green", **kwargs)
