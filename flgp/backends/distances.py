"""The backends' distance work: dense squared distances (torch), KeOps nearest induced
points, Gaussian kernel products and smallest distances without storing ``n x m``."""

from __future__ import annotations

import warnings

import numpy as np

from .choice import _cuda_available

__all__ = ["pairwise_sq_distances", "keops_nearest", "gaussian_matmul", "min_sq_distances"]


def pairwise_sq_distances(X, U):
    """Dense squared Euclidean distances ``(n, s)`` between torch tensors, by the GEMM
    identity ``|x|^2 - 2 x.u + |u|^2``, clamped at zero."""
    d2 = (X * X).sum(1, keepdim=True) - 2.0 * (X @ U.T) + (U * U).sum(1)[None, :]
    return d2.clamp_min_(0.0)


def keops_nearest(X: np.ndarray, U: np.ndarray, n_neighbors: int,
                  chunk: int = 2_000_000) -> np.ndarray | None:
    """Indices ``(n, r)`` of each row's ``r`` nearest rows of ``U`` by KeOps ``argKmin``, or
    ``None`` (with a warning) when pykeops fails, so the caller can fall back to torch.

    Distances are ``sum (x - u)^2`` (no GEMM cancellation) in float32 on points centred on
    ``U``'s mean, in chunks of ``chunk`` rows.
    """
    import torch
    from pykeops.torch import LazyTensor

    device = "cuda" if _cuda_available() else "cpu"
    centre = U.mean(axis=0, keepdims=True)
    Ut = torch.from_numpy(np.ascontiguousarray(U - centre, dtype=np.float32)).to(device)
    u = LazyTensor(Ut[None, :, :])
    out = np.empty((X.shape[0], int(n_neighbors)), dtype=np.int64)
    try:
        for start in range(0, X.shape[0], chunk):
            stop = min(X.shape[0], start + chunk)
            Xt = torch.from_numpy(np.ascontiguousarray(X[start:stop] - centre,
                                                       dtype=np.float32)).to(device)
            d2 = ((LazyTensor(Xt[:, None, :]) - u) ** 2).sum(-1)
            idx = d2.argKmin(int(n_neighbors), dim=1)
            out[start:stop] = idx.reshape(stop - start, -1).long().cpu().numpy()
    except Exception as exc:    # compilation or runtime failure inside KeOps
        warnings.warn(f"pykeops failed ({type(exc).__name__}: {str(exc)[:200]}); using the "
                      f"torch backend.", RuntimeWarning, stacklevel=3)
        return None
    return out


def gaussian_matmul(X: np.ndarray, Y: np.ndarray, epsilon: float, M: np.ndarray, *,
                    log_shift: np.ndarray | None = None, backend: str = "torch",
                    chunk_entries: int = 4_000_000) -> np.ndarray:
    """``K M`` with ``K_ij = exp(-|x_i - y_j|^2 / epsilon + log_shift_i)`` (float64), without
    storing ``K``: a KeOps reduction, or torch in chunks of ``chunk_entries / len(Y)`` rows.
    """
    import torch

    n, m = X.shape[0], Y.shape[0]
    shift = np.zeros(n) if log_shift is None else np.asarray(log_shift, dtype=np.float64)
    M = np.ascontiguousarray(M, dtype=np.float64).reshape(m, -1)
    if backend == "keops":
        from pykeops.torch import LazyTensor

        device = "cuda" if _cuda_available() else "cpu"
        Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)).to(device)
        Yt = torch.from_numpy(np.ascontiguousarray(Y, dtype=np.float64)).to(device)
        st = torch.from_numpy(np.ascontiguousarray(shift)).to(device)
        d2 = ((LazyTensor(Xt[:, None, :]) - LazyTensor(Yt[None, :, :])) ** 2).sum(-1)
        K = (-d2 / float(epsilon) + LazyTensor(st[:, None, None])).exp()
        return (K @ torch.from_numpy(M).to(device)).cpu().numpy()
    Yt = torch.from_numpy(np.ascontiguousarray(Y, dtype=np.float64))
    Mt = torch.from_numpy(M)
    out = np.empty((n, M.shape[1]))
    rows = max(1, chunk_entries // max(m, 1))
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        Xc = torch.from_numpy(np.ascontiguousarray(X[start:stop], dtype=np.float64))
        K = pairwise_sq_distances(Xc, Yt).mul_(-1.0 / float(epsilon))
        K.add_(torch.from_numpy(shift[start:stop])[:, None]).exp_()
        out[start:stop] = (K @ Mt).numpy()
    return out


def min_sq_distances(X: np.ndarray, Y: np.ndarray, *, backend: str = "torch",
                     chunk_entries: int = 4_000_000) -> np.ndarray:
    """``min_j |x_i - y_j|^2`` for every row of ``X`` (KeOps ``Min`` or torch chunks)."""
    import torch

    if backend == "keops":
        from pykeops.torch import LazyTensor

        device = "cuda" if _cuda_available() else "cpu"
        Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)).to(device)
        Yt = torch.from_numpy(np.ascontiguousarray(Y, dtype=np.float64)).to(device)
        d2 = ((LazyTensor(Xt[:, None, :]) - LazyTensor(Yt[None, :, :])) ** 2).sum(-1)
        return d2.min(dim=1).reshape(-1).cpu().numpy()
    Yt = torch.from_numpy(np.ascontiguousarray(Y, dtype=np.float64))
    out = np.empty(X.shape[0])
    rows = max(1, chunk_entries // max(Y.shape[0], 1))
    for start in range(0, X.shape[0], rows):
        stop = min(X.shape[0], start + rows)
        Xc = torch.from_numpy(np.ascontiguousarray(X[start:stop], dtype=np.float64))
        out[start:stop] = pairwise_sq_distances(Xc, Yt).min(1).values.numpy()
    return out
