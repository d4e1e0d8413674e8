r"""Many maps observed at the same nodes of one graph, each with its own graph Matérn prior
by its own evidence, the whole graph's work shared among them.

A study fits many maps on one mask: subjects or contrasts on a template, the same voxels
observed in each. :func:`~flgp.precision.gaussian.fit_gmrf` on a graph of more than twice
``SEARCH_MAX_NODES`` nodes searches each order's ``(κ², r)`` on a ball and then evaluates
the contending orders on the whole graph at the ball's optima, and the estimator then
estimates the posterior variances from the winner's factor: on the motor map's mask
(45,448 voxels) the whole graph's factorisations and variances are two thirds of a map's
cost. Here the start grid of every map's ball search is evaluated for all maps at once
(one factorisation a grid point), each map's ball search is then its own, exactly as in
``fit_gmrf``, and its optima
are rounded to a lattice of step ``SNAP_STEP`` in ``log κ²`` and ``log r`` (so within 10 %
of the ball's optimum in ``κ²`` and in ``r``), so that maps whose optima round alike share
the whole graph's work: one factorisation of ``Q̃`` a lattice point gives the evidence and
the posterior mean of every map that asks for it (one solve of several right-hand
sides), and the posterior variances in units of the amplitude - which depend on
``(ν, κ², r)`` alone - are estimated once a winning point.

What rounding costs, measured on the motor map and smooth random fields on its mask: a
step of 0.25 in ``log κ²`` or ``log r`` away from a map's optimum moves its test error by
0.0-2.2 %; the rounding moves each coordinate by at most 0.1 (on 100 maps: test errors
0.987-1.006 times the single-map fits'). It is the only difference from ``fit_gmrf`` map by
map (the same ball, the same search, the same contenders, the
same whole-graph choice of the order, the same variance estimator and seed).
"""

from __future__ import annotations

import numpy as np

from .cholesky import NotPositiveDefiniteError
from .gaussian import (FACTOR_MAX_NODES, FAR_MARGIN, SEARCH_MAX_NODES, GMRFRegression,
                       search_gmrf, search_subgraph, start_grid)
from .matern import MATERN_ORDERS

__all__ = ["SNAP_STEP", "SharedVariances", "fit_gmrf_maps", "snapped"]

# the lattice step of the rounded hyperparameters, in log κ² and log r
SNAP_STEP = 0.2


def snapped(x: float, step: float = SNAP_STEP) -> float:
    """``x`` rounded to the nearest multiple of ``step``."""
    return float(step * np.round(float(x) / step))


def start_fits(sub, observed, Z, nu, log_kappa2, log_ratio):
    """The fits of the maps ``Z`` on the ball at one point of their searches' start grid
    (:func:`~flgp.precision.gaussian.start_grid`), from one factorisation, as each map's
    search would make them (``r = r̃ v̄(κ)``); None where ``Q̃`` cannot be factored."""
    reg = GMRFRegression(sub, observed, Z, nu)
    kappa2 = float(np.exp(log_kappa2))
    try:
        return reg.evaluate_each(kappa2, float(np.exp(log_ratio)) * reg.prior_variance(kappa2))
    except NotPositiveDefiniteError:
        return None


def ball_contenders(graph, observed, z, nus=MATERN_ORDERS,
                    search_max_nodes: int = SEARCH_MAX_NODES, evaluated=None):
    """``({ν: (κ², r)}, evaluations, {ν: (κ², r, log evidence)})`` of one map: its search on
    the ball of :func:`~flgp.precision.gaussian.search_subgraph` (``fit_gmrf``'s
    :func:`~flgp.precision.gaussian.search_gmrf`; the evaluations of its best order, as
    ``fit_gmrf`` counts them), the orders within ``FAR_MARGIN`` nats of the ball's best,
    their optima rounded to the lattice, and the optima themselves. None when fewer than
    2 observed nodes lie in the ball (``fit_gmrf`` then searches the whole graph: not
    shared). ``graph`` is in its own units; ``evaluated``: its start grid's fits
    (:func:`start_fits`)."""
    sub, sub_obs, sub_z = search_subgraph(graph, observed, z, search_max_nodes)
    if sub_obs.size < 2:
        return None
    _, reg, local = search_gmrf(sub, sub_obs, sub_z, nus, evaluated=evaluated)
    evaluations = reg.n_evaluations
    top = max(f.log_evidence for f in local.values())
    near = {nu: f for nu, f in local.items() if f.log_evidence >= top - FAR_MARGIN}
    points = {nu: (float(np.exp(snapped(np.log(f.kappa2)))),
                   float(np.exp(snapped(np.log(f.ratio))))) for nu, f in near.items()}
    optima = {nu: (f.kappa2, f.ratio, f.log_evidence) for nu, f in near.items()}
    return points, evaluations, optima


def whole_graph_fits(graph, observed, Z, nu, kappa2, ratio, n_samples=None,
                     random_state=0):
    """``(fits, variances)`` at one lattice point on the whole graph, from one
    factorisation: the fits (:meth:`GMRFRegression.evaluate_each`) of the maps ``Z``
    (``(m, k)``), and with ``n_samples`` the posterior variances at unit amplitude
    (:func:`unit_variances`' estimate, from the factor in hand); ``(None, None)`` where
    ``Q̃`` cannot be factored there."""
    reg = GMRFRegression(graph, observed, Z, nu)
    try:
        fits = reg.evaluate_each(kappa2, ratio)
    except NotPositiveDefiniteError:
        return None, None
    if n_samples is None:
        return fits, None
    return fits, reg.unit_variances_rbmc(kappa2, ratio, n_samples, random_state)


def unit_variances(graph, observed, nu, kappa2, ratio, n_samples, random_state):
    """``(diag(Q̃⁻¹), standard errors)`` at one point: the posterior variances at unit
    amplitude by :func:`~flgp.precision.gaussian.rbmc_variances` (the estimator
    :meth:`GMRFRegression.variances` uses, with the same draws for the same seed)."""
    return GMRFRegression(graph, observed, np.zeros(np.size(observed)), nu) \
        .unit_variances_rbmc(kappa2, ratio, n_samples, random_state)


class SharedVariances:
    """The regression of a map fitted by :func:`fit_gmrf_maps`, as the estimators read it:
    the posterior variances at its lattice point (shared with the maps there) scaled by
    its amplitude, and the number of evaluations of its ball search."""

    def __init__(self, unit_variance, unit_se, n_samples, random_state, n_evaluations):
        self.unit_variance, self.unit_se = unit_variance, unit_se
        self.n_samples, self.random_state = int(n_samples), random_state
        self.n_evaluations = int(n_evaluations)

    def variances(self, fit, n_samples=64, random_state=0):
        """``(variance, standard error)`` of ``f`` at every node: ``A diag(Q̃⁻¹)``; the
        draws were made when the maps were fitted, with the settings given then."""
        if int(n_samples) != self.n_samples or random_state != self.random_state:
            raise ValueError(f"these variances were estimated with n_samples="
                             f"{self.n_samples}, random_state={self.random_state!r}; "
                             f"asked for {n_samples}, {random_state!r}.")
        return fit.amplitude * self.unit_variance, fit.amplitude * self.unit_se


def _sequential(fn, tasks):
    return [fn(*args) for args in tasks]


def fit_gmrf_maps(graph, observed, Z, nus=MATERN_ORDERS, *, n_samples: int = 64,
                  random_state=0, search_max_nodes: int = SEARCH_MAX_NODES, run=None):
    """:func:`~flgp.precision.gaussian.fit_gmrf` of each map (a column of ``Z``, standardised
    targets at the nodes ``observed``), with its optima rounded to the lattice
    (``SNAP_STEP``) and the whole graph's factorisations and variances shared among the maps
    that round alike (see the module notes).

    ``graph`` in any units (the search runs in its own, as ``fit_gmrf``'s). ``run(fn,
    tasks)`` returns ``[fn(*args) for args in tasks]`` - in processes, say (default: in
    this one): it is called four times, for the start grid of the maps' ball searches
    (all maps at once), the searches, the lattice points' whole-graph fits (with the
    variances where a winner is expected) and the variances of the other winning points
    (often no task). Returns one entry a map: ``(best
    GMRFFit, SharedVariances, {ν: GMRFFit})`` as ``fit_gmrf`` returns them (the fits in the
    graph's own units, ``length_unit`` set; the variances ``n_samples`` draws seeded by
    ``random_state``), or None for a map the ball cannot search (``fit_gmrf`` fits it
    alone)."""
    run = _sequential if run is None else run
    observed = np.asarray(observed, dtype=np.int64)
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] != observed.size:
        raise ValueError(f"Z must hold one row an observed node and one column a map; got "
                         f"shape {Z.shape} for {observed.size} observed nodes.")
    if not np.all(np.isfinite(Z)):
        raise ValueError("Z holds NaN or infinite targets; give finite standardised "
                         "targets (drop the nodes that have none from observed).")
    if observed.ndim != 1 or observed.size < 2 or observed.min() < 0 \
            or observed.max() >= graph.n_nodes or np.unique(observed).size != observed.size:
        raise ValueError(f"observed must hold at least 2 distinct node indices in [0, "
                         f"{graph.n_nodes}); got {observed.size} of them, "
                         f"from {observed.min() if observed.size else None} to "
                         f"{observed.max() if observed.size else None}.")
    if not 2 * search_max_nodes < graph.n_nodes <= FACTOR_MAX_NODES:
        raise ValueError(f"fit_gmrf_maps shares the whole graph's work of graphs searched on "
                         f"a ball and factored whole: more than 2 * search_max_nodes = "
                         f"{2 * search_max_nodes} and at most FACTOR_MAX_NODES = "
                         f"{FACTOR_MAX_NODES} nodes; this one has {graph.n_nodes}. Fit "
                         f"each map with fit_gmrf.")
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    k = Z.shape[1]
    sub, sub_obs, sub_Z = search_subgraph(own, observed, Z, search_max_nodes)
    # the start of every map's search at once: one factorisation a grid point
    grid = start_grid(sub, nus[0]) if sub_obs.size >= 2 else []
    starts = run(start_fits, [(sub, sub_obs, sub_Z, nus[0]) + point for point in grid])
    searched = run(ball_contenders, [
        (own, observed, Z[:, j], tuple(nus), search_max_nodes,
         {point: None if fits is None else fits[j] for point, fits in zip(grid, starts)})
        for j in range(k)])
    asks = {}                                     # (ν, κ², r) -> maps
    for j, found in enumerate(searched):
        if found is not None:
            for nu, point in found[0].items():
                asks.setdefault((nu,) + point, []).append(j)
    # the variances are estimated with the evaluation's factor at the points where a map's
    # highest contending order lies (the whole graph's evidence rises with the order on the
    # brain maps measured), and with a factor of their own at the other winning points: the
    # guess decides where the work is done, not what comes out
    likely = {(max(found[0]),) + found[0][max(found[0])] for found in searched
              if found is not None}
    # the costliest first (the highest orders, with the variances), for an even share
    # among processes
    points = sorted(asks, key=lambda p: (p not in likely, -p[0]))
    evaluated = run(whole_graph_fits, [(own, observed, Z[:, asks[p]]) + p
                                       + ((n_samples, random_state) if p in likely else ())
                                       for p in points])
    by_map = [dict() for _ in range(k)]
    estimated = {}
    for p, (fits, var) in zip(points, evaluated):
        for j, fit in zip(asks[p], fits or ()):
            by_map[j][p[0]] = fit
        if var is not None:
            estimated[p] = var
    winners = {}
    for j in range(k):
        if by_map[j]:
            best = max(by_map[j].values(), key=lambda f: f.log_evidence)
            winners.setdefault((best.nu, best.kappa2, best.ratio), []).append(j)
    missing = [p for p in winners if p not in estimated]
    estimated.update(zip(missing, run(unit_variances, [
        (own, observed) + p + (n_samples, random_state) for p in missing])))
    out = [None] * k
    for p in winners:
        var, se = estimated[p]
        for j in winners[p]:
            fits = by_map[j]
            for fit in fits.values():
                fit.length_unit = length
            out[j] = (fits[p[0]], SharedVariances(var, se, n_samples, random_state,
                                                  searched[j][1]), fits)
    return out
