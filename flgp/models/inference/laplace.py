r"""Laplace approximation for GP classification and count regression (numpy, float64).

Rasmussen & Williams (2006), *Gaussian Processes for Machine Learning*, Algorithms 3.1-3.4:

* :func:`laplace_binary` - Newton's method for the mode of ``p(f | y)`` with a log-concave
  likelihood that factorises over points (Bernoulli-logistic, Poisson-log), and the Laplace
  approximation of the log marginal likelihood;
* :func:`laplace_softmax` - the multi-class softmax version with one latent function per
  class sharing one covariance;
* :func:`laplace_weights` - the same mode and evidence in the weight space of a low-rank
  kernel (``f = b + Φ u``, ``u ~ N(0, I_d)``), ``O(m d² + d³)`` per Newton step, with the
  evidence's gradient in the log prior weights (``FLGPRegressor(likelihood="poisson")``).

The first two take the ``m x m`` covariance of the labelled points; the formulation
through ``B = I + W^{1/2} K W^{1/2}`` needs no jitter, so a low-rank kernel is fine.
Newton steps are halved whenever the objective does not increase.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.linalg.lapack
from scipy.special import expit, gammaln, softmax
from scipy.stats import norm, qmc

from ...spectral.families import active_columns

__all__ = ["LogisticLikelihood", "PoissonLikelihood", "laplace_binary", "laplace_softmax",
           "laplace_weights", "laplace_weights_grad", "WeightLaplaceState",
           "binary_predict", "binary_predict_low_rank",
           "binary_predict_low_rank_many",
           "softmax_predict", "softmax_probabilities", "probit_logistic",
           "BinaryLaplaceState", "SoftmaxLaplaceState"]


class LogisticLikelihood:
    """``p(y | f) = σ(y f)`` for ``y ∈ {-1, +1}``."""

    @staticmethod
    def log_prob(y, f):
        return -np.logaddexp(0.0, -y * f)

    @staticmethod
    def grad_hess(y, f):
        pi = expit(f)
        return (y + 1) / 2 - pi, pi * (1 - pi)


class PoissonLikelihood:
    """``y ~ Poisson(exp(f))``."""

    @staticmethod
    def log_prob(y, f):
        with np.errstate(over="ignore"):
            return y * f - np.exp(f) - gammaln(y + 1)

    @staticmethod
    def grad_hess(y, f):
        with np.errstate(over="ignore"):
            mu = np.exp(f)
        return y - mu, mu

    @staticmethod
    def hess_derivative(y, f):
        """``dW/df`` of ``W = -d² log p / df²`` (for the evidence's gradient)."""
        with np.errstate(over="ignore"):
            return np.exp(f)

    @staticmethod
    def saturated(y):
        """``max_f log p(y | f) = y log y - y - log y!``: objectives are taken relative to
        it so that Newton's relative tolerance holds for huge counts."""
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ylogy = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0)), 0.0)
        return ylogy - y - gammaln(y + 1)


def _damped_step(psi, K, a, a_new, obj, tol):
    """Newton step in ``a`` (``f = K a``) halved until ``psi`` does not drop: ``(a, f,
    objective, converged)``."""
    step = 1.0
    while True:
        a_try = a + step * (a_new - a)
        f_try = K @ a_try
        obj_try = psi(a_try, f_try)
        if obj_try >= obj - 1e-12 * abs(obj) or step < 1e-6:
            break
        step *= 0.5
    converged = abs(obj_try - obj) <= tol * max(1.0, abs(obj))
    return a_try, f_try, obj_try, converged


@dataclass
class BinaryLaplaceState:
    f: np.ndarray        # posterior mode at the labelled points
    a: np.ndarray        # f = K a
    grad: np.ndarray     # ∇ log p(y | f) at the mode
    sqrt_w: np.ndarray   # W^{1/2}
    chol: np.ndarray     # L with L L^T = I + W^{1/2} K W^{1/2}
    log_evidence: float


def _chol_lower(B: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor by LAPACK ``potrf``, skipping scipy's checks."""
    L, info = scipy.linalg.lapack.dpotrf(B, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Cholesky factorisation failed (LAPACK info {info}): "
                                    f"the covariance is not positive definite or not finite.")
    return L


def _chol_eye_plus_gram(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``I + AᵀA`` by QR of ``[A; I]`` (stable for huge ``A``)."""
    if not np.all(np.isfinite(A)):
        raise np.linalg.LinAlgError("the Laplace Hessian is not finite (a rate overflowed).")
    d = A.shape[1]
    R = scipy.linalg.qr(np.vstack([A, np.eye(d)]), mode="r", check_finite=False)[0][:d]
    sign = np.where(np.diag(R) < 0, -1.0, 1.0)
    return np.ascontiguousarray((R * sign[:, None]).T)


def laplace_binary(K: np.ndarray, y: np.ndarray, likelihood=LogisticLikelihood, *,
                   a0: np.ndarray | None = None, tol: float = 1e-9,
                   max_iter: int = 100) -> BinaryLaplaceState:
    """Mode and Laplace log evidence (R&W Algorithm 3.1); ``a0`` warm-starts Newton at
    ``f = K a0`` (the mode does not depend on it)."""
    m = K.shape[0]
    a = np.zeros(m) if a0 is None else np.array(a0, dtype=np.float64)
    f = K @ a

    def psi(a_, f_):
        return -0.5 * a_ @ f_ + likelihood.log_prob(y, f_).sum()

    obj = psi(a, f)
    for _ in range(max_iter):
        g, w = likelihood.grad_hess(y, f)
        sw = np.sqrt(w)
        L = _chol_lower(np.eye(m) + sw[:, None] * K * sw[None, :])
        b = w * f + g
        v, info = scipy.linalg.lapack.dpotrs(L, sw * (K @ b), lower=1)
        a, f, obj, converged = _damped_step(psi, K, a, b - sw * v, obj, tol)
        if converged:
            break
    g, w = likelihood.grad_hess(y, f)
    sw = np.sqrt(w)
    L = _chol_lower(np.eye(m) + sw[:, None] * K * sw[None, :])
    log_ev = -0.5 * a @ f + likelihood.log_prob(y, f).sum() - np.log(np.diag(L)).sum()
    return BinaryLaplaceState(f=f, a=a, grad=g, sqrt_w=sw, chol=L, log_evidence=float(log_ev))


@dataclass
class WeightLaplaceState:
    u: np.ndarray        # (d,) posterior mode of the weights
    f: np.ndarray        # (m,) latent at the labelled points, offset included
    w: np.ndarray        # (m,) W = -d² log p / df² at the mode
    chol: np.ndarray     # (d, d) lower Cholesky factor of H = I + Φᵀ W Φ (with a nugget:
    #                      of the Schur complement S = I + Φᵀ diag(W / (1 + σ²W)) Φ)
    log_evidence: float
    n_iter: int
    nugget: float = 0.0  # σ², the variance of the observations' own latent terms
    e: np.ndarray | None = None   # (m,) their standardised modes (f = b + Φu + σ e)

    def covariance(self) -> np.ndarray:
        """The weights' posterior covariance ``H⁻¹`` (d, d)."""
        d = self.chol.shape[0]
        Linv = scipy.linalg.solve_triangular(self.chol, np.eye(d), lower=True)
        return Linv.T @ Linv


def laplace_weights(Phi: np.ndarray, y: np.ndarray, likelihood=PoissonLikelihood, *,
                    offset: float = 0.0, u0: np.ndarray | None = None, tol: float = 1e-10,
                    max_iter: int = 100, nugget: float = 0.0) -> WeightLaplaceState:
    """Laplace approximation in weight space: ``f = offset + Φ u``, ``u ~ N(0, I_d)``,
    ``y_i ~ p(y_i | f_i)``; ``nugget = σ² > 0`` adds ``σ e_i``, ``e ~ N(0, I_m)``
    (overdispersion: the Poisson–log-normal model).

    Damped Newton on ``Ψ(u) = -|u|²/2 + Σ log p(y | f)`` until no weight moves by more than
    ``tol``; log evidence ``Ψ(û) - log|I + Φᵀ W Φ| / 2``. ``u0`` warm-starts Newton.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m, d = Phi.shape
    if nugget > 0.0:
        return _laplace_weights_nugget(Phi, y, likelihood, offset, u0, tol, max_iter,
                                       float(nugget))
    u = np.zeros(d) if u0 is None else np.array(u0, dtype=np.float64)
    base = _saturated(likelihood, y)

    def psi(u_):
        f_ = offset + Phi @ u_
        with np.errstate(over="ignore", invalid="ignore"):
            val = -0.5 * u_ @ u_ + (likelihood.log_prob(y, f_) - base).sum()
        return (val if np.isfinite(val) else -np.inf), f_

    obj, f = psi(u)
    if u0 is not None:
        # a warm start only where it beats the prior's mean (a far one can stall Newton)
        obj0, f0 = psi(np.zeros(d))
        if not obj >= obj0:
            u, obj, f = np.zeros(d), obj0, f0
    it = 0
    for it in range(1, max_iter + 1):
        g, w = likelihood.grad_hess(y, f)
        L = _chol_eye_plus_gram(Phi * np.sqrt(w)[:, None])
        step = scipy.linalg.cho_solve((L, True), Phi.T @ g - u, check_finite=False)
        size = 1.0
        while True:
            obj_try, f_try = psi(u + size * step)
            if obj_try >= obj - 1e-12 * abs(obj) or size < 1e-6:
                break
            size *= 0.5
        if obj_try < obj - 1e-12 * abs(obj):
            break                                   # no ascent left: at the mode
        u, f, obj = u + size * step, f_try, obj_try
        if size * np.max(np.abs(step), initial=0.0) <= tol:
            break
    g, w = likelihood.grad_hess(y, f)
    L = _chol_eye_plus_gram(Phi * np.sqrt(w)[:, None])
    log_ev = obj + base.sum() - np.log(np.diag(L)).sum()
    return WeightLaplaceState(u=u, f=f, w=w, chol=L, log_evidence=float(log_ev), n_iter=it)


def _saturated(likelihood, y) -> np.ndarray:
    sat = getattr(likelihood, "saturated", None)
    return np.zeros(np.shape(y)) if sat is None else sat(y)


def _laplace_weights_nugget(Phi, y, likelihood, offset, u0, tol, max_iter, nugget):
    """:func:`laplace_weights` with a nugget: Newton on ``(u, e)``, the Hessian solved by
    its Schur complement ``S = I + Φᵀ diag(W/D) Φ``, ``D = I + σ²W``."""
    m, d = Phi.shape
    sigma = np.sqrt(nugget)
    u = np.zeros(d) if u0 is None else np.array(u0, dtype=np.float64)
    e = np.zeros(m)
    base = _saturated(likelihood, y)

    def psi(u_, e_):
        f_ = offset + Phi @ u_ + sigma * e_
        with np.errstate(over="ignore", invalid="ignore"):
            val = -0.5 * (u_ @ u_ + e_ @ e_) + (likelihood.log_prob(y, f_) - base).sum()
        return (val if np.isfinite(val) else -np.inf), f_

    obj, f = psi(u, e)
    if u0 is not None:                      # a warm start only where it beats the prior's mean
        obj0, f0 = psi(np.zeros(d), e)
        if not obj >= obj0:
            u, obj, f = np.zeros(d), obj0, f0
    it = 0
    for it in range(1, max_iter + 1):
        g, w = likelihood.grad_hess(y, f)
        D = 1.0 + nugget * w
        L = _chol_eye_plus_gram(Phi * np.sqrt(w / D)[:, None])
        r_u, r_e = Phi.T @ g - u, sigma * g - e
        du = scipy.linalg.cho_solve((L, True), r_u - sigma * (Phi.T @ (w / D * r_e)),
                                    check_finite=False)
        de = (r_e - sigma * w * (Phi @ du)) / D
        size = 1.0
        while True:
            obj_try, f_try = psi(u + size * du, e + size * de)
            if obj_try >= obj - 1e-12 * abs(obj) or size < 1e-6:
                break
            size *= 0.5
        if obj_try < obj - 1e-12 * abs(obj):
            break
        u, e, f, obj = u + size * du, e + size * de, f_try, obj_try
        if size * max(np.max(np.abs(du), initial=0.0), np.max(np.abs(de), initial=0.0)) <= tol:
            break
    g, w = likelihood.grad_hess(y, f)
    D = 1.0 + nugget * w
    L = _chol_eye_plus_gram(Phi * np.sqrt(w / D)[:, None])
    log_ev = obj + base.sum() - 0.5 * np.log(D).sum() - np.log(np.diag(L)).sum()
    return WeightLaplaceState(u=u, f=f, w=w, chol=L, log_evidence=float(log_ev), n_iter=it,
                              nugget=nugget, e=e)


def laplace_weights_grad(state: WeightLaplaceState, Phi: np.ndarray, y: np.ndarray,
                         likelihood=PoissonLikelihood, nugget_gradient: bool = False):
    """Gradient of :func:`laplace_weights`' log evidence in ``log d_l`` when
    ``Φ = V diag(√d)``: ``û_l²/2 - (1 - (H⁻¹)_ll)/2 - û_l (H⁻¹ Φᵀ (κ ∘ W'))_l / 2`` with
    ``κ_i = (Φ H⁻¹ Φᵀ)_ii`` and ``W' = dW/df`` - the explicit terms plus the mode's
    dependence on ``d`` (R&W Section 5.5.1, in weight space). With ``nugget_gradient``
    also the gradient in ``log σ²`` (the sum of the same formula over the nugget's
    columns): ``(gradient, nugget gradient)``."""
    Hinv = state.covariance()
    PH = Phi @ Hinv
    G = np.einsum("ij,ij->i", PH, Phi)             # diag(Φ S⁻¹ Φᵀ) (S = H without nugget)
    w3 = likelihood.hess_derivative(y, state.f)
    u = state.u
    if state.nugget == 0.0:
        grad = 0.5 * u * u - 0.5 * (1.0 - np.diag(Hinv)) - 0.5 * u * (PH.T @ (G * w3))
        return (grad, 0.0) if nugget_gradient else grad
    # the nugget's columns σ e_i via the Schur complement: κ = G / D² + σ² / D,
    # H⁻¹ Ψᵀ c = (S⁻¹ Φᵀ (c/D), σ (c - W Φ q_u)/D), diag of H⁻¹'s e-block 1/D + σ² (W/D)² G
    s2, w, e = state.nugget, state.w, state.e
    D = 1.0 + s2 * w
    c = (G / D ** 2 + s2 / D) * w3
    q_u = PH.T @ (c / D)
    q_e = np.sqrt(s2) * (c - w * (Phi @ q_u)) / D
    grad = 0.5 * u * u - 0.5 * (1.0 - np.diag(Hinv)) - 0.5 * u * q_u
    if not nugget_gradient:
        return grad
    h_ee = 1.0 / D + s2 * (w / D) ** 2 * G
    return grad, float(np.sum(0.5 * e * e - 0.5 * (1.0 - h_ee) - 0.5 * e * q_e))


def binary_predict(state: BinaryLaplaceState, K_cross: np.ndarray,
                   k_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latent predictive mean and variance at new points (R&W Algorithm 3.2); ``K_cross``
    ``m x n*`` (labelled x new), ``k_diag`` the prior variances there."""
    mean = K_cross.T @ state.grad
    v = scipy.linalg.solve_triangular(state.chol, state.sqrt_w[:, None] * K_cross, lower=True)
    var = np.maximum(k_diag - (v * v).sum(0), 0.0)
    return mean, var


def binary_predict_low_rank(state: BinaryLaplaceState, V_lab: np.ndarray, w: np.ndarray,
                            V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`binary_predict` for ``K(x, x') = v(x) diag(w) v(x')^T``; ``V_lab`` (``m x
    M``), ``V`` (``n* x M``): eigenvectors at the labelled and new points. Variance
    ``v^T W v - ||R v||^2``, ``R = L^{-1} W_lik^{1/2} V_lab W``. ValueError for mismatched
    shapes.
    """
    m, M = V_lab.shape
    if V.shape[1] != M or w.shape != (M,):
        raise ValueError(f"V has {V.shape[1]} columns and w {w.shape[0]} entries; both must "
                         f"equal the {M} columns of V_lab.")
    V_lab, w, V = active_columns(V_lab, w, V)
    m, M = V_lab.shape
    Vl_w = V_lab * w
    mean = V @ (Vl_w.T @ state.grad)
    R = scipy.linalg.solve_triangular(state.chol, state.sqrt_w[:, None] * Vl_w, lower=True)
    if m < M:
        Q = V @ R.T
        var = (V * V) @ w - np.einsum("ij,ij->i", Q, Q)
    else:
        P = np.diag(w) - R.T @ R
        var = np.einsum("ij,ij->i", V @ P, V)
    return mean, np.maximum(var, 0.0)


def binary_predict_low_rank_many(states, V_lab: np.ndarray, W: np.ndarray,
                                 V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`binary_predict_low_rank` for ``K`` states (weights ``W[k]``) at once: means
    and variances ``(n*, K)``."""
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    K, M = W.shape
    m = V_lab.shape[0]
    if len(states) != K or V_lab.shape[1] != M or V.shape[1] != M:
        raise ValueError(f"got {len(states)} states and {K} weight rows, and V_lab / V have "
                         f"{V_lab.shape[1]} / {V.shape[1]} columns; W must hold one row of "
                         f"{V_lab.shape[1]} weights per state.")
    if m >= M or K == 1 or not W.all():
        out = [binary_predict_low_rank(st, V_lab, w, V) for st, w in zip(states, W)]
        return np.stack([o[0] for o in out], 1), np.stack([o[1] for o in out], 1)
    grads = np.empty((M, K))
    R = np.empty((K * m, M))
    for k, (st, w) in enumerate(zip(states, W)):
        Vl_w = V_lab * w
        grads[:, k] = Vl_w.T @ st.grad
        R[k * m:(k + 1) * m] = scipy.linalg.solve_triangular(
            st.chol, st.sqrt_w[:, None] * Vl_w, lower=True)
    mean = V @ grads
    Q = V @ R.T                                             # (n*, K m)
    var = (V * V) @ W.T - (Q * Q).reshape(V.shape[0], K, m).sum(2)
    return mean, np.maximum(var, 0.0)


@dataclass
class SoftmaxLaplaceState:
    f: np.ndarray          # (m, C) posterior mode
    a: np.ndarray          # (m, C), F = K a
    pi: np.ndarray         # (m, C) softmax at the mode
    Y: np.ndarray          # (m, C) one-hot labels
    E: list                # per class E_c (m x m)
    chol_sum_e: np.ndarray  # chol of Σ_c E_c
    log_evidence: float


def _softmax_blocks(K, pi):
    """Per class ``E_c = D_c^{1/2} (I + D_c^{1/2} K D_c^{1/2})^{-1} D_c^{1/2}``,
    ``Σ_c log|L_c|`` and the Cholesky factor of ``Σ_c E_c``."""
    m, C = pi.shape
    E, z = [], 0.0
    for c in range(C):
        sd = np.sqrt(pi[:, c])
        L = scipy.linalg.cholesky(np.eye(m) + sd[:, None] * K * sd[None, :], lower=True)
        inv, info = scipy.linalg.lapack.dpotri(L, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("potri failed in the softmax Laplace step")
        inv = np.tril(inv) + np.tril(inv, -1).T
        E.append(sd[:, None] * inv * sd[None, :])
        z += np.log(np.diag(L)).sum()
    sum_e = sum(E)
    Ms = scipy.linalg.cholesky(0.5 * (sum_e + sum_e.T) + 1e-12 * np.eye(m), lower=True)
    return E, z, Ms


def laplace_softmax(K: np.ndarray, Y: np.ndarray, *, a0: np.ndarray | None = None,
                    tol: float = 1e-9, max_iter: int = 100) -> SoftmaxLaplaceState:
    """Mode and Laplace log evidence for the softmax likelihood (R&W Algorithm 3.3);
    ``a0`` (m, C) warm-starts Newton at ``F = K a0``."""
    m, C = Y.shape

    def psi(A_, F_):
        return -0.5 * np.sum(A_ * F_) + np.sum(Y * F_) - np.sum(np.logaddexp.reduce(F_, axis=1))

    A = np.zeros((m, C)) if a0 is None else np.array(a0, dtype=np.float64)
    F = K @ A
    obj = psi(A, F)
    for _ in range(max_iter):
        pi = softmax(F, axis=1)
        E, _, Ms = _softmax_blocks(K, pi)
        # b = (D - Π Π^T) f + y - π, per point
        b = pi * F - pi * np.sum(pi * F, axis=1, keepdims=True) + Y - pi
        c = np.stack([E[k] @ (K @ b[:, k]) for k in range(C)], axis=1)
        r = scipy.linalg.cho_solve((Ms, True), c.sum(1))
        A_new = b - c + np.stack([E[k] @ r for k in range(C)], axis=1)
        A, F, obj, converged = _damped_step(psi, K, A, A_new, obj, tol)
        if converged:
            break
    pi = softmax(F, axis=1)
    E, z, Ms = _softmax_blocks(K, pi)
    # log|I + W^{1/2} K W^{1/2}| = 2 Σ_c z_c + log|Σ_c E_c| (matrix determinant lemma with
    # W = D - Π Π^T and Σ_c π_ic = 1); R&W's Algorithm 3.3 keeps only the first term
    log_ev = psi(A, F) - z - np.log(np.diag(Ms)).sum()
    return SoftmaxLaplaceState(f=F, a=A, pi=pi, Y=Y, E=E, chol_sum_e=Ms,
                               log_evidence=float(log_ev))


def softmax_predict(state: SoftmaxLaplaceState, K_cross: np.ndarray,
                    k_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latent predictive means ``(n*, C)`` and per-class variances ``(n*, C)``
    (R&W Algorithm 3.4, diagonal of the class covariance), the variance as
    ``k** - k*^T Q_c k*`` with ``Q_c = E_c - E_c (Σ_c E_c)^{-1} E_c``."""
    C = state.Y.shape[1]
    m = K_cross.shape[0]
    mean = K_cross.T @ (state.Y - state.pi)
    Q = np.empty((C * m, m))
    for c in range(C):
        Ec = state.E[c]
        G = scipy.linalg.cho_solve((state.chol_sum_e, True), Ec)
        Qc = Ec - Ec @ G
        Q[c * m:(c + 1) * m] = 0.5 * (Qc + Qc.T)
    var = np.empty_like(mean)
    chunk = max(1, 8_000_000 // (C * m))
    for start in range(0, K_cross.shape[1], chunk):
        Kc = K_cross[:, start:start + chunk]
        QK = (Q @ Kc).reshape(C, m, -1)
        var[start:start + chunk] = (k_diag[start:start + chunk, None]
                                    - np.einsum("cmn,mn->nc", QK, Kc))
    return mean, np.maximum(var, 0.0)


def softmax_probabilities(mean: np.ndarray, var: np.ndarray, n_samples: int = 64,
                          random_state: int = 0) -> np.ndarray:
    """Quasi-Monte-Carlo average of the softmax over independent Gaussian latents per class.

    ``eps``: normal quantiles of a scrambled Sobol sequence (``n_samples`` rounded up to a
    power of two, seeded by ``random_state``; 64 about as accurate as 256 Monte-Carlo
    samples), the same for every point. Raises ValueError for ``n_samples < 1``."""
    if int(n_samples) < 1:
        raise ValueError(f"n_samples must be >= 1 (it is rounded up to a power of two); "
                         f"got {n_samples!r}.")
    n, C = mean.shape
    m = int(np.ceil(np.log2(int(n_samples))))
    u = qmc.Sobol(C, scramble=True, seed=random_state).random_base2(m)
    eps = norm.ppf(np.clip(u, 1e-12, 1 - 1e-12))                              # (S, C)
    eps = np.ascontiguousarray(eps.T, dtype=np.float32)[:, :, None]           # (C, S, 1)
    mu = np.ascontiguousarray(mean.T, dtype=np.float32)
    sd = np.sqrt(np.ascontiguousarray(var.T, dtype=np.float32))
    out = np.empty((n, C))
    chunk = max(1, 1_000_000 // (C * eps.shape[1]))
    for start in range(0, n, chunk):
        z = eps * sd[:, None, start:start + chunk]
        z += mu[:, None, start:start + chunk]
        z -= z.max(axis=0)
        np.exp(z, out=z)
        z /= z.sum(axis=0)
        out[start:start + chunk] = z.mean(axis=1, dtype=np.float64).T
    return out / out.sum(axis=1, keepdims=True)


def probit_logistic(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``E[σ(f)]`` for ``f ~ N(mean, var)`` by MacKay's probit approximation."""
    return expit(mean / np.sqrt(1.0 + np.pi * var / 8.0))

