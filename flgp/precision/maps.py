r"""Many maps observed at the same nodes of one graph, each fitted as by
:func:`~flgp.precision.gaussian.fit_matern` on a graph searched on a ball and factored
whole, their common work done once (docs/images.md, "The whole graph's work shared"):

* the maps' ball searches evaluate on a lattice of step ``SNAP_STEP`` in ``log κ²`` and
  ``log r̃`` and run in step (:func:`lockstep`), each point factored once for the maps that
  ask for it together;
* each lattice point that is some map's optimum is factored once on the whole graph for
  those maps' evidences and means, and the unit-amplitude variances once a winning point.

The lattice is the only difference from ``fit_matern`` map by map.
"""

from __future__ import annotations

import numpy as np

from .cholesky import NotPositiveDefiniteError
from .gaussian import (FACTOR_MAX_NODES, FAR_MARGIN, SEARCH_MAX_NODES, MaternRegression,
                       search_steps, search_subgraph)
from .matern import MATERN_ORDERS

__all__ = ["SNAP_STEP", "SharedVariances", "fit_matern_maps", "lockstep", "ball_searches"]

# the lattice step of the maps' searches, in log κ² and log r̃ (0.2: test errors within
# 2 % of the continuous search's, docs/images.md)
SNAP_STEP = 0.2


def lockstep(steps, evaluate_many) -> list:
    """Run several :func:`~flgp.precision.gaussian.search_steps` generators in step: each
    round, the searches asking for the same point ``(ν, log κ², log r̃)`` get it from one call
    ``evaluate_many(point, which)`` (``which``: their indices; one fit or None each). Returns
    what each search returns, or the exception it raised."""
    out = [None] * len(steps)
    asks = {}

    def advance(i, fit=None, first=False):
        try:
            asks[i] = next(steps[i]) if first else steps[i].send(fit)
        except StopIteration as stop:
            out[i] = stop.value
        except NotPositiveDefiniteError as exc:
            out[i] = exc

    for i in range(len(steps)):
        advance(i, first=True)
    while asks:
        groups = {}
        for i, point in asks.items():
            groups.setdefault(point, []).append(i)
        asks = {}
        for point, which in groups.items():
            for i, fit in zip(which, evaluate_many(point, which)):
                advance(i, fit)
    return out


def ball_searches(graph, observed, Z, nus=MATERN_ORDERS,
                  search_max_nodes: int = SEARCH_MAX_NODES) -> list:
    """Each map's (column of ``Z``) ``fit_matern`` search on the ball of
    :func:`~flgp.precision.gaussian.search_subgraph`, on the lattice, all in :func:`lockstep`;
    ``graph`` in its own units. One entry a map: ``({ν: (log κ², log r̃, κ², r)}, evaluations,
    {ν: (κ², r, log evidence)})`` for the orders within ``FAR_MARGIN`` nats of its best and
    the evaluations of its best order; None for every map when fewer than 2 observed nodes
    lie in the ball, or for a map whose search found nothing factorable."""
    Z = np.asarray(Z, dtype=np.float64).reshape(np.size(observed), -1)
    k = Z.shape[1]
    sub, sub_obs, sub_Z = search_subgraph(graph, observed, Z, search_max_nodes)
    if sub_obs.size < 2:
        return [None] * k
    regs, done = {}, {}

    def evaluate_many(point, which):
        # solved for the maps that ask, kept for any that reach the point later (one
        # factorisation while it is the order's latest point)
        fits = done.setdefault(point, {})
        new = [i for i in which if i not in fits]
        if new:
            nu, u, v = point
            if nu not in regs:
                regs[nu] = MaternRegression(sub, sub_obs, sub_Z, nu)
            reg = regs[nu]
            try:
                kappa2 = float(np.exp(u))
                got = reg.evaluate_each(kappa2, float(np.exp(v)) * reg.prior_variance(kappa2),
                                        new)
            except NotPositiveDefiniteError:
                got = [None] * len(new)
            for i, fit in zip(new, got):
                if fit is not None:
                    fit.mean = None             # the ball's means are not used
                fits[i] = fit
        return [fits[i] for i in which]

    found = lockstep([search_steps(sub, nus, lattice=SNAP_STEP) for _ in range(k)],
                     evaluate_many)
    out = []
    for result in found:
        if not isinstance(result, tuple):
            out.append(None)
            continue
        local, searches = result
        top = max(f.log_evidence for f in local.values())
        best = max(local, key=lambda nu: local[nu].log_evidence)
        near = [nu for nu, f in local.items() if f.log_evidence >= top - FAR_MARGIN]
        out.append(({nu: searches[nu].best_point() + (local[nu].kappa2, local[nu].ratio)
                     for nu in near}, searches[best].n_evaluations,
                    {nu: (local[nu].kappa2, local[nu].ratio, local[nu].log_evidence)
                     for nu in near}))
    return out


def whole_graph_fits(graph, observed, Z, nu, points):
    """At each point ``(κ², r, columns, n_samples, random_state)`` of one order ``nu`` on
    the whole graph, ``(fits, variances)`` from one factor: :meth:`MaternRegression.
    evaluate_each` of the maps ``Z[:, columns]`` and, with ``n_samples`` (not None),
    :meth:`MaternRegression.unit_variances`; ``(None, None)`` where ``Q̃`` is not positive
    definite. One regression serves every point: the pattern is analysed once."""
    reg = MaternRegression(graph, observed, Z, nu)
    out = []
    for kappa2, ratio, columns, n_samples, random_state in points:
        try:
            fits = reg.evaluate_each(kappa2, ratio, columns)
        except NotPositiveDefiniteError:
            out.append((None, None))
            continue
        out.append((fits, None if n_samples is None else
                    reg.unit_variances(kappa2, ratio, n_samples, random_state)))
    return out


def unit_variances(graph, observed, nu, points):
    """``(diag(Q̃⁻¹), standard errors, their observed sum, its standard error)`` at each
    point ``(κ², r, n_samples, random_state)`` of one order:
    :meth:`MaternRegression.unit_variances`, the single-map fit's estimator and draws."""
    reg = MaternRegression(graph, observed, np.zeros(np.size(observed)), nu)
    return [reg.unit_variances(kappa2, ratio, n_samples, random_state)
            for kappa2, ratio, n_samples, random_state in points]


def _by_order(points, n_tasks: int) -> list:
    """``points`` (each ``(ν, ...)``) as tasks of one order each, the costliest orders
    first: each order's points, in their order, in up to ``n_tasks`` runs."""
    tasks = []
    for nu in sorted({p[0] for p in points}, reverse=True):
        mine = [p for p in points if p[0] == nu]
        tasks += [[mine[i] for i in run]
                  for run in np.array_split(np.arange(len(mine)), min(n_tasks, len(mine)))]
    return tasks


class SharedVariances:
    """A map's regression from :func:`fit_matern_maps`, as the estimators read it: the
    variances at its lattice point (shared) scaled by its amplitude, and its search's
    evaluations."""

    factored = True                 # draws from the factor at its lattice point

    def __init__(self, unit_variance, unit_se, n_samples, random_state, n_evaluations,
                 observed_sum=None, observed_sum_se=None):
        self.unit_variance, self.unit_se = unit_variance, unit_se
        # Σ diag(Q̃⁻¹) at the observed nodes and its standard error (0: exact)
        self.observed_sum, self.observed_sum_se = observed_sum, observed_sum_se
        self.n_samples, self.random_state = int(n_samples), random_state
        self.n_evaluations = int(n_evaluations)

    def variances(self, fit, n_samples=64, random_state=0):
        """``(variance, standard error)`` of ``f`` at every node from the draws made at
        fitting; ValueError for another ``n_samples`` or ``random_state``."""
        if int(n_samples) != self.n_samples or random_state != self.random_state:
            raise ValueError(f"these variances were estimated with n_samples="
                             f"{self.n_samples}, random_state={self.random_state!r}; "
                             f"asked for {n_samples}, {random_state!r}.")
        return fit.amplitude * self.unit_variance, fit.amplitude * self.unit_se


def _sequential(fn, tasks):
    return [fn(*args) for args in tasks]


def fit_matern_maps(graph, observed, Z, nus=MATERN_ORDERS, *, n_samples: int = 64,
                  random_state=0, search_max_nodes: int = SEARCH_MAX_NODES, run=None,
                  n_groups: int = 1):
    """:func:`~flgp.precision.gaussian.fit_matern` of each map (a column of ``Z``:
    standardised targets at the nodes ``observed``; ``graph`` in any units), sharing work
    (module notes). ``run(fn, tasks)`` returns ``[fn(*args) for args in tasks]``, in
    processes say (default: in this one); the ball searches go in ``n_groups`` groups of
    consecutive maps (the result does not depend on it). Returns one entry a map,
    ``(best MaternFit, SharedVariances, {ν: MaternFit})`` as ``fit_matern`` returns them (the
    variances from ``n_samples`` draws seeded by ``random_state``), or None for a map the
    ball cannot search (fit it with ``fit_matern``). Raises ValueError for bad ``Z`` or
    ``observed``, or a graph outside ``(2 * search_max_nodes, FACTOR_MAX_NODES]`` nodes."""
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
        raise ValueError(f"fit_matern_maps shares the whole graph's work of graphs searched on "
                         f"a ball and factored whole: more than 2 * search_max_nodes = "
                         f"{2 * search_max_nodes} and at most FACTOR_MAX_NODES = "
                         f"{FACTOR_MAX_NODES} nodes; this one has {graph.n_nodes}. Fit "
                         f"each map with fit_matern.")
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    k = Z.shape[1]
    groups = np.array_split(np.arange(k), max(1, min(int(n_groups), k)))
    searched = [entry for found in run(ball_searches, [
        (own, observed, Z[:, g], tuple(nus), search_max_nodes) for g in groups])
        for entry in found]
    asks, where = {}, {}                          # (ν, log κ², log r̃) -> maps, (κ², r)
    for j, found in enumerate(searched):
        if found is not None:
            for nu, (u, v, kappa2, ratio) in found[0].items():
                asks.setdefault((nu, u, v), []).append(j)
                where.setdefault((nu, u, v), (kappa2, ratio))
    likely = {(max(found[0]),) + found[0][max(found[0])][:2] for found in searched
              if found is not None}
    # each task one order's points (its pattern analysed once), those with variances first
    tasks = _by_order(sorted(asks, key=lambda p: p not in likely), n_groups)
    evaluated = run(whole_graph_fits, [(own, observed, Z, task[0][0], [
        where[p] + (asks[p],) + ((n_samples, random_state) if p in likely else (None, None))
        for p in task]) for task in tasks])
    by_map = [dict() for _ in range(k)]          # ν -> (point, fit)
    estimated = {}
    for task, results in zip(tasks, evaluated):
        for p, (fits, var) in zip(task, results):
            for j, fit in zip(asks[p], fits or ()):
                by_map[j][p[0]] = (p, fit)
            if var is not None:
                estimated[p] = var
    winners = {}
    for j in range(k):
        if by_map[j]:
            p, _ = max(by_map[j].values(), key=lambda entry: entry[1].log_evidence)
            winners.setdefault(p, []).append(j)
    tasks = _by_order([p for p in winners if p not in estimated], n_groups)
    for task, results in zip(tasks, run(unit_variances, [
            (own, observed, task[0][0], [where[p] + (n_samples, random_state) for p in task])
            for task in tasks])):
        estimated.update(zip(task, results))
    out = [None] * k
    for p in winners:
        var, se, total, sum_se = estimated[p]
        for j in winners[p]:
            fits = {nu: fit for nu, (_, fit) in by_map[j].items()}
            for fit in fits.values():
                fit.length_unit, fit.mass_unit = length, mass
            out[j] = (fits[p[0]], SharedVariances(var, se, n_samples, random_state,
                                                  searched[j][1], total, sum_se), fits)
    return out
