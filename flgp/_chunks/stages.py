"""Stage timers and work counters: what the benchmarks read of a fit (no cost when no
:func:`record_stages` is active)."""

from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["record_stages", "stage", "count", "StageLog"]


class StageLog(list):
    """``(stage, seconds)`` pairs in the order the stages ended, and ``counts``: work
    counters (``name -> total``) that the benchmarks turn into arithmetic floors."""

    def __init__(self):
        super().__init__()
        self.counts: dict = {}


_RECORDER: StageLog | None = None
_COUNT_LOCK = threading.Lock()


@contextlib.contextmanager
def record_stages():
    """Where a fit spends its time: collect ``(stage, seconds)`` of the stages that run
    while active - the induced points, each pass over the points, the eigendecomposition,
    the hyperparameter search, the transduction; the full-resolution graph and scores
    (``flgp.record_stages``; the benchmarks' stage timers)::

        with flgp.record_stages() as stages:
            model.fit(X, y)
        print(stages)          # [("induced points", 0.41), ("pass 1", 0.22), ...]

    A name with a ``/`` is a part of the stage before it (``"pass 1/neighbour search"``),
    timed inside the blocks: its entries are thread-seconds, which on several threads add
    up to more than the stage's wall time. ``stages.counts`` holds work counters (flops,
    rows, iterations) that ``benchmarks/profile.py`` turns into arithmetic floors. Recording
    is process-wide: stages that run in other threads meanwhile are recorded too.
    """
    global _RECORDER
    previous, _RECORDER = _RECORDER, StageLog()
    try:
        yield _RECORDER
    finally:
        _RECORDER = previous


@contextlib.contextmanager
def stage(name: str):
    """Time a stage into the active :func:`record_stages` list (no cost otherwise)."""
    recorder = _RECORDER
    if recorder is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        recorder.append((name, time.perf_counter() - start))


def count(name: str, amount: float) -> None:
    """Add ``amount`` to the work counter ``name`` of the active :func:`record_stages`
    (floating-point operations, rows, iterations; nothing happens otherwise)."""
    recorder = _RECORDER
    if recorder is not None:
        with _COUNT_LOCK:       # counters are added to from threads (map_threads)
            recorder.counts[name] = recorder.counts.get(name, 0.0) + float(amount)
