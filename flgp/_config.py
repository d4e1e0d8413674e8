"""flgp's global settings: the memory budget of one block of rows, and whether the passes
use the compiled row kernels.

Every pass over the points runs over blocks of rows (:mod:`flgp._chunks`); how many rows a
block holds follows ``working_memory`` (MiB, default 64; the measurements behind the
default are in docs/distributed.md). ``compiled`` (default True) lets the passes use
flgp's compiled row kernels (:mod:`flgp.backends.compiled`) where they were built; False runs their
numpy twins, which give the same results to rounding.
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

__all__ = ["get_config", "set_config", "config_context"]

_GLOBAL = {"working_memory": 64.0, "compiled": True}
_LOCK = threading.Lock()
# the values a config_context set in this thread (innermost last wins): contexts in two
# threads never see, or restore, each other's values
_LOCAL = threading.local()
# the largest budget of a block (MiB): a petabyte; block sizes are clipped far below it
MAX_WORKING_MEMORY = 1e9


def _overrides() -> dict:
    return getattr(_LOCAL, "overrides", None) or {}


def get_config() -> dict:
    """flgp's settings as this thread sees them: ``working_memory``, the memory budget
    (MiB) of one block of rows in a pass over the points (default 64), and ``compiled``,
    whether the passes use the compiled row kernels where they were built (default True).
    :func:`set_config` sets them for every thread; :func:`config_context` for the
    thread it runs in (and the worker threads flgp starts from it)."""
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
    """Temporarily change flgp's settings (:func:`set_config`) in this thread; the old ones
    come back on exit. Contexts in other threads are independent of it; the worker threads
    flgp's passes start inside it see its values.

    Parameters
    ----------
    working_memory : float, optional
        Memory budget (MiB) of one block of rows in a pass over the points (see
        :func:`get_config`); ``None`` keeps the current value.
    compiled : bool, optional
        Whether the passes use the compiled row kernels (see :func:`get_config`); ``None``
        keeps the current value.

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
    """The machine's memory in bytes (``inf`` where the system does not say): what the
    fits' memory rules compare their expected peaks with (not the memory free at the
    moment, so that the path a fit takes does not change from one run to the next)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return float("inf")
