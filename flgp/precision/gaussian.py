r"""Gaussian regression under a sparse-precision prior, exactly.

Model, for standardised targets ``z`` observed at the nodes ``o`` of a graph (one target a
node): ``z = f_o + ε``, ``f ~ N(0, A Q⁻¹)``, ``ε ~ N(0, A r I)`` - the prior's amplitude
``A`` scales the noise too, so that ``r`` is the noise-to-signal ratio and ``A`` has a
closed-form maximiser (profiled out). With the posterior precision ``Q̃ = Q + Pᵀ P / r``
(``P`` selects the observed nodes):

* the posterior mean of ``f`` at every node: ``μ = Q̃⁻¹ Pᵀ z / r`` - one sparse solve;
* its covariance: ``A Q̃⁻¹``;
* the log marginal likelihood, ``S = P Q⁻¹ Pᵀ + r I`` (determinant lemma, Woodbury):
  ``log |S| = m log r + log |Q̃| - log |Q|``, ``zᵀ S⁻¹ z = zᵀz / r - bᵀ Q̃⁻¹ b`` with
  ``b = Pᵀ z / r``, ``Â = zᵀ S⁻¹ z / m`` and
  ``log p(z) = -m/2 log(2π Â) - m/2 - ½ log |S|`` -
  exact, from two sparse Cholesky factors (``K`` for ``log |Q|``, ``Q̃``).

Predictive variances ``diag(Q̃⁻¹)`` come from the Rao-Blackwellised Monte Carlo estimator
of Sidén, Lindgren, Bolin and Villani (2018): with draws ``x ~ N(0, Q̃⁻¹)`` from the factor,
``Var f_i = 1/Q̃_ii + E[(Σ_{j≠i} Q̃_ij x_j)²] / Q̃_ii²`` - unbiased, its first term exact;
its standard error is estimated from the same draws (:func:`rbmc_variances`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .cholesky import NotPositiveDefiniteError, PatternCholesky
from .iterative import ITERATIVE_ORDERS, IterativeGMRF
from .matern import MATERN_ORDERS, MaternFamily

__all__ = ["GMRFRegression", "GMRFFit", "rbmc_variances", "diagonal_of_inverse", "fit_gmrf",
           "search_gmrf", "search_subgraph"]

_LOG_2PI = np.log(2.0 * np.pi)


@dataclass
class GMRFFit:
    """One evaluation of :class:`GMRFRegression`: the hyperparameters, the log evidence of
    ``z`` (standardised units), the profiled amplitude ``A`` and the posterior mean of
    ``f`` at every node."""

    nu: int
    kappa2: float
    ratio: float
    amplitude: float
    log_evidence: float
    mean: np.ndarray

    @property
    def noise(self) -> float:
        """The noise variance ``A r`` (standardised units)."""
        return self.amplitude * self.ratio


class GMRFRegression:
    """The exact Gaussian posterior and evidence of a graph Matérn prior of order ``nu``
    on ``graph`` for targets ``z`` at the nodes ``observed`` (see the module notes).
    Sparsity patterns are analysed once; each :meth:`evaluate` factors ``K`` (cached by
    ``κ²``) and ``Q̃``."""

    def __init__(self, graph, observed: np.ndarray, z: np.ndarray, nu: int):
        self.graph = graph
        self.observed = np.asarray(observed, dtype=np.int64)
        self.z = np.asarray(z, dtype=np.float64)
        if self.observed.shape != self.z.shape:
            raise ValueError("observed and z must have one entry per target.")
        if np.unique(self.observed).size != self.observed.size:
            raise ValueError("each node may carry one target; average repeated ones.")
        self.nu = int(nu)
        n = graph.n_nodes
        self.n, self.m = n, self.observed.size
        self._log_mass = float(np.sum(np.log(graph.mass)))
        self._K = MaternFamily(graph, 1)                      # κ²C + G
        self._Q = MaternFamily(graph, self.nu)
        self._chol_K = PatternCholesky.of_lower_pattern(self._K.indptr, self._K.indices)
        self._chol_Q = PatternCholesky.of_lower_pattern(self._Q.indptr, self._Q.indices)
        self._obs_diag = self._Q.diagonal[self.observed]      # where Pᵀ P / r adds
        self._logdet_K = {}
        self.n_evaluations = 0
        self._last = None

    def logdet_prior(self, kappa2: float) -> float:
        """``log |Q_ν(κ)| = ν log |K| - (ν - 1) log |C|``."""
        if kappa2 not in self._logdet_K:
            self._chol_K.factor_values(self._K.values(kappa2))
            self._logdet_K[kappa2] = self._chol_K.logdet()
        return self.nu * self._logdet_K[kappa2] - (self.nu - 1) * self._log_mass

    def _posterior_values(self, kappa2: float, ratio: float) -> np.ndarray:
        values = self._Q.values(kappa2)
        values[self._obs_diag] += 1.0 / ratio
        return values

    def posterior_precision(self, kappa2: float, ratio: float) -> sp.csc_matrix:
        """``Q̃ = Q_ν(κ) + Pᵀ P / r``."""
        return self._Q.matrix(kappa2, self._posterior_values(kappa2, ratio))

    @staticmethod
    def _checked(kappa2, ratio) -> tuple[float, float]:
        kappa2, ratio = float(kappa2), float(ratio)
        if not (np.isfinite(kappa2) and kappa2 > 0):
            raise ValueError(f"kappa2 must be a finite number > 0; got {kappa2!r}.")
        if not (np.isfinite(ratio) and ratio > 0):
            raise ValueError(f"ratio (the noise-to-signal ratio r) must be a finite number "
                             f"> 0; got {ratio!r}.")
        return kappa2, ratio

    def _factor_posterior(self, kappa2: float, ratio: float):
        """Factor ``Q̃`` at ``(κ², r)``: ``(μ, b)`` with ``b = Pᵀ z / r``, ``μ = Q̃⁻¹ b``."""
        self._chol_Q.factor_values(self._posterior_values(kappa2, ratio))
        self._last = (kappa2, ratio)
        b = np.zeros(self.n)
        b[self.observed] = self.z / ratio
        return self._chol_Q.solve(b), b

    def _terms(self, kappa2: float, ratio: float):
        """``(μ, zᵀ S⁻¹ z, log |S|)`` at ``(κ², r)`` (``S = P Q⁻¹ Pᵀ + r I``); leaves ``Q̃``
        factored."""
        ld_prior = self.logdet_prior(kappa2)
        mean, b = self._factor_posterior(kappa2, ratio)
        quad = float(self.z @ self.z) / ratio - float(b @ mean)
        logdet_S = self.m * np.log(ratio) + self._chol_Q.logdet() - ld_prior
        return mean, quad, logdet_S

    def evaluate(self, kappa2: float, ratio: float) -> GMRFFit:
        """The evidence, amplitude and posterior mean at ``(κ², r)``; leaves ``Q̃``
        factored (for :meth:`variances`)."""
        kappa2, ratio = self._checked(kappa2, ratio)
        self.n_evaluations += 1
        mean, quad, logdet_S = self._terms(kappa2, ratio)
        m = self.m
        amplitude = max(quad, 1e-300) / m
        log_ev = -0.5 * m * (_LOG_2PI + np.log(amplitude) + 1.0) - 0.5 * logdet_S
        return GMRFFit(nu=self.nu, kappa2=kappa2, ratio=ratio, amplitude=amplitude,
                       log_evidence=float(log_ev), mean=mean)

    def log_evidence_at(self, kappa2: float, ratio: float, amplitude: float) -> float:
        """``log N(z | 0, A S)`` at a given amplitude ``A`` (:meth:`evaluate` profiles it
        out); leaves ``Q̃`` factored."""
        A, m = float(amplitude), self.m
        if not (np.isfinite(A) and A > 0):
            raise ValueError(f"amplitude must be a finite number > 0; got {amplitude!r}.")
        _, quad, logdet_S = self._terms(*self._checked(kappa2, ratio))
        return float(-0.5 * quad / A - 0.5 * (m * np.log(A) + logdet_S) - 0.5 * m * _LOG_2PI)

    def posterior_mean(self, kappa2: float, ratio: float) -> np.ndarray:
        """``μ = Q̃⁻¹ Pᵀ z / r`` at every node; leaves ``Q̃`` factored (no factor of ``K``:
        the prior's determinant is the evidence's only)."""
        return self._factor_posterior(*self._checked(kappa2, ratio))[0]

    def unit_posterior_variances(self, kappa2: float, ratio: float, rows: np.ndarray,
                                 exact_rows: int, n_samples: int = 64,
                                 random_state=0) -> np.ndarray:
        """``diag(Q̃⁻¹)`` at ``rows`` - the posterior variances in units of ``A``: exact
        (one solve a row, 256 at a time) for at most ``exact_rows`` rows, else by
        :func:`rbmc_variances` over every node."""
        kappa2, ratio = self._checked(kappa2, ratio)
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"rows must be node indices in [0, {self.n}); got "
                             f"{rows.min()}..{rows.max()}.")
        if self._last != (kappa2, ratio):
            self._factor_posterior(kappa2, ratio)
        if rows.size <= exact_rows:
            return diagonal_of_inverse(self._chol_Q.solve, self.n, rows)
        Qt = self.posterior_precision(kappa2, ratio)
        return rbmc_variances(Qt, self._chol_Q, n_samples, random_state)[0][rows]

    def variances(self, fit: GMRFFit, n_samples: int = 64, random_state=0):
        """``(variance, standard error)`` of ``f`` at every node under ``fit``: the RBMC
        estimate of ``A diag(Q̃⁻¹)`` (:func:`rbmc_variances`)."""
        if self._last != (fit.kappa2, fit.ratio):
            self.evaluate(fit.kappa2, fit.ratio)
        Qt = self.posterior_precision(fit.kappa2, fit.ratio)
        var, se = rbmc_variances(Qt, self._chol_Q, n_samples, random_state)
        return fit.amplitude * var, fit.amplitude * se


def diagonal_of_inverse(apply_inverse, n: int, rows: np.ndarray) -> np.ndarray:
    """``diag(X)`` at ``rows`` for ``X`` given by ``apply_inverse(B) = X B``: its columns
    at ``rows``, 256 at a time."""
    out = np.empty(rows.size)
    for a in range(0, rows.size, 256):
        block = rows[a:a + 256]
        B = np.zeros((n, block.size))
        B[block, np.arange(block.size)] = 1.0
        out[a:a + 256] = apply_inverse(B)[block, np.arange(block.size)]
    return out


def rbmc_variances(Q: sp.spmatrix, chol: PatternCholesky, n_samples: int = 64,
                   random_state=0):
    """``(diag(Q⁻¹), standard errors)`` by Rao-Blackwellised Monte Carlo: with draws
    ``x_s ~ N(0, Q⁻¹)`` (``chol`` holds the factor of ``Q``),
    ``v_i = 1/Q_ii + mean_s (Σ_{j≠i} Q_ij x_sj)² / Q_ii²`` (Sidén et al. 2018, Sec. 3.1):
    unbiased, the conditional variance ``1/Q_ii`` exact and only the variance of the
    conditional mean sampled. The standard error is that of the sample mean."""
    rng = np.random.default_rng(random_state)
    Q = sp.csr_matrix(Q)
    d = Q.diagonal()
    off = Q - sp.diags(d)
    X = chol.sample(int(n_samples), rng)
    Y = off @ X                                     # (n, k): Σ_{j≠i} Q_ij x_j per draw
    Y *= Y
    terms = Y / (d * d)[:, None]
    var = 1.0 / d + terms.mean(axis=1)
    se = terms.std(axis=1, ddof=1) / np.sqrt(terms.shape[1])
    return var, se


__all__ += ["NotPositiveDefiniteError"]


# -- hyperparameters by the evidence ----------------------------------------------------------

# the noise-to-signal ratio's range; κ's follows the graph (see gmrf_search_ranges)
RATIO_RANGE = (1e-6, 1e2)


def gmrf_search_ranges(graph) -> dict:
    """The log ranges searched: ``κ²`` from ``(1/(100 d))²`` to ``(1/h)²`` (``d`` the
    cloud's widest extent, ``h`` the graph's spacing; a correlation range from a hundred
    extents - nearly intrinsic - down to a node spacing), the start ``(1/(10 h))²`` (a
    range of ten spacings); ``r`` over ``[1e-6, 100]`` from 1e-2."""
    extent = float(np.max(np.ptp(graph.points, axis=0))) or graph.spacing
    h = graph.spacing
    lo, hi = (1.0 / (100.0 * extent)) ** 2, (1.0 / h) ** 2
    return dict(log_kappa2=(np.log(lo), np.log(hi)),
                log_kappa2_start=float(np.clip(np.log((1.0 / (10.0 * h)) ** 2),
                                               np.log(lo), np.log(hi))),
                log_ratio=tuple(np.log(RATIO_RANGE)), log_ratio_start=np.log(1e-2))


def _line_search(fun, x0: float, step: float, lo: float, hi: float, seen: dict,
                 max_evals: int = 8):
    """Minimise ``fun`` in one dimension from ``x0``: step by ``step`` downhill until the
    minimum is bracketed (or a bound is hit), then parabolic steps. ``seen`` caches
    ``x -> value``. Returns the best ``x``."""
    def f(x):
        x = float(np.clip(x, lo, hi))
        if x not in seen:
            seen[x] = fun(x)
        return seen[x]

    evals0 = len(seen)
    a, fa = x0, f(x0)
    b = float(np.clip(x0 + step, lo, hi))
    fb = f(b)
    if fb > fa:
        step = -step
        b = float(np.clip(x0 + step, lo, hi))
        fb = f(b)
        if fb > fa:                              # bracketed: x0 - step, x0, x0 + step
            pts = [(x0 - step, seen.get(float(np.clip(x0 - step, lo, hi)))),
                   (x0, fa), (x0 + step, seen.get(float(np.clip(x0 + step, lo, hi))))]
            return _parabolic(f, pts, lo, hi, seen, evals0, max_evals)
    # walk downhill
    prev, cur, fcur = a, b, fb
    while len(seen) - evals0 < max_evals:
        nxt = float(np.clip(cur + step, lo, hi))
        if nxt == cur:                          # at a bound
            return cur
        fn = f(nxt)
        if fn >= fcur:
            return _parabolic(f, [(prev, seen[prev]), (cur, fcur), (nxt, fn)], lo, hi,
                              seen, evals0, max_evals)
        prev, cur, fcur = cur, nxt, fn
    return min(seen, key=seen.get)


def _parabolic(f, pts, lo, hi, seen, evals0, max_evals, steps: int = 1):
    pts = [(float(np.clip(x, lo, hi)), v if v is not None else f(x)) for x, v in pts]
    for _ in range(steps):
        if len(seen) - evals0 >= max_evals:
            break
        (x0, f0), (x1, f1), (x2, f2) = sorted(pts, key=lambda p: p[1])[:3]
        den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
        if not np.isfinite(den) or abs(den) < 1e-300:
            break
        x = x1 - 0.5 * ((x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)) / den
        left, right = min(p[0] for p in pts), max(p[0] for p in pts)
        x = float(np.clip(x, max(left, lo), min(right, hi)))
        if any(abs(x - p[0]) < 1e-3 for p in pts):
            break
        pts.append((x, f(x)))
        pts = sorted(pts, key=lambda p: p[1])[:3]
    return min(pts, key=lambda p: p[1])[0]


# graphs above twice this many nodes search their hyperparameters on a ball of this many
SEARCH_MAX_NODES = 16_000
# graphs above this many nodes are not factored: their posterior comes from conjugate
# gradients (flgp.precision.iterative), their hyperparameters from the ball's evidence
FACTOR_MAX_NODES = 300_000


def search_subgraph(graph, observed, z, size: int = SEARCH_MAX_NODES):
    """``(subgraph, observed, z)`` of the ``size`` nodes nearest to the observed node
    closest to the observed nodes' centroid (the connected piece that holds it): where the
    hyperparameters are searched on a graph too large to factor a dozen times."""
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


def fit_gmrf(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
             start=None, verbose=False, search_max_nodes: int = SEARCH_MAX_NODES):
    """The graph Matérn prior of highest evidence for ``z`` at ``observed``.

    On a graph of more than twice ``search_max_nodes`` nodes the hyperparameters of each order
    are searched (:func:`search_gmrf`) on a ball of that many nodes around the observed
    data's centre (:func:`search_subgraph`: a factorisation of 16,000 voxels costs a
    tenth of one of 45,000), and each order is then evaluated once on the whole graph at
    its ball's optimum: the order is chosen, and the evidence reported, by the exact
    evidence of the whole graph at those hyperparameters. Returns ``(best GMRFFit, its
    GMRFRegression, {nu: GMRFFit})``."""
    observed = np.asarray(observed, dtype=np.int64)
    z = np.asarray(z, dtype=np.float64)
    if graph.n_nodes > FACTOR_MAX_NODES:
        return _fit_iterative(graph, observed, z, nus, kappa2, ratio, start, verbose,
                              search_max_nodes)
    if graph.n_nodes <= 2 * search_max_nodes:
        return search_gmrf(graph, observed, z, nus, kappa2=kappa2, ratio=ratio,
                           start=start, verbose=verbose)
    sub, sub_obs, sub_z = search_subgraph(graph, observed, z, search_max_nodes)
    if sub_obs.size < 2:
        return search_gmrf(graph, observed, z, nus, kappa2=kappa2, ratio=ratio,
                           start=start, verbose=verbose)
    _, _, local = search_gmrf(sub, sub_obs, sub_z, nus, kappa2=kappa2, ratio=ratio,
                              start=start, verbose=verbose)
    # one factor in memory at a time: the orders in ascending order of their ball's
    # evidence, so that the likely winner comes last and keeps its factor
    results, last = {}, None
    for nu in sorted(local, key=lambda j: local[j].log_evidence):
        last = None
        reg = GMRFRegression(graph, observed, z, nu)
        try:
            results[nu] = reg.evaluate(local[nu].kappa2, local[nu].ratio)
        except NotPositiveDefiniteError:
            continue
        last = (nu, reg)
        if verbose:
            print(f"[gmrf] nu={nu} on the whole graph ({graph.n_nodes} nodes): log "
                  f"evidence={results[nu].log_evidence:.2f}")
    if not results:
        raise NotPositiveDefiniteError("no graph Matérn prior could be factored on this "
                                       "graph at the searched hyperparameters.")
    nu = max(results, key=lambda j: results[j].log_evidence)
    if last is not None and last[0] == nu:
        return results[nu], last[1], results
    last = None
    reg = GMRFRegression(graph, observed, z, nu)
    results[nu] = reg.evaluate(results[nu].kappa2, results[nu].ratio)
    return results[nu], reg, results


def search_gmrf(graph, observed, z, nus=MATERN_ORDERS, *, kappa2=None, ratio=None,
                start=None, verbose=False):
    """The graph Matérn prior of highest evidence for ``z`` at ``observed``.

    Each order in ``nus`` gets one sweep of one-dimensional searches, ``log r`` then
    ``log κ²`` (steps of a factor 100 downhill for the first order, 10 for the others,
    which start from the best optimum so far; then a parabolic step), and the order that
    wins a second search in ``log r`` when its ``κ²`` moved by more than a factor 10. A
    later order stops after its first line search when that leaves it more than
    ``max(10, m / 100)`` nats below the best so far (measured gaps on the motor map:
    thousands of nats). A search costs about 5 factorisations an order (0.9 s each for
    ``ν = 2`` on the 45,448-voxel motor map, 2 s for ``ν = 3``). Fixed ``kappa2`` /
    ``ratio`` are not searched. Returns ``(best GMRFFit, its GMRFRegression,
    {nu: GMRFFit})``."""
    ranges = gmrf_search_ranges(graph)
    lk_lo, lk_hi = ranges["log_kappa2"]
    lr_lo, lr_hi = ranges["log_ratio"]
    u0, v0 = (ranges["log_kappa2_start"], ranges["log_ratio_start"]) if start is None \
        else (np.log(start[0]), np.log(start[1]))
    if kappa2 is not None:
        u0 = np.log(kappa2)
    if ratio is not None:
        v0 = np.log(ratio)
    margin = max(10.0, np.size(z) / 100.0)
    results, regs, searches = {}, {}, {}
    for k, nu in enumerate(nus):
        reg = GMRFRegression(graph, observed, z, nu)
        search = _OrderSearch(reg)
        step = np.log(100.0) if k == 0 else np.log(10.0)
        u, v = u0, v0
        if ratio is None:
            v = _line_search(lambda x: search(u, x), v, step, lr_lo, lr_hi, {})
        top = max((f.log_evidence for f in results.values()), default=-np.inf)
        here = search.best()
        if kappa2 is None and here is not None and here.log_evidence >= top - margin:
            u = _line_search(lambda x: search(x, v), u, step, lk_lo, lk_hi, {})
        best = search.best()
        if best is None:
            continue
        results[nu], regs[nu], searches[nu] = best, reg, (search, u0)
        if verbose:
            print(f"[gmrf] nu={nu}: kappa2={best.kappa2:.4g} ratio={best.ratio:.4g} "
                  f"log evidence={best.log_evidence:.2f} ({reg.n_evaluations} evaluations)")
        top_nu = max(results, key=lambda j: results[j].log_evidence)
        u0, v0 = np.log(results[top_nu].kappa2), np.log(results[top_nu].ratio)
    if not results:
        raise NotPositiveDefiniteError("no graph Matérn prior could be factored on this "
                                       "graph for any searched hyperparameter.")
    nu = max(results, key=lambda j: results[j].log_evidence)
    search, u_start = searches[nu]
    u, v = np.log(results[nu].kappa2), np.log(results[nu].ratio)
    if ratio is None and kappa2 is None and abs(u - u_start) > np.log(10.0):
        _line_search(lambda x: search(u, x), v, np.log(10.0), lr_lo, lr_hi, {})
        results[nu] = search.best()
        if verbose:
            print(f"[gmrf] nu={nu} refined: ratio={results[nu].ratio:.4g} log evidence="
                  f"{results[nu].log_evidence:.2f} ({regs[nu].n_evaluations} evaluations)")
    return results[nu], regs[nu], results


class _OrderSearch:
    """``-log evidence`` of one order at ``(log κ², log r)``, cached; unfactorable
    hyperparameters count as infinitely bad."""

    def __init__(self, reg: GMRFRegression):
        self.reg = reg
        self.cache = {}

    def __call__(self, u, v):
        key = (round(float(u), 9), round(float(v), 9))
        if key not in self.cache:
            try:
                self.cache[key] = self.reg.evaluate(np.exp(u), np.exp(v))
            except NotPositiveDefiniteError:
                self.cache[key] = None
        fit = self.cache[key]
        return np.inf if fit is None else -fit.log_evidence

    def best(self):
        fits = [f for f in self.cache.values() if f is not None]
        return max(fits, key=lambda f: f.log_evidence) if fits else None


class _IterativeRegression:
    """What the estimators read of a fit on a graph too large to factor: its variances
    and the number of evidence evaluations of the ball's search."""

    def __init__(self, solver, n_evaluations):
        self.solver = solver
        self.n_evaluations = n_evaluations

    def variances(self, fit, n_samples=16, random_state=0):
        return self.solver.variances(min(int(n_samples), ITERATIVE_VARIANCE_SAMPLES),
                                     random_state)


# perturbation draws of the large-graph variances (one conjugate-gradient solve each)
ITERATIVE_VARIANCE_SAMPLES = 8


def _fit_iterative(graph, observed, z, nus, kappa2, ratio, start, verbose, search_max_nodes):
    """:func:`fit_gmrf` on a graph of more than ``FACTOR_MAX_NODES`` nodes: ``(κ², r, A)``
    and the order (1 or 2) by the exact evidence of a ball of ``search_max_nodes`` nodes,
    the posterior by :class:`flgp.precision.iterative.IterativeGMRF`. The fit's
    ``log_evidence`` is the ball's (``evidence_nodes`` says how many nodes it covers)."""
    orders = tuple(nu for nu in nus if nu in ITERATIVE_ORDERS) or ITERATIVE_ORDERS
    sub, sub_obs, sub_z = search_subgraph(graph, observed, z, search_max_nodes)
    if sub_obs.size < 2:
        raise ValueError(f"fewer than 2 observed nodes lie in the {sub.n_nodes}-node ball "
                         f"the hyperparameters are searched on; observe more nodes.")
    best, reg, local = search_gmrf(sub, sub_obs, sub_z, orders, kappa2=kappa2, ratio=ratio,
                                   start=start, verbose=verbose)
    solver = IterativeGMRF(graph, observed, z, best.nu, best.kappa2, best.ratio,
                           best.amplitude)
    fit = GMRFFit(nu=best.nu, kappa2=best.kappa2, ratio=best.ratio,
                  amplitude=best.amplitude, log_evidence=best.log_evidence,
                  mean=solver.mean())
    fit.evidence_nodes = sub.n_nodes
    if verbose:
        print(f"[gmrf] {graph.n_nodes} nodes: posterior mean by AMG-preconditioned CG "
              f"({solver.iterations[-1]} iterations); evidence of the {sub.n_nodes}-node "
              f"ball")
    return fit, _IterativeRegression(solver, reg.n_evaluations), local
