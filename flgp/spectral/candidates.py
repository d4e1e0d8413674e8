"""Eigenpair candidates: the one place that turns a cloud into FLGP, GLGP or Nyström-GLGP
eigenpairs, once per value of a bandwidth grid (one value for ``compute_eigenpairs``; the
estimators keep the candidate of best evidence). The graph at the anchor multiplier is
built once; the others rescale its bandwidth by ``sqrt(a / anchor)``. Inputs come
validated; only the checks that need the cloud's size are made here.
"""

from __future__ import annotations

import numpy as np

from ..backends import resolve_backend
from ..graph.cross_graph import check_graph_options, cross_graph
from ..graph.dense import (bandwidth_neighbour_count, check_dense_size, dense_graph,
                           neighbour_bandwidth, nystrom_graph)
from .dense import glgp_eigenpairs, glgp_lazy, nystrom_eigenpairs
from .flgp import flgp_eigenpairs

__all__ = ["eigenpair_candidates"]


def _at_most(value: int, high: int, name: str, high_name: str) -> None:
    if value > high:
        raise ValueError(f"{name}={value} exceeds {high_name}={high}.")


def eigenpair_candidates(X, method: str, grid=(1.0,), *, n_induced, n_eigenpairs: int,
                         n_neighbors: int = 3, subsample: str = "kmeans",
                         kernel: str = "lae", bandwidth: float | None = None,
                         lae_regularization: float = 1e-3, spectrum: str = "one_step",
                         random_state=None, backend: str = "auto", induced_points=None,
                         chunk_size: int | None = None, anchor: float | None = None):
    """Yield ``(a, make)`` for each bandwidth multiplier ``a`` of ``grid``: ``make()``
    computes that candidate's :class:`~flgp.spectral.Eigenpairs` (``4 eps^2 = a mean d^2``
    for the SE kernels; a grid of one value for LAE or a given ``bandwidth``).

    ``n_induced``: ``s`` (None for FLGP with ``induced_points``); ``n_eigenpairs``: ``M``;
    ``n_neighbors``: FLGP's ``r``, or the GLGP / Nyström rule's
    (:func:`flgp.graph.dense.bandwidth_neighbour_count`). ``anchor``: the multiplier whose
    graph the rule builds (default the grid's first), so that ``a = anchor`` reproduces
    ``compute_eigenpairs`` exactly.
    """
    grid = tuple(float(a) for a in grid)
    anchor = grid[0] if anchor is None else float(anchor)
    n = X.shape[0]
    M = n_eigenpairs
    if method == "flgp":
        options = check_graph_options(
            n, X.shape[1], n_induced=n_induced, n_neighbors=n_neighbors,
            subsample=subsample, kernel=kernel, bandwidth=bandwidth, bandwidth_scale=anchor,
            lae_regularization=lae_regularization, backend=backend,
            induced_points=induced_points, random_state=random_state,
            chunk_size=chunk_size)
        base = cross_graph(X, options)
        for a in grid:
            g = base if a == anchor else base.with_bandwidth(
                base.bandwidth * np.sqrt(a / anchor))
            yield a, lambda g=g: flgp_eigenpairs(g, M, spectrum=spectrum)
        return
    if method == "nystrom":
        s = n_induced
        _at_most(s, n, "n_induced", "n_samples")
        r = bandwidth_neighbour_count(n_neighbors, s)
        _at_most(r, s, "n_neighbors", "n_induced")
        g0 = nystrom_graph(X, n_induced=s, subsample=subsample, bandwidth=bandwidth,
                           n_neighbors=r, bandwidth_scale=anchor, random_state=random_state,
                           backend=backend)
        for a in grid:
            g = g0 if a == anchor else g0.with_bandwidth(g0.bandwidth * np.sqrt(a / anchor))
            yield a, lambda g=g: nystrom_eigenpairs(g, M, X)
        return
    r = bandwidth_neighbour_count(n_neighbors, n - 1)
    _at_most(r, n - 1, "n_neighbors", "n_samples - 1")
    if resolve_backend(backend) == "keops":       # the n x n matrix is never stored
        _at_most(M, n - 2, "n_eigenpairs", "n_samples - 2")
        base = bandwidth
        if base is None:
            base = neighbour_bandwidth(X, X, r, anchor, skip_self=True)
        for a in grid:
            yield a, lambda a=a: glgp_lazy(X, M, bandwidth=base * np.sqrt(a / anchor),
                                           backend="keops")
        return
    check_dense_size(n)
    g0 = dense_graph(X, bandwidth=bandwidth, n_neighbors=r, bandwidth_scale=anchor)
    for a in grid:
        g = g0 if a == anchor else dense_graph(X, bandwidth=g0.bandwidth * np.sqrt(a / anchor),
                                               n_neighbors=r)
        yield a, lambda g=g: glgp_eigenpairs(g, M)
