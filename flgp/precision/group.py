r"""A population map from many subjects' maps on one graph: a two-level graph Matérn model,
its joint posterior from one sparse factor, and its hyperparameters from the data (user
guide: docs/excursions.md, "A group map from many subjects").

``S`` subject maps observed at every node of one graph (``n`` nodes, a common mask):

.. math::

    y_s = g + d_s + \varepsilon_s, \qquad
    g \sim N(\mu 1, A_g Q_{\nu_g}(\kappa_g)^{-1}), \quad
    d_s \sim N(0, A_d Q_{\nu_d}(\kappa_d)^{-1}) \ \text{i.i.d.}, \quad
    \varepsilon_s \sim N(0, \sigma^2 I),

``Q_ν(κ)`` the graph Matérn precision (:mod:`flgp.precision.matern`), one noise variance for
every subject. The mean map ``ȳ = g + d̄ + ε̄`` is sufficient for ``g``; with ``c = S / σ²``
the posterior of ``x = (g, d̄)`` has the sparse ``2n × 2n`` precision

.. math::

    J = \begin{pmatrix} Q_g / A_g + c I & c I \\ c I & S Q_d / A_d + c I \end{pmatrix}

and mean ``(μ1, 0) + J⁻¹ c [ȳ - μ1; ȳ - μ1]``, factored once; ``g``'s mean, variances and
joint draws are the first block.

**The likelihood.** With ``Σ_g = A_g Q_g⁻¹``, ``Σ_w = A_d Q_d⁻¹ + σ² I`` and ``H = [I, I]``,
a rotation of the subjects splits ``log p(y_1, ..., y_S)`` into the mean term
``log N(ȳ; μ1, Σ_g + Σ_w/S) - (n/2) log S``, from the factor of ``J``
(``log |Σ_g + Σ_w/S| = -n log c + log |J| - log |Q_g/A_g| - log |S Q_d/A_d|``,
``rᵀ(Σ_g + Σ_w/S)⁻¹ r = c rᵀr - c² (Hᵀr)ᵀ J⁻¹ (Hᵀr)``), and the within term, ``S - 1``
independent ``N(0, Σ_w)`` maps (from the deviations ``y_s - ȳ``).

**Hyperparameters from the data**: maximum likelihood in two stages, each by the single-map
search (:func:`~flgp.precision.gaussian.search_steps`) with every kept order polished by
Nelder-Mead in ``(log κ², log r̃)`` (the ridges are narrower than the line searches
resolve): (1) ``(ν_d, κ_d, A_d, σ²)`` from the within term, ``A_d`` profiled; (2) ``(ν_g,
κ_g, A_g, μ)`` from the mean term, ``μ`` profiled, ``A_g`` searched as
``r̃_g = v̄_w / (A_g v̄_g(κ_g))`` (``v̄``: mean prior variances of ``Σ_w/S`` and ``Q_g⁻¹``).
Graphs of more than ``2 SEARCH_MAX_NODES`` nodes are searched on a ball
(:func:`~flgp.precision.gaussian.search_subgraph`), then ``(κ_g, A_g)`` polished on the
whole graph, where ``g``'s effects may lie outside the ball. The estimates are plugged in.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .cholesky import NotPositiveDefiniteError, PatternCholesky
from .excursion import EXACT_SD_MAX_NODES, RBMC_SAMPLES, PosteriorDraws, draw_settings
from .gaussian import (FACTOR_MAX_NODES, SEARCH_MAX_NODES, MaternFit, MaternRegression,
                       diagonal_of_inverse, drive, factors, polish_order, rbmc_variances,
                       search_steps, search_subgraph)
from .matern import MATERN_ORDERS, MaternFamily, check_order

__all__ = ["GroupParameters", "GroupPosterior", "fit_group", "group_log_likelihood",
           "contrast_draws", "NOISE_SPREAD_WARNING"]

_LOG_2PI = np.log(2.0 * np.pi)
# fit_group warns when the subjects' roughness about ȳ spreads over more than this factor
NOISE_SPREAD_WARNING = 4.0
# evaluations (factors of the whole J) of the whole-graph polish after a ball's search
WHOLE_GRAPH_POLISH_EVALUATIONS = 60


@dataclass
class GroupParameters:
    """The hyperparameters of the two-level model (module notes), in the units of their
    graph (``κ²`` in ``1 / length²``; ``A`` of ``A Q_ν(κ)⁻¹`` on it) and of the maps.

    Attributes
    ----------
    nu_group, kappa2_group, amplitude_group : int, float, float
        ``ν_g``, ``κ_g²``, ``A_g``: the group map's prior.
    level : float or None
        ``μ``, the group map's prior mean; None: its maximum-likelihood value given the
        others (filled in by :class:`GroupPosterior`).
    nu_subject, kappa2_subject, amplitude_subject : int, float, float
        ``ν_d``, ``κ_d²``, ``A_d``: each subject's deviation's prior.
    noise : float
        ``σ²``, each subject's noise variance.
    """

    nu_group: int
    kappa2_group: float
    amplitude_group: float
    level: float | None
    nu_subject: int
    kappa2_subject: float
    amplitude_subject: float
    noise: float

    def in_units(self, length: float, mass: float) -> "GroupParameters":
        """The same model on ``graph.in_units(length, mass)``: ``κ²`` times ``length²``, ``A``
        times ``length^{2ν} / mass`` (as ``Q_ν`` is), so ``A Q⁻¹`` is unchanged."""
        def amp(a, nu):
            return float(np.exp(np.log(a) + 2.0 * nu * np.log(length) - np.log(mass)))
        return replace(self, kappa2_group=self.kappa2_group * length ** 2,
                       amplitude_group=amp(self.amplitude_group, self.nu_group),
                       kappa2_subject=self.kappa2_subject * length ** 2,
                       amplitude_subject=amp(self.amplitude_subject, self.nu_subject))

    def checked(self) -> "GroupParameters":
        """Itself, or a ``ValueError`` naming the value out of range."""
        out = replace(self, nu_group=check_order(self.nu_group),
                      nu_subject=check_order(self.nu_subject))
        for name in ("kappa2_group", "amplitude_group", "kappa2_subject",
                     "amplitude_subject", "noise"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                    value, (numbers.Real, np.number)) or not (np.isfinite(value)
                                                              and value > 0):
                raise ValueError(f"{name} must be a finite number > 0; got {value!r}.")
        if self.level is not None and not (isinstance(self.level, (numbers.Real, np.number))
                                           and np.isfinite(self.level)):
            raise ValueError(f"level must be a finite number or None; got {self.level!r}.")
        return out


def _check_factor_reach(n_nodes: int) -> None:
    """A ``ValueError`` where ``J`` (``2 n`` variables) is beyond a sparse factor's reach."""
    if not factors(2 * n_nodes):
        raise ValueError(f"the joint posterior of a group map on {n_nodes} nodes has "
                         f"{2 * n_nodes} variables, beyond a sparse factor's reach here "
                         f"(FACTOR_MAX_NODES = {FACTOR_MAX_NODES}, or half the machine's "
                         f"memory): use a mask of at most {FACTOR_MAX_NODES // 2} voxels.")


def _checked_maps(maps, n_nodes: int) -> np.ndarray:
    """``maps`` as a float64 array ``(n, S)`` with ``S ≥ 2`` finite columns."""
    Y = np.asarray(maps, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[0] != n_nodes:
        raise ValueError(f"maps must be an array (n_nodes, n_subjects) with one row a node "
                         f"of the graph ({n_nodes} nodes); got shape {Y.shape}.")
    if Y.shape[1] < 2:
        raise ValueError(f"a group map needs at least 2 subjects' maps (their spread "
                         f"measures the subjects' deviations); got {Y.shape[1]}.")
    if not np.all(np.isfinite(Y)):
        row, col = np.argwhere(~np.isfinite(Y))[0]
        raise ValueError(f"maps hold {int((~np.isfinite(Y)).sum())} NaN or infinite "
                         f"value(s) (the first at node {row} of subject {col}); every "
                         f"subject must be observed at every node of the mask.")
    return Y


class _Prior:
    """``log |Q_ν(κ)|`` and ``v̄(κ)`` (mean of ``diag(Q_ν⁻¹)`` at a few nodes) of one order,
    from :class:`~flgp.precision.gaussian.MaternRegression`."""

    def __init__(self, graph, nu):
        self._reg = MaternRegression(graph, np.arange(graph.n_nodes), np.zeros(graph.n_nodes),
                                   nu)

    def logdet(self, kappa2):
        return self._reg.logdet_prior(kappa2)

    def variance(self, kappa2):
        return self._reg.prior_variance(kappa2)


class _Joint:
    """``J`` (module notes) for a fixed subjects' part: its factor (one symbolic analysis an
    order ``ν_g``), ``log p(ȳ)`` and ``g``'s posterior mean."""

    def __init__(self, graph, mean_map, n_subjects, nu_subject, kappa2_subject,
                 amplitude_subject, noise):
        self.graph, self.n = graph, graph.n_nodes
        self.ybar = np.asarray(mean_map, dtype=np.float64)
        self.S = int(n_subjects)
        self.c = self.S / float(noise)
        n = self.n
        Qd = MaternFamily.of(graph, nu_subject).matrix(kappa2_subject)
        self._lower_right = (self.S / amplitude_subject) * Qd + self.c * sp.identity(n)
        self._logdet_subject = (_Prior(graph, nu_subject).logdet(kappa2_subject)
                                + n * np.log(self.S / amplitude_subject))
        self._coupling = self.c * sp.identity(n, format="csc")
        self._chol, self._priors = {}, {}

    def prior(self, nu) -> _Prior:
        if nu not in self._priors:
            self._priors[nu] = _Prior(self.graph, nu)
        return self._priors[nu]

    def matrix(self, nu, kappa2, amplitude) -> sp.csc_matrix:
        Qg = MaternFamily.of(self.graph, nu).matrix(kappa2)
        upper_left = Qg / amplitude + self.c * sp.identity(self.n)
        return sp.bmat([[upper_left, self._coupling], [self._coupling, self._lower_right]],
                       format="csc")

    def factor(self, nu, kappa2, amplitude):
        """``(J, its factored PatternCholesky)``, or a ``NotPositiveDefiniteError``."""
        J = self.matrix(nu, kappa2, amplitude)
        if nu not in self._chol:
            self._chol[nu] = PatternCholesky(J)
        chol = self._chol[nu]
        chol.factor(J)
        return J, chol

    def evaluate(self, nu, kappa2, amplitude, level=None):
        """``(log N(ȳ; μ1, Σ_g + Σ_w/S), μ, g's mean, J, chol)``, ``μ`` = ``level`` or the
        maximiser."""
        J, chol = self.factor(nu, kappa2, amplitude)
        n, c, y = self.n, self.c, self.ybar
        ones = np.ones(n)
        X = chol.solve(c * np.column_stack([np.r_[y, y], np.r_[ones, ones]]))
        HX = X[:n] + X[n:]                      # (Hᵀa)ᵀ J⁻¹ c Hᵀ b = aᵀ HX_b
        yMy = c * (y @ y) - c * (y @ HX[:, 0])
        oMy = c * y.sum() - c * HX[:, 0].sum()
        oMo = c * n - c * HX[:, 1].sum()
        mu = oMy / oMo if level is None else float(level)
        quad = yMy - 2.0 * mu * oMy + mu * mu * oMo
        logdet_prior = (self.prior(nu).logdet(kappa2) - n * np.log(amplitude)
                        + self._logdet_subject)
        logdet_cov = -n * np.log(c) + chol.logdet() - logdet_prior
        log_lik = -0.5 * (quad + logdet_cov + n * _LOG_2PI)
        mean_g = mu + X[:n, 0] - mu * X[:n, 1]
        return float(log_lik), float(mu), mean_g, J, chol


def _within(graph, deviations, nu):
    """The MaternRegression of the deviation maps, every node observed."""
    return MaternRegression(graph, np.arange(graph.n_nodes), deviations, nu)


def _within_log_likelihood(reg, n_subjects, kappa2, ratio, amplitude=None):
    """``(within term, A_d)`` at ``(κ_d², r)`` (module notes), ``A_d`` given or profiled."""
    _, quad, logdet_S = reg._terms(kappa2, ratio)
    total = float(np.sum(quad))
    n, k = reg.n, n_subjects - 1
    if amplitude is None:
        amplitude = max(total, 1e-300) / (n * k)
    log_lik = -0.5 * (total / amplitude + k * (n * np.log(amplitude) + logdet_S)
                      + n * k * _LOG_2PI)
    return float(log_lik), float(amplitude)


def group_log_likelihood(graph, maps, parameters: GroupParameters) -> float:
    """The exact ``log p(y_1, ..., y_S)`` of the maps at given hyperparameters (module notes,
    "The likelihood").

    Parameters
    ----------
    graph : flgp.graph.PointGraph
    maps : array-like (n_nodes, n_subjects)
        One column a subject, every node observed, at least 2 subjects.
    parameters : GroupParameters
        In the units of ``graph`` and of the maps.

    Returns
    -------
    float
    """
    Y = _checked_maps(maps, graph.n_nodes)
    p = parameters.checked()
    length, mass = graph.own_units()
    own, q = graph.in_units(length, mass), p.in_units(length, mass)
    S = Y.shape[1]
    ybar = Y.mean(axis=1)
    within, _ = _within_log_likelihood(
        _within(own, Y - ybar[:, None], q.nu_subject), S, q.kappa2_subject,
        q.noise / q.amplitude_subject, q.amplitude_subject)
    joint = _Joint(own, ybar, S, q.nu_subject, q.kappa2_subject, q.amplitude_subject,
                   q.noise)
    mean_term = joint.evaluate(q.nu_group, q.kappa2_group, q.amplitude_group, q.level)[0]
    return mean_term - 0.5 * graph.n_nodes * np.log(S) + within


class _GroupBlock:
    """Draws and variances of ``g``, the first ``n`` of ``J``'s ``2n`` variables."""

    def __init__(self, chol, precision, n):
        self.chol, self.precision, self.n = chol, precision, int(n)

    def sample(self, b, rng):
        return self.chol.sample(b, rng)[:self.n]

    def variances(self, precision=None, random_state=0):
        if self.n <= EXACT_SD_MAX_NODES:
            return diagonal_of_inverse(self.chol.solve, self.chol.n, np.arange(self.n))
        seed = np.random.SeedSequence(random_state).spawn(1)[0]
        return rbmc_variances(self.precision, self.chol, RBMC_SAMPLES, seed)[0][:self.n]


class _Difference:
    """Draws and variances of ``g_a - g_b`` for independent ``g_a``, ``g_b``."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def sample(self, b, rng):
        return self.first.sample(b, rng) - self.second.sample(b, rng)

    def variances(self, precision=None, random_state=0):
        seeds = np.random.SeedSequence(random_state).spawn(2)
        return (self.first.variances(None, int(seeds[0].generate_state(1)[0]))
                + self.second.variances(None, int(seeds[1].generate_state(1)[0])))


class GroupPosterior:
    """The posterior of the group map ``g`` given the mean map ``ȳ`` (module notes).

    Parameters
    ----------
    graph : flgp.graph.PointGraph
    mean_map : array-like (n_nodes,)
        ``ȳ``, the mean of the subjects' maps.
    n_subjects : int
        ``S ≥ 2``.
    parameters : GroupParameters
        In the units of ``graph`` and of the maps.

    Attributes
    ----------
    mean : ndarray (n_nodes,)
        ``E[g | ȳ]``.
    log_likelihood : float
        ``log N(ȳ; μ1, Σ_g + Σ_w/S)`` (module notes).
    precision : scipy.sparse.csc_matrix (2 n_nodes, 2 n_nodes)
        ``J``, the joint posterior precision of ``(g, d̄)`` (the same in any units).
    parameters : GroupParameters
    n_subjects : int
    """

    def __init__(self, graph, mean_map, n_subjects, parameters: GroupParameters):
        p = parameters.checked()
        n = graph.n_nodes
        ybar = np.asarray(mean_map, dtype=np.float64)
        if ybar.shape != (n,) or not np.all(np.isfinite(ybar)):
            raise ValueError(f"mean_map must hold one finite value a node ({n} nodes); got "
                             f"shape {ybar.shape}.")
        if isinstance(n_subjects, (bool, np.bool_)) or not isinstance(
                n_subjects, numbers.Integral) or n_subjects < 2:
            raise ValueError(f"n_subjects must be a whole number >= 2; got {n_subjects!r}.")
        _check_factor_reach(n)
        length, mass = graph.own_units()
        q = p.in_units(length, mass)
        joint = _Joint(graph.in_units(length, mass), ybar, n_subjects, q.nu_subject,
                       q.kappa2_subject, q.amplitude_subject, q.noise)
        self.log_likelihood, level, self.mean, self.precision, chol = joint.evaluate(
            q.nu_group, q.kappa2_group, q.amplitude_group, q.level)
        self.parameters, self.n_subjects = replace(p, level=level), int(n_subjects)
        self._sampler = _GroupBlock(chol, self.precision, n)
        self._sd = {}

    @property
    def n_nodes(self) -> int:
        return int(self.mean.size)

    def marginal_sd(self, random_state=0) -> np.ndarray:
        """``g``'s posterior standard deviations: exact up to ``EXACT_SD_MAX_NODES`` nodes,
        else Rao-Blackwellised Monte Carlo seeded by ``random_state``."""
        if random_state not in self._sd:
            self._sd[random_state] = np.sqrt(np.maximum(
                self._sampler.variances(None, random_state), 0.0))
        return self._sd[random_state]

    def draws(self, n_samples: int = 1000, *, block_size=None,
              random_state=0) -> PosteriorDraws:
        """Joint draws of ``g`` from the factor of ``J``, as a
        :class:`~flgp.precision.excursion.PosteriorDraws`."""
        return _draws(self._sampler, self.mean, n_samples, block_size, random_state,
                      self.precision)


def _draws(sampler, mean, n_samples, block_size, random_state, precision):
    return PosteriorDraws(sampler, mean, 1.0,
                          *draw_settings(n_samples, block_size, random_state),
                          precision=precision)


def contrast_draws(first: GroupPosterior, second: GroupPosterior, n_samples: int = 1000, *,
                   block_size=None, random_state=0) -> PosteriorDraws:
    """Joint draws of ``g_a - g_b`` for two independent groups' posteriors on one graph:
    differences of independent draws, with the difference of the means and the summed
    variances."""
    if first.n_nodes != second.n_nodes:
        raise ValueError(f"the two groups' maps are on graphs of {first.n_nodes} and "
                         f"{second.n_nodes} nodes; a contrast needs one graph.")
    return _draws(_Difference(first._sampler, second._sampler), first.mean - second.mean,
                  n_samples, block_size, random_state, None)


def _search(graph, nus, evaluate):
    """``(best fit, evaluations)`` over ``nus``: the search with ``evaluate(ν, log κ²,
    log r̃)``, then each kept order polished (module notes)."""
    results, searches = drive(search_steps(graph, tuple(nus)), evaluate)
    n_evaluations = sum(s.n_evaluations for s in searches.values())
    for nu in list(results):
        best, n_polish = polish_order(graph, nu, searches[nu].best_point(), evaluate)
        n_evaluations += n_polish
        if best is not None and best.log_evidence > results[nu].log_evidence:
            results[nu] = best
    nu = max(results, key=lambda j: results[j].log_evidence)
    return results[nu], n_evaluations


def _group_evaluator(graph, ybar, n_subjects, nu_subject, kappa2_subject,
                     amplitude_subject, noise):
    """``(evaluate, joint, noise_scale)`` for stage 2 (module notes): ``evaluate(ν_g,
    log κ_g², log r̃_g)`` a fit (``μ`` in ``fit.level``; None where ``J`` cannot be factored),
    its :class:`_Joint`, and ``v̄_w``, which converts ``r̃_g``."""
    joint = _Joint(graph, ybar, n_subjects, nu_subject, kappa2_subject, amplitude_subject,
                   noise)
    # v̄_w: Σ_w / S's mean prior variance at a few nodes
    noise_scale = (amplitude_subject * joint.prior(nu_subject).variance(kappa2_subject)
                   + noise) / n_subjects

    def evaluate(nu, u, v):
        try:
            kappa2 = float(np.exp(u))
            amplitude = noise_scale / (float(np.exp(v)) * joint.prior(nu).variance(kappa2))
            log_lik, mu = joint.evaluate(nu, kappa2, amplitude)[:2]
        except NotPositiveDefiniteError:
            return None
        fit = MaternFit(nu=nu, kappa2=kappa2, ratio=noise_scale / amplitude,
                      amplitude=amplitude, log_evidence=log_lik, mean=None)
        fit.level = mu
        return fit

    return evaluate, joint, noise_scale


def _fit_own_units(graph, Y, nus_group, nus_subject):
    """``(GroupParameters, within term, record)`` on a graph in its own units (module
    notes)."""
    S = Y.shape[1]
    ybar = Y.mean(axis=1)
    deviations = Y - ybar[:, None]
    regs = {}

    def evaluate_within(nu, u, v):
        if nu not in regs:
            regs[nu] = _within(graph, deviations, nu)
        reg = regs[nu]
        try:
            kappa2 = float(np.exp(u))
            ratio = float(np.exp(v)) * reg.prior_variance(kappa2)
            log_lik, amplitude = _within_log_likelihood(reg, S, kappa2, ratio)
        except NotPositiveDefiniteError:
            return None
        return MaternFit(nu=nu, kappa2=kappa2, ratio=ratio, amplitude=amplitude,
                       log_evidence=log_lik, mean=None)

    within, n_within = _search(graph, nus_subject, evaluate_within)
    noise = within.amplitude * within.ratio
    regs.clear()
    evaluate_group = _group_evaluator(graph, ybar, S, within.nu, within.kappa2,
                                      within.amplitude, noise)[0]
    group, n_group = _search(graph, nus_group, evaluate_group)
    params = GroupParameters(nu_group=group.nu, kappa2_group=group.kappa2,
                             amplitude_group=group.amplitude, level=group.level,
                             nu_subject=within.nu, kappa2_subject=within.kappa2,
                             amplitude_subject=within.amplitude, noise=noise)
    return params, within.log_evidence, dict(n_evaluations_subject=n_within,
                                             n_evaluations_group=n_group)


def _refined_on_whole_graph(graph, ybar, n_subjects, params: GroupParameters):
    """``(parameters, evaluations)``: a ball's ``(κ_g², A_g)`` polished on the whole graph."""
    evaluate, joint, noise_scale = _group_evaluator(
        graph, ybar, n_subjects, params.nu_subject, params.kappa2_subject,
        params.amplitude_subject, params.noise)
    nu = params.nu_group
    variance = joint.prior(nu).variance(params.kappa2_group)
    start = (np.log(params.kappa2_group),
             np.log(noise_scale / (params.amplitude_group * variance)))
    best, n_evaluations = polish_order(graph, nu, start, evaluate,
                                       WHOLE_GRAPH_POLISH_EVALUATIONS)
    if best is None:
        return params, n_evaluations
    return replace(params, kappa2_group=best.kappa2, amplitude_group=best.amplitude,
                   level=best.level), n_evaluations


def fit_group(graph, maps, *, nus=MATERN_ORDERS, subject_nus=None,
              search_max_nodes: int = SEARCH_MAX_NODES):
    """The two-level model's hyperparameters from the subjects' maps, and the group map's
    posterior (module notes).

    Parameters
    ----------
    graph : flgp.graph.PointGraph
        The common graph (a mask's lattice), at most ``FACTOR_MAX_NODES / 2`` nodes.
    maps : array-like (n_nodes, n_subjects)
        One column a subject, every node observed, at least 2 subjects.
    nus : sequence of int, default=MATERN_ORDERS
        The orders searched for the group map's prior.
    subject_nus : sequence of int, optional
        The orders searched for the subjects' deviations (default: ``nus``).
    search_max_nodes : int, default=SEARCH_MAX_NODES
        Graphs of more than twice this many nodes are searched on a ball of this many.

    Returns
    -------
    (GroupPosterior, dict)
        The posterior at the fitted :class:`GroupParameters` (``posterior.parameters``, in
        the units of ``graph``) and a record: ``log_likelihood`` (of every map, at the fit),
        the factorisations ``n_evaluations_subject``, ``n_evaluations_group`` and, after a
        ball's search, ``n_evaluations_whole_graph``; ``searched_nodes``; ``noise_spread``
        (the largest over the smallest subject's roughness ``(y_s - ȳ)ᵀ G (y_s - ȳ)``).

    Raises
    ------
    ValueError
        On invalid or identical maps, fewer than 2 subjects, no order, or too many nodes.

    Warns
    -----
    UserWarning
        Where ``noise_spread`` exceeds ``NOISE_SPREAD_WARNING``.
    """
    n = graph.n_nodes
    Y = _checked_maps(maps, n)
    S = Y.shape[1]
    nus = tuple(check_order(nu) for nu in nus)
    subject_nus = nus if subject_nus is None else tuple(check_order(nu)
                                                        for nu in subject_nus)
    if not nus or not subject_nus:
        raise ValueError("nus and subject_nus must name at least one order.")
    _check_factor_reach(n)
    ybar = Y.mean(axis=1)
    deviations = Y - ybar[:, None]
    if np.max(np.abs(deviations)) <= 1e-12 * max(np.max(np.abs(Y)), 1e-300):
        raise ValueError("the subjects' maps are identical at every node: there is no "
                         "spread between subjects to fit the deviations and the noise.")
    # each subject's roughness (y_s - ȳ)ᵀ G (y_s - ȳ): the noise's share of it grows with
    # the noise, a smooth deviation's is small
    roughness = np.einsum("is,is->s", deviations, graph.stiffness @ deviations)
    noise_spread = float(np.max(roughness) / max(np.min(roughness), 1e-300))
    if noise_spread > NOISE_SPREAD_WARNING:
        worst = int(np.argmax(roughness))
        warnings.warn(f"the subjects' maps are rough about their mean to degrees spread "
                      f"over a factor {noise_spread:.1f} (subject {worst} the most): the "
                      f"model has one noise variance for every subject, so the noisier "
                      f"ones weigh as much as the others and the fitted noise is an "
                      f"average. Check those maps, or leave them out.", UserWarning,
                      stacklevel=2)
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    if n > 2 * search_max_nodes:
        search_graph, _, search_maps = search_subgraph(own, np.arange(n), Y,
                                                       int(search_max_nodes))
    else:
        search_graph, search_maps = own, Y
    params_own, within_log_lik, record = _fit_own_units(search_graph, search_maps, nus,
                                                        subject_nus)
    m = search_graph.n_nodes
    if m != n:
        params_own, record["n_evaluations_whole_graph"] = _refined_on_whole_graph(
            own, ybar, S, params_own)
    params = params_own.in_units(1.0 / length, 1.0 / mass)
    if m != n:
        params = replace(params, level=None)        # μ profiled on the whole graph
    posterior = GroupPosterior(graph, ybar, S, params)
    log_likelihood = (posterior.log_likelihood - 0.5 * n * np.log(S) + within_log_lik
                      if m == n else group_log_likelihood(graph, Y, posterior.parameters))
    record.update(log_likelihood=float(log_likelihood), searched_nodes=int(m),
                  noise_spread=noise_spread)
    return posterior, record
