r"""The spectrum of a graph-Laplacian prior: the one home of its weights.

Every prior flgp builds on a cloud is a function of the Laplacian's eigenpairs
``(λ_l, v_l)``:

.. math:: C(x, x') = c \sum_{l \le M} w(\lambda_l)\, v_l(x)\, v_l(x'),

with ``c`` the eigenpairs' ``kernel_scale`` and ``w`` the weights of a *spectral family*.
The heat kernel is ``w(λ) = e^{-tλ}`` with the diffusion time ``t``. This module holds,
side by side in numpy and torch, what the kernels (:mod:`flgp.kernels`), the estimators
(:mod:`flgp.models`), the embeddings and the reproductions need of a spectrum:

* the weights, their logarithms and their derivatives in the log-hyperparameters
  (:func:`heat_weights`, :func:`heat_log_weights`, :func:`heat_log_weight_gradient`);
* the data-driven range and default of the diffusion time (:func:`diffusion_time_range`,
  :func:`default_diffusion_time`);
* the rule that drops the weights below float64 resolution (:func:`spectral_weights`,
  :func:`nonzero_prefix`, :func:`active_columns`) and the small picklable
  :class:`Spectrum` a predictor carries instead of the eigenpairs;
* the feature map ``φ(x) = √c v(x) diag(√w)`` and kernel blocks in torch, differentiable in
  the hyperparameters (:func:`heat_features`, :func:`heat_kernel`,
  :func:`heat_kernel_diag`).

Nothing here knows GPyTorch or scikit-learn.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Spectrum", "heat_weights", "heat_log_weights", "heat_log_weight_gradient",
           "diffusion_time_range", "default_diffusion_time", "spectral_weights",
           "nonzero_prefix", "active_columns", "heat_features", "heat_kernel",
           "heat_kernel_diag", "FLUSH_RELATIVE"]

# weights below this fraction of the largest are set to 0 (spectral_weights)
FLUSH_RELATIVE = 1e-16


class Spectrum:
    """What a prior's weights need of the eigenpairs - ``eigenvalues`` and
    ``kernel_scale`` - without the eigenvectors: small and picklable, for predictors that
    run inside Dask tasks. Anything with these two attributes (an
    :class:`~flgp.spectral.Eigenpairs`, say) serves where a Spectrum is asked for."""

    def __init__(self, eigenpairs):
        self.eigenvalues = np.asarray(eigenpairs.eigenvalues, dtype=np.float64)
        self.kernel_scale = float(eigenpairs.kernel_scale)


# -- the heat family: w(λ) = exp(-t λ), numpy or torch ------------------------------------

def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def heat_log_weights(eigenvalues, t):
    """``log w = -t λ`` (shape ``t.shape + (M,)`` for numpy; torch broadcasts ``t``, e.g.
    ``(..., 1)`` against ``(M,)``)."""
    if _is_torch(eigenvalues):
        import torch

        return -torch.as_tensor(t, dtype=eigenvalues.dtype,
                                device=eigenvalues.device) * eigenvalues
    return -np.multiply.outer(np.asarray(t, dtype=np.float64), eigenvalues)


def heat_weights(eigenvalues, t):
    """``w = exp(-t λ)``, numpy or torch (see :func:`heat_log_weights` for shapes)."""
    log_w = heat_log_weights(eigenvalues, t)
    if _is_torch(log_w):
        return log_w.exp()
    return np.exp(log_w)


def heat_log_weight_gradient(eigenvalues, t):
    """``∂ log w / ∂ log t = -t λ`` (the heat family's only hyperparameter, in log
    space)."""
    return heat_log_weights(eigenvalues, t)


# -- the diffusion time ---------------------------------------------------------------------

def diffusion_time_range(eigenvalues: np.ndarray) -> tuple[float, float]:
    r"""A data-driven range ``[t_lo, t_hi]`` for the diffusion time.

    ``t_lo = 0.1 / λ_M`` (every kept mode weighted at least ``e^{-0.1}``: the roughest prior
    the eigenpairs can express) and ``t_hi = 10 / λ_2`` (every non-constant mode damped by
    at least ``e^{-10}``: nearly constant on each connected component), with ``λ_2`` the
    smallest eigenvalue above ``1e-10``.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    pos = lam[lam > 1e-10]
    if pos.size == 0:
        return 1.0, 10.0
    return float(0.1 / pos.max()), float(10.0 / pos.min())


def default_diffusion_time(eigenvalues: np.ndarray) -> float:
    """Geometric middle of :func:`diffusion_time_range`: the initial ``t``."""
    lo, hi = diffusion_time_range(eigenvalues)
    return float(np.sqrt(lo * hi))


# -- weights as the estimators use them ------------------------------------------------------

def spectral_weights(spectrum, t) -> np.ndarray:
    """Heat-kernel weights ``c exp(-t λ)`` of a :class:`Spectrum` (or eigenpairs), shape
    ``t.shape + (M,)``, with every weight below ``1e-16`` times the largest set to 0: below
    float64 resolution of the constant mode's term, which every prior variance contains, so
    no kernel value moves by more than rounding. As subnormal numbers (``exp(-t λ)`` at a
    long diffusion time) such weights slow every BLAS product down about tenfold
    (docs/benchmarks.md), and the predictions skip the zeroed columns
    (:func:`active_columns`)."""
    w = spectrum.kernel_scale * heat_weights(spectrum.eigenvalues, t)
    w[w < FLUSH_RELATIVE * w.max(axis=-1, keepdims=True)] = 0.0
    return w


def nonzero_prefix(w: np.ndarray) -> int | None:
    """``k`` when exactly the first ``k`` weights are non-zero (eigenvalues ascending, so a
    long diffusion time zeroes a tail), else None."""
    k = int(np.count_nonzero(w))
    return k if np.all(w[:k] != 0) else None


def active_columns(V_lab: np.ndarray, w: np.ndarray, V: np.ndarray):
    """Drop the eigenvector columns whose weight is exactly 0 (:func:`spectral_weights`):
    they add nothing to any kernel value, and at long diffusion times most columns are such
    (SKFLGP / LKFLGP on the circles keep 10-50 of 100), so every product over them
    shrinks. Returns ``(V_lab, w, V)`` restricted to the kept columns (views when they
    lead)."""
    w = np.asarray(w)
    if w.ndim != 1 or V_lab.shape[1] != w.size or V.shape[1] != w.size:
        raise ValueError(f"w must hold one weight per column of V_lab and V; got {w.shape} "
                         f"weights for {V_lab.shape[1]} / {V.shape[1]} columns.")
    keep = w != 0
    if keep.all():
        return V_lab, w, V
    k = nonzero_prefix(w)
    if k is not None:
        # a slice is a view: copying the kept columns of a large V costs more than the
        # product over them
        return V_lab[:, :k], w[:k], V[:, :k]
    return V_lab[:, keep], w[keep], V[:, keep]


# -- torch: feature map and kernel blocks, differentiable in t --------------------------------

def heat_features(eigenvectors, eigenvalues, t, kernel_scale: float):
    """Feature map ``φ = sqrt(c) V diag(exp(-t λ / 2))``, shape ``(..., N, M)`` (torch;
    ``t`` may carry batch dimensions ``(..., 1)``)."""
    half = (0.5 * heat_log_weights(eigenvalues, t)).exp()
    return eigenvectors * (float(kernel_scale) ** 0.5) * half.unsqueeze(-2)


def heat_kernel(v1, v2, eigenvalues, t, kernel_scale: float):
    """Kernel block ``C_t(x1, x2)`` of shape ``(..., N1, N2)`` (torch)."""
    w = float(kernel_scale) * heat_weights(eigenvalues, t)
    return (v1 * w.unsqueeze(-2)) @ v2.transpose(-1, -2)


def heat_kernel_diag(v, eigenvalues, t, kernel_scale: float):
    """Diagonal ``C_t(x, x)``, shape ``(..., N)`` (torch)."""
    w = float(kernel_scale) * heat_weights(eigenvalues, t)
    return (v * v * w.unsqueeze(-2)).sum(-1)
