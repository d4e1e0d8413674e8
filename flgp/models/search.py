"""The estimators' hyperparameter searches: one-dimensional searches on a log grid, the
starting points a grid gives a local optimiser, and the posterior over the diffusion
time's search grid - what the classifier (:mod:`flgp.models.class_search`), the regressor
and the labelling loop share, knowing nothing of estimators."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from ..backends import limit_blas_threads
from ..spectral.prior import LowRankPrior

__all__ = ["search_log_scalar", "multistart_minimize", "unit_prior_log_scale", "parabolic_refine",
           "diffusion_time_mixture", "single_threaded_blas"]


def single_threaded_blas():
    """Context in which BLAS/LAPACK run on one thread: the hyperparameter searches make
    thousands of calls on ``m x m`` matrices (``m`` labels, ~100), where thread start-up
    and contention with torch's OpenMP workers cost more than the arithmetic."""
    return limit_blas_threads(1)


def search_log_scalar(fun, lo: float, hi: float, n_grid: int = 12, maxiter: int = 30):
    """Minimise ``fun(log x)`` for ``x`` in ``[lo, hi]``: a log grid, then bounded Brent
    between the best grid point's neighbours. Returns ``(x, fun value)``."""
    grid = np.linspace(np.log(lo), np.log(hi), n_grid)
    vals = np.array([fun(g) for g in grid])
    vals = np.where(np.isfinite(vals), vals, np.inf)
    k = int(np.argmin(vals))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, n_grid - 1)]
    res = minimize_scalar(fun, bounds=(a, b), method="bounded",
                          options={"maxiter": maxiter, "xatol": 1e-3})
    if res.fun <= vals[k]:
        return float(np.exp(res.x)), float(res.fun)
    return float(np.exp(grid[k])), float(vals[k])


def multistart_minimize(f_and_grad, candidates, bounds, *, n_starts: int = 2,
                        max_iter: int = 100, reset=None):
    """L-BFGS-B with an analytic gradient (``f_and_grad(x) -> (value, gradient)``) from
    each of the ``n_starts`` best ``candidates`` (by their value; ties in the given order),
    within ``bounds``; returns the best of scipy's results. ``reset()`` runs before each
    start (a warm-start cache of the objective's inner solver, say). The regressor's
    ``(log t, log s², log noise)`` and the count model's ``(log t, log s², log nugget)``
    are searched so, from a log grid of ``t`` with the amplitude matched to the labels."""
    vals = [f_and_grad(x)[0] for x in candidates]
    best = None
    for k in np.argsort(vals, kind="stable")[:n_starts]:
        if reset is not None:
            reset()
        res = minimize(f_and_grad, candidates[k], jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": max_iter})
        if best is None or res.fun < best.fun:
            best = res
    return best


def unit_prior_log_scale(eigenpairs, V_lab: np.ndarray, log_t: float, bounds) -> float:
    """``log s²`` at which the heat prior at ``t = exp(log_t)`` has mean variance 1 over the
    labelled rows ``V_lab`` (clipped to ``bounds``): the amplitude the regressor's and the
    count model's searches start from at each grid value of ``t``."""
    var = LowRankPrior.of_family(eigenpairs, np.exp(log_t)).variances_of(V_lab)
    return float(np.clip(-np.log(max(var.mean(), 1e-300)), *bounds))


def parabolic_refine(fun, grid: np.ndarray, vals: np.ndarray, k: int, steps: int = 2):
    """Refine the minimum of ``fun`` near ``grid[k]`` (the best of the evaluated ``vals``)
    by successive parabolic interpolation: the vertex of the parabola through the best
    point and its two grid neighbours, then through the best three points seen, each
    vertex clipped to the neighbours' interval. Returns the best abscissa seen."""
    n = grid.size
    if n < 3 or not np.isfinite(vals[k]):
        return float(grid[k])
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, n - 1)]
    idx = [max(min(k, n - 2), 1) + j for j in (-1, 0, 1)]
    pts = [(float(grid[i]), float(vals[i])) for i in idx]
    for _ in range(steps):
        pts = sorted(pts, key=lambda p: p[1])[:3]
        (x0, f0), (x1, f1), (x2, f2) = pts
        den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
        if not np.isfinite(den) or abs(den) < 1e-300:
            break
        x = x1 - 0.5 * ((x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)) / den
        x = float(np.clip(x, lo, hi))
        if any(abs(x - p[0]) < 1e-6 for p in pts):
            break
        fx = float(fun(x))
        pts.append((x, fx if np.isfinite(fx) else np.inf))
    return min(pts + [(float(grid[k]), float(vals[k]))], key=lambda p: p[1])[0]


def diffusion_time_mixture(grid, t_map, state_map, mass: float = 0.99):
    """Posterior weights over a uniform log-``t`` grid: ``grid`` holds ``(t, -log posterior,
    state)`` per grid value; returns ``[(t, weight, state), ...]``, heaviest first, for the
    smallest set of grid values holding ``mass`` of the posterior, with the heaviest grid
    value replaced by the refined MAP ``(t_map, state_map)``. Weights sum to one."""
    vals = np.array([v for _, v, _ in grid], dtype=np.float64)
    vals = np.where(np.isfinite(vals), vals, np.inf)
    if not np.isfinite(vals).any():
        return [(float(t_map), 1.0, state_map)]
    logw = -(vals - vals.min())
    w = np.exp(logw)
    w /= w.sum()
    order = np.argsort(-w, kind="stable")
    k = int(np.searchsorted(np.cumsum(w[order]), mass)) + 1
    keep = order[:min(k, order.size)]
    out = [(float(t_map), float(w[keep[0]]), state_map)]
    out += [(grid[i][0], float(w[i]), grid[i][2]) for i in keep[1:]]
    total = sum(c[1] for c in out)
    return [(t, wk / total, st) for t, wk, st in out]
