r"""Expectation propagation for probit Gaussian-process classification in a feature space.

The latent function at the labelled points is ``f = Φ z`` with ``z ~ N(0, I_d)``: for the
heat kernel ``Φ = √A · V_lab · diag(√(c e^{-tλ}))`` (``A`` the amplitude, ``d`` the number
of modes kept), so every posterior is a ``d``-dimensional Gaussian and costs
``O(m d² + d³)`` per class and sweep, whatever the number of points in the cloud.

* Binary: the probit likelihood ``p(y | f) = Φ(y f)``, EP with parallel damped site
  updates (Rasmussen & Williams 2006, Alg. 3.5-3.6, in weight space).
* Multi-class: the multinomial probit ``p(y | f) = P(argmax_c (f_c + ε_c) = y)``,
  ``ε ~ N(0, I)``, by *nested* EP (Riihimäki, Jylänki & Vehtari 2013, JMLR 14): the
  likelihood ``∫ N(u; 0, 1) Π_{j≠y} Φ(u + f_y - f_j) du``, each tilted distribution
  approximated by an inner EP over the ``C - 1`` probit factors. The outer site of point
  ``i`` has precision ``D_i - d_i d_iᵀ / s_i`` (``d_iy = 1``, ``d_ij`` the inner site
  precisions, ``s_i = Σ_c d_ic``): ``C`` independent GPs plus one ``m × m`` correction
  (GPML's Algorithm 3.3). With two classes it is exactly binary probit EP.

Both return EP's log marginal likelihood and leave-one-out log probability ``Σ_i log Ẑ_i``.
Predictions for ``C ≥ 3`` are Gaussian orthant probabilities of ``g = f + ε``
(:func:`orthant_log_probability`; Cunningham, Hennig & Lacoste-Julien 2011), each class
against the ``top_k`` classes of largest latent mean (:func:`multinomial_predict`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg.blas import dsyrk as _syrk
from scipy.optimize import minimize_scalar
from scipy.special import log_ndtr, ndtr

from ..._chunks import count, stage
from ..._config import working_memory_bytes
from ...backends import limit_blas_threads

__all__ = ["probit_moments", "ProbitEPState", "ep_probit", "probit_latent",
           "probit_probabilities", "probit_loo", "MultinomialEPState",
           "ep_multinomial_probit", "multinomial_loo", "fit_predictive_scale",
           "multinomial_latent", "multinomial_predictor", "multinomial_predict",
           "multinomial_projection", "multinomial_predict_projected", "probit_projection",
           "probit_latent_projected", "orthant_log_probability"]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_TINY = 1e-300


def _staged(name):
    """Decorator: run on one BLAS thread (many small products), timed as stage ``name``."""
    def wrap(fn):
        def timed(*args, **kwargs):
            with stage(name), limit_blas_threads(1):
                return fn(*args, **kwargs)
        timed.__name__, timed.__qualname__, timed.__doc__ = fn.__name__, fn.__qualname__, \
            fn.__doc__
        timed.__wrapped__ = fn
        return timed
    return wrap


def _inv_mills(z: np.ndarray, log_cdf: np.ndarray) -> np.ndarray:
    """``φ(z) / Φ(z)``, stable for very negative ``z``."""
    return np.exp(-0.5 * z * z - _LOG_SQRT_2PI - log_cdf)


def probit_moments(mean: np.ndarray, var: np.ndarray, noise: float = 1.0):
    """``log Z``, mean and variance of ``Φ(x / √noise) N(x; mean, var) / Z``.

    ``noise = 1`` is the probit factor ``Φ(x)``; ``noise = 0`` the step ``[x ≥ 0]``."""
    s = np.sqrt(noise + var)
    z = mean / s
    log_z = log_ndtr(z)
    lam = _inv_mills(z, log_z)
    new_mean = mean + var * lam / s
    new_var = var - var * var * lam * (z + lam) / (noise + var)
    return log_z, new_mean, np.maximum(new_var, 1e-300)


def _chol(A: np.ndarray) -> np.ndarray:
    L, info = scipy.linalg.lapack.dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Cholesky factorisation failed in EP (LAPACK info "
                                    f"{info}): a site update left the posterior "
                                    f"precision indefinite.")
    return L


def _tri_solve(L, B, trans=0):
    """``L⁻¹ B`` (``trans=1``: ``L⁻ᵀ B``) by LAPACK ``trtrs``, skipping scipy's checks."""
    if L.shape[0] == 0:                  # no modes: a 0 x k answer (LAPACK refuses ldb = 0)
        return np.zeros((0,) + np.shape(B)[1:])
    X, info = scipy.linalg.lapack.dtrtrs(L, B, lower=1, trans=trans)
    if info > 0:
        raise np.linalg.LinAlgError(f"singular triangular factor in EP: diagonal entry "
                                    f"{info} of the posterior's Cholesky factor is 0.")
    if info < 0:                         # pragma: no cover - a bug, not the user's input
        raise ValueError(f"LAPACK dtrtrs refused argument {-info} (shapes {L.shape}, "
                         f"{np.shape(B)}).")
    return X


def _change(old: tuple, new: tuple) -> float:
    """The largest relative change of a site parameter."""
    tau0, nu0 = old
    tau1, nu1 = new
    d_tau = np.max(np.abs(tau1 - tau0) / (1.0 + np.abs(tau0)), initial=0.0)
    d_nu = np.max(np.abs(nu1 - nu0) / (1.0 + np.abs(nu0)), initial=0.0)
    return max(d_tau, d_nu)


class _Damping:
    """Damping of parallel EP, halved (down to 1/16 of its start) when the updates stop
    shrinking, to break cycles without moving the fixed point."""

    def __init__(self, start: float):
        self.start = self.value = float(start)
        self._best = np.inf
        self._stalled = 0

    def converged(self, change: float, tol: float) -> bool:
        """Record the undamped relative change of a sweep; True when below ``tol``."""
        if change < 0.9 * self._best:
            self._best, self._stalled = change, 0
        else:
            self._stalled += 1
            if self._stalled >= 3 and self.value > self.start / 16:
                self.value *= 0.5
                self._stalled = 0
                self._best = change
        return self.start * change < tol


# -- binary probit ----------------------------------------------------------------------------
@dataclass
class ProbitEPState:
    tau: np.ndarray        # (m,) site precisions
    nu: np.ndarray         # (m,) site natural means
    chol: np.ndarray       # (d, d) lower Cholesky factor of I + Φᵀ diag(τ) Φ
    mean_z: np.ndarray     # (d,) posterior mean of the weights
    log_evidence: float
    log_loo: float         # Σ_i log Ẑ_i: EP's leave-one-out predictive log probability
    n_sweeps: int
    phi: np.ndarray        # (m, d) the labelled features
    y: np.ndarray          # (m,) the labels in {-1, +1}


def _probit_posterior(Phi, tau, nu):
    m, d = Phi.shape
    count("ep posterior flops", 3 * m * d * d + d ** 3 / 3 + 4 * m * d)
    L = _chol(np.eye(d) + (Phi * tau[:, None]).T @ Phi)
    mean_z = scipy.linalg.cho_solve((L, True), Phi.T @ nu, check_finite=False)
    W = _tri_solve(L, Phi.T)                       # L⁻¹ Φᵀ, (d, m)
    return L, mean_z, Phi @ mean_z, np.einsum("ij,ij->j", W, W)


def ep_probit(Phi: np.ndarray, y: np.ndarray, *, init: ProbitEPState | None = None,
              damping: float = 0.7, tol: float = 1e-5, max_sweeps: int = 200) -> ProbitEPState:
    """Binary probit EP. ``Phi`` (m, d): features of the labelled points (``f = Φ z``,
    ``z ~ N(0, I)``); ``y`` in ``{-1, +1}``. ``init`` warm-starts from another state's
    sites (the fixed point does not depend on it)."""
    m = Phi.shape[0]
    y = np.asarray(y, dtype=np.float64)
    if Phi.shape[1] == 0:
        return _degenerate_probit(Phi, y)
    tau = np.zeros(m) if init is None else init.tau.copy()
    nu = np.zeros(m) if init is None else init.nu.copy()
    L, mean_z, mu, var = _probit_posterior(Phi, tau, nu)
    sweep = 0
    step = _Damping(damping)
    for sweep in range(1, max_sweeps + 1):
        tau_c = 1.0 / var - tau
        ok = tau_c > 0
        v_c = 1.0 / np.where(ok, tau_c, 1.0)
        m_c = (mu / var - nu) * v_c
        _, m_h, v_h = probit_moments(y * m_c, v_c)
        m_h *= y
        tau_new = np.where(ok, np.maximum(1.0 / v_h - tau_c, 0.0), tau)
        nu_new = np.where(ok, m_h / v_h - (mu / var - nu), nu)
        done = step.converged(_change((tau, nu), (tau_new, nu_new)), tol)
        tau = (1 - step.value) * tau + step.value * tau_new
        nu = (1 - step.value) * nu + step.value * nu_new
        L, mean_z, mu, var = _probit_posterior(Phi, tau, nu)
        if done:
            break
    # evidence at the fixed point (R&W eq. 3.65 in natural parameters, stable for τ → 0)
    tau_c = np.maximum(1.0 / var - tau, 1e-300)
    nu_c = mu / var - nu
    log_z, _, _ = probit_moments(y * nu_c / tau_c, 1.0 / tau_c)
    log_ev = (log_z.sum() + 0.5 * np.log1p(tau / tau_c).sum() - np.log(np.diag(L)).sum()
              + 0.5 * nu @ mu + 0.5 * np.sum(nu_c * (tau / tau_c * nu_c - 2 * nu) / (tau_c + tau))
              - 0.5 * np.sum(nu * nu / (tau_c + tau)))
    return ProbitEPState(tau=tau, nu=nu, chol=L, mean_z=mean_z, log_evidence=float(log_ev),
                         log_loo=float(log_z.sum()), n_sweeps=sweep, phi=Phi, y=y)


def _degenerate_probit(Phi, y) -> ProbitEPState:
    """Posterior of a prior without modes (``d = 0``): evidence ``-m log 2``."""
    m = Phi.shape[0]
    log_ev = -m * np.log(2.0)
    return ProbitEPState(tau=np.zeros(m), nu=np.zeros(m), chol=np.zeros((0, 0)),
                         mean_z=np.zeros(0), log_evidence=float(log_ev),
                         log_loo=float(log_ev), n_sweeps=0, phi=Phi, y=y)


def probit_latent(state: ProbitEPState, Phi_new: np.ndarray):
    """Latent posterior mean and variance at points with features ``Phi_new`` (n, d)."""
    mean = Phi_new @ state.mean_z
    W = _tri_solve(state.chol, Phi_new.T)
    return mean, np.einsum("ij,ij->j", W, W)


def probit_probabilities(mean: np.ndarray, var: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``P(y = +1) = ∫ Φ(f) N(f; mean, var) df = Φ(mean / √(1 + var))``; ``scale`` divides
    the predictive spread (:func:`fit_predictive_scale`)."""
    return ndtr(scale * mean / np.sqrt(1.0 + var))


@_staged("calibration")
def probit_loo(state: ProbitEPState):
    """Leave-one-out predictive of each labelled point from EP's cavities: returns ``(a,
    b)`` with ``log P(y_i | y_-i) = log Φ(κ a_i / b_i)`` at predictive scale ``κ``."""
    if state.chol.shape[0] == 0:         # no modes: every cavity is the point mass at 0
        return np.zeros_like(state.y), np.ones_like(state.y)
    mean, var = probit_latent(state, state.phi)
    tau_c = np.maximum(1.0 / var - state.tau, 1e-300)
    m_c = (mean / var - state.nu) / tau_c
    return state.y * m_c, np.sqrt(1.0 + 1.0 / tau_c)


# -- multinomial probit (nested EP) -----------------------------------------------------------
@dataclass
class MultinomialEPState:
    tau: np.ndarray        # (m, C-1) inner site precisions (classes other than the label)
    nu: np.ndarray         # (m, C-1) inner site natural means
    others: np.ndarray     # (m, C-1) the class of each inner site
    chol_p: np.ndarray     # (C, d, d) Cholesky factors of P_c = I + Φᵀ diag(d_c) Φ
    chol_m: np.ndarray     # (m, m) Cholesky factor of M = I - Σ_c r_c r_cᵀ ∘ Φ P_c⁻¹ Φᵀ
    r: np.ndarray          # (m, C) r_c = d_c / √s: the correction's weights
    phi: np.ndarray        # (m, d) the labelled features
    mean_z: np.ndarray     # (d, C) posterior mean of the weights
    log_evidence: float
    log_loo: float
    n_sweeps: int

    @property
    def n_classes(self) -> int:
        return self.mean_z.shape[1]


def _positive_definite(A: np.ndarray) -> np.ndarray:
    """Which matrices of the stack ``A`` (N, k, k) are positive definite."""
    try:
        np.linalg.cholesky(A)
        return np.ones(A.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        return np.all(np.linalg.eigvalsh(A) > 0, axis=1)


def _differences(y: np.ndarray, C: int):
    """Classes other than each label, and the (m, C-1, C) matrices of rows ``e_y - e_j``."""
    m = y.shape[0]
    others = np.array([np.delete(np.arange(C), k) for k in y]).reshape(m, C - 1)
    D = np.zeros((m, C - 1, C))
    rows = np.arange(m)[:, None]
    D[rows, np.arange(C - 1)[None, :], y[:, None]] = 1.0
    D[rows, np.arange(C - 1)[None, :], others] = -1.0
    return others, D


def _outer_sites(tau, nu, y, others, C):
    """Outer site ``(d, s, h)``: precision ``diag(d) - d dᵀ / s`` and natural mean ``h`` of
    the inner sites with the auxiliary ``u`` integrated out."""
    m = y.shape[0]
    rows = np.arange(m)[:, None]
    d = np.ones((m, C))
    d[rows, others] = tau
    s = 1.0 + tau.sum(1)
    nu_full = np.zeros((m, C))
    nu_full[rows, others] = nu
    h = d * (nu.sum(1) / s)[:, None] - nu_full
    return d, s, h


def _cavities(mu, cov, d, s, h, Dm):
    """Cavity distributions of the labelled latents, and the inner EP's prior of
    ``x_j = f_y - f_j + u``, ``u ~ N(0, 1)``."""
    C = mu.shape[1]
    lam = np.linalg.inv(cov)
    eta = np.einsum("mij,mj->mi", lam, mu)
    T = d[:, :, None] * np.eye(C) - d[:, :, None] * d[:, None, :] / s[:, None, None]
    lam_c = lam - T
    S_c = np.linalg.inv(lam_c)
    m_c = np.einsum("mij,mj->mi", S_c, eta - h)
    mean_in = np.einsum("mkc,mc->mk", Dm, m_c)
    K_in = Dm @ S_c @ np.swapaxes(Dm, 1, 2) + 1.0
    return lam, mu, lam_c, m_c, mean_in, K_in


def _gaussian_ep_posterior(K, mean0, tau, nu):
    """Batched Gaussian posterior of ``N(mean0, K)`` times sites ``exp(-τx²/2 + νx)``:
    shapes (N, k, k), (N, k), (N, k), (N, k)."""
    k = K.shape[1]
    sw = np.sqrt(tau)
    # B = I + √τ K √τ has eigenvalues >= 1: inverting it directly is accurate
    B_inv = np.linalg.inv(np.eye(k) + sw[:, :, None] * K * sw[:, None, :])
    SK = sw[:, :, None] * K
    S = K - np.swapaxes(SK, 1, 2) @ (B_inv @ SK)
    b = sw * (np.einsum("nij,nj->ni", K, nu) + mean0)
    c = np.einsum("nij,nj->ni", B_inv, b)
    mean = mean0 + np.einsum("nij,nj->ni", K, nu - sw * c)
    return mean, S


def _gaussian_ep_sweeps(K, mean0, tau, nu, noise, sweeps, damping=1.0):
    """Batched parallel EP sweeps for factors ``Φ(x_j / √noise)`` under ``N(mean0, K)``."""
    for _ in range(sweeps):
        mean, S = _gaussian_ep_posterior(K, mean0, tau, nu)
        var = np.einsum("nii->ni", S)
        tau_c = 1.0 / var - tau
        ok = tau_c > 0
        v_c = 1.0 / np.where(ok, tau_c, 1.0)
        nu_c = mean / var - nu
        _, m_h, v_h = probit_moments(nu_c * v_c, v_c, noise)
        tau_new = np.where(ok, np.maximum(1.0 / v_h - tau_c, 0.0), tau)
        nu_new = np.where(ok, m_h / v_h - nu_c, nu)
        tau = (1 - damping) * tau + damping * tau_new
        nu = (1 - damping) * nu + damping * nu_new
    return tau, nu


def _stacked_cholesky(A: np.ndarray) -> np.ndarray:
    """Cholesky factors of a stack of matrices, with a jitter of up to 1e-6 times the mean
    diagonal where one fails (LinAlgError beyond)."""
    A = 0.5 * (A + np.swapaxes(A, -1, -2))
    try:
        return np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
        pass
    out = np.empty_like(A)
    eye = np.eye(A.shape[-1])
    for i in np.ndindex(A.shape[:-2]):
        scale = max(float(np.mean(np.diag(A[i]))), 1e-300)
        for jitter in (0.0, 1e-12, 1e-9, 1e-6):
            try:
                out[i] = np.linalg.cholesky(A[i] + jitter * scale * eye)
                break
            except np.linalg.LinAlgError:
                continue
        else:
            raise np.linalg.LinAlgError("a cavity covariance of nested EP is not positive "
                                        "definite even with a jitter of 1e-6.")
    return out


def _gaussian_ep_log_z(K, mean0, tau, nu, noise):
    """EP's ``log ∫ N(x; mean0, K) Π_j Φ(x_j / √noise) dx`` at the sites ``(τ, ν)``."""
    mean, S = _gaussian_ep_posterior(K, mean0, tau, nu)
    var = np.einsum("nii->ni", S)
    tau_c = np.maximum(1.0 / var - tau, 1e-300)
    v_c = 1.0 / tau_c
    m_c = (mean / var - nu) * v_c
    log_z, _, _ = probit_moments(m_c, v_c, noise)

    def psi1(m_, v_):
        return 0.5 * m_ * m_ / v_ + 0.5 * np.log(v_)

    out = (log_z - psi1(mean, var) + psi1(m_c, v_c)).sum(1)
    L0 = _stacked_cholesky(K)
    a0 = np.linalg.solve(L0, mean0[..., None])[..., 0]
    L1 = _stacked_cholesky(S)
    a1 = np.linalg.solve(L1, mean[..., None])[..., 0]
    out += (0.5 * (a1 * a1).sum(1) - 0.5 * (a0 * a0).sum(1)
            + np.log(np.einsum("nii->ni", L1)).sum(1) - np.log(np.einsum("nii->ni", L0)).sum(1))
    return out


def _multinomial_posterior(Phi, d, s, h):
    """Posterior of the weights ``Z`` (d × C) under the outer sites, as :class:`_Posterior`
    (labelled marginals: means (m, C), covariances (m, C, C)).

    The joint precision is ``blockdiag_c(P_c) - U Uᵀ`` with ``P_c = I + Φᵀ diag(d_c) Φ``
    and ``U`` the stacked ``Φᵀ diag(r_c)``, ``r_c = d_c / √s``; by Woodbury its inverse is
    ``P⁻¹ + P⁻¹ U M⁻¹ Uᵀ P⁻¹`` with ``M = I - Σ_c diag(r_c) Φ P_c⁻¹ Φᵀ diag(r_c)``. The
    weight means are ``μ_c = P_c⁻¹ Φᵀ v_c``, ``v_c = h_c + r_c ⊙ w``,
    ``w = M⁻¹ Σ_c r_c ⊙ G_c h_c`` (``G_c = Φ P_c⁻¹ Φᵀ``)."""
    m, dim = Phi.shape
    C = d.shape[1]
    count("ep posterior flops", C * (3 * m * dim * dim + dim ** 3 / 3 + 2 * m * m * dim
                                     + m ** 3) + m ** 3 / 3 + 2 * m * m * C * C)
    r = d / np.sqrt(s)[:, None]
    root_d = np.sqrt(d)                            # site precisions are >= 0
    chol_p = np.empty((C, dim, dim))
    W = np.empty((C, dim, m))                      # L_c⁻¹ Φᵀ
    diag = np.arange(dim)
    for c in range(C):
        # the lower triangle of Φᵀ diag(d_c) Φ by a rank-m update (half a GEMM's work)
        P = _syrk(1.0, Phi * root_d[:, c, None], trans=1, lower=1)
        P[diag, diag] += 1.0
        chol_p[c] = _chol(P)
        W[c] = _tri_solve(chol_p[c], Phi.T)
    G = np.matmul(np.swapaxes(W, 1, 2), W)         # Φ P_c⁻¹ Φᵀ, (C, m, m)
    rT = r.T
    chol_m = _chol(np.eye(m) - (rT[:, :, None] * G * rT[:, None, :]).sum(0))
    Gh = np.matmul(G, np.ascontiguousarray(h.T)[:, :, None])[..., 0]        # (C, m)
    w = scipy.linalg.cho_solve((chol_m, True), (rT * Gh).sum(0), check_finite=False)
    v = h.T + rT * w                                                        # (C, m)
    mean_f = (Gh + np.matmul(G, (rT * w)[:, :, None])[..., 0]).T            # (m, C)
    # H_c = L_M⁻¹ diag(r_c) G_c, all classes in one triangular solve: X[l, c, i] = H_c[l, i]
    X = _tri_solve(chol_m, np.ascontiguousarray(
        (rT[:, :, None] * G).transpose(1, 0, 2)).reshape(m, C * m)).reshape(m, C, m)
    Ht = np.ascontiguousarray(X.transpose(2, 1, 0))                         # (m_i, C, m_l)
    cov = np.matmul(Ht, np.swapaxes(Ht, 1, 2))
    cov[:, np.arange(C), np.arange(C)] += np.einsum("cii->ic", G)
    return _Posterior(chol_p, chol_m, r, W, v, mean_f, cov)


@dataclass
class _Posterior:
    """:func:`_multinomial_posterior`'s result."""
    chol_p: np.ndarray     # (C, d, d) lower Cholesky factors of P_c
    chol_m: np.ndarray     # (m, m) lower Cholesky factor of M
    r: np.ndarray          # (m, C)
    W: np.ndarray          # (C, d, m) L_c⁻¹ Φᵀ
    v: np.ndarray          # (C, m) h_c + r_c ⊙ w
    mean_f: np.ndarray     # (m, C) labelled latent means
    cov: np.ndarray        # (m, C, C) labelled latent covariances

    def weight_means(self) -> np.ndarray:
        """``μ_z`` (d × C): ``μ_c = L_c⁻ᵀ (L_c⁻¹ Φᵀ) v_c``."""
        WV = np.matmul(self.W, self.v[:, :, None])[..., 0]
        return np.stack([_tri_solve(self.chol_p[c], WV[c], trans=1)
                         for c in range(self.W.shape[0])], 1)


def ep_multinomial_probit(Phi: np.ndarray, y: np.ndarray, n_classes: int, *,
                          init: MultinomialEPState | None = None, damping: float = 0.7,
                          inner_sweeps: int = 2, tol: float = 1e-5,
                          max_sweeps: int = 200) -> MultinomialEPState:
    """Nested EP for the multinomial probit; ``y`` holds class codes ``0 .. C-1``."""
    C = int(n_classes)
    y = np.asarray(y, dtype=np.int64)
    m = y.shape[0]
    others, Dm = _differences(y, C)
    if Phi.shape[1] == 0:
        return _degenerate_multinomial(Phi, others, C)
    tau = np.zeros((m, C - 1)) if init is None else init.tau.copy()
    nu = np.zeros((m, C - 1)) if init is None else init.nu.copy()

    def cavities(post, d, s, h):
        return _cavities(post.mean_f, post.cov, d, s, h, Dm)

    d, s, h = _outer_sites(tau, nu, y, others, C)
    post = _multinomial_posterior(Phi, d, s, h)
    sweep = 0
    step = _Damping(damping)
    for sweep in range(1, max_sweeps + 1):
        _, _, lam_c, _, mean_in, K_in = cavities(post, d, s, h)
        # a site whose cavity is not a proper Gaussian keeps its parameters
        ok = _positive_definite(lam_c)
        tau_new, nu_new = _gaussian_ep_sweeps(K_in[ok], mean_in[ok], tau[ok], nu[ok], 1.0,
                                              inner_sweeps)
        tau_next, nu_next = tau.copy(), nu.copy()
        tau_next[ok], nu_next[ok] = tau_new, nu_new
        done = step.converged(_change((tau, nu), (tau_next, nu_next)), tol)
        tau_next[ok] = (1 - step.value) * tau[ok] + step.value * tau_new
        nu_next[ok] = (1 - step.value) * nu[ok] + step.value * nu_new
        tau, nu = tau_next, nu_next
        d, s, h = _outer_sites(tau, nu, y, others, C)
        post = _multinomial_posterior(Phi, d, s, h)
        if done:
            break
    chol_p, chol_m, r, mean_z = post.chol_p, post.chol_m, post.r, post.weight_means()
    lam, mu, lam_c, m_c, mean_in, K_in = cavities(post, d, s, h)
    log_z = _gaussian_ep_log_z(K_in, mean_in, tau, nu, 1.0)

    def psi(mean, lam_):
        return (0.5 * np.einsum("mi,mij,mj->m", mean, lam_, mean)
                - 0.5 * np.linalg.slogdet(lam_)[1])

    eta_z = Phi.T @ h
    log_ev = (np.sum(log_z - psi(mu, lam) + psi(m_c, lam_c))
              + 0.5 * np.sum(eta_z * mean_z)
              - np.log(np.einsum("cii->ci", chol_p)).sum() - np.log(np.diag(chol_m)).sum())
    return MultinomialEPState(tau=tau, nu=nu, others=others, chol_p=chol_p, chol_m=chol_m,
                              r=r, phi=Phi, mean_z=mean_z, log_evidence=float(log_ev),
                              log_loo=float(log_z.sum()), n_sweeps=sweep)


def _degenerate_multinomial(Phi, others, C) -> MultinomialEPState:
    """The multinomial posterior of a prior without modes (``d = 0``): every latent is 0;
    evidence and leave-one-out terms ``-m log C``."""
    m = Phi.shape[0]
    log_ev = -m * np.log(C)
    return MultinomialEPState(tau=np.zeros((m, C - 1)), nu=np.zeros((m, C - 1)),
                              others=others, chol_p=np.zeros((C, 0, 0)), chol_m=np.eye(m),
                              r=np.zeros((m, C)), phi=Phi, mean_z=np.zeros((0, C)),
                              log_evidence=float(log_ev), log_loo=float(log_ev), n_sweeps=0)


@_staged("calibration")
def multinomial_loo(state: MultinomialEPState, y: np.ndarray):
    """Leave-one-out predictive of each labelled point from nested EP's cavities: returns
    ``(a, S)``, (m, C-1) and (m, C-1, C-1), with ``P(y_i | y_-i)`` the probability that
    ``N(κ a_i, S_i)`` lies in the positive orthant at predictive scale ``κ`` (``a_i``: the
    cavity means of ``f_y - f_j``, ``S_i`` the covariance of ``g_y - g_j``)."""
    C = state.n_classes
    y = np.asarray(y, dtype=np.int64)
    if state.phi.shape[1] == 0:          # no modes: g_y - g_j = ε_y - ε_j
        m = y.shape[0]
        return np.zeros((m, C - 1)), np.ones((m, C - 1, C - 1)) + np.eye(C - 1)
    d, s, h = _outer_sites(state.tau, state.nu, y, state.others, C)
    post = _multinomial_posterior(state.phi, d, s, h)
    _, Dm = _differences(y, C)
    *_, mean_in, K_in = _cavities(post.mean_f, post.cov, d, s, h, Dm)
    return mean_in, K_in + np.eye(C - 1)


@_staged("calibration")
def fit_predictive_scale(loo_terms, weights=None, prior_sd: float = np.log(2.0),
                         bounds=(0.1, 10.0)) -> float:
    """The predictive scale ``κ`` by leave-one-out: the mode of
    ``Σ_i log Σ_k w_k P_ik(y_i | y_-i; κ) - (log κ)² / (2 prior_sd²)``.

    ``κ`` divides the spread of every predictive distribution (``κ > 1``: more confident);
    the log-normal prior (median 1) keeps it near 1 unless the held-out labels say
    otherwise. ``loo_terms``: per mixture component the output of :func:`probit_loo` or
    :func:`multinomial_loo`; ``weights`` the components' weights (None: equal)."""
    weights = np.ones(len(loo_terms)) / len(loo_terms) if weights is None else weights
    log_w = np.log(np.asarray(weights, dtype=np.float64))

    def objective(log_k):
        k = np.exp(log_k)
        parts = []
        for (a, b), lw in zip(loo_terms, log_w):
            lp = (log_ndtr(k * a / b) if np.ndim(b) == 1
                  else orthant_log_probability(k * a, b))
            parts.append(lw + lp)
        total = np.logaddexp.reduce(np.stack(parts), axis=0).sum()
        return -total + 0.5 * (log_k / prior_sd) ** 2

    res = minimize_scalar(objective, bounds=np.log(bounds), method="bounded",
                          options={"xatol": 1e-3})
    return float(np.exp(res.x))


def multinomial_latent(state: MultinomialEPState, Phi_new: np.ndarray):
    """Latent means ``(n, C)`` and between-class covariances ``(n, C, C)`` at ``Phi_new``:
    ``Cov(f_c, f_k) = δ_ck φᵀ P_c⁻¹ φ + h_c · h_k``, ``h_c = L_M⁻¹ diag(r_c) Φ P_c⁻¹ φ``."""
    C = state.n_classes
    mean = Phi_new @ state.mean_z
    n = Phi_new.shape[0]
    H = np.empty((n, C, state.phi.shape[0]))
    q = np.empty((n, C))
    for c in range(C):
        W = _tri_solve(state.chol_p[c], Phi_new.T)                     # L_c⁻¹ φ
        q[:, c] = np.einsum("ij,ij->j", W, W)
        Wl = _tri_solve(state.chol_p[c], state.phi.T)                  # L_c⁻¹ Φᵀ
        H[:, c] = _tri_solve(state.chol_m, state.r[:, c, None] * (Wl.T @ W)).T
    cov = np.matmul(H, np.swapaxes(H, 1, 2))
    cov[:, np.arange(C), np.arange(C)] += q
    return mean, cov


def orthant_log_probability(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``log P(x ≥ 0)`` for ``x ~ N(mean, cov)``, batched ((N, k), (N, k, k)), by
    assumed-density filtering (one forward pass of EP; exact for ``k = 1``)."""
    mean = np.array(mean, dtype=np.float64)
    cov = np.array(cov, dtype=np.float64)
    k = mean.shape[1]
    log_p = np.zeros(mean.shape[0])
    for j in range(k):
        v = np.maximum(cov[:, j, j], _TINY)
        sd = np.sqrt(v)
        z = mean[:, j] / sd
        lz = log_ndtr(z)
        log_p += lz
        if j == k - 1:
            break
        lam = _inv_mills(z, lz)
        # condition the trailing block only (the factors still to come)
        col = cov[:, j + 1:, j].copy()
        mean[:, j + 1:] += col * (lam / sd)[:, None]
        cov[:, j + 1:, j + 1:] -= ((lam * (z + lam) / v)[:, None, None] * col[:, :, None]
                                   * col[:, None, :])
    return log_p


def multinomial_predictor(state: MultinomialEPState):
    """Per class ``[L_c⁻¹; R_c]`` (``(d + m) × d``), ``R_c = L_M⁻¹ diag(r_c) Φ P_c⁻¹``:
    ``Var f_c = |L_c⁻¹ φ|² + |R_c φ|²``, ``Cov(f_c, f_k) = (R_c φ) · (R_k φ)``."""
    C = state.n_classes
    dim = state.phi.shape[1]
    m = state.phi.shape[0]
    maps = np.empty((C, dim + m, dim))
    for c in range(C):
        Linv = _tri_solve(state.chol_p[c], np.eye(dim))                # L_c⁻¹
        maps[c, :dim] = Linv
        maps[c, dim:] = _tri_solve(state.chol_m,
                                   state.r[:, c, None] * (state.phi @ (Linv.T @ Linv)))
    return maps




def _predict_chunk(n_classes: int, width: int) -> int:
    """Rows per chunk of :func:`multinomial_predict` within the working memory."""
    budget = working_memory_bytes()
    return int(max(64, budget // (8 * n_classes * width)))


def multinomial_predict(state: MultinomialEPState, Phi_new: np.ndarray, predictor=None,
                        top_k: int = 3, moments: bool = False, scale: float = 1.0):
    """Class probabilities ``P(argmax_c(f_c + ε_c) = c)`` at points with features
    ``Phi_new``; with ``moments=True`` also the latent means and variances ``(n, C)``.

    Each class competes against the ``top_k`` classes of largest latent mean only (see the
    module docstring); the probabilities are normalised to sum to one. ``predictor``:
    :func:`multinomial_predictor` of the state (None: computed)."""
    maps = multinomial_predictor(state) if predictor is None else predictor
    C = state.n_classes
    n, dim = Phi_new.shape
    k = min(int(top_k), C)
    proba = np.empty((n, C))
    mean = np.empty((n, C))
    var = np.empty((n, C))
    project = multinomial_projection(state, maps)
    chunk = _predict_chunk(C, maps.shape[1])
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        proba[sl], mean[sl], var[sl] = multinomial_predict_projected(
            Phi_new[sl] @ project, C, dim, top_k=k, moments=True, scale=scale)
    return (proba, mean, var) if moments else proba


@_staged("predictor")
def multinomial_projection(state: MultinomialEPState, predictor=None) -> np.ndarray:
    """``[μ_z, [L_c⁻¹; R_c]ᵀ ...]``, ``(d, C + C (d + m))``: the predictions are linear in
    ``φ`` through it (``project`` of :meth:`flgp.spectral.Eigenpairs.map_chunks`)."""
    maps = multinomial_predictor(state) if predictor is None else predictor
    C, width, dim = maps.shape
    return np.ascontiguousarray(np.c_[state.mean_z, maps.reshape(C * width, dim).T])


def multinomial_predict_projected(Z: np.ndarray, n_classes: int, dim: int, top_k: int = 3,
                                  moments: bool = False, scale: float = 1.0, factors=None):
    """:func:`multinomial_predict` from ``Z = φ · multinomial_projection(state)``.
    ``factors``: the variance columns passed apart (e.g. float32), ``Z`` then the means."""
    C = int(n_classes)
    n = Z.shape[0]
    if factors is None:
        mean, factors = Z[:, :C], Z[:, C:]
    else:
        mean = Z
    count("predictor flops",
          2 * factors.size + 2 * n * C * min(int(top_k), C) * (factors.shape[1] // C - dim))
    G = factors.reshape(n, C, -1)
    var = np.einsum("ncj,ncj->nc", G, G, dtype=np.float64)
    proba = _argmax_probabilities(mean, var, G[:, :, dim:], min(int(top_k), C), scale)
    return (proba, mean, var) if moments else proba


@_staged("predictor")
def probit_projection(state: ProbitEPState) -> np.ndarray:
    """``[μ_z, L⁻ᵀ]`` of shape ``(d, 1 + d)``: at features ``φ`` the latent mean is
    ``φ μ_z`` and the variance ``|φ L⁻ᵀ|²`` (for :func:`probit_latent_projected`)."""
    d = state.chol.shape[0]
    return np.ascontiguousarray(np.c_[state.mean_z, _tri_solve(state.chol, np.eye(d)).T])


def probit_latent_projected(Z: np.ndarray, factors=None):
    """Latent means and variances from ``Z = φ · probit_projection(state)``; ``factors``:
    the variance columns passed apart (``Z`` then the means)."""
    W = Z[:, 1:] if factors is None else factors
    count("predictor flops", 2 * W.size)
    return Z[:, 0].copy(), np.einsum("ij,ij->i", W, W, dtype=np.float64)


def _argmax_probabilities(mean, var, H, k, scale=1.0):
    """:func:`multinomial_predict` for one chunk; ``H``: ``h_c = R_c φ`` (n, C, m)."""
    n, C = mean.shape
    rows = np.arange(n)[:, None]
    top = np.argsort(-mean, axis=1, kind="stable")[:, :k]
    # Cov(g_c, g_j) for every class c and competitor j (+ the noise ε on the diagonal)
    cov = np.matmul(H, np.swapaxes(H[rows, top], 1, 2)).astype(np.float64)   # (n, C, k)
    is_top = np.zeros((n, C), dtype=bool)
    np.put_along_axis(is_top, top, True, 1)
    cov_top = cov[rows, top]                                                 # (n, k, k)
    cov_top[:, np.arange(k), np.arange(k)] = np.take_along_axis(var, top, 1) + 1.0
    mean_top = np.take_along_axis(mean, top, 1)
    if scale != 1.0:
        mean, mean_top = mean * scale, mean_top * scale
    out = np.empty((n, C))
    if k == 1:
        np.put_along_axis(out, top, 1.0, 1)
    else:
        # every leader against the other leaders: one batch of n k orthants of dimension k - 1
        oth = np.array([[j for j in range(k) if j != c] for c in range(k)])   # (k, k-1)
        cc = np.arange(k)
        m_d = mean_top[:, :, None] - mean_top[:, oth]                          # (n, k, k-1)
        c_cc = cov_top[:, cc, cc]                                              # (n, k)
        c_co = cov_top[:, cc[:, None], oth]                                    # (n, k, k-1)
        S_d = (c_cc[:, :, None, None] - c_co[:, :, :, None] - c_co[:, :, None, :]
               + cov_top[:, oth[:, :, None], oth[:, None, :]])
        lp = orthant_log_probability(m_d.reshape(n * k, k - 1),
                                     S_d.reshape(n * k, k - 1, k - 1)).reshape(n, k)
        np.put_along_axis(out, top, np.exp(lp), 1)
    # every other class against all the leaders: one batch over (row, class) pairs
    at, cls = np.nonzero(~is_top)
    if at.size:
        v_c = var[at, cls] + 1.0
        cv = cov[at, cls]                                                    # (a, k)
        m_d = mean[at, cls][:, None] - mean_top[at]
        S_d = v_c[:, None, None] - cv[:, :, None] - cv[:, None, :] + cov_top[at]
        out[at, cls] = np.exp(orthant_log_probability(m_d, S_d))
    return out / out.sum(axis=1, keepdims=True)
