"""GPyTorch adapter: the graph Matérn kernel of a point cloud."""

from __future__ import annotations

from ..spectral import Eigenpairs
from .spectral_kernel import SpectralKernel

__all__ = ["MaternKernel"]


class MaternKernel(SpectralKernel):
    r"""Graph Matérn kernel of a point cloud from precomputed eigenpairs.

    .. math:: k(x, x') = c \sum_{l \le M} (1 + t\lambda_l/\nu)^{-\nu}\, v_l(x)\, v_l(x')

    The graph Matérn kernel ``(2ν/κ² + λ)^{-ν}`` with ``t = νκ²/2``, normalised to 1 at
    ``λ = 0``; as ``ν → ∞`` it becomes the heat kernel at the same ``t``. Smaller ``ν`` keeps
    more of the rough modes. One learnable time scale ``t`` (named ``diffusion_time`` as
    in the heat kernel); ``ν`` is fixed.

    Parameters
    ----------
    eigenpairs : Eigenpairs
    nu : float, default=2.0
    diffusion_time_prior, diffusion_time_constraint, diffusion_time :
        As in :class:`~flgp.kernels.SpectralKernel`.

    Examples
    --------
    >>> import numpy as np, torch, flgp
    >>> X = np.random.default_rng(0).standard_normal((200, 2))
    >>> ep = flgp.compute_eigenpairs(X, n_induced=40, n_eigenpairs=10, random_state=0)
    >>> flgp.kernels.MaternKernel(ep, nu=1.0)(torch.from_numpy(X[:5])).shape
    torch.Size([5, 5])
    """

    def __init__(self, eigenpairs: Eigenpairs, nu: float = 2.0, diffusion_time_prior=None,
                 diffusion_time_constraint=None, diffusion_time: float | None = None,
                 **kwargs):
        super().__init__(eigenpairs, "matern", nu, diffusion_time_prior=diffusion_time_prior,
                         diffusion_time_constraint=diffusion_time_constraint,
                         diffusion_time=diffusion_time, **kwargs)
