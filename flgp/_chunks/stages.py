"""Stage timers and work counters read by the benchmarks (free when :func:`record_stages` is
not active)."""

from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["record_stages", "stage", "count", "StageLog"]


class StageLog(list):
    """``(stage, seconds)`` pairs in the order stages ended, plus ``counts``: work counters
    (``name -> total``)."""

    def __init__(self):
        super().__init__()
        self.counts: dict = {}


_RECORDER: StageLog | None = None
_COUNT_LOCK = threading.Lock()


@contextlib.contextmanager
def record_stages():
    """Collect ``(stage, seconds)`` for the stages that run while active (induced points, passes
    over the points, eigendecomposition, hyperparameter search, transduction, ...)::

        with flgp.record_stages() as stages:
            model.fit(X, y)
        print(stages)          # [("induced points", 0.41), ("pass 1", 0.22), ...]

    A name with ``/`` is a sub-stage of the one before (``"pass 1/neighbour search"``), timed
    inside the blocks in thread-seconds (may exceed the stage's wall time). ``stages.counts``
    holds work counters (flops, rows, iterations) used by ``benchmarks/profile.py``. Recording
    is process-wide: stages in other threads are recorded too.
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
