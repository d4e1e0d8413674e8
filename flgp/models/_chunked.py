"""What the estimators share for chunked and Dask fits: input checks for dask arrays,
labelled rows from a dask ``y``, and connected components without ``n``-sized masks.

The estimators read the eigenvectors only through :meth:`Eigenpairs.eigenvector_rows`
(the labelled rows) and :meth:`Eigenpairs.map_chunks` / :meth:`Eigenpairs.map_points`
(blocks of rows, with a small picklable predictor), so the same code serves numpy inputs
(numpy results) and dask inputs (lazy dask results).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._chunks import is_dask_array, is_zarr_array

__all__ = []


def is_lazy(X) -> bool:
    """A dask or zarr array (the Dask engine runs)."""
    return X is not None and (is_dask_array(X) or is_zarr_array(X))


def check_fit_X_lazy(est, X):
    """Shape and dtype of a dask/zarr ``X`` at fit time (the values are checked in the
    engine's first pass over the blocks); sets ``n_features_in_``."""
    from .._chunks._dask import as_dask_points

    X = as_dask_points(X, min_samples=2)
    est.n_features_in_ = int(X.shape[1])
    if hasattr(est, "feature_names_in_"):
        del est.feature_names_in_
    return X


def lazy_fit_points(est, X, y):
    """``X`` at fit time when any input is lazy: a numpy ``X`` is validated as usual and
    wrapped in a dask array; then :func:`check_fit_X_lazy`."""
    if not is_lazy(X):
        import dask.array as da

        from ._common import check_fit_X

        X = da.from_array(check_fit_X(est, X, y))
    return check_fit_X_lazy(est, X)


def check_predict_X_lazy(est, X):
    """A dask/zarr ``X`` at predict time: fitted, same number of features."""
    from .._chunks._dask import as_dask_points

    check_is_fitted(est, "n_features_in_")
    X = as_dask_points(X)
    if X.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but {type(est).__name__} is "
                         f"expecting {est.n_features_in_} features as input.")
    return X


def stack_unlabeled_lazy(X, X_unlabeled):
    """``X`` with ``X_unlabeled`` appended (dask), or ``X``."""
    if X_unlabeled is None:
        return X
    import dask.array as da

    from .._chunks._dask import as_dask_points

    Xu = as_dask_points(X_unlabeled if is_lazy(X_unlabeled)
                        else da.from_array(np.asarray(X_unlabeled, dtype=np.float64)),
                        name="X_unlabeled")
    if Xu.shape[1] != X.shape[1]:
        raise ValueError(f"X_unlabeled has {Xu.shape[1]} features, X has {X.shape[1]}.")
    return da.concatenate([X, Xu], axis=0)


def labelled_rows(y, n: int, is_labelled):
    """``(indices, values)`` of the labelled entries of ``y`` (numpy or dask, one entry
    per row of the cloud); ``is_labelled(block) -> bool mask`` marks them."""
    if y is None:
        raise ValueError("y is required (NaN or -1 marks unlabelled rows).")
    shape = y.shape if hasattr(y, "shape") else np.shape(y)
    if len(shape) == 2 and shape[1] == 1:
        y = y[:, 0]
        shape = (shape[0],)
    if len(shape) != 1:
        raise ValueError(f"y must be 1-d (one target per row of X); got shape {shape}.")
    if shape[0] != n:
        raise ValueError(f"y must have one entry per row of X; got {shape[0]} targets for "
                         f"{n} rows.")
    if is_lazy(y):
        from .._chunks._dask import flatnonzero_blocks as dask_labelled_rows

        return dask_labelled_rows(y, is_labelled)
    y = np.asarray(y)
    idx = np.flatnonzero(is_labelled(y))
    return idx, y[idx]


def label_components(eigenpairs, labelled: np.ndarray, stacklevel: int = 3):
    """Which connected components hold a labelled point (``(n_components,)`` bool; None
    when components are not tracked), warning with the number of points in the others -
    counted from the components' sizes, without an ``n``-sized mask."""
    comp = eigenpairs.component_rows(labelled)
    sizes = getattr(eigenpairs, "component_sizes", None)
    if comp is None or sizes is None:
        return None
    has_label = np.zeros(max(eigenpairs.n_components, int(comp.max()) + 1), dtype=bool)
    has_label[comp] = True
    sizes = np.asarray(sizes)
    empty = ~has_label[:sizes.size] & (sizes > 0)
    if empty.any():
        warnings.warn(f"{int(sizes[empty].sum())} point(s) lie in {int(empty.sum())} "
                      f"connected part(s) of the graph that hold no labelled point; they get "
                      f"the prior prediction. Label a point there, or connect the graph "
                      f"(larger n_neighbors or bandwidth).", UserWarning, stacklevel=stacklevel)
    return has_label
