"""GPyTorch adapter: the heat kernel of a point cloud as a ``gpytorch.kernels.Kernel``."""

from __future__ import annotations

from ..spectral import Eigenpairs
from .spectral_kernel import SpectralKernel

__all__ = ["HeatKernel"]


class HeatKernel(SpectralKernel):
    r"""Heat kernel of a point cloud from precomputed :class:`~flgp.spectral.Eigenpairs`.

    .. math:: k_t(x, x') = c \sum_{l \le M} e^{-t\lambda_l}\, v_l(x)\, v_l(x')

    The spectral kernel of the heat family (:class:`~flgp.kernels.SpectralKernel`):
    low-rank, with the out-of-sample map, one learnable diffusion time ``t`` (one per
    batch member).

    Parameters
    ----------
    eigenpairs : Eigenpairs
    diffusion_time_prior, diffusion_time_constraint, diffusion_time :
        As in :class:`~flgp.kernels.SpectralKernel`.

    Notes
    -----
    There is no outputscale: wrap in ``gpytorch.kernels.ScaleKernel`` for one.

    Examples
    --------
    >>> import numpy as np, torch, flgp
    >>> X = np.random.default_rng(0).standard_normal((200, 2))
    >>> k = flgp.kernels.HeatKernelFLGP(X, n_induced=40, n_eigenpairs=10, random_state=0)
    >>> k(torch.from_numpy(X[:5])).shape
    torch.Size([5, 5])
    """

    def __init__(self, eigenpairs: Eigenpairs, diffusion_time_prior=None,
                 diffusion_time_constraint=None, diffusion_time: float | None = None,
                 **kwargs):
        super().__init__(eigenpairs, "heat", diffusion_time_prior=diffusion_time_prior,
                         diffusion_time_constraint=diffusion_time_constraint,
                         diffusion_time=diffusion_time, **kwargs)
