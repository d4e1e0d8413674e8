r"""Counts on a point cloud: the Poisson likelihood with a log link, for
``FLGPRegressor(likelihood="poisson")``.

Model: ``y_i ~ Poisson(exp(b + f(x_i)))``, ``f ~ GP(0, s² C_t)`` with ``C_t`` the heat
kernel, so ``f = v(x)ᵀ diag(√d) u`` with ``u ~ N(0, I_M)`` and ``d = s² c e^{-tλ}``.
``b`` is the log of the labels' mean count (:func:`count_offset`); the heat kernel's
constant eigenvector lets the posterior move the overall level away from it.

* Posterior: Laplace's approximation in weight space
  (:func:`flgp.models.inference.laplace.laplace_weights`), ``O(m M² + M³)`` per Newton step.
* Overdispersion: each count has a log-rate term of its own, ``ε_i ~ N(0, σ²)`` (the
  Poisson–log-normal model), so that large counts do not force the prior to interpolate
  their logarithms exactly; ``σ²`` is fitted in ``NUGGET_BOUNDS``.
* ``t``, ``s²`` and ``σ²``: the Laplace marginal likelihood times ``π(t) ∝ t^{-a0}``,
  maximised by L-BFGS-B with its analytic gradient
  (:func:`flgp.models.inference.laplace.laplace_weights_grad`) from the best two starts of
  a 12-point log grid over ``t``, each at three amplitudes.
* Predictions: a new count's log-rate is ``N(m, v + σ²)``, so its rate has mean
  ``exp(b + m + (v + σ²)/2)`` and sd ``mean · √(e^{v + σ²} - 1)``; the count follows the
  Poisson–log-normal mixture whose quantiles :func:`poisson_interval` finds.
* Large posterior variances of the log-rate (sparse regions, small pieces of the graph)
  would give absurd mean counts: a piece without a label predicts a count drawn like the
  labelled ones (:func:`count_population`), and the log-rate is truncated at
  :func:`rate_ceiling` (a bounded-rate prior; :func:`bounded_rate_moments`), which moves
  no prediction that the labels inform.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.special import log_ndtr, ndtr, ndtri, pdtr

from ...spectral.families import diffusion_time_range, spectral_weights
from ..search import multistart_minimize, unit_prior_log_scale
from .laplace import PoissonLikelihood, laplace_weights, laplace_weights_grad

__all__ = ["check_counts", "count_offset", "fit_count_hyperparameters", "poisson_interval",
           "RATE_CEILING", "rate_ceiling", "count_population", "bounded_rate_moments"]

_T_GRID = 12


def check_counts(values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The labelled targets as counts (float64), or a ValueError naming a value that is not
    a count. ``rows``: their row numbers, for the message."""
    y = np.asarray(values, dtype=np.float64)
    where = (lambda k: f" at row {int(rows[k])}") if rows is not None else (lambda k: "")
    bad = np.flatnonzero(y < 0)
    if bad.size:
        raise ValueError(f"likelihood='poisson' needs counts (non-negative integers), but "
                         f"{bad.size} labelled target(s) are negative (e.g. {y[bad[0]]:g}"
                         f"{where(bad[0])}). Mark unlabelled rows with NaN, not a negative "
                         f"number.")
    bad = np.flatnonzero(y != np.round(y))
    if bad.size:
        raise ValueError(f"likelihood='poisson' needs counts (non-negative integers), but "
                         f"{bad.size} labelled target(s) are not whole numbers (e.g. "
                         f"{y[bad[0]]:g}{where(bad[0])}). Pass the raw counts, or use "
                         f"likelihood='gaussian' for a continuous target (e.g. log1p of a "
                         f"rate).")
    return y


def count_offset(y: np.ndarray) -> float:
    """``b = log(mean count)``; with every count 0, ``log(1 / (2 m))`` (half a count over
    the ``m`` labels), so that the level stays finite."""
    y = np.asarray(y, dtype=np.float64)
    mean = float(y.mean())
    return float(np.log(mean if mean > 0 else 0.5 / y.size))


# the largest rate the model admits, as a multiple of the largest labelled count (+ 1): the
# log-rate's posterior is truncated at log(RATE_CEILING (max y + 1)) (see rate_ceiling)
RATE_CEILING = 1e3


def rate_ceiling(y: np.ndarray) -> float:
    """``log(RATE_CEILING (max y + 1))``, where every prediction's log-rate is truncated
    (:func:`bounded_rate_moments`): far above any posterior the labels inform, it bounds
    the mean count where the log-rate's posterior variance is huge."""
    y = np.asarray(y, dtype=np.float64)
    return float(np.log(RATE_CEILING) + np.log1p(y.max()))


def count_population(Phi: np.ndarray, state) -> tuple[float, float]:
    """The log-rate of a count drawn like the labelled ones, relative to the offset ``b``:
    mean ``m̄`` and variance ``var(m_i) + mean(v_i)`` of the latent's posterior
    ``N(m_i, v_i)`` at the labelled rows ``Φ`` (without ``σ²``); what a piece without a
    label predicts (:class:`~flgp.models.regression_predictor.CountPredictor`)."""
    m = Phi @ state.u
    PL = scipy.linalg.solve_triangular(state.chol, Phi.T, lower=True)   # H = L Lᵀ
    v = np.einsum("ij,ij->j", PL, PL)
    return float(m.mean()), float(m.var() + v.mean())


def bounded_rate_moments(log_mean: np.ndarray, var: np.ndarray, ceiling: float = np.inf):
    """Mean and sd of the rate ``e^L``, ``L ~ N(log_mean, var)`` truncated at ``L <=
    ceiling`` (:func:`rate_ceiling`): ``E[e^L] = e^{μ + v/2} Φ(z₁) / Φ(z₀)`` and
    ``E[e^{2L}] = e^{2μ + 2v} Φ(z₂) / Φ(z₀)`` with ``z_k = (c - μ - k v) / √v``, in logs;
    the plain log-normal's moments where ``z₂ > 8.5`` (inf beyond float64)."""
    log_mean = np.asarray(log_mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    mean = np.empty(log_mean.shape)
    sd = np.empty(log_mean.shape)
    mu = log_mean + 0.5 * var
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        root = np.sqrt(var)
        cut = (var > 0) & (ceiling - log_mean - 2.0 * var < 8.5 * root)
        free = ~cut
        # the log-normal's moments (overflow is reported once by the estimator)
        mean[free] = np.exp(mu[free])
        sd[free] = mean[free] * np.sqrt(np.expm1(var[free]))
        bad = free & ~np.isfinite(sd)
        if bad.any():               # the product overflowed or met 0 * inf: in logs
            sd[bad] = np.exp(mu[bad] + 0.5 * (var[bad] + np.log(
                -np.expm1(-np.maximum(var[bad], 1e-300)))))
        if cut.any():
            m, v, r = log_mean[cut], var[cut], root[cut]
            l0 = log_ndtr((ceiling - m) / r)
            l1 = log_ndtr((ceiling - m - v) / r)
            l2 = log_ndtr((ceiling - m - 2.0 * v) / r)
            log_m = m + 0.5 * v + l1 - l0
            mean[cut] = np.exp(log_m)
            # Var / mean² = E[e^{2L}] / E[e^L]² - 1 = e^{v + l2 + l0 - 2 l1} - 1
            sd[cut] = mean[cut] * np.sqrt(np.maximum(np.expm1(v + l2 + l0 - 2.0 * l1), 0.0))
    return mean, sd


# the range of the overdispersion σ² (the variance of each count's own log-rate term)
NUGGET_BOUNDS = (1e-6, 10.0)
_NUGGET_START = 1e-2
_AMPLITUDE_STARTS = (0.0, np.log(1e2), np.log(1e4))


def fit_count_hyperparameters(eigenpairs, V_lab: np.ndarray, y: np.ndarray, offset: float, *,
                              diffusion_time=None, prior_power: float = 1.0,
                              max_iter: int = 100, nugget=None) -> dict:
    """``t``, ``s²`` and the overdispersion ``σ²`` by the Laplace marginal likelihood (see
    the module docstring); ``nugget``: a fixed ``σ²`` (0: plain Poisson) instead of a
    fitted one.

    Returns ``dict(t, s2, nugget, nll, nll_evidence, n_iter, state, weights, kept)``:
    ``state`` the :class:`~flgp.models.inference.laplace.WeightLaplaceState` at the
    optimum over the columns where ``weights = s² c e^{-tλ}`` is not 0."""
    lam = eigenpairs.eigenvalues
    M = lam.size
    lo, hi = diffusion_time_range(lam)
    fit_nugget = nugget is None
    bounds = [(np.log(lo), np.log(hi)), (np.log(1e-4), np.log(1e4))]
    if fit_nugget:
        bounds.append(tuple(np.log(NUGGET_BOUNDS)))
    if diffusion_time is not None:
        bounds[0] = (np.log(diffusion_time),) * 2
    a0 = float(prior_power) - 1.0
    warm = np.zeros(M)

    def nugget_of(theta):
        return float(np.exp(theta[2])) if fit_nugget else float(nugget)

    def evaluate(theta):
        t, s2 = np.exp(theta[:2])
        w = s2 * spectral_weights(eigenpairs, t)
        kept = w != 0
        Phi = V_lab[:, kept] * np.sqrt(w[kept])
        st = laplace_weights(Phi, y, PoissonLikelihood, offset=offset, u0=warm[kept],
                             max_iter=max_iter, nugget=nugget_of(theta))
        warm[:] = 0.0
        warm[kept] = st.u
        return st, kept, Phi, w

    def f_and_grad(theta):
        log_t = theta[0]
        try:
            st, kept, Phi, _ = evaluate(theta)
            g, g_nugget = laplace_weights_grad(st, Phi, y, PoissonLikelihood,
                                               nugget_gradient=True)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return 1e30, np.zeros(theta.size)
        nll = -st.log_evidence + a0 * log_t
        t = np.exp(log_t)
        grad = [np.sum(g * t * lam[kept]) + a0, -np.sum(g)]
        if fit_nugget:
            grad.append(-g_nugget)
        grad = np.array(grad)
        if not (np.isfinite(nll) and np.all(np.isfinite(grad))):
            return 1e30, np.zeros(theta.size)
        return nll, grad

    def matched_log_s2(log_t):
        return unit_prior_log_scale(eigenpairs, V_lab, log_t, bounds[1])

    def start(log_t, log_scale=0.0):
        x = [log_t, float(np.clip(matched_log_s2(log_t) + log_scale, *bounds[1]))]
        return np.array(x + [np.log(_NUGGET_START)] if fit_nugget else x)

    # starts: a log grid over t, each with the amplitude that gives the labels unit mean
    # prior variance and 10^2, 10^4 times it (log-rates of counts may vary by far more)
    grid_t = ([bounds[0][0]] if diffusion_time is not None
              else np.linspace(np.log(lo), np.log(hi), _T_GRID))
    grid = [start(g, a) for g in grid_t for a in _AMPLITUDE_STARTS]

    def cold():
        warm[:] = 0.0

    best = multistart_minimize(f_and_grad, grid, bounds, n_starts=2, max_iter=max_iter,
                               reset=cold)
    warm[:] = 0.0
    state, kept, _, w = evaluate(best.x)
    log_t, log_s2 = best.x[:2]
    return dict(t=float(np.exp(log_t)), s2=float(np.exp(log_s2)), nugget=nugget_of(best.x),
                nll=float(best.fun), nll_evidence=float(-state.log_evidence),
                n_iter=max(1, int(best.nit)), state=state, weights=w, kept=kept)


_GH_NODES = 24


def poisson_interval(mean: np.ndarray, sd: np.ndarray, coverage: float = 0.9,
                     ceiling: float | None = None):
    """Equal-tailed ``coverage`` interval ``(lower, upper)`` of a new count whose log-rate
    is ``N(mean, sd²)``: the quantiles of the Poisson–log-normal mixture, its CDF by
    Gauss–Hermite quadrature over the log-rate (24 nodes), each quantile the smallest
    count whose CDF reaches the level (bisection over integers).

    ``ceiling``: the log-rate truncated at ``L <= ceiling`` (:func:`rate_ceiling`), keeping
    the mass ``Φ(z) = Φ((ceiling - mean) / sd)``. Where it cuts off more than 1e-6 the
    mixture is integrated over the truncated log-rate's own quantiles at 1024 equal slices
    of probability, once per distinct ``(mean, sd)``; elsewhere the levels are scaled by
    ``Φ(z)``."""
    mean = np.asarray(mean, dtype=np.float64)
    sd = np.asarray(sd, dtype=np.float64)
    x, w = np.polynomial.hermite.hermgauss(_GH_NODES)
    w = w / np.sqrt(np.pi)
    levels = ((1.0 - coverage) / 2.0, (1.0 + coverage) / 2.0)
    kept = np.ones(mean.shape)
    if ceiling is not None and np.isfinite(ceiling):
        with np.errstate(divide="ignore", invalid="ignore"):
            kept = np.where(sd > 0, ndtr((ceiling - mean) / sd), 1.0)
    cut = kept < 1.0 - 1e-6
    free = ~cut
    log_rate = mean[free, None] + np.sqrt(2.0) * sd[free, None] * x[None, :]
    rate = np.exp(np.minimum(log_rate, 700.0))
    out = [np.empty(mean.shape), np.empty(mean.shape)]
    for q, level in zip(out, levels):
        q[free] = _mixture_quantile(rate, w, level * kept[free])
    if cut.any():
        pairs, inverse = np.unique(np.c_[mean[cut], sd[cut]], axis=0, return_inverse=True)
        inverse = np.ravel(inverse)
        u = (np.arange(_TRUNCATED_NODES) + 0.5) / _TRUNCATED_NODES
        w = np.full(_TRUNCATED_NODES, 1.0 / _TRUNCATED_NODES)
        found = np.empty((2, pairs.shape[0]))
        for start in range(0, pairs.shape[0], _TRUNCATED_BLOCK):
            m_, s_ = pairs[start:start + _TRUNCATED_BLOCK].T
            keep = ndtr((ceiling - m_) / s_)
            log_rate = m_[:, None] + s_[:, None] * ndtri(u[None, :] * keep[:, None])
            rate = np.exp(np.minimum(log_rate, min(ceiling, 700.0)))
            for j, level in enumerate(levels):
                found[j, start:start + _TRUNCATED_BLOCK] = _mixture_quantile(rate, w, level)
        for j, q in enumerate(out):
            q[cut] = found[j, inverse]
    return out[0], out[1]


_TRUNCATED_NODES = 1024
_TRUNCATED_BLOCK = 256


def _mixture_quantile(rate: np.ndarray, w: np.ndarray, level) -> np.ndarray:
    """The smallest count whose CDF under the Poisson mixture with rates ``rate`` (rows x
    nodes) and node weights ``w`` reaches ``level`` (a number or one per row; bisection
    over integers)."""
    level = np.asarray(level, dtype=np.float64)
    # bracket: the mixture's quantile lies between its components' quantiles
    lo = np.zeros(rate.shape[0])
    hi = np.max(_poisson_upper(rate, level if np.ndim(level) == 0 else level[:, None]),
                axis=1)
    # invariant: cdf(hi) >= level; find the smallest such integer (beyond 2^53 the
    # smallest float within rounding; inf where the quantile exceeds float64)
    while True:
        open_ = np.isfinite(hi) & (hi - lo > np.maximum(1.0, hi * 2.0 ** -52))
        if not open_.any():
            break
        mid = np.floor(lo + (hi - lo) / 2.0)
        cdf = (pdtr(mid[:, None], rate) * w).sum(1)
        reach = cdf >= level
        hi = np.where(open_ & reach, mid, hi)
        lo = np.where(open_ & ~reach, mid + 1.0, lo)
    # the last step of an exact bracket: lo == hi - 1 may already reach the level
    last = np.isfinite(hi) & (hi - lo == 1.0)
    if last.any():
        reach = (pdtr(lo[last, None], rate[last]) * w).sum(1) >= (
            level if np.ndim(level) == 0 else level[last])
        hi[np.flatnonzero(last)[reach]] = lo[last][reach]
    return hi


def _poisson_upper(rate: np.ndarray, level: float) -> np.ndarray:
    """An integer ``k`` with ``P(Poisson(rate) <= k) >= level`` for every rate (a normal
    bound widened until it holds; inf where no float64 does)."""
    k = np.ceil(rate + 8.0 * np.sqrt(rate) + 10.0)
    while True:
        short = np.isfinite(k) & (pdtr(k, rate) < level)
        if not short.any():
            return k
        with np.errstate(over="ignore"):
            k = np.where(short, np.where(k > 1e300, np.inf, 2.0 * k + 10.0), k)
