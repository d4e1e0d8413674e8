"""Semi-supervised heat-kernel GP classification (scikit-learn API)."""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import column_or_1d

from .._validation import check_int, check_option, check_positive
from ..kernels.heat_kernel import diffusion_time_range
from ._common import (METHODS, check_fit_X, check_hyperparameters, check_predict_X,
                      cloud_reach, diffusion_time_mixture, eigenpair_candidates,
                      extend_with_prior_mask, parabolic_refine, search_log_scalar, single_threaded_blas,
                      spectral_weights, stack_unlabeled, warn_unlabelled_components)
from .ep import (ep_multinomial_probit, ep_probit, fit_predictive_scale, multinomial_loo,
                 multinomial_predict, multinomial_predictor, probit_latent, probit_loo,
                 probit_probabilities)
from .laplace import (LogisticLikelihood, active_columns, binary_predict_low_rank,
                      binary_predict_low_rank_many, laplace_binary, laplace_softmax,
                      nonzero_prefix, probit_logistic, softmax_predict,
                      softmax_probabilities)
from .rbf import RBFLaplaceClassifier

__all__ = ["FLGPClassifier", "split_labels"]

_T_GRID = 12  # log-spaced diffusion times searched (and averaged over)
# prior amplitudes A (f ~ GP(0, A C_t)) tried by the EP classifier: the probit's noise has
# variance 1 and C_t(x, x) is about 1-10, so these span noisy (A = 1) to nearly
# deterministic labels (A = 1000)
AMPLITUDE_GRID = (1.0, 10.0, 100.0, 1000.0)
_A_START = 100.0
# EP convergence (largest relative change of a site parameter): looser while searching
# the hyperparameters, tight for the posteriors that predict
_EP_SEARCH_TOL = 1e-2
_EP_TOL = 1e-7


def split_labels(y, unlabeled_label=-1):
    """Boolean mask of labelled entries: ``y != -1`` (numbers) or not -1/"-1"/None/NaN."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-d; got shape {y.shape}.")
    if y.dtype.kind in "fc":
        return ~(np.isnan(y) | (y == unlabeled_label))
    if y.dtype.kind in "iub":
        return y != unlabeled_label
    return np.array([not (v is None or (isinstance(v, float) and np.isnan(v))
                          or (isinstance(v, numbers.Number) and v == unlabeled_label)
                          or (isinstance(v, str) and v == str(unlabeled_label)))
                     for v in y], dtype=bool)


class FLGPClassifier(ClassifierMixin, BaseEstimator):
    """Heat-kernel Gaussian-process classifier on a point cloud (FLGP and baselines).

    By default (``inference="ep"``) binary labels use the probit likelihood
    ``P(y = 1 | f) = Φ(f)`` and more classes the multinomial probit
    ``P(y = c | f) = P(argmax_k(f_k + ε_k) = c)``, ``ε ~ N(0, I)``, with one latent function
    per class sharing the heat kernel ``A · C_t``; the posterior is approximated by
    expectation propagation (nested EP for several classes), whose marginal likelihood
    selects the diffusion time ``t``, the amplitude ``A`` and, for SE kernels, the
    bandwidth. ``inference="laplace"`` is the earlier model: logistic / softmax likelihood,
    amplitude 1, Laplace's approximation, whose probabilities are far less confident than
    its predictions are right (``docs/models.md``, "Calibration").

    Parameters
    ----------
    method : {"flgp", "glgp", "nystrom", "rbf"}, default="flgp"
        ``"rbf"`` is the extrinsic baseline: an RBF-kernel GP on the labelled points only,
        length-scale and amplitude fitted by the same approximate marginal likelihood.
    kernel : {"lae", "se"}, default="lae"
        FLGP cross kernel (LKFLGP/LRFLGP vs SKFLGP/SRFLGP).
    subsample : {"kmeans", "random"}, default="kmeans"
    n_induced : int, optional
        ``s``; default ``min(n, max(10, min(1000, n // 4)))``.
    n_neighbors : int, default=3
        ``r``.
    n_eigenpairs : int, optional
        ``M``; default ``min(100, s - 1)``.
    bandwidth : float, optional
        SE ``eps``; default: chosen by marginal likelihood over ``bandwidth_grid``.
    bandwidth_grid : sequence of float, optional
        Multipliers ``a`` in ``4 eps^2 = a mean d^2``; default 7 values log-spaced on
        [0.1, 10].
    lae_regularization : float, default=1e-3
        LLE-style regularisation of the LAE weights (0: the paper's exact LAE); see
        :func:`flgp.graph.build_cross_graph`.
    spectrum : {"one_step", "two_step"}, default="one_step"
    diffusion_time : float, optional
        Fix ``t`` instead of fitting it.
    diffusion_time_prior_power : float, default=1.0
        ``a0`` of the prior ``π(t) ∝ t^{-a0}`` (the power-law part of He et al.'s prior, eq.
        3); ``t`` maximises the approximate marginal likelihood times this prior (MAP in
        ``log t``). The default ``1`` is flat in ``log t``: empirical Bayes, as in the
        paper's algorithm. ``a0 > 1`` pulls ``t`` down by ``(a0 - 1)`` nats per e-fold;
        with few labels that pull can beat the evidence and leave ``t`` at the bottom of
        its range (docs/models.md).
    average_diffusion_time : bool or None, default=None
        None: False with EP, True with Laplace (measured: with EP the average gains
        nothing in error - LRFLGP on the circles, n = 4800, 50 labels, 6 draws: 28.4%
        averaged against 28.8% with the MAP ``t``, Laplace 29.4 / 32.2% - and costs
        calibration on sparse labels: two moons, 20 labels, ECE 0.053 against 0.035).
        True: average the class probabilities over the diffusion times of the search grid (12
        values log-spaced over the data-driven range), each weighted by its posterior
        probability (evidence times prior), the best grid value replaced by the refined
        MAP ``t``; only the smallest set of grid values holding 99% of the posterior mass
        is kept. This integrates ``t`` out instead of plugging in one value. When the
        evidence is peaked (enough labels) one value holds the mass and nothing changes;
        when it is flat (few labels) the average does much better than the MAP ``t``
        (LRFLGP on the circles, n = 4800, 50 labels, 10 draws: 31.7% against 35.7%
        error). ``False``: the MAP ``t`` alone. Not used for one-vs-rest (each class
        keeps its MAP ``t``) or a fixed ``diffusion_time``.
    multi_class : {"multinomial", "ovr"}, default="multinomial"
        More than two classes: one multi-class GP whose class latents share one ``t``
        (``"multinomial"``: multinomial probit with EP, softmax with Laplace; ``"softmax"``
        is accepted as another name for it), or one binary GP per class against the rest,
        each with its own ``t`` (``"ovr"``; the class probabilities are normalised to sum
        to one, and ``diffusion_time_`` holds one ``t`` per class). Ignored for two
        classes. Not used by ``method="rbf"``. With many classes prefer the joint model:
        the per-class ``t`` make the binary probabilities incomparable (50 arcs of a
        circle, 150 labels, Laplace: one-vs-rest predicted 12 of the 50 classes, 80%
        error; softmax 25%, 1-NN 22%).
    inference : {"ep", "laplace"}, default="ep"
        ``"ep"``: probit / multinomial-probit likelihood, expectation propagation, the
        amplitude ``A`` fitted with ``t``. ``"laplace"``: logistic / softmax likelihood with
        amplitude 1 and Laplace's approximation (the default before 2026-11-25).
    amplitude : float or None, default=1.0
        ``A`` of the prior ``f ~ GP(0, A C_t)`` (EP only; the probit noise has variance 1).
        The default 1 is the paper's heat kernel as it is (``C_t(x, x) ≈ 1-10``). None:
        the value of ``(1, 10, 100, 1000)`` with the highest EP marginal likelihood; the
        evidence prefers large amplitudes (nearly noise-free labels), which is more
        accurate on clean clusters (Swiss roll) and less on MNIST (docs/models.md).
    calibration : {"loo", None}, default="loo"
        EP only. ``"loo"``: divide the spread of every predictive distribution by ``κ``,
        the mode of the leave-one-out predictive likelihood of the labelled points (EP's
        cavities, free) under a log-normal prior with median 1 and sd ``log 2``
        (:func:`flgp.models.ep.fit_predictive_scale`). The heat-kernel GP is
        systematically under-confident on clustered data (its prior cannot say "one label
        per cluster" without smoothing across clusters); the labelled points measure by how
        much. It assumes the labelled points are a random sample of the cloud. ``None``:
        the EP posterior predictive as it is.
    max_iter : int, default=100
        Newton iterations of the Laplace approximation or EP sweeps; also bounds the ``t``
        search.
    learning_rate : float, default=0.1
        Unused by the Laplace classifiers (kept for a uniform API with the regressor).
    random_state : int or None, default=0
    backend : {"auto", "torch", "keops"}, default="auto"
        Who does the distance work (:mod:`flgp.backends`; "auto" is KeOps only with a GPU):
        k-means and neighbours (FLGP, Nyström), the never-stored dense kernel (GLGP)
        and, for the regressor, GPyTorch's KeOps RBF kernel (``method="rbf"``).
    verbose : bool, default=False

    Attributes
    ----------
    classes_, eigenpairs_, eigenvalues_, diffusion_time_, bandwidth_, bandwidth_scale_,
    log_marginal_likelihood_, transduction_, label_distributions_, n_features_in_
        ``diffusion_time_`` is the MAP ``t`` and ``log_marginal_likelihood_`` the evidence
        there.
    amplitude_ : float or ndarray
        The prior amplitude ``A`` (one per class for one-vs-rest; 1 for Laplace).
    predictive_scale_ : float or ndarray
        ``κ`` of ``calibration="loo"`` (one per class for one-vs-rest; 1 without).
    diffusion_time_weights_ : ndarray of shape (k, 2) or None
        The diffusion times the predictions average over and their weights (first row:
        the MAP ``t``); None when not averaging (``average_diffusion_time=False``,
        one-vs-rest, a fixed ``diffusion_time``, or ``method="rbf"``).
    """

    def __init__(self, *, method="flgp", kernel="lae", subsample="kmeans", n_induced=None,
                 n_neighbors=3, n_eigenpairs=None, bandwidth=None, bandwidth_grid=None,
                 lae_regularization=1e-3, spectrum="one_step", diffusion_time=None,
                 diffusion_time_prior_power=1.0, average_diffusion_time=None,
                 multi_class="multinomial", inference="ep", amplitude=1.0,
                 calibration="loo", max_iter=100,
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
        self.average_diffusion_time = average_diffusion_time
        self.multi_class = multi_class
        self.inference = inference
        self.amplitude = amplitude
        self.calibration = calibration
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    # -- fitting --------------------------------------------------------------------------
    def fit(self, X, y, X_unlabeled=None):
        """Fit on all points ``X``; ``y`` holds a label per row, ``-1`` for unlabelled rows.

        Alternatively pass only labelled rows as ``X, y`` and the unlabelled points as
        ``X_unlabeled``.
        """
        X = check_fit_X(self, X, y)
        y = column_or_1d(np.asarray(y), warn=True)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have one entry per row of X; got {y.shape[0]} labels "
                             f"for {X.shape[0]} rows.")
        labelled = split_labels(y)
        if type_of_target(y[labelled]) == "continuous":
            raise ValueError("Unknown label type: continuous. FLGPClassifier needs class "
                             "labels; use FLGPRegressor for a continuous target.")
        X, labelled, y = stack_unlabeled(X, X_unlabeled, labelled, y, -1)
        check_option(self.method, "method", METHODS)
        check_option(self.multi_class, "multi_class", ("multinomial", "softmax", "ovr"))
        check_option(self.inference, "inference", ("ep", "laplace"))
        check_positive(self.amplitude, "amplitude", allow_none=True)
        if self.calibration not in (None, "loo"):
            raise ValueError(f"calibration must be 'loo' or None; got {self.calibration!r}.")
        if self.inference == "laplace" and self.amplitude not in (None, 1, 1.0):
            raise ValueError("amplitude is a parameter of inference='ep'; the Laplace "
                             "classifier's kernel has amplitude 1 (leave amplitude=None).")
        check_int(self.max_iter, "max_iter", low=1)
        check_hyperparameters(self)
        if self.average_diffusion_time is not None and not isinstance(
                self.average_diffusion_time, (bool, np.bool_)):
            raise TypeError(f"average_diffusion_time must be True, False or None; got "
                            f"{self.average_diffusion_time!r}.")
        m = int(labelled.sum())
        if m < 2:
            raise ValueError(f"{m} labelled point(s); at least 2 are needed. Unlabelled rows "
                             f"are marked -1 in y.")
        y_lab = y[labelled]
        try:
            self.classes_, codes = np.unique(y_lab, return_inverse=True)
        except TypeError as exc:
            raise ValueError(f"the labels mix types that cannot be ordered ({exc}); use one "
                             f"type for every label, e.g. all strings or all "
                             f"integers.") from exc
        if self.classes_.size < 2:
            hint = (" -1 marks unlabelled rows, so labels in {-1, +1} must be recoded (e.g. "
                    "to {0, 1})." if (~labelled).any() else "")
            raise ValueError(f"all labelled points have the class {self.classes_[0]!r}; a "
                             f"classifier needs at least two classes among the labels.{hint}")
        self._labelled = np.flatnonzero(labelled)
        self._prior = np.bincount(codes, minlength=self.classes_.size) / m
        if self.method == "rbf":
            with single_threaded_blas():
                self.rbf_ = RBFLaplaceClassifier(max_iter=self.max_iter).fit(X[labelled],
                                                                              codes)
            self.n_iter_ = 1
            self.eigenpairs_ = None
            self.diffusion_time_weights_ = None
            self.log_marginal_likelihood_ = self.rbf_.log_marginal_likelihood_
            self._unlabelled_mask = np.zeros(X.shape[0], dtype=bool)
            self.transduction_ = self.classes_[self.rbf_.predict_codes(X)]
            self.label_distributions_ = self.rbf_.predict_proba(X)
            return self
        best = None
        for a, ep in eigenpair_candidates(self, X):
            with single_threaded_blas():
                fit = self._fit_time(ep, codes)
            if self.verbose:
                t_txt = ", ".join(f"{v:.4g}" for v in np.atleast_1d(fit[0]))
                print(f"[FLGPClassifier] bandwidth scale {a:.3g}: t={t_txt} "
                      f"log evidence={fit[2]:.4f}")
            if best is None or fit[2] > best[2][2]:
                best = (a, ep, fit)
        a, ep, (t, amplitude, log_ev, state, mixture) = best
        self.eigenpairs_ = ep
        self.eigenvalues_ = ep.eigenvalues
        self.diffusion_time_ = t
        self.amplitude_ = amplitude
        self.bandwidth_scale_ = a
        self.bandwidth_ = getattr(getattr(ep.extension, "graph", None), "bandwidth", None)
        self.log_marginal_likelihood_ = log_ev
        self.n_iter_ = self._n_evals
        self._mixture = [(tk, wk, st, amplitude) for tk, wk, st in
                         (mixture if mixture is not None else [(t, 1.0, state)])]
        self.diffusion_time_weights_ = (None if mixture is None else
                                        np.array([[tk, wk] for tk, wk, _ in mixture]))
        self._predictor_cache = {}
        self.predictive_scale_ = self._predictive_scale(codes)
        self._unlabelled_mask, self._component_has_label = warn_unlabelled_components(
            ep, self._labelled)
        self._reach = cloud_reach(ep, X)
        proba = self._proba_from_vectors(ep.eigenvectors, self._unlabelled_mask)
        self.label_distributions_ = proba
        self.transduction_ = self.classes_[np.argmax(proba, axis=1)]
        return self

    def _gram(self, ep, t, V1, V2):
        V1, w, V2 = active_columns(V1, spectral_weights(ep, t), V2)
        return (V1 * w) @ V2.T

    @property
    def _one_vs_rest(self):
        return self.multi_class == "ovr" and self.classes_.size > 2

    @property
    def _ep(self):
        return self.inference == "ep"

    @property
    def _average_t(self):
        # None: average over t with Laplace (as before 2026-11-25), the MAP t with EP
        if self.average_diffusion_time is None:
            return not self._ep
        return bool(self.average_diffusion_time)

    def _laplace(self, K, codes, a0=None, binary=None):
        if binary is None:
            binary = self.classes_.size == 2
        if binary:
            return laplace_binary(K, 2.0 * codes - 1.0, LogisticLikelihood, a0=a0,
                                  max_iter=self.max_iter)
        Y = np.eye(self.classes_.size)[codes]
        return laplace_softmax(K, Y, a0=a0, max_iter=self.max_iter)

    def _fit_time(self, ep, codes):
        """``(t, amplitude, log evidence, state, mixture)``; for one-vs-rest ``t`` and the
        amplitude hold one value per class, the evidence is the sum over the binary
        problems and the state a list."""
        self._n_evals = 0
        if not self._one_vs_rest:
            return self._fit_time_one(ep, codes, self.classes_.size == 2)
        fits = [self._fit_time_one(ep, (codes == c).astype(np.int64), True)
                for c in range(self.classes_.size)]
        return (np.array([f[0] for f in fits]), np.array([f[1] for f in fits]),
                float(sum(f[2] for f in fits)), [f[3] for f in fits], None)

    def _log_prior_t(self, log_t):
        # π(t) ∝ t^{-a0} is ∝ t^{1-a0} in log t
        return -(self.diffusion_time_prior_power - 1.0) * log_t

    def _fit_time_one(self, ep, codes, binary):
        if self._ep:
            return self._fit_ep(ep, codes, binary)
        Vm = ep.eigenvectors[self._labelled]
        if self.diffusion_time is not None:
            self._n_evals += 1
            t = float(self.diffusion_time)
            state = self._laplace(self._gram(ep, t, Vm, Vm), codes, binary=binary)
            return t, 1.0, state.log_evidence, state, None
        lo, hi = diffusion_time_range(ep.eigenvalues)
        warm = {}
        trace = []

        def neg(log_t):
            # Newton warm-started from the mode at the previous diffusion time
            self._n_evals += 1
            st = self._laplace(self._gram(ep, np.exp(log_t), Vm, Vm), codes, warm.get("a"),
                               binary=binary)
            warm["a"] = st.a
            val = -st.log_evidence - self._log_prior_t(log_t)
            trace.append((float(np.exp(log_t)), val, st))
            return val

        t, val = search_log_scalar(neg, lo, hi, n_grid=_T_GRID, maxiter=self.max_iter)
        state = self._laplace(self._gram(ep, t, Vm, Vm), codes, binary=binary)
        mixture = None
        if self._average_t and not self._one_vs_rest:
            mixture = diffusion_time_mixture(trace[:_T_GRID], t, state)
        return t, 1.0, state.log_evidence, state, mixture

    # -- expectation propagation (probit / multinomial probit) ---------------------------
    def _features(self, ep, V, t, amplitude):
        """``√A · V · diag(√(c e^{-tλ}))`` over the modes whose weight is not 0 (the
        leading ones at any t > 0)."""
        w = spectral_weights(ep, t)
        k = nonzero_prefix(w)
        if k is not None:
            return V[:, :k] * np.sqrt(amplitude * w[:k])
        keep = w != 0
        return V[:, keep] * np.sqrt(amplitude * w[keep])

    def _ep_state(self, ep, codes, binary, t, amplitude, init=None, tol=_EP_TOL):
        self._n_evals += 1
        Phi = self._features(ep, ep.eigenvectors[self._labelled], t, amplitude)
        if binary:
            return ep_probit(Phi, 2.0 * codes - 1.0, init=init, tol=tol,
                             max_sweeps=self.max_iter)
        return ep_multinomial_probit(Phi, codes, self.classes_.size, init=init, tol=tol,
                                     max_sweeps=self.max_iter)

    def _fit_ep(self, ep, codes, binary):
        """``t`` and the amplitude ``A`` by the EP marginal likelihood: a 12-point log grid
        over ``t`` at ``A = 100``, the amplitude grid at the best ``t`` (the grid over ``t``
        again if another ``A`` wins), then two steps of parabolic interpolation in
        ``log t`` (:func:`parabolic_refine`; an EP run costs as much as ~20 Laplace fits,
        Brent's ~8 evaluations would double the search). Each EP run starts from the sites
        of the previous one and stops at a looser tolerance than the final posteriors."""
        fixed_t = self.diffusion_time
        fixed_a = self.amplitude
        warm = {}

        def run(t, amplitude, tol=_EP_SEARCH_TOL):
            st = self._ep_state(ep, codes, binary, t, amplitude, warm.get("state"), tol)
            warm["state"] = st
            return st

        def neg(log_t, amplitude, trace=None):
            st = run(np.exp(log_t), amplitude)
            val = -st.log_evidence - self._log_prior_t(log_t)
            if trace is not None:
                trace.append((float(np.exp(log_t)), val, st))
            return val

        def grid_t(amplitude):
            trace = []
            for g in np.linspace(np.log(lo), np.log(hi), _T_GRID):
                neg(g, amplitude, trace)
            return trace

        if fixed_t is not None:
            t = float(fixed_t)
            if fixed_a is not None:
                st = run(t, float(fixed_a), _EP_TOL)
                return t, float(fixed_a), st.log_evidence, st, None
            amps = [(a, run(t, a, _EP_TOL)) for a in AMPLITUDE_GRID]
            amplitude, st = max(amps, key=lambda p: p[1].log_evidence)
            return t, amplitude, st.log_evidence, st, None
        lo, hi = diffusion_time_range(ep.eigenvalues)
        amplitude = _A_START if fixed_a is None else float(fixed_a)
        trace = grid_t(amplitude)
        if fixed_a is None:
            k = int(np.argmin([v for _, v, _ in trace]))
            t_best = trace[k][0]
            warm["state"] = trace[k][2]
            best = (trace[k][1], amplitude)
            for a in AMPLITUDE_GRID:
                if a != amplitude:
                    val = neg(np.log(t_best), a)
                    if val < best[0]:
                        best = (val, a)
            if best[1] != amplitude:
                amplitude = best[1]
                trace = grid_t(amplitude)
        vals = np.array([v for _, v, _ in trace])
        vals = np.where(np.isfinite(vals), vals, np.inf)
        k = int(np.argmin(vals))
        warm["state"] = trace[k][2]
        t = np.exp(parabolic_refine(lambda g: neg(g, amplitude),
                                    np.log([tr[0] for tr in trace]), vals, k))
        warm["state"] = trace[k][2]
        state = run(t, amplitude, _EP_TOL)
        mixture = None
        if self._average_t and not self._one_vs_rest:
            mixture = diffusion_time_mixture(trace, t, state)
            # the kept grid values' posteriors to full precision
            mixture = [(tk, wk, st if tk == t else self._ep_state(
                ep, codes, binary, tk, amplitude, st, _EP_TOL)) for tk, wk, st in mixture]
        return t, amplitude, state.log_evidence, state, mixture

    # -- predictions ----------------------------------------------------------------------
    def _component_predict(self, V, t, amplitude, state, cache=None, moments=True,
                           scale=1.0):
        """Class probabilities (or the binary ``P(class 1)``), latent means and variances of
        one posterior (one diffusion time) at points with eigenvector values ``V``; the
        moments are None when not asked for (multi-class EP computes them only then)."""
        ep = self.eigenpairs_
        if self._ep:
            Phi = self._features(ep, V, t, amplitude)
            if self.classes_.size == 2 or self._one_vs_rest:
                mean, var = probit_latent(state, Phi)
                return probit_probabilities(mean, var, scale), mean, var
            key = id(state)
            if cache is not None and key not in cache:
                cache[key] = multinomial_predictor(state)
            out = multinomial_predict(state, Phi, None if cache is None else cache[key],
                                      moments=moments, scale=scale)
            return out if moments else (out, None, None)
        Vl = ep.eigenvectors[self._labelled]
        if self.classes_.size == 2 or self._one_vs_rest:
            mean, var = binary_predict_low_rank(state, Vl, spectral_weights(ep, t), V)
            return probit_logistic(mean, var), mean, var
        K_cross = self._gram(ep, t, Vl, V)
        k_diag = (V * V) @ spectral_weights(ep, t)
        mean, var = softmax_predict(state, K_cross, k_diag)
        return softmax_probabilities(mean, var, random_state=0), mean, var

    def _predictive_scale(self, codes):
        """``κ`` by leave-one-out (:func:`flgp.models.ep.fit_predictive_scale`) over the
        mixture of diffusion times (one ``κ`` per class for one-vs-rest); 1 without
        calibration or with Laplace."""
        if not self._ep or self.calibration is None:
            return 1.0
        if self._one_vs_rest:
            states = self._mixture[0][2]
            return np.array([fit_predictive_scale([probit_loo(st)]) for st in states])
        weights = [c[1] for c in self._mixture]
        if self.classes_.size == 2:
            terms = [probit_loo(c[2]) for c in self._mixture]
        else:
            terms = [multinomial_loo(c[2], codes) for c in self._mixture]
        return fit_predictive_scale(terms, weights)

    def _predict_vectors(self, V, prior_mask, moments=True):
        """Class probabilities and latent moments, averaged over the mixture of diffusion
        times (one component when not averaging). Latent moments are those of the mixture
        (None for ``moments=False`` where they cost extra: multi-class EP)."""
        cache = getattr(self, "_predictor_cache", None)
        if self._one_vs_rest:
            (t, A, states), = [(c[0], c[3], c[2]) for c in self._mixture]
            scales = np.broadcast_to(self.predictive_scale_, (len(states),))
            out = [self._component_predict(V, tc, ac, st, cache, scale=k)
                   for tc, ac, st, k in zip(t, A, states, scales)]
            proba = np.stack([o[0] for o in out], 1)
            proba /= proba.sum(axis=1, keepdims=True)
            mean = np.stack([o[1] for o in out], 1)
            var = np.stack([o[2] for o in out], 1)
        elif (self.classes_.size == 2 and not self._ep and len(self._mixture) > 1):
            # Laplace, binary: one stacked product serves every diffusion time
            ep = self.eigenpairs_
            weights = np.array([c[1] for c in self._mixture])
            W = spectral_weights(ep, np.array([c[0] for c in self._mixture]))
            means, variances = binary_predict_low_rank_many(
                [c[2] for c in self._mixture], ep.eigenvectors[self._labelled], W, V)
            p1 = probit_logistic(means, variances) @ weights
            proba = p1
            mean = means @ weights
            var = np.maximum((variances + means * means) @ weights - mean * mean, 0.0)
        else:
            proba = mean = second = 0.0
            for t, w, st, A in self._mixture:
                p, mu, v = self._component_predict(V, t, A, st, cache, moments,
                                                   self.predictive_scale_)
                proba = proba + w * p
                if mu is not None:
                    mean = mean + w * mu
                    second = second + w * (v + mu * mu)
            var = np.maximum(second - mean * mean, 0.0) if mu is not None else None
        if self.classes_.size == 2:
            proba = np.c_[1 - proba, proba]
        if prior_mask is not None and prior_mask.any():
            proba[prior_mask] = self._prior
        return proba, mean, var

    def _proba_from_vectors(self, V, prior_mask):
        return self._predict_vectors(V, prior_mask, moments=False)[0]

    # -- prediction -----------------------------------------------------------------------
    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)`` at any points (out-of-sample map)."""
        return self._predict_proba(X)

    def _predict_proba(self, X):
        # called from the public methods only: the far-point warning points at their caller
        X = check_predict_X(self, X)
        if self.method == "rbf":
            return self.rbf_.predict_proba(X)
        return self._proba_from_vectors(*extend_with_prior_mask(self, X, stacklevel=5))

    def predict(self, X):
        """Most probable class at any points."""
        proba = self._predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_latent(self, X):
        """Latent posterior mean and variance: ``(n,)`` each for binary problems,
        ``(n, n_classes)`` for multi-class. With ``average_diffusion_time`` these are the
        moments of the mixture over the diffusion times."""
        X = check_predict_X(self, X)
        if self.method == "rbf":
            raise ValueError("predict_latent is available for the heat-kernel methods; "
                             "method='rbf' has no heat-kernel latent.")
        return self._predict_vectors(extend_with_prior_mask(self, X)[0], None)[1:]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.classifier_tags.multi_label = False
        return tags
