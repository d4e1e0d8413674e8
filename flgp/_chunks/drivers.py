"""The driver of a cloud: in memory or Dask (the package notes: :mod:`flgp._chunks`)."""

from __future__ import annotations

from .blocks import InMemoryBlocks, is_lazy

__all__ = ["blocks_of"]


def blocks_of(X):
    """The driver of a cloud: :class:`InMemoryBlocks` for a numpy array, the Dask driver
    for a dask (or zarr) array (whose shape must have been checked with
    :func:`flgp._chunks.dask_blocks.as_dask_points`)."""
    if is_lazy(X):
        from .dask_blocks import DaskBlocks      # imports dask: only for a dask array

        return DaskBlocks(X)
    return InMemoryBlocks(X)
