"""Calibration at one and two labels per class (notes/few_labels.md section 1.3 and 4.5): at the
prior's t (heat, gamma = 0), for amplitudes A = 1 ... 1000, the leave-one-out scale over
all labelled points and over the class-preserving subset, and the ECE at fixed scales.
Evaluated on 8,000 random points of each cloud; 3 draws.

    python experiments/few_labels_calibration.py mnist swiss5 torus4
-> experiments/results/few_labels_calibration.csv
"""

from __future__ import annotations

import csv
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import few_labels_lib as L  # noqa: E402


def main(sets):
    path = os.path.join(L.RESULTS, "few_labels_calibration.csv")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["set", "k", "draw", "A", "t", "log_ev", "kappa_all", "kappa_cp", "kappa",
                    "err", "ece", "conf"])
        for name in sets:
            X, y = L.load_set(name)
            n, C = y.size, int(y.max()) + 1
            lam, V = L.eigen(name)
            V = np.asarray(V)
            tc = L.t_center(lam, C)
            sub = np.random.default_rng(0).choice(n, min(n, 8000), replace=False)
            for k in (1, 2):
                for d in range(3):
                    lab = L.stratified_draw(y, k, d)
                    s = sub[~np.isin(sub, lab)]
                    for A in (1.0, 10.0, 100.0, 1000.0):
                        wt = L.weights(lam, n, "heat", tc, None, A, 0.0)
                        st, keep = L.ep_fit(V[lab], y[lab], C, wt, tol=1e-6)
                        kcp = L.loo_scale([(st, 1.0)], y[lab], C, True)
                        kall = L.loo_scale([(st, 1.0)], y[lab], C, False)
                        for kap in (1.0, 2.0, 3.0, 4.0, kcp, kall):
                            P = L.predict_proba(V[s], st, keep, wt, C, scale=kap)
                            w.writerow([name, k, d, A, tc, st.log_evidence, kall, kcp, kap,
                                        float(np.mean(P.argmax(1) != y[s])), L.ece(P, y[s]),
                                        float(P.max(1).mean())])
                        fh.flush()
                        print(name, k, d, A, f"kcp={kcp:.2f} kall={kall:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mnist", "swiss5", "torus4"])
