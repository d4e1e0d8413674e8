"""Excursion sets of a fitted full-resolution regressor (``method_ == "graph_matern"``): where the
map exceeds a level jointly, with posterior probability at least ``1 - α`` (Bolin and
Lindgren 2015; the mathematics, the Monte Carlo estimator and why the set is conservative
are in :mod:`flgp.precision.excursion`).

A fitted :class:`~flgp.FLGPRegressor` whose fit chose the graph Matérn prior (directly,
or through :func:`flgp.predict_image` / :func:`flgp.predict_surface`) holds everything
its joint posterior needs, in its public fitted attributes: the graph and order
(``prior_.graph``, ``prior_.nu``), ``κ`` in the graph's units (``prior_.kappa_``), the
amplitude and noise variance in the units of ``y`` (``prior_.outputscale_``,
``prior_.noise_``; the cross-validated scale multiplies both, leaving their ratio and the
mean unchanged), the observed nodes (``labelled_indices_``), the posterior mean and
marginal sd at every node (``transduction_``, ``transduction_std_``). The posterior is
``N(transduction_, A (Q_ν(κ) + Pᵀ P / r)⁻¹)`` with ``A = outputscale_`` and
``r = noise_ / outputscale_``.
"""

from __future__ import annotations

import numpy as np

from ..precision.excursion import (ExcursionSet, candidate_nodes, dense_block_max_nodes,
                                   excursion_function, graph_matern_posterior_draws)

__all__ = ["excursion_set", "posterior_draws_of"]


def posterior_draws_of(regressor, *, n_samples: int = 1000, nodes=None, block_size=None,
                       random_state=0):
    """Joint posterior draws of a fitted full-resolution regressor's map at the nodes of
    its graph (:class:`~flgp.precision.excursion.PosteriorDraws`, in the units of ``y``),
    from the sparse factor of its posterior precision.

    Parameters
    ----------
    regressor : FLGPRegressor
        Fitted, with ``method_ == "graph_matern"`` on a graph a factor reaches (see
        :func:`excursion_set`).
    n_samples : int, default=1000
    nodes : array-like of int, optional
        Draw these nodes' joint posterior only (from a dense block of the factor;
        :func:`~flgp.precision.excursion.graph_matern_posterior_draws`). Default: every
        node.
    block_size : int, optional
        Draws a block.
    random_state : int, default=0

    Returns
    -------
    PosteriorDraws
    """
    prior = _fitted_graph_matern_prior(regressor)
    mean = np.asarray(regressor.transduction_, dtype=np.float64)
    if mean.ndim != 1:
        raise ValueError(f"the regressor holds {mean.shape[1]} maps (transduction_ of shape "
                         f"{mean.shape}); fit one map at a time for its excursion sets.")
    outputscale, noise = float(prior.outputscale_), float(prior.noise_)
    return graph_matern_posterior_draws(
        prior.graph, int(prior.nu), float(prior.kappa_) ** 2, noise / outputscale,
        np.asarray(regressor.labelled_indices_, dtype=np.int64), amplitude=outputscale,
        mean=mean, n_samples=n_samples, nodes=nodes, block_size=block_size,
        random_state=random_state)


def excursion_set(regressor, u, alpha=0.05, *, side: str = ">", n_samples: int = 1000,
                  n_sd: float = 2.0, F_limit: float = 0.5, random_state=0) -> ExcursionSet:
    """The excursion set of a fitted full-resolution regressor's map: the largest set of
    nodes (in the family of the marginal ordering) on which ``f > u`` (``side=">"``) or
    ``f < u`` (``side="<"``) holds jointly with posterior probability at least
    ``1 - α``, conservative at the Monte Carlo error (:mod:`flgp.precision.excursion`).

    Parameters
    ----------
    regressor : FLGPRegressor
        Fitted with the graph Matérn prior (``method_ == "graph_matern"``; e.g.
        ``FLGPRegressor(prior=GraphMaternPrior(graph=...))``, or the ``regressor`` of a
        :func:`flgp.predict_image` / :func:`flgp.predict_surface` result) on a graph of
        at most ``FACTOR_MAX_NODES`` nodes (larger fits run by conjugate gradients and
        keep no factor to draw from).
    u : float
        The level, in the units of ``y``.
    alpha : float, default=0.05
        The set's joint posterior probability is at least ``1 - alpha``.
    side : {">", "<"}, default=">"
    n_samples : int, default=1000
        Joint posterior draws. At 1000 a joint probability near 0.95 has standard error
        0.0069, and the set's lower bound (``n_sd`` = 2) sits about 0.014 below its
        estimate: the set is a little smaller than the exact one. More draws give a set
        closer to it, at a triangular solve a draw (32 ms on the whole-brain motor map).
    n_sd : float, default=2.0
        The set uses one-sided Clopper-Pearson lower bounds of the joint probabilities at
        confidence ``Φ(n_sd)``.
    F_limit : float, default=0.5
        The excursion function is computed where it can reach ``min(F_limit, 1 - alpha)``
        - at the nodes whose marginal probability is at least that (Bolin and Lindgren's
        ``F.limit``) - and is NaN elsewhere (there ``F`` is below
        ``function.F_limit``). Only those nodes are drawn, from a dense block of the
        factor, while they are at most ``dense_block_max_nodes(n)``; beyond, every node is
        drawn through the whole factor (and ``F`` is computed everywhere). 0: every
        node, always.
    random_state : int, default=0

    Returns
    -------
    ExcursionSet
        ``mask`` (one entry a node of ``regressor.graph_``, i.e. a row of the ``X`` it was
        fitted on), the set's joint probability with its standard error and lower bound,
        and ``function``: the :class:`~flgp.precision.excursion.ExcursionFunction` (the
        excursion function ``F``, the marginal probabilities, every ``P_k``), whose
        ``set_at`` gives the sets at other ``α`` without new draws.

    Raises
    ------
    ValueError
        On an unfitted regressor, one whose fit is not the graph Matérn prior's (the heat
        kernel and RBF fits have no sparse joint posterior here), one holding several
        maps, a graph beyond a factor's reach, and the bad inputs of
        :func:`~flgp.precision.excursion.excursion_function`.

    Examples
    --------
    >>> import numpy as np, flgp
    >>> from flgp.graph import lattice_graph
    >>> ijk = np.argwhere(np.ones((8, 8, 1), bool))
    >>> X = ijk.astype(float)
    >>> y = np.where(np.arange(64) % 3 == 0, np.exp(-((X - 3.5) ** 2).sum(1) / 8), np.nan)
    >>> reg = flgp.FLGPRegressor(prior=flgp.GraphMaternPrior(graph=lattice_graph(ijk)))
    >>> reg = reg.fit(X, y)
    >>> result = excursion_set(reg, 0.5, alpha=0.05, n_samples=2000)
    >>> result.mask.shape
    (64,)
    >>> bool(result.n_nodes_in_set == 0 or result.joint_lower >= 0.95)
    True
    """
    _fitted_graph_matern_prior(regressor)
    mean = np.asarray(regressor.transduction_, dtype=np.float64)
    sd = np.asarray(regressor.transduction_std_, dtype=np.float64)
    limit = float(F_limit)
    if not (np.isfinite(limit) and 0.0 <= limit < 1.0):
        raise ValueError(f"F_limit must lie in [0, 1) (0: every node); got {F_limit!r}.")
    if np.ndim(alpha) == 0 and isinstance(alpha, (int, float, np.number)) \
            and np.isfinite(alpha) and 0 < alpha < 1:
        limit = min(limit, 1.0 - float(alpha))
    nodes = None
    if mean.ndim == 1 and limit > 0:
        nodes = candidate_nodes(mean, sd, u, side, limit)
        if nodes.size > dense_block_max_nodes(mean.size) or nodes.size == mean.size:
            nodes = None
    draws = posterior_draws_of(regressor, n_samples=n_samples, nodes=nodes,
                               random_state=random_state)
    function = excursion_function(mean, draws, u, side, sd=sd, n_sd=n_sd)
    return function.set_at(alpha)


def _fitted_graph_matern_prior(regressor):
    """The fitted ``GraphMaternPrior`` of a regressor whose fit is the graph Matérn
    prior's, else a ``ValueError`` saying why there is no sparse joint posterior."""
    method = getattr(regressor, "method_", None)
    if method is None:
        raise ValueError(f"{type(regressor).__name__} is not fitted: call fit first (with "
                         f"prior=flgp.GraphMaternPrior(graph=...)).")
    if method != "graph_matern":
        raise ValueError(f"the regressor's fit is method_={method!r}: its posterior has no "
                         f"sparse joint form here (the heat kernel and RBF fits give "
                         f"marginal sds only). Excursion sets need the graph Matérn prior: "
                         f"refit with FLGPRegressor(prior=flgp.GraphMaternPrior(graph=...)).")
    prior = getattr(regressor, "prior_", None)
    missing = [name for name in ("kappa_", "outputscale_", "noise_")
               if getattr(prior, name, None) is None]
    if prior is None or missing or getattr(prior, "graph", None) is None:
        raise ValueError(f"the regressor's prior_ lacks {', '.join(missing) or 'its graph'}: "
                         f"it is not a fitted regression (a classifier's graph Matérn fit has "
                         f"no Gaussian posterior of a map).")
    if not getattr(regressor, "likelihood", "gaussian") == "gaussian":
        raise ValueError("excursion sets need a Gaussian likelihood's posterior.")
    return prior
