"""Blocks of rows: how big a block one pass works on, and the one driver that runs a pass.

Every pass of flgp over the points of a cloud (neighbour search, cross-kernel weights,
column sums, the ``s x s`` Gram matrix, eigenvector rows, predictions) is a function of a
block of rows, ``fn(X_block, start, stop)``; every global quantity is a combination of
per-block *partials* (``s``-vectors, ``s x s`` matrices, by :func:`merge_partials`). A
*driver* runs such a function over a cloud:

* :class:`InMemoryBlocks` - a numpy array (or only a number of rows, when the pass reads
  rows that an earlier pass stored): blocks on threads, partials merged in order;
* :class:`flgp._chunks.dask_blocks.DaskBlocks` - a dask array: one Dask task per chunk (itself
  split into blocks of the budgeted size), partials merged by a tree reduction, mapped
  outputs returned as lazy dask arrays.

:func:`blocks_of` picks the driver for an array. The graph, the eigenpairs and the
estimators are written once against this interface; nothing but
:mod:`flgp._chunks.dask_blocks` imports dask, and only when a dask (or zarr) array is passed.

Block size
----------
``chunk_size`` (rows) is, unless given, chosen from a memory budget: the largest number of
rows whose working set, estimated by :func:`row_bytes`, fits in ``working_memory`` MiB
(:func:`flgp.get_config`; 64 MiB by default), clipped to ``[1024, 2**20]``. At the package
defaults (``p = 3``, ``r = 3``, ``M = 100``) a row costs about 5 kB, so a block holds about
13,000 rows.
"""

from .blocks import (default_chunk_size, imap_threads, is_dask_array, is_zarr_array,
                     map_row_ranges, map_threads, merge_partials, one_thread_each, row_bytes,
                     row_ranges, take_rows)
from .drivers import InMemoryBlocks, blocks_of, is_lazy
from .stages import StageLog, count, record_stages, stage

__all__ = ["row_bytes", "default_chunk_size", "row_ranges", "map_threads", "map_row_ranges",
           "imap_threads", "one_thread_each", "is_dask_array", "is_zarr_array", "is_lazy",
           "take_rows", "merge_partials", "InMemoryBlocks", "blocks_of", "record_stages",
           "stage", "count", "StageLog"]
