"""Semi-supervised Gaussian-process classification on point clouds and graphs (scikit-learn
API)."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from .._chunks import is_lazy
from .._fingerprint import array_fingerprint
from ._base import GPEstimator, target_vector
from .baselines import RBFClassification
from .graph_matern import GraphMaternClassification
from .heat_kernel import HeatKernelClassification
from .priors import HEAT_METHODS
from .class_predictor import classes_of
from .cross_validation import cross_validated_fit, cross_validates
from .labelling import suggest_labels as _suggest_labels

# in the order method="auto" asks them: the heat kernel, the rule's fallback, last
REPRESENTATIONS = {rep.name: rep for rep in (GraphMaternClassification(), RBFClassification(),
                                             HeatKernelClassification())}

__all__ = ["FLGPClassifier", "split_labels", "REPRESENTATIONS", "warn_conflicting_labels"]


def split_labels(y, unlabeled_label=-1):
    """Boolean mask of labelled entries: ``y != -1`` (numbers) or not -1/"-1"/None/NaN.

    Raises ValueError for an unsigned ``y`` that holds its dtype's maximum (-1 wrapped)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-d; got shape {y.shape}.")
    if y.dtype.kind in "fc":
        return ~(np.isnan(y) | (y == unlabeled_label))
    if y.dtype.kind == "u":
        wrapped = np.iinfo(y.dtype).max
        if y.size and y.max() == wrapped:
            raise ValueError(f"y has the unsigned dtype {y.dtype} and holds {wrapped}, which "
                             f"is -1 wrapped around: an unsigned type cannot hold the -1 that "
                             f"marks unlabelled rows. Pass a signed integer y (e.g. "
                             f"y.astype(np.int64) before setting -1).")
        return np.ones(y.shape, dtype=bool)
    if y.dtype.kind in "ib":
        return y != unlabeled_label
    return np.array([not (v is None or (isinstance(v, float) and np.isnan(v))
                          or (isinstance(v, numbers.Number) and v == unlabeled_label)
                          or (isinstance(v, str) and v == str(unlabeled_label)))
                     for v in y], dtype=bool)


def encode_classes(y_lab):
    """``(classes, codes)``: the sorted distinct labels and each value's index among them;
    ValueError for labels of types that cannot be ordered (``"a"`` and ``1``)."""
    try:
        return np.unique(y_lab, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"the labels mix types that cannot be ordered ({exc}); use one type "
                         f"for every label, e.g. all strings or all integers.") from exc


def warn_conflicting_labels(X, labelled, codes, classes, stacklevel: int = 2) -> None:
    """Warn when coinciding rows of ``X`` at ``labelled`` carry different classes (both labels
    stay: the point's probabilities are shared between them)."""
    if labelled.size < 2:
        return
    rows = np.ascontiguousarray(X[labelled])
    _, group = np.unique(rows, axis=0, return_inverse=True)
    group = np.asarray(group).ravel()
    order = np.lexsort((codes, group))
    g, c = group[order], codes[order]
    clash = np.flatnonzero((g[1:] == g[:-1]) & (c[1:] != c[:-1]))
    if clash.size == 0:
        return
    bad = np.unique(g[clash])
    first = labelled[order][np.isin(g, bad[:1])]
    names = [np.asarray(classes[codes[labelled == r][0]]).item() for r in first[:4]]
    shown = ", ".join(f"row {int(r)} ({name!r})" for r, name in zip(first[:4], names))
    warnings.warn(f"{bad.size} point(s) are labelled more than once with different classes "
                  f"(the same coordinates), e.g. {shown}. Both labels are kept: such a "
                  f"point's probabilities are shared between its classes. If one of them "
                  f"is a mistake, drop it (or mark it -1).", UserWarning,
                  stacklevel=stacklevel + 1)


class FLGPClassifier(ClassifierMixin, GPEstimator):
    """Semi-supervised Gaussian-process classifier on a point cloud: few labels, many
    unlabelled points, classes that follow the cloud's shape.

    By default a numpy cloud gets the full-resolution least-squares GP classifier under the
    centred graph Matérn prior on its self-tuning 10-NN graph (docs/few_labels.md), checked
    against the heat kernel by cross-validation over the labels from three labels a class
    (docs/calibration.md). Dask or zarr clouds, given induced points and clouds too large
    for that fit get the low-rank FLGP heat kernel: one latent a class with the kernel
    ``A · C_t``, a (multinomial) probit likelihood and expectation propagation, whose
    marginal likelihood selects ``t``, ``A`` and the SE bandwidth (docs/models.md).
    ``method_`` says which ran.

    Parameters
    ----------
    prior : HeatKernelPrior, GraphMaternPrior, RBFPrior, a list of them, or None
        The class latents' prior (:mod:`flgp.models.priors`): the full-resolution graph
        Matérn prior, the heat kernel (FLGP's, GLGP's or Nyström-GLGP's eigenpairs) or an
        RBF GP on the labelled points only. A list: the rule chooses among those. ``None``
        (the default): all three; the graph Matérn prior for a numpy cloud (or a ``graph``)
        whose fit is predicted to take under 25 s and half the memory
        (:func:`flgp.models.graph_matern.classifier_cost`), else the heat kernel.
    multi_class : {"multinomial", "ovr"}, default="multinomial"
        More than two classes: one GP whose latents share one ``t``, or one binary GP per
        class against the rest, each with its own ``t`` (probabilities normalised, but less
        comparable). Ignored for two classes and by the RBF prior.
    inference : {"ep", "laplace"}, default="ep"
        The heat kernel only: ``"ep"``, a (multinomial) probit likelihood by expectation
        propagation, ``A`` fitted; ``"laplace"``, logistic / softmax by Laplace's
        approximation, ``A = 1``.
    calibration : {"loo", None}, default="loo"
        The heat kernel with EP only. ``"loo"``: divide every predictive spread by ``κ``,
        the mode of the labels' leave-one-out likelihood under a log-normal prior (median 1,
        sd ``log 2``; :func:`flgp.models.inference.ep.fit_predictive_scale`); ``κ = 1``,
        with a warning, for one label per class. ``None``: no rescaling.
    class_prior : {"auto", "balanced", "labels"}, array-like or None, default="auto"
        The graph Matérn prior only: the class shares the cloud's average probabilities are
        re-weighted to. ``"auto"``: balanced unless the label counts favour unequal shares
        by their Bayes factor (:func:`flgp.precision.balanced_log_odds`), then ``"labels"``
        (counts plus one, normalised). Or shares in the order of ``classes_``, or a mapping
        ``{class: share}`` that may name unlabelled classes (they join ``classes_``, with a
        warning; docs/few_labels.md). ``None``: none.
    max_iter : int, default=100
        Newton iterations (Laplace) or EP sweeps; also bounds the ``t`` search.
    random_state : int, Generator or None, default=0
        Seeds the induced points.
    backend : {"auto", "torch", "keops"}, default="auto"
        Who does the distance work (:mod:`flgp.backends`; "auto": KeOps only with a GPU).
    verbose : bool, default=False
        Print each bandwidth candidate's ``t`` and evidence.
    warm_start : bool, default=False
        Reuse the graph and eigenpairs when the next ``fit`` gets the same cloud (shape and
        checksums) and graph settings, so refits with new labels rerun only the GP part (not
        for dask or zarr inputs; a full-resolution fit by conjugate gradients then takes
        order 1 only, docs/few_labels.md).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    method_ : str
        The prior that predicts: ``"flgp"``, ``"glgp"``, ``"nystrom"`` (the heat kernel),
        ``"graph_matern"`` or ``"rbf"``.
    prior_ : HeatKernelPrior, GraphMaternPrior or RBFPrior
        A copy of that prior with the fitted values (:mod:`flgp.models.priors`).
    log_evidence_ : dict
        ``{name: log_marginal_likelihood_}`` of the fitted representation (empty where it
        has none); the classifier chooses by its rule, not by evidence.
    skipped_methods_ : dict
        Why each other representation offered was not fitted, or not taken.
    cross_validation_ : dict or None
        Held-out ``{"accuracy", "log_likelihood"}`` of ``"graph_matern"`` and ``"flgp"``
        by which ``prior=None`` chose (:mod:`flgp.models.cross_validation`), else None.
    eigenpairs_, eigenvalues_ : Eigenpairs, ndarray (n_eigenpairs,)
        The best bandwidth's eigenpairs and eigenvalues, where the heat kernel was fitted
        (``eigenpairs_`` None after a graph Matérn fit).
    diffusion_time_, amplitude_, predictive_scale_ : float or ndarray
        The MAP ``t``, ``A`` and ``κ`` (one per class for one-vs-rest), where the heat
        kernel was fitted.
    spectral_family_, constant_variance_ : str, float
        The spectral family and constant-mode variance used, where the heat kernel was
        fitted.
    bandwidth_, bandwidth_scale_ : float or None
        The SE bandwidth and its scale ``a`` (None / 1 for LAE), where the heat kernel was
        fitted.
    log_marginal_likelihood_ : float or None
        The fitted representation's evidence (the heat kernel's at the MAP ``t``, without
        its prior); None where the graph Matérn prior solves by conjugate gradients.
    diffusion_time_weights_ : ndarray of shape (k, 2) or None
        The diffusion times the predictions average over and their weights (first row:
        the MAP ``t``), or None. Not set by ``method_ == "graph_matern"``.
    labelled_indices_ : ndarray of int
        The labelled rows of the fitted cloud (``X``, or ``X`` above ``X_unlabeled``).
    transduction_ : ndarray (n_samples,)
        The most probable class of every row of the cloud.
    label_distributions_ : ndarray (n_samples, n_classes)
        Their class probabilities.
    n_features_in_ : int
    n_iter_ : int
        Posterior evaluations of the hyperparameter search (its best candidate).
    graph_, class_prior_, class_weights_, matern_order_ :
        ``method="graph_matern"``: the graph, the class shares (or None), the factor on
        each class's probability that meets them, and the order ``ν``.
    prior_to_noise_ratio_, probability_variation_ :
        ``method="graph_matern"``: the least-squares ratio ``ρ`` (0.01 while a class has
        one label) and, where ``(ν, ρ)`` was chosen among several
        (:mod:`flgp.precision.classification`), each candidate's graph total variation of
        the class probabilities ``{(ν, ρ): variation}``, else None.

    Notes
    -----
    The fit keeps the sparse transition rows and the ``s x M`` eigenvector map; eigenvector
    rows are computed in blocks (:func:`flgp.config_context` sets their budget).
    ``X``, ``y`` and ``X_unlabeled`` may be dask or zarr arrays (the heat kernel;
    docs/distributed.md): the fit runs as Dask tasks, and ``transduction_``,
    ``label_distributions_`` and the predictions of a dask array are lazy.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp import FLGPClassifier
    >>> from flgp.datasets import make_concentric_circles
    >>> X, y = make_concentric_circles(2400, random_state=0)
    >>> y_semi = np.full(len(y), -1)                        # -1 marks an unlabelled row
    >>> labelled = np.random.default_rng(1).choice(len(y), 60, replace=False)
    >>> y_semi[labelled] = y[labelled]
    >>> from flgp import Eigenbasis, HeatKernelPrior
    >>> clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=600)),
    ...                      random_state=0).fit(X, y_semi)
    >>> unlabelled = y_semi == -1
    >>> print(np.mean(clf.transduction_[unlabelled] != y[unlabelled]) < 0.02)
    True
    >>> clf.predict_proba(X[:3] * 1.01).shape               # any new points
    (3, 2)
    """

    _parameter_constraints: dict = {
        **GPEstimator._parameter_constraints,
        "class_prior": [StrOptions({"auto", "balanced", "labels"}), dict, "array-like",
                        None],
        "multi_class": [StrOptions({"multinomial", "ovr"})],
        "inference": [StrOptions({"ep", "laplace"})],
        "calibration": [StrOptions({"loo"}), None],
    }
    _unlabelled_fill = -1

    @staticmethod
    def _is_labelled(y):
        """:func:`split_labels`, except where the rows not marked -1 (at least half of them)
        hold one class: then -1 is read as the other class (labels in ``{-1, +1}``), every
        row labelled, with a warning."""
        y = np.asarray(y)
        labelled = split_labels(y)
        if labelled.all() or not labelled.any() or 2 * labelled.sum() < labelled.size:
            return labelled
        values = y[labelled]
        if np.unique(values.astype(str) if values.dtype.kind == "O" else values).size > 1:
            return labelled
        marked = y[~labelled]
        is_minus_one = (marked == -1) if marked.dtype.kind in "iufb" else np.array(
            [isinstance(v, numbers.Number) and not isinstance(v, bool) and v == -1
             for v in marked], dtype=bool)
        if not is_minus_one.all():                # None / NaN / "-1" markers: unlabelled
            return labelled
        warnings.warn(f"y holds -1 and one other class ({values[0]!r}) only: read as two "
                      f"classes, -1 and {values[0]!r}, every row labelled. -1 marks "
                      f"unlabelled rows where the other labels name two classes or more; "
                      f"for one class and unlabelled rows, label a point of another class "
                      f"(a classifier needs two).", UserWarning, stacklevel=4)
        return np.ones(y.shape, dtype=bool)
    REPRESENTATIONS = REPRESENTATIONS

    def __init__(self, prior=None, *, multi_class="multinomial", inference="ep",
                 calibration="loo", class_prior="auto", max_iter=100, random_state=0,
                 backend="auto", verbose=False, warm_start=False):
        self.prior = prior
        self.multi_class = multi_class
        self.inference = inference
        self.calibration = calibration
        self.class_prior = class_prior
        self.max_iter = max_iter
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose
        self.warm_start = warm_start

    # -- inputs ---------------------------------------------------------------------------
    def _check_parameters(self):
        super()._check_parameters()
        if self.inference == "laplace" and \
                self._prior_for("flgp").amplitude not in (None, 1, 1.0):
            raise ValueError("amplitude is a parameter of inference='ep'; the Laplace "
                             "classifier's kernel has amplitude 1 (leave amplitude=None).")

    def _target_array(self, y):
        return target_vector(y)

    def _check_labelled_values(self, values):
        values = np.asarray(values)
        encode_classes(values)                          # orderable labels, or a clear error
        if values.size and type_of_target(values) == "continuous":
            raise ValueError("Unknown label type: continuous. FLGPClassifier needs class "
                             "labels; use FLGPRegressor for a continuous target.")
        return values

    def _with_named_classes(self, classes, y_lab, codes):
        """``(classes, codes)`` with the classes a ``class_prior`` mapping names without a
        label (a warning names them); refuses a mapping that leaves out a labelled class."""
        if not isinstance(self.class_prior, dict):
            return classes, codes
        named = list(self.class_prior)
        seen = classes.tolist()
        missing = [c for c in seen if c not in self.class_prior]
        if missing:
            raise ValueError(f"class_prior names the classes {named} but not "
                             f"{missing} of the labels; give every class a share.")
        extra = [c for c in named if c not in set(seen)]
        if not extra:
            return classes, codes
        try:
            merged = np.unique(np.array(seen + extra, dtype=object)).tolist()
            classes = np.asarray(merged, dtype=None if classes.dtype != object else object)
            if classes.dtype.kind != "O" and classes.dtype.kind != np.asarray(
                    seen).dtype.kind:
                raise TypeError(f"{classes.dtype} against {np.asarray(seen).dtype}")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"class_prior names classes {extra} that cannot be ordered "
                             f"with the labels' {seen} ({exc}); use one type.") from exc
        warnings.warn(f"class_prior names {len(extra)} class(es) without a label: {extra}. "
                      f"They get the prior's latent (mean 0) and their shares where the "
                      f"labelled classes do not decide a point; label a point of each to "
                      f"learn where they lie.", UserWarning, stacklevel=4)
        return classes, np.searchsorted(classes, y_lab)

    # -- fitting --------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, X_unlabeled=None):
        """Fit on all points ``X``, ``y`` -1 (or None / NaN) on unlabelled rows (-1 is read as
        a class, with a warning, where the other labels, at least half the rows, are one
        class); or on labelled ``X, y`` and unlabelled ``X_unlabeled``. Any may be a dask or
        zarr array. Raises ``ValueError`` for fewer than two labels or two classes."""
        self._clear_fit()
        self._check_parameters()
        X, labelled, y_lab = self._fit_inputs(X, y, X_unlabeled)
        m = labelled.size
        if m < 2:
            raise ValueError(f"{m} labelled point(s); at least 2 are needed. Unlabelled rows "
                             f"are marked -1 in y.")
        self._check_prior_for(X)
        self.classes_, codes = encode_classes(y_lab)
        if self.classes_.size < 2:
            raise ValueError(f"all labelled points have the class {self.classes_[0]!r}; a "
                             f"classifier needs at least two classes among the labels.")
        self.classes_, codes = self._with_named_classes(self.classes_, y_lab, codes)
        if isinstance(X, np.ndarray):
            warn_conflicting_labels(X, labelled, codes, self.classes_, stacklevel=3)
        self.labelled_indices_ = labelled
        self._cloud_key = (array_fingerprint(X) if isinstance(X, np.ndarray) else None)
        options = self._fit_options(**self._classifier_options())
        skipped = {}
        if self.method == "auto":
            # the first representation offered whose rule takes these labels (the
            # heat kernel, the fallback, asked last, takes any), else the first prior
            counts = np.bincount(codes, minlength=self.classes_.size)
            order = sorted(self.REPRESENTATIONS.items(), key=lambda item: item[1].fallback)
            key = None
            for name, rep in order:
                if not self._offers(name):
                    continue
                prior = self._prior_for(name)
                if not rep.chosen_by_auto(prior, options, X, counts):
                    skipped[name] = rep.declined_by_auto(prior, options, X, counts)
                elif key is None:
                    key = name
                else:
                    skipped[name] = (f"not fitted: the rule took {key!r} first (the "
                                     f"classifier's representations are not weighed by "
                                     f"evidence: docs/few_labels.md, \"One classifier\")")
            if key is None:
                key = self._priors()[0].method
                skipped.pop("flgp" if key in HEAT_METHODS else key, None)
        else:
            key = self.method
        key = "flgp" if key in HEAT_METHODS else key
        self.method_ = self._graph_method if key == "flgp" else key
        if key != "graph_matern" and np.bincount(codes, minlength=self.classes_.size).min() == 0:
            raise ValueError(f"classes without a label (named in class_prior) need the "
                             f"full-resolution classifier (GraphMaternPrior()); "
                             f"{self.method_!r} learns only the labels' classes.")
        if self.method == "auto" and key == "graph_matern" and self._offers("flgp") and \
                cross_validates(options, X, labelled, codes, self.classes_.size):
            # the rule's fit against the heat kernel's, by cross-validation over the labels
            fits = {name: (self.REPRESENTATIONS[name], self._prior_for(name))
                    for name in ("graph_matern", "flgp")}
            key, fit, scores = cross_validated_fit(fits, options, X, labelled, codes,
                                                   self.classes_)
            self.method_ = self._graph_method if key == "flgp" else key
            other = "graph_matern" if key == "flgp" else "flgp"
        else:
            scores = None
            fit = self.REPRESENTATIONS[key].fit(self._prior_for(key), options, X, labelled,
                                                codes, self.classes_)
        if isinstance(scores, str):
            skipped["flgp"] = (f"not compared: cross-validating it over the labels failed "
                               f"({scores})")
            scores = None
        elif scores is not None:
            scores = {name: (acc, float(np.mean(ll))) for name, (acc, ll) in scores.items()}
            skipped[other] = (f"fitted, and set aside by cross-validation over the labels "
                              f"(held-out accuracy {scores[other][0]:.3f} against "
                              f"{scores[key][0]:.3f}, log-likelihood a label "
                              f"{scores[other][1]:.3f} against {scores[key][1]:.3f}; the "
                              f"heat kernel is taken where it is better on both, its "
                              f"likelihood by two standard errors)")
        # its warnings point at the caller of fit
        self._adopt(fit, fit.fitted_attributes(X, stacklevel=3))
        self._record_choice(key, skipped)
        self.cross_validation_ = None if scores is None else {
            name: {"accuracy": acc, "log_likelihood": ll} for name, (acc, ll) in scores.items()}
        return self

    def _classifier_options(self) -> dict:
        """The classifier's fields of the fit's
        :class:`~flgp.models.representation.FitOptions`."""
        ep = self.inference == "ep"
        average = self._prior_for("flgp").average_diffusion_time
        prior = self.class_prior
        if isinstance(prior, dict):
            prior = np.array([prior[c] for c in self.classes_.tolist()], dtype=object)
        key, suggested = getattr(self, "_suggested", (None, ()))
        return dict(expectation_propagation=ep,
                    one_vs_rest=self.multi_class == "ovr" and self.classes_.size > 2,
                    average_diffusion_time=not ep if average is None else bool(average),
                    calibration=self.calibration, class_prior=prior,
                    cloud_key=self._cloud_key,
                    suggested=suggested if key == self._cloud_key else ())

    def _record_choice(self, key, skipped):
        """Set ``log_evidence_`` (``key``'s evidence, if any) and ``skipped_methods_``."""
        evidence = getattr(self, "log_marginal_likelihood_", None)
        self.log_evidence_ = {} if evidence is None else {key: float(evidence)}
        self.skipped_methods_ = skipped

    # -- prediction -----------------------------------------------------------------------
    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)`` at any points (lazy for a dask ``X``)."""
        return self._predict_proba(X)

    def _predict_proba(self, X):
        # called from the public methods only: warnings point at their caller
        X = self._predict_points(X)
        return self._chosen_fit.predict_proba(X, stacklevel=3)

    def predict(self, X):
        """Most probable class at any points (a lazy dask array for a dask ``X``)."""
        return classes_of(self._predict_proba(X), self.classes_)

    def predict_latent(self, X):
        """Latent posterior mean and variance, ``(n,)`` each for two classes, else ``(n,
        n_classes)``; with ``average_diffusion_time``, the mixture's over the times."""
        check_is_fitted(self, "classes_")
        fit = self._chosen_fit
        if not hasattr(fit, "predict_latent"):
            raise ValueError(f"predict_latent is available for the heat-kernel and "
                             f"full-resolution methods; method_={self.method_!r} has no "
                             f"latent posterior.")
        width = 1 if self.classes_.size == 2 else self.classes_.size
        X = self._predict_points(X)
        if is_lazy(X) and not fit.lazy_points:
            raise ValueError(f"method_={self.method_!r} predicts numpy inputs only; "
                             f"compute the dask array first.")
        mean, var = fit.predict_latent(X, stacklevel=2)
        if self._in_eigenbasis:
            return (mean[:, 0], var[:, 0]) if width == 1 else (mean, var)
        return (mean[:, 1], var[:, 1]) if width == 1 else (mean, var)

    # -- the labelling loop ---------------------------------------------------------------
    def latent_posterior(self):
        """The fitted latents ``f_k(x) = v(x)ᵀ β_k``, ``β_k ~ N(mean[:, k], cov[k])`` at the
        MAP ``t``, as a :class:`flgp.models.labelling.LatentPosterior` (what
        :meth:`suggest_labels` scores with). The heat kernel's only, else ``ValueError``."""
        check_is_fitted(self, "classes_")
        if not self._in_eigenbasis:
            instead = (" Its latent means and variances at any points are "
                       "predict_latent(X) (the fitted cloud's rows included)."
                       if hasattr(self._chosen_fit, "predict_latent") else "")
            raise ValueError(f"latent_posterior is the heat-kernel posterior's Gaussian in "
                             f"its eigenbasis; method_={self.method_!r} has none.{instead}")
        return self._chosen_fit.latent_posterior()

    def suggest_labels(self, n=1, strategy=None, random_state=None):
        """Row indices of ``n`` unlabelled rows of the fitted cloud to label next, best
        first (indices into ``X``, or into ``X`` stacked above ``X_unlabeled``).

        ``strategy=None`` (the default): ``"variance_reduction"`` (the expected drop of the
        class probabilities' total variance, to first order) for the heat kernel, which also
        takes ``"entropy"`` (or ``"uncertainty"``), ``"margin"``, ``"least_confident"`` and
        ``"random"``; ``"margin"`` (of the two largest latent means; Miller & Calder 2023)
        at full resolution, which also takes ``"entropy"``, ``"least_confident"`` and
        ``"random"``, each weighted by the graph distance to the nearest label. Batches are
        greedy and spread out (:mod:`flgp.models.labelling`; docs/few_labels.md).
        ``random_state`` (None: the estimator's) seeds ``"random"``; an int is combined with
        the number of labels, so a loop draws new rows each round.
        """
        check_is_fitted(self, "classes_")
        if strategy is None:
            strategy = "variance_reduction" if self._in_eigenbasis else "margin"
        rows = _suggest_labels(
            self._chosen_fit, n, strategy,
            self.random_state if random_state is None else random_state,
            name=type(self).__name__, classifier=True, method=self.method_,
            labelled=self.labelled_indices_, uncertainty=self.label_distributions_)
        if strategy == "random":
            return rows           # a random sample: the class-size prior reads their labels
        # chosen rows are no random sample: the next fit's class_prior leaves their labels out
        key, before = getattr(self, "_suggested", (None, np.zeros(0, dtype=np.int64)))
        if key != self._cloud_key:
            before = np.zeros(0, dtype=np.int64)
        self._suggested = (self._cloud_key, np.union1d(before, rows))
        return rows

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.classifier_tags.multi_label = False
        return tags
