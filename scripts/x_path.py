"""Follow the cloud ``X`` through one fit: every function of flgp that receives the cloud,
traced with ``sys.setprofile`` while the estimator fits. A *stop* is a distinct flgp
function whose arguments hold the cloud - the array the user passed or any array of its
shape ``(n, p)`` (the validated float64 copy, a C-ordered view; p = 4, unlike any
other n-row array of these fits) - and a *file* a distinct
module among them. Private helpers count like public ones; calls outside flgp (numpy,
scikit-learn, scipy) do not. Works on any checkout:

    python scripts/x_path.py                      # this tree
    PYTHONPATH=../old-checkout python scripts/x_path.py

Prints, per fit (FLGPClassifier and FLGPRegressor with every prior, their default, and
the full-resolution classifier, ``GraphMaternPrior()`` alone), the number of stops and
files and, with ``--list``, the stops in the order first reached - the numbers
docs/architecture.md quotes. On a checkout from before the prior objects (2026-11-28) the
fits take the old keywords that mean the same (``validation_stops.prior_keywords``).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
from validation_stops import prior_keywords, run_profiled  # noqa: E402  (scripts/ is on the path)


def _holds_cloud(value, shape) -> bool:
    return getattr(value, "shape", None) == shape and hasattr(value, "dtype")


def trace(fit, shape):
    """``[(file, function), ...]`` of the flgp functions that got the cloud, in the order
    first reached."""
    seen = {}

    def profile(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if "/flgp/" not in path or "/site-packages/" in path:
            return
        code = frame.f_code
        n_args = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[:n_args]
        local = frame.f_locals
        if any(_holds_cloud(local.get(name), shape) for name in names):
            key = (path[path.rindex("/flgp/") + 1:], code.co_qualname)
            seen.setdefault(key, len(seen))

    run_profiled(fit, profile)
    return sorted(seen, key=seen.get)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print every stop")
    args = ap.parse_args(argv)
    from flgp import FLGPClassifier, FLGPRegressor
    from flgp.datasets import make_concentric_circles

    X, y = make_concentric_circles(700, random_state=0)
    X = np.c_[X, 0.01 * np.random.default_rng(0).standard_normal((700, 2))]   # (700, 4)
    semi = np.where(np.arange(700) % 10 == 0, y, -1)
    target = np.where(semi >= 0, np.sin(X[:, 0]), np.nan)
    fits = {
        "FLGPClassifier()": lambda: FLGPClassifier(**prior_keywords(n_induced=150)).fit(
            X, semi),
        "FLGPRegressor()": lambda: FLGPRegressor(**prior_keywords(n_induced=150)).fit(
            X, target),
        "FLGPClassifier(GraphMaternPrior())": lambda: FLGPClassifier(
            **prior_keywords("graph_matern")).fit(X, semi),
    }
    print(f"{'fit':34s} {'stops':>6s} {'files':>6s}")
    for name, fit in fits.items():
        stops = trace(fit, X.shape)
        files = {f for f, _ in stops}
        print(f"{name:34s} {len(stops):6d} {len(files):6d}")
        if args.list:
            for f, fn in stops:
                print(f"    {f}: {fn}")


if __name__ == "__main__":
    main()
