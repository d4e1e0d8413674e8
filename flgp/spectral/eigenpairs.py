"""The :class:`Eigenpairs` type shared by FLGP, GLGP and Nyström-GLGP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

__all__ = ["Eigenpairs", "deterministic_sign_flip", "symmetric_eigh"]


@dataclass
class Eigenpairs:
    r"""Graph-Laplacian eigenpairs of a point cloud with an out-of-sample map.

    The heat kernel on the cloud is

    .. math:: C_t = c \sum_{l \le M} e^{-t \lambda_l} v_l v_l^\top

    with ``c = kernel_scale`` (``n`` for FLGP and GLGP, ``s`` for Nyström-GLGP).

    Attributes
    ----------
    eigenvalues : ndarray (M,)
        ``λ_l`` ascending, in ``[0, 1]``.
    eigenvectors : ndarray (n, M)
        ``v_l`` at the cloud's points.
    kernel_scale : float
    extension : callable
        ``extension(X_new) -> ndarray (n_new, M)``: eigenvector values at new points; at a
        point of the cloud it returns that point's row of ``eigenvectors``.
    method : str
        "flgp", "glgp" or "nystrom".
    n_components : int
        Connected components of the graph (1 when connected).
    singular_values : ndarray (M,) or None
        FLGP's ``σ_l`` of ``A Λ^{-1/2}``.
    component_labels : ndarray (n,) or None
        Connected component of each cloud point (None: one component).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    kernel_scale: float
    extension: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    method: str = "flgp"
    n_components: int = 1
    singular_values: np.ndarray | None = None
    component_labels: np.ndarray | None = None

    @property
    def n_samples(self) -> int:
        return self.eigenvectors.shape[0]

    @property
    def n_eigenpairs(self) -> int:
        return self.eigenvalues.shape[0]

    def extend(self, X_new) -> np.ndarray:
        """Eigenvector values at new points, shape ``(n_new, M)``."""
        return self.extension(X_new)

    def extend_with_components(self, X_new, return_nearest: bool = False):
        """Eigenvector values at new points and their connected component (None when the
        graph's components are not tracked), computed in one pass. ``return_nearest``: also
        each point's squared distance to its nearest induced point where the neighbour
        search finds it on the way (FLGP), else None."""
        fn = getattr(self.extension, "with_components", None)
        if fn is None or self.component_labels is None:
            V = self.extension(X_new)
            return (V, None, None) if return_nearest else (V, None)
        return fn(X_new, return_nearest=return_nearest)

    def __repr__(self) -> str:
        return (f"Eigenpairs(method={self.method!r}, n_samples={self.n_samples}, "
                f"n_eigenpairs={self.n_eigenpairs}, n_components={self.n_components})")


def deterministic_sign_flip(vectors: np.ndarray) -> np.ndarray:
    """Signs (+1/-1) that make each column's largest-magnitude entry positive."""
    rows = np.argmax(np.abs(vectors), axis=0)
    signs = np.sign(vectors[rows, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return signs


# up to this size a dense eigh runs on one thread (see symmetric_eigh)
_SINGLE_THREAD_EIGH_MAX = 1024


def symmetric_eigh(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All eigenpairs of a dense symmetric matrix, eigenvalues ascending (float64).

    Through ``torch.linalg.eigh`` (LAPACK ``syevd`` from the MKL that torch ships with; on
    an idle 2-core machine 30-40 ms for the 600 x 600 FLGP Gram matrix against 64 ms for
    scipy's OpenBLAS ``eigh``). Matrices up to 1024 x 1024 are decomposed on **one
    thread**: the tridiagonal reduction synchronises its threads at every column, and on
    a machine where another process holds a core two threads took 1.4-2 s for the
    600 x 600 matrix instead of 60 ms (scipy: 1-4 s). Larger matrices use torch's thread
    setting, where the arithmetic outweighs the synchronisation."""
    A = np.ascontiguousarray(A, dtype=np.float64)
    threads = torch.get_num_threads()
    single = A.shape[0] <= _SINGLE_THREAD_EIGH_MAX and threads > 1
    if single:
        torch.set_num_threads(1)
    try:
        w, V = torch.linalg.eigh(torch.from_numpy(A))
    finally:
        if single:
            torch.set_num_threads(threads)
    return w.numpy(), V.numpy()
