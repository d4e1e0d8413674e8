"""Semi-supervised Gaussian-process regression on point clouds and graphs (scikit-learn
API)."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.special import ndtri
from sklearn.base import RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._chunks import is_lazy
from ._base import _POSITIVE, GPEstimator, target_vector
from .baselines import RBFRegression
from .graph_matern import GRAPH_MATERN_MAX_NODES, KNN_GRAPH_MATERN_MAX_DIM, GraphMaternRegression
from .labelling import suggest_labels as _suggest_labels
from .heat_kernel import HeatKernelRegression, fit_counts
from .priors import HEAT_METHODS
from .representation import Infeasible, Outranked, Standardisation, screening_margin

__all__ = ["FLGPRegressor", "GRAPH_MATERN_MAX_NODES", "KNN_GRAPH_MATERN_MAX_DIM",
           "REPRESENTATIONS"]

# in the order method="auto" weighs them: the bounded heat kernel last
REPRESENTATIONS = {rep.name: rep for rep in (GraphMaternRegression(), RBFRegression(),
                                             HeatKernelRegression())}


class FLGPRegressor(RegressorMixin, GPEstimator):
    r"""Semi-supervised Gaussian-process regression on a point cloud or graph: a target at
    some points, predictions with uncertainty at all of them.

    By default it fits three priors by their exact marginal likelihood and keeps the best
    (``method_``): the low-rank FLGP heat kernel, the full-resolution graph Matérn prior
    (docs/full_resolution.md) and the RBF GP on the labelled points.

    The heat kernel's model is ``y = μ + f(x) + ε``, ``f ~ GP(0, s^2 C_t)``, ``ε ~ N(0,
    σ^2)``; ``t``, ``s^2`` and ``σ^2`` maximise the exact marginal likelihood (by the
    Woodbury identity, ``O(M^3)``) times ``π(t) ∝ t^{-a0}``. Counts
    (``likelihood="poisson"``): ``y ~ Poisson(exp(b + f(x) + ε))``, ``b`` the log of the
    labels' mean count, by Laplace's approximation; ``predict`` gives the posterior mean
    count ``exp(b + m + (v + σ²)/2)`` (docs/models.md, "Count data").

    Parameters
    ----------
    prior : HeatKernelPrior, GraphMaternPrior, RBFPrior, a list of them, or None
        The prior (:mod:`flgp.models.priors`). ``None`` (the default) or a list: every
        feasible prior among them is fitted and the one of highest evidence predicts - the
        heat kernel, the graph Matérn prior on its ``graph`` or (up to 32,000 points in at
        most 16 features) on the 10-NN graph of ``X``, the RBF GP up to 6,000 labels
        (docs/models.md, "Choosing the prior"). Dask inputs and counts fit the heat kernel
        alone. One object: that prior alone. The heat kernel's classification settings
        are refused.
    likelihood : {"gaussian", "poisson"}, default="gaussian"
        ``"poisson"``: ``y`` holds counts (non-negative integers; NaN marks unlabelled
        rows), with a log link. The heat kernel only.
    noise : float, optional
        Fix the noise variance (in units of ``y²``) instead of fitting it.
    overdispersion : float or None, default=None
        Counts only: the variance ``σ²`` of each count's log-rate term ``ε``; None fits it
        (in ``[1e-6, 10]``), 0 is the plain Poisson model.
    max_iter : int, default=100
        L-BFGS-B iterations per start (of the ``"rbf"`` GP's search too).
    random_state, backend, verbose, warm_start :
        As in :class:`FLGPClassifier`.

    Attributes
    ----------
    method_ : str
        The prior that predicts: ``"flgp"``, ``"glgp"``, ``"nystrom"`` (the heat kernel),
        ``"graph_matern"`` or ``"rbf"``.
    prior_ : HeatKernelPrior, GraphMaternPrior or RBFPrior
        A copy of that prior with the fitted values (``kappa_``, ``outputscale_``,
        ``noise_``, ``constant_``, ...; :mod:`flgp.models.priors`).
    log_evidence_ : dict
        ``method="auto"``: the log evidence of ``y`` of each representation fitted.
    skipped_methods_ : dict
        ``method="auto"``: why a representation was left out.
    n_eigenpairs_ : int
        The leading eigenpairs predicting (by evidence among ``M/8, M/4, M/2, M`` when
        ``n_eigenpairs`` is None), where the heat kernel was fitted to Gaussian targets.
    graph_, matern_order_, matern_kappa_, matern_log_evidence_ :
        ``method_ == "graph_matern"``: the graph, the order ``ν``, ``κ`` (an inverse length
        in the units of ``X``) and each order's log evidence.
    transduction_std_error_ : ndarray (n_samples,)
        ``method_ == "graph_matern"``: the standard error of ``transduction_std_`` (the
        RBMC variance estimator's).
    amplitude_cv_scale_ : float
        ``method_ == "graph_matern"``: the factor ``c`` from the evidence's amplitude to
        that of generalised cross-validation (docs/images.md, "Intervals"), carried by
        ``outputscale_``, ``noise_`` and the posterior variances (not the mean); 1 with a
        fixed ``noise``, on graphs too large to factor, or where it is undetermined.
    evidence_outputscale_ : float
        ``method_ == "graph_matern"``: the amplitude the evidence maximises,
        ``outputscale_ / c``.
    eigenpairs_, eigenvalues_, bandwidth_, bandwidth_scale_ :
        As in :class:`FLGPClassifier`, where the heat kernel was fitted.
    labelled_indices_, n_features_in_ :
        As in :class:`FLGPClassifier`.
    diffusion_time_ : float
        The heat kernel's ``t``, where the heat kernel was fitted.
    outputscale_ : float
        ``s^2`` in units of ``y^2`` (of the log-rate for counts); for ``method_ ==
        "graph_matern"``, ``A`` of the prior ``A Q_ν(κ)⁻¹`` on the graph as given
        (:func:`flgp.precision.matern_precision`) times ``amplitude_cv_scale_``. ``inf``
        where float64 cannot hold it.
    noise_ : float or None
        ``σ^2`` in units of ``y^2`` (None for counts).
    log_marginal_likelihood_ : float
        ``log N(y | ȳ, s^2 C_t + σ^2 I)`` at the reported values, in the units of ``y``
        (without the prior on ``t``; Laplace's approximation for counts). For ``method_ ==
        "graph_matern"``: ``matern_log_evidence_[matern_order_]`` less ``m/2 (log c + 1/c -
        1)`` for the cross-validated amplitude.
    offset_ : float or None
        ``b``, the counts' log-rate prior centre (None for Gaussian noise).
    overdispersion_ : float
        Counts only: the fitted (or fixed) ``σ²``.
    transduction_, transduction_std_ : ndarray (n_samples,)
        Posterior mean and standard deviation of ``f`` on every row of the cloud (of the
        rate ``exp(b + f)`` for counts).
    n_iter_ : int
        L-BFGS-B iterations of the best start.

    Notes
    -----
    ``y`` of any magnitude is first rescaled by an exact power of two
    (:func:`flgp._validation.power_of_two_unit`). Memory and dask inputs: as in
    :class:`FLGPClassifier` (``transduction_`` and ``transduction_std_`` lazy; the model
    references the lazy ``X``, so it pickles small when ``X`` comes from a file).

    Examples
    --------
    >>> import numpy as np
    >>> from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior
    >>> from flgp.datasets import make_spiral
    >>> X, y, f = make_spiral(2000, noise=0.5, random_state=0)
    >>> rng = np.random.default_rng(1)
    >>> y_semi = np.where(rng.random(len(y)) < 0.05, y, np.nan)   # NaN: unlabelled
    >>> heat = HeatKernelPrior(Eigenbasis(n_induced=300, n_eigenpairs=50))  # the heat kernel
    >>> reg = FLGPRegressor(heat, random_state=0).fit(X, y_semi)
    >>> mean, std = reg.predict(X, return_std=True)
    >>> mean.shape, std.shape
    ((2000,), (2000,))
    >>> print(np.sqrt(np.mean((mean - f) ** 2)) < 0.5)        # the noise sd is 0.5
    True
    """

    _parameter_constraints: dict = {
        **GPEstimator._parameter_constraints,
        "noise": [_POSITIVE, None],
        "likelihood": [StrOptions({"gaussian", "poisson"})],
        "overdispersion": [Interval(numbers.Real, 0, None, closed="left"), None],
    }
    _finite_parameters = ("noise", "overdispersion")
    _unlabelled_fill = np.nan
    REPRESENTATIONS = REPRESENTATIONS

    @staticmethod
    def _is_labelled(y):
        return ~np.isnan(y)

    def __init__(self, prior=None, *, likelihood="gaussian", noise=None, overdispersion=None,
                 max_iter=100, random_state=0, backend="auto", verbose=False,
                 warm_start=False):
        self.prior = prior
        self.likelihood = likelihood
        self.noise = noise
        self.overdispersion = overdispersion
        self.max_iter = max_iter
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose
        self.warm_start = warm_start

    # -- inputs ---------------------------------------------------------------------------
    def _check_parameters(self):
        super()._check_parameters()
        if self.likelihood == "poisson":
            if self.method not in HEAT_METHODS and self.method != "auto":
                raise ValueError(f"likelihood='poisson' works with the heat kernel "
                                 f"(HeatKernelPrior) only; method={self.method!r} is "
                                 f"Gaussian only.")
            if not self._offers("flgp"):
                raise ValueError(f"likelihood='poisson' works with the heat kernel "
                                 f"(HeatKernelPrior) only, which prior={self.prior!r} "
                                 f"does not include.")
            if self.noise is not None:
                raise ValueError("noise is a parameter of likelihood='gaussian'; a Poisson "
                                 "count has no separate noise variance (leave noise=None; "
                                 "overdispersion is the counts' extra variance).")
        elif self.overdispersion is not None:
            raise ValueError("overdispersion is a parameter of likelihood='poisson'; "
                             "Gaussian targets have noise instead.")

    def _target_array(self, y):
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"y must be numeric (NaN marks unlabelled rows): {exc}") from exc
        return target_vector(y)

    def _check_lazy_targets(self, y):
        if not np.issubdtype(y.dtype, np.number):
            raise ValueError(f"y must be numeric (NaN marks unlabelled rows); got dtype "
                             f"{y.dtype}.")

    def _check_labelled_values(self, values):
        values = np.asarray(values, dtype=np.float64)
        if np.isinf(values).any():
            raise ValueError("y contains infinity; mark unlabelled rows with NaN and remove "
                             "infinite targets.")
        return values

    # -- fitting --------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, X_unlabeled=None):
        """Fit on all points ``X``, ``y`` NaN on unlabelled rows, or on labelled ``X, y`` and
        unlabelled ``X_unlabeled``; any may be a dask or zarr array."""
        self._clear_fit()
        self._check_parameters()
        X, labelled, y_lab = self._fit_inputs(X, y, X_unlabeled)
        m = labelled.size
        if m < 2:
            raise ValueError(f"{m} labelled target(s); at least 2 are needed (NaN marks "
                             f"unlabelled rows).")
        self._check_prior_for(X)
        self.labelled_indices_ = labelled
        options = self._fit_options(likelihood=self.likelihood, noise=self.noise,
                                    overdispersion=self.overdispersion)
        if self.likelihood == "poisson":
            # counts: the heat kernel alone; its warnings point at the caller of fit
            self._y_mean, self._y_scale, self._y_unit = 0.0, 1.0, 1.0
            fit = fit_counts(self._prior_for("flgp"), options, X, labelled, y_lab)
            self._adopt(fit, fit.fitted_attributes(X, stacklevel=3))
            return self
        self.offset_ = None
        if not np.ptp(y_lab) > 0:
            warnings.warn(f"all {m} labelled targets equal {y_lab[0]:.6g}: the evidence then "
                          f"takes a prior of (nearly) no amplitude, and the predictions are "
                          f"that value with a standard deviation of ~0 everywhere - the "
                          f"labels cannot say how much the function varies. Label points "
                          f"whose targets differ, or fix the noise variance (noise=).",
                          UserWarning, stacklevel=2)
        # an exact power-of-two unit first (1 for ordinary data)
        standard = Standardisation.of_targets(y_lab)
        self._y_mean, self._y_scale, self._y_unit = standard.mean, standard.scale, standard.unit
        z = standard.standardise(y_lab)
        sole = self._sole_representation(options) if self.method == "auto" else None
        if sole is not None or self.method != "auto":
            if sole is not None:
                best, why = sole
                self.log_evidence_ = {}
                self.skipped_methods_ = {other: why for other in self.REPRESENTATIONS
                                         if other != best and self._offers(other)}
            else:
                best = "flgp" if self.method in HEAT_METHODS else self.method
            fit = self.REPRESENTATIONS[best].fit(self._prior_for(best), options, X,
                                                 labelled, y_lab, z, standard)
        else:
            fit = self._weigh(options, X, labelled, y_lab, z, standard)
        # its warnings point at the caller of fit
        self._adopt(fit, fit.fitted_attributes(X, stacklevel=3))
        return self

    def _weigh(self, options, X, labelled, y_lab, z, standard):
        """``method="auto"``: the fit of highest exact evidence among the feasible
        representations (docs/models.md, "Choosing the prior"): the unbounded ones
        screened (:meth:`_finish_screened`), the bounded ones after them, given the best
        evidence so far. Sets ``log_evidence_`` and ``skipped_methods_``."""
        self.log_evidence_, self.skipped_methods_ = {}, {}
        fits, screened = {}, {}
        order = sorted(self.REPRESENTATIONS.items(), key=lambda item: item[1].bounded)
        for name, representation in order:
            if not self._offers(name) or (is_lazy(X) and not representation.takes_dask):
                continue
            prior = self._prior_for(name)
            why = representation.infeasible(prior, options, X.shape, labelled.size)
            if why is not None:
                self.skipped_methods_[name] = why
                continue
            if not representation.bounded:
                try:
                    screened[name] = representation.screen(prior, options, X, labelled,
                                                           y_lab, z, standard)
                except Infeasible as exc:       # ruled out by the cloud: the others weigh
                    self.skipped_methods_[name] = str(exc)
                continue
            if screened:
                self._finish_screened(screened, fits, labelled.size)
                screened = {}
            if self.log_evidence_:                  # bounded: given the best so far
                rival = max(self.log_evidence_, key=self.log_evidence_.get)
                try:
                    fits[name] = representation.fit(prior, options, X, labelled, y_lab, z,
                                                    standard, bar=self.log_evidence_[rival])
                except Outranked as out:
                    self.skipped_methods_[name] = (
                        f"{out}, below {rival!r}'s {self.log_evidence_[rival]:.1f}; not "
                        f"searched")
                    continue
            else:
                fits[name] = representation.fit(prior, options, X, labelled, y_lab, z,
                                                standard)
            self.log_evidence_[name] = fits[name].log_evidence
        if screened:
            self._finish_screened(screened, fits, labelled.size)
        # the registry's order, whatever order the screened searches finished in
        names = [name for name, _ in order]
        self.log_evidence_ = {k: self.log_evidence_[k] for k in names
                              if k in self.log_evidence_}
        self.skipped_methods_ = {k: self.skipped_methods_[k] for k in names
                                 if k in self.skipped_methods_}
        if not fits:
            raise ValueError(f"none of the priors offered can be fitted here: "
                             f"{self.skipped_methods_}.")
        return fits[max(self.log_evidence_, key=self.log_evidence_.get)]

    def _finish_screened(self, screened, fits, m):
        """Finish the screened fits, best coarse evidence first; leave one unfinished whose
        tightened coarse evidence lies more than
        :func:`~flgp.models.representation.screening_margin` below the best so far, or twice
        that untightened and not ``loose`` (docs/models.md, "Screening")."""
        margin = screening_margin(m)
        # tighten loose values below the top first: finishing an unpolished higher value
        # first could finish a search that the polished one screens out
        top = max(paused.log_evidence for paused in screened.values())
        for paused in screened.values():
            if paused.loose and not paused.final and paused.log_evidence < top:
                paused.tighten()
        for name in sorted(screened, key=lambda n: -screened[n].log_evidence):
            paused = screened[name]
            if self.log_evidence_ and not paused.final:
                rival = max(self.log_evidence_, key=self.log_evidence_.get)
                bar = self.log_evidence_[rival] - margin
                far = not paused.loose and paused.log_evidence < bar - margin
                if paused.log_evidence < bar and (far or paused.tighten() < bar):
                    self.skipped_methods_[name] = (
                        f"screened out: its coarse search reached a log evidence of "
                        f"{paused.log_evidence:.1f}, more than {margin:.0f} nats below "
                        f"{rival!r}'s {self.log_evidence_[rival]:.1f}; not searched further")
                    continue
            fits[name] = paused.finish()
            self.log_evidence_[name] = fits[name].log_evidence

    def _sole_representation(self, options):
        """``(name, why)`` of the representation ``"auto"`` must take alone, or None."""
        for name, representation in self.REPRESENTATIONS.items():
            if not self._offers(name):
                continue
            why = representation.sole_reason(self._prior_for(name), options)
            if why is not None:
                return name, why
        return None

    def predict(self, X, return_std=False):
        """Posterior mean at any points; with ``return_std`` also the posterior sd of ``f(x)``
        (add ``noise_`` for a new observation's). Counts: of the rate ``exp(b + f(x))``
        (:meth:`predict_interval` gives intervals for new counts). Lazy for a dask ``X``."""
        mean, std = self._predict(X, stacklevel=3)
        return (mean, std) if return_std else mean

    def _predict(self, X, stacklevel):
        """``(mean, std)`` at ``X``; ``stacklevel`` as ``warnings.warn`` counts from here."""
        X = self._predict_points(X)
        return self._chosen_fit.predict(X, stacklevel=stacklevel)

    def predict_interval(self, X, coverage=0.9):
        """Equal-tailed ``coverage`` interval ``(lower, upper)`` for a new observation at
        each point: ``mean ± z · √(sd² + noise_)``; for counts, the integer quantiles of the
        Poisson–log-normal posterior predictive."""
        if isinstance(coverage, bool) or not isinstance(coverage, (int, float, np.floating)) \
                or not 0.0 < coverage < 1.0:
            raise ValueError(f"coverage must be a probability strictly between 0 and 1 "
                             f"(e.g. 0.9 for a 90% interval); got {coverage!r}.")
        if is_lazy(X):
            raise ValueError("predict_interval takes numpy arrays; compute the dask array "
                             "first (or call it on blocks).")
        check_is_fitted(self, "n_features_in_")
        if self.likelihood != "poisson":
            mean, std = self._predict(X, stacklevel=3)
            unit, noise = self._chosen_fit.interval_noise()
            half = ndtri(0.5 + coverage / 2.0) * np.sqrt((std / unit) ** 2 + noise) * unit
            return mean - half, mean + half
        X = self._predict_points(X)
        return self._chosen_fit.count_interval(X, coverage, stacklevel=2)

    # -- the labelling loop ---------------------------------------------------------------
    def latent_posterior(self):
        """The fitted latent ``f`` as a :class:`flgp.models.labelling.LatentPosterior` in the
        eigenbasis (standardised units; the log-rate for counts). The heat kernel's only,
        else ``ValueError``."""
        check_is_fitted(self, "n_features_in_")
        if not self._in_eigenbasis:
            raise ValueError(f"latent_posterior is the heat kernel's Gaussian in its "
                             f"eigenbasis; method_={self.method_!r} has none. Its posterior "
                             f"is transduction_ and transduction_std_ on the fitted cloud, "
                             f"predict(X, return_std=True) at other points.")
        return self._chosen_fit.latent_posterior()

    def suggest_labels(self, n=1, strategy=None, random_state=None):
        """Row indices of ``n`` unlabelled rows of the fitted cloud to label next, best
        first (indices into ``X``, or into ``X`` stacked above ``X_unlabeled``).

        ``strategy=None`` (the default): ``"variance_reduction"`` (the expected drop of the
        total predictive variance of ``f`` over the cloud) for the heat kernel, ``"std"``
        (or ``"uncertainty"``) otherwise; also ``"random"``. Batches are greedy;
        ``random_state`` as in :meth:`FLGPClassifier.suggest_labels`.
        """
        check_is_fitted(self, "n_features_in_")
        if strategy is None:
            strategy = "variance_reduction" if self._in_eigenbasis else "std"
        return _suggest_labels(
            self._chosen_fit, n, strategy,
            self.random_state if random_state is None else random_state,
            name=type(self).__name__, classifier=False, method=self.method_,
            labelled=self.labelled_indices_, uncertainty=self.transduction_std_)
