"""Excursion sets of a fitted full-resolution regressor (``method_ == "graph_matern"``):
where the map exceeds a level jointly, with posterior probability at least ``1 - α``
(Bolin and Lindgren 2015; estimator in :mod:`flgp.precision.excursion`).

The joint posterior comes from the regressor's fitted attributes:
``N(transduction_, A (Q_ν(κ) + Pᵀ P / r)⁻¹)`` with ``A = prior_.outputscale_``,
``r = prior_.noise_ / A``, ``Q_ν(κ)`` on ``prior_.graph`` (``prior_.nu``, ``prior_.kappa_``)
and ``P`` the observed nodes ``labelled_indices_``.
"""

from __future__ import annotations

import numpy as np

from ..precision.excursion import (ExcursionSet, candidate_nodes, dense_block_max_nodes,
                                   excursion_function, graph_matern_posterior_draws)

__all__ = ["excursion_set", "posterior_draws_of"]


def posterior_draws_of(regressor, *, n_samples: int = 1000, nodes=None, block_size=None,
                       random_state=0):
    """Joint posterior draws (units of ``y``) of a fitted full-resolution regressor's map
    at its graph's nodes, from the sparse factor of its posterior precision.

    Parameters
    ----------
    regressor : FLGPRegressor
        Fitted, as for :func:`excursion_set`.
    n_samples : int, default=1000
    nodes : array-like of int, optional
        Draw these nodes' joint posterior only
        (:func:`~flgp.precision.excursion.graph_matern_posterior_draws`). Default: all.
    block_size : int, optional
        Draws a block.
    random_state : int, default=0

    Returns
    -------
    PosteriorDraws

    Raises
    ------
    ValueError
        As :func:`excursion_set`.
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
        Fitted with the graph Matérn prior (``method_ == "graph_matern"``, e.g. the
        ``regressor`` of :func:`flgp.predict_image`) on a graph of at most
        ``FACTOR_MAX_NODES`` nodes (larger fits keep no factor to draw from).
    u : float
        The level, in the units of ``y``.
    alpha : float, default=0.05
        The set's joint posterior probability is at least ``1 - alpha``.
    side : {">", "<"}, default=">"
    n_samples : int, default=1000
        Joint posterior draws; more give a set closer to the exact (slightly larger) one.
    n_sd : float, default=2.0
        The set uses one-sided Clopper-Pearson lower bounds of the joint probabilities at
        confidence ``Φ(n_sd)``.
    F_limit : float, default=0.5
        The excursion function ``F`` is computed only at nodes whose marginal probability
        reaches ``min(F_limit, 1 - alpha)`` (Bolin and Lindgren's ``F.limit``), NaN
        elsewhere; those are drawn from a dense block of the factor while at most
        ``dense_block_max_nodes(n)``, else all nodes are. 0: every node.
    random_state : int, default=0

    Returns
    -------
    ExcursionSet
        ``mask`` (one entry a node, i.e. a row of the fitted ``X``), the set's joint
        probability with its standard error and lower bound, and ``function``
        (:class:`~flgp.precision.excursion.ExcursionFunction`), whose ``set_at`` gives the
        sets at other ``α`` without new draws.

    Raises
    ------
    ValueError
        An unfitted regressor, one not fitted with the graph Matérn prior or holding
        several maps, a graph beyond a factor's reach, ``F_limit`` outside [0, 1), and the
        bad inputs of :func:`~flgp.precision.excursion.excursion_function`.

    Examples
    --------
    >>> import numpy as np, flgp
    >>> from flgp.graph import lattice_graph
    >>> ijk = np.argwhere(np.ones((8, 8, 1), bool))
    >>> X = ijk.astype(float)
    >>> bump = np.exp(-((X[:, :2] - 3.5) ** 2).sum(1) / 8)       # above 0.5 on 16 nodes
    >>> y = np.where(np.arange(64) % 3 == 0, bump, np.nan)
    >>> reg = flgp.FLGPRegressor(prior=flgp.GraphMaternPrior(graph=lattice_graph(ijk)))
    >>> reg = reg.fit(X, y)
    >>> result = excursion_set(reg, 0.5, alpha=0.05, n_samples=2000)
    >>> result.mask.shape
    (64,)
    >>> bool(0 < result.n_nodes_in_set <= 16 and result.joint_lower >= 0.95)
    True
    >>> bool(np.all(bump[result.mask] > 0.5))
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
    """The regressor's fitted ``GraphMaternPrior``, else a ValueError saying why not."""
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
