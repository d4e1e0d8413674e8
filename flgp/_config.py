"""flgp's global settings: ``working_memory`` (MiB, default 64), the memory budget of one
block of rows in a pass over the points (:mod:`flgp._chunks`; see docs/distributed.md),
and ``compiled`` (default True): use the compiled row kernels
(:mod:`flgp.backends.compiled`) where built; False runs their numpy twins (same results
to rounding).
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

__all__ = ["get_config", "set_config", "config_context"]

_GLOBAL = {"working_memory": 64.0, "compiled": True}
_LOCK = threading.Lock()
# this thread's config_context values (innermost wins); threads never share them
_LOCAL = threading.local()
# largest block budget (MiB): a petabyte
MAX_WORKING_MEMORY = 1e9


def _overrides() -> dict:
    return getattr(_LOCAL, "overrides", None) or {}


def get_config() -> dict:
    """flgp's settings as this thread sees them (``working_memory``, ``compiled``; see the
    module notes). :func:`set_config` sets them for every thread; :func:`config_context` for
    its thread and the worker threads flgp starts from it."""
    out = dict(_GLOBAL)
    out.update(_overrides())
    return out


def _checked(working_memory, compiled) -> dict:
    out = {}
    if compiled is not None:
        if not isinstance(compiled, (bool, np.bool_)):
            raise TypeError(f"compiled must be True or False; got {compiled!r}.")
        out["compiled"] = bool(compiled)
    if working_memory is not None:
        if isinstance(working_memory, bool) or not isinstance(working_memory, (int, float)) \
                or not np.isfinite(working_memory) or not \
                0 < working_memory <= MAX_WORKING_MEMORY:
            raise ValueError(f"working_memory must be a positive number of MiB, at most "
                             f"{MAX_WORKING_MEMORY:.0e} (the default is 64); got "
                             f"{working_memory!r}.")
        out["working_memory"] = float(working_memory)
    return out


def set_config(*, working_memory: float | None = None, compiled: bool | None = None) -> None:
    """Set flgp's settings (see :func:`get_config`) for every thread; inside a
    :func:`config_context` the new value also replaces the context's until it exits."""
    values = _checked(working_memory, compiled)
    with _LOCK:
        _GLOBAL.update(values)
    own = _overrides()
    if own:
        _LOCAL.overrides = {**own, **{k: v for k, v in values.items() if k in own}}


@contextlib.contextmanager
def config_context(*, working_memory: float | None = None, compiled: bool | None = None):
    """Temporarily change flgp's settings (:func:`set_config`) in this thread, restored on exit.
    Independent of contexts in other threads; flgp's worker threads started inside see its
    values.

    Parameters
    ----------
    working_memory : float, optional
        Memory budget (MiB) of one block of rows; ``None`` keeps the current value.
    compiled : bool, optional
        Whether the passes use the compiled row kernels; ``None`` keeps the current value.

    Examples
    --------
    >>> import flgp
    >>> before = flgp.get_config()
    >>> with flgp.config_context(working_memory=256):
    ...     print(flgp.get_config()["working_memory"])
    256.0
    >>> flgp.get_config() == before
    True
    """
    values = _checked(working_memory, compiled)
    old = getattr(_LOCAL, "overrides", None)
    _LOCAL.overrides = {**(old or {}), **values}
    try:
        yield
    finally:
        _LOCAL.overrides = old


def thread_settings() -> dict:
    """This thread's :func:`config_context` values, for :func:`in_settings` in a worker
    thread started from it."""
    return dict(_overrides())


@contextlib.contextmanager
def in_settings(settings: dict):
    """Run a worker thread's task under the :func:`config_context` values of the thread
    that started it (:func:`thread_settings`)."""
    old = getattr(_LOCAL, "overrides", None)
    _LOCAL.overrides = settings or None
    try:
        yield
    finally:
        _LOCAL.overrides = old


def working_memory_bytes() -> float:
    """The current budget of one block, in bytes."""
    return get_config()["working_memory"] * 2**20


def physical_memory() -> float:
    """The machine's memory in bytes (``inf`` if unknown), used by the fits' memory rules (not
    the free memory, so the path a fit takes is reproducible)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return float("inf")
