r"""Many maps observed at the same nodes of one graph, each with its own graph Matérn prior
by its own evidence, the work they have in common done once.

A study fits many maps on one mask: subjects or contrasts on a template, the same voxels
observed in each. :func:`~flgp.precision.gaussian.fit_matern` on a graph of more than twice
``SEARCH_MAX_NODES`` nodes searches each order's ``(κ², r̃)`` on a ball and then evaluates
the contending orders on the whole graph at the ball's optima, and the estimator then
estimates the posterior variances from the winner's factor. Here:

* every map's ball search is ``fit_matern``'s search with its evaluations on a lattice of
  step ``SNAP_STEP`` in ``log κ²`` and ``log r̃`` (each point it asks for rounded to the
  nearest: ``κ²`` and ``r̃`` within 10 %), and the maps' searches run in step
  (:func:`lockstep`, generators of :func:`~flgp.precision.gaussian.search_steps`): each
  round, a point several maps ask for is factored once and gives every map its
  evidence (one solve of several right-hand sides), kept for the maps that reach it in a
  later round. Maps start from the same grid and
  step alike, so on the motor map's mask 100 maps asked for ~2.5 times as many
  evaluations as were factored;
* each lattice point some map's optimum lies at (one a contending order) is factored once
  on the whole graph: the evidence and posterior mean of every map there, and the
  posterior variances in units of the amplitude - which depend on ``(ν, κ², r)`` alone -
  estimated once a winning point.

What the lattice costs, measured on the motor map and smooth random fields on its mask: a
step of 0.25 in ``log κ²`` or ``log r`` away from a map's optimum moves its test error by
0.0-2.2 %; the lattice's optimum lies within about a step of the continuous search's (on
100 maps: test errors within 2 % of the single-map fits', docs/images.md). It is the only
difference from ``fit_matern`` map by map (the same ball, the same search steps, the same
contenders, the same whole-graph choice of the order, the same variance estimator and
seed).
"""

from __future__ import annotations

import numpy as np

from .cholesky import NotPositiveDefiniteError
from .gaussian import (FACTOR_MAX_NODES, FAR_MARGIN, SEARCH_MAX_NODES, MaternRegression,
                       search_steps, search_subgraph)
from .matern import MATERN_ORDERS

__all__ = ["SNAP_STEP", "SharedVariances", "fit_matern_maps", "lockstep", "ball_searches"]

# the lattice step of the maps' searches, in log κ² and log r̃
SNAP_STEP = 0.2


def lockstep(steps, evaluate_many) -> list:
    """Run several searches (generators of :func:`~flgp.precision.gaussian.search_steps`)
    in step: each round takes every unfinished search's next evaluation ``(ν, log κ², log
    r̃)``, and the searches that ask for the same point get it from one call
    ``evaluate_many(point, which)`` (``which``: their indices; one fit or None each). Each
    search goes exactly as it would alone (:func:`~flgp.precision.gaussian.drive`) with
    the same evaluations. Returns what each returns, or the exception it raised."""
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
    """Each map's (column of ``Z``) search on the ball of
    :func:`~flgp.precision.gaussian.search_subgraph` - ``fit_matern``'s search, on the lattice
    of step ``SNAP_STEP`` - all maps in step (:func:`lockstep`): a point that several maps
    ask for in one round is factored once, their evidences from one solve. One entry a map:
    ``({ν: (log κ², log r̃, κ², r)}, evaluations, {ν: (κ², r, log evidence)})`` - the
    orders within ``FAR_MARGIN`` nats of the ball's best with their optima (lattice
    points), the evaluations of its best order, as ``fit_matern`` counts them; None for
    every map when fewer than 2 observed nodes lie in the ball, or for a map whose search
    found nothing factorable (``fit_matern`` then fits it alone). ``graph`` is in its own
    units."""
    Z = np.asarray(Z, dtype=np.float64).reshape(np.size(observed), -1)
    k = Z.shape[1]
    sub, sub_obs, sub_Z = search_subgraph(graph, observed, Z, search_max_nodes)
    if sub_obs.size < 2:
        return [None] * k
    regs, done = {}, {}

    def evaluate_many(point, which):
        # every map's fit at a point factored once: a map that asks for it in a later
        # round (another map's path crossing its own) takes it from here
        if point not in done:
            nu, u, v = point
            if nu not in regs:
                regs[nu] = MaternRegression(sub, sub_obs, sub_Z, nu)
            reg = regs[nu]
            try:
                kappa2 = float(np.exp(u))
                fits = reg.evaluate_each(kappa2,
                                         float(np.exp(v)) * reg.prior_variance(kappa2))
            except NotPositiveDefiniteError:
                fits = [None] * k
            for fit in fits:
                if fit is not None:
                    fit.mean = None             # the ball's means are not used
            done[point] = fits
        return [done[point][i] for i in which]

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


def whole_graph_fits(graph, observed, Z, nu, kappa2, ratio, n_samples=None,
                     random_state=0):
    """``(fits, variances)`` at one lattice point on the whole graph, from one
    factorisation: the fits (:meth:`MaternRegression.evaluate_each`) of the maps ``Z``
    (``(m, k)``), and with ``n_samples`` the posterior variances at unit amplitude
    (:func:`unit_variances`' estimate, from the factor in hand); ``(None, None)`` where
    ``Q̃`` cannot be factored there."""
    reg = MaternRegression(graph, observed, Z, nu)
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
    :meth:`MaternRegression.variances` uses, with the same draws for the same seed)."""
    return MaternRegression(graph, observed, np.zeros(np.size(observed)), nu) \
        .unit_variances_rbmc(kappa2, ratio, n_samples, random_state)


class SharedVariances:
    """The regression of a map fitted by :func:`fit_matern_maps`, as the estimators read it:
    the posterior variances at its lattice point (shared with the maps there) scaled by
    its amplitude, and the number of evaluations of its ball search."""

    factored = True                 # draws from the factor at its lattice point

    def __init__(self, unit_variance, unit_se, n_samples, random_state, n_evaluations,
                 observed_sum_se=None):
        self.unit_variance, self.unit_se = unit_variance, unit_se
        self.observed_sum_se = observed_sum_se     # of Σ diag(Q̃⁻¹) at the observed nodes
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


def fit_matern_maps(graph, observed, Z, nus=MATERN_ORDERS, *, n_samples: int = 64,
                  random_state=0, search_max_nodes: int = SEARCH_MAX_NODES, run=None,
                  n_groups: int = 1):
    """:func:`~flgp.precision.gaussian.fit_matern` of each map (a column of ``Z``, standardised
    targets at the nodes ``observed``), its search on the lattice ``SNAP_STEP``, the
    searches in step and the whole graph's factorisations and variances shared among the
    maps that ask for one point (see the module notes).

    ``graph`` in any units (the search runs in its own, as ``fit_matern``'s). ``run(fn,
    tasks)`` returns ``[fn(*args) for args in tasks]`` - in processes, say (default: in
    this one): it is called three times, for the maps' ball searches (``n_groups`` tasks:
    the maps in that many groups of consecutive maps, each group in step), the lattice
    points' whole-graph fits (with the variances where a winner is expected) and the
    variances of the other winning points (often no task). The results do not depend on
    ``n_groups``. Returns one entry a map: ``(best
    MaternFit, SharedVariances, {ν: MaternFit})`` as ``fit_matern`` returns them (the fits in the
    graph's own units, ``length_unit`` and ``mass_unit`` set; the variances ``n_samples``
    draws seeded by ``random_state``), or None for a map the ball cannot search (``fit_matern`` fits it
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
    # the costliest first (the highest orders, with the variances), for an even share
    # among processes
    points = sorted(asks, key=lambda p: (p not in likely, -p[0]))
    evaluated = run(whole_graph_fits, [(own, observed, Z[:, asks[p]], p[0]) + where[p]
                                       + ((n_samples, random_state) if p in likely else ())
                                       for p in points])
    by_map = [dict() for _ in range(k)]          # ν -> (point, fit)
    estimated = {}
    for p, (fits, var) in zip(points, evaluated):
        for j, fit in zip(asks[p], fits or ()):
            by_map[j][p[0]] = (p, fit)
        if var is not None:
            estimated[p] = var
    winners = {}
    for j in range(k):
        if by_map[j]:
            p, _ = max(by_map[j].values(), key=lambda entry: entry[1].log_evidence)
            winners.setdefault(p, []).append(j)
    missing = [p for p in winners if p not in estimated]
    estimated.update(zip(missing, run(unit_variances, [
        (own, observed, p[0]) + where[p] + (n_samples, random_state) for p in missing])))
    out = [None] * k
    for p in winners:
        var, se, sum_se = estimated[p]
        for j in winners[p]:
            fits = {nu: fit for nu, (_, fit) in by_map[j].items()}
            for fit in fits.values():
                fit.length_unit, fit.mass_unit = length, mass
            out[j] = (fits[p[0]], SharedVariances(var, se, n_samples, random_state,
                                                  searched[j][1], sum_se), fits)
    return out
