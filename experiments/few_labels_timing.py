"""Fit-time comparison on MNIST 70,000 with 100 random labels (notes/few_labels.md 5.3), side by side
in one process: flgp's eigenpairs at s = 1000 and 3000, FLGPClassifier() end to end, and
the prototype's hyperparameter search for today's rule and the proposal (same EP code, so
the ratio is what the package change would cost). Median of 3 repetitions.

    python experiments/few_labels_timing.py   -> experiments/results/few_labels_timing.csv
"""

from __future__ import annotations

import csv
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import few_labels_lib as L  # noqa: E402


def main(reps=3):
    from flgp import FLGPClassifier
    from flgp.spectral import compute_eigenpairs
    X, y = L.load_set("mnist")
    n, C = y.size, 10
    lab = L.random_draw(y, 100, 0)
    yy = np.full(n, -1)
    yy[lab] = y[lab]
    rows = []
    warnings.simplefilter("ignore")
    for rep in range(reps):
        for s in (1000, 3000):
            t0 = time.perf_counter()
            compute_eigenpairs(X, n_induced=s, random_state=0)
            rows.append(("eigenpairs", s, rep, time.perf_counter() - t0))
        t0 = time.perf_counter()
        FLGPClassifier().fit(X, yy)
        rows.append(("FLGPClassifier() fit", 1000, rep, time.perf_counter() - t0))
        lam, V = L.eigen("mnist")
        V = np.asarray(V)
        few = np.ascontiguousarray(V[:10])
        for name, kw in (("search: today's rule", dict(consts=(1.0,), prior_sd=None,
                                                       calibration="loo", n_grid=12)),
                         ("search: proposal", dict(consts=(0.0,), prior_sd=2.0,
                                                   prior_offset=1, calibration="loo_cp",
                                                   n_grid=12)),
                         ("search: proposal + amplitude", dict(
                             consts=(0.0,), prior_sd=2.0, prior_offset=1,
                             calibration="loo_cp", n_grid=12, amplitudes=(1.0, 10.0, 100.0),
                             normalise=True))):
            Vr = _Rows(V[lab], few)
            t0 = time.perf_counter()
            L.fit_rule(lam, Vr, np.arange(lab.size), y[lab], C, n_cloud=n, **kw)
            rows.append((name, 1000, rep, time.perf_counter() - t0))
        print(rows[-6:], flush=True)
        path = os.path.join(L.RESULTS, "few_labels_timing.csv")
        with open(path, "w", newline="") as fh:     # after every repetition
            w = csv.writer(fh)
            w.writerow(["what", "s", "rep", "seconds"])
            w.writerows(rows)
    import pandas as pd
    print(pd.DataFrame(rows, columns=["what", "s", "rep", "seconds"])
          .groupby(["what", "s"]).seconds.median().round(2))


class _Rows:
    def __init__(self, Vl, Vev):
        self.Vl, self.Vev = Vl, Vev
        self.shape = Vev.shape

    def __getitem__(self, idx):
        return self.Vl[idx] if isinstance(idx, np.ndarray) else self.Vev[idx]


if __name__ == "__main__":
    main()
