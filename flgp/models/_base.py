"""What :class:`~flgp.FLGPClassifier` and :class:`~flgp.FLGPRegressor` share.

:class:`HeatGPEstimator` is their common core:

* the parameters of the engine and their constraints (scikit-learn's
  ``_parameter_constraints``, checked once when ``fit`` starts, before any work);
* the inputs, validated once at the boundary - a numpy cloud by ``validate_data`` and
  :func:`flgp._validation.check_cloud_values` (one scan for NaN and infinity), a dask or zarr
  cloud by its shape and one pass over its chunks - with the labelled rows and values of
  ``y``, and ``X_unlabeled`` stacked below ``X``;
* one place that clears what a previous fit left (:meth:`HeatGPEstimator._clear_fit`);
* the candidate eigenpairs - one per value of the SE bandwidth grid - built by the graph
  and spectral cores on the already valid cloud, kept across fits with ``warm_start``;
* the loop that fits the GP part on each candidate and keeps the best by its evidence;
* the fitted engine's attributes, the connected pieces without labels and the
  far-point warning of predictions.

The subclasses supply the GP part: targets, the hyperparameter fit on one candidate, the
posterior and the predictions.
"""

from __future__ import annotations

import contextvars
import numbers
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, is_classifier
from sklearn.utils._param_validation import Hidden, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from .._chunks import is_lazy, stage
from .._fingerprint import array_fingerprint
from .._validation import check_cloud_values, check_points
from ..graph.cross_graph import KERNELS, SUBSAMPLES
from ..graph.neighbors import nearest_induced_points
from ..spectral.compute import default_n_eigenpairs, default_n_induced
from ..spectral.candidates import eigenpair_candidates
from ..spectral.dense import TooFewEigenvaluesError
from ..spectral.flgp import SPECTRA
from .priors import (HEAT_METHODS, HEAT_PARAMETERS, LEGACY_GRAPH_MATERN, GraphMaternPrior,
                     HeatKernelPrior, Prior, _same, fold_legacy_parameters, legacy_defaults,
                     resolve_priors)
from .search import single_threaded_blas

__all__ = ["HeatGPEstimator", "ESTIMATOR_METHODS", "DEFAULT_BANDWIDTH_GRID"]

# the heat kernel's methods; each estimator adds the names of its REPRESENTATIONS
ESTIMATOR_METHODS = HEAT_METHODS
DEFAULT_BANDWIDTH_GRID = tuple(np.logspace(-1, 1, 7))
# a new point farther than this many times the cloud's reach from every reference point
# is reported as an extrapolation
FAR_FACTOR = 3.0
_POSITIVE = Interval(numbers.Real, 0, None, closed="neither")


# the estimators' parameters before the prior objects (2026-11-28): still read as
# properties (from the prior objects), still accepted with a FutureWarning
LEGACY_PARAMETERS = ("method", *(p for p in HEAT_PARAMETERS if p != "method"),
                     *LEGACY_GRAPH_MATERN, "learning_rate")


@dataclass
class CandidateFit:
    """The GP part fitted on one candidate's eigenpairs: ``score`` (higher is better; the
    candidate with the highest is kept), ``t`` and ``log_evidence`` for the verbose line,
    and whatever the subclass needs to finish (``result``)."""

    score: float
    t: object
    log_evidence: float
    result: object


# eigenpair candidates shared by the fits of one cloud outside warm starts: the maps of
# flgp.predict_image, fitted one after another in a process (shared_candidates)
_SHARED_CANDIDATES = contextvars.ContextVar("flgp_shared_candidates", default=None)


@contextmanager
def shared_candidates(store: dict):
    """Within the block, the estimators' eigenpair candidates of a cloud are kept in
    ``store`` (the last cloud's, under ``"candidates"``) and taken from it by the next fit of
    the same cloud and graph settings - what ``warm_start`` does on one estimator, for
    several (the maps of :func:`flgp.predict_image`, one regressor each): the same
    eigenpairs, computed once."""
    token = _SHARED_CANDIDATES.set(store)
    try:
        yield
    finally:
        _SHARED_CANDIDATES.reset(token)


class HeatGPEstimator(BaseEstimator):
    """The shared core of the heat-kernel GP estimators (see the module notes)."""

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
        """The method whose graph a fit builds: ``method``, FLGP's for ``"auto"`` (which
        weighs FLGP's heat kernel against the RBF GP by their evidence)."""
        method = self.method
        return self._prior_of(HeatKernelPrior).method if method == "auto" else method

    # -- parameters -----------------------------------------------------------------------
    def _check_parameters(self) -> None:
        """What the constraints cannot say: each prior object's own settings (its
        constraints, finite numbers, a bandwidth grid of positive finite scales; a
        classifier's settings refused on a regressor)."""
        if getattr(self, "_init_error", None) is not None:
            raise self._init_error          # the old parameters could not be folded
        for prior in resolve_priors(self.prior):
            prior._check(type(self).__name__, for_classifier=is_classifier(self))
        for name in self._finite_parameters:
            value = getattr(self, name, None)
            if value is not None and not np.isfinite(value):
                raise ValueError(f"{name} must be finite; got {value!r}.")

    # numeric parameters of the estimator that must also be finite (Interval lets infinity
    # through); each prior object checks its own
    _finite_parameters: tuple = ()

    # -- the prior objects and the old parameters ---------------------------------------
    def _priors(self) -> list:
        """The prior objects this estimator weighs (:func:`resolve_priors`)."""
        return resolve_priors(self.prior)

    def _prior_of(self, kind):
        """The ``kind`` prior among :meth:`_priors`, else one at its defaults."""
        return next((p for p in self._priors() if isinstance(p, kind)), None) or kind()

    def _offers(self, method: str) -> bool:
        """Whether the representation ``method`` (``"flgp"`` for the heat kernel) is among
        the priors weighed (``prior=None``: every representation registered)."""
        if self.prior is None:
            return True
        return any(p.method == method or (method == "flgp" and isinstance(p, HeatKernelPrior))
                   for p in self._priors())

    @property
    def method(self) -> str:
        """The representation, in the words of the old ``method`` parameter: ``"auto"``
        when several priors are weighed, else the one prior's (``"flgp"`` / ``"glgp"`` /
        ``"nystrom"`` for the heat kernel, ``"gmrf"``, ``"rbf"``)."""
        priors = self._priors()
        return priors[0].method if len(priors) == 1 else "auto"

    def _fold_init(self, prior, legacy) -> None:
        """``self.prior`` from ``prior`` and the old parameters; a fold that fails is raised
        when ``fit`` starts (scikit-learn's constructors validate nothing)."""
        try:
            self.prior = fold_legacy_parameters(type(self).__name__, prior, legacy,
                                                stacklevel=4)
        except (TypeError, ValueError) as exc:
            self.prior = prior
            self._init_error = exc

    def _check_prior_for(self, X) -> None:
        """A dask cloud is fitted by the heat kernel alone: refuse priors without it."""
        if is_lazy(X) and not self._offers("flgp"):
            raise ValueError(f"a dask cloud is fitted by the heat kernel alone, and prior="
                             f"{self.prior!r} does not include HeatKernelPrior(); include "
                             f"it, or pass a numpy array.")

    def set_params(self, **params):
        """scikit-learn's ``set_params``; the old per-representation parameters (``method``,
        ``kernel``, ``graph``, ...) are folded into ``prior`` with a ``FutureWarning``."""
        legacy = {k: params.pop(k) for k in list(params) if k in LEGACY_PARAMETERS}
        if legacy or "prior" in params:
            self.__dict__.pop("_init_error", None)      # new settings: judged afresh
        if legacy:
            if "prior" in params:
                raise ValueError(f"{type(self).__name__}.set_params: pass either prior= or "
                                 f"the old parameters ({', '.join(sorted(legacy))}), not both.")
            current = {name: getattr(self, name) for name in LEGACY_PARAMETERS
                       if name != "learning_rate"}
            defaults = legacy_defaults()
            merged = {k: v for k, v in dict(current, **legacy).items()
                      if k in legacy or not _same(v, defaults[k])}
            self.prior = fold_legacy_parameters(type(self).__name__, None, merged,
                                                stacklevel=3)
        return super().set_params(**params)

    def __setstate__(self, state):
        # fitted before 2026-11-27, when a graph's components became its pieces
        state = {k.replace("component", "piece"): v for k, v in state.items()}
        if "prior" not in state:
            # pickled before 2026-11-28, when each representation's settings were the
            # estimator's own parameters
            legacy = {k: state.pop(k) for k in list(state) if k in LEGACY_PARAMETERS}
            defaults = legacy_defaults()
            legacy = {k: v for k, v in legacy.items() if not _same(v, defaults[k])}
            state["prior"] = fold_legacy_parameters(type(self).__name__, None, legacy,
                                                    warn=False)
        super().__setstate__(state)

    # -- fitted state ---------------------------------------------------------------------
    _CACHE = "_eigenpair_cache"

    # the representations of the prior by registry name (flgp.models.representation; each
    # estimator its own, the heat kernel's "flgp" among them), and the fit of the one
    # that predicts when it is not the eigenbasis, else None (the heat kernel's adopt
    # leaves the estimator predicting through its eigenbasis)
    REPRESENTATIONS: dict = {}
    _other_fit = None

    # private state a fit sets (the public fitted attributes end with "_")
    _FITTED_STATE = ("_predictor", "_mixture", "_prior", "_V_lab", "_piece_has_label",
                     "_other_fit", "_spectral_prior",
                     "_reach", "_y_mean", "_y_scale", "_y_unit", "_noise_std", "_noise_pre")

    def _clear_fit(self) -> None:
        """Forget everything a previous fit set (the public ``name_`` attributes and the
        private fitted state), keeping only the ``warm_start`` cache, so that a refit -
        after ``set_params(method=...)``, say - never shows stale attributes."""
        for name in list(vars(self)):
            if (name.endswith("_") and not name.startswith("_")) or name in self._FITTED_STATE:
                delattr(self, name)

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
        # the shape once (scikit-learn's validate_data), then the values once: the one scan
        # for NaN, with the graph's own checks (spread, duplicates) when the cloud is X alone
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
        if getattr(self, "graph", None) is not None:
            # a given graph against its cloud before anything is fitted (not after "auto"
            # has fitted the heat kernel: minutes on a whole brain)
            self.graph.check_rows(X)
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
            if self._other_fit is not None:
                raise ValueError(f"method_={self.method_!r} predicts numpy arrays only (the "
                                 f"heat kernel's eigenbasis alone maps dask blocks); compute "
                                 f"X first.")
            return X
        X = validate_data(self, X, dtype=np.float64, reset=False, ensure_all_finite=False)
        return check_points(X, min_samples=1)

    # -- the engine -----------------------------------------------------------------------
    def _engine_sizes(self, n: int) -> tuple[int, int]:
        if self.induced_points is not None and self._graph_method == "flgp":
            s = np.shape(self.induced_points)[0]
        else:
            s = default_n_induced(n) if self.n_induced is None else self.n_induced
        if self._graph_method == "glgp":
            M = default_n_eigenpairs(n) if self.n_eigenpairs is None else self.n_eigenpairs
        else:
            M = default_n_eigenpairs(s) if self.n_eigenpairs is None else self.n_eigenpairs
        return s, M

    def _bandwidth_grid(self) -> tuple:
        uses_se = self._graph_method in ("glgp", "nystrom") or self.kernel == "se"
        if not uses_se or self.bandwidth is not None:
            return (1.0,)
        if self.bandwidth_grid is None:
            return DEFAULT_BANDWIDTH_GRID
        return tuple(np.atleast_1d(np.asarray(self.bandwidth_grid, dtype=np.float64)).ravel())

    def _candidates(self, X):
        """Yield ``(bandwidth_scale, Eigenpairs)``: one candidate for LAE or a fixed
        bandwidth, one per grid value of ``a`` (``4 eps^2 = a mean d^2``) for the SE kernels
        otherwise (:func:`flgp.spectral.eigenpair_candidates`, from the validated cloud).
        Induced points and neighbour searches are computed once and reused across the
        grid. With ``warm_start``, the cached candidates of the previous fit when neither
        the cloud nor the graph settings changed (see ``warm_start`` in the estimators'
        docs).

        GLGP and Nyström build dense Gaussian kernels; at the wide end of the grid such a
        kernel can be numerically of low rank, with fewer than ``n_eigenpairs`` positive
        eigenvalues. That grid value is then skipped (the evidence could not be compared
        with fewer eigenpairs); only when every value fails is an error raised, the one of
        the value that came closest."""
        # warm start: this estimator's cache; else a store shared by several fits, if any
        store = None if self.warm_start else _SHARED_CANDIDATES.get()
        key = self._cache_key(X) if self.warm_start or store is not None else None
        cached = (getattr(self, self._CACHE, None) if store is None
                  else store.get("candidates"))
        if key is not None and cached is not None and cached[0] == key:
            yield from cached[1]
            return
        if hasattr(self, self._CACHE):
            delattr(self, self._CACHE)          # free the old eigenpairs before new ones
        s, M = self._engine_sizes(X.shape[0])
        if self._graph_method != "flgp" and self.induced_points is not None:
            raise ValueError(f"induced_points work with method='flgp' only; got "
                             f"method={self._graph_method!r}.")
        flgp_with_points = self._graph_method == "flgp" and self.induced_points is not None
        makers = eigenpair_candidates(
            X, self._graph_method, self._bandwidth_grid(),
            n_induced=None if flgp_with_points else s, n_eigenpairs=M,
            n_neighbors=self.n_neighbors, subsample=self.subsample, kernel=self.kernel,
            bandwidth=self.bandwidth, lae_regularization=self.lae_regularization,
            spectrum=self.spectrum, random_state=self.random_state, backend=self.backend,
            induced_points=self.induced_points,
            anchor=1.0 if self._graph_method in ("flgp", "nystrom") else None)
        best_failure = None
        found, yielded = [], 0              # found: kept only for the warm-start cache
        with warnings.catch_warnings():
            # the estimator warns only about pieces that hold no label
            # (_label_pieces): a piece with labels is predicted from them
            warnings.filterwarnings("ignore", message=".*pieces \\(connected components\\).*")
            for a, make in makers:
                try:
                    eigenpairs = make()
                except TooFewEigenvaluesError as err:
                    # keep the message, not the traceback: its frames hold the dense graph
                    if best_failure is None or err.n_positive > best_failure.n_positive:
                        best_failure = err.with_traceback(None)
                    continue
                yielded += 1
                if key is not None:
                    found.append((a, eigenpairs))
                yield a, eigenpairs
        if yielded == 0 and best_failure is not None:
            raise best_failure
        if key is not None and store is None:
            setattr(self, self._CACHE, (key, found))
        elif key is not None:
            store["candidates"] = (key, found)

    # the parameters that change the graph or its eigenpairs (never the labels')
    GRAPH_PARAMETERS = ("method", "kernel", "subsample", "n_induced", "n_neighbors",
                        "n_eigenpairs", "bandwidth", "bandwidth_grid", "lae_regularization",
                        "spectrum", "random_state", "backend", "induced_points")

    def _cache_key(self, X) -> tuple | None:
        """The warm-start key of the cloud ``X`` and the graph settings: the cloud's shape,
        dtype and two checksums of its bytes (CRC-32 and Adler-32 - about 25 ms for
        70,000 x 100 floats; both agreeing on a different cloud is a 1-in-2^64 event);
        None for a dask cloud (not fingerprinted)."""
        if not isinstance(X, np.ndarray):
            return None
        return (array_fingerprint(X),) + self._settings_key()

    def _settings_key(self) -> tuple:
        """The graph settings' part of :meth:`_cache_key`."""
        return tuple((name, _value_key(getattr(self, name, None)))
                     for name in self.GRAPH_PARAMETERS)

    def _fit_candidates(self, candidates, labelled, targets, fit_gp=None, skip=None):
        """Fit the GP part on every candidate of :meth:`_candidates` (``fit_gp(eigenpairs,
        V_lab, targets)``, default :meth:`_fit_gp`) and keep the one with the highest
        score: ``(bandwidth scale, eigenpairs, eigenvector rows of the labelled points,
        CandidateFit)``. ``skip(eigenpairs, V_lab, targets)``: True leaves a candidate
        unfitted (None when every one is)."""
        fit_gp = self._fit_gp if fit_gp is None else fit_gp
        best = None
        name = type(self).__name__
        for a, eigenpairs in candidates:
            with stage("labelled rows"):
                V_lab = eigenpairs.eigenvector_rows(labelled)
            if skip is not None and skip(eigenpairs, V_lab, targets):
                continue
            with stage("hyperparameters"), single_threaded_blas():
                fit = fit_gp(eigenpairs, V_lab, targets)
            if self.verbose:
                t_txt = ", ".join(f"{v:.4g}" for v in np.atleast_1d(fit.t))
                print(f"[{name}] bandwidth scale {a:.3g}: t={t_txt} "
                      f"log evidence={fit.log_evidence:.4f}")
            if best is None or fit.score > best[3].score:
                best = (a, eigenpairs, V_lab, fit)
        return best

    def _fit_gp(self, eigenpairs, V_lab, targets) -> CandidateFit:  # pragma: no cover
        raise NotImplementedError

    def _set_engine(self, a, eigenpairs, labelled, stacklevel: int = 5) -> None:
        """The fitted engine's attributes: ``eigenpairs_``, ``eigenvalues_``,
        ``bandwidth_scale_``, ``bandwidth_``, ``labelled_indices_``, the pieces that
        hold a label and the cloud's reach (for the far-point warning). ``stacklevel``: the
        warning about pieces without a label, counted from the warning's own frame (5:
        called from ``fit``, which its scikit-learn wrapper calls)."""
        self.eigenpairs_ = eigenpairs
        self.eigenvalues_ = eigenpairs.eigenvalues
        self.bandwidth_scale_ = a
        self.bandwidth_ = getattr(getattr(eigenpairs.extension, "graph", None), "bandwidth",
                                  None)
        self.labelled_indices_ = np.asarray(labelled, dtype=np.int64)
        self._piece_has_label = _label_pieces(eigenpairs, labelled, stacklevel=stacklevel)
        self._reach = cloud_reach(eigenpairs)

    def _warn_far_points(self, X, nearest_sq=None, stacklevel: int = 4) -> None:
        """Warn when new points lie farther than ``FAR_FACTOR`` times the cloud's reach
        from its reference points: the heat kernel is estimated on the cloud, and such a
        point only inherits the values of the nearest part of it (its uncertainty does not
        grow with the distance). ``nearest_sq``: the squared distances to the nearest
        reference point when the out-of-sample map has already found them."""
        reach = getattr(self, "_reach", None)
        if reach is None or X.shape[0] == 0:
            return
        points, reach_sq = reach
        if nearest_sq is None:
            nearest_sq = nearest_induced_points(X, points, 1)[1][:, 0]
        far = nearest_sq > FAR_FACTOR ** 2 * max(reach_sq, np.finfo(float).tiny)
        if far.any():
            warnings.warn(f"{int(far.sum())} of {X.shape[0]} new point(s) lie far outside the "
                          f"fitted cloud: up to {np.sqrt(nearest_sq[far].max()):.3g} from its "
                          f"nearest reference point, where no point of the cloud is farther "
                          f"than {np.sqrt(reach_sq):.3g}. The heat kernel carries the values "
                          f"of the nearest part of the cloud out to them, so their "
                          f"predictions are extrapolations (their uncertainty does not grow "
                          f"with the distance).", UserWarning, stacklevel=stacklevel)


def cloud_reach(eigenpairs):
    """``(reference points, reach^2)`` of a fitted cloud: the induced points (FLGP,
    Nyström) or the cloud itself (GLGP), and the squared reach - the largest distance from
    a point of the cloud to its nearest reference point (other than itself), and at least
    the largest distance from a reference point to its nearest other one (so that induced
    points that nearly coincide with the cloud still leave room between them). None when
    the eigenpairs carry no graph to read them from."""
    graph = getattr(eigenpairs.extension, "graph", None)
    if graph is None:
        return None
    induced = getattr(graph, "induced", None)
    points = induced.points if induced is not None else getattr(graph, "points", None)
    if points is None or points.shape[0] < 2:
        return None
    _, own = nearest_induced_points(points, points, 2)      # nearest other reference point
    reach_sq = float(own[:, 1].max())
    near = getattr(graph, "nearest_sq_max", None)       # FLGP, Nyström: found while building
    if induced is not None and near is not None:
        reach_sq = max(reach_sq, float(near))
    return points, reach_sq


def _label_pieces(eigenpairs, labelled: np.ndarray, stacklevel: int = 3):
    """Which connected pieces hold a labelled point (``(n_pieces,)`` bool; None
    when pieces are not tracked), warning with the number of points in the others -
    counted from the pieces' sizes, without an ``n``-sized mask."""
    comp = eigenpairs.piece_rows(labelled)
    sizes = getattr(eigenpairs, "piece_sizes", None)
    if comp is None or sizes is None:
        return None
    has_label = np.zeros(max(eigenpairs.n_pieces, int(comp.max()) + 1), dtype=bool)
    has_label[comp] = True
    sizes = np.asarray(sizes)
    empty = ~has_label[:sizes.size] & (sizes > 0)
    if empty.any():
        warnings.warn(f"{int(sizes[empty].sum())} point(s) lie in {int(empty.sum())} "
                      f"piece(s) of the graph (connected parts) that hold no labelled point; "
                      f"they get the prior prediction. Label a point there, or connect the "
                      f"graph (larger n_neighbors or bandwidth).", UserWarning,
                      stacklevel=stacklevel)
    return has_label


def _value_key(value):
    if value is None or isinstance(value, (bool, int, float, str, np.integer, np.floating)):
        return value
    if isinstance(value, (np.random.RandomState, np.random.Generator)):
        return ("rng", id(value))            # the same generator object, nothing more
    try:
        return ("array", array_fingerprint(np.asarray(value)))
    except (TypeError, ValueError):
        return ("object", id(value))


def target_vector(y, warn: bool = True) -> np.ndarray:
    """``y`` as a 1-d numpy array (a column vector is raveled with scikit-learn's
    warning)."""
    return column_or_1d(np.asarray(y), warn=warn)


# -- the old parameters, read from the prior objects --------------------------------------
def _heat_setting(name: str) -> property:
    def get(self):
        return getattr(self._prior_of(HeatKernelPrior), name)
    return property(get, doc=f"``{name}`` of the heat kernel's prior object "
                             f"(:class:`~flgp.models.priors.HeatKernelPrior`; read-only).")


for _name in HEAT_PARAMETERS:
    if _name != "method":
        setattr(HeatGPEstimator, _name, _heat_setting(_name))
HeatGPEstimator.graph = property(
    lambda self: self._prior_of(GraphMaternPrior).graph,
    doc="``graph`` of the graph Matérn prior object (read-only).")
HeatGPEstimator.matern_order = property(
    lambda self: self._prior_of(GraphMaternPrior).nu,
    doc="``nu`` of the graph Matérn prior object (read-only).")
HeatGPEstimator.learning_rate = "deprecated"
