"""Fingerprints of arrays: what the caches key on (an estimator's warm-start cache of its
cloud, the graph Matérn prior's matrix families of a graph)."""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["array_fingerprint"]


def array_fingerprint(X) -> tuple:
    """``(shape, dtype, crc32, adler32)`` of an array's bytes (about 25 ms for 70,000 x 100
    floats; both checksums agreeing on a different array is a 1-in-2^64 event)."""
    A = np.ascontiguousarray(X)
    buf = memoryview(A).cast("B") if A.size else b""
    return (A.shape, A.dtype.str, zlib.crc32(buf), zlib.adler32(buf))
