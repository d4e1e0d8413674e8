"""What :class:`~flgp.FLGPClassifier` and :class:`~flgp.FLGPRegressor` share.

:class:`GPEstimator` holds the parameters and their constraints (checked once when ``fit``
starts), validates the inputs once (a numpy cloud by ``validate_data`` and
:func:`flgp._validation.check_cloud_values`, a dask or zarr cloud by one pass over its
chunks; ``X_unlabeled`` stacked below ``X``), clears and sets the fitted state in one place
each (:meth:`GPEstimator._clear_fit`, :meth:`GPEstimator._adopt`) and resolves the prior
objects (:meth:`GPEstimator._prior_for`, :meth:`GPEstimator._fit_options`). What fits and
predicts is a representation of the prior (:mod:`flgp.models.representation`); the
estimator holds the chosen one's fit (``_chosen_fit``). The subclasses supply the targets
and the choice.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from .._chunks import is_lazy, stage
from .._validation import check_cloud_values, check_points
from .priors import (HEAT_METHODS, HEAT_PARAMETERS, GraphMaternPrior, HeatKernelPrior, Prior,
                     RBFPrior, resolve_priors)
from .representation import FitOptions, WarmStartCache

__all__ = ["GPEstimator", "ESTIMATOR_METHODS"]

# the heat kernel's methods; each estimator adds the names of its REPRESENTATIONS
ESTIMATOR_METHODS = HEAT_METHODS
_POSITIVE = Interval(numbers.Real, 0, None, closed="neither")


class GPEstimator(BaseEstimator):
    """The shared core of the Gaussian-process estimators (see the module notes)."""

    _parameter_constraints: dict = {
        "prior": [Prior, list, tuple, None],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state", np.random.Generator],
        "backend": [StrOptions({"auto", "torch", "keops"})],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
    }

    # -- what the subclasses define -----------------------------------------------------
    _unlabelled_fill = None            # the mark of unlabelled rows in y, for X_unlabeled

    @staticmethod
    def _is_labelled(y):               # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    @property
    def _graph_method(self) -> str:
        """The method whose graph a fit builds: ``method``, or the heat kernel's for
        ``"auto"``."""
        method = self.method
        return self._prior_for("flgp").method if method == "auto" else method

    # -- parameters -----------------------------------------------------------------------
    def _check_parameters(self) -> None:
        """What the constraints cannot say: each prior object's own settings (its
        constraints, finite numbers, a bandwidth grid of positive finite scales; a
        classifier's settings refused on a regressor)."""
        for prior in resolve_priors(self.prior):
            prior._check(type(self).__name__, for_classifier=is_classifier(self))
        for name in self._finite_parameters:
            value = getattr(self, name, None)
            if value is not None and not np.isfinite(value):
                raise ValueError(f"{name} must be finite; got {value!r}.")

    # numeric parameters that must also be finite (Interval lets infinity through)
    _finite_parameters: tuple = ()

    # -- the prior objects ----------------------------------------------------------------
    def _priors(self) -> list:
        """The prior objects this estimator weighs (:func:`resolve_priors`)."""
        return resolve_priors(self.prior)

    def _prior_for(self, name: str):
        """The prior object of the representation ``name`` (``"flgp"``: the heat kernel)
        among :meth:`_priors`, else one at its defaults (a further representation's: None)."""
        kind = {"flgp": HeatKernelPrior, "graph_matern": GraphMaternPrior,
                "rbf": RBFPrior}.get(name)
        given = next((p for p in self._priors()
                      if (isinstance(p, kind) if kind else p.method == name)), None)
        return given if given is not None or kind is None else kind()

    def _fit_options(self, **specific) -> FitOptions:
        """The fit's :class:`~flgp.models.representation.FitOptions` (the subclass's
        ``specific`` fields too), with the ``warm_start`` caches kept on the estimator."""
        cache = self.__dict__.setdefault("_cache", WarmStartCache())
        return FitOptions(type(self).__name__, self.method, self.random_state, self.max_iter,
                          self.verbose, self.backend, self.warm_start, cache,
                          self._prior_for("flgp").basis.induced_points is not None,
                          **specific)

    def _offers(self, method: str) -> bool:
        """Whether the representation ``method`` (``"flgp"`` for the heat kernel) is among
        the priors weighed (``prior=None``: every representation registered)."""
        if self.prior is None:
            return True
        return any(p.method == method or (method == "flgp" and isinstance(p, HeatKernelPrior))
                   for p in self._priors())

    @property
    def method(self) -> str:
        """``"auto"`` when several priors are weighed, else the one prior's method
        (``"flgp"`` / ``"glgp"`` / ``"nystrom"`` for the heat kernel, ``"graph_matern"``,
        ``"rbf"``)."""
        priors = self._priors()
        return priors[0].method if len(priors) == 1 else "auto"

    def _check_prior_for(self, X) -> None:
        """A dask cloud is fitted by the heat kernel alone: refuse priors without it."""
        if is_lazy(X) and not self._offers("flgp"):
            raise ValueError(f"a dask cloud is fitted by the heat kernel alone, and prior="
                             f"{self.prior!r} does not include HeatKernelPrior(); include "
                             f"it, or pass a numpy array.")

    # -- fitted state ---------------------------------------------------------------------
    # the representations by registry name (each estimator its own) and the fit of the
    # one chosen, which predicts
    REPRESENTATIONS: dict = {}
    _chosen_fit = None

    # private state a fit sets (public fitted attributes end with "_")
    _FITTED_STATE = ("_chosen_fit", "_y_mean", "_y_scale", "_y_unit")

    def _clear_fit(self) -> None:
        """Forget everything a previous fit set (the public ``name_`` attributes and the
        private fitted state), keeping only the ``warm_start`` caches, so that a refit -
        after ``set_params(method=...)``, say - never shows stale attributes."""
        for name in list(vars(self)):
            if (name.endswith("_") and not name.startswith("_")) or name in self._FITTED_STATE:
                delattr(self, name)

    def _adopt(self, fit, attributes: dict) -> None:
        """Keep ``fit`` (the fit that predicts), set the fitted ``attributes`` it gave
        (:meth:`~flgp.models.representation.RegressionFit.fitted_attributes`), then
        ``prior_``."""
        self._chosen_fit = fit
        for name, value in attributes.items():
            setattr(self, name, value)
        self._set_fitted_prior()

    def _set_fitted_prior(self) -> None:
        """``prior_``: the chosen prior with what the fit chose
        (:meth:`~flgp.models.priors.Prior.fitted`), from the fitted attributes."""
        value = self.__dict__.get
        evidence = value("log_marginal_likelihood_")
        regression = not is_classifier(self) and getattr(self, "likelihood", "") != "poisson"
        constant = float(self._y_mean) if regression else None
        if self.method_ == "graph_matern":
            # the regressor's fitted κ; the classifier's fixed one
            kappa = value("matern_kappa_", getattr(self._chosen_fit, "kappa", None))
            self.prior_ = self._prior_for("graph_matern").fitted(
                {"graph": self.graph_, "nu": self.matern_order_},
                kappa_=kappa, outputscale_=value("outputscale_"), noise_=value("noise_"),
                constant_=constant, prior_to_noise_ratio_=value("prior_to_noise_ratio_"),
                log_marginal_likelihood_=evidence)
        elif self.method_ == "rbf":
            rbf = self.rbf_
            self.prior_ = self._prior_for("rbf").fitted(
                None, lengthscale_=np.asarray(rbf.lengthscale_ * rbf.sd_, dtype=np.float64),
                outputscale_=getattr(rbf, "outputscale_", None),
                noise_=getattr(rbf, "noise_", None), constant_=getattr(rbf, "constant_", None),
                log_marginal_likelihood_=evidence)
        else:
            prior = self._prior_for("flgp")
            chosen = {"n_eigenpairs": int(self.n_eigenpairs_)} \
                if value("n_eigenpairs_") is not None else {}
            if value("bandwidth_") is not None:
                chosen["bandwidth"] = float(self.bandwidth_)
            settings = {"eigenbasis": clone(prior.basis).set_params(**chosen)}
            # one time for every class a setting; one a class (one-vs-rest), a fitted value
            times = value("diffusion_time_")
            if times is not None and np.ndim(times) == 0:
                settings["diffusion_time"], times = float(times), None
            self.prior_ = prior.fitted(
                settings, diffusion_time_=times, outputscale_=value("outputscale_"),
                noise_=value("noise_"),
                amplitude_=value("amplitude_"), constant_=constant,
                log_marginal_likelihood_=evidence)

    @property
    def _in_eigenbasis(self) -> bool:
        """Whether the chosen fit is the heat kernel's (its posterior in the eigenbasis)."""
        return getattr(self._chosen_fit, "eigenbasis", None) is not None

    # -- inputs -------------------------------------------------------------------------
    def _fit_inputs(self, X, y, X_unlabeled):
        """``(X, labelled rows, labelled values)`` with the cloud validated once: ``X``
        with ``X_unlabeled`` stacked below, numpy or dask."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             f"y is None.")
        if is_lazy(X) or is_lazy(y) or is_lazy(X_unlabeled):
            with stage("labels"):
                return self._lazy_inputs(X, y, X_unlabeled)
        # the shape once (validate_data), then the values once (NaN, and the graph's own
        # checks when the cloud is X alone)
        X = validate_data(self, X, dtype=np.float64, order="C", ensure_min_samples=2,
                          ensure_all_finite=False)
        other = self.REPRESENTATIONS.get(self._graph_method)
        graph = other is None or other.graph_checks
        X = check_cloud_values(X) if graph and X_unlabeled is None else check_points(X)
        y = self._target_array(y)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have one entry per row of X; got {y.shape[0]} targets "
                             f"for {X.shape[0]} rows.")
        labelled = self._is_labelled(y)
        self._check_labelled_values(y[labelled])
        if X_unlabeled is not None:
            Xu = check_points(X_unlabeled, name="X_unlabeled", min_samples=1)
            if Xu.shape[1] != X.shape[1]:
                raise ValueError(f"X_unlabeled has {Xu.shape[1]} features, X has "
                                 f"{X.shape[1]}.")
            fill = np.full(Xu.shape[0], self._unlabelled_fill,
                           dtype=y.dtype if y.dtype.kind in "iuf" else object)
            X = np.vstack([X, Xu])
            labelled = np.r_[labelled, np.zeros(Xu.shape[0], dtype=bool)]
            y = np.r_[y, fill]
            if graph:                           # the graph's own checks: spread, duplicates
                X = check_cloud_values(X, finite=False)
        given = self._prior_for("graph_matern").graph
        if given is not None:
            # check a given graph against its cloud before anything is fitted
            given.check_rows(X)
        idx = np.flatnonzero(labelled)
        return X, idx, y[idx]

    def _lazy_inputs(self, X, y, X_unlabeled):
        import dask.array as da

        from .._chunks.dask_blocks import DaskBlocks, as_dask_points, flatnonzero_blocks

        if self.method not in ("flgp", "auto"):
            raise ValueError(f"dask and zarr arrays work with the FLGP heat kernel only "
                             f"(HeatKernelPrior(), its method 'flgp'); got prior="
                             f"{self.prior!r}.")
        if not is_lazy(X):
            X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2,
                              ensure_all_finite=False)
            X = da.from_array(check_points(X))
        X = as_dask_points(X, min_samples=2)
        self.n_features_in_ = int(X.shape[1])
        if not is_lazy(y):
            y = self._target_array(y)
        else:
            self._check_lazy_targets(y)
        shape = tuple(y.shape)
        if len(shape) == 2 and shape[1] == 1:
            y = y[:, 0]
            shape = (shape[0],)
        if len(shape) != 1:
            raise ValueError(f"y must be 1-d (one target per row of X); got shape {shape}.")
        if shape[0] != X.shape[0]:
            raise ValueError(f"y must have one entry per row of X; got {shape[0]} targets "
                             f"for {X.shape[0]} rows.")
        if is_lazy(y):
            idx, values = flatnonzero_blocks(y, self._is_labelled)
        else:
            idx = np.flatnonzero(self._is_labelled(y))
            values = y[idx]
        values = self._check_labelled_values(np.asarray(values))
        if X_unlabeled is not None:
            Xu = as_dask_points(X_unlabeled if is_lazy(X_unlabeled)
                                else da.from_array(np.asarray(X_unlabeled, dtype=np.float64)),
                                name="X_unlabeled")
            if Xu.shape[1] != X.shape[1]:
                raise ValueError(f"X_unlabeled has {Xu.shape[1]} features, X has "
                                 f"{X.shape[1]}.")
            X = da.concatenate([X, Xu], axis=0)
        with stage("check"):
            DaskBlocks(X).check()                    # the one pass over the values
        return X, idx, values

    def _target_array(self, y):                # pragma: no cover - the subclasses'
        raise NotImplementedError

    def _check_lazy_targets(self, y) -> None:
        """A dask ``y`` before its labelled entries are read (dtype checks)."""

    def _check_labelled_values(self, values):
        return values

    def _predict_points(self, X):
        """``X`` at predict time: fitted, validated, the same number of features (a dask
        ``X``: its shape only)."""
        check_is_fitted(self, "n_features_in_")
        if is_lazy(X):
            from .._chunks.dask_blocks import as_dask_points

            X = as_dask_points(X)
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} "
                                 f"is expecting {self.n_features_in_} features as input.")
            if not self._chosen_fit.lazy_points:
                raise ValueError(f"method_={self.method_!r} predicts numpy arrays only (the "
                                 f"heat kernel's eigenbasis alone maps dask blocks); compute "
                                 f"X first.")
            return X
        X = validate_data(self, X, dtype=np.float64, reset=False, ensure_all_finite=False)
        return check_points(X, min_samples=1)


def target_vector(y, warn: bool = True) -> np.ndarray:
    """``y`` as a 1-d numpy array (a column vector is raveled with scikit-learn's
    warning)."""
    return column_or_1d(np.asarray(y), warn=warn)


# -- the prior objects' settings, read back (docs/models.md) ------------------------------
def _heat_setting(name: str) -> property:
    def get(self):
        return self._prior_for("flgp").setting(name)
    return property(get, doc=f"``{name}`` of the heat kernel's prior object or its "
                             f"eigenbasis (:class:`~flgp.models.priors.HeatKernelPrior`; "
                             f"read-only).")


for _name in HEAT_PARAMETERS:
    if _name != "method":
        setattr(GPEstimator, _name, _heat_setting(_name))
GPEstimator.graph = property(
    lambda self: self._prior_for("graph_matern").graph,
    doc="``graph`` of the graph Matérn prior object (read-only).")
GPEstimator.matern_order = property(
    lambda self: self._prior_for("graph_matern").nu,
    doc="``nu`` of the graph Matérn prior object (read-only).")
