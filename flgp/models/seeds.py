"""Seed-correlation maps of a fitted brain map (the FLGP paper's Figures 5-6): the
correlation, under the fitted graph Matérn prior (or its posterior), between seed voxels
and every voxel of the region, and the seeds' correlation matrix.

For a fit on the region's lattice (``method_ == "graph_matern"``, as :func:`flgp.predict_image`
fits by default), in the graph's own units (:meth:`flgp.graph.PointGraph.in_own_units`):

* prior: ``Cov = A Q_ν(κ)⁻¹`` - a seed's column is ``ν`` sparse solves with
  ``K = κ²C + G`` (:class:`flgp.precision.SparsePrecisionPrior`; AMG-preconditioned CG to
  ``LARGE_SOLVE_TOL`` beyond ``FACTOR_MAX_NODES`` voxels), the marginal variances exact up
  to ``EXACT_VARIANCE_ROWS`` voxels and Rao-Blackwellised estimates (``VARIANCE_SAMPLES``
  draws) beyond, correlations past ±1 clipped;
* posterior: ``Cov = A Q̃⁻¹`` with ``Q̃ = Q + PᵀP / r`` (the observed voxels' noise)
  (:meth:`flgp.precision.MaternRegression.unit_posterior_variances`).

Correlations need no amplitude: ``corr(x, s) = Cov(x, s) / √(Var x Var s)``. With several
maps (``ImagePrediction.maps``), the correlations are averaged over the maps' fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..datasets.fmri import volume_of
from ..precision.gaussian import FACTOR_MAX_NODES, MaternRegression
from ..precision.prior import EXACT_VARIANCE_ROWS, SparsePrecisionPrior

# draws of the variance estimators beyond EXACT_VARIANCE_ROWS voxels
VARIANCE_SAMPLES = 64
# relative residual of the prior's solves on regions beyond FACTOR_MAX_NODES voxels
LARGE_SOLVE_TOL = 1e-5

__all__ = ["SeedCorrelation", "seed_correlation", "atlas_seeds"]


@dataclass
class SeedCorrelation:
    """What :func:`seed_correlation` returns.

    Attributes
    ----------
    seeds : ndarray of int (k,)
        The seeds: rows of the region (the order of ``ImagePrediction.voxels``).
    correlation : ndarray (k, n)
        Each seed's correlation with every voxel of the region.
    matrix : ndarray (k, k)
        The seeds' correlations with each other.
    labels : ndarray or None
        The atlas label of each seed (:func:`atlas_seeds`), else None.
    """

    seeds: np.ndarray
    correlation: np.ndarray
    matrix: np.ndarray
    labels: np.ndarray | None = None

    def to_nifti(self, voxels, fill: float = 0.0):
        """The maps as a 4-d NIfTI image on the region's grid (one volume a seed)."""
        return voxels.to_nifti(self.correlation.T, fill=fill)


def atlas_seeds(atlas, values, voxels):
    """``(labels, seeds)``: for each non-zero label of an integer atlas image on the
    image's grid that covers region voxels, the region row of largest mean ``|value|``
    over the maps (``values``: ``(n,)`` or ``(n, maps)`` per region voxel) - the FLGP
    paper's region centres."""
    img, data = volume_of(atlas, "atlas")
    if data.shape != tuple(voxels.shape) or not np.allclose(img.affine, voxels.affine):
        raise ValueError("the atlas is not on the image's grid; resample it first, by "
                         "nearest neighbour so that it keeps its labels: "
                         "nilearn.image.resample_to_img(atlas, image, "
                         "interpolation=\"nearest\").")
    if not np.all(data[np.isfinite(data)] == np.round(data[np.isfinite(data)])):
        raise ValueError("the atlas must hold integer labels (0: no region).")
    at = data[tuple(voxels.ijk.T)]
    strength = np.abs(np.asarray(values, dtype=np.float64).reshape(len(at), -1)).mean(axis=1)
    labels = np.unique(at[np.isfinite(at) & (at != 0)]).astype(np.int64)
    if labels.size == 0:
        raise ValueError("no atlas region covers a voxel of the region.")
    seeds = np.array([np.flatnonzero(at == lab)[np.argmax(strength[at == lab])]
                      for lab in labels], dtype=np.int64)
    return labels, seeds


def seed_correlation(prediction, seeds=None, *, atlas=None, posterior=False):
    """Correlation maps of seed voxels under the fitted prior (or posterior) of an
    :class:`~flgp.models.image.ImagePrediction` (see the module notes).

    Parameters
    ----------
    prediction : ImagePrediction
        From :func:`flgp.predict_image` with the graph Matérn prior (``method_ ==
        "graph_matern"``; several maps: each map's own fit, the correlations averaged over them).
    seeds : array-like of int, optional
        Region rows (the order of ``prediction.voxels``), or ``(k, 3)`` voxel indices
        ``ijk``.
    atlas : NIfTI image or path, optional
        Instead of ``seeds``: an integer atlas on the image's grid; each region's seed is
        its voxel of largest mean ``|value|`` (:func:`atlas_seeds`).
    posterior : bool, default=False
        The posterior's correlations (given the observed voxels) instead of the prior's.
    """
    voxels = prediction.voxels
    fits = prediction.regressor if isinstance(prediction.regressor, list) else [
        prediction.regressor]
    if any(f is None or getattr(f, "method_", None) != "graph_matern" for f in fits):
        raise ValueError("seed correlations need fits of the graph Matérn prior "
                         "(predict_image with FLGPRegressor(GraphMaternPrior()), or the default "
                         "when it chose 'graph_matern'; hyperparameters='own').")
    labels = None
    if atlas is not None:
        if seeds is not None:
            raise ValueError("give seeds or an atlas, not both.")
        values = np.column_stack([np.asarray(f.transduction_) for f in fits])
        labels, seeds = atlas_seeds(atlas, values, voxels)
    if seeds is None:
        raise ValueError("give seeds (region rows or voxel indices) or an atlas.")
    seeds = _as_rows(seeds, voxels)
    total = np.zeros((seeds.size, len(voxels)))
    for fit in fits:
        total += _one_fit(fit, seeds, prediction.observed, posterior)
    corr = total / len(fits)
    return SeedCorrelation(seeds=seeds, correlation=corr, matrix=corr[:, seeds],
                           labels=labels)


def _as_rows(seeds, voxels) -> np.ndarray:
    seeds = np.asarray(seeds)
    if seeds.ndim == 2 and seeds.shape[1] == 3:
        lookup = {tuple(v): i for i, v in enumerate(np.asarray(voxels.ijk).tolist())}
        missing = [tuple(s) for s in seeds.tolist() if tuple(s) not in lookup]
        if missing:
            raise ValueError(f"{len(missing)} seed voxel(s) lie outside the region, the "
                             f"first {missing[0]}; choose seeds inside it.")
        return np.array([lookup[tuple(s)] for s in seeds.tolist()], dtype=np.int64)
    try:
        values = seeds.astype(np.float64).ravel()
    except (TypeError, ValueError):
        values = np.full(1, np.nan)
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
        raise ValueError(f"seeds must be whole row numbers of the region (or (k, 3) voxel "
                         f"indices); got {seeds.ravel()[:5].tolist()!r}: a fractional or "
                         f"non-finite seed names no voxel.")
    seeds = values.astype(np.int64)
    if seeds.min() < 0 or seeds.max() >= len(voxels):
        raise ValueError(f"seeds must be rows of the region, in [0, {len(voxels)}).")
    return seeds


def _one_fit(fit, seeds, observed, posterior) -> np.ndarray:
    """The seeds' correlations ``(k, n)`` under one fitted regressor."""
    graph = fit.graph_
    length, _ = graph.own_units()
    own = graph.in_own_units()
    nu = int(fit.matern_order_)
    kappa2 = (fit.matern_kappa_ * length) ** 2
    n = own.n_nodes
    if not posterior:
        if n > FACTOR_MAX_NODES:
            # AMG-preconditioned CG, without the costly factor of S (flgp.precision.multigrid)
            prior = SparsePrecisionPrior(own, nu=nu, kappa2=kappa2, solver="amg",
                                         tol=LARGE_SOLVE_TOL)
        else:
            prior = SparsePrecisionPrior(own, nu=nu, kappa2=kappa2)
        cov = prior.cross_covariance(seeds)                        # (n, k)
        var = prior.marginal_variances(n_samples=VARIANCE_SAMPLES)
    else:
        obs = np.flatnonzero(observed)
        reg = MaternRegression(own, obs, np.zeros(obs.size), nu)
        ratio = fit._chosen_fit.ratio           # noise / amplitude, graph in own units
        cov = reg.unit_posterior_columns(kappa2, ratio, seeds)
        var = reg.unit_posterior_variances(kappa2, ratio, np.arange(n),
                                           EXACT_VARIANCE_ROWS)
    var_seed = cov[seeds, np.arange(seeds.size)]
    var = np.array(var, dtype=np.float64)
    var[seeds] = var_seed                   # exact at the seeds: a seed's own value is 1
    # beyond EXACT_VARIANCE_ROWS voxels the variances are estimates: a correlation past
    # ±1 by the estimator's error is clipped
    return np.clip(cov / np.sqrt(np.outer(var, var_seed)), -1.0, 1.0).T
