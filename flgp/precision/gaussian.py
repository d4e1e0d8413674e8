r"""Exact Gaussian regression under a sparse-precision (graph Matérn) prior.

Model, for standardised targets ``z`` at ``m`` observed nodes (``P`` selects them):
``z = P f + ε``, ``f ~ N(0, A Q⁻¹)``, ``ε ~ N(0, A r I)``, ``r`` the noise-to-signal ratio,
the amplitude ``A`` profiled out. With ``Q̃ = Q + Pᵀ P / r``, ``b = Pᵀ z / r`` and
``S = P Q⁻¹ Pᵀ + r I``:

* posterior mean ``μ = Q̃⁻¹ b``, covariance ``A Q̃⁻¹``, variances ``diag(Q̃⁻¹)`` by
  Rao-Blackwellised Monte Carlo (Sidén, Lindgren, Bolin and Villani 2018);
* ``log |S| = m log r + log |Q̃| - log |Q|``, ``zᵀ S⁻¹ z = zᵀz / r - bᵀ μ`` (determinant
  lemma, Woodbury), ``Â = zᵀ S⁻¹ z / m``, ``log p(z) = -m/2 log(2π Â) - m/2 - ½ log |S|``:
  exact, from sparse Cholesky factors of ``K`` (for ``log |Q|``) and ``Q̃``.

The hyperparameter search (:func:`fit_matern`) is described in docs/full_resolution.md.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._config import physical_memory
from .._fingerprint import array_fingerprint
from .cholesky import NotPositiveDefiniteError, PatternCholesky
from .iterative import LARGE_GRAPH_ORDERS, IterativeMaternRegression
from .matern import MATERN_ORDERS, MaternFactors, check_order

__all__ = ["MaternRegression", "MaternFit", "rbmc_variances", "rao_blackwell_variances",
           "diagonal_of_inverse", "entries_of_inverse", "fit_matern",
           "search_matern", "search_steps", "drive", "search_subgraph", "precomputed_fits",
           "precomputed_key", "fit_matern_steps", "search_matern_steps", "Screen", "exhaust",
           "cross_validated_amplitude"]

_LOG_2PI = np.log(2.0 * np.pi)
# observed nodes whose exact prior variance sets the scale of the noise in the search
SCALE_NODES = 8
# unit vectors solved for at once (entries_of_inverse)
SOLVE_BLOCK = 256


@dataclass
class MaternFit:
    """One evaluation of :class:`MaternRegression`: hyperparameters, log evidence of ``z``,
    amplitude ``A`` (profiled, or ``noise / r``) and posterior mean at every node. ``κ²``,
    ``r`` and ``A`` are in the units of the regression's graph; for :func:`fit_matern` that is
    the graph in its own units, ``length_unit`` and ``mass_unit`` in the input graph's units
    (see :attr:`kappa`, :attr:`amplitude_in_graph_units`)."""

    nu: int
    kappa2: float
    ratio: float
    amplitude: float
    log_evidence: float
    mean: np.ndarray
    length_unit: float = 1.0
    mass_unit: float = 1.0

    @property
    def kappa(self) -> float:
        """``κ`` in the units of the given graph's points (``1 / length``)."""
        return float(np.sqrt(self.kappa2)) / self.length_unit

    @property
    def amplitude_in_graph_units(self):
        """``A μ / ℓ^{2ν}`` (``ℓ``, ``μ``: ``length_unit``, ``mass_unit``): ``A`` for ``Q_ν``
        built on the given graph; ``inf`` or 0 beyond float64's range."""
        with np.errstate(over="ignore", under="ignore"):
            return np.asarray(self.amplitude) * np.exp(
                np.log(self.mass_unit) - 2.0 * self.nu * np.log(self.length_unit))

    @property
    def noise(self) -> float:
        """The noise variance ``A r`` (standardised units)."""
        return self.amplitude * self.ratio


class MaternRegression:
    """Exact Gaussian posterior and evidence of a graph Matérn prior of order ``nu`` on
    ``graph`` for targets ``z`` at the nodes ``observed`` (module notes). ``z`` of shape
    ``(m, maps)``: one amplitude a map, the evidence their sum, one factor of ``Q̃``.
    ValueError for mismatched shapes or repeated nodes."""

    # RBMC variances from a factor of Q̃: precise enough for cross_validated_amplitude
    factored = True

    def __init__(self, graph, observed: np.ndarray, z: np.ndarray, nu: int):
        self.graph = graph
        self.observed = np.asarray(observed, dtype=np.int64)
        self.z = np.asarray(z, dtype=np.float64)
        if self.observed.ndim != 1 or self.z.shape[:1] != self.observed.shape \
                or self.z.ndim > 2:
            raise ValueError("observed and z must have one entry (z: one row, of one value "
                             "a map) per target.")
        if np.unique(self.observed).size != self.observed.size:
            raise ValueError("each node may carry one target; average repeated ones.")
        self.nu = check_order(nu)
        n = graph.n_nodes
        self.n, self.m = n, self.observed.size
        self._factors = MaternFactors(graph, self.nu)
        self._prior_variance = {}
        self.n_evaluations = 0

    def logdet_prior(self, kappa2: float) -> float:
        """``log |Q_ν(κ)| = ν log |K| - (ν - 1) log |C|``."""
        return self._factors.logdet_prior(kappa2)

    def prior_variance(self, kappa2: float) -> float:
        """``v̄(κ)``: the mean of ``diag(Q_ν(κ)⁻¹)`` at up to ``SCALE_NODES`` observed nodes,
        the search's noise scale (``r = r̃ v̄(κ)``)."""
        if kappa2 not in self._prior_variance:
            nodes = self.observed[np.unique(np.linspace(0, self.m - 1,
                                                        min(self.m, SCALE_NODES)).astype(int))]
            self._prior_variance[kappa2] = float(np.mean(diagonal_of_inverse(
                lambda B: self._factors.solve_prior(kappa2, B), self.n, nodes)))
        return self._prior_variance[kappa2]

    def _posterior_factor(self, kappa2: float, ratio: float):
        """The factor of ``Q̃`` at ``(κ², r)``, kept as ``_chol_Q``."""
        self._chol_Q = self._factors.posterior_factor(kappa2, self.observed, 1.0 / ratio,
                                                      (kappa2, ratio))
        return self._chol_Q

    def posterior_precision(self, kappa2: float, ratio: float) -> sp.csc_matrix:
        """``Q̃ = Q_ν(κ) + Pᵀ P / r``."""
        return self._factors.posterior_precision(kappa2, self.observed, 1.0 / ratio,
                                                 (kappa2, ratio))

    @staticmethod
    def _checked(kappa2, ratio) -> tuple[float, float]:
        kappa2 = float(kappa2)
        if not (np.isfinite(kappa2) and kappa2 > 0):
            raise ValueError(f"kappa2 must be a finite number > 0; got {kappa2!r}.")
        return kappa2, checked_ratio(ratio)

    def _factor_posterior(self, kappa2: float, ratio: float, z=None):
        """``(μ, b)``: ``b = Pᵀ z / r``, ``μ = Q̃⁻¹ b``."""
        z = self.z if z is None else z
        b = np.zeros((self.n,) + z.shape[1:])
        b[self.observed] = z / ratio
        return self._posterior_factor(kappa2, ratio).solve(b), b

    def _terms(self, kappa2: float, ratio: float, z=None):
        """``(μ, zᵀ S⁻¹ z, log |S|)`` at ``(κ², r)``; leaves ``Q̃`` factored."""
        z = self.z if z is None else z
        ld_prior = self.logdet_prior(kappa2)
        mean, b = self._factor_posterior(kappa2, ratio, z)
        quad = (np.sum(z * z, axis=0) / ratio
                - np.sum(b[self.observed] * mean[self.observed], axis=0))
        logdet_S = self.m * np.log(ratio) + self._chol_Q.logdet() - ld_prior
        return mean, quad, logdet_S

    def evaluate(self, kappa2: float, ratio: float, noise: float | None = None) -> MaternFit:
        """The :class:`MaternFit` at ``(κ², r)``: ``A`` profiled, or ``noise / r`` for a
        fixed noise variance (units of ``z``); leaves ``Q̃`` factored."""
        kappa2, ratio = self._checked(kappa2, ratio)
        self.n_evaluations += 1
        mean, quad, logdet_S = self._terms(kappa2, ratio)
        m = self.m
        maps = 1 if self.z.ndim == 1 else self.z.shape[1]
        if noise is None:
            amplitude = np.maximum(quad, 1e-300) / m
            log_ev = np.sum(-0.5 * m * (_LOG_2PI + np.log(amplitude) + 1.0))
        else:
            amplitude = np.full(np.shape(quad), float(noise) / ratio)
            log_ev = np.sum(-0.5 * (quad / amplitude + m * (_LOG_2PI + np.log(amplitude))))
        log_ev -= 0.5 * maps * logdet_S
        if self.z.ndim == 1:
            amplitude = float(amplitude)
        return MaternFit(nu=self.nu, kappa2=kappa2, ratio=ratio, amplitude=amplitude,
                       log_evidence=float(log_ev), mean=mean)

    def evaluate_each(self, kappa2: float, ratio: float, columns=None) -> list:
        """One :class:`MaternFit` a map (column of ``z``, or of ``z[:, columns]``) at
        ``(κ², r)``, from one factor of ``Q̃``."""
        kappa2, ratio = self._checked(kappa2, ratio)
        self.n_evaluations += 1
        z = self.z.reshape(self.m, -1)
        mean, quad, logdet_S = self._terms(kappa2, ratio,
                                           z if columns is None else z[:, columns])
        m = self.m
        mean = mean.reshape(self.n, -1)
        amplitude = np.maximum(np.atleast_1d(quad), 1e-300) / m
        log_ev = -0.5 * m * (_LOG_2PI + np.log(amplitude) + 1.0) - 0.5 * logdet_S
        return [MaternFit(nu=self.nu, kappa2=kappa2, ratio=ratio, amplitude=float(a),
                        log_evidence=float(e), mean=mean[:, j])
                for j, (a, e) in enumerate(zip(amplitude, log_ev))]

    def log_evidence_at(self, kappa2: float, ratio: float, amplitude: float) -> float:
        """``log N(z | 0, A S)`` at a given amplitude ``A`` (one map); leaves ``Q̃``
        factored. ValueError for a bad ``amplitude`` or several maps."""
        A, m = float(amplitude), self.m
        if not (np.isfinite(A) and A > 0):
            raise ValueError(f"amplitude must be a finite number > 0; got {amplitude!r}.")
        if self.z.ndim != 1:
            raise ValueError("log_evidence_at takes one map (z of shape (m,)).")
        _, quad, logdet_S = self._terms(*self._checked(kappa2, ratio))
        return float(-0.5 * quad / A - 0.5 * (m * np.log(A) + logdet_S) - 0.5 * m * _LOG_2PI)

    def posterior_mean(self, kappa2: float, ratio: float) -> np.ndarray:
        """``μ`` at every node (no factor of ``K``); leaves ``Q̃`` factored."""
        return self._factor_posterior(*self._checked(kappa2, ratio))[0]

    def unit_posterior_columns(self, kappa2: float, ratio: float, nodes) -> np.ndarray:
        """``Q̃⁻¹[:, nodes]``: the posterior covariances with ``nodes`` at unit amplitude."""
        kappa2, ratio = self._checked(kappa2, ratio)
        nodes = np.asarray(nodes, dtype=np.int64).ravel()
        B = np.zeros((self.n, nodes.size))
        B[nodes, np.arange(nodes.size)] = 1.0
        return self._posterior_factor(kappa2, ratio).solve(B)

    def unit_posterior_variances(self, kappa2: float, ratio: float, rows: np.ndarray,
                                 exact_rows: int, n_samples: int = 64,
                                 random_state=0) -> np.ndarray:
        """``diag(Q̃⁻¹)`` at ``rows`` (unit amplitude): exact for at most ``exact_rows``
        rows, else :func:`rbmc_variances`. IndexError for rows outside the graph."""
        kappa2, ratio = self._checked(kappa2, ratio)
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"rows must be node indices in [0, {self.n}); got "
                             f"{rows.min()}..{rows.max()}.")
        chol = self._posterior_factor(kappa2, ratio)
        if rows.size <= exact_rows:
            return diagonal_of_inverse(chol.solve, self.n, rows)
        Qt = self.posterior_precision(kappa2, ratio)
        return rbmc_variances(Qt, chol, n_samples, random_state)[0][rows]

    def unit_variances_rbmc(self, kappa2: float, ratio: float, n_samples: int = 64,
                            random_state=0):
        """``(diag(Q̃⁻¹), standard errors, standard error of their sum over the observed
        nodes)`` at ``(κ², r)`` by :func:`rbmc_variances` (unit amplitude)."""
        kappa2, ratio = self._checked(kappa2, ratio)
        return rbmc_variances(self.posterior_precision(kappa2, ratio),
                              self._posterior_factor(kappa2, ratio), n_samples, random_state,
                              sum_rows=self.observed)

    def variances(self, fit: MaternFit, n_samples: int = 64, random_state=0):
        """``(variance, standard error)`` of ``f`` at every node (``(n, maps)`` for several
        maps), the RBMC estimate of ``A diag(Q̃⁻¹)``; sets ``observed_sum`` and
        ``observed_sum_se`` (:meth:`unit_variances`) for :func:`cross_validated_amplitude`."""
        var, se, self.observed_sum, self.observed_sum_se = self.unit_variances(
            fit.kappa2, fit.ratio, n_samples, random_state)
        if np.ndim(fit.amplitude):                      # several maps: (n, maps)
            return np.multiply.outer(var, fit.amplitude), np.multiply.outer(se, fit.amplitude)
        return fit.amplitude * var, fit.amplitude * se

    def unit_variances(self, kappa2: float, ratio: float, n_samples: int = 64,
                       random_state=0):
        """``(diag(Q̃⁻¹), standard errors, Σ over the observed nodes, its standard error)``;
        the sum exact (:meth:`observed_variance_sum`) where the Monte Carlo error exceeds
        ``GCV_PRECISION`` of ``m r - Σ v_i``."""
        var, se, sum_se = self.unit_variances_rbmc(kappa2, ratio, n_samples, random_state)
        total = float(var[self.observed].sum())
        if not (self.m * ratio - total) * GCV_PRECISION > sum_se:
            total, sum_se = self.observed_variance_sum(kappa2, ratio), 0.0
        return var, se, total, sum_se

    def observed_variance_sum(self, kappa2: float, ratio: float) -> float:
        """``Σ_i (Q̃⁻¹)_ii`` over the observed nodes from ``m r - Σ_i (Q̃⁻¹)_ii =
        r d log|S| / d log r``, a central difference of ``log|Q̃|`` in ``log r``."""
        kappa2, ratio = self._checked(kappa2, ratio)
        h = GCV_LOG_STEP
        logdets = [self._factors.posterior_factor(kappa2, self.observed, 1.0 / (ratio * f),
                                                  (kappa2, ratio * f)).logdet()
                   for f in (np.exp(h), np.exp(-h))]
        slope = self.m + (logdets[0] - logdets[1]) / (2.0 * h)       # d log|S| / d log r
        return self.m * ratio - ratio * slope


# relative precision of m r - Σ v_i below which the observed variance sum is computed exactly
GCV_PRECISION = 0.01
# observed_variance_sum's step in log r (truncation ~ step², rounding ~ 1e-10 / step)
GCV_LOG_STEP = 1e-3


def checked_ratio(ratio) -> float:
    """``ratio`` as a float; ValueError unless finite and > 0."""
    ratio = float(ratio)
    if not (np.isfinite(ratio) and ratio > 0):
        raise ValueError(f"ratio (the noise-to-signal ratio r) must be a finite number > 0; "
                         f"got {ratio!r}.")
    return ratio


def cross_validated_amplitude(z, mean_observed, ratio, variance_sum, sum_se=0.0):
    """The amplitude by generalised cross-validation (Craven and Wahba 1979),
    ``Σ (z_i - μ_i)² / (m r - Σ v_i)``, ``μ = mean_observed``, ``Σ v_i = variance_sum`` (unit
    amplitude, standard error ``sum_se``); None unless the denominator exceeds 0 and
    ``10 sum_se`` (docs/images.md, "Intervals"). ValueError unless ``z`` and
    ``mean_observed`` are 1-d of one shape."""
    z = np.asarray(z, dtype=np.float64)
    mean_observed = np.asarray(mean_observed, dtype=np.float64)
    if z.ndim != 1 or mean_observed.shape != z.shape:
        raise ValueError(f"z and mean_observed must be 1-d, one entry per observed node; got "
                         f"shapes {z.shape} and {mean_observed.shape}.")
    if np.ndim(variance_sum) != 0:
        raise ValueError(f"variance_sum must be one number, the sum of the observed nodes' "
                         f"unit-amplitude variances; got shape {np.shape(variance_sum)}.")
    variance_sum = float(variance_sum)
    resid = z - mean_observed
    denominator = z.size * checked_ratio(ratio) - variance_sum
    if not (np.isfinite(denominator) and denominator > 10.0 * float(sum_se)
            and denominator > 0):
        return None
    return float(np.sum(resid * resid)) / denominator


def entries_of_inverse(apply_inverse, n: int, rows, cols, keep_columns: bool = False):
    """``X[rows_i, cols_i]`` for ``X`` given by ``apply_inverse(B) = X B``; with
    ``keep_columns``, also ``(distinct cols, X[:, distinct cols])`` (in first-seen order)."""
    rows = np.asarray(rows, dtype=np.int64).ravel()
    cols = np.asarray(cols, dtype=np.int64).ravel()
    distinct, first, col_of = np.unique(cols, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    distinct, col_of = distinct[order], np.argsort(order)[col_of.ravel()]
    by_col = np.argsort(col_of, kind="stable")
    out = np.empty(rows.size)
    kept = np.empty((n, distinct.size)) if keep_columns else None
    for s in range(0, distinct.size, SOLVE_BLOCK):
        block = distinct[s:s + SOLVE_BLOCK]
        E = np.zeros((n, block.size))
        E[block, np.arange(block.size)] = 1.0
        Z = apply_inverse(E)
        lo, hi = np.searchsorted(col_of[by_col], [s, s + block.size])
        sel = by_col[lo:hi]
        out[sel] = Z[rows[sel], col_of[sel] - s]
        if kept is not None:
            kept[:, s:s + block.size] = Z
    return (out, (distinct, kept)) if keep_columns else out


def diagonal_of_inverse(apply_inverse, n: int, rows: np.ndarray) -> np.ndarray:
    """``diag(X)`` at ``rows`` (:func:`entries_of_inverse`)."""
    return entries_of_inverse(apply_inverse, n, rows, rows)


def rbmc_variances(Q: sp.spmatrix, chol: PatternCholesky, n_samples: int = 64,
                   random_state=0, sum_rows=None):
    """:func:`rao_blackwell_variances` from ``n_samples`` draws by ``chol``, ``Q``'s factor."""
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be a whole number >= 2 (the estimate's standard "
                         f"error needs two draws); got {n_samples!r}.")
    rng = np.random.default_rng(random_state)
    return rao_blackwell_variances(Q, chol.sample(int(n_samples), rng), sum_rows)


def rao_blackwell_variances(Q: sp.spmatrix, X: np.ndarray, sum_rows=None):
    """``(diag(Q⁻¹), standard errors)`` by Rao-Blackwellised Monte Carlo (Sidén et al.
    2018, Sec. 3.1) from draws ``x_s ~ N(0, Q⁻¹)`` (columns of ``X``):
    ``v_i = 1/Q_ii + mean_s (Σ_{j≠i} Q_ij x_sj)² / Q_ii²``. With ``sum_rows``, also the
    standard error of ``Σ v_i`` over those rows."""
    Q = sp.csr_matrix(Q)
    d = Q.diagonal()
    off = Q - sp.diags(d)
    Y = off @ X                                     # (n, k): Σ_{j≠i} Q_ij x_j per draw
    Y *= Y
    terms = Y / (d * d)[:, None]
    var = 1.0 / d + terms.mean(axis=1)
    se = terms.std(axis=1, ddof=1) / np.sqrt(terms.shape[1])
    if sum_rows is None:
        return var, se
    per_draw = terms[np.asarray(sum_rows, dtype=np.int64)].sum(axis=0)
    return var, se, float(per_draw.std(ddof=1) / np.sqrt(per_draw.size))


__all__ += ["NotPositiveDefiniteError"]


# -- hyperparameters by the evidence ----------------------------------------------------------

# the range of the noise-to-signal ratio r̃ (κ²'s: matern_search_ranges)
RATIO_RANGE = (1e-6, 1e2)
# the noise-to-signal ratios of the first order's starting grid
START_RATIOS = (1e-5, 1e-3, 1e-1)


def matern_search_ranges(graph) -> dict:
    """Log ranges searched: ``κ²`` from ``(1/(100 d))²`` to ``(1/h)²`` (``d``: widest extent,
    ``h``: spacing) from ``(1/(10 h))²``; ``r̃`` over ``RATIO_RANGE`` from 1e-2."""
    extent = float(np.max(np.ptp(graph.points, axis=0))) or graph.spacing
    h = graph.spacing
    lo, hi = (1.0 / (100.0 * extent)) ** 2, (1.0 / h) ** 2
    return dict(log_kappa2=(np.log(lo), np.log(hi)),
                log_kappa2_start=float(np.clip(np.log((1.0 / (10.0 * h)) ** 2),
                                               np.log(lo), np.log(hi))),
                log_ratio=tuple(np.log(RATIO_RANGE)), log_ratio_start=np.log(1e-2))


# line searches stop at a bracket LINE_TOLERANCE wide (log units), LINE_VALUE_TOLERANCE nats
# or LINE_MAX_EVALUATIONS evaluations
LINE_TOLERANCE = 0.2
LINE_VALUE_TOLERANCE = 0.1
# the coarse pass over every order; those within REFINE_MARGIN nats of the best get the fine
COARSE_TOLERANCE = 0.7
COARSE_VALUE_TOLERANCE = 1.0
COARSE_MAX_EVALUATIONS = 6
REFINE_MARGIN = 2.0
# an order this many nats below the best gets no second coarse sweep (nor, after a ball
# search, a whole-graph evaluation)
FAR_MARGIN = 100.0
LINE_MAX_EVALUATIONS = 8
_GOLDEN = 0.3819660112501051


def on_lattice(x: float, lo: float, hi: float, step: float) -> float:
    """The multiple of ``step`` in ``[lo, hi]`` nearest to ``x``, or a nearer bound."""
    x = min(max(float(x), lo), hi)
    i = np.floor(x / step)
    inside = [t for t in (i * step, (i + 1) * step) if lo <= t <= hi]
    return float(min(inside + [lo, hi], key=lambda t: abs(t - x)))


def _line_search(fun, x0: float, step: float, lo: float, hi: float,
                 tol: float = LINE_TOLERANCE, max_evals: int = LINE_MAX_EVALUATIONS,
                 value_tol: float = LINE_VALUE_TOLERANCE, lattice=None):
    """Generator minimising ``fun`` (itself a generator) on ``[lo, hi]`` from ``x0``: steps of
    ``step`` downhill until bracketed, then :func:`_refine` (Brent's safeguarded parabolas) to
    ``tol``, ``value_tol`` or ``max_evals``. ``inf``: unfactorable. Returns the best ``x``."""
    seen = {}

    def clip(x):
        return (float(np.clip(x, lo, hi)) if lattice is None
                else on_lattice(x, lo, hi, lattice))

    def f(x):
        x = clip(x)
        if x not in seen:
            seen[x] = yield from fun(x)
        return seen[x]

    def best():
        return min(seen, key=seen.get)

    a = clip(x0)
    fa = yield from f(a)
    for direction in (step, -step):
        b = clip(a + direction)
        if b != a and (yield from f(b)) < fa:
            break
    else:                                   # neither neighbour is lower: bracketed
        if not np.isfinite(fa):
            return best()
        return (yield from _refine(f, clip(a - step), a, clip(a + step), tol, value_tol,
                                   max_evals - len(seen), seen, clip if lattice else None,
                                   lattice))
    prev, cur = a, b
    while len(seen) < max_evals:
        nxt = clip(cur + direction)
        if nxt == cur:                      # downhill to a bound
            return cur
        f_next = yield from f(nxt)
        if f_next >= (yield from f(cur)):
            left, right = min(prev, nxt), max(prev, nxt)
            return (yield from _refine(f, left, cur, right, tol, value_tol,
                                       max_evals - len(seen), seen,
                                       clip if lattice else None, lattice))
        prev, cur = cur, nxt
    return best()


def _refine(f, a: float, b: float, c: float, tol: float, value_tol: float, budget: int,
            seen: dict, snap=None, lattice=None):
    """Shrink the bracket ``a <= b <= c`` (``f(b)`` lowest) within ``budget`` evaluations."""
    width = c - a
    for k in range(max(int(budget), 0)):
        fa = yield from f(a)
        fb = yield from f(b)
        fc = yield from f(c)
        ends = [fx for x, fx in ((a, fa), (c, fc)) if x != b]     # b may sit on a bound
        if c - a <= tol or not ends or min(ends) - fb < value_tol:
            break
        x = np.nan
        den = (b - a) * (fb - fc) - (b - c) * (fb - fa)
        if np.isfinite(den) and den != 0.0:
            x = b - 0.5 * ((b - a) ** 2 * (fb - fc) - (b - c) ** 2 * (fb - fa)) / den
        shrunk = (c - a) <= 0.5 * width or k < 2
        if (not np.isfinite(x) or not (a + 0.25 * tol < x < c - 0.25 * tol)
                or abs(x - b) < 0.25 * tol or not shrunk):
            x = b + _GOLDEN * (c - b) if c - b > b - a else b - _GOLDEN * (b - a)
            width = c - a
        if snap is not None:
            x = snap(x)
            if x in seen or not a < x < c:
                # b's nearest unseen lattice neighbour, wider side first; none: a minimum
                sides = (b + lattice, b - lattice) if c - b > b - a \
                    else (b - lattice, b + lattice)
                fresh = [t for t in map(snap, sides) if a < t < c and t not in seen]
                if not fresh:
                    break
                x = fresh[0]
        fx = yield from f(x)
        if fx < fb:
            a, c = (b, c) if x > b else (a, b)
            b = x
        elif x > b:
            c = x
        else:
            a = x
    return min(seen, key=seen.get)


# graphs above twice this many nodes are searched on a ball of this many (8,000: within
# 0.3 nats of 16,000 in half the time; docs/full_resolution.md)
SEARCH_MAX_NODES = 8_000
# graphs above this many nodes go by conjugate gradients (docs/full_resolution.md)
FACTOR_MAX_NODES = 100_000
# fit_memory_gb's rule of thumb (docs/images.md, "Memory, before the fit")
FACTORED_GB, FACTORED_NODES, FACTORED_POWER = 1.8, 45_448, 2.2
ITERATIVE_BASE_GB, ITERATIVE_GB_PER_NODE = 0.47, 2.3e-6
# factor only while the expected peak is within this share of the memory, else CG
FACTOR_MEMORY_SHARE = 0.5


def fit_memory_gb(n_nodes: int, factored: bool) -> float:
    """Expected peak memory (GB) of :func:`fit_matern` on a 3-d lattice: a rule of thumb."""
    n = float(n_nodes)
    if factored:
        return FACTORED_GB * (n / FACTORED_NODES) ** FACTORED_POWER
    return ITERATIVE_BASE_GB + ITERATIVE_GB_PER_NODE * n


def factors(n_nodes: int) -> bool:
    """Whether :func:`fit_matern` factors ``n_nodes`` nodes: up to ``FACTOR_MAX_NODES`` while
    :func:`fit_memory_gb` is within ``FACTOR_MEMORY_SHARE`` of the machine's memory."""
    return (n_nodes <= FACTOR_MAX_NODES and fit_memory_gb(n_nodes, True)
            <= FACTOR_MEMORY_SHARE * physical_memory() / 2 ** 30)


def search_subgraph(graph, observed, z, size: int = SEARCH_MAX_NODES):
    """``(subgraph, observed, z)`` on the ``size`` nodes nearest the most central observed
    node (within its piece), where a large graph's hyperparameters are searched."""
    from scipy.spatial import cKDTree

    P = graph.points
    centre = observed[np.argmin(((P[observed] - P[observed].mean(0)) ** 2).sum(1))]
    _, ball = cKDTree(P).query(P[centre], k=int(size))
    ball = np.sort(np.asarray(ball, dtype=np.int64))
    sub = graph.subgraph(ball)
    n_comp, labels = sub.pieces()
    if n_comp > 1:
        keep = labels == labels[np.searchsorted(ball, centre)]
        ball = ball[keep]
        sub = graph.subgraph(ball)
    where = np.searchsorted(ball, observed)
    inside = (where < ball.size) & (ball[np.minimum(where, ball.size - 1)] == observed)
    return sub, where[inside], z[inside]


def fit_matern(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
             noise=None, start=None, verbose=False,
             search_max_nodes: int = SEARCH_MAX_NODES):
    """The graph Matérn prior of highest evidence for ``z`` at ``observed``: by default the
    order among ``nus`` and ``(κ², r̃)`` searched, ``A`` profiled (docs/full_resolution.md).
    Returns ``(best MaternFit, its MaternRegression, {nu: MaternFit})``.

    The search runs on the graph in its own units (:meth:`flgp.graph.PointGraph.in_own_units`),
    as do the fits and the regression. A fixed ``kappa2`` is in ``graph``'s units, ``start =
    (κ², r̃)`` in its own, a fixed ``ratio`` is ``r̃``; ``noise`` (> 0, units of ``z``, else
    ValueError) fixes ``A r``. Graphs of up to ``2 * search_max_nodes`` nodes are searched
    whole; larger ones on a ball (:func:`search_subgraph`), the orders within ``FAR_MARGIN``
    nats then compared on the whole graph; past :func:`factors`, by conjugate gradients."""
    return exhaust(fit_matern_steps(graph, observed, z, nus, kappa2=kappa2, ratio=ratio,
                                  noise=noise, start=start, verbose=verbose,
                                  search_max_nodes=search_max_nodes))


def fit_matern_steps(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
                   noise=None, start=None, verbose=False,
                   search_max_nodes: int = SEARCH_MAX_NODES, screen: bool = False):
    """:func:`fit_matern` as a generator; ``screen=True``: a whole-graph search also yields
    :class:`Screen` objects (docs/models.md, "Screening")."""
    observed = np.asarray(observed, dtype=np.int64)
    z = np.asarray(z, dtype=np.float64)
    done = _PRECOMPUTED.get()
    hit = None if done is None or kappa2 is not None or ratio is not None \
        or noise is not None or start is not None \
        else done.get(precomputed_key(graph, observed, z, nus))
    length, mass = graph.own_units()
    graph = graph.in_units(length, mass)
    if kappa2 is not None:
        kappa2 = float(kappa2) * length * length
    if noise is not None:
        noise = float(noise)
        if not (np.isfinite(noise) and noise > 0):
            raise ValueError(f"noise must be a finite variance > 0; got {noise!r}.")
    if hit is not None:
        best, reg, by_order = hit
    else:
        best, reg, by_order = yield from _fit_own_units(
            graph, observed, z, nus, kappa2, ratio, noise, start, verbose, search_max_nodes,
            screen)
    for fit in (best, *by_order.values()):
        fit.length_unit, fit.mass_unit = length, mass
    return best, reg, by_order


# fits made elsewhere (flgp.precision.maps) that fit_matern returns, by precomputed_key
_PRECOMPUTED = contextvars.ContextVar("flgp_precomputed_matern_fits", default=None)


def precomputed_key(graph, observed, z, nus) -> tuple:
    """Key of a precomputed fit: the graph (its weights and masses), the observed nodes,
    the targets, the orders."""
    G = sp.csr_matrix(graph.stiffness)
    return (array_fingerprint(G.indptr), array_fingerprint(G.indices),
            array_fingerprint(G.data), array_fingerprint(np.asarray(graph.mass)),
            array_fingerprint(np.asarray(observed, dtype=np.int64)),
            array_fingerprint(np.asarray(z, dtype=np.float64)), tuple(int(n) for n in nus))


@contextmanager
def precomputed_fits(fits: dict):
    """Within the block, :func:`fit_matern` with the default search returns the fit in
    ``fits`` (``{precomputed_key: fit_matern's result}``, own units) instead of searching."""
    token = _PRECOMPUTED.set(dict(fits))
    try:
        yield
    finally:
        _PRECOMPUTED.reset(token)


def _fit_own_units(graph, observed, z, nus, kappa2, ratio, noise, start, verbose,
                   search_max_nodes, screen=False):
    """:func:`fit_matern_steps` on a graph in its own units (a generator)."""
    search = dict(kappa2=kappa2, ratio=ratio, noise=noise, start=start, verbose=verbose)
    if not factors(graph.n_nodes):
        return _fit_iterative(graph, observed, z, nus, search, search_max_nodes)
    if graph.n_nodes <= 2 * search_max_nodes:
        return (yield from search_matern_steps(graph, observed, z, nus, screen=screen,
                                             polish=True, **search))
    sub, sub_obs, sub_z = search_subgraph(graph, observed, z, search_max_nodes)
    if sub_obs.size < 2:
        return search_matern(graph, observed, z, nus, **search)
    _, _, local = search_matern(sub, sub_obs, sub_z, nus, **search)
    # ascending ball evidence, holding at most two factors: the best so far and the current
    results, best_reg = {}, None
    top = max(f.log_evidence for f in local.values())
    contenders = [nu for nu in local if local[nu].log_evidence >= top - FAR_MARGIN]
    for nu in sorted(contenders, key=lambda j: local[j].log_evidence):
        reg = MaternRegression(graph, observed, z, nu)
        try:
            results[nu] = reg.evaluate(local[nu].kappa2, local[nu].ratio, noise)
        except NotPositiveDefiniteError:
            continue
        if best_reg is None or results[nu].log_evidence > results[best_reg[0]].log_evidence:
            best_reg = (nu, reg)
        del reg
        if verbose:
            print(f"[graph Matérn] nu={nu} on the whole graph ({graph.n_nodes} nodes): log "
                  f"evidence={results[nu].log_evidence:.2f}")
    if not results:
        raise NotPositiveDefiniteError("no graph Matérn prior could be factored on this "
                                       "graph at the searched hyperparameters.")
    nu, reg = best_reg
    return results[nu], reg, results


def start_grid(graph, nu: int, log_top: float | None = None) -> list:
    """The points ``(log κ², log r̃)`` the default search evaluates first for its first order:
    ranges of 100 to 0.1 times ten spacings by ``START_RATIOS`` (``log_top``: ``log λ_max``)."""
    ranges = matern_search_ranges(graph)
    if log_top is None:
        log_top = np.log(max(largest_eigenvalue(graph), 1e-300))
    lo = _lowest_log_kappa2(nu, ranges, log_top)
    hi = ranges["log_kappa2"][1]
    u = float(np.clip(ranges["log_kappa2_start"], lo, hi))
    us = sorted({float(np.clip(u + j * np.log(100.0), lo, hi)) for j in (-1, 0, 1)})
    return [(uu, float(vv)) for uu in us for vv in np.log(START_RATIOS)]


def _lowest_log_kappa2(nu, ranges, log_top) -> float:
    """The smallest ``log κ²`` searched for order ``nu`` (``cond(Q_ν) <= MAX_CONDITION``)."""
    return max(ranges["log_kappa2"][0], log_top - np.log(MAX_CONDITION) / nu)


def search_matern(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
                noise=None, start=None, verbose=False, lattice=None):
    """The graph Matérn prior of highest evidence for ``z`` at ``observed``, on ``graph`` as
    given, in ``log κ²`` and ``log r̃``, ``r = r̃ v̄(κ)`` (:meth:`MaternRegression.prior_variance`;
    docs/full_resolution.md); the steps are :func:`search_steps`'. A fixed ``kappa2`` or
    ``ratio`` (``r̃``) is not searched; ``start = (κ², r̃)`` replaces the start grid; ``noise``
    fixes ``A r``; ``lattice``: evaluate only at multiples of this step. Returns ``(best
    MaternFit, its MaternRegression, {nu: MaternFit})``, the fits' ``ratio`` the raw ``r``;
    NotPositiveDefiniteError where nothing could be factored."""
    return exhaust(search_matern_steps(graph, observed, z, nus, kappa2=kappa2, ratio=ratio,
                                     noise=noise, start=start, verbose=verbose,
                                     lattice=lattice))


def search_matern_steps(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
                      noise=None, start=None, verbose=False, lattice=None,
                      screen: bool = False, polish: bool = False):
    """:func:`search_matern` as a generator (``screen=True``: passing on :class:`Screen`
    objects). ``polish=True``: the orders within ``POLISH_MARGIN`` nats of the best are
    finished by :func:`polish_order` (line searches stop short on a diagonal ridge)."""
    regs = {}

    def evaluate(nu, u, v):
        if nu not in regs:
            regs[nu] = MaternRegression(graph, observed, z, nu)
        reg = regs[nu]
        try:
            k2 = float(np.exp(u))
            return reg.evaluate(k2, float(np.exp(v)) * reg.prior_variance(k2), noise)
        except NotPositiveDefiniteError:
            return None

    results, searches = yield from driven(
        search_steps(graph, nus, kappa2=kappa2, ratio=ratio, start=start, lattice=lattice,
                     screen=screen), evaluate)
    if polish and kappa2 is None and ratio is None:
        top = max(f.log_evidence for f in results.values())
        for nu in [j for j in results if results[j].log_evidence >= top - POLISH_MARGIN]:
            search = searches[nu]

            def known(nu, u, v, search=search):
                # reuse the line searches' evaluations
                key = search._key(u, v)[0]
                return search.cache[key] if key in search.cache else evaluate(nu, u, v)

            fit, _ = polish_order(graph, nu, search.best_point(), known)
            if fit is not None and fit.log_evidence > results[nu].log_evidence:
                results[nu] = fit
    if verbose:
        for nu, fit in results.items():
            print(f"[graph Matérn] nu={nu}: kappa2={fit.kappa2:.4g} noise-to-signal="
                  f"{fit.ratio / regs[nu].prior_variance(fit.kappa2):.4g} log evidence="
                  f"{fit.log_evidence:.2f} ({regs[nu].n_evaluations} evaluations)")
    nu = max(results, key=lambda j: results[j].log_evidence)
    return results[nu], regs[nu], results


class Screen:
    """Yielded by a search (``screen=True``) after its coarse first stage: ``log_evidence``,
    the best so far (-inf: nothing factorable); ``tighten``, if given, evaluates a few more
    points and returns a better value; ``loose``: too coarse to judge before tightening."""

    def __init__(self, log_evidence: float, tighten=None, loose: bool = False):
        self.log_evidence = float(log_evidence)
        self.tighten = tighten
        self.loose = bool(loose)


def exhaust(steps):
    """Run the generator ``steps`` to its end, sending None; return its result."""
    try:
        next(steps)
        while True:
            steps.send(None)
    except StopIteration as stop:
        return stop.value


def drive(steps, evaluate):
    """Run :func:`search_steps`, answering each point with ``evaluate(ν, log κ², log r̃)``
    (a fit, or None); return its result."""
    return exhaust(driven(steps, evaluate))


def driven(steps, evaluate):
    """:func:`drive` as a generator passing on :class:`Screen` objects."""
    try:
        ask = next(steps)
        while True:
            if isinstance(ask, Screen):
                yield ask
                ask = steps.send(None)
            else:
                ask = steps.send(evaluate(*ask))
    except StopIteration as stop:
        return stop.value


def search_steps(graph, nus=MATERN_ORDERS, *, kappa2=None, ratio=None, start=None,
                 lattice=None, screen: bool = False):
    """:func:`search_matern`'s search as a generator: yields each ``(ν, log κ², log r̃)`` it
    needs, receives its :class:`MaternFit` (None: not factorable), returns
    ``({ν: best MaternFit}, {ν: _OrderSearch})``; run by :func:`drive` or
    :func:`flgp.precision.maps.lockstep`. ``graph`` sets the ranges only. ``screen=True``:
    also yields a :class:`Screen` after the first order's start grid and coarse search."""
    if lattice is not None and not (np.isfinite(lattice) and lattice > 0):
        raise ValueError(f"lattice must be a finite step > 0 (in log κ² and log r̃) or "
                         f"None; got {lattice!r}.")
    ranges = matern_search_ranges(graph)
    lk_lo, lk_hi = ranges["log_kappa2"]
    lr_lo, lr_hi = ranges["log_ratio"]
    u0, v0 = (ranges["log_kappa2_start"], ranges["log_ratio_start"]) if start is None \
        else (np.log(start[0]), np.log(start[1]))
    if kappa2 is not None:
        u0 = np.log(kappa2)
    if ratio is not None:
        v0 = np.log(ratio)
    log_top = np.log(max(largest_eigenvalue(graph), 1e-300))

    def sweep(search, point, directions, step, tol, value_tol, lo_nu, max_evals):
        """Line searches along ``directions`` from ``point``."""
        u, v = point
        for direction in directions:
            if direction == "ratio" and ratio is None:
                v = yield from _line_search(lambda x: search.ask(u, x), v, step, lr_lo,
                                            lr_hi, tol, max_evals, value_tol, lattice)
            elif direction == "kappa" and kappa2 is None:
                u = yield from _line_search(lambda x: search.ask(x, v), u, step, lo_nu,
                                            lk_hi, tol, max_evals, value_tol, lattice)

    results, searches, lows, too_small = {}, {}, {}, []
    # phase 1: each order coarsely, from the best point so far
    for k, nu in enumerate(nus):
        if _beyond_the_peak(nu, results):
            continue
        lows[nu] = lo_nu = _lowest_log_kappa2(nu, ranges, log_top)
        if kappa2 is not None and np.log(kappa2) < lo_nu:
            too_small.append(nu)            # a fixed κ² this order cannot evaluate
            continue
        search = _OrderSearch(nu, lattice, ((lo_nu, lk_hi), (lr_lo, lr_hi)))
        u = float(np.log(kappa2)) if kappa2 is not None else float(np.clip(u0, lo_nu, lk_hi))
        v = v0
        if k == 0 and start is None:
            # start from a coarse grid's best: one start can end on the wrong of two ridges
            if kappa2 is None and ratio is None:
                grid = start_grid(graph, nu, log_top)
            else:
                us = [u] if kappa2 is not None else sorted({
                    float(np.clip(u + j * np.log(100.0), lo_nu, lk_hi)) for j in (-1, 0, 1)})
                vs = [v] if ratio is not None else list(np.log(START_RATIOS))
                grid = [(uu, vv) for uu in us for vv in vs]
            for uu, vv in grid:
                yield from search.ask(uu, vv)
            if screen:
                yield Screen(-np.inf if search.best() is None
                             else search.best().log_evidence)
            if search.best() is not None:
                u, v = search.best_point()
        # r̃ first for the first order, κ first for the others (its optimum moves ~4x)
        directions = ("ratio", "kappa") if k == 0 else ("kappa", "ratio")
        top = max((f.log_evidence for f in results.values()), default=-np.inf)
        for _ in range(2):
            before = search.best()
            yield from sweep(search, (u, v), directions, np.log(10.0), COARSE_TOLERANCE,
                             COARSE_VALUE_TOLERANCE, lo_nu, COARSE_MAX_EVALUATIONS)
            now = search.best()
            if now is None or (before is not None and now.log_evidence
                               - before.log_evidence < 1.0) \
                    or now.log_evidence < top - FAR_MARGIN:
                break
            u, v = search.best_point()
        best = search.best()
        if screen and k == 0:
            yield Screen(-np.inf if best is None else best.log_evidence)
        if best is None:
            continue
        results[nu], searches[nu] = best, search
        top_nu = max(results, key=lambda j: results[j].log_evidence)
        u0, v0 = searches[top_nu].best_point()
    if not results and too_small:
        factor = np.exp(min(lows[nu] for nu in too_small)) / kappa2
        raise ValueError(f"kappa2 is below the smallest at which the evidence of order(s) "
                         f"{too_small} is accurate on this graph (cond(Q_ν) <= "
                         f"{MAX_CONDITION:.0e}): give a kappa2 at least {factor:.3g} times "
                         f"larger (a shorter correlation range) or a lower order.")
    if not results:
        raise NotPositiveDefiniteError("no graph Matérn prior could be factored on this "
                                       "graph for any searched hyperparameter.")
    # phase 2: the orders within REFINE_MARGIN of the best, finely
    top = max(f.log_evidence for f in results.values())
    for nu in [j for j in results if results[j].log_evidence >= top - REFINE_MARGIN]:
        search = searches[nu]
        for _ in range(2):
            before = search.best().log_evidence
            yield from sweep(search, search.best_point(), ("kappa", "ratio"), np.log(3.0),
                             LINE_TOLERANCE, LINE_VALUE_TOLERANCE, lows[nu],
                             LINE_MAX_EVALUATIONS)
            if search.best().log_evidence - before < 0.5:
                break
        results[nu] = search.best()
    return results, searches


# polish_order: first simplex of sides POLISH_STEP; stop at POLISH_TOLERANCE wide and
# POLISH_VALUE_TOLERANCE nats, or POLISH_MAX_EVALUATIONS
POLISH_STEP = 0.5
POLISH_TOLERANCE = 0.05
POLISH_VALUE_TOLERANCE = 0.05
POLISH_MAX_EVALUATIONS = 200
# search_matern_steps(polish=True) polishes the orders within this many nats of the best
POLISH_MARGIN = 10.0


def polish_order(graph, nu, start, evaluate, max_evaluations=POLISH_MAX_EVALUATIONS):
    """``(best fit or None, evaluations)``: Nelder-Mead in ``(log κ², log r̃)`` from
    ``start`` within the search's ranges, by ``evaluate(ν, log κ², log r̃)`` (None:
    unfactorable). ValueError for a bad ``start`` or budget."""
    from scipy.optimize import minimize

    start = np.asarray(start, dtype=np.float64)
    if start.shape != (2,) or not np.all(np.isfinite(start)):
        raise ValueError(f"start must be a finite point (log κ², log r̃); got {start!r}.")
    if isinstance(max_evaluations, bool) or int(max_evaluations) != max_evaluations \
            or max_evaluations < 1:
        raise ValueError(f"max_evaluations must be a whole number >= 1; got "
                         f"{max_evaluations!r}.")
    ranges = matern_search_ranges(graph)
    log_top = np.log(max(largest_eigenvalue(graph), 1e-300))
    bounds = [(_lowest_log_kappa2(nu, ranges, log_top), ranges["log_kappa2"][1]),
              ranges["log_ratio"]]
    fits = []

    def objective(x):
        fit = evaluate(nu, float(x[0]), float(x[1]))
        if fit is None:
            return np.inf
        fits.append(fit)
        return -fit.log_evidence

    lower, upper = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    start = np.clip(start, lower, upper)
    # step inwards from an upper bound (a simplex clipped flat there would not move off it)
    steps = np.where(start + POLISH_STEP <= upper, POLISH_STEP, -POLISH_STEP)
    simplex = np.clip(np.array([start, start + [steps[0], 0.0], start + [0.0, steps[1]]]),
                      lower, upper)
    minimize(objective, start, method="Nelder-Mead", bounds=bounds,
             options=dict(initial_simplex=simplex, xatol=POLISH_TOLERANCE,
                          fatol=POLISH_VALUE_TOLERANCE, maxfev=int(max_evaluations)))
    return max(fits, key=lambda f: f.log_evidence, default=None), len(fits)


def _beyond_the_peak(nu, results) -> bool:
    """Whether the evidence falls towards ``nu`` (a searched order between ``nu`` and another
    lies a nat below it); such orders are skipped (docs/full_resolution.md)."""
    for a in results:
        for b in results:
            if (nu < a < b or b < a < nu) and \
                    results[a].log_evidence < results[b].log_evidence - 1.0:
                return True
    return False


# largest condition number ((λ_max + κ²) / κ²)^ν of Q_ν searched: past ~1e17 log|Q̃| loses
# its digits (docs/full_resolution.md)
MAX_CONDITION = 1e15


def largest_eigenvalue(graph) -> float:
    """``λ_max`` of ``C⁻¹G`` by Lanczos to 0.1 % (Gershgorin's bound if it fails)."""
    d = 1.0 / np.sqrt(graph.mass)
    S = (sp.diags(d) @ sp.csr_matrix(graph.stiffness) @ sp.diags(d)).tocsr()
    if graph.n_nodes < 64:
        return float(np.linalg.eigvalsh(S.toarray())[-1])
    try:
        from scipy.sparse.linalg import eigsh

        return float(eigsh(S, k=1, which="LA", tol=1e-3, return_eigenvectors=False)[0])
    except Exception:       # ARPACK's non-convergence: the bound is safe, only looser
        G = sp.csr_matrix(graph.stiffness)
        return float(np.max((np.asarray(abs(G).sum(axis=1)).ravel() + G.diagonal())
                            / graph.mass))


class _OrderSearch:
    """One order's cached ``-log evidence`` at ``(log κ², log r̃)``: :meth:`ask` yields
    ``(ν, log κ², log r̃)`` for a new point and takes its fit (None: infinitely bad)."""

    def __init__(self, nu: int, lattice=None, bounds=None):
        self.nu, self.lattice, self.bounds = nu, lattice, bounds
        self.cache, self.points = {}, {}
        self.n_evaluations = 0

    def _key(self, u, v):
        if self.lattice:
            (u_lo, u_hi), (v_lo, v_hi) = self.bounds
            u = on_lattice(u, u_lo, u_hi, self.lattice)
            v = on_lattice(v, v_lo, v_hi, self.lattice)
        return (round(float(u), 9), round(float(v), 9)), (float(u), float(v))

    def ask(self, u, v):
        key, (u, v) = self._key(u, v)
        if key not in self.cache:
            self.n_evaluations += 1
            fit = yield (self.nu, u, v)
            self.cache[key] = fit
            if fit is not None:
                self.points[key] = (u, v)
        fit = self.cache[key]
        return np.inf if fit is None else -fit.log_evidence

    def best(self):
        fits = [f for f in self.cache.values() if f is not None]
        return max(fits, key=lambda f: f.log_evidence) if fits else None

    def best_point(self):
        """``(log κ², log r̃)`` of :meth:`best`."""
        keys = [k for k, f in self.cache.items() if f is not None]
        return self.points[max(keys, key=lambda k: self.cache[k].log_evidence)]


# most perturbation draws (one CG solve each) of a fit past a factor's reach
ITERATIVE_VARIANCE_SAMPLES = 8


class _IterativeRegression:
    """The estimators' view of a fit on a graph too large to factor."""

    factored = False              # perturbation variances, no factor

    def __init__(self, solver, n_evaluations):
        self.solver = solver
        self.n_evaluations = n_evaluations
        self.observed_sum_se = None

    def variances(self, fit, n_samples=ITERATIVE_VARIANCE_SAMPLES, random_state=0):
        """``(variance, standard error)`` at every node from at most
        ``ITERATIVE_VARIANCE_SAMPLES`` perturbation draws."""
        out = self.solver.variances(min(int(n_samples), ITERATIVE_VARIANCE_SAMPLES),
                                    random_state)
        self.observed_sum_se = self.solver.observed_sum_se          # unit amplitude
        return out



def _fit_iterative(graph, observed, z, nus, search, search_max_nodes):
    """:func:`fit_matern` past :func:`factors`: hyperparameters from a ball's exact evidence,
    the posterior by :class:`flgp.precision.iterative.IterativeMaternRegression`."""
    orders = tuple(nu for nu in nus if nu in LARGE_GRAPH_ORDERS) or LARGE_GRAPH_ORDERS
    sub, sub_obs, sub_z = search_subgraph(graph, observed, z, search_max_nodes)
    if sub_obs.size < 2:
        raise ValueError(f"fewer than 2 observed nodes lie in the {sub.n_nodes}-node ball "
                         f"the hyperparameters are searched on; observe more nodes.")
    best, reg, local = search_matern(sub, sub_obs, sub_z, orders, **search)
    solver = IterativeMaternRegression(graph, observed, z, best.nu, best.kappa2, best.ratio,
                           best.amplitude)
    fit = MaternFit(nu=best.nu, kappa2=best.kappa2, ratio=best.ratio,
                  amplitude=best.amplitude, log_evidence=best.log_evidence,
                  mean=solver.mean())
    fit.evidence_nodes = sub.n_nodes
    if search["verbose"]:
        print(f"[graph Matérn] {graph.n_nodes} nodes: posterior mean by AMG-preconditioned CG "
              f"({solver.iterations[-1]} iterations); evidence of the {sub.n_nodes}-node "
              f"ball")
    return fit, _IterativeRegression(solver, reg.n_evaluations), local
