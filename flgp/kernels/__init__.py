"""GPyTorch kernels: the spectral priors of a point cloud (heat, graph Matérn, the
Laplacian's pseudo-inverse), low-rank and with the out-of-sample map. With
:mod:`flgp.models`, the only part of flgp that imports GPyTorch."""

from .flgp_kernels import (GreenKernelFLGP, HeatKernelFLGP, HeatKernelGLGP,
                           HeatKernelNystrom, MaternKernelFLGP)
from .green_kernel import GreenKernel
from .heat_kernel import HeatKernel
from .matern_kernel import MaternKernel
from .spectral_kernel import SpectralKernel

__all__ = ["SpectralKernel", "HeatKernel", "MaternKernel", "GreenKernel", "HeatKernelFLGP",
           "HeatKernelGLGP", "HeatKernelNystrom", "MaternKernelFLGP", "GreenKernelFLGP"]

from .graph_matern import GraphMaternKernel  # noqa: E402

__all__ += ["GraphMaternKernel"]
