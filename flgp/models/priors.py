"""The estimators' priors as objects holding their own settings (as scikit-learn's
``GaussianProcessRegressor(kernel=RBF())`` holds its kernel): :class:`HeatKernelPrior` (the
FLGP paper's low-rank heat kernel, on an :class:`Eigenbasis`), :class:`GraphMaternPrior`
(full resolution, a sparse precision on the cloud's graph) and :class:`RBFPrior` (the
Euclidean GP of the labelled points). The estimators take one, a list, or ``None`` (all
three at their defaults).

A fitted estimator's ``prior_`` is a copy of the prior it chose, with the fit's choices as
settings and fitted values as ``_``-suffixed attributes in the user's units (``kappa_``,
``lengthscale_``, ``outputscale_``, ``noise_``, ``constant_``, ...). Its
:meth:`gpytorch_kernel` is then the kernel at those values (float64, in a ``ScaleKernel`` at
``outputscale_``): with a ``ConstantMean`` at ``constant_`` and a ``GaussianLikelihood`` at
``noise_``, GPyTorch's exact marginal likelihood of the labelled targets is the regressor's
``log_marginal_likelihood_``.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import Interval, StrOptions

from ..graph import PointGraph
from ..graph.cross_graph import KERNELS, SUBSAMPLES
from ..graph.knn import self_tuning_knn_graph
from ..kernels import GraphMaternKernel, HeatKernelFLGP, HeatKernelGLGP, HeatKernelNystrom
from ..spectral.families import FAMILIES
from ..spectral.flgp import SPECTRA

__all__ = ["Prior", "Eigenbasis", "HeatKernelPrior", "GraphMaternPrior", "RBFPrior",
           "resolve_priors", "priors_for", "with_graph"]

_POSITIVE = Interval(numbers.Real, 0, None, closed="neither")
HEAT_METHODS = ("flgp", "glgp", "nystrom")


class Prior(BaseEstimator):
    """Base of the prior objects: scikit-learn's parameter handling and validation. A further
    representation subclasses it, ``method`` naming its entry in the estimators'
    ``REPRESENTATIONS``."""

    #: the estimators' name of this representation (their ``method_``)
    method = None
    #: the settings only a classifier uses (given to a regressor, an error)
    _classification_only: tuple = ()
    #: scikit-learn's constraints on the settings (none: a prior without settings)
    _parameter_constraints: dict = {}

    def _check(self, estimator_name: str, for_classifier: bool) -> None:
        """Validate the settings; refuse classification-only settings on a regressor."""
        self._validate_params()
        _check_finite(self)
        if not for_classifier:
            defaults = type(self)().get_params()
            given = [name for name in self._classification_only
                     if not _same(getattr(self, name), defaults[name])]
            if given:
                raise ValueError(f"{type(self).__name__}({', '.join(given)}=...) sets the "
                                 f"classifier's prior only; {estimator_name} does not use "
                                 f"{'it' if len(given) == 1 else 'them'}. Leave "
                                 f"{'it' if len(given) == 1 else 'them'} out.")

    #: numeric settings that must also be finite
    _finite: tuple = ()

    def fitted(self, settings=None, **values):
        """A copy with ``settings`` set (what the fit chose among them) and ``values``
        (those not None) as fitted attributes: an estimator's ``prior_``."""
        prior = clone(self)
        if settings:
            prior.set_params(**settings)
        for name, value in values.items():
            if value is not None:
                setattr(prior, name, value)
        return prior

    def _at_outputscale(self, kernel):
        """A fitted prior's ``kernel`` in float64, in a ``ScaleKernel`` at ``outputscale_`` if
        it has one; an unfitted prior's as it is."""
        if not any(name.endswith("_") and not name.startswith("_") for name in vars(self)):
            return kernel
        kernel = kernel.double()
        if not hasattr(self, "outputscale_"):
            return kernel
        import gpytorch

        scaled = gpytorch.kernels.ScaleKernel(kernel).double()
        scaled.outputscale = float(self.outputscale_)
        return scaled


def _check_finite(settings) -> None:
    """Refuse an infinite value of the numeric settings ``settings._finite``."""
    for name in settings._finite:
        value = getattr(settings, name)
        if value is not None and not np.isfinite(value):
            raise ValueError(f"{type(settings).__name__}: {name} must be finite; got "
                             f"{value!r}.")


def _same(a, b) -> bool:
    try:
        return bool(np.all(a == b)) if a is not None and b is not None else a is b
    except Exception:                                   # pragma: no cover - exotic values
        return a is b


class Eigenbasis(BaseEstimator):
    """The eigenbasis :class:`HeatKernelPrior` lives in: FLGP's (or GLGP's, Nyström's)
    eigenpairs of an induced-point graph of the cloud (He, Ma, Kang, Yang, Algorithm 1;
    :func:`flgp.spectral.compute_eigenpairs`).

    Parameters
    ----------
    method : {"flgp", "glgp", "nystrom"}, default="flgp"
        FLGP's eigenpairs (induced points, ``n_neighbors`` nearest of them a point), GLGP's
        (the dense graph of every point: small clouds only) or Nyström-GLGP's.
    kernel : {"lae", "se"}, default="lae"
        FLGP cross kernel (LKFLGP/LRFLGP vs SKFLGP/SRFLGP).
    subsample : {"kmeans", "random"}, default="kmeans"
        How the induced points are chosen (and the matching normalisation).
    n_induced : int, optional
        ``s``; default ``min(n, max(10, min(1000, n // 4)))``.
    n_neighbors : int, default=3
        ``r``, induced points kept per point.
    n_eigenpairs : int, optional
        ``M``. Default ``min(100, s - 1)``; for regression with Gaussian noise, by evidence
        among the leading ``M/8, M/4, M/2, M`` of ``M = min(400, s - 1)`` (the regressor's
        ``n_eigenpairs_``).
    bandwidth : float, optional
        SE ``eps``; default: by marginal likelihood over ``bandwidth_grid``.
    bandwidth_grid : sequence of float, optional
        Multipliers ``a`` in ``4 eps^2 = a mean d^2``; default 7 values log-spaced on
        [0.1, 10].
    lae_regularization : float, default=1e-3
        LLE-style regularisation of the LAE weights (0: the paper's exact LAE;
        :func:`flgp.graph.build_cross_graph`).
    spectrum : {"one_step", "two_step"}, default="one_step"
        FLGP's eigenvalue rule ``λ = 1 - σ`` or ``1 - σ^2`` (:mod:`flgp.spectral.flgp`).
    induced_points : array-like of shape (n_induced, n_features), optional
        FLGP's induced points, instead of choosing them (``subsample`` then picks only the
        normalisation); they make an in-memory and a Dask fit agree.
    """

    _finite = ("bandwidth", "lae_regularization")
    _parameter_constraints: dict = {
        "method": [StrOptions(set(HEAT_METHODS))],
        "kernel": [StrOptions(set(KERNELS))],
        "subsample": [StrOptions(set(SUBSAMPLES))],
        "n_induced": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_eigenpairs": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "bandwidth": [_POSITIVE, None],
        "bandwidth_grid": ["array-like", _POSITIVE, None],
        "lae_regularization": [Interval(numbers.Real, 0, None, closed="left")],
        "spectrum": [StrOptions(set(SPECTRA))],
        "induced_points": ["array-like", None],
    }

    def __init__(self, method="flgp", *, kernel="lae", subsample="kmeans", n_induced=None,
                 n_neighbors=3, n_eigenpairs=None, bandwidth=None, bandwidth_grid=None,
                 lae_regularization=1e-3, spectrum="one_step", induced_points=None):
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
        self.induced_points = induced_points

    def _check(self) -> None:
        self._validate_params()
        _check_finite(self)
        if self.bandwidth_grid is not None:
            grid = np.asarray(self.bandwidth_grid, dtype=np.float64).ravel()
            if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
                raise ValueError(f"bandwidth_grid must hold at least one finite positive "
                                 f"bandwidth scale a (4 eps^2 = a mean d^2); got "
                                 f"{self.bandwidth_grid!r}.")


class HeatKernelPrior(Prior):
    """The low-rank heat kernel on the cloud's eigenbasis (FLGP's, GLGP's or Nyström's).

    ``K = V diag(A e^{-tλ}) Vᵀ`` over the top eigenpairs of an induced-point graph of the
    cloud (He, Ma, Kang, Yang, Algorithm 1); ``t`` (and ``A``) by the evidence.

    Parameters
    ----------
    eigenbasis : Eigenbasis, optional
        How the eigenpairs are computed (:class:`Eigenbasis`). Default ``Eigenbasis()``:
        FLGP's.
    diffusion_time : float, optional
        Fix ``t`` instead of fitting it.
    diffusion_time_prior_power : float, default=1.0
        ``a0`` of a further factor ``π(t) ∝ t^{-a0}`` (the power-law part of He et al.'s
        prior, eq. 3); ``1`` leaves the prior as it is, ``a0 > 1`` pulls ``t`` down by
        ``a0 - 1`` nats per e-fold.

    The classifier's settings (a regressor refuses them set to anything but their
    defaults; docs/few_labels.md):

    diffusion_time_prior : {"spectral", "flat"}, default="spectral"
        The prior on ``t`` (MAP in ``log t``). ``"spectral"``: ``log t ~ N(log t_C, 2²)``,
        ``t_C = 2 / max(λ_{C+1}, λ_2)`` for ``C`` classes, the smoothest prior in which each
        class keeps a non-constant mode of its own
        (:func:`flgp.spectral.families.spectral_time_prior`); it decides where one label
        per class leaves the evidence flat. ``"flat"``: flat in ``log t`` (the paper's
        empirical Bayes).
    average_diffusion_time : bool or None, default=None
        True: average the class probabilities over the search grid's diffusion times,
        weighted by their posterior (the smallest set holding 99% of it). False: the MAP
        ``t`` alone. None: False with EP, True with Laplace. Not used for one-vs-rest or a
        fixed ``diffusion_time``.
    spectral_family : {"heat", "matern", "green", "auto"}, default="heat"
        The weights ``w(λ)`` (:func:`flgp.spectral.families.family_log_weights`):
        ``e^{-tλ}``, the graph Matérn ``(1 + tλ/ν)^{-ν}`` or the Laplacian's pseudo-inverse
        ``λ_2/λ`` (Poisson learning's Green's function). ``"auto"``: the one of highest
        evidence among these, Matérn with ``ν = 1, 2``.
    matern_nu : float, default=2.0
        ``ν`` of ``spectral_family="matern"``.
    constant_variance : float or None, default=None
        The constant eigenvector's prior variance relative to the family's weight there
        (with several connected pieces, of their indicators' constant combination). ``0``,
        Poisson learning's centring, keeps the classifier from collapsing with one label per
        class (docs/models.md, "The fewest labels"); ``1`` is the paper's heat kernel; None:
        the one of higher evidence. At most ``1e6``.
    amplitude : float or None, default=1.0
        ``A`` of ``f ~ GP(0, A C_t)`` (EP only; probit noise variance 1). 1: the paper's.
        None: the value of ``(1, 10, 100, 1000)`` of highest EP marginal likelihood.
    """

    _classification_only = ("diffusion_time_prior", "average_diffusion_time",
                            "spectral_family", "matern_nu", "constant_variance",
                            "amplitude")
    _finite = ("diffusion_time", "diffusion_time_prior_power", "amplitude", "matern_nu",
               "constant_variance")
    _parameter_constraints: dict = {
        "eigenbasis": [Eigenbasis, None],
        "diffusion_time": [_POSITIVE, None],
        "diffusion_time_prior_power": [Interval(numbers.Real, None, None, closed="neither")],
        "diffusion_time_prior": [StrOptions({"spectral", "flat"})],
        "average_diffusion_time": ["boolean", None],
        "spectral_family": [StrOptions(set(FAMILIES) | {"auto"})],
        "matern_nu": [_POSITIVE],
        # above 1e6 the constant mode swamps float64's resolution of the others
        "constant_variance": [Interval(numbers.Real, 0, 1e6, closed="both"), None],
        "amplitude": [_POSITIVE, None],
    }

    def __init__(self, eigenbasis=None, *, diffusion_time=None,
                 diffusion_time_prior_power=1.0, diffusion_time_prior="spectral",
                 average_diffusion_time=None, spectral_family="heat", matern_nu=2.0,
                 constant_variance=None, amplitude=1.0):
        self.eigenbasis = eigenbasis
        self.diffusion_time = diffusion_time
        self.diffusion_time_prior_power = diffusion_time_prior_power
        self.diffusion_time_prior = diffusion_time_prior
        self.average_diffusion_time = average_diffusion_time
        self.spectral_family = spectral_family
        self.matern_nu = matern_nu
        self.constant_variance = constant_variance
        self.amplitude = amplitude

    @property
    def basis(self) -> Eigenbasis:
        """``eigenbasis``, or ``Eigenbasis()`` where it is None."""
        return Eigenbasis() if self.eigenbasis is None else self.eigenbasis

    @property
    def method(self) -> str:
        """The eigenbasis's method, the estimators' name of this representation."""
        return self.basis.method

    def setting(self, name: str):
        """The setting ``name``, of this prior or of its eigenbasis."""
        return getattr(self.basis if name in EIGENBASIS_PARAMETERS else self, name)

    def _check(self, estimator_name: str, for_classifier: bool) -> None:
        super()._check(estimator_name, for_classifier)
        self.basis._check()

    def gpytorch_kernel(self, X, *, random_state=0, backend="auto", **kwargs):
        """The GPyTorch kernel of this prior on the cloud ``X`` (every point, labelled or
        not): :class:`flgp.kernels.HeatKernelFLGP` (or ``HeatKernelGLGP`` /
        ``HeatKernelNystrom``); ``kwargs`` (``diffusion_time``, ``batch_shape``, ...) go to
        the kernel. A fitted ``prior_``'s is in a ``ScaleKernel`` at its ``outputscale_``."""
        self._check("gpytorch_kernel", for_classifier=True)
        if self.diffusion_time is not None:
            kwargs.setdefault("diffusion_time", self.diffusion_time)
        b = self.basis
        common = dict(n_induced=b.n_induced, n_eigenpairs=b.n_eigenpairs,
                      bandwidth=b.bandwidth, random_state=random_state)
        if b.method == "flgp":
            kernel = HeatKernelFLGP(X, n_neighbors=b.n_neighbors, subsample=b.subsample,
                                    kernel=b.kernel, lae_regularization=b.lae_regularization,
                                    spectrum=b.spectrum, backend=backend, **common, **kwargs)
        elif b.method == "nystrom":
            kernel = HeatKernelNystrom(X, subsample=b.subsample, **common, **kwargs)
        else:
            common.pop("n_induced")
            kernel = HeatKernelGLGP(X, **common, **kwargs)
        return self._at_outputscale(kernel)


class GraphMaternPrior(Prior):
    """The graph Matérn prior at full resolution: ``f ~ N(0, A (L + κ²I)^{-ν})`` on the
    nodes of a graph (a sparse precision; nothing truncated).

    Parameters
    ----------
    graph : flgp.graph.PointGraph, optional
        The graph whose nodes are the fitted rows (a voxel lattice,
        :func:`flgp.graph.lattice_graph`; a mesh, :func:`flgp.graph.mesh_graph`; a k-NN
        graph). Default: the cloud's 10-NN graph (self-tuning for the classifier;
        :func:`flgp.graph.self_tuning_knn_graph`, :func:`flgp.graph.knn_point_graph`).
    nu : int, optional
        The order ``ν`` (1-4; the classifier takes 1 or 2). Default: by evidence
        (regression); for classification 1, or 1 or 2 chosen with the ratio ``ρ`` by the
        class probabilities' graph total variation where the solves are factored (up to
        three coordinates) on a graph of uniform mass.
    """

    method = "graph_matern"
    _parameter_constraints: dict = {
        "graph": [PointGraph, None],
        "nu": [Interval(numbers.Integral, 1, 4, closed="both"), None],
    }

    def __init__(self, graph=None, *, nu=None):
        self.graph = graph
        self.nu = nu

    def _check(self, estimator_name: str, for_classifier: bool) -> None:
        super()._check(estimator_name, for_classifier)
        if for_classifier and self.nu is not None and int(self.nu) > 2:
            raise ValueError(f"GraphMaternPrior(nu={self.nu}): the classifier takes nu = 1 "
                             f"or 2.")

    def gpytorch_kernel(self, X=None, *, random_state=0, **kwargs):
        """:class:`flgp.kernels.GraphMaternKernel` on ``graph`` (or the self-tuning k-NN graph
        of ``X``), of order ``nu`` (default 2); ``kwargs`` go to the kernel. A fitted
        ``prior_``'s is at its ``kappa_`` on the graph as given, in a ``ScaleKernel``."""
        self._check("gpytorch_kernel", for_classifier=False)
        graph = self.graph
        if graph is None:
            if X is None:
                raise ValueError("GraphMaternPrior.gpytorch_kernel needs the cloud X (or a "
                                 "prior built with graph=...).")
            X = np.asarray(X, dtype=np.float64)
            graph = self_tuning_knn_graph(X, min(10, X.shape[0] - 1),
                                          random_state=random_state)
        if hasattr(self, "kappa_"):
            kwargs.setdefault("kappa2", float(self.kappa_) ** 2)
            kwargs.setdefault("normalize", "none")
        kernel = GraphMaternKernel(graph, nu=2 if self.nu is None else int(self.nu), **kwargs)
        return self._at_outputscale(kernel)


class RBFPrior(Prior):
    """The Euclidean squared-exponential GP of the labelled points: an RBF kernel on
    standardised features, length-scale and noise by the evidence. No settings."""

    method = "rbf"
    _parameter_constraints: dict = {}

    def gpytorch_kernel(self, X=None, **kwargs):
        """``ScaleKernel(RBFKernel())``, ``kwargs`` to ``RBFKernel``; a fitted ``prior_``'s in
        float64 at its ``outputscale_`` and ``lengthscale_`` (one a feature, units of ``X``)."""
        import gpytorch
        import torch

        if not hasattr(self, "lengthscale_"):
            return gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(**kwargs))
        ell = np.atleast_1d(np.asarray(self.lengthscale_, dtype=np.float64))
        kwargs.setdefault("ard_num_dims", ell.size)
        rbf = gpytorch.kernels.RBFKernel(**kwargs).double()
        rbf.lengthscale = torch.as_tensor(ell, dtype=torch.float64)
        return self._at_outputscale(rbf)



def resolve_priors(prior) -> list:
    """The prior objects ``prior`` names: ``None`` - one of each at its defaults; one
    object - itself; a list or tuple - its members (each kind at most once)."""
    if prior is None:
        return [HeatKernelPrior(), GraphMaternPrior(), RBFPrior()]
    if isinstance(prior, Prior):
        return [prior]
    members = list(prior)
    if not members:
        raise ValueError("prior=[] names no prior; pass None for every representation, "
                         "or one or more of HeatKernelPrior(), GraphMaternPrior(), "
                         "RBFPrior().")
    for member in members:
        if not isinstance(member, Prior):
            raise TypeError(f"prior must hold HeatKernelPrior, GraphMaternPrior or "
                            f"RBFPrior objects; got {type(member).__name__}.")
    kinds = [type(member).__name__ for member in members]
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise ValueError(f"prior lists {', '.join(repeated)} more than once; give each "
                         f"representation once (its settings in that one object).")
    return members


# the heat kernel's settings, its eigenbasis's among them, as the estimators read them back
EIGENBASIS_PARAMETERS = tuple(Eigenbasis().get_params())
HEAT_PARAMETERS = EIGENBASIS_PARAMETERS + tuple(
    name for name in HeatKernelPrior().get_params() if name != "eigenbasis")


def priors_for(method: str = "auto", **heat_settings):
    """The ``prior=`` that a method name and heat-kernel settings mean (the command line's
    ``--method``): ``"auto"``, every representation (``None`` without settings); a heat
    kernel method; ``"graph_matern"`` or ``"rbf"``. ``None`` settings take the defaults."""
    defaults = Eigenbasis().get_params()
    unknown = sorted(set(heat_settings) - set(defaults))
    if unknown:
        raise TypeError(f"priors_for() got an unexpected keyword argument {unknown[0]!r}")
    heat = {k: v for k, v in heat_settings.items()
            if not (v is None and defaults.get(k) is None)}
    if method in HEAT_METHODS:
        return HeatKernelPrior(Eigenbasis(method, **heat))
    if method == "graph_matern":
        return GraphMaternPrior()
    if method == "rbf":
        return RBFPrior()
    if method == "auto":
        return None if not heat else [HeatKernelPrior(Eigenbasis(**heat)), GraphMaternPrior(),
                                      RBFPrior()]
    raise ValueError(f"method must be one of 'auto', 'flgp', 'glgp', 'nystrom', 'graph_matern', "
                     f"'rbf'; got {method!r}.")


def with_graph(prior, graph):
    """``prior`` with ``graph`` given to the graph Matérn prior where it is weighed without a
    graph (``None``: every prior); what :func:`flgp.predict_image` and
    :func:`flgp.predict_surface` do with the voxel lattice and the mesh."""
    if prior is None:
        return [HeatKernelPrior(), GraphMaternPrior(graph), RBFPrior()]
    members = resolve_priors(prior)
    if not any(isinstance(p, GraphMaternPrior) and p.graph is None for p in members):
        return prior
    members = [clone(p).set_params(graph=graph)
               if isinstance(p, GraphMaternPrior) and p.graph is None else p
               for p in members]
    return members[0] if isinstance(prior, Prior) else members
