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

from .choice import BACKENDS, keops_available, keops_cuda_probe, resolve_backend
from .distances import gaussian_matmul, keops_nearest, min_sq_distances, pairwise_sq_distances
from .threads import cpu_threads, limit_blas_threads

__all__ = ["BACKENDS", "cpu_threads", "limit_blas_threads", "resolve_backend", "keops_available",
           "keops_cuda_probe", "keops_nearest", "pairwise_sq_distances", "gaussian_matmul",
           "min_sq_distances"]
