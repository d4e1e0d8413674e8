"""Compute backends for the distance work of the engine: who finds each point's nearest
induced points (and the k-means assignments).

* ``"torch"`` — flgp's compiled anchored search (:mod:`flgp.backends.compiled`; scipy's
  k-d tree where the compiled kernels are not in use) up to 16 dimensions, chunked
  float32 GEMM distances above (numpy's BLAS; the name is historical); memory
  ``O(chunk x s)``.
* ``"keops"`` — pykeops ``LazyTensor`` reductions (``argKmin`` over symbolic
  ``|x - u|^2``): nothing of size ``n x s`` is ever stored; compiled on first use of each
  formula (seconds, cached afterwards); runs on the GPU when pykeops finds CUDA.
* ``"auto"`` (default) — keops when pykeops is installed, a CUDA device is present *and*
  one test reduction on that device succeeds in a child process (:func:`keops_cuda_probe`:
  a pykeops that crashes must not take the user's process with it), torch otherwise: on a CPU the k-d tree and the GEMM are as fast or faster (see
  ``docs/benchmarks.md``).

Asking for ``"keops"`` without a working pykeops falls back to torch with a one-line
warning. Both backends rank candidates only; the engine recomputes the kept squared
distances exactly in float64, so the backends agree to rounding.

:mod:`flgp.backends.compiled` holds flgp's compiled row kernels (the search above, the LAE
weights, the products and transition rows of a pass, ...), each with a numpy twin.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from .._validation import check_option

__all__ = ["BACKENDS", "cpu_threads", "limit_blas_threads", "resolve_backend", "keops_available",
           "keops_cuda_probe", "keops_nearest",
           "pairwise_sq_distances", "gaussian_matmul", "min_sq_distances"]

BACKENDS = ("auto", "torch", "keops")


# One small reduction on the GPU, run in a child process before flgp first uses KeOps there:
# a pykeops that crashes would otherwise take the user's process with it (pykeops 2.3
# segfaults in its CUDA code generation under CUDA 13 / torch 2.11, measured on an H200).
KEOPS_CUDA_PROBE = """
import torch
from pykeops.torch import LazyTensor
x = torch.rand(64, 3, device="cuda")
u = torch.rand(32, 3, device="cuda")
idx = ((LazyTensor(x[:, None, :]) - LazyTensor(u[None, :, :])) ** 2).sum(-1).argKmin(2, dim=1)
assert tuple(idx.shape) == (64, 2)
"""
KEOPS_PROBE_TIMEOUT = 600.0   # seconds; the first compilation of KeOps' engine takes ~30 s


@functools.lru_cache(maxsize=1)
def _keops_status() -> tuple[bool, str]:
    try:
        import pykeops  # noqa: F401
        from pykeops.torch import LazyTensor  # noqa: F401
    except Exception as exc:   # ImportError, or a broken installation
        return False, f"pykeops is not usable ({type(exc).__name__}: {exc})"
    if _cuda_available():
        return keops_cuda_probe()
    return True, ""


@functools.lru_cache(maxsize=4)
def keops_cuda_probe(code: str = KEOPS_CUDA_PROBE) -> tuple[bool, str]:
    """``(works, why not)`` of one KeOps reduction on the GPU, run in a child process (once
    a process; KeOps caches its compilation on disk, so later probes are quick)."""
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=KEOPS_PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, (f"pykeops did not finish a test reduction on the GPU within "
                       f"{KEOPS_PROBE_TIMEOUT:.0f} s")
    if proc.returncode != 0:
        last = (proc.stderr or "").strip().splitlines()[-1:]
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        return False, (f"pykeops failed a test reduction on the GPU in a child process "
                       f"({how}{': ' + last[0][:200] if last else ''})")
    return True, ""


def keops_available() -> bool:
    """Whether pykeops imports and, where CUDA is present, runs one test reduction on the
    GPU in a child process (:func:`keops_cuda_probe`)."""
    return _keops_status()[0]


@functools.lru_cache(maxsize=None)
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def limit_blas_threads(n: int = 1):
    """Context in which the loaded BLAS libraries run on ``n`` threads (threadpoolctl),
    through one controller made at first use: making one scans the process's loaded
    libraries (about 5 ms), and one fit enters some 30 such limits."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"limit_blas_threads needs a whole number of threads >= 1; got "
                         f"{n!r}.")
    return _blas_controller().limit(limits=int(n), user_api="blas")


def cpu_threads() -> int:
    """Threads for the engine's CPU work outside torch (``scipy.spatial.cKDTree`` queries):
    torch's own setting (``torch.set_num_threads``, or ``OMP_NUM_THREADS`` at start-up), so
    one knob limits everything."""
    import torch

    return max(1, int(torch.get_num_threads()))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_backend(backend: str) -> str:
    """``"auto" | "torch" | "keops"`` -> the backend that will run ("torch" or "keops")."""
    check_option(backend, "backend", BACKENDS)
    if backend == "torch":
        return "torch"
    if backend == "auto":      # pykeops is not even imported on a machine without CUDA
        return "keops" if _cuda_available() and _keops_status()[0] else "torch"
    ok, why = _keops_status()
    if not ok:
        warnings.warn(f"backend='keops' requested but {why}; using the torch backend "
                      f"(pip install 'flgp[keops]').", RuntimeWarning, stacklevel=3)
        return "torch"
    return "keops"


def pairwise_sq_distances(X, U):
    """Dense squared Euclidean distances ``(n, s)`` between torch tensors, by the GEMM
    identity ``|x|^2 - 2 x.u + |u|^2``, clamped at zero."""
    d2 = (X * X).sum(1, keepdim=True) - 2.0 * (X @ U.T) + (U * U).sum(1)[None, :]
    return d2.clamp_min_(0.0)


def keops_nearest(X: np.ndarray, U: np.ndarray, n_neighbors: int,
                  chunk: int = 2_000_000) -> np.ndarray | None:
    """Indices ``(n, r)`` of each row's ``r`` nearest rows of ``U`` by a KeOps
    ``argKmin``, or ``None`` (after a one-line warning) when pykeops fails to compile or
    run, so the caller can fall back to torch.

    Distances are formed as ``sum (x - u)^2`` (no GEMM cancellation) in float32 on the
    points centred on ``U``'s mean; rows are processed in chunks of ``chunk`` points.
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
    """``K M`` with ``K_ij = exp(-|x_i - y_j|^2 / epsilon + log_shift_i)`` (float64),
    without storing ``K``: a KeOps reduction, or torch in row chunks of
    ``chunk_entries / len(Y)`` rows.
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
