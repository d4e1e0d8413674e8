"""The extrinsic baselines: RBF-kernel GPs on the labelled points only.

Their hyperparameters are fitted honestly (a badly fitted RBF GP makes any manifold method
look good): the classifier's length-scale and amplitude by the Laplace marginal likelihood
over a grid around the median heuristic; the regressor is an exact GP whose amplitude and
constant are profiled out of the exact marginal likelihood, leaving a grid and L-BFGS-B over
length-scale and noise ratio, one Cholesky per evaluation (numpy and LAPACK).
"""

from __future__ import annotations

import contextlib

import numpy as np
from scipy.spatial.distance import cdist, pdist

from .._chunks import default_chunk_size
from .._validation import power_of_two_unit
from ..backends import limit_blas_threads, resolve_backend
from ..precision.gaussian import Screen, exhaust
from .inference.laplace import (LogisticLikelihood, binary_predict, laplace_binary,
                                laplace_softmax, probit_logistic, softmax_predict,
                                softmax_probabilities)
from .representation import (ClassificationFit, ClassificationRepresentation, RegressionFit,
                             RegressionRepresentation, Screened)
from .search import single_threaded_blas

__all__ = ["RBFLaplaceClassifier", "RBFGPRegressor", "RBFRegression", "RBFRegressionFit",
           "RBFClassification", "RBFClassificationFit"]


def _standardise(X, feature_scale=None):
    """Each feature's mean and sd over the rows of ``X``; a constant feature takes its
    ``feature_scale`` (the cloud's spread, keeping the fit unit-free), else 1."""
    mu = X.mean(0)
    sd = X.std(0)
    if feature_scale is not None:
        sd = np.where(sd == 0, np.asarray(feature_scale, dtype=np.float64), sd)
    sd[~(sd > 0)] = 1.0
    return mu, sd


def cloud_feature_scale(X):
    """The features' standard deviations over the whole cloud (see :func:`_standardise`)."""
    return np.asarray(X, dtype=np.float64).std(0)


class RBFLaplaceClassifier:
    """RBF GP classifier (binary logistic or softmax, Laplace) on labelled points."""

    LENGTH_GRID = np.logspace(-1.5, 1.0, 11)
    AMPLITUDE_GRID = (0.5, 2.0, 8.0, 32.0)

    def __init__(self, max_iter: int = 100, feature_scale=None):
        self.max_iter = max_iter
        self.feature_scale = feature_scale

    def _laplace(self, K):
        if self.n_classes_ == 2:
            return laplace_binary(K, 2.0 * self.codes_ - 1.0, LogisticLikelihood,
                                  max_iter=self.max_iter)
        return laplace_softmax(K, np.eye(self.n_classes_)[self.codes_], max_iter=self.max_iter)

    def fit(self, X, codes):
        self.mu_, self.sd_ = _standardise(X, self.feature_scale)
        Z = (X - self.mu_) / self.sd_
        self.Z_ = Z
        self.codes_ = codes
        self.n_classes_ = int(codes.max()) + 1
        d2 = cdist(Z, Z, "sqeuclidean")
        med = np.sqrt(np.median(d2[np.triu_indices_from(d2, 1)]) / 2.0) or 1.0
        best = None
        for ell in med * self.LENGTH_GRID:
            base = np.exp(-d2 / (2 * ell * ell))
            for amp in self.AMPLITUDE_GRID:
                st = self._laplace(amp * base)
                if best is None or st.log_evidence > best[2].log_evidence:
                    best = (ell, amp, st)
        self.lengthscale_, self.outputscale_, self.state_ = best
        self.log_marginal_likelihood_ = self.state_.log_evidence
        return self

    def _latent(self, X):
        Z = (X - self.mu_) / self.sd_
        d2 = cdist(self.Z_, Z, "sqeuclidean")
        K_cross = self.outputscale_ * np.exp(-d2 / (2 * self.lengthscale_ ** 2))
        k_diag = np.full(Z.shape[0], self.outputscale_)
        if self.n_classes_ == 2:
            return binary_predict(self.state_, K_cross, k_diag)
        return softmax_predict(self.state_, K_cross, k_diag)

    def predict_proba(self, X):
        out = []
        for start in range(0, X.shape[0], 4096):
            mean, var = self._latent(X[start:start + 4096])
            if self.n_classes_ == 2:
                p1 = probit_logistic(mean, var)
                out.append(np.c_[1 - p1, p1])
            else:
                out.append(softmax_probabilities(mean, var))
        return np.vstack(out)

    def predict_codes(self, X):
        return np.argmax(self.predict_proba(X), axis=1)


# the most labels for which FLGPRegressor() weighs the RBF GP (O(m³) a fit, two m x m arrays)
RBF_MAX_LABELS = 6000
# above 1.5 times this many labels the search runs on a uniform sample of this many first,
# then at most REFINE_STEPS L-BFGS-B iterations on all labels
SUBSET_LABELS = 1500
REFINE_STEPS = 2
# below this many labels the factorisations run on one BLAS thread (faster at that size)
SMALL_LABELS = 1750

_LOG_2PI = float(np.log(2.0 * np.pi))


def _self_sqdist(Z):
    """Squared distances between the rows of ``Z`` (``m x m``, zero diagonal)."""
    D2 = Z @ Z.T
    norms = np.einsum("ij,ij->i", Z, Z)
    D2 *= -2.0
    D2 += norms[:, None]
    D2 += norms[None, :]
    np.maximum(D2, 0.0, out=D2)
    D2[np.diag_indices_from(D2)] = 0.0
    return D2


def _median_scale(Z):
    """The median heuristic ``sqrt(median |z_i - z_j|^2 / 2)`` over the first 2000 rows
    (1 where they all coincide)."""
    sub = Z[:2000]
    d2 = pdist(sub, "sqeuclidean")
    return float(np.sqrt(np.median(d2, overwrite_input=True) / 2.0)) or 1.0


class _ProfiledEvidence:
    """The log evidence of standardised targets under ``z = c + f + ε``,
    ``f ~ GP(0, A k_ℓ)``, ``ε ~ N(0, A r I)``, with ``A`` and ``c`` profiled out: with
    ``S = K_ℓ + r I``, ``ĉ = 1ᵀS⁻¹z / 1ᵀS⁻¹1``, ``q = (z - ĉ)ᵀ S⁻¹ (z - ĉ)``, ``Â = q / m``,
    ``log p = log N(z | ĉ 1, Â S)`` (no REML correction).

    The gradient in ``(log ℓ, log r)`` (envelope theorem) is ``1/2 tr((α αᵀ / Â - S⁻¹)
    ∂S)``, ``α = S⁻¹ (z - ĉ)``. A fixed ``noise`` (the variance ``A r`` of ``z``) sets
    ``A = noise / r``."""
    AMPLITUDE_FLOOR = 1e-12

    def __init__(self, Z, z, noise=None):
        self.noise = None if noise is None else float(noise)
        self.z = np.ascontiguousarray(z, dtype=np.float64)
        self.m = self.z.size
        self.sqdist = _self_sqdist(Z)
        self.work = np.empty_like(self.sqdist)
        self.n_evaluations = 0
        self.point = self.factor = None     # the last point whose Cholesky factor is kept

    def __call__(self, log_ell, log_ratio, gradient=False):
        """``(log evidence, gradient or None)`` at ``(log ℓ, log r)``: ``-inf`` where the
        Cholesky fails. After a value-only evaluation ``factor`` holds the Cholesky factor
        (lower triangle, Fortran order; the other triangle holds S)."""
        from scipy.linalg import lapack

        self.n_evaluations += 1
        m, D2, S = self.m, self.sqdist, self.work
        ell2, ratio = float(np.exp(2.0 * log_ell)), float(np.exp(log_ratio))
        np.multiply(D2, -0.5 / ell2, out=S)
        np.exp(S, out=S)
        S[np.diag_indices_from(S)] += ratio
        # S is symmetric: factor its Fortran-ordered transpose in place
        factor, info = lapack.dpotrf(S.T, lower=1, clean=0, overwrite_a=1)
        self.point = self.factor = None
        if info != 0:
            return -np.inf, None
        solved, info = lapack.dpotrs(factor, np.c_[self.z, np.ones(m)], lower=1)
        constant = float(solved[:, 0].sum() / solved[:, 1].sum())
        alpha = solved[:, 0] - constant * solved[:, 1]        # S⁻¹ (z - ĉ)
        quad = float((self.z - constant) @ alpha)
        amplitude = (max(quad / m, self.AMPLITUDE_FLOOR) if self.noise is None
                     else self.noise / ratio)
        logdet = 2.0 * float(np.log(np.diagonal(factor)).sum())
        value = -0.5 * (m * (_LOG_2PI + np.log(amplitude)) + logdet + quad / amplitude)
        if not np.isfinite(value):
            return -np.inf, None
        self.point, self.factor = (float(log_ell), float(log_ratio)), factor
        self.constant, self.amplitude, self.alpha = constant, amplitude, alpha
        if not gradient:
            return value, None
        inverse, info = lapack.dpotri(factor, lower=1, overwrite_c=1)
        self.point = self.factor = None     # S⁻¹ has overwritten the factor
        if info != 0:
            return value, None
        # S⁻¹ is the upper triangle of ``inverse.T`` (the other still holds S): each pair
        # i < j once
        inverse = inverse.T
        d_ratio = 0.5 * ratio * (float(alpha @ alpha) / amplitude - float(np.trace(inverse)))
        if self.noise is not None:                  # A = noise / r moves with r
            d_ratio += 0.5 * (m - quad / amplitude)
        quad_ell = trace_ell = 0.0
        step = default_chunk_size(8 * 3 * m)
        for start in range(0, m, step):
            stop = min(start + step, m)
            dist = D2[start:stop, start:]
            weight = np.exp(dist * (-0.5 / ell2))
            weight *= dist
            weight = np.triu(weight, 1)                  # K ∘ D² on the pairs i < j
            quad_ell += float(alpha[start:stop] @ (weight @ alpha[start:]))
            trace_ell += float(np.einsum("ij,ij->", weight, inverse[start:stop, start:]))
        d_ell = (quad_ell / amplitude - trace_ell) / ell2
        grad = np.array([d_ell, d_ratio])
        return value, (grad if np.isfinite(grad).all() else None)


class RBFGPRegressor:
    """Exact GP regression with an RBF kernel on the labelled points, its hyperparameters
    at the maximum of the exact marginal likelihood (numpy/scipy).

    On standardised inputs and targets ``z`` (``y`` over a power-of-two unit ``y_unit_``,
    centred, unit variance): ``z = c + f + ε``, ``f ~ GP(0, A k_ℓ)``,
    ``ε ~ N(0, A r I)``, ``A`` and ``c`` profiled out (:class:`_ProfiledEvidence`). By
    default a grid of ``LENGTH_FACTORS`` times the median heuristic by ``RATIO_GRID``,
    then L-BFGS-B from its best point within ``ℓ ∈ [med/100, 10 med]``,
    ``r ∈ [1e-6, 10]``. The fit does not depend on the units of ``y``.

    Parameters
    ----------
    max_iter : int
        Iterations of the L-BFGS-B refinement (at most ``2 max_iter`` evaluations);
        0 keeps the best grid point.
    backend : str
        Unused (the fit is numpy/LAPACK whatever the backend); kept for the signature.
    noise : float, optional
        Fix the noise variance (in units of ``y²``); None: fitted.

    Attributes
    ----------
    lengthscale_ : float
        ``ℓ``, in units of the standardised inputs.
    outputscale_, noise_ : float
        ``A`` and the noise variance ``A r``, in units of ``y²`` (inf where that
        overflows float64); ``noise_pre_`` is the noise variance in units of
        ``(y / y_unit_)²``.
    constant_ : float
        ``c`` in units of ``y``.
    log_marginal_likelihood_ : float
        The maximised log evidence of ``y`` in its units.
    n_iter_ : int
        The number of evidence evaluations (one Cholesky each).
    y_unit_, y_mean_, y_scale_ : float
        The power-of-two unit, the mean and the standard deviation of the targets.
    """

    # the grid: length-scales (times the median heuristic) by noise-to-signal ratios r
    LENGTH_FACTORS = (10 ** -1.5, 0.1, 10 ** -0.5, 1.0, 10 ** 0.5)
    RATIO_GRID = (1e-3, 1e-1)
    LENGTH_RANGE = (1e-2, 10.0)           # times the median heuristic
    RATIO_RANGE = (1e-6, 10.0)
    # the screen's coarse stage evaluates the grid at these ratio positions only (its
    # polished best matched the whole grid's on benchmarks/screening.py)
    SCREEN_RATIOS = (-1,)
    # _polished's steps (ratio by decades, length-scale by quarter decades) and limits
    POLISH_STEPS = ((1, np.log(10.0)), (0, 0.25 * np.log(10.0)))
    POLISH_MOVES = 3
    POLISH_PASSES = 2
    # L-BFGS-B's projected-gradient tolerance and first step length (log units)
    GRADIENT_TOLERANCE = 1e-4
    FIRST_STEP = 0.5

    def __init__(self, max_iter: int = 100, backend: str = "torch", noise=None,
                 feature_scale=None):
        self.max_iter = max_iter
        self.backend = backend
        self.noise = noise
        self.feature_scale = feature_scale

    def fit(self, X, y):
        """Fit on the labelled ``X`` and ``y`` (below ``SMALL_LABELS`` labels on one BLAS
        thread)."""
        return exhaust(self.fit_steps(X, y))

    def fit_steps(self, X, y, screen: bool = False):
        """:meth:`fit` as a generator returning the estimator. ``screen=True``: it first
        yields a :class:`~flgp.precision.gaussian.Screen` of its coarse stage's best log
        evidence of ``y`` (``tighten``: :meth:`_polished`), then goes on when sent None."""
        threads = 1 if np.shape(y)[0] < SMALL_LABELS else None

        def blas():
            return limit_blas_threads(threads) if threads else contextlib.nullcontext()

        with blas():
            Z, evidence, med, best, max_iter, values = self._coarse(X, y, screen=screen)
        if screen:
            coarse = best

            def tighten():
                with blas():
                    return self._evidence_of_y(self._polished(evidence, med, coarse),
                                               evidence.m)

            grid = values is not None                       # not the sample's optimum
            yield Screen(self._evidence_of_y(best[0], evidence.m),
                         tighten if grid else None, loose=grid)
            if grid:
                with blas():
                    best, _ = self._grid(evidence, med, known=values)
        with blas():
            self._refined(Z, evidence, med, best, max_iter)
        return self

    def _evidence_of_y(self, value, m):
        """The log evidence of ``y`` from that of the standardised targets."""
        return value - m * (np.log(self.y_scale_ / self.y_unit_) + np.log(self.y_unit_))

    def _coarse(self, X, y, screen: bool = False):
        """Validation, standardisation and the coarse stage: ``(Z, evidence, median
        scale, [best value, best point], L-BFGS-B iterations left, grid values or None)``;
        ``screen``: the grid at ``SCREEN_RATIOS`` only."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"RBFGPRegressor.fit takes X of shape (m, p) and y of shape "
                             f"(m,); got {X.shape} and {y.shape}.")
        if X.shape[0] < 2:
            raise ValueError(f"the RBF GP needs at least 2 labelled points; got "
                             f"{X.shape[0]}.")
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError("the RBF GP's labelled X and y must be finite (no NaN or inf).")
        self.mu_, self.sd_ = _standardise(X, getattr(self, "feature_scale", None))
        # an exact power-of-two unit first (1 for ordinary data)
        self.y_unit_ = unit = power_of_two_unit(y)
        y_pre = y / unit
        mean_pre, scale_pre = float(y_pre.mean()), float(y_pre.std()) or 1.0
        self.y_mean_ = mean_pre * unit
        self.y_scale_ = scale_pre * unit
        Z = (X - self.mu_) / self.sd_
        z = (y_pre - mean_pre) / scale_pre
        noise_z = (None if self.noise is None
                   else float(self.noise) / unit / unit / scale_pre ** 2)
        if noise_z is not None and not (np.isfinite(noise_z) and noise_z > 0):
            raise ValueError(f"noise must be a positive variance that float64 holds in the "
                             f"units of y; got {self.noise!r}.")
        med = _median_scale(Z)
        start = None
        if z.size > 1.5 * SUBSET_LABELS:
            pick = np.sort(np.random.default_rng(0).choice(z.size, SUBSET_LABELS,
                                                            replace=False))
            sub = _ProfiledEvidence(Z[pick], z[pick], noise_z)
            start = self._search(sub, med)[:2]
            del sub
        evidence = _ProfiledEvidence(Z, z, noise_z)
        values = {}
        best, started = self._grid(evidence, med, start, known=values,
                                   ratios=self.SCREEN_RATIOS if screen else None)
        if started:
            values = None                # the sample's optimum: the stage is not the grid
        max_iter = min(int(self.max_iter), REFINE_STEPS) if started else int(self.max_iter)
        return Z, evidence, med, best, max_iter, values

    def _refined(self, Z, evidence, med, best, max_iter):
        """The search's L-BFGS-B refinement from ``best`` and the fitted state."""
        z = evidence.z
        log_ell, log_ratio, value = self._refine(evidence, med, best, max_iter)
        if evidence.point != (log_ell, log_ratio):
            value = evidence(log_ell, log_ratio)[0]      # the factor at the best point
        m = z.size
        unit = self.y_unit_
        scale_pre = self.y_scale_ / unit          # exact: the unit is a power of two
        self.n_iter_ = evidence.n_evaluations
        self.log_marginal_likelihood_ = self._evidence_of_y(value, m)
        amplitude, constant = evidence.amplitude, evidence.constant
        ratio = float(np.exp(log_ratio))
        # in units of y^2 (inf beyond float64); noise_pre_ in (y / y_unit_)^2
        with np.errstate(over="ignore"):
            scale2 = np.float64(scale_pre) ** 2 * np.float64(unit) * np.float64(unit)
        self.noise_pre_ = amplitude * ratio * scale_pre ** 2
        self.noise_ = amplitude * ratio * float(scale2)
        self.outputscale_ = amplitude * float(scale2)
        self.constant_ = constant * self.y_scale_ + self.y_mean_
        self.lengthscale_ = float(np.exp(log_ell))
        self._set_predictor(Z, evidence, self.lengthscale_, amplitude, constant)
        return self

    def _search(self, evidence, med):
        """``(log ℓ, log r, log evidence)``: the grid, then L-BFGS-B from its best point."""
        best, _ = self._grid(evidence, med)
        return self._refine(evidence, med, best, int(self.max_iter))

    def _grid(self, evidence, med, start=None, known=None, ratios=None):
        """``([best value, best point], started)``: the grid's best point, or ``start``
        alone (the grid where it cannot be factored). ``known``: cached ``{point: value}``,
        updated; ``ratios``: positions of the grid's ratios (None: all)."""
        best = [-np.inf, None]
        grid_ratios = self.RATIO_GRID
        if evidence.noise is not None:              # A = noise / r: A = 0.1 and 1
            grid_ratios = tuple(float(np.clip(evidence.noise / a, *self.RATIO_RANGE))
                                for a in (0.1, 1.0))
        if ratios is not None and start is None:
            grid_ratios = tuple(grid_ratios[i] for i in ratios)
        known = {} if known is None else known
        points = ([start] if start is not None else
                  [(np.log(med * factor), np.log(ratio)) for factor in self.LENGTH_FACTORS
                   for ratio in grid_ratios])
        for point in points:
            key = (float(point[0]), float(point[1]))
            if start is None and key in known:
                value = known[key]
            else:
                value = evidence(*point)[0]
                if start is None:
                    known[key] = value
            if value > best[0]:
                best[:] = [value, key]
        if best[1] is None and start is not None:      # the sample's optimum fails here
            return self._grid(evidence, med, known=known)[0], False
        if best[1] is None and ratios is not None:     # that part fails: the whole grid
            return self._grid(evidence, med, known=known)
        if best[1] is None:
            raise np.linalg.LinAlgError("the RBF GP's covariance K + r I is not positive "
                                        "definite at any grid point")
        return best, start is not None

    def _polished(self, evidence, med, best) -> float:
        """The screening value: the evidence at ``best = [value, point]`` moved by
        ``POLISH_STEPS`` along each axis while it rises (docs/models.md, "Screening")."""
        lo = np.log([med * self.LENGTH_RANGE[0], self.RATIO_RANGE[0]])
        hi = np.log([med * self.LENGTH_RANGE[1], self.RATIO_RANGE[1]])
        origin, steps = best[1], dict(self.POLISH_STEPS)

        def at(offset):
            return tuple(float(np.clip(origin[a] + offset[a] * steps[a], lo[a], hi[a]))
                         for a in (0, 1))

        value, offset = best[0], [0, 0]
        seen = {at(offset): value}
        for _ in range(self.POLISH_PASSES):
            moved = False
            for axis, _step in self.POLISH_STEPS:
                for direction in (-1, 1):
                    moves = 0
                    while moves < self.POLISH_MOVES:
                        trial_offset = list(offset)
                        trial_offset[axis] += direction
                        trial = at(trial_offset)
                        if trial[axis] == at(offset)[axis]:       # at a bound
                            break
                        if trial not in seen:
                            seen[trial] = evidence(*trial)[0]
                        if not seen[trial] > value:
                            break
                        value, offset, moves = seen[trial], trial_offset, moves + 1
                    if moves:
                        moved = True
                        break
            if not moved:
                break
        return value

    def _refine(self, evidence, med, best, max_iter):
        """``(log ℓ, log r, log evidence)`` after L-BFGS-B from ``best = [value, point]``."""
        from scipy.optimize import minimize

        bounds = np.log([[med * self.LENGTH_RANGE[0], med * self.LENGTH_RANGE[1]],
                         self.RATIO_RANGE])
        best = list(best)

        def keep(point, value):
            if value > best[0]:
                best[:] = [value, (float(point[0]), float(point[1]))]

        if max_iter < 1:
            return (*best[1], best[0])
        start = np.array(best[1])
        value, grad = evidence(*start, gradient=True)
        if grad is None:
            return (*best[1], best[0])
        # scaled so that L-BFGS-B's first step (the projected gradient) is ~FIRST_STEP
        scale = self.FIRST_STEP / max(float(np.abs(grad).max()), 1e-12)
        first = {tuple(start): (value, grad)}

        def objective(point):
            value, grad = first.pop(tuple(point), (None, None))
            if value is None:
                value, grad = evidence(*point, gradient=True)
            keep(point, value)
            if grad is None:        # a failed factorisation or gradient: a wall to L-BFGS-B
                return np.inf, np.zeros(2)
            return -scale * value, -scale * grad

        minimize(objective, start, jac=True, method="L-BFGS-B", bounds=bounds,
                 options={"maxiter": max_iter, "maxfun": 2 * max_iter,
                          "gtol": scale * self.GRADIENT_TOLERANCE})
        return (*best[1], best[0])

    def _set_predictor(self, Z, evidence, ell, amplitude, constant):
        """Keep the Cholesky factor ``L`` of ``K + r I`` and ``α = (K + r I)⁻¹ (z - c)``
        from the evidence's last evaluation (at the fitted point), for :meth:`predict`."""
        factor = evidence.factor              # L in its lower triangle (Fortran order)
        for column in range(1, factor.shape[0]):
            factor[:column, column] = 0.0         # clear the other triangle (it held S)
        evidence.sqdist = evidence.work = None
        self._Z_train = Z
        self._chol = factor
        self._alpha = evidence.alpha
        self._hyper = (ell, amplitude, constant)

    def predict(self, X, return_std: bool = True):
        """Exact posterior mean (and latent standard deviation) at ``X`` in units of ``y``:
        ``c + K* α`` and ``A (1 - |L⁻¹ K*ᵀ|²)``."""
        import scipy.linalg

        ell, amplitude, constant = self._hyper
        Zt, L = self._Z_train, self._chol
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        mean = np.empty(n)
        std = np.empty(n) if return_std else None
        step = default_chunk_size(8 * (5 * Zt.shape[0] + 4 * X.shape[1] + 8))
        for start in range(0, n, step):
            Z = (X[start:start + step] - self.mu_) / self.sd_
            Kx = np.exp(-cdist(Z, Zt, "sqeuclidean") / (2.0 * ell * ell))
            mean[start:start + step] = constant + Kx @ self._alpha
            if return_std:
                W = scipy.linalg.solve_triangular(L, Kx.T, lower=True, check_finite=False)
                var = amplitude * (1.0 - np.einsum("ij,ij->j", W, W))
                std[start:start + step] = np.sqrt(np.maximum(var, 0.0))
        mean = self.y_mean_ + self.y_scale_ * mean
        return (mean, self.y_scale_ * std) if return_std else mean


# -- the RBF GPs as representations of the estimators' priors (method="rbf") ---------------

class RBFRegression(RegressionRepresentation):
    """The exact RBF GP on the labelled points as one of :class:`flgp.FLGPRegressor`'s
    representations (:mod:`flgp.models.representation`)."""

    name = "rbf"
    graph_checks = False                # the labelled rows alone: no graph on the cloud

    def infeasible(self, prior, options, shape, n_labelled):
        """More than ``RBF_MAX_LABELS`` labels (``O(m³)`` an evidence evaluation)."""
        if n_labelled <= RBF_MAX_LABELS:
            return None
        return (f"{n_labelled} labels > RBF_MAX_LABELS = {RBF_MAX_LABELS}: an exact RBF GP "
                f"costs O(m^3) per evidence evaluation")

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation):
        """:class:`RBFGPRegressor` on ``X[labelled]`` and ``y_lab``."""
        rbf = RBFGPRegressor(options.max_iter, backend=resolve_backend(options.backend),
                             noise=options.noise, feature_scale=cloud_feature_scale(X)).fit(
            X[labelled], y_lab)
        return RBFRegressionFit(rbf, options.method == "rbf")

    def screen(self, prior, options, X, labelled, y_lab, z, standardisation):
        """:meth:`fit` paused after its grid (:meth:`RBFGPRegressor.fit_steps`)."""
        rbf = RBFGPRegressor(options.max_iter, backend=resolve_backend(options.backend),
                             noise=options.noise, feature_scale=cloud_feature_scale(X))
        return Screened.of_steps(rbf.fit_steps(X[labelled], y_lab, screen=True),
                                 lambda value: value,
                                 lambda rbf: RBFRegressionFit(rbf, options.method == "rbf"))


class RBFRegressionFit(RegressionFit):
    """A fitted :class:`RBFGPRegressor` (``rbf``, the estimator's ``rbf_``); ``alone``: the
    one prior offered."""

    method = "rbf"

    def __init__(self, rbf: RBFGPRegressor, alone: bool):
        self.rbf, self.alone = rbf, alone
        self.log_evidence = rbf.log_marginal_likelihood_

    def fitted_attributes(self, X, stacklevel):
        rbf = self.rbf
        out = dict(rbf_=rbf, method_="rbf", n_iter_=rbf.n_iter_)
        if self.alone:
            out["eigenpairs_"] = None
        out.update(noise_=rbf.noise_, outputscale_=rbf.outputscale_,
                   log_marginal_likelihood_=rbf.log_marginal_likelihood_)
        out["transduction_"], out["transduction_std_"] = rbf.predict(X)
        return out

    def predict(self, X, stacklevel):
        return self.rbf.predict(X)

    def interval_noise(self):
        return self.rbf.y_unit_, self.rbf.noise_pre_


class RBFClassification(ClassificationRepresentation):
    """The RBF GP classifier on the labelled points as one of :class:`flgp.FLGPClassifier`'s
    representations (:mod:`flgp.models.representation`); ``"auto"`` never takes it."""

    name = "rbf"
    graph_checks = False                # the labelled rows alone: no graph on the cloud

    def chosen_by_auto(self, prior, options, X, counts):
        return False

    def declined_by_auto(self, prior, options, X, counts):
        return ("the RBF GP sees the labelled points only (not the cloud): fitted when "
                "asked for alone (RBFPrior()), never by the rule")

    def fit(self, prior, options, X, labelled, codes, classes):
        """:class:`RBFLaplaceClassifier` on ``X[labelled]`` and the class codes."""
        with single_threaded_blas():
            rbf = RBFLaplaceClassifier(max_iter=options.max_iter,
                                       feature_scale=cloud_feature_scale(X)).fit(
                X[labelled], codes)
        return RBFClassificationFit(rbf, classes)


class RBFClassificationFit(ClassificationFit):
    """A fitted :class:`RBFLaplaceClassifier` (``rbf``), the estimator's ``rbf_``, and the
    ``classes`` its codes stand for."""

    method = "rbf"

    def __init__(self, rbf: RBFLaplaceClassifier, classes):
        self.rbf, self.classes = rbf, classes

    def fitted_attributes(self, X, stacklevel):
        rbf = self.rbf
        return dict(rbf_=rbf, n_iter_=1, eigenpairs_=None, diffusion_time_weights_=None,
                    log_marginal_likelihood_=rbf.log_marginal_likelihood_,
                    transduction_=self.classes[rbf.predict_codes(X)],
                    label_distributions_=rbf.predict_proba(X))

    def predict_proba(self, X, stacklevel):
        return self.rbf.predict_proba(X)
