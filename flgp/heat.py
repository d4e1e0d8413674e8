r"""Stateless heat-kernel math on eigenpairs (torch, differentiable in ``t``).

.. math::

    \phi(x) = \sqrt{c}\; v(x)\, \operatorname{diag}(e^{-t\lambda/2}),\qquad
    C_t(x, x') = \phi(x)\,\phi(x')^\top = c \sum_l e^{-t\lambda_l} v_l(x) v_l(x')

with ``c`` the eigenpairs' ``kernel_scale``. ``C_t`` has rank at most ``M``; :func:`heat_features`
is its root.
"""

from __future__ import annotations

import torch

__all__ = ["heat_spectrum", "heat_features", "heat_kernel", "heat_kernel_diag"]


def _t(t, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(t, dtype=like.dtype, device=like.device)


def heat_spectrum(eigenvalues: torch.Tensor, t) -> torch.Tensor:
    """``exp(-t λ)``; ``t`` may carry batch dimensions ``(..., 1)``."""
    return torch.exp(-_t(t, eigenvalues) * eigenvalues)


def heat_features(eigenvectors: torch.Tensor, eigenvalues: torch.Tensor, t,
                  kernel_scale: float) -> torch.Tensor:
    """Feature map ``φ = sqrt(c) V diag(exp(-t λ / 2))``, shape ``(..., N, M)``."""
    half = torch.exp(-0.5 * _t(t, eigenvalues) * eigenvalues)
    return eigenvectors * (float(kernel_scale) ** 0.5) * half.unsqueeze(-2)


def heat_kernel(v1: torch.Tensor, v2: torch.Tensor, eigenvalues: torch.Tensor, t,
                kernel_scale: float) -> torch.Tensor:
    """Kernel block ``C_t(x1, x2)`` of shape ``(..., N1, N2)``."""
    w = float(kernel_scale) * heat_spectrum(eigenvalues, t)
    return (v1 * w.unsqueeze(-2)) @ v2.transpose(-1, -2)


def heat_kernel_diag(v: torch.Tensor, eigenvalues: torch.Tensor, t,
                     kernel_scale: float) -> torch.Tensor:
    """Diagonal ``C_t(x, x)``, shape ``(..., N)``."""
    w = float(kernel_scale) * heat_spectrum(eigenvalues, t)
    return (v * v * w.unsqueeze(-2)).sum(-1)
