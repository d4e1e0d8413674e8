"""GPyTorch heat kernels. The only part of flgp (with :mod:`flgp.models`) that imports
GPyTorch."""

from .flgp_kernels import HeatKernelFLGP, HeatKernelGLGP, HeatKernelNystrom
from .heat_kernel import HeatKernel

__all__ = ["HeatKernel", "HeatKernelFLGP", "HeatKernelGLGP", "HeatKernelNystrom"]
