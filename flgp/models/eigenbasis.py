"""The heat kernel's engine (:mod:`flgp.models.heat_kernel` fits on it; it knows nothing of
the likelihood):

* :func:`candidate_eigenbases` - one FLGP / GLGP / Nyström eigenbasis per value of the SE
  bandwidth grid (one for LAE or a fixed bandwidth), kept across fits with ``warm_start``
  (:func:`cache_key`) or shared by several fits within :func:`shared_candidates`;
* :func:`best_candidate` - the GP part fitted on each candidate, the best kept by score;
* :class:`FittedEigenbasis` - the kept eigenbasis, which pieces of the graph hold a label,
  and the cloud's reach for the far-point warning.

Settings come from :class:`~flgp.models.priors.HeatKernelPrior` (and its eigenbasis) and the
fit's :class:`~flgp.models.representation.FitOptions`.
"""

from __future__ import annotations

import contextvars
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .._chunks import stage
from .._fingerprint import array_fingerprint
from ..graph.neighbors import nearest_induced_points
from ..spectral.candidates import eigenpair_candidates
from ..spectral.compute import default_n_eigenpairs, default_n_induced
from ..spectral.dense import TooFewEigenvaluesError
from .search import single_threaded_blas

__all__ = ["CandidateFit", "FittedEigenbasis", "candidate_eigenbases", "best_candidate",
           "engine_sizes", "bandwidth_grid", "cache_key",
           "shared_candidates", "cloud_reach", "DEFAULT_BANDWIDTH_GRID", "FAR_FACTOR",
           "GRAPH_PARAMETERS"]

DEFAULT_BANDWIDTH_GRID = tuple(np.logspace(-1, 1, 7))
# a new point farther than this many times the cloud's reach from every reference point
# is reported as an extrapolation
FAR_FACTOR = 3.0
# the settings that change the graph or its eigenpairs (never the labels'): the
# estimator's method, random_state and backend (FitOptions), the eigenbasis's others
GRAPH_PARAMETERS = ("method", "kernel", "subsample", "n_induced", "n_neighbors",
                    "n_eigenpairs", "bandwidth", "bandwidth_grid", "lae_regularization",
                    "spectrum", "random_state", "backend", "induced_points")
_OPTION_PARAMETERS = ("method", "random_state", "backend")


@dataclass
class CandidateFit:
    """The GP part fitted on one candidate's eigenpairs: ``score`` (higher is better; the
    candidate with the highest is kept), ``t`` and ``log_evidence`` for the verbose line,
    and whatever the representation needs to finish (``result``)."""

    score: float
    t: object
    log_evidence: float
    result: object


# eigenpair candidates shared by the fits of one cloud (shared_candidates)
_SHARED_CANDIDATES = contextvars.ContextVar("flgp_shared_candidates", default=None)


@contextmanager
def shared_candidates(store: dict):
    """Within the block, the estimators' eigenpair candidates of a cloud are kept in
    ``store`` (under ``"candidates"``) and reused by the next fit of the same cloud and
    graph settings: ``warm_start`` across estimators (the maps of
    :func:`flgp.predict_image`, one regressor each)."""
    token = _SHARED_CANDIDATES.set(store)
    try:
        yield
    finally:
        _SHARED_CANDIDATES.reset(token)


# -- the candidates ---------------------------------------------------------------------
def engine_sizes(prior, n: int) -> tuple[int, int]:
    """``(s, M)``: the induced points and eigenpairs of the heat kernel ``prior`` (a
    :class:`~flgp.models.priors.HeatKernelPrior`) on a cloud of ``n`` points (their
    defaults, :func:`flgp.spectral.compute.default_n_induced` and
    :func:`~flgp.spectral.compute.default_n_eigenpairs`, where not given)."""
    basis = prior.basis
    if basis.induced_points is not None and basis.method == "flgp":
        s = np.shape(basis.induced_points)[0]
    else:
        s = default_n_induced(n) if basis.n_induced is None else basis.n_induced
    if basis.method == "glgp":
        M = default_n_eigenpairs(n) if basis.n_eigenpairs is None else basis.n_eigenpairs
    else:
        M = default_n_eigenpairs(s) if basis.n_eigenpairs is None else basis.n_eigenpairs
    return s, M


def bandwidth_grid(prior) -> tuple:
    """The scales ``a`` of the SE bandwidth (``4 eps^2 = a mean d^2``) whose eigenbases are
    compared: ``DEFAULT_BANDWIDTH_GRID`` or the given ``bandwidth_grid`` for the SE
    kernels, ``(1.0,)`` for LAE or a fixed bandwidth."""
    basis = prior.basis
    uses_se = basis.method in ("glgp", "nystrom") or basis.kernel == "se"
    if not uses_se or basis.bandwidth is not None:
        return (1.0,)
    if basis.bandwidth_grid is None:
        return DEFAULT_BANDWIDTH_GRID
    return tuple(np.atleast_1d(np.asarray(basis.bandwidth_grid, dtype=np.float64)).ravel())


def cache_key(prior, options, X) -> tuple | None:
    """The warm-start key of the cloud ``X`` and the graph settings (``GRAPH_PARAMETERS``,
    of the ``options`` or of the ``prior``'s eigenbasis): the cloud's shape, dtype and two
    checksums of its bytes (CRC-32 and Adler-32); None for a dask cloud."""
    if not isinstance(X, np.ndarray):
        return None
    return (array_fingerprint(X),) + tuple(
        (name, _value_key(getattr(options, name) if name in _OPTION_PARAMETERS
                          else getattr(prior.basis, name))) for name in GRAPH_PARAMETERS)


def candidate_eigenbases(prior, options, X, sizes: tuple[int, int]):
    """Yield ``(bandwidth_scale, Eigenpairs)`` of the validated cloud ``X`` with ``sizes =
    (s, M)`` induced points and eigenpairs: one candidate per value of
    :func:`bandwidth_grid` (:func:`flgp.spectral.eigenpair_candidates`; induced points and
    neighbour searches computed once). With ``warm_start``, the previous fit's candidates
    when neither the cloud nor the graph settings changed.

    A dense GLGP / Nyström kernel at the wide end of the grid can have fewer than
    ``n_eigenpairs`` positive eigenvalues: that value is skipped, and only when every
    value fails is an error raised (the one of the value that came closest)."""
    # warm start: the estimator's cache; else a store shared by several fits, if any
    cache = options.cache
    store = None if options.warm_start else _SHARED_CANDIDATES.get()
    key = (cache_key(prior, options, X) if options.warm_start or store is not None
           else None)
    cached = cache.eigenpairs if store is None else store.get("candidates")
    if key is not None and cached is not None and cached[0] == key:
        yield from cached[1]
        return
    cache.eigenpairs = None                     # free the old eigenpairs before new ones
    s, M = sizes
    basis = prior.basis
    method = basis.method
    if method != "flgp" and basis.induced_points is not None:
        raise ValueError(f"induced_points work with method='flgp' only; got "
                         f"method={method!r}.")
    flgp_with_points = method == "flgp" and basis.induced_points is not None
    makers = eigenpair_candidates(
        X, method, bandwidth_grid(prior),
        n_induced=None if flgp_with_points else s, n_eigenpairs=M,
        n_neighbors=basis.n_neighbors, subsample=basis.subsample, kernel=basis.kernel,
        bandwidth=basis.bandwidth, lae_regularization=basis.lae_regularization,
        spectrum=basis.spectrum, random_state=options.random_state,
        backend=options.backend, induced_points=basis.induced_points,
        anchor=1.0 if method in ("flgp", "nystrom") else None)
    best_failure = None
    found, yielded = [], 0              # found: kept only for the warm-start cache
    with warnings.catch_warnings():
        # the fit warns only about pieces that hold no label (FittedEigenbasis): a piece
        # with labels is predicted from them
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
        cache.eigenpairs = (key, found)
    elif key is not None:
        store["candidates"] = (key, found)


def best_candidate(options, candidates, labelled, targets, fit_gp, skip=None):
    """Fit the GP part on every candidate (``fit_gp(eigenpairs, V_lab, targets)``, a
    :class:`CandidateFit`) and keep the one with the highest score: ``(bandwidth scale,
    eigenpairs, eigenvector rows of the labelled points, CandidateFit)``.
    ``skip(eigenpairs, V_lab, targets)``: True leaves a candidate unfitted (None when
    every one is). With ``options.verbose``, a line a candidate."""
    best = None
    name = options.estimator
    for a, eigenpairs in candidates:
        with stage("labelled rows"):
            V_lab = eigenpairs.eigenvector_rows(labelled)
        if skip is not None and skip(eigenpairs, V_lab, targets):
            continue
        with stage("hyperparameters"), single_threaded_blas():
            fit = fit_gp(eigenpairs, V_lab, targets)
        if options.verbose:
            t_txt = ", ".join(f"{v:.4g}" for v in np.atleast_1d(fit.t))
            print(f"[{name}] bandwidth scale {a:.3g}: t={t_txt} "
                  f"log evidence={fit.log_evidence:.4f}")
        if best is None or fit.score > best[3].score:
            best = (a, eigenpairs, V_lab, fit)
    return best


# -- the fitted eigenbasis -------------------------------------------------------------
class FittedEigenbasis:
    """The kept candidate: ``bandwidth_scale``, ``eigenpairs``, ``piece_has_label`` (which
    connected pieces of the graph hold a labelled point; None when pieces are not tracked)
    and ``reach`` (:func:`cloud_reach`, for :meth:`warn_far_points`)."""

    def __init__(self, bandwidth_scale, eigenpairs, piece_has_label, reach):
        self.bandwidth_scale = bandwidth_scale
        self.eigenpairs = eigenpairs
        self.piece_has_label = piece_has_label
        self.reach = reach

    @classmethod
    def of_labels(cls, bandwidth_scale, eigenpairs, labelled, stacklevel: int):
        """The fitted eigenbasis for the labelled rows ``labelled``, warning about the
        points in pieces without a label (``stacklevel`` counted from the warning's own
        frame, one below this one)."""
        return cls(bandwidth_scale, eigenpairs,
                   _label_pieces(eigenpairs, labelled, stacklevel=stacklevel),
                   cloud_reach(eigenpairs))

    def fitted_attributes(self, labelled) -> dict:
        """The estimator's attributes of its engine: ``eigenpairs_``, ``eigenvalues_``,
        ``bandwidth_scale_``, ``bandwidth_`` and ``labelled_indices_``."""
        eigenpairs = self.eigenpairs
        return dict(eigenpairs_=eigenpairs, eigenvalues_=eigenpairs.eigenvalues,
                    bandwidth_scale_=self.bandwidth_scale,
                    bandwidth_=getattr(getattr(eigenpairs.extension, "graph", None),
                                       "bandwidth", None),
                    labelled_indices_=np.asarray(labelled, dtype=np.int64))

    def map_points(self, X, fn, stacklevel: int, **kw):
        """``eigenpairs.map_points(X, fn, **kw)``; for a numpy ``X`` with the far-point
        warning (``stacklevel``: as ``warnings.warn`` would count it in the caller's
        frame)."""
        if not isinstance(X, np.ndarray):
            return self.eigenpairs.map_points(X, fn, **kw)
        out, nearest = self.eigenpairs.map_points(X, fn, return_nearest=True, **kw)
        self.warn_far_points(X, nearest, stacklevel=stacklevel + 2)
        return out

    def warn_far_points(self, X, nearest_sq=None, stacklevel: int = 4) -> None:
        """Warn when new points lie farther than ``FAR_FACTOR`` times the cloud's reach
        from its reference points: the heat kernel is estimated on the cloud, and such a
        point only inherits the values of the nearest part of it (its uncertainty does not
        grow with the distance). ``nearest_sq``: the squared distances to the nearest
        reference point when the out-of-sample map has already found them."""
        if self.reach is None or X.shape[0] == 0:
            return
        points, reach_sq = self.reach
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
