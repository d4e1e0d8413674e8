"""The interface between the estimators and a representation of their prior.

A *representation* is a module with one class per task; its methods receive the prior
object, the fit's :class:`FitOptions` and the validated data, never the estimator. A
:class:`RegressionRepresentation` fits by the exact evidence (:class:`RegressionFit`); a
:class:`ClassificationRepresentation` says whether the classifier's rule takes it and fits
(:class:`ClassificationFit`).

Each estimator lists them in ``REPRESENTATIONS`` in the order ``"auto"`` weighs them:
``"graph_matern"`` (:mod:`flgp.models.graph_matern`), ``"rbf"`` (:mod:`flgp.models.baselines`),
``"flgp"`` (:mod:`flgp.models.heat_kernel`). A new representation needs these classes, a
:class:`~flgp.models.priors.Prior` whose ``method`` is its name, and a registry entry.
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

# "auto" drops a representation whose tightened coarse stage lies more than max(100, 0.1 m)
# nats (m labels) below one already fitted, or its untightened one twice that; empirical
# (docs/models.md, "Screening")
SCREENING_MARGIN = (100.0, 0.1)


def screening_margin(m: int) -> float:
    """The screening margin in nats for ``m`` labels (``SCREENING_MARGIN``)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
        raise ValueError(f"m must be a number of labels (an integer >= 0); got {m!r}.")
    floor, per_label = SCREENING_MARGIN
    return float(max(floor, per_label * int(m)))


@dataclass
class WarmStartCache:
    """What an estimator keeps across fits for ``warm_start`` (None: nothing kept):
    ``eigenpairs = (key, [(bandwidth scale, eigenpairs), ...])``
    (:func:`flgp.models.eigenbasis.candidate_eigenbases`) and the full-resolution
    classifier's ``graph_matern = (key, graph, {order: store})``."""

    eigenpairs: object = None
    graph_matern: object = None


@dataclass(frozen=True)
class FitOptions:
    """The estimator's settings a representation's fit reads, built once a fit. ``noise``
    is in units of ``y²``; ``class_prior`` holds shares in the order of the classes;
    ``cloud_key`` is the cloud's fingerprint (None for dask); ``suggested`` the rows
    ``suggest_labels`` gave; ``keep_graph``: keep the graph and prior columns in ``cache``
    for refits on other labels of the same cloud (the cross-validated choice)."""

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
    """A *bounded* fit whose log evidence of ``y`` cannot exceed ``ceiling``, below the best
    already fitted; ``reason`` (a format string of ``ceiling``) goes to ``skipped_methods_``."""

    def __init__(self, ceiling: float, reason: str):
        super().__init__(reason.format(ceiling=ceiling))
        self.ceiling = float(ceiling)


class Infeasible(ValueError):
    """The cloud rules the representation out in a way :meth:`~RegressionRepresentation
    .infeasible` cannot see before fitting; ``"auto"`` weighs the others."""


class Screened:
    """A fit paused after the coarse first stage of its search: ``log_evidence`` (a lower
    bound on the final one), ``final`` (already the whole fit's), ``loose`` (too coarse to
    judge before :meth:`tighten`); :meth:`finish` completes it."""

    def __init__(self, log_evidence: float, finish, final: bool = False, tighten=None,
                 loose: bool = False):
        self.log_evidence = float(log_evidence)
        self._finish = finish
        self.final = bool(final)
        self._tighten = tighten
        self.loose = bool(loose)

    def tighten(self) -> float:
        """Raise ``log_evidence`` once by the search's next evaluations; returns it."""
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
        """From a generator ``steps`` yielding screens (``log_evidence``, which ``to_y``
        puts in units of ``y``; optional ``tighten``) and returning the result that
        ``build`` makes a :class:`RegressionFit`."""
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
        """A power-of-two unit (1 for ordinary data), then the mean and standard deviation
        (1 when all equal) of ``y_lab``."""
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
        """``log p(y)`` from ``log p(z)`` of ``m`` targets (the Jacobian of ``y -> z``)."""
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
        """``{name: value}`` of at least ``method_``, ``outputscale_``, ``noise_``,
        ``log_marginal_likelihood_``, ``n_iter_``, ``transduction_`` and
        ``transduction_std_`` on the cloud ``X`` (``stacklevel`` for warnings)."""

    @abstractmethod
    def predict(self, X, stacklevel: int):
        """``(mean, std)`` of the latent at ``X`` (validated numpy, or dask where
        ``lazy_points``), in the units of ``y``."""

    @abstractmethod
    def interval_noise(self) -> tuple[float, float]:
        """``(unit, noise)``: a new observation's noise variance in units of ``(y / unit)²``."""


class _Representation(ABC):
    """The registry ``name``; ``graph_checks``: the cloud gets
    :func:`flgp._validation.check_cloud_values` (False for models of the labelled rows
    alone); ``takes_dask``: it fits a dask cloud."""

    name: str
    graph_checks: bool = True
    takes_dask: bool = False


class RegressionRepresentation(_Representation):
    """A representation of the regressor's prior. A ``bounded`` one's :meth:`fit` takes
    ``bar`` (the best log evidence of ``y`` so far) and raises :class:`Outranked` when it
    cannot reach it; ``"auto"`` fits bounded ones last."""

    bounded: bool = False

    @abstractmethod
    def infeasible(self, prior, options: FitOptions, shape: tuple[int, int],
                   n_labelled: int) -> str | None:
        """Why ``"auto"`` leaves this out for a cloud of ``shape``, or None."""

    def sole_reason(self, prior, options: FitOptions) -> str | None:
        """Why ``"auto"`` must take this alone (evidence not comparable), or None."""
        return None

    @abstractmethod
    def fit(self, prior, options: FitOptions, X, labelled: np.ndarray, y_lab: np.ndarray,
            z: np.ndarray, standardisation: Standardisation) -> RegressionFit:
        """Fit ``y_lab`` (standardised: ``z``) at rows ``labelled`` of ``X`` by evidence."""

    def screen(self, prior, options: FitOptions, X, labelled: np.ndarray, y_lab: np.ndarray,
               z: np.ndarray, standardisation: Standardisation) -> Screened:
        """:meth:`fit` paused after its coarse stage for ``"auto"`` to compare
        (:class:`Screened`); by default the whole fit."""
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
        """At least ``n_iter_``, ``log_marginal_likelihood_`` (or None), ``transduction_``
        and ``label_distributions_`` on the cloud ``X``."""

    @abstractmethod
    def predict_proba(self, X, stacklevel: int) -> np.ndarray:
        """``(n, n_classes)`` probabilities at ``X`` (numpy, or dask where ``lazy_points``)."""


class ClassificationRepresentation(_Representation):
    """A representation of the classifier's prior; ``"auto"`` asks the ``fallback`` one
    (the heat kernel, which takes any labels) last."""

    fallback: bool = False

    @abstractmethod
    def chosen_by_auto(self, prior, options: FitOptions, X, counts: np.ndarray) -> bool:
        """Whether ``"auto"`` takes this for ``X`` with ``counts`` labels per class."""

    def declined_by_auto(self, prior, options: FitOptions, X, counts: np.ndarray) -> str:
        """Why ``"auto"`` did not take this (for ``skipped_methods_``; asked only where
        :meth:`chosen_by_auto` is False)."""
        return f"the classifier's rule does not take {self.name!r} for these inputs"

    @abstractmethod
    def fit(self, prior, options: FitOptions, X, labelled: np.ndarray, codes: np.ndarray,
            classes: np.ndarray) -> ClassificationFit:
        """Fit ``codes`` (``0 .. C - 1`` into ``classes``) at rows ``labelled`` of ``X``."""
