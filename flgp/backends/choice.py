"""Backend choice: :func:`resolve_backend` and the pykeops checks (see :mod:`flgp.backends`)."""

from __future__ import annotations

import functools
import warnings


__all__ = ["BACKENDS", "resolve_backend", "keops_available", "keops_cuda_probe",
           "KEOPS_CUDA_PROBE", "KEOPS_PROBE_TIMEOUT"]

BACKENDS = ("auto", "torch", "keops")


# Run in a child process before first GPU use of KeOps, so a crashing pykeops (e.g. 2.3
# segfaulting under CUDA 13 / torch 2.11) cannot take the user's process with it.
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
    """``(works, why not)`` of one KeOps reduction on the GPU, run in a child process (once per
    process; KeOps caches its compilation on disk)."""
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


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_backend(backend: str) -> str:
    """``"auto" | "torch" | "keops"`` -> the backend that will run ("torch" or "keops")."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; choose one of "
                         f"{sorted(BACKENDS)}.")
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
