r"""Cross transition from the cloud to its induced points: ``Z``, ``A = D^{-1} Z`` and ``Λ``.

He et al. (FLGP, Sec. 3.1, eq. 4):

.. math::

    Z_{ij} = \frac{n_j K_{ij}}{\sum_q K_{qj} \sum_q n_q K_{iq}}, \qquad
    A = D^{-1} Z, \qquad \Lambda_{jj} = \sum_i A_{ij},

with ``n_j = 1`` for random subsampling. The row factor of ``Z`` cancels in ``A``, so

.. math:: A_{ij} = \operatorname{softmax}_j\bigl(\log n_j + \log K_{ij} - \log c_j\bigr),
          \quad c_j = \textstyle\sum_q K_{qj},

evaluated in log space, so a far point whose kernel values all underflow still gets
exact probabilities instead of 0/0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..backends import compiled

__all__ = ["CrossTransition", "column_lse", "lse_finish", "column_log_sums", "transition_rows",
           "cross_transition"]


@dataclass
class CrossTransition:
    """Sparse ``n x s`` row-stochastic matrix ``A`` stored as ``r`` entries per row.

    Attributes
    ----------
    indices : ndarray (n, r) of int64
        Column (induced point) of each stored entry.
    values : ndarray (n, r) of float64
        ``A_ij``; each row sums to one.
    degrees : ndarray (s,)
        ``Λ_jj = Σ_i A_ij``; zero for an induced point that no row uses.
    """

    indices: np.ndarray
    values: np.ndarray
    degrees: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.indices.shape[0], self.degrees.shape[0]

    def to_sparse(self) -> sp.csr_matrix:
        """``A`` as a scipy CSR matrix (``n r`` stored entries)."""
        n, r = self.indices.shape
        indptr = np.arange(0, n * r + 1, r, dtype=np.int64)
        return sp.csr_matrix((self.values.ravel(), self.indices.ravel(), indptr),
                             shape=self.shape)


def column_lse(log_kernel: np.ndarray, indices: np.ndarray, n_induced: int) -> np.ndarray:
    """Column sums of ``K`` over some rows as a ``(2, s)`` pair: the column maxima of
    ``log K`` and ``Σ exp(log K - max)`` (``-inf`` and 0 for untouched columns), which
    blocks merge without underflow (:func:`flgp._chunks.merge_partials`);
    :func:`lse_finish` turns a pair into ``log c_j``."""
    lk = np.ascontiguousarray(log_kernel, dtype=np.float64).ravel()
    idx = np.ascontiguousarray(indices).ravel()
    col_max = np.full(n_induced, -np.inf)
    np.maximum.at(col_max, idx, lk)
    safe_max = np.where(np.isfinite(col_max), col_max, 0.0)
    sums = np.bincount(idx, weights=np.exp(lk - safe_max[idx]), minlength=n_induced)
    return np.stack([col_max, sums])


def lse_finish(pair: np.ndarray) -> np.ndarray:
    """``log c_j`` from a ``(2, s)`` pair of :func:`column_lse` (``-inf`` for unused
    columns)."""
    col_max, sums = pair
    safe = np.where(np.isfinite(col_max), col_max, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(sums) + safe


def column_log_sums(log_kernel: np.ndarray, indices: np.ndarray, n_induced: int) -> np.ndarray:
    """``log c_j = log Σ_i K_ij`` over the stored entries (``-inf`` for unused columns)."""
    return lse_finish(column_lse(log_kernel, indices, n_induced))


def transition_rows(log_kernel: np.ndarray, indices: np.ndarray, log_colsum: np.ndarray,
                    log_sizes: np.ndarray | None = None) -> np.ndarray:
    """Rows of ``A`` for kernel rows ``log K`` of any points. Columns with ``c_j = 0`` get
    probability 0; ``ValueError`` when a row has no reachable induced point."""
    if compiled.enabled():
        values, bad = compiled.transition_rows(log_kernel, indices, log_colsum, log_sizes)
        if bad:
            _raise_unreachable(bad)
        return values
    with np.errstate(invalid="ignore"):             # -inf - -inf: replaced just below
        logits = log_kernel - log_colsum[indices]
        if log_sizes is not None:
            logits = logits + log_sizes[indices]
    logits = np.where(np.isfinite(log_colsum[indices]), logits, -np.inf)
    row_max = logits.max(axis=1, keepdims=True)
    bad = ~np.isfinite(row_max[:, 0])
    if bad.any():
        _raise_unreachable(int(bad.sum()))
    w = np.exp(logits - row_max)
    return w / w.sum(axis=1, keepdims=True)


def _raise_unreachable(n_bad: int):
    raise ValueError(
        f"{n_bad} point(s) have zero kernel weight to every one of their nearest "
        f"induced points, so the graph falls apart there. Increase n_neighbors or the "
        f"bandwidth, or use fewer induced points.")


def cross_transition(log_kernel: np.ndarray, indices: np.ndarray, n_induced: int,
                     sizes: np.ndarray | None = None):
    """Build ``A`` and ``Λ`` from the sparse log-kernel of the cloud.

    Returns
    -------
    transition : CrossTransition
    log_colsum : ndarray (s,)
        ``log c_j``, needed again to extend ``A`` to new points.
    """
    if not np.all(np.isfinite(log_kernel) | (log_kernel == -np.inf)):
        raise ValueError("kernel values must be finite or zero; got NaN or +inf.")
    log_colsum = column_log_sums(log_kernel, indices, n_induced)
    log_sizes = None if sizes is None else np.log(np.maximum(sizes, 0).astype(np.float64))
    values = transition_rows(log_kernel, indices, log_colsum, log_sizes)
    degrees = np.bincount(indices.ravel(), weights=values.ravel(), minlength=n_induced)
    return CrossTransition(indices=indices, values=values, degrees=degrees), log_colsum
