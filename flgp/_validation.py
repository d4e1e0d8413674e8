"""Input checks shared by flgp. Each raises a ``ValueError`` (or ``TypeError``) saying what
is wrong and what to change, so bad input never becomes a silent NaN downstream.
"""

from __future__ import annotations

import numbers

import numpy as np

from .backends import compiled

__all__ = []  # private module


# The scale rule: squared distances must stay in float64's normal range with room for the
# kernels' constants. |coordinates| * sqrt(p) <= 1e150 keeps them below 1e300; a spread
# (largest feature range) >= 1e-100 keeps neighbours' squared distances far above the
# smallest normal number. Outside, graph weights overflow to inf or underflow to 0.
_MAX_COORDINATE = 1e150
_MIN_SPREAD = 1e-100


def check_coordinate_scale(largest: float, spread: float | None, n_features: int,
                           name: str = "X") -> None:
    """Raise when coordinates are too large, or (``spread`` given, for a cloud being fitted) too
    closely spaced, for float64 squared distances (the scale rule above). ``largest``: the
    largest absolute coordinate; ``spread``: the largest range of a feature."""
    root_p = np.sqrt(max(int(n_features), 1))
    if largest * root_p > _MAX_COORDINATE:
        raise ValueError(f"{name} has coordinates as large as {largest:.3g}: squared distances "
                         f"would overflow float64. Rescale {name} (e.g. standardise each "
                         f"feature) before fitting and predicting.")
    if spread is not None and 0 < spread * root_p < _MIN_SPREAD:
        raise ValueError(f"{name} spans only {spread:.3g} in its widest feature: squared "
                         f"distances between its points would underflow float64 (below "
                         f"1e-200), and the graph's weights with them. Rescale {name} (e.g. "
                         f"standardise each feature) before fitting and predicting.")


def power_of_two_unit(values) -> float:
    """The unit for a quantity whose squares are formed (regression targets): 1 while its largest
    magnitude lies in ``[1e-100, 1e150]`` (the scale rule), else the nearest power of two, so
    dividing by it is exact and brings the values to magnitude ~1."""
    values = np.asarray(values, dtype=np.float64)
    big = float(np.max(np.abs(values))) if values.size else 0.0
    if big == 0.0 or not np.isfinite(big) or _MIN_SPREAD <= big <= _MAX_COORDINATE:
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(big)[1]) - 1))     # big / unit in [1, 2)


def check_points(X, *, name: str = "X", min_samples: int = 2, dtype=np.float64,
                 finite: bool = True) -> np.ndarray:
    """Return ``X`` as a C-contiguous 2-d float array, or raise a clear error.

    Checks the shape, NaN and infinity (skipped with ``finite=False``: already scanned) and
    the size of the coordinates (:func:`check_coordinate_scale`)."""
    X = _as_points(X, name=name, min_samples=min_samples, dtype=dtype)
    if compiled.enabled() and X.dtype == np.float64:
        # one read, no n x p temporaries
        all_finite, largest = compiled.scan_cloud(X, _row_hash_multipliers(X.shape[1]),
                                                  hashes=False)[:2]
    else:
        all_finite = not finite or bool(np.isfinite(X).all())
        largest = float(np.abs(X).max()) if X.size and all_finite else 0.0
    if finite and not all_finite:
        _raise_not_finite(X, name)
    if X.size:
        check_coordinate_scale(float(largest), None, X.shape[1], name)
    return X


def check_2d(X, name: str = "X") -> None:
    """Raise a ``ValueError`` unless the array (numpy, dask, zarr) ``X`` is 2-d."""
    if X.ndim == 1:
        raise ValueError(f"{name} is 1-d with shape {X.shape}; a point cloud must be 2-d "
                         f"(n_samples, n_features). Use {name}.reshape(-1, 1) for one "
                         f"feature or {name}.reshape(1, -1) for one sample.")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-d (n_samples, n_features); got {X.ndim} dimensions "
                         f"with shape {X.shape}.")


def _as_points(X, *, name: str, min_samples: int, dtype=np.float64) -> np.ndarray:
    """``X`` as a C-contiguous 2-d float array with at least ``min_samples`` rows and one column
    (the shape half of :func:`check_points`)."""
    try:
        import torch

        if isinstance(X, torch.Tensor):
            X = X.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):   # a scipy.sparse matrix or array
        raise ValueError(f"{name} is a sparse matrix; flgp works on dense point clouds "
                         f"(n_samples, n_features): pass {name}.toarray().")
    try:
        X = np.asarray(X, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n_samples, n_features); "
                         f"could not convert it to floats ({exc}).") from exc
    check_2d(X, name)
    if X.shape[1] == 0:
        raise ValueError(f"{name} has 0 features; it needs at least one column.")
    if X.shape[0] < min_samples:
        raise ValueError(f"{name} has {X.shape[0]} sample(s); at least {min_samples} are "
                         f"required.")
    return np.ascontiguousarray(X)


def _raise_not_finite(X: np.ndarray, name: str):
    rows = ~np.isfinite(X).all(axis=1)
    raise ValueError(f"{name} contains NaN or infinity in {int(rows.sum())} row(s) (first "
                     f"at row {int(np.argmax(rows))}); remove or impute those rows before "
                     f"fitting.")


def check_cloud(X, *, name: str = "X", min_samples: int = 2, finite: bool = True):
    """:func:`check_points` for a cloud a graph is built on: shape (C-contiguous 2-d float64, at
    least ``min_samples`` rows), then :func:`check_cloud_values`."""
    X = _as_points(X, name=name, min_samples=min_samples)
    return check_cloud_values(X, name=name, finite=finite)


def check_cloud_values(X: np.ndarray, *, name: str = "X", finite: bool = True) -> np.ndarray:
    """Value checks for a cloud a graph is built on, whose shape is already checked
    (:func:`check_cloud`, or scikit-learn's ``validate_data(..., order="C")``): NaN and
    infinity (skipped with ``finite=False``), coordinate size and spread
    (:func:`check_coordinate_scale`) and mostly duplicate rows (:func:`check_distinct_rows`).
    With the compiled kernels one read of ``X`` (:func:`flgp.backends.compiled.scan_cloud`)
    serves all of them. Returns ``X``."""
    n, p = X.shape
    hashes = None
    if compiled.enabled():
        all_finite, largest, lo, hi, hashes = compiled.scan_cloud(
            X, _row_hash_multipliers(p))
        spread = float(np.max(hi - lo))
    else:
        all_finite = not finite or bool(np.isfinite(X).all())
        largest = float(np.abs(X).max()) if all_finite else 0.0
        spread = float(np.max(np.ptp(X, axis=0))) if all_finite and n > 1 else 0.0
    if finite and not all_finite:
        _raise_not_finite(X, name)
    check_coordinate_scale(float(largest), None, p, name)
    if n > 1:
        check_coordinate_scale(0.0, spread, p, name)
    check_distinct_rows(n, count_distinct_rows(X, hashes=hashes), name=name)
    return X


def check_int(value, name: str, *, low: int = 1, high: int | None = None,
              high_name: str | None = None, fix: str = "") -> int:
    """Check that ``value`` is an integer in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} of type "
                        f"{type(value).__name__}.")
    value = int(value)
    if value < low:
        raise ValueError(f"{name}={value} must be at least {low}.")
    if high is not None and value > high:
        what = high_name or str(high)
        raise ValueError(f"{name}={value} exceeds {what}={high}. {fix}".rstrip())
    return value


def check_positive(value, name: str, *, allow_none: bool = False):
    """Check that ``value`` is a finite positive real number (or None if allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number; got {value!r}.")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite positive number; got {value}.")
    return value


def check_nonnegative(value, name: str) -> float:
    """Check that ``value`` is a finite real number >= 0 (a noise level, say)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number >= 0; got {value!r}.")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value}.")
    return value


def check_option(value, name: str, options) -> str:
    """Check that ``value`` is one of ``options``."""
    if value not in options:
        raise ValueError(f"{name}={value!r} is not supported; choose one of "
                         f"{sorted(options)}.")
    return value


def check_random_state(random_state) -> np.random.Generator:
    """A numpy Generator from None, an int or a Generator."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    raise TypeError(f"random_state must be None, an int or a numpy Generator; got "
                    f"{random_state!r}.")


def _row_hash_multipliers(p: int) -> np.ndarray:
    """The odd multipliers of :func:`count_distinct_rows`' row hash (fixed seed)."""
    return np.random.default_rng(0x5EED).integers(1, 2**63, size=p, dtype=np.uint64) | 1


def count_distinct_rows(X: np.ndarray, chunk: int = 65536,
                        hashes: np.ndarray | None = None) -> int:
    """The number of distinct rows of a float array, in ``O(n p + n log n)``.

    Rows' bit patterns are hashed with exact modular integer arithmetic (layout-independent);
    only rows with a shared hash are compared exactly. ``-0.0`` equals ``0.0``, as in
    ``np.unique``. ``hashes``: precomputed row hashes
    (:func:`flgp.backends.compiled.scan_cloud`), sorted in place (the caller's to overwrite).
    """
    n, p = X.shape
    if hashes is not None:
        hashes.sort()
        same = hashes[1:] == hashes[:-1]
        if not same.any():
            return n
    # a plain sort (no argsort/inverse, cheaper than np.unique): most clouds stop here
    h = _row_hashes(X, chunk)
    hs = np.sort(h)
    same = hs[1:] == hs[:-1]
    if not same.any():
        return n
    shared = np.isin(h, hs[1:][same])
    cand = X[shared] + 0.0
    return int(n - shared.sum() + np.unique(cand, axis=0).shape[0])


def _row_hashes(X: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """``Σ_d bits(x_d + 0.0) * mult_d mod 2^64`` for each row (numpy, in chunks)."""
    n, p = X.shape
    mult = _row_hash_multipliers(p)
    h = np.empty(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, n, chunk):
            bits = (X[start:start + chunk] + 0.0).view(np.uint64)
            h[start:start + chunk] = (bits * mult[None, :]).sum(axis=1, dtype=np.uint64)
    return h


def check_distinct_rows(n: int, n_unique: int, *, name: str = "X",
                        max_fraction: float = 0.5) -> None:
    """Raise if a cloud of ``n`` rows has fewer than two distinct rows, or more than
    ``max_fraction`` of exact duplicates (``n_unique``: :func:`count_distinct_rows`): the graph
    would collapse onto a few nodes.
    """
    if n_unique < 2:
        raise ValueError(f"{name} has only {n_unique} distinct point(s); a heat kernel needs a "
                         f"cloud of at least two distinct points.")
    if (n - n_unique) > max_fraction * n:
        raise ValueError(f"{name} has {n - n_unique} duplicate rows out of {n} "
                         f"({100 * (n - n_unique) / n:.0f}%); the graph would collapse onto "
                         f"{n_unique} distinct points. Fit on the distinct rows and map back: "
                         f"U, inverse = np.unique(X, axis=0, return_inverse=True); fit on U "
                         f"(one target per distinct row, e.g. the majority label or the mean); "
                         f"then predictions[inverse] are per original row.")


def integer_seed(random_state) -> int:
    """The seed of draws that must repeat in every process (the graph Matérn variances,
    the cross-validation folds): an integer ``random_state`` (numpy's too) as it is, else 0
    (a Generator or None)."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    return 0
