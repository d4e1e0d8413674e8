"""Count the input checks one fit runs: every call of a function of ``flgp/_validation.py``
and of scikit-learn's ``validate_data`` / ``check_array``, and every scan of the whole cloud
for NaN or infinity by those checks (``np.isfinite`` over the cloud's values, or the
compiled ``scan_cloud``; scikit-learn checks with a sum first and scans only when it is not
finite), traced with
``sys.setprofile`` while the estimator fits. Works on any checkout:

    python scripts/validation_stops.py                      # this tree
    PYTHONPATH=../old-checkout python scripts/validation_stops.py

Prints a table per fit (FLGPClassifier with every prior, and with the Nyström heat kernel
alone, ``HeatKernelPrior("nystrom")``, and its bandwidth grid; FLGPRegressor with every
prior; DiffusionMap) - the numbers docs/architecture.md quotes. On a checkout from before
the prior objects (2026-11-28) the fits take the old keywords that mean the same
(:func:`prior_keywords`).
"""

from __future__ import annotations

import collections
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402


def _trace(fit, cloud):
    calls = collections.Counter()
    scans = [0]
    real_isfinite = np.isfinite

    def isfinite(x, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename.replace(os.sep, "/")
        if (caller.endswith(("flgp/_validation.py", "sklearn/utils/validation.py"))
                and getattr(x, "shape", None) == cloud.shape and np.array_equal(x, cloud)):
            scans[0] += 1
        return real_isfinite(x, *args, **kwargs)

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename.replace(os.sep, "/")
        if path.endswith("flgp/backends/compiled.py") and code.co_name == "scan_cloud":
            x = frame.f_locals.get("X")         # the compiled scan: one read of the values
            if getattr(x, "shape", None) == cloud.shape and np.array_equal(x, cloud):
                scans[0] += 1
        elif path.endswith("flgp/_validation.py") and code.co_name.startswith("check_"):
            calls[code.co_name] += 1
        elif path.endswith("sklearn/utils/validation.py") and code.co_name in (
                "validate_data", "check_array"):
            calls["sklearn " + code.co_name] += 1

    np.isfinite = isfinite
    try:
        run_profiled(fit, profile)
    finally:
        np.isfinite = real_isfinite
    return calls, scans[0]


def prior_keywords(kind="every", **heat) -> dict:
    """The estimator keywords of a prior: ``"every"`` - every prior, the heat kernel's with
    the settings ``heat`` (without any: ``{}``, the default); ``"flgp"`` / ``"glgp"`` /
    ``"nystrom"`` - that heat kernel alone, with ``heat``; ``"graph_matern"`` - the graph Matérn
    prior alone. On a checkout from before the prior objects (2026-11-28, through
    ``PYTHONPATH``) the old keywords that mean the same (scripts/x_path.py uses it too)."""
    if kind == "every" and not heat:
        return {}
    try:
        from flgp import Eigenbasis, GraphMaternPrior, HeatKernelPrior, RBFPrior
    except ImportError:                     # an older flgp: the old keywords
        return dict(heat) if kind == "every" else dict(heat, method=kind)
    if kind == "every":
        return dict(prior=[HeatKernelPrior(Eigenbasis(**heat)), GraphMaternPrior(), RBFPrior()])
    if kind == "graph_matern":
        return dict(prior=GraphMaternPrior())
    return dict(prior=HeatKernelPrior(Eigenbasis(kind, **heat)))


def run_profiled(fit, profile) -> None:
    """``fit()`` with ``profile`` as the profiler (``sys.setprofile``), warnings silenced
    (scripts/x_path.py uses it too)."""
    sys.setprofile(profile)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit()
    finally:
        sys.setprofile(None)


def main() -> int:
    import flgp
    from flgp import FLGPClassifier, FLGPRegressor
    from flgp.datasets import make_concentric_circles, make_spiral
    from flgp.embedding import DiffusionMap

    X, y = make_concentric_circles(2400, random_state=0)
    semi = np.where(np.arange(2400) % 24 == 0, y, -1)
    Xs, ys, _ = make_spiral(2000, noise=0.5, random_state=0)
    ys = np.where(np.arange(2000) % 20 == 0, ys, np.nan)
    fits = {
        "FLGPClassifier()": (
            lambda: FLGPClassifier(**prior_keywords(n_induced=300)).fit(X, semi), X),
        "FLGPClassifier(HeatKernelPrior('nystrom'))": (
            lambda: FLGPClassifier(**prior_keywords("nystrom", n_induced=200)).fit(X, semi),
            X),
        "FLGPRegressor()": (
            lambda: FLGPRegressor(**prior_keywords(n_induced=200)).fit(Xs, ys), Xs),
        "DiffusionMap(method='flgp')": (
            lambda: DiffusionMap(2, method="flgp", random_state=0).fit(Xs), Xs),
    }
    print(f"flgp from {os.path.dirname(flgp.__file__)}")
    print(f"{'fit':42s} {'check calls':>11s} {'NaN scans':>9s}  calls by function")
    for name, (fit, cloud) in fits.items():
        calls, scans = _trace(fit, cloud)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
        print(f"{name:42s} {sum(calls.values()):11d} {scans:9d}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
