r"""The spectral families of the graph-Laplacian priors, in numpy and torch:

.. math:: C(x, x') = c \sum_{l \le M} w(\lambda_l)\, v_l(x)\, v_l(x'),

``c`` the eigenpairs' ``kernel_scale``, ``w`` a family's weights (the heat kernel
``e^{-tλ}``, diffusion time ``t``). Here: the weights and their log-derivatives
(:func:`family_log_weights`), the diffusion-time range (:func:`diffusion_time_range`), the
flush of weights below float64 resolution (:func:`spectral_weights`,
:func:`active_columns`), and the torch feature map and kernel blocks
(:func:`heat_features`, :func:`heat_kernel`). Nothing here knows GPyTorch or scikit-learn.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Eigenvalues", "SpectralPrior", "FAMILIES", "heat_weights", "heat_log_weights",
           "heat_log_weight_gradient", "family_log_weights", "family_log_weight_gradient",
           "diffusion_time_range", "default_diffusion_time", "spectral_time_prior",
           "spectral_weights", "constant_mode_rotation", "nonzero_prefix", "active_columns",
           "heat_features", "heat_kernel", "heat_kernel_diag", "FLUSH_RELATIVE"]

# the spectral families: "heat" e^{-tλ}, "matern" (1 + tλ/ν)^{-ν}, "green" λ_2/λ
FAMILIES = ("heat", "matern", "green")
# an eigenvalue at most this is a zero mode (a connected piece's indicator)
ZERO_EIGENVALUE = 1e-10

# weights below this fraction of the largest are set to 0 (spectral_weights)
FLUSH_RELATIVE = 1e-16


class Eigenvalues:
    """The ``eigenvalues`` and ``kernel_scale`` of eigenpairs without the eigenvectors
    (picklable, for predictors in Dask tasks); anything with these two attributes serves."""

    def __init__(self, eigenpairs):
        self.eigenvalues = np.asarray(eigenpairs.eigenvalues, dtype=np.float64)
        self.kernel_scale = float(eigenpairs.kernel_scale)


class SpectralPrior(Eigenvalues):
    """A prior ``c Σ w(λ_l) v_l v_lᵀ`` of a family (``"heat"``, ``"matern"`` with ``nu``,
    ``"green"``) on given eigenpairs, with the constant mode's relative variance
    ``constant`` (1: the family as it is; 0: none) and the rotation ``R`` that puts the
    constant mode first (:func:`constant_mode_rotation`). Picklable.

    ``weights(t)``: the flushed weights of the basis ``V R``; ``features(V, t, A)``: the
    features ``√A (V R) diag(√w)`` of unrotated rows ``V`` over the non-zero modes;
    ``feature_matrix(t, A)``: the ``M x d`` matrix ``D`` with ``V D`` those features."""

    def __init__(self, eigenpairs, family: str = "heat", nu: float = 2.0,
                 constant: float = 1.0, rotation=None):
        super().__init__(eigenpairs)
        self.family = family
        self.nu = float(nu)
        self.constant = float(constant)
        self.rotation = rotation

    @classmethod
    def of(cls, eigenpairs, family: str = "heat", nu: float = 2.0, constant: float = 1.0):
        """The prior on ``eigenpairs``, with a rotation when ``constant != 1``."""
        rotation = None
        if constant != 1.0:
            rotation = constant_mode_rotation(eigenpairs.eigenvalues,
                                              eigenpairs.column_sums())
        return cls(eigenpairs, family, nu, constant, rotation)

    def weights(self, t) -> np.ndarray:
        return spectral_weights(self, t, self.family, self.nu, self.constant)

    def rotate(self, V: np.ndarray) -> np.ndarray:
        """The rows of ``V R`` (``V`` itself without a rotation)."""
        return V if self.rotation is None else V @ self.rotation

    def feature_matrix(self, t, amplitude) -> np.ndarray:
        w = self.weights(t)
        k = nonzero_prefix(w)
        keep = np.arange(k) if k is not None else np.flatnonzero(w != 0)
        if self.rotation is None:
            D = np.zeros((w.size, keep.size))
            D[keep, np.arange(keep.size)] = np.sqrt(amplitude * w[keep])
            return D
        return self.rotation[:, keep] * np.sqrt(amplitude * w[keep])[None, :]

    def features(self, V: np.ndarray, t, amplitude) -> np.ndarray:
        if self.rotation is not None:
            return V @ self.feature_matrix(t, amplitude)
        w = self.weights(t)
        k = nonzero_prefix(w)
        if k is not None:
            return V[:, :k] * np.sqrt(amplitude * w[:k])
        keep = w != 0
        return V[:, keep] * np.sqrt(amplitude * w[keep])


# -- the heat family: w(λ) = exp(-t λ), numpy or torch ------------------------------------

def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def heat_log_weights(eigenvalues, t):
    """``log w = -t λ`` (shape ``t.shape + (M,)`` for numpy; torch broadcasts ``t``, e.g.
    ``(..., 1)`` against ``(M,)``)."""
    if _is_torch(eigenvalues):
        import torch

        t = torch.as_tensor(t, dtype=eigenvalues.dtype, device=eigenvalues.device)
        out = -t * eigenvalues
        if not bool(torch.isfinite(t).all()):  # an endless time: the zero modes keep 1
            out = torch.where(eigenvalues == 0, torch.zeros_like(out), out)
        return out
    t = np.asarray(t, dtype=np.float64)
    if np.isfinite(t).all():
        return -np.multiply.outer(t, eigenvalues)
    with np.errstate(invalid="ignore"):         # inf * 0: the zero modes keep weight 1
        out = -np.multiply.outer(t, eigenvalues)
    out[..., np.asarray(eigenvalues) == 0] = 0.0
    return out


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


def family_log_weights(eigenvalues, t, family: str = "heat", nu: float = 2.0):
    r"""``log w(λ)`` of a spectral family at time scale ``t`` (numpy or torch, shapes as
    :func:`heat_log_weights`); ValueError for an unknown family.

    * ``"heat"`` - ``w = e^{-tλ}``;
    * ``"matern"`` - ``w = (1 + tλ/ν)^{-ν}``, the graph Matérn kernel
      ``(2ν/κ² + λ)^{-ν}`` with ``t = νκ²/2`` normalised to 1 at ``λ = 0``;
    * ``"green"`` - ``w = λ_2 / λ`` for ``λ > 0`` (the Laplacian's pseudo-inverse, as in
      Poisson learning, scaled to 1 at the smallest positive ``λ_2``); ``t`` plays no
      part and the zero modes keep weight 1.
    """
    if family == "heat":
        return heat_log_weights(eigenvalues, t)
    if family == "matern":
        scaled = heat_log_weights(eigenvalues, t)           # -tλ
        return -float(nu) * _log1p(-scaled / float(nu))
    if family == "green":
        lam = eigenvalues
        pos = lam[lam > ZERO_EIGENVALUE]
        lam2 = pos.min() if len(pos) else 1.0
        zero_t = _zeros_like(heat_log_weights(eigenvalues, t))   # t's shape, zeros
        if _is_torch(lam):
            import torch

            safe = torch.where(lam > ZERO_EIGENVALUE, lam, torch.ones_like(lam))
            logw = torch.where(lam > ZERO_EIGENVALUE, torch.log(lam2 / safe),
                               torch.zeros_like(lam))
        else:
            safe = np.where(lam > ZERO_EIGENVALUE, lam, 1.0)
            logw = np.where(lam > ZERO_EIGENVALUE, np.log(lam2 / safe), 0.0)
        return zero_t + logw
    raise ValueError(f"unknown spectral family {family!r}; choose one of {list(FAMILIES)}.")


def _log1p(x):
    if _is_torch(x):
        return x.log1p()
    return np.log1p(x)


def family_log_weight_gradient(eigenvalues, t, family: str = "heat", nu: float = 2.0):
    """``∂ log w / ∂ log t`` of a family: ``-tλ`` (heat), ``-tλ / (1 + tλ/ν)`` (Matérn),
    0 (green)."""
    if family == "heat":
        return heat_log_weight_gradient(eigenvalues, t)
    if family == "matern":
        scaled = heat_log_weights(eigenvalues, t)
        if _is_torch(scaled):
            import torch

            return torch.where(torch.isfinite(scaled), scaled / (1.0 - scaled / float(nu)),
                               torch.full_like(scaled, -float(nu)))
        with np.errstate(invalid="ignore"):      # an endless time: the limit -ν
            return np.where(np.isfinite(scaled), scaled / (1.0 - scaled / float(nu)),
                            -float(nu))
    return _zeros_like(heat_log_weights(eigenvalues, t))


def _zeros_like(x):
    if _is_torch(x):
        return x.new_zeros(x.shape)
    return np.zeros_like(x)


# -- the diffusion time ---------------------------------------------------------------------

def diffusion_time_range(eigenvalues: np.ndarray) -> tuple[float, float]:
    r"""A data-driven range for the diffusion time: ``t_lo = 0.1 / λ_M`` (every mode
    weighted at least ``e^{-0.1}``) and ``t_hi = 10 / λ_2`` (every non-constant mode damped
    by at least ``e^{-10}``), ``λ_2`` the smallest eigenvalue above ``1e-10``.
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


# the spectral prior on t: the centre's weight on the (C+1)-th eigenvalue, and the spread
SPECTRAL_PRIOR_WEIGHT_DROP = 2.0
SPECTRAL_PRIOR_SD = 2.0


def spectral_time_prior(eigenvalues: np.ndarray, n_classes: int):
    r"""A prior on the diffusion time from the cloud's spectrum:
    ``log t ~ N(log t_C, 2^2)`` with

    .. math:: t_C = 2 / \lambda^*,\qquad \lambda^* = \max(\lambda_{C+1}, \lambda_2),

    ``λ`` ascending, ``λ_2`` the smallest positive eigenvalue, ``C`` the number of
    classes; ``t_C`` clipped to :func:`diffusion_time_range`. ``t_C`` is the smoothest
    prior in which each class keeps a non-constant mode of weight at least ``e^{-2}``; the
    wide spread makes it a tie-breaker (docs/models.md, "The fewest labels").

    Returns ``(log t_C, sd)``: the log prior density of ``log t`` is
    ``-(log t - log t_C)^2 / (2 sd^2)`` up to a constant."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    pos = lam[lam > ZERO_EIGENVALUE]
    if pos.size == 0:
        return float(np.log(default_diffusion_time(lam))), SPECTRAL_PRIOR_SD
    C = int(n_classes)
    lam_c1 = lam[C] if C < lam.size else lam[-1]
    star = max(float(lam_c1), float(pos.min()))
    lo, hi = diffusion_time_range(lam)
    t_c = float(np.clip(SPECTRAL_PRIOR_WEIGHT_DROP / star, lo, hi))
    return float(np.log(t_c)), SPECTRAL_PRIOR_SD


# -- weights as the estimators use them ------------------------------------------------------

def spectral_weights(spectrum, t, family: str = "heat", nu: float = 2.0,
                     constant: float = 1.0) -> np.ndarray:
    """Prior weights ``c w(λ)`` of :class:`Eigenvalues` for a family
    (:func:`family_log_weights`; the heat kernel by default), shape ``t.shape + (M,)``;
    ``constant`` multiplies the first (constant-mode) weight. Weights below ``1e-16``
    times the largest are set to 0: they are below float64 resolution of every prior
    variance, would slow BLAS down as subnormals (docs/benchmarks.md), and their columns
    are then skipped (:func:`active_columns`)."""
    if family == "heat":
        w = spectrum.kernel_scale * heat_weights(spectrum.eigenvalues, t)
    else:
        w = spectrum.kernel_scale * np.exp(family_log_weights(spectrum.eigenvalues, t,
                                                              family, nu))
    # a constant-mode variance above 1 multiplies after the flush, so that a huge one does
    # not flush the modes that carry the function's shape
    if constant < 1.0:
        w[..., 0] *= constant
    w[w < FLUSH_RELATIVE * w.max(axis=-1, keepdims=True)] = 0.0
    if constant > 1.0:
        w[..., 0] *= constant
    return w


def constant_mode_rotation(eigenvalues, column_sums) -> np.ndarray | None:
    """An orthogonal ``M x M`` matrix ``R`` (a Householder reflection of the zero modes)
    whose ``V R`` has the constant vector first, so that it alone can get its own prior
    variance (``spectral_weights(..., constant=γ)``); None when the first eigenvector is
    already constant. ``column_sums``: ``Vᵀ 1``."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    z = int(np.sum(lam <= ZERO_EIGENVALUE))
    sums = np.asarray(column_sums, dtype=np.float64)
    M = lam.size
    if z == 0:
        return None
    c = sums[:z]
    norm = np.linalg.norm(c)
    if norm == 0:
        return None
    c = c / norm
    if z == 1 or abs(abs(c[0]) - 1.0) < 1e-12:
        return None
    # Householder reflection H with H e_1 = c (H symmetric, orthogonal)
    e1 = np.zeros(z)
    e1[0] = 1.0
    u = c - e1
    H = np.eye(z) - 2.0 * np.outer(u, u) / (u @ u)
    R = np.eye(M)
    R[:z, :z] = H
    return R


def nonzero_prefix(w: np.ndarray) -> int | None:
    """``k`` when exactly the first ``k`` weights are non-zero (eigenvalues ascending, so a
    long diffusion time zeroes a tail), else None."""
    k = int(np.count_nonzero(w))
    return k if np.all(w[:k] != 0) else None


def active_columns(V_lab: np.ndarray, w: np.ndarray, V: np.ndarray):
    """``(V_lab, w, V)`` without the columns whose weight is exactly 0
    (:func:`spectral_weights`; most of them at long diffusion times), views when the kept
    columns lead; ValueError for mismatched shapes."""
    w = np.asarray(w)
    if w.ndim != 1 or V_lab.shape[1] != w.size or V.shape[1] != w.size:
        raise ValueError(f"w must hold one weight per column of V_lab and V; got {w.shape} "
                         f"weights for {V_lab.shape[1]} / {V.shape[1]} columns.")
    keep = w != 0
    if keep.all():
        return V_lab, w, V
    k = nonzero_prefix(w)
    if k is not None:
        # a view: copying the kept columns of a large V costs more than the product
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
