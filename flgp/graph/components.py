"""Deprecated name of :mod:`flgp.graph.pieces` (until 2026-11-27); goes in the next release.
Every name of that module is found here too, with a ``FutureWarning``."""

import warnings

from . import pieces as _pieces


def __getattr__(name):
    if name in _pieces.__all__:
        warnings.warn(f"flgp.graph.components.{name} is now flgp.graph.pieces.{name} (a "
                      f"graph's connected components are its pieces in flgp); the old "
                      f"module goes in the next release.", FutureWarning, stacklevel=2)
        return getattr(_pieces, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
