"""Predictions of a fitted heat-kernel regressor from eigenvector rows: the Gaussian
posterior of ``y`` (:class:`RegressionPredictor`) and, for counts, of the rate
(:class:`CountPredictor`). Small and picklable - Dask ships them to its tasks - and called
by :meth:`flgp.spectral.Eigenpairs.map_chunks` / ``map_points`` on blocks of rows; the
regressor's counterpart of :mod:`flgp.models.class_predictor`."""

from __future__ import annotations

import warnings

import numpy as np

from ..spectral import RowSquaredNorm
from ..spectral.families import nonzero_prefix
from .inference.poisson import bounded_rate_moments

__all__ = ["RegressionPredictor", "CountPredictor", "warn_unrepresentable_counts"]


class RegressionPredictor:
    """Posterior mean and sd of ``y`` from eigenvector rows: ``f(x) = v(x) D^{1/2} u`` with
    ``u ~ N(w_mean, w_cov)``; rows in a piece without labels get the prior.
    ``__call__(Z, pieces) -> (b, 2)``.

    The mean is ``v D^{1/2} w_mean`` and the variance ``|v D^{1/2} L|²`` with ``L Lᵀ =
    w_cov``, so the predictor reads the rows of ``Z = V · project``, which FLGP computes
    from the ``r``-sparse transition rows (:meth:`flgp.spectral.Eigenpairs.map_chunks`) in
    ``O(r k)`` a point."""

    def __init__(self, sd, w_mean, w_cov, y_mean, y_scale, piece_has_label):
        M = sd.size
        # prior weights below 1e-8 of the largest sd (1e-16 of the variance) are dropped
        # (as in spectral_weights) and so are their columns (active_columns)
        sd = np.where(sd < 1e-8 * sd.max(), 0.0, sd)
        k = nonzero_prefix(sd)
        if k is not None and k < sd.size:   # the dropped ones trail: keep the leading ones
            sd, w_mean, w_cov = sd[:k], w_mean[:k], w_cov[:k, :k]
        self.k = sd.size
        self.sd = sd
        self.w_mean = w_mean
        self.w_cov = np.ascontiguousarray(w_cov)
        self.y_mean = y_mean
        self.y_scale = y_scale
        self.piece_has_label = piece_has_label
        evals, U = np.linalg.eigh(0.5 * (self.w_cov + self.w_cov.T))
        factor = U * np.sqrt(np.maximum(evals, 0.0))                    # L Lᵀ = w_cov
        self._with_prior = (piece_has_label is not None
                            and not np.all(piece_has_label))

        def padded(block):
            out = np.zeros((M, block.shape[1]))
            out[:self.k] = block
            return out

        # the mean's column, and the variance as a squared norm |v D^{1/2} L|² (the
        # engine reads it off the transition rows, RowSquaredNorm); the prior's variance
        # |v D^{1/2}|² for rows in pieces without a label
        self.project = (padded((sd * w_mean)[:, None]),
                        RowSquaredNorm(padded(sd[:, None] * factor)))
        if self._with_prior:
            self.project += (RowSquaredNorm(padded(np.diag(sd))),)

    def moments(self, Z, pieces=None):
        """Posterior mean and variance of the (standardised) latent from ``Z``: the rows
        of ``V`` through ``project`` (its mean column, the variance, the prior's
        variance)."""
        mean = Z[0][:, 0].copy()
        var = np.array(Z[1], dtype=np.float64)
        if self._with_prior and pieces is not None:
            prior = ~self.piece_has_label[pieces]
            if prior.any():
                mean[prior] = 0.0
                var[prior] = Z[2][prior]
        return mean, np.maximum(var, 0.0)

    def __call__(self, Z, pieces=None):
        mean, var = self.moments(Z, pieces)
        out = np.empty((mean.shape[0], 2))
        out[:, 0] = self.y_mean + self.y_scale * mean
        out[:, 1] = self.y_scale * np.sqrt(np.maximum(var, 0.0))
        return out


class CountPredictor(RegressionPredictor):
    """Posterior mean and sd of the rate ``exp(b + f(x) + ε)`` of a new count from
    eigenvector rows (``latent``: the log-rate's mean and sd instead; ``ε ~ N(0, σ²)`` its
    own term, the overdispersion); picklable, ``__call__(V, pieces) -> (b, 2)``.

    Unlike the Gaussian predictor (docs/models.md, "Count data"): a piece of the graph
    without a label predicts the log-rate of a count drawn like the labelled ones,
    ``N(population[0], population[1] + σ²)``
    (:func:`~flgp.models.inference.poisson.count_population`), not the heat kernel's prior,
    whose variance grows as the piece shrinks; and the log-rate is truncated at ``ceiling``
    (:func:`~flgp.models.inference.poisson.rate_ceiling`,
    :func:`~flgp.models.inference.poisson.bounded_rate_moments`) so that the mean count
    stays bounded by what the labels support."""

    def __init__(self, sd, w_mean, w_cov, offset, piece_has_label, nugget=0.0,
                 latent=False, population=None, ceiling=np.inf):
        super().__init__(sd, w_mean, w_cov, 0.0, 1.0, piece_has_label)
        self.offset = float(offset)
        self.nugget = float(nugget)     # σ²: a new count's own log-rate variance
        self.latent = latent
        # (mean, variance) of a labelled count's latent log-rate, relative to the offset
        self.population = None if population is None else tuple(map(float, population))
        self.ceiling = float(ceiling)   # the log-rate's upper bound

    def moments(self, Z, pieces=None):
        """The log-rate of a new count: the latent's posterior plus the count's own term
        (variance ``σ²``); in a piece without a label, the labelled counts' population."""
        mean, var = super().moments(Z, pieces)
        population = self.population
        if population is not None and self._with_prior and pieces is not None:
            alone = ~self.piece_has_label[pieces]
            if alone.any():
                mean[alone], var[alone] = population
        return mean, var + self.nugget

    @classmethod
    def latent_of(cls, pr):
        out = cls.__new__(cls)
        out.__dict__.update(pr.__dict__)
        out.latent = True
        return out

    def __call__(self, Z, pieces=None):
        mean, var = self.moments(Z, pieces)
        out = np.empty((mean.shape[0], 2))
        if self.latent:
            out[:, 0] = self.offset + mean
            out[:, 1] = np.sqrt(var)
            return out
        out[:, 0], out[:, 1] = bounded_rate_moments(self.offset + mean, var,
                                                    self.ceiling)
        return out


def warn_unrepresentable_counts(mean, sd_latent_max, stacklevel: int = 3) -> None:
    """Warn when posterior mean counts overflow float64 (returned as inf)."""
    over = ~np.isfinite(mean)
    if over.any():
        warnings.warn(f"{int(over.sum())} point(s) have a posterior mean count beyond "
                      f"float64 (returned as inf): E[exp f] = exp(m + v/2) with the "
                      f"log-rate's posterior sd up to {sd_latent_max:.3g} there. The prior "
                      f"variance of the heat kernel is large at those points for the fitted "
                      f"diffusion time; predict_interval gives the count's quantiles, and "
                      f"more labels near them narrow the posterior.", UserWarning,
                      stacklevel=stacklevel)
