"""What the estimators share: engine options -> candidate eigenpairs, the diffusion-time
search, and label handling."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import minimize_scalar

from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .._validation import check_option, check_points, check_positive
from ..backends import resolve_backend
from ..graph import build_cross_graph, build_dense_graph, build_nystrom_graph
from ..graph.dense import bandwidth_neighbour_count, neighbour_bandwidth
from ..graph.neighbors import nearest_induced_points
from ..spectral import flgp_eigenpairs, glgp_eigenpairs, nystrom_eigenpairs
from ..spectral.dense import TooFewEigenvaluesError, glgp_eigenpairs_lazy
from ..spectral.compute import default_n_eigenpairs, default_n_induced

__all__ = []

METHODS = ("flgp", "glgp", "nystrom", "rbf")
DEFAULT_BANDWIDTH_GRID = tuple(np.logspace(-1, 1, 7))


def engine_sizes(est, n: int) -> tuple[int, int]:
    induced = getattr(est, "induced_points", None)
    if induced is not None and est.method == "flgp":
        s = np.shape(induced)[0]
    else:
        s = default_n_induced(n) if est.n_induced is None else est.n_induced
    if est.method == "glgp":
        M = default_n_eigenpairs(n) if est.n_eigenpairs is None else est.n_eigenpairs
    else:
        M = default_n_eigenpairs(s) if est.n_eigenpairs is None else est.n_eigenpairs
    return s, M


def eigenpair_candidates(est, X: np.ndarray):
    """Yield ``(bandwidth_scale, Eigenpairs)``: one candidate for LAE or a fixed bandwidth,
    one per grid value of ``a`` (``4 eps^2 = a mean d^2``) for the SE kernels otherwise.
    Induced points and neighbour searches are computed once and reused across the grid.

    GLGP and Nyström build dense Gaussian kernels; at the wide end of the grid such a
    kernel can be numerically of low rank, with fewer than ``n_eigenpairs`` positive
    eigenvalues. That grid value is then skipped (the evidence could not be compared with
    fewer eigenpairs); only when every value fails is an error raised, the one of the value
    that came closest."""
    best_failure = None
    yielded = 0
    for a, make in _candidate_makers(est, X):
        try:
            ep = make()
        except TooFewEigenvaluesError as err:
            # keep the message, not the traceback: its frames hold the failed dense graph
            if best_failure is None or err.n_positive > best_failure.n_positive:
                best_failure = err.with_traceback(None)
            continue
        yielded += 1
        yield a, ep
    if yielded == 0 and best_failure is not None:
        raise best_failure


def _candidate_makers(est, X: np.ndarray):
    """``(a, make)`` per candidate of :func:`eigenpair_candidates`, ``make()`` computing its
    eigenpairs (graphs shared across the grid are built on the way)."""
    check_option(est.method, "method", METHODS)
    n = X.shape[0]
    s, M = engine_sizes(est, n)
    induced = getattr(est, "induced_points", None)
    if est.method != "flgp" and (induced is not None or not isinstance(X, np.ndarray)):
        what = "induced_points" if induced is not None else "dask and zarr arrays"
        raise ValueError(f"{what} work with method='flgp' only; got method={est.method!r}.")
    uses_se = est.method in ("glgp", "nystrom") or est.kernel == "se"
    grid = (1.0,) if (not uses_se or est.bandwidth is not None) else tuple(
        DEFAULT_BANDWIDTH_GRID if est.bandwidth_grid is None
        else np.atleast_1d(np.asarray(est.bandwidth_grid, dtype=np.float64)).ravel())
    with warnings.catch_warnings():
        # the estimator warns only about components that hold no label
        # (warn_unlabelled_components): a component with labels is predicted from them
        warnings.filterwarnings("ignore", message=".*connected components.*")
        if est.method == "flgp":
            base = build_cross_graph(X, n_induced=s, n_neighbors=est.n_neighbors,
                                     subsample=est.subsample, kernel=est.kernel,
                                     bandwidth=est.bandwidth,
                                     lae_regularization=est.lae_regularization,
                                     random_state=est.random_state, backend=est.backend,
                                     induced_points=induced)
            for a in grid:
                g = base if a == 1.0 else base.with_bandwidth(base.bandwidth * np.sqrt(a))
                yield a, lambda g=g: flgp_eigenpairs(g, M, spectrum=est.spectrum)
        elif est.method == "nystrom":
            r = bandwidth_neighbour_count(est.n_neighbors, s)
            g0 = build_nystrom_graph(X, n_induced=s, subsample=est.subsample,
                                     bandwidth=est.bandwidth, n_neighbors=r,
                                     random_state=est.random_state, backend=est.backend)
            for a in grid:
                g = g0 if a == 1.0 else build_nystrom_graph(
                    X, n_induced=s, bandwidth=g0.bandwidth * np.sqrt(a), n_neighbors=r,
                    induced=g0.induced)
                yield a, lambda g=g: nystrom_eigenpairs(g, M, X)
        elif resolve_backend(est.backend) == "keops":  # glgp, never stored
            r = bandwidth_neighbour_count(est.n_neighbors, n - 1)
            base = est.bandwidth
            if base is None:
                base = neighbour_bandwidth(X, X, r, grid[0], skip_self=True)
            for a in grid:
                yield a, lambda a=a: glgp_eigenpairs_lazy(
                    X, M, bandwidth=base * np.sqrt(a / grid[0]), backend="keops")
        else:  # glgp
            r = bandwidth_neighbour_count(est.n_neighbors, n - 1)
            g0 = None
            for a in grid:
                if g0 is None:
                    g0 = build_dense_graph(X, bandwidth=est.bandwidth, n_neighbors=r,
                                           bandwidth_scale=a)
                    g = g0
                else:
                    g = build_dense_graph(X, bandwidth=g0.bandwidth * np.sqrt(a / grid[0]),
                                          n_neighbors=r)
                yield a, lambda g=g: glgp_eigenpairs(g, M)


def check_hyperparameters(est):
    """Validate the numeric settings shared by the estimators before any work is done, so
    that a bad value gives a message naming it (not a NaN or an optimiser's traceback)."""
    check_positive(est.diffusion_time, "diffusion_time", allow_none=True)
    check_positive(est.bandwidth, "bandwidth", allow_none=True)
    a0 = est.diffusion_time_prior_power
    if isinstance(a0, bool) or not isinstance(a0, (int, float, np.floating, np.integer)) \
            or not np.isfinite(a0):
        raise ValueError(f"diffusion_time_prior_power must be a finite number (a0 of the "
                         f"prior t^-a0; 1 = flat in log t); got {a0!r}.")
    if est.bandwidth_grid is not None:
        grid = np.asarray(est.bandwidth_grid, dtype=np.float64).ravel()
        if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError(f"bandwidth_grid must hold at least one finite positive "
                             f"bandwidth scale a (4 eps^2 = a mean d^2); got "
                             f"{est.bandwidth_grid!r}.")


def single_threaded_blas():
    """Context in which BLAS/LAPACK run on one thread.

    The hyperparameter searches make thousands of calls on ``m x m`` matrices (m = number
    of labels, ~100): there, thread start-up and contention with torch's spinning OpenMP
    workers cost more than the arithmetic (measured: a 10-class fit on 1,797 digits took
    3.2 s with two BLAS threads and 1.3 s with one)."""
    return threadpool_limits(1, user_api="blas")


def stack_unlabeled(X, X_unlabeled, labelled, y, fill):
    """Append ``X_unlabeled`` below ``X``: returns the cloud, the labelled mask and ``y``
    padded with ``fill``."""
    if X_unlabeled is None:
        return X, labelled, y
    Xu = check_points(X_unlabeled, name="X_unlabeled", min_samples=1)
    if Xu.shape[1] != X.shape[1]:
        raise ValueError(f"X_unlabeled has {Xu.shape[1]} features, X has {X.shape[1]}.")
    y_fill = np.full(Xu.shape[0], fill, dtype=y.dtype if y.dtype.kind in "iuf" else object)
    return (np.vstack([X, Xu]), np.r_[labelled, np.zeros(Xu.shape[0], dtype=bool)],
            np.r_[y, y_fill])


def check_fit_X(est, X, y):
    """Validate ``X`` at fit time (scikit-learn's messages, then flgp's checks)."""
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y "
                         f"is None.")
    X = validate_data(est, X, dtype=np.float64, ensure_min_samples=2)
    return check_points(X)


def check_predict_X(est, X):
    """Validate ``X`` at predict time against the fitted number of features."""
    check_is_fitted(est, "n_features_in_")
    X = validate_data(est, X, dtype=np.float64, reset=False)
    return check_points(X, min_samples=1)


def search_log_scalar(fun, lo: float, hi: float, n_grid: int = 12, maxiter: int = 30):
    """Minimise ``fun(log x)`` for ``x`` in ``[lo, hi]``: a log grid, then bounded Brent
    between the best grid point's neighbours. Returns ``(x, fun value)``."""
    grid = np.linspace(np.log(lo), np.log(hi), n_grid)
    vals = np.array([fun(g) for g in grid])
    vals = np.where(np.isfinite(vals), vals, np.inf)
    k = int(np.argmin(vals))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, n_grid - 1)]
    res = minimize_scalar(fun, bounds=(a, b), method="bounded",
                          options={"maxiter": maxiter, "xatol": 1e-3})
    if res.fun <= vals[k]:
        return float(np.exp(res.x)), float(res.fun)
    return float(np.exp(grid[k])), float(vals[k])


def parabolic_refine(fun, grid: np.ndarray, vals: np.ndarray, k: int, steps: int = 2):
    """Refine the minimum of ``fun`` near ``grid[k]`` (the best of the evaluated ``vals``)
    by successive parabolic interpolation: the vertex of the parabola through the best
    point and its two grid neighbours, then through the best three points seen, each
    vertex clipped to the neighbours' interval. Returns the best abscissa seen."""
    n = grid.size
    if n < 3 or not np.isfinite(vals[k]):
        return float(grid[k])
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, n - 1)]
    idx = [max(min(k, n - 2), 1) + j for j in (-1, 0, 1)]
    pts = [(float(grid[i]), float(vals[i])) for i in idx]
    for _ in range(steps):
        pts = sorted(pts, key=lambda p: p[1])[:3]
        (x0, f0), (x1, f1), (x2, f2) = pts
        den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
        if not np.isfinite(den) or abs(den) < 1e-300:
            break
        x = x1 - 0.5 * ((x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)) / den
        x = float(np.clip(x, lo, hi))
        if any(abs(x - p[0]) < 1e-6 for p in pts):
            break
        fx = float(fun(x))
        pts.append((x, fx if np.isfinite(fx) else np.inf))
    return min(pts + [(float(grid[k]), float(vals[k]))], key=lambda p: p[1])[0]


def diffusion_time_mixture(grid, t_map, state_map, mass: float = 0.99):
    """Posterior weights over a uniform log-``t`` grid: ``grid`` holds ``(t, -log posterior,
    state)`` per grid value; returns ``[(t, weight, state), ...]``, heaviest first, for the
    smallest set of grid values holding ``mass`` of the posterior, with the heaviest grid
    value replaced by the refined MAP ``(t_map, state_map)``. Weights sum to one."""
    vals = np.array([v for _, v, _ in grid], dtype=np.float64)
    vals = np.where(np.isfinite(vals), vals, np.inf)
    if not np.isfinite(vals).any():
        return [(float(t_map), 1.0, state_map)]
    logw = -(vals - vals.min())
    w = np.exp(logw)
    w /= w.sum()
    order = np.argsort(-w, kind="stable")
    k = int(np.searchsorted(np.cumsum(w[order]), mass)) + 1
    keep = order[:min(k, order.size)]
    out = [(float(t_map), float(w[keep[0]]), state_map)]
    out += [(grid[i][0], float(w[i]), grid[i][2]) for i in keep[1:]]
    total = sum(c[1] for c in out)
    return [(t, wk / total, st) for t, wk, st in out]


# a new point farther than this many times the cloud's reach from every reference point
# is reported as an extrapolation
FAR_FACTOR = 3.0


def cloud_reach(eigenpairs, X: np.ndarray):
    """``(reference points, reach^2)`` of a fitted cloud: the induced points (FLGP,
    Nyström) or the cloud itself (GLGP), and the squared reach - the largest distance from
    a point of the cloud to its nearest reference point (other than itself), and at least
    the largest distance from a reference point to its nearest other one (so that induced
    points that nearly coincide with the cloud still leave room between them). None when
    the eigenpairs carry no graph to read them from."""
    graph = getattr(eigenpairs.extension, "graph", None)
    if graph is None:
        return None
    landmarks = getattr(graph, "landmarks", None)
    points = landmarks.points if landmarks is not None else getattr(graph, "points", None)
    if points is None or points.shape[0] < 2:
        return None
    _, own = nearest_induced_points(points, points, 2)          # nearest other reference point
    reach_sq = float(own[:, 1].max())
    if landmarks is not None:
        near = getattr(graph, "nearest_sq_max", None)      # FLGP: found while building
        if near is None:                                    # Nyström
            near = float(nearest_induced_points(X, points, 1)[1][:, 0].max())
        reach_sq = max(reach_sq, float(near))
    return points, reach_sq


def warn_far_points(est, X: np.ndarray, nearest_sq: np.ndarray | None = None,
                    stacklevel: int = 4) -> None:
    """Warn when new points lie farther than ``FAR_FACTOR`` times the cloud's reach from
    its reference points: the heat kernel is estimated on the cloud, and such a point only
    inherits the values of the nearest part of it (its uncertainty does not grow with the
    distance). ``nearest_sq``: the squared distances to the nearest reference point when
    the out-of-sample map has already found them."""
    reach = getattr(est, "_reach", None)
    if reach is None or X.shape[0] == 0:
        return
    points, reach_sq = reach
    if nearest_sq is None:
        nearest_sq = nearest_induced_points(X, points, 1)[1][:, 0]
    far = nearest_sq > FAR_FACTOR ** 2 * max(reach_sq, np.finfo(float).tiny)
    if far.any():
        warnings.warn(f"{int(far.sum())} of {X.shape[0]} new point(s) lie far outside the "
                      f"fitted cloud: up to {np.sqrt(nearest_sq[far].max()):.3g} from its "
                      f"nearest reference point, where no point of the cloud is farther than "
                      f"{np.sqrt(reach_sq):.3g}. The heat kernel carries the values of the "
                      f"nearest part of the cloud out to them, so their predictions are "
                      f"extrapolations (their uncertainty does not grow with the distance).",
                      UserWarning, stacklevel=stacklevel)


def extend_with_prior_mask(est, X, stacklevel: int = 4):
    """Eigenvector values at new points and the mask of those that lie in a connected part
    of the graph without labels (None when components are not tracked). Warns about new
    points far outside the cloud (:func:`warn_far_points`; ``stacklevel`` counted from
    there)."""
    V, comp, nearest_sq = est.eigenpairs_.extend_with_components(X, return_nearest=True)
    warn_far_points(est, X, nearest_sq, stacklevel=stacklevel)
    return V, (None if comp is None else ~est._component_has_label[comp])


def warn_unlabelled_components(eigenpairs, labelled: np.ndarray, stacklevel: int = 3):
    """Components without a labelled point: return a boolean mask of the cloud points in
    them, warning with their count."""
    comp = eigenpairs.component_labels
    if comp is None:
        return np.zeros(eigenpairs.n_samples, dtype=bool), None
    has_label = np.zeros(comp.max() + 1, dtype=bool)
    has_label[comp[labelled]] = True
    mask = ~has_label[comp]
    if mask.any():
        warnings.warn(f"{int(mask.sum())} point(s) lie in {int((~has_label).sum())} connected "
                      f"part(s) of the graph that hold no labelled point; they get the prior "
                      f"prediction. Label a point there, or connect the graph (larger "
                      f"n_neighbors or bandwidth).", UserWarning, stacklevel=stacklevel)
    return mask, has_label
