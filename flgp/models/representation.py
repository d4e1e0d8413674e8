"""What the estimators ask of a representation of their prior (the heat kernel's included).

A *representation* is a module with one class per task that never sees the estimator: its
methods receive its prior object, the fit's :class:`FitOptions` and the validated data. A
:class:`RegressionRepresentation` says why it cannot serve a cloud and fits by the exact
evidence, giving a :class:`RegressionFit`; a :class:`ClassificationRepresentation` says
whether the classifier's rule takes it and fits, giving a :class:`ClassificationFit`.

Each estimator registers them in ``REPRESENTATIONS``, in the order ``"auto"`` weighs them:
``"graph_matern"`` (:mod:`flgp.models.graph_matern`), ``"rbf"``
(:mod:`flgp.models.baselines`), ``"flgp"`` (:mod:`flgp.models.heat_kernel`). A further
representation is a module with these classes, a :class:`~flgp.models.priors.Prior` whose
``method`` is its name and one registry entry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .._validation import power_of_two_unit

__all__ = ["RegressionRepresentation", "RegressionFit", "ClassificationRepresentation",
           "ClassificationFit", "Outranked", "Infeasible", "Standardisation",
           "Screened", "screening_margin", "SCREENING_MARGIN", "FitOptions",
           "WarmStartCache"]

# FLGPRegressor() stops a representation's search when its tightened coarse stage lies more
# than max(100, 0.1 m) nats (m labels) below the evidence of one already fitted, or its
# untightened one (unless loose) twice that: an empirical rule (docs/models.md, "Screening")
SCREENING_MARGIN = (100.0, 0.1)


def screening_margin(m: int) -> float:
    """The screening margin in nats for ``m`` labels (``SCREENING_MARGIN``)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
        raise ValueError(f"m must be a number of labels (an integer >= 0); got {m!r}.")
    floor, per_label = SCREENING_MARGIN
    return float(max(floor, per_label * int(m)))


@dataclass
class WarmStartCache:
    """What an estimator keeps across fits for ``warm_start``: the heat kernel's
    candidates, ``eigenpairs = (key, [(bandwidth scale, eigenpairs), ...])``
    (:func:`flgp.models.eigenbasis.candidate_eigenbases`), and the full-resolution
    classifier's ``graph_matern = (key, graph, {order: store})``; None where nothing is kept."""

    eigenpairs: object = None
    graph_matern: object = None


@dataclass(frozen=True)
class FitOptions:
    """What a representation's fit reads of the estimator besides its prior object, built
    once a fit: its parameters and :class:`WarmStartCache`; the regressor's ``likelihood``,
    ``noise`` (units of ``y²``) and ``overdispersion``; the classifier's inference options,
    ``class_prior`` (a mapping's shares in the order of the classes), the cloud's
    fingerprint (None for dask) and the rows ``suggest_labels`` gave on it. ``keep_graph``:
    the full-resolution fit keeps its graph and prior columns in ``cache`` for refits on
    other labels of the same cloud within one fit (the cross-validated choice)."""

    estimator: str
    method: str
    random_state: object
    max_iter: int
    verbose: object
    backend: str
    warm_start: bool
    cache: WarmStartCache
    induced_points_given: bool = False
    likelihood: str = "gaussian"
    noise: float | None = None
    overdispersion: float | None = None
    expectation_propagation: bool = True
    one_vs_rest: bool = False
    average_diffusion_time: bool = False
    calibration: str | None = None
    class_prior: object = None
    cloud_key: object = None
    suggested: object = ()
    keep_graph: bool = False


class Outranked(Exception):
    """Raised by a *bounded* representation's fit that can show its evidence cannot reach
    the best already fitted: ``ceiling`` (its highest possible log evidence of ``y``) and
    ``reason`` (a format string of ``ceiling``, reported in ``skipped_methods_``)."""

    def __init__(self, ceiling: float, reason: str):
        super().__init__(reason.format(ceiling=ceiling))
        self.ceiling = float(ceiling)


class Infeasible(ValueError):
    """Raised by a representation's fit when the cloud rules it out in a way
    :meth:`~RegressionRepresentation.infeasible` cannot see before fitting; ``"auto"`` then
    weighs the others, and a representation offered alone raises it."""


class Screened:
    """A representation's fit paused after the coarse first stage of its search:
    ``log_evidence`` (the best so far; the search ends at or above it), ``final`` (already
    the whole fit's), ``loose`` (too coarse to judge before :meth:`tighten`), and
    :meth:`finish`, the whole fit."""

    def __init__(self, log_evidence: float, finish, final: bool = False, tighten=None,
                 loose: bool = False):
        self.log_evidence = float(log_evidence)
        self._finish = finish
        self.final = bool(final)
        self._tighten = tighten
        self.loose = bool(loose)

    def tighten(self) -> float:
        """Raise ``log_evidence`` by the further evaluations the search offers (the
        screen's own ``tighten`` or the steps to its next screen), once; returns it."""
        if self._tighten is not None:
            self.log_evidence = max(self.log_evidence, float(self._tighten()))
            self._tighten = None
            self.loose = False
        return self.log_evidence

    @classmethod
    def whole(cls, fit) -> "Screened":
        """A fit made whole at once (a representation without a coarse stage)."""
        return cls(fit.log_evidence, lambda: fit, final=True)

    @classmethod
    def of_steps(cls, steps, to_y, build) -> "Screened":
        """From a generator ``steps`` that yields screens (a ``log_evidence`` that ``to_y``
        turns into units of ``y``, perhaps a ``tighten``) and returns the search's result,
        which ``build`` makes a :class:`RegressionFit`."""
        done = []

        def advance():
            """The next screen, or None at the search's end (its fit kept)."""
            try:
                return steps.send(None)
            except StopIteration as stop:
                done.append(build(stop.value))
                return None

        try:
            screen = next(steps)
        except StopIteration as stop:
            return cls.whole(build(stop.value))

        def finish():
            while not done:
                advance()
            return done[0]

        def tighten():
            if getattr(screen, "tighten", None) is not None:
                return to_y(screen.tighten())
            later = advance()
            return done[0].log_evidence if later is None else to_y(later.log_evidence)

        return cls(to_y(screen.log_evidence), finish, tighten=tighten,
                   loose=getattr(screen, "loose", False))

    def finish(self) -> "RegressionFit":
        """The whole fit (its search finished)."""
        return self._finish()


class Standardisation:
    """How the regressor standardised ``y``: ``z = (y / unit - mean / unit) / (scale / unit)``
    with ``unit`` an exact power of two (:func:`flgp._validation.power_of_two_unit`)."""

    def __init__(self, mean: float, scale: float, unit: float):
        self.mean, self.scale, self.unit = float(mean), float(scale), float(unit)
        if not (np.isfinite(self.mean) and np.isfinite(self.scale) and self.scale > 0
                and np.isfinite(self.unit) and self.unit > 0):
            raise ValueError(f"a standardisation needs a finite mean and a finite positive "
                             f"scale and unit; got mean={mean!r}, scale={scale!r}, "
                             f"unit={unit!r}.")

    @classmethod
    def of_targets(cls, y_lab) -> "Standardisation":
        """The regressor's standardisation of its labelled targets ``y_lab``: an exact
        power-of-two unit first (1 for ordinary data), then their mean and standard
        deviation (1 when they are all equal)."""
        y_lab = np.asarray(y_lab, dtype=np.float64)
        unit = power_of_two_unit(y_lab)
        y_pre = y_lab / unit
        mean, scale = float(y_pre.mean()) * unit, (float(y_pre.std()) or 1.0) * unit
        if not (np.isfinite(mean) and np.isfinite(scale)):
            raise ValueError(f"the labelled targets overflow float64 (largest |y| = "
                             f"{np.abs(y_lab).max():.3g}); rescale y before fitting.")
        return cls(mean, scale, unit)

    @property
    def scale_pre(self) -> float:
        """The standard deviation of ``y / unit``."""
        return self.scale / self.unit

    def standardise(self, y: np.ndarray) -> np.ndarray:
        """``z`` of the targets ``y``."""
        return (y / self.unit - self.mean / self.unit) / self.scale_pre

    def variance_pre(self, variance_z: float) -> float:
        """A variance of ``z`` in units of ``(y / unit)²``."""
        return variance_z * self.scale_pre ** 2

    def variance_of_z(self, variance_y: float) -> float:
        """A variance in units of ``y²`` in units of ``z²`` (a fixed noise)."""
        return variance_y / self.unit / self.unit / self.scale_pre ** 2

    def variance_of_y(self, variance_z: float) -> float:
        """A variance of ``z`` in units of ``y²``."""
        return self.variance_pre(variance_z) * self.unit * self.unit

    def log_evidence_of_y(self, log_evidence_z: float, m: int) -> float:
        """``log p(y)`` from ``log p(z)`` of ``m`` standardised targets (the Jacobian of
        ``y -> z``)."""
        return log_evidence_z - m * np.log(self.scale_pre) - m * np.log(self.unit)


class RegressionFit(ABC):
    """One representation's fit of the labelled targets.

    Attributes
    ----------
    method : str
        The registry name, the estimator's ``method_`` when this fit predicts.
    log_evidence : float
        ``log p(y)`` at the fitted hyperparameters, in the units of ``y``.
    lazy_points : bool
        Whether :meth:`predict` also takes a dask array of points (the heat kernel's
        eigenbasis maps dask blocks); False by default.
    """

    method: str
    log_evidence: float
    lazy_points: bool = False

    @abstractmethod
    def fitted_attributes(self, X, stacklevel: int) -> dict:
        """The fitted attributes for the estimator, ``{name: value}``: at least
        ``method_``, ``outputscale_``, ``noise_``, ``log_marginal_likelihood_``,
        ``n_iter_``, ``transduction_`` and ``transduction_std_`` of the cloud ``X``.
        ``stacklevel``: the caller's, as :func:`warnings.warn` takes it."""

    @abstractmethod
    def predict(self, X, stacklevel: int):
        """``(mean, std)`` of the latent at the points ``X`` (a validated numpy array, or a
        dask array where ``lazy_points``), in the units of ``y`` (``stacklevel`` as in
        :meth:`fitted_attributes`)."""

    @abstractmethod
    def interval_noise(self) -> tuple[float, float]:
        """``(unit, noise)``: the noise variance of a new observation in units of
        ``(y / unit)²``, for :meth:`FLGPRegressor.predict_interval`."""


class _Representation(ABC):
    """What both kinds share: the registry ``name`` (a ``method`` value), whether the cloud
    gets the graph's own input checks (:func:`flgp._validation.check_cloud_values`; False
    for a model of the labelled rows alone) and whether it fits a dask cloud."""

    name: str
    graph_checks: bool = True
    takes_dask: bool = False


class RegressionRepresentation(_Representation):
    """A representation of the regressor's prior.

    ``bounded`` representations can bound their evidence before their search: their
    :meth:`fit` takes ``bar`` (the best log evidence of ``y`` already fitted) and raises
    :class:`Outranked` when it cannot reach it; ``method="auto"`` fits them after the
    others (the heat kernel, :mod:`flgp.models.heat_kernel`)."""

    bounded: bool = False

    @abstractmethod
    def infeasible(self, prior, options: FitOptions, shape: tuple[int, int],
                   n_labelled: int) -> str | None:
        """Why ``method="auto"`` leaves this representation out for a cloud of ``shape``
        with ``n_labelled`` targets, or None."""

    def sole_reason(self, prior, options: FitOptions) -> str | None:
        """Why ``method="auto"`` must take this representation alone (the others' evidence
        would not be comparable), or None."""
        return None

    @abstractmethod
    def fit(self, prior, options: FitOptions, X, labelled: np.ndarray, y_lab: np.ndarray,
            z: np.ndarray, standardisation: Standardisation) -> RegressionFit:
        """Fit the targets ``y_lab`` at rows ``labelled`` of the validated cloud ``X``
        (``z``: the same standardised) by their evidence, under ``prior`` with
        ``options``."""

    def screen(self, prior, options: FitOptions, X, labelled: np.ndarray, y_lab: np.ndarray,
               z: np.ndarray, standardisation: Standardisation) -> Screened:
        """:meth:`fit` paused after the coarse first stage of its search, for
        ``method="auto"`` to compare before it pays for the rest (:class:`Screened`). By
        default the whole fit (no coarse stage)."""
        return Screened.whole(self.fit(prior, options, X, labelled, y_lab, z,
                                       standardisation))


class ClassificationFit(ABC):
    """One representation's fit of the labelled classes.

    Attributes
    ----------
    method : str
        The registry name, the estimator's ``method_``.
    lazy_points : bool
        Whether :meth:`predict_proba` also takes a dask array of points; False by default.
    """

    method: str
    lazy_points: bool = False

    @abstractmethod
    def fitted_attributes(self, X, stacklevel: int) -> dict:
        """The fitted attributes for the estimator, at least ``n_iter_``,
        ``log_marginal_likelihood_`` (or None), ``transduction_`` and
        ``label_distributions_`` of the cloud ``X`` (``stacklevel`` as for regression)."""

    @abstractmethod
    def predict_proba(self, X, stacklevel: int) -> np.ndarray:
        """Class probabilities ``(n, n_classes)``, in the order of the classes, at the
        points ``X`` (a validated numpy array, or a dask array where ``lazy_points``)."""


class ClassificationRepresentation(_Representation):
    """A representation of the classifier's prior. ``method="auto"`` asks the registry's
    entries in order, the ``fallback`` one (the heat kernel, which takes any labels) after
    the others."""

    fallback: bool = False

    @abstractmethod
    def chosen_by_auto(self, prior, options: FitOptions, X, counts: np.ndarray) -> bool:
        """Whether ``method="auto"`` takes this representation for a cloud ``X`` whose
        classes have ``counts`` labels each."""

    def declined_by_auto(self, prior, options: FitOptions, X, counts: np.ndarray) -> str:
        """Why ``method="auto"`` did not take this representation for ``X`` and ``counts``
        (what the classifier's ``skipped_methods_`` reports; asked only where
        :meth:`chosen_by_auto` is False)."""
        return f"the classifier's rule does not take {self.name!r} for these inputs"

    @abstractmethod
    def fit(self, prior, options: FitOptions, X, labelled: np.ndarray, codes: np.ndarray,
            classes: np.ndarray) -> ClassificationFit:
        """Fit the class codes ``codes`` (``0 .. C - 1`` into ``classes``, the ``C``
        classes) at rows ``labelled`` of the validated cloud ``X``, under ``prior`` with
        ``options``."""
