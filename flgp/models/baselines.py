"""The extrinsic baselines: RBF-kernel GPs on the labelled points only.

Their hyperparameters are fitted honestly (a badly fitted RBF GP makes any manifold method
look good): the classifier picks length-scale and amplitude by the Laplace approximate
marginal likelihood over a grid around the median heuristic; the regressor is a plain
GPyTorch ``ExactGP`` (constant mean, ``ScaleKernel(RBFKernel)``, Gaussian likelihood)
fitted by L-BFGS on the exact marginal likelihood; its predictions come from the Cholesky
factor of the labelled covariance (``O(m p + m^2)`` per predicted point for ``m`` labels).
"""

from __future__ import annotations

import warnings

import gpytorch
import numpy as np
import torch

from .._chunks import default_chunk_size
from .._validation import power_of_two_unit
from .inference.laplace import (LogisticLikelihood, binary_predict, laplace_binary,
                                laplace_softmax, probit_logistic, softmax_predict,
                                softmax_probabilities)

__all__ = ["RBFLaplaceClassifier", "RBFGPRegressor"]


def _standardise(X):
    mu = X.mean(0)
    sd = X.std(0)
    sd[sd == 0] = 1.0
    return mu, sd


def _sqdist(A, B):
    return np.maximum((A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :], 0.0)


class RBFLaplaceClassifier:
    """RBF GP classifier (binary logistic or softmax, Laplace) on labelled points."""

    LENGTH_GRID = np.logspace(-1.5, 1.0, 11)
    AMPLITUDE_GRID = (0.5, 2.0, 8.0, 32.0)

    def __init__(self, max_iter: int = 100):
        self.max_iter = max_iter

    def _laplace(self, K):
        if self.n_classes_ == 2:
            return laplace_binary(K, 2.0 * self.codes_ - 1.0, LogisticLikelihood,
                                  max_iter=self.max_iter)
        return laplace_softmax(K, np.eye(self.n_classes_)[self.codes_], max_iter=self.max_iter)

    def fit(self, X, codes):
        self.mu_, self.sd_ = _standardise(X)
        Z = (X - self.mu_) / self.sd_
        self.Z_ = Z
        self.codes_ = codes
        self.n_classes_ = int(codes.max()) + 1
        d2 = _sqdist(Z, Z)
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
        K_cross = self.outputscale_ * np.exp(-_sqdist(self.Z_, Z) / (2 * self.lengthscale_ ** 2))
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


class _ExactRBF(gpytorch.models.ExactGP):
    """Constant mean + scaled RBF kernel (module level, so a fitted model pickles)."""

    def __init__(self, x, t, lik, base_kernel):
        super().__init__(x, t, lik)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(base_kernel())

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


# exact GP algebra (Cholesky, exact predictive variances) up to this many labels; GPyTorch's
# default switches to conjugate gradients and approximate variances above 800, which
# inflated the predictive sd about 14-fold on the motor map (docs/images.md)
EXACT_MAX_LABELS = 20_000
# above twice this many labels the RBF GP's hyperparameters start from a fit on this many
WARM_START_LABELS = 500


def _hyperparameters(model):
    """``(lengthscale, outputscale, noise, constant)`` of a fitted :class:`_ExactRBF`."""
    return (float(model.covar_module.base_kernel.lengthscale.detach()),
            float(model.covar_module.outputscale.detach()),
            float(model.likelihood.noise.detach()),
            float(model.mean_module.constant.detach()))


class RBFGPRegressor:
    """GPyTorch exact GP with an RBF kernel, fitted by L-BFGS on the exact marginal
    likelihood (Cholesky; exact predictive variances).

    Inputs and targets are standardised (``y_mean_``, ``y_scale_``), so the fit does not
    depend on the units of ``y`` (GPyTorch's noise floor of 1e-4 would otherwise swamp a
    target measured in small units). ``noise_``, ``outputscale_``, ``constant_``,
    ``log_marginal_likelihood_`` and the predictions are in the units of ``y``.
    ``max_iter`` bounds the L-BFGS iterations (each evaluates the likelihood up to 20
    times in its line search); ``learning_rate`` is its initial step."""

    def __init__(self, max_iter: int = 100, learning_rate: float = 0.1,
                 backend: str = "torch"):
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.backend = backend          # "keops": GPyTorch's KeOps RBF kernel (large m)

    def _exact(self):
        return gpytorch.settings.max_cholesky_size(EXACT_MAX_LABELS)

    def fit(self, X, y):
        self.mu_, self.sd_ = _standardise(X)
        y = np.asarray(y, dtype=np.float64)
        # targets at any scale: an exact power-of-two unit first (1 for ordinary data), as
        # the heat-kernel regressor does, so that 1e-200 y and 1e200 y fit like y
        self.y_unit_ = unit = power_of_two_unit(y)
        y_pre = y / unit
        mean_pre, scale_pre = float(y_pre.mean()), float(y_pre.std()) or 1.0
        self.y_mean_ = mean_pre * unit
        self.y_scale_ = scale_pre * unit
        Z = torch.as_tensor((X - self.mu_) / self.sd_, dtype=torch.float64)
        yt = torch.as_tensor((y_pre - mean_pre) / scale_pre, dtype=torch.float64)
        sub = Z.numpy()[:2000]            # the median heuristic needs no more points
        d2 = _sqdist(sub, sub)
        med = float(np.sqrt(np.median(d2[np.triu_indices_from(d2, 1)]) / 2.0)) or 1.0
        if self.backend == "keops":
            base_kernel = gpytorch.kernels.keops.RBFKernel
        else:
            base_kernel = gpytorch.kernels.RBFKernel
        start = (0.5 * med, float(yt.var()) if len(yt) > 1 else 1.0,
                 0.1 * (float(yt.var()) if len(yt) > 1 else 1.0) + 1e-4,
                 float(yt.mean()))
        if len(yt) > 2 * WARM_START_LABELS:
            # a first fit on a uniform sample of the labels: a start a few full
            # iterations refine (each costs O(m^3))
            pick = np.sort(np.random.default_rng(0).choice(len(yt), WARM_START_LABELS,
                                                            replace=False))
            small, _, _ = self._optimise(Z[pick], yt[pick], base_kernel, start, self.max_iter)
            start = _hyperparameters(small)
        model, lik, mll = self._optimise(Z, yt, base_kernel, start, self.max_iter)
        with self._exact(), torch.no_grad():
            # the evidence is the prior marginal: evaluate it in train mode (in eval mode
            # GPyTorch would return the posterior at the training inputs, and warn); in
            # the units of y it is the standardised one minus m log(y_scale)
            self.log_marginal_likelihood_ = (float(mll(model(Z), yt)) * len(yt)
                                             - len(yt) * (np.log(scale_pre) + np.log(unit)))
        self.n_iter_ = model.n_iter_
        model.eval()
        lik.eval()
        self.model_, self.likelihood_ = model, lik
        # variances in units of y^2 as far as float64 holds them (inf beyond); the noise
        # also in units of (y / y_unit_)^2, where it cannot overflow
        with np.errstate(over="ignore"):
            scale2 = np.float64(scale_pre) ** 2 * np.float64(unit) * np.float64(unit)
        self.noise_pre_ = float(lik.noise.detach()) * scale_pre ** 2
        self.noise_ = float(lik.noise.detach()) * float(scale2)
        self.outputscale_ = float(model.covar_module.outputscale.detach()) * float(scale2)
        self.constant_ = (float(model.mean_module.constant.detach()) * self.y_scale_
                          + self.y_mean_)
        self.lengthscale_ = float(model.covar_module.base_kernel.lengthscale.detach())
        self._set_predictor(Z.numpy(), yt.numpy(), *_hyperparameters(model))
        return self

    def _set_predictor(self, Z, yt, ell, scale, noise, constant):
        """The exact posterior's pieces in standardised units: the Cholesky factor ``L`` of
        ``K + σ² I`` and ``α = (K + σ² I)⁻¹ (y - c)``, so that a prediction is a GEMM (mean)
        and a triangular solve (variance) per block of rows, with no GPyTorch overhead."""
        import scipy.linalg

        K = scale * np.exp(-_sqdist(Z, Z) / (2.0 * ell * ell))
        K[np.diag_indices_from(K)] += noise
        jitter = 0.0
        for _ in range(6):
            try:
                L = np.linalg.cholesky(K if jitter == 0.0 else
                                       K + jitter * np.eye(K.shape[0]))
                break
            except np.linalg.LinAlgError:
                jitter = max(10.0 * jitter, 1e-10 * scale)
        else:
            raise np.linalg.LinAlgError("the RBF GP's covariance is not positive definite; "
                                        "remove duplicated labelled points or fix a larger "
                                        "noise")
        self._Z_train = Z
        self._chol = L
        self._alpha = scipy.linalg.cho_solve((L, True), yt - constant, check_finite=False)
        self._hyper = (ell, scale, noise, constant)

    def _optimise(self, Z, yt, base_kernel, start, max_iter):
        """L-BFGS on the exact marginal likelihood from ``start`` = (lengthscale,
        outputscale, noise, constant); returns the model (``n_iter_`` set), its
        likelihood and the objective."""
        ell, scale, noise, constant = start
        lik = gpytorch.likelihoods.GaussianLikelihood().double()
        model = _ExactRBF(Z, yt, lik, base_kernel).double()
        model.covar_module.base_kernel.lengthscale = ell
        model.covar_module.outputscale = scale
        lik.noise = noise
        model.mean_module.constant.data.fill_(constant)
        model.train()
        lik.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
        opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=int(max_iter),
                                line_search_fn="strong_wolfe", tolerance_grad=1e-6,
                                tolerance_change=1e-9)

        def closure():
            opt.zero_grad()
            loss = -mll(model(Z), yt)
            loss.backward()
            return loss

        with self._exact(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=gpytorch.utils.warnings.NumericalWarning)
            opt.step(closure)
        model.n_iter_ = int(opt.state[opt._params[0]].get("n_iter", 0))
        return model, lik, mll

    def predict(self, X, return_std: bool = True):
        """Exact posterior mean (and standard deviation of the latent function) at ``X``,
        in the units of ``y``: per block of rows ``K* α`` and ``s² - |L⁻¹ K*ᵀ|²``."""
        import scipy.linalg

        ell, scale, _, constant = self._hyper
        Zt, L = self._Z_train, self._chol
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        mean = np.empty(n)
        std = np.empty(n) if return_std else None
        # a block's working set: the cross-kernel, its distances' temporaries and the
        # solve, about 5 m floats a row, within flgp's working-memory budget
        step = default_chunk_size(8 * (5 * Zt.shape[0] + 4 * X.shape[1] + 8))
        for start in range(0, n, step):
            Z = (X[start:start + step] - self.mu_) / self.sd_
            Kx = scale * np.exp(-_sqdist(Z, Zt) / (2.0 * ell * ell))
            mean[start:start + step] = constant + Kx @ self._alpha
            if return_std:
                W = scipy.linalg.solve_triangular(L, Kx.T, lower=True, check_finite=False)
                var = scale - np.einsum("ij,ij->j", W, W)
                std[start:start + step] = np.sqrt(np.maximum(var, 0.0))
        mean = self.y_mean_ + self.y_scale_ * mean
        return (mean, self.y_scale_ * std) if return_std else mean
