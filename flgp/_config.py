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
import threading

import numpy as np

__all__ = ["get_config", "set_config", "config_context"]

_CONFIG = {"working_memory": 64, "compiled": True}
_LOCK = threading.Lock()


def get_config() -> dict:
    """flgp's global settings: ``working_memory``, the memory budget (MiB) of one block of
    rows in a pass over the points (default 64), and ``compiled``, whether the passes use
    the compiled row kernels where they were built (default True)."""
    return dict(_CONFIG)


def set_config(*, working_memory: float | None = None, compiled: bool | None = None) -> None:
    """Set flgp's global settings (see :func:`get_config`)."""
    if compiled is not None:
        if not isinstance(compiled, (bool, np.bool_)):
            raise TypeError(f"compiled must be True or False; got {compiled!r}.")
        with _LOCK:
            _CONFIG["compiled"] = bool(compiled)
    if working_memory is not None:
        if isinstance(working_memory, bool) or not isinstance(working_memory, (int, float)) \
                or not np.isfinite(working_memory) or working_memory <= 0:
            raise ValueError(f"working_memory must be a positive number of MiB; got "
                             f"{working_memory!r}.")
        with _LOCK:
            _CONFIG["working_memory"] = float(working_memory)


@contextlib.contextmanager
def config_context(*, working_memory: float | None = None, compiled: bool | None = None):
    """Temporarily change flgp's settings (:func:`set_config`); the old ones come back on
    exit.

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
    old = get_config()
    set_config(working_memory=working_memory, compiled=compiled)
    try:
        yield
    finally:
        with _LOCK:
            _CONFIG.update(old)


def working_memory_bytes() -> float:
    """The current budget of one block, in bytes."""
    return _CONFIG["working_memory"] * 2**20
