"""Backends for the distance work: finding each point's nearest induced points (and k-means
assignments).

* ``"torch"`` — the compiled anchored search (:mod:`flgp.backends.compiled`; scipy's k-d
  tree without the compiled kernels) up to 16 dimensions, chunked float32 GEMM distances
  above (numpy's BLAS despite the name); memory ``O(chunk x s)``.
* ``"keops"`` — pykeops ``LazyTensor`` ``argKmin`` reductions: nothing ``n x s`` is stored;
  each formula compiles on first use (then cached); runs on the GPU when CUDA is found.
* ``"auto"`` (default) — keops when pykeops is installed, CUDA is present and a test
  reduction succeeds in a child process (:func:`keops_cuda_probe`), torch otherwise (on a
  CPU torch is as fast or faster; ``docs/benchmarks.md``).

``"keops"`` without a working pykeops falls back to torch with a warning. Backends only
rank candidates; kept squared distances are recomputed exactly in float64, so backends
agree to rounding. :mod:`flgp.backends.compiled` holds the compiled row kernels.
"""

from .choice import BACKENDS, keops_available, keops_cuda_probe, resolve_backend
from .distances import gaussian_matmul, keops_nearest, min_sq_distances, pairwise_sq_distances
from .threads import cpu_threads, limit_blas_threads

__all__ = ["BACKENDS", "cpu_threads", "limit_blas_threads", "resolve_backend", "keops_available",
           "keops_cuda_probe", "keops_nearest", "pairwise_sq_distances", "gaussian_matmul",
           "min_sq_distances"]
