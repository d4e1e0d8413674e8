"""Semi-supervised heat-kernel GP regression (scikit-learn API)."""

from __future__ import annotations


import numpy as np
from scipy.optimize import minimize
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import column_or_1d

from .._validation import check_int, check_option, check_positive
from ..kernels.heat_kernel import diffusion_time_range
from ._common import (METHODS, check_fit_X, check_hyperparameters, check_predict_X,
                      cloud_reach, eigenpair_candidates, extend_with_prior_mask,
                      single_threaded_blas, spectral_weights, stack_unlabeled,
                      warn_unlabelled_components)
from .gaussian import LowRankGaussianEvidence
from .laplace import nonzero_prefix
from ..backends import resolve_backend
from .rbf import RBFGPRegressor

__all__ = ["FLGPRegressor"]


class FLGPRegressor(RegressorMixin, BaseEstimator):
    r"""Heat-kernel Gaussian-process regression on a point cloud (FLGP and baselines).

    Model: ``y = μ + f(x) + noise``, ``f ~ GP(0, s^2 C_t)`` with ``C_t`` the heat kernel of
    the cloud, ``noise ~ N(0, σ^2)``. ``y`` is standardised internally; ``t``, ``s^2`` and
    ``σ^2`` maximise the exact marginal likelihood times the prior ``π(t) ∝ t^{-a0}``
    (L-BFGS-B on their logarithms, started from the two best ``t`` of a 12-point log grid
    over the data-driven range, each with the outputscale that gives the labelled points
    unit mean prior variance), evaluated in ``O(M^3)`` through the Woodbury identity of the
    FLGP appendix. For SE kernels the bandwidth is chosen over a grid by the same likelihood.

    Parameters
    ----------
    method, kernel, subsample, n_induced, n_neighbors, n_eigenpairs, bandwidth,
    bandwidth_grid, lae_regularization, spectrum, diffusion_time, random_state, backend, verbose :
        As in :class:`FLGPClassifier`.
    diffusion_time_prior_power : float, default=1.0
        ``a0`` of the prior ``π(t) ∝ t^{-a0}`` (see :class:`FLGPClassifier`); ``t``, ``s^2``,
        ``σ^2`` are the MAP with this prior and flat priors on ``log s^2``, ``log σ^2``.
    noise : float, optional
        Fix the noise variance (in units of ``y``) instead of fitting it.
    max_iter : int, default=100
        L-BFGS-B iterations per start (Adam steps for ``method="rbf"``).
    learning_rate : float, default=0.1
        Adam step of the ``"rbf"`` baseline.

    Attributes
    ----------
    eigenpairs_, eigenvalues_, diffusion_time_, outputscale_, noise_, bandwidth_,
    bandwidth_scale_, log_marginal_likelihood_, transduction_, transduction_std_,
    n_features_in_
        ``log_marginal_likelihood_`` is ``log N(y | ȳ, s^2 C_t + σ^2 I)`` at the fitted
        values, in the units of ``y`` (the prior on ``t`` is not included, as in
        :class:`FLGPClassifier`).
    """

    def __init__(self, *, method="flgp", kernel="lae", subsample="kmeans", n_induced=None,
                 n_neighbors=3, n_eigenpairs=None, bandwidth=None, bandwidth_grid=None,
                 lae_regularization=1e-3, spectrum="one_step", diffusion_time=None,
                 diffusion_time_prior_power=1.0, noise=None, max_iter=100,
                 learning_rate=0.1, random_state=0, backend="auto", verbose=False):
        self.method = method
        self.kernel = kernel
        self.subsample = subsample
        self.n_induced = n_induced
        self.n_neighbors = n_neighbors
        self.n_eigenpairs = n_eigenpairs
        self.bandwidth = bandwidth
        self.bandwidth_grid = bandwidth_grid
        self.lae_regularization = lae_regularization
        self.spectrum = spectrum
        self.diffusion_time = diffusion_time
        self.diffusion_time_prior_power = diffusion_time_prior_power
        self.noise = noise
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    def fit(self, X, y, X_unlabeled=None):
        """Fit on all points ``X``; ``y`` is NaN on unlabelled rows. Or pass the labelled rows
        as ``X, y`` and the unlabelled points as ``X_unlabeled``."""
        X = check_fit_X(self, X, y)
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"y must be numeric (NaN marks unlabelled rows): {exc}") from exc
        y = column_or_1d(y, warn=True)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have one entry per row of X; got {y.shape[0]} targets "
                             f"for {X.shape[0]} rows.")
        if np.isinf(y).any():
            raise ValueError("y contains infinity; mark unlabelled rows with NaN and remove "
                             "infinite targets.")
        labelled = ~np.isnan(y)
        X, labelled, y = stack_unlabeled(X, X_unlabeled, labelled, y, np.nan)
        check_option(self.method, "method", METHODS)
        check_int(self.max_iter, "max_iter", low=1)
        check_hyperparameters(self)
        check_positive(self.noise, "noise", allow_none=True)
        m = int(labelled.sum())
        if m < 2:
            raise ValueError(f"{m} labelled target(s); at least 2 are needed (NaN marks "
                             f"unlabelled rows).")
        self._labelled = np.flatnonzero(labelled)
        y_lab = y[labelled]
        self._y_mean = float(y_lab.mean())
        self._y_scale = float(y_lab.std()) or 1.0
        if not (np.isfinite(self._y_mean) and np.isfinite(self._y_scale)):
            raise ValueError(f"the labelled targets overflow float64 (largest |y| = "
                             f"{np.abs(y_lab).max():.3g}); rescale y before fitting.")
        z = (y_lab - self._y_mean) / self._y_scale
        if self.method == "rbf":
            self.rbf_ = RBFGPRegressor(self.max_iter, self.learning_rate,
                                       backend=resolve_backend(self.backend)).fit(X[labelled],
                                                                                  y_lab)
            self.n_iter_ = self.max_iter
            self.eigenpairs_ = None
            self.noise_ = self.rbf_.noise_
            self.log_marginal_likelihood_ = self.rbf_.log_marginal_likelihood_
            self.transduction_, self.transduction_std_ = self.rbf_.predict(X)
            return self
        best = None
        for a, ep in eigenpair_candidates(self, X):
            with single_threaded_blas():
                fit = self._fit_hyper(ep, z)
            if self.verbose:
                print(f"[FLGPRegressor] bandwidth scale {a:.3g}: t={fit['t']:.4g} "
                      f"log evidence={-fit['nll']:.4f}")
            if best is None or fit["nll"] < best[2]["nll"]:
                best = (a, ep, fit)
        a, ep, fit = best
        self.eigenpairs_ = ep
        self.eigenvalues_ = ep.eigenvalues
        self.bandwidth_scale_ = a
        self.bandwidth_ = getattr(getattr(ep.extension, "graph", None), "bandwidth", None)
        self.diffusion_time_ = fit["t"]
        self.outputscale_ = fit["s2"] * self._y_scale ** 2
        self.noise_ = fit["noise"] * self._y_scale ** 2
        # the evidence p(y | t, s^2, σ^2) in the units of y; the prior on t is not in it
        # (as in FLGPClassifier): the MAP is ``log_marginal_likelihood_ - (a0 - 1) log t``
        self.log_marginal_likelihood_ = -fit["nll_evidence"] - m * np.log(self._y_scale)
        self.n_iter_ = fit["n_iter"]
        ev = LowRankGaussianEvidence(ep.eigenvectors[self._labelled], z)
        self._sd, self._w_mean, self._w_cov = ev.posterior(self._log_weights(ep, fit["t"],
                                                                         fit["s2"]),
                                                           fit["noise"])
        self._unlabelled_mask, self._component_has_label = warn_unlabelled_components(
            ep, self._labelled)
        self._reach = cloud_reach(ep, X)
        self.transduction_, self.transduction_std_ = self._predict_vectors(
            ep.eigenvectors, self._unlabelled_mask)
        return self

    @staticmethod
    def _log_weights(ep, t, s2):
        return np.log(s2 * ep.kernel_scale) - t * ep.eigenvalues

    def _fit_hyper(self, ep, z):
        ev = LowRankGaussianEvidence(ep.eigenvectors[self._labelled], z)
        lam = ep.eigenvalues
        log_scale = np.log(ep.kernel_scale)
        lo, hi = diffusion_time_range(lam)
        fixed_t = self.diffusion_time
        fixed_noise = None if self.noise is None else self.noise / self._y_scale ** 2
        # theta = (log t, log s^2, log noise); fixed entries are held by tight bounds
        bounds = [(np.log(lo), np.log(hi)), (np.log(1e-4), np.log(1e4)),
                  (np.log(1e-6), np.log(10.0))]
        if fixed_t is not None:
            bounds[0] = (np.log(fixed_t),) * 2
        if fixed_noise is not None:
            bounds[2] = (np.log(fixed_noise),) * 2

        def f_and_grad(theta):
            log_t, log_s2, log_noise = theta
            t = np.exp(log_t)
            try:
                nll, g_logd, g_noise = ev.value_and_grad(log_s2 + log_scale - t * lam,
                                                         log_noise)
            except (np.linalg.LinAlgError, ValueError):
                return 1e30, np.zeros(3)
            # prior π(t) ∝ t^{-a0}, i.e. ∝ t^{1-a0} in log t
            prior = (self.diffusion_time_prior_power - 1.0)
            nll = nll + prior * log_t
            grad = np.array([np.sum(g_logd * (-t * lam)) + prior, np.sum(g_logd), g_noise])
            if not (np.isfinite(nll) and np.all(np.isfinite(grad))):
                return 1e30, np.zeros(3)
            return nll, grad

        noise0 = bounds[2][0] if fixed_noise is not None else np.log(0.1)
        Vm2 = ev.V ** 2

        def matched_log_s2(log_t):
            # outputscale at which the mean prior variance of the labelled points is 1
            prior_var = Vm2 @ spectral_weights(ep, np.exp(log_t))
            return float(np.clip(-np.log(max(prior_var.mean(), 1e-300)), *bounds[1]))

        if fixed_t is not None:
            starts = [bounds[0][0]]
        else:  # the best two diffusion times of a coarse log grid (scale-matched)
            grid = np.linspace(np.log(lo), np.log(hi), 12)
            vals = [f_and_grad(np.array([g, matched_log_s2(g), noise0]))[0] for g in grid]
            starts = [grid[k] for k in np.argsort(vals)[:2]]
        best = None
        for log_t0 in starts:
            x0 = np.array([log_t0, matched_log_s2(log_t0), noise0])
            res = minimize(f_and_grad, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": self.max_iter})
            if best is None or res.fun < best.fun:
                best = res
        log_t, log_s2, log_noise = best.x
        prior_term = (self.diffusion_time_prior_power - 1.0) * log_t
        return dict(t=float(np.exp(log_t)), s2=float(np.exp(log_s2)),
                    noise=float(np.exp(log_noise)), nll=float(best.fun),
                    nll_evidence=float(best.fun - prior_term), n_iter=max(1, int(best.nit)))

    def _predict_vectors(self, V, prior_mask):
        # f(x) = v(x) D^{1/2} u; prior weights below 1e-16 of the largest are dropped (as in
        # spectral_weights) and so are their columns (active_columns)
        sd = np.where(self._sd < 1e-8 * self._sd.max(), 0.0, self._sd)
        k = nonzero_prefix(sd)
        if k is not None and k < sd.size:   # the dropped ones trail: use views
            V, sd = V[:, :k], sd[:k]
            w_mean, w_cov = self._w_mean[:k], self._w_cov[:k, :k]
        else:
            w_mean, w_cov = self._w_mean, self._w_cov
        F = V * sd
        mean = F @ w_mean
        var = np.einsum("ij,ij->i", F @ w_cov, F)
        if prior_mask is not None and prior_mask.any():
            mean[prior_mask] = 0.0
            var[prior_mask] = (F[prior_mask] ** 2).sum(1)
        mean = self._y_mean + self._y_scale * mean
        std = self._y_scale * np.sqrt(np.maximum(var, 0.0))
        return mean, std

    def predict(self, X, return_std=False):
        """Posterior mean at any points; with ``return_std`` also the posterior standard
        deviation of ``f(x)`` (add ``noise_`` for that of a new observation)."""
        X = check_predict_X(self, X)
        if self.method == "rbf":
            mean, std = self.rbf_.predict(X)
        else:
            mean, std = self._predict_vectors(*extend_with_prior_mask(self, X))
        return (mean, std) if return_std else mean
