r"""Excursion sets of a Gaussian posterior from its joint draws (Bolin and Lindgren 2015;
user guide, with the method in words: docs/excursions.md).

For a level ``u``, the *excursion set* ``E_α`` is the largest set ``D`` of candidate nodes
with ``P(f > u on all of D | data) ≥ 1 - α``; the *excursion function*
``F(s) = sup{1 - α : s ∈ E_α}`` gives every ``α`` at once, and ``F(s) ≤ p(s)``, the
marginal probability ``P(f(s) > u | data)``. The side ``f < u`` is ``-f`` at ``-u``.

The candidates are the prefixes ``D_k`` of Bolin and Lindgren's marginal ordering ``s_1,
s_2, ...`` (decreasing ``(μ(s) - u) / σ(s)``, from given standard deviations, not the
draws), with decreasing joint probabilities

.. math:: P_k = P(f(s_1) > u, \dots, f(s_k) > u \mid \text{data}) = F(s_k).

With ``S`` draws and ``T_j`` the first position where draw ``j`` does not exceed ``u``,
``\hat P_k = \#\{j : T_j > k\} / S`` (unbiased, non-increasing, binomial standard error
``\sqrt{P_k (1 - P_k) / S}``). The set uses the one-sided Clopper-Pearson lower bound
``L_k`` at confidence ``Φ(n_sd)``; as the counts are nested, with probability at least
``Φ(n_sd)`` over the draws its joint posterior probability is at least ``1 - α``.

Nodes with ``p(s) < F_lim`` have ``F < F_lim`` (Bolin and Lindgren's ``F.limit``), so only
the candidates ``T`` (:func:`candidate_nodes`) need drawing: with ``T`` eliminated last, the
factor's trailing block ``L₂₂`` has ``L₂₂ L₂₂ᵀ`` the marginal precision of ``f_T``, and
``L₂₂⁻ᵀ z`` is an exact joint draw (CHOLMOD's postordering may add a few other nodes).

References
----------
Bolin, D. and Lindgren, F. (2015). Excursion and contour uncertainty regions for latent
Gaussian models. JRSS-B 77(1), 85-106.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import ndtr
from scipy.stats import beta as beta_distribution

from .cholesky import (NotPositiveDefiniteError, PatternCholesky, _cholmod, _lower,
                       fill_reducing_order)
from .gaussian import FACTOR_MAX_NODES, diagonal_of_inverse, factors, rbmc_variances
from .matern import MaternFamily, check_order

__all__ = ["ExcursionFunction", "ExcursionSet", "PosteriorDraws", "excursion_function",
           "graph_matern_posterior_draws", "candidate_nodes", "dense_block_max_nodes",
           "draw_settings", "SIDES", "UNREACHABLE_PROBABILITY"]

SIDES = (">", "<")
# excursion_function warns (empty sets) where no marginal probability exceeds this
UNREACHABLE_PROBABILITY = 1e-12
# numbers in a block of draws (32 MiB); at least MIN_BLOCK draws
BLOCK_NUMBERS = 1 << 22
MIN_BLOCK = 8
# candidates are drawn from a dense trailing block up to this many (~k³/3 flops) ...
DENSE_BLOCK_MAX_NODES = 6000
# ... and while k n is at most this: eliminating k nodes last fills up to k (n - k) entries
DENSE_BLOCK_MAX_FILL = 5e7
# marginal_sd: exact up to this many nodes, else RBMC with RBMC_SAMPLES draws (~2-4 % error)
EXACT_SD_MAX_NODES = 2048
RBMC_SAMPLES = 256


@dataclass
class ExcursionSet:
    """The excursion set at one level ``α`` (:meth:`ExcursionFunction.set_at`).

    Attributes
    ----------
    mask : ndarray of bool (n,)
        The nodes of ``E_α``.
    alpha, level : float
        ``α`` and ``u``.
    side : {">", "<"}
    n_nodes_in_set : int
    joint_probability, joint_se, joint_lower : float
        ``\\hat P_K``, its binomial standard error and its Clopper-Pearson lower bound
        (``≥ 1 - α``); 1, 0 and 1 for an empty set.
    function : ExcursionFunction
        The excursion function it was read from.
    """

    mask: np.ndarray
    alpha: float
    level: float
    side: str
    n_nodes_in_set: int
    joint_probability: float
    joint_se: float
    joint_lower: float
    function: "ExcursionFunction"


@dataclass
class ExcursionFunction:
    """The excursion function of a posterior at a level (module notes).

    Attributes
    ----------
    level : float
        ``u``.
    side : {">", "<"}
        ``">"``: the sets where ``f > u``; ``"<"``: where ``f < u``.
    marginal : ndarray (n,)
        Each node's marginal probability ``Φ((μ - u) / σ)`` of lying on ``side`` (not joint).
    order : ndarray of int (n,)
        The nodes by decreasing marginal probability: ``order[k - 1]`` is ``s_k``.
    joint, joint_se, joint_lower : ndarray (n,)
        At ``[k - 1]``: ``\\hat P_k``, the fraction of draws exceeding at all of ``s_1, ...,
        s_k``, its binomial standard error and its one-sided Clopper-Pearson lower bound
        ``L_k`` at confidence ``Φ(n_sd)``; non-increasing; NaN beyond :attr:`n_computed`.
    F, F_lower : ndarray (n,)
        By node: ``F(s_k) = \\hat P_k`` and ``L_k``; ``E_α = {F_lower ≥ 1 - α}``.
    n_samples : int
        ``S``, the posterior draws.
    n_sd : float
    n_computed : int
        The positions ``k`` with ``P_k`` computed (``n`` unless only candidates were drawn).
    F_limit : float
        Where ``n_computed < n``: the marginal probability of ``s_{n_computed + 1}``, an
        upper bound on ``F`` (NaN there) at the nodes not computed; else 0.
    """

    level: float
    side: str
    marginal: np.ndarray
    order: np.ndarray
    joint: np.ndarray
    joint_se: np.ndarray
    joint_lower: np.ndarray
    n_samples: int
    n_sd: float
    n_computed: int = -1
    F_limit: float = 0.0

    def __post_init__(self):
        if self.n_computed < 0:
            self.n_computed = int(self.order.size)

    @property
    def n_nodes(self) -> int:
        return int(self.order.size)

    @property
    def F(self) -> np.ndarray:
        return self._at_nodes(self.joint)

    @property
    def F_lower(self) -> np.ndarray:
        return self._at_nodes(self.joint_lower)

    def _at_nodes(self, by_position: np.ndarray) -> np.ndarray:
        out = np.empty(self.n_nodes)
        out[self.order] = by_position
        return out

    def set_size(self, alpha) -> int:
        """``K = |E_α|``, the largest ``k`` with ``L_k ≥ 1 - α`` (0 if none)."""
        alpha = _checked_alpha(alpha)
        K = self.n_computed
        # joint_lower is non-increasing: the nodes with L_k >= 1 - α are a prefix
        size = int(np.count_nonzero(self.joint_lower[:K] >= 1.0 - alpha))
        if size == K and K < self.n_nodes and self.F_limit >= 1.0 - alpha:
            raise ValueError(f"the set at alpha={alpha:g} may reach beyond the {K} nodes "
                             f"drawn (the next has marginal probability {self.F_limit:.3g} "
                             f">= 1 - alpha); draw more candidates (a lower F_limit).")
        return size

    def set_at(self, alpha) -> ExcursionSet:
        """``E_α``: the first :meth:`set_size` nodes of :attr:`order` (module notes)."""
        K = self.set_size(alpha)
        mask = np.zeros(self.n_nodes, dtype=bool)
        mask[self.order[:K]] = True
        if K == 0:
            joint, se, lower = 1.0, 0.0, 1.0
        else:
            joint, se = float(self.joint[K - 1]), float(self.joint_se[K - 1])
            lower = float(self.joint_lower[K - 1])
        return ExcursionSet(mask=mask, alpha=float(alpha), level=self.level, side=self.side,
                            n_nodes_in_set=K, joint_probability=joint, joint_se=se,
                            joint_lower=lower, function=self)


def _checked_alpha(alpha) -> float:
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (numbers.Real,
                                                                     np.number)):
        raise ValueError(f"alpha must be a number in (0, 1), e.g. 0.05; got {alpha!r}.")
    alpha = float(alpha)
    if not (np.isfinite(alpha) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must lie strictly between 0 and 1 (e.g. 0.05: a set whose "
                         f"joint probability is at least 0.95); got {alpha!r}.")
    return alpha


def _checked_level(u) -> float:
    if isinstance(u, (bool, np.bool_)) or not isinstance(u, (numbers.Real, np.number)):
        raise ValueError(f"u (the level) must be a finite number in the units of the "
                         f"mean; got {u!r}.")
    u = float(u)
    if not np.isfinite(u):
        raise ValueError(f"u (the level) must be a finite number in the units of the "
                         f"mean; got {u!r}.")
    return u


def _checked_side(side) -> str:
    if side not in SIDES:
        raise ValueError(f"side must be '>' (the set where f > u) or '<' (where f < u); "
                         f"got {side!r}.")
    return side


def _checked_vector(values, name: str, n=None, what="") -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be one value a node (1-d); got shape {values.shape}.")
    if n is not None and values.size != n:
        raise ValueError(f"{name} has {values.size} entries; the posterior has {n} nodes.")
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"{name} holds {int(bad.sum())} non-finite value(s) (first at node "
                         f"{int(np.flatnonzero(bad)[0])}){what}; give finite posterior "
                         f"{name}s (NaN: a node the fit did not reach).")
    return values


def _clopper_pearson_lower(counts: np.ndarray, n_samples: int, n_sd: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bounds at confidence ``Φ(n_sd)``: the ``1 - Φ(n_sd)``
    quantile of ``Beta(x, S - x + 1)`` (0 at ``x = 0``)."""
    tail = float(ndtr(-n_sd))
    values, inverse = np.unique(counts, return_inverse=True)
    lower = np.zeros(values.size)
    positive = values > 0
    lower[positive] = beta_distribution.ppf(tail, values[positive],
                                            n_samples - values[positive] + 1)
    return lower[inverse]


def _standardised(mean, sd, u, sign):
    """``sign (μ - u) / σ`` (``±∞`` where ``σ = 0``)."""
    gap = sign * (mean - u)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, gap / np.where(sd > 0, sd, 1.0),
                        np.where(gap > 0, np.inf, -np.inf))


def candidate_nodes(mean, sd, u, side: str = ">", F_limit: float = 0.5) -> np.ndarray:
    """The nodes (at least one) whose marginal probability of ``f`` on ``side`` of ``u`` is
    at least ``F_limit``, in :func:`excursion_function`'s order: the ``nodes`` to draw for
    ``F`` down to ``F_limit``."""
    u, side = _checked_level(u), _checked_side(side)
    mean = _checked_vector(mean, "mean")
    sd = _checked_vector(sd, "sd", mean.size)
    F_limit = float(F_limit)
    if not (np.isfinite(F_limit) and 0.0 <= F_limit < 1.0):
        raise ValueError(f"F_limit must lie in [0, 1) (0: every node); got {F_limit!r}.")
    z = _standardised(mean, sd, u, 1.0 if side == ">" else -1.0)
    order = np.argsort(-z, kind="stable")
    count = max(int(np.count_nonzero(ndtr(z) >= F_limit)), 1)
    return order[:count]


def _blocks(draws):
    """An array of draws as one block, or the blocks of an iterable."""
    if isinstance(draws, np.ndarray):
        yield draws
        return
    for block in draws:
        yield block


def excursion_function(mean, draws, u, side: str = ">", *, sd=None,
                       n_sd: float = 2.0, nodes=None) -> ExcursionFunction:
    """The excursion function of a Gaussian posterior at level ``u`` by Monte Carlo over its
    joint draws (Bolin and Lindgren 2015; module notes).

    Parameters
    ----------
    mean : array-like (n,)
        The posterior mean at each node.
    draws : ndarray (n, S) or iterable of ndarray (n, b)
        Joint posterior draws of ``f`` (means included): one array, or blocks
        (:func:`graph_matern_posterior_draws`).
    u : float
        The level, in the units of ``mean``.
    side : {">", "<"}, default=">"
        ``">"``: the sets where ``f > u``; ``"<"``: where ``f < u``.
    sd : array-like (n,), optional
        Posterior standard deviations (``≥ 0``) that order the nodes and give the marginal
        probabilities. Default: ``draws.marginal_sd()`` for a :class:`PosteriorDraws`,
        else the standard deviations of an array of draws about ``mean``.
    n_sd : float, default=2.0
        Confidence ``Φ(n_sd)`` of the lower bounds (2: 97.7 %).
    nodes : array-like of int, optional
        The nodes the rows of ``draws`` hold (default: every node, in order, or a
        :class:`PosteriorDraws`'s own). ``P_k`` is computed on the longest prefix of the
        order they cover, NaN beyond.

    Returns
    -------
    ExcursionFunction

    Raises
    ------
    ValueError
        On a non-finite ``u``, means, standard deviations or draws, a bad ``side``, negative
        standard deviations or mismatched shapes. A ``u`` that no node reaches with marginal
        probability above ``UNREACHABLE_PROBABILITY`` only warns: its sets are empty.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> mean = np.array([2.0, 1.5, -1.0])
    >>> draws = mean[:, None] + rng.standard_normal((3, 4000))
    >>> ef = excursion_function(mean, draws, 0.0, sd=np.ones(3))
    >>> ef.order.tolist()
    [0, 1, 2]
    >>> bool(ef.joint[1] <= min(ef.marginal[0], ef.marginal[1]) + 0.02)
    True
    """
    u = _checked_level(u)
    side = _checked_side(side)
    n_sd = float(n_sd)
    if not (np.isfinite(n_sd) and n_sd >= 0):
        raise ValueError(f"n_sd must be a finite number >= 0 (2: lower bounds at 97.7 %); "
                         f"got {n_sd!r}.")
    mean = _checked_vector(mean, "mean")
    n = mean.size
    if nodes is None:
        nodes = getattr(draws, "nodes", None)
    rows = np.arange(n) if nodes is None else np.asarray(nodes)
    if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)) \
            or rows.size == 0 or rows.min() < 0 or rows.max() >= n \
            or np.unique(rows).size != rows.size:
        raise ValueError(f"nodes must be distinct node indices in [0, {n}), one a row of "
                         f"draws; got {np.asarray(nodes)!r:.80}.")
    m = rows.size
    if isinstance(draws, np.ndarray):
        if draws.ndim != 2 or draws.shape[0] != m or draws.shape[1] < 1:
            raise ValueError(f"draws must be an array (n, S) of posterior draws, one row a "
                             f"node ({m} nodes); got shape {draws.shape}.")
        draws = np.asarray(draws, dtype=np.float64)
    if sd is None:
        if hasattr(draws, "marginal_sd") and m == n:
            sd = draws.marginal_sd()
        elif isinstance(draws, np.ndarray) and m == n:
            sd = np.sqrt(np.mean((draws - mean[:, None]) ** 2, axis=1))
        elif m < n:
            raise ValueError(f"give sd (the posterior standard deviations at all {n} "
                             f"nodes): draws of {m} of them cannot give the others'.")
        else:
            raise ValueError("give sd (the posterior standard deviations) with draws given "
                             "in blocks: the nodes are ordered by them before the draws "
                             "are counted.")
    sd = _checked_vector(sd, "sd", n)
    if np.any(sd < 0):
        raise ValueError(f"sd must be >= 0 (standard deviations); node "
                         f"{int(np.flatnonzero(sd < 0)[0])} has {sd[sd < 0][0]!r}.")
    sign = 1.0 if side == ">" else -1.0
    z = _standardised(mean, sd, u, sign)
    marginal = ndtr(z)
    order = np.argsort(-z, kind="stable")
    if not np.any(marginal > UNREACHABLE_PROBABILITY):
        warnings.warn(f"no node has marginal probability above {UNREACHABLE_PROBABILITY:g} "
                      f"of f {side} {u:g} (the largest is {marginal.max():.3g}): the level "
                      f"is beyond the posterior's reach and every excursion set is empty. "
                      f"Choose u nearer the posterior mean (its range: {mean.min():.4g} to "
                      f"{mean.max():.4g}).", UserWarning, stacklevel=2)
    # the longest prefix of the order the drawn nodes cover, and their rows in it
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[rows] = np.arange(m)
    missing = row_of[order] < 0
    K = int(np.argmax(missing)) if missing.any() else n
    if K == 0:
        raise ValueError(f"the drawn nodes do not hold node {int(order[0])}, the first in "
                         f"the order (the largest marginal probability); draw it.")
    prefix_rows = row_of[order[:K]]
    # the histogram of T_j, the first position (0-based) where draw j fails to exceed
    first_failure = np.zeros(K + 1, dtype=np.int64)
    n_samples = 0
    for block in _blocks(draws):
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2 or block.shape[0] != m:
            raise ValueError(f"each block of draws must be an array (n, b) with one row a "
                             f"node ({m} nodes); got shape {block.shape}.")
        ordered = block[prefix_rows]
        if not np.all(np.isfinite(ordered)):
            raise ValueError("draws hold non-finite values; give finite posterior draws.")
        fails = sign * (ordered - u) <= 0.0
        T = np.where(fails.any(axis=0), fails.argmax(axis=0), K)
        first_failure += np.bincount(T, minlength=K + 1)
        n_samples += block.shape[1]
    if n_samples == 0:
        raise ValueError("draws hold no posterior draw; give at least one (thousands for "
                         "joint probabilities near 0.95).")
    # exceeding at all of s_1..s_k: T_j >= k (0-based)
    counts = np.cumsum(first_failure[::-1])[::-1][1:]
    joint, joint_se, joint_lower = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    joint[:K] = counts / n_samples
    joint_se[:K] = np.sqrt(joint[:K] * (1.0 - joint[:K]) / n_samples)
    joint_lower[:K] = _clopper_pearson_lower(counts, n_samples, n_sd)
    return ExcursionFunction(level=u, side=side, marginal=marginal, order=order,
                             joint=joint, joint_se=joint_se, joint_lower=joint_lower,
                             n_samples=n_samples, n_sd=n_sd, n_computed=K,
                             F_limit=float(marginal[order[K]]) if K < n else 0.0)


class PosteriorDraws:
    """Joint draws of a graph Matérn posterior, block by block
    (from :func:`graph_matern_posterior_draws`).

    The posterior of ``f ~ N(0, A Q_ν(κ)⁻¹)`` observed at nodes ``o`` with noise variance
    ``A r`` is ``N(μ, A Q̃⁻¹)``, ``Q̃ = Q_ν(κ) + Pᵀ P / r``. A draw is ``μ + √A Pᵀ L⁻ᵀ z``,
    ``z ~ N(0, I)``, ``L`` the Cholesky factor of ``Q̃``, or ``L₂₂⁻ᵀ z`` from a trailing
    block (module notes). Iterating yields ``(len(nodes), b)`` blocks, the same on every
    pass; the draws depend on ``random_state`` and ``block_size``.

    Attributes
    ----------
    nodes : ndarray of int or None
        The nodes the rows hold; None: every node, in order.
    n_nodes, n_samples, block_size : int
    mean : ndarray (n_nodes,)
    amplitude : float
        ``A`` in the graph's own units (:meth:`flgp.graph.PointGraph.in_own_units`).
    """

    def __init__(self, sampler, mean, amplitude, n_samples, block_size, random_state,
                 nodes=None, precision=None):
        self._sampler, self._precision = sampler, precision
        self.nodes = nodes
        self.mean, self.amplitude = mean, float(amplitude)
        self.n_nodes = int(mean.size)
        self.n_samples = int(n_samples)
        self.block_size = int(np.clip(BLOCK_NUMBERS // max(self.n_nodes, 1), MIN_BLOCK, 1024)
                              if block_size is None else block_size)
        self.random_state = random_state
        self._sd = None

    def __len__(self) -> int:
        """The number of blocks."""
        return -(-self.n_samples // self.block_size)

    def __iter__(self):
        rng = np.random.default_rng(self.random_state)
        scale = np.sqrt(self.amplitude)
        for start in range(0, self.n_samples, self.block_size):
            x = self._sampler.sample(min(self.block_size, self.n_samples - start), rng)
            x *= scale
            x += self.mean[:, None]
            yield x

    @property
    def precision(self):
        """``Q̃`` (sparse, every node, own units): the posterior covariance is
        ``amplitude * Q̃⁻¹``."""
        return self._precision

    def marginal_sd(self) -> np.ndarray:
        """The rows' posterior standard deviations ``sqrt(A diag(Q̃⁻¹))`` (cached): exact
        from a dense block or up to ``EXACT_SD_MAX_NODES`` nodes, else
        :func:`~flgp.precision.rbmc_variances` with ``RBMC_SAMPLES`` draws."""
        if self._sd is None:
            self._sd = np.sqrt(self.amplitude * np.maximum(
                self._sampler.variances(self._precision, self.random_state), 0.0))
        return self._sd


class _WholeGraph:
    """Draws of every node: ``Pᵀ L⁻ᵀ z`` through the whole sparse factor."""

    def __init__(self, chol):
        self.chol = chol

    def sample(self, b, rng):
        return self.chol.sample(b, rng)

    def variances(self, precision, random_state):
        n = self.chol.n
        if n <= EXACT_SD_MAX_NODES:
            return diagonal_of_inverse(self.chol.solve, n, np.arange(n))
        seed = np.random.SeedSequence(random_state).spawn(1)[0]
        return rbmc_variances(precision, self.chol, RBMC_SAMPLES, seed)[0]


class _TrailingBlock:
    """Draws of the nodes a factor eliminates last: ``L₂₂⁻ᵀ z`` (dense, lower ``L₂₂``)."""

    def __init__(self, block):
        self.block = block

    def sample(self, b, rng):
        z = rng.standard_normal((b, self.block.shape[0])).T
        return solve_triangular(self.block, z, lower=True, trans="T", check_finite=False)

    def variances(self, precision, random_state):
        # diag(Σ_TT) = diag(L₂₂⁻ᵀ L₂₂⁻¹): the squared column norms of L₂₂⁻¹
        inverse = solve_triangular(self.block, np.eye(self.block.shape[0]), lower=True,
                                   check_finite=False)
        return np.einsum("ij,ij->j", inverse, inverse)


def dense_block_max_nodes(n_nodes: int) -> int:
    """The most candidate nodes drawn from a dense trailing block on a graph of ``n_nodes``
    nodes; more are drawn through the whole factor."""
    return int(min(DENSE_BLOCK_MAX_NODES, DENSE_BLOCK_MAX_FILL // max(int(n_nodes), 1)))


def _trailing_factor(family, values, candidates):
    """``(nodes, L₂₂)``: the dense trailing block of the factor (lower ``values`` on
    ``family``'s pattern) with ``candidates`` eliminated last, and the nodes it holds; None
    where that block exceeds ``2 DENSE_BLOCK_MAX_NODES`` rows."""
    import scipy.sparse as sp
    from cvxopt import amd

    cvxopt, cholmod = _cholmod()
    n = family.n
    lower = sp.csc_matrix((values, family.indices, family.indptr), shape=(n, n))
    lower_cvx = _lower(lower)
    order = fill_reducing_order(lower)
    if order is None:
        order = np.asarray(amd.order(lower_cvx), dtype=np.int64).ravel()
    last = np.zeros(n, dtype=bool)
    last[candidates] = True
    wanted = np.r_[order[~last[order]], order[last[order]]]
    saved = dict(cholmod.options)
    cholmod.options["nmethods"] = 1                # the given order, not the best of several
    try:
        factor = cholmod.symbolic(lower_cvx, p=cvxopt.matrix(wanted.astype(int)))
    finally:
        cholmod.options.clear()
        cholmod.options.update(saved)
    try:
        cholmod.numeric(lower_cvx, factor)
    except ArithmeticError as exc:
        raise NotPositiveDefiniteError("the posterior precision is not positive definite: "
                                       "its hyperparameters are out of range.") from exc
    position = cvxopt.matrix(np.arange(n, dtype=np.float64))
    cholmod.solve(factor, position, sys=7)          # x = P b: the elimination order
    final = np.rint(np.asarray(position)).astype(np.int64).ravel()
    where = np.empty(n, dtype=np.int64)
    where[final] = np.arange(n)
    start = int(where[candidates].min())
    if n - start > 2 * DENSE_BLOCK_MAX_NODES:
        return None                     # the postorder spread them out
    L = cholmod.getfactor(factor)
    colptr, rowind, entries = (np.asarray(a).ravel() for a in L.CCS)
    k = n - start
    block = np.zeros((k, k))
    segment = slice(int(colptr[start]), int(colptr[n]))
    columns = np.repeat(np.arange(k), np.diff(colptr[start:n + 1]))
    block[rowind[segment] - start, columns] = entries[segment]
    return final[start:], block


def graph_matern_posterior_draws(graph, nu, kappa2, ratio, observed, *, amplitude=1.0,
                                 mean=None, n_samples: int = 1000, nodes=None,
                                 block_size=None, random_state=0) -> PosteriorDraws:
    """Joint draws of the graph Matérn posterior ``N(μ, A (Q_ν(κ) + Pᵀ P / r)⁻¹)`` on the
    nodes of ``graph`` (or some), in blocks, from the sparse Cholesky factor of its precision.

    Parameters
    ----------
    graph : flgp.graph.PointGraph
        Factored in its own units (:meth:`~flgp.graph.PointGraph.in_own_units`).
    nu : int
        The order ``ν`` (:mod:`flgp.precision.matern`).
    kappa2, ratio : float
        ``κ² > 0`` and ``r > 0`` (noise variance over ``A``) in the graph's units: a fitted
        ``GraphMaternPrior``'s ``kappa_ ** 2`` and ``noise_ / outputscale_``.
    observed : array-like of int (m,)
        The observed nodes (distinct).
    amplitude : float, default=1.0
        ``A`` in the prior ``f ~ N(0, A Q_ν(κ)⁻¹)`` (a fitted prior's ``outputscale_``).
    mean : array-like (n,), optional
        The posterior mean added to every draw (default 0).
    n_samples : int, default=1000
        ``S`` (standard error 0.0069 for a joint probability near 0.95).
    nodes : array-like of int, optional
        Draw only these (and any the ordering puts among them: the result's ``nodes``) from a
        dense trailing block (module notes); every node, the default, beyond
        :func:`dense_block_max_nodes` or a block of ``2 DENSE_BLOCK_MAX_NODES`` rows.
    block_size : int, optional
        Draws a block (default ``BLOCK_NUMBERS / rows``, clipped to 8..1024).
    random_state : int or None, default=0
        Seeds every pass, so passes repeat (None: fresh entropy, fixed at construction).

    Returns
    -------
    PosteriorDraws

    Raises
    ------
    ValueError
        On a graph beyond a sparse factor's reach (:func:`~flgp.precision.gaussian.factors`)
        or hyperparameters out of range.
    """
    n = int(graph.n_nodes)
    if not factors(n):
        raise ValueError(f"the graph has {n} nodes, beyond a sparse Cholesky factor's reach "
                         f"(FACTOR_MAX_NODES = {FACTOR_MAX_NODES}, or half the machine's "
                         f"memory): the graph Matérn fit there runs by conjugate gradients "
                         f"and keeps no factor to draw joint posterior samples from. Use a "
                         f"smaller region (a mask of at most {FACTOR_MAX_NODES} nodes).")
    nu = check_order(nu)
    kappa2, ratio, amplitude = (_positive(kappa2, "kappa2"), _positive(ratio, "ratio"),
                                _positive(amplitude, "amplitude"))
    observed = _node_indices(observed, n, "observed")
    mean = np.zeros(n) if mean is None else _checked_vector(mean, "mean", n)
    if nodes is not None:
        nodes = _node_indices(nodes, n, "nodes")
        if nodes.size == 0:
            raise ValueError("nodes must name at least one node to draw.")
    n_samples, block_size, random_state = draw_settings(n_samples, block_size, random_state)
    # own units (length ℓ, mass μ): Q_own = ℓ^{2ν} / μ · Q, so κ² ℓ², r μ / ℓ^{2ν} and
    # A ℓ^{2ν} / μ give the same posterior
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    log_factor = 2.0 * nu * np.log(length) - np.log(mass)
    kappa2_own = kappa2 * length ** 2
    ratio_own = float(np.exp(np.log(ratio) - log_factor))
    amplitude_own = float(np.exp(np.log(amplitude) + log_factor))
    if not all(np.isfinite(v) and v > 0 for v in (kappa2_own, ratio_own, amplitude_own)):
        raise ValueError("kappa2, ratio or amplitude leave float64 in the graph's own "
                         "units; check that they are in the graph's units.")
    family = MaternFamily.of(own, nu)
    values = family.values(kappa2_own)
    values[family.diagonal[observed]] += 1.0 / ratio_own
    precision = family.matrix(kappa2_own, values)
    trailing = None if nodes is None or nodes.size > dense_block_max_nodes(n) \
        else _trailing_factor(family, values, nodes)
    if trailing is None:
        chol = PatternCholesky.of_lower_pattern(family.indptr, family.indices)
        chol.factor_values(values)
        sampler, rows = _WholeGraph(chol), None
    else:
        rows, block = trailing
        sampler, mean = _TrailingBlock(block), mean[rows]
    return PosteriorDraws(sampler, mean, amplitude_own, n_samples, block_size, random_state,
                          nodes=rows, precision=precision)


def draw_settings(n_samples, block_size, random_state) -> tuple:
    """:class:`PosteriorDraws`'s ``(n_samples, block_size, random_state)``, checked
    (``random_state`` None: a fresh seed)."""
    if isinstance(n_samples, (bool, np.bool_)) or not isinstance(n_samples, numbers.Integral) \
            or n_samples < 1:
        raise ValueError(f"n_samples must be a whole number >= 1; got {n_samples!r}.")
    if block_size is not None and (isinstance(block_size, (bool, np.bool_)) or not isinstance(
            block_size, numbers.Integral) or block_size < 1):
        raise ValueError(f"block_size must be a whole number >= 1 or None; got "
                         f"{block_size!r}.")
    if random_state is None:
        random_state = int(np.random.SeedSequence().generate_state(1)[0])
    elif isinstance(random_state, (bool, np.bool_)) or not isinstance(
            random_state, numbers.Integral):
        raise ValueError(f"random_state must be an int (or None); got {random_state!r}.")
    return int(n_samples), None if block_size is None else int(block_size), int(random_state)


def _node_indices(values, n: int, name: str) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 1 or (values.size and not np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-d array of node indices; got {values.dtype} "
                         f"of shape {values.shape}.")
    values = values.astype(np.int64)
    if values.size and (values.min() < 0 or values.max() >= n):
        raise ValueError(f"{name} must index the graph's {n} nodes (0 to {n - 1}); got "
                         f"{values.min()} to {values.max()}.")
    if np.unique(values).size != values.size:
        raise ValueError(f"{name} must hold distinct nodes.")
    return values


def _positive(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real,
                                                                     np.number)):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}.")
    value = float(value)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}.")
    return value
