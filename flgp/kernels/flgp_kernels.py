"""Kernels built from the whole point cloud: the heat kernel by FLGP, GLGP and
Nyström-GLGP, and the graph Matérn and pseudo-inverse kernels on FLGP eigenpairs."""

from __future__ import annotations

from ..spectral import compute_eigenpairs
from .green_kernel import GreenKernel
from .heat_kernel import HeatKernel
from .matern_kernel import MaternKernel

__all__ = ["HeatKernelFLGP", "HeatKernelGLGP", "HeatKernelNystrom", "MaternKernelFLGP",
           "GreenKernelFLGP"]


def _flgp_eigenpairs(X, n_induced, n_eigenpairs, n_neighbors, subsample, kernel, bandwidth,
                     bandwidth_scale, lae_regularization, spectrum, random_state, backend):
    return compute_eigenpairs(X, method="flgp", n_induced=n_induced,
                              n_eigenpairs=n_eigenpairs, n_neighbors=n_neighbors,
                              subsample=subsample, kernel=kernel, bandwidth=bandwidth,
                              bandwidth_scale=bandwidth_scale,
                              lae_regularization=lae_regularization, spectrum=spectrum,
                              random_state=random_state, backend=backend)


class HeatKernelFLGP(HeatKernel):
    """FLGP heat kernel (He et al., Algorithm 1) of the whole cloud ``X``.

    Parameters
    ----------
    X : array-like (n_samples, n_features)
        Every point, labelled and unlabelled.
    n_induced, n_eigenpairs, n_neighbors, subsample, kernel, bandwidth, bandwidth_scale,
    lae_regularization, spectrum, random_state, backend :
        Engine options, see :func:`flgp.spectral.compute_eigenpairs`.
    **kwargs :
        ``diffusion_time``, ``diffusion_time_prior``, ``diffusion_time_constraint`` and the
        usual GPyTorch kernel arguments (``batch_shape``, ...).

    Examples
    --------
    Build the kernel from every point once, then use it like any GPyTorch kernel (no
    outputscale: wrap it in ``ScaleKernel``):

    >>> import gpytorch, torch
    >>> from flgp.datasets import make_spiral
    >>> from flgp.kernels import HeatKernelFLGP
    >>> X, y, f = make_spiral(1000, noise=0.5, random_state=0)
    >>> heat = HeatKernelFLGP(X, n_induced=100, n_eigenpairs=20, random_state=0)
    >>> covar = gpytorch.kernels.ScaleKernel(heat)
    >>> covar(torch.from_numpy(X[:50])).shape
    torch.Size([50, 50])
    >>> covar(torch.from_numpy(X[:5] * 1.01)).to_dense().shape   # points off the cloud
    torch.Size([5, 5])

    One diffusion time per batch member, e.g. one GP per class:

    >>> batched = HeatKernelFLGP(X, n_induced=100, n_eigenpairs=20, random_state=0,
    ...                          batch_shape=torch.Size([3]))
    >>> batched.diffusion_time.shape, batched(torch.from_numpy(X[:50])).shape
    (torch.Size([3, 1, 1]), torch.Size([3, 50, 50]))
    """

    def __init__(self, X, *, n_induced=None, n_eigenpairs=None, n_neighbors=3,
                 subsample="kmeans", kernel="lae", bandwidth=None, bandwidth_scale=1.0,
                 lae_regularization=1e-3, spectrum="one_step", random_state=None,
                 backend="auto", **kwargs):
        eigenpairs = compute_eigenpairs(X, method="flgp", n_induced=n_induced,
                                n_eigenpairs=n_eigenpairs, n_neighbors=n_neighbors,
                                subsample=subsample, kernel=kernel, bandwidth=bandwidth,
                                bandwidth_scale=bandwidth_scale,
                                lae_regularization=lae_regularization, spectrum=spectrum,
                                random_state=random_state, backend=backend)
        super().__init__(eigenpairs, **kwargs)


class HeatKernelGLGP(HeatKernel):
    """GLGP heat kernel (dense ``n x n`` graph; n up to ~10,000)."""

    def __init__(self, X, *, n_eigenpairs=None, bandwidth=None, bandwidth_scale=1.0,
                 n_neighbors=10, **kwargs):
        eigenpairs = compute_eigenpairs(X, method="glgp", n_eigenpairs=n_eigenpairs,
                                bandwidth=bandwidth, bandwidth_scale=bandwidth_scale,
                                n_neighbors=n_neighbors)
        super().__init__(eigenpairs, **kwargs)


class HeatKernelNystrom(HeatKernel):
    """Nyström-GLGP heat kernel (eigenpairs on ``s`` induced points, extended)."""

    def __init__(self, X, *, n_induced=None, n_eigenpairs=None, subsample="kmeans",
                 bandwidth=None, bandwidth_scale=1.0, n_neighbors=10, random_state=None,
                 **kwargs):
        eigenpairs = compute_eigenpairs(X, method="nystrom", n_induced=n_induced,
                                n_eigenpairs=n_eigenpairs, subsample=subsample,
                                bandwidth=bandwidth, bandwidth_scale=bandwidth_scale,
                                n_neighbors=n_neighbors, random_state=random_state)
        super().__init__(eigenpairs, **kwargs)


class MaternKernelFLGP(MaternKernel):
    """Graph Matérn kernel (:class:`~flgp.kernels.MaternKernel`) on the FLGP eigenpairs of
    the whole cloud ``X``; the engine options as in :class:`HeatKernelFLGP`, ``nu`` and
    the GPyTorch arguments as in :class:`~flgp.kernels.MaternKernel`."""

    def __init__(self, X, *, nu=2.0, n_induced=None, n_eigenpairs=None, n_neighbors=3,
                 subsample="kmeans", kernel="lae", bandwidth=None, bandwidth_scale=1.0,
                 lae_regularization=1e-3, spectrum="one_step", random_state=None,
                 backend="auto", **kwargs):
        ep = _flgp_eigenpairs(X, n_induced, n_eigenpairs, n_neighbors, subsample, kernel,
                              bandwidth, bandwidth_scale, lae_regularization, spectrum,
                              random_state, backend)
        super().__init__(ep, nu=nu, **kwargs)


class GreenKernelFLGP(GreenKernel):
    """The Laplacian's pseudo-inverse (:class:`~flgp.kernels.GreenKernel`) on the FLGP
    eigenpairs of the whole cloud ``X``; the engine options as in
    :class:`HeatKernelFLGP`."""

    def __init__(self, X, *, n_induced=None, n_eigenpairs=None, n_neighbors=3,
                 subsample="kmeans", kernel="lae", bandwidth=None, bandwidth_scale=1.0,
                 lae_regularization=1e-3, spectrum="one_step", random_state=None,
                 backend="auto", **kwargs):
        ep = _flgp_eigenpairs(X, n_induced, n_eigenpairs, n_neighbors, subsample, kernel,
                              bandwidth, bandwidth_scale, lae_regularization, spectrum,
                              random_state, backend)
        super().__init__(ep, **kwargs)
