r"""The FLGP graph as functions of a block of rows, and the sums that join the blocks.

Every pass over the cloud is one of these functions applied to a block of rows ``X_b``
(``b`` rows); every global quantity is a combination of per-block *partials* — ``s``-vectors
and ``s x s`` matrices — by :func:`merge_partials`. The in-memory engine
(:func:`flgp.graph.build_cross_graph`) runs them over numpy blocks; the Dask engine
(:mod:`flgp._dask`) runs the very same functions as Dask tasks.

Passes (He et al., Algorithm 1, steps 2-4):

1. :meth:`CrossStep.rows` - each point's ``r`` nearest induced points, squared distances
   and log cross-kernel; partial :meth:`CrossStep.cloud_partial`: cluster sizes ``n_j``
   (k-means), the sum of the kept squared distances (SE default bandwidth), the largest
   nearest distance, and the column sums ``c_j = Σ_i K_ij`` as ``(max, Σ exp(· - max))``
   pairs so that no column underflows;
2. (SE with the default bandwidth only) the column sums, once the bandwidth is known;
3. :meth:`CrossStep.transition` - the rows of ``A``; partial :func:`products_partial`:
   ``Λ_jj = Σ_i A_ij``, the Gram matrix ``AᵀA`` (``s x s``) and how many points move to each
   induced point with the largest probability (the size of each connected component).

Nothing here imports dask, GPyTorch or scikit-learn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .cross_kernel import lae_weights, se_log_weights
from .neighbors import nearest_landmarks
from .transition import column_lse, lse_finish, transition_rows

__all__ = ["CrossStep", "products_partial", "merge_partials", "lse_partial", "lse_finish",
           "PRODUCT_ROW_BYTES"]

# bytes per row of the products pass (the block's sparse rows and the product's entries)
PRODUCT_ROW_BYTES = 8 * (4 * 9 + 6)


@dataclass
class CrossStep:
    """What the per-block functions need to know about the graph (small: ``O(s p)``).

    ``bandwidth`` is None for LAE and, for SE, until the default bandwidth is known;
    ``log_colsum`` and ``log_sizes`` are None until pass 1 has run.
    """

    points: np.ndarray
    kernel: str
    n_neighbors: int
    bandwidth: float | None = None
    lae_regularization: float = 0.0
    backend: str = "auto"
    log_colsum: np.ndarray | None = None
    log_sizes: np.ndarray | None = None

    @property
    def n_induced(self) -> int:
        return int(self.points.shape[0])

    def rows(self, X: np.ndarray, workers: int | None = None):
        """``(indices, sq_distances, log_kernel)`` of a block (``log_kernel`` None for SE
        while its bandwidth is unknown)."""
        idx, sq = nearest_landmarks(X, self.points, self.n_neighbors, backend=self.backend,
                                    workers=workers)
        return idx, sq, self.log_kernel(X, idx, sq)

    def log_kernel(self, X, idx, sq):
        """``log K`` on the kept pairs (``-inf`` where an LAE weight is 0)."""
        if self.kernel == "se":
            return None if self.bandwidth is None else se_log_weights(sq, self.bandwidth)
        with np.errstate(divide="ignore"):
            return np.log(lae_weights(X, self.points, idx,
                                      regularization=self.lae_regularization))

    def cloud_partial(self, idx, sq, log_kernel, sizes: bool) -> dict:
        """Pass 1's partial of a block."""
        s = self.n_induced
        out = {"sq_sum": np.array([float(sq.sum())]), "count": np.array([float(sq.size)]),
               "nearest_max": np.array([float(sq[:, 0].max()) if len(sq) else -np.inf])}
        if sizes:
            out["sizes"] = np.bincount(idx[:, 0], minlength=s).astype(np.float64)
        if log_kernel is not None:
            out["lse"] = lse_partial(log_kernel, idx, s)
        return out

    def transition(self, idx, log_kernel):
        """Rows of ``A`` (``r`` values each) from the log kernel."""
        return transition_rows(log_kernel, idx, self.log_colsum, self.log_sizes)


def lse_partial(log_kernel: np.ndarray, idx: np.ndarray, s: int) -> np.ndarray:
    """Column sums of ``K`` over a block as ``(2, s)`` (:func:`flgp.graph.transition.column_lse`),
    after checking that the kernel has no NaN or ``+inf``."""
    if not np.all(np.isfinite(log_kernel) | (log_kernel == -np.inf)):
        raise ValueError("kernel values must be finite or zero; got NaN or +inf.")
    return column_lse(log_kernel, idx, s)


def products_partial(idx: np.ndarray, values: np.ndarray, s: int) -> dict:
    """Pass 3's partial of a block of rows of ``A``: ``degrees`` (``Σ_i A_ij``), ``gram``
    (``AᵀA``, ``s x s``, a sparse CSR matrix: scipy's sparse product of the block's rows)
    and ``argmax`` (how many rows have their largest entry at each induced point)."""
    n, r = idx.shape
    A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, n * r + 1, r)),
                      shape=(n, s))
    gram = (A.T @ A).tocsr()
    top = idx[np.arange(n), values.argmax(axis=1)] if n else np.zeros(0, dtype=np.int64)
    return {"degrees": np.bincount(idx.ravel(), weights=values.ravel(), minlength=s),
            "gram": gram,
            "argmax": np.bincount(top, minlength=s).astype(np.float64)}


# how each partial combines across blocks
_MAX_FIELDS = ("nearest_max",)
_LSE_FIELDS = ("lse",)


def merge_partials(parts: list[dict]) -> dict:
    """Combine block partials: sums, maxima (``nearest_max``) and log-sum-exp pairs
    (``lse``, see :func:`lse_partial`)."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    out = {}
    for key in parts[0]:
        vals = [p[key] for p in parts]
        if key in _MAX_FIELDS:
            out[key] = np.max(np.stack(vals), axis=0)
        elif key in _LSE_FIELDS:
            maxima = np.stack([v[0] for v in vals])
            col_max = maxima.max(axis=0)
            safe = np.where(np.isfinite(col_max), col_max, 0.0)
            with np.errstate(invalid="ignore"):
                scale = np.where(np.isfinite(maxima), np.exp(maxima - safe), 0.0)
            out[key] = np.stack([col_max, (np.stack([v[1] for v in vals]) * scale).sum(0)])
        else:
            total = vals[0].copy() if not sp.issparse(vals[0]) else vals[0]
            for v in vals[1:]:
                if sp.issparse(total) and not sp.issparse(v):
                    total = v + total.toarray()
                else:
                    total = total + v
            out[key] = total
    return out
