"""Blocks of rows: the block size of a pass, and the driver that runs it.

Every pass over the points (neighbour search, cross-kernel weights, column sums, the
``s x s`` Gram matrix, eigenvector rows, predictions) is a function of a block of rows,
``fn(X_block, start, stop)``; global quantities are merged per-block *partials*
(:func:`merge_partials`). Drivers (:func:`blocks_of` picks one):

* :class:`InMemoryBlocks` - a numpy array (or just a row count, when the pass reads stored
  rows): blocks on threads, partials merged in order;
* :class:`flgp._chunks.dask_blocks.DaskBlocks` - a dask array: one task per chunk, partials
  merged by tree reduction, mapped outputs returned lazily. Only this module imports dask.

Block size
----------
``chunk_size`` (rows), unless given, is the most rows whose working set (:func:`row_bytes`)
fits in ``working_memory`` MiB (:func:`flgp.get_config`; 64 by default), clipped to
``[1024, 2**20]``: about 13,000 rows at the defaults (``p = 3``, ``r = 3``, ``M = 100``).
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
