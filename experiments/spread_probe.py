"""The default classifier's spread rule against a class-count-aware one, on the default's
own fits (its order and ratio picks kept): the package's (the median over the unlabelled
points of the gap between their two largest scores set to ``MARGIN_LOGITS`` = 7 logits)
and ``odds M`` - the scale at which the median unlabelled point's log-odds of its likeliest
class against all the others together is ``M`` (the same for two classes; with many close
classes it asks for more spread). Each followed by the class balance, as the package does.

    python experiments/spread_probe.py --sets digits moons2 torus4 helix6 swiss5
    python experiments/spread_probe.py --sets mnist --draws 3

``experiments/results/spread_probe.csv`` (the two runs' rows together); five
stratified draws a cell at k = 1, 2, 3, 5, 10 (the draws of
``few_labels_lib.stratified_draw``; digits: scikit-learn's 1,797 digits).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import few_labels_lib as L  # noqa: E402

RULES = (("gap", 7.0), ("odds", 6.0), ("odds", 7.0), ("odds", 8.0))


def load(name):
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return X.astype(np.float64), y
    return L.load_set(name)[:2]


def odds_scale(U, M):
    """The scale ``s`` at which the median row's log-odds of its largest softmax(U / s)
    entry against the rest is ``M`` (bisection in ``log s``)."""
    def median_odds(s):
        S = U / s
        S = S - S.max(axis=1, keepdims=True)
        rest = np.log(np.exp(S).sum(axis=1) - 1.0 + 1e-300)
        return float(np.median(-rest))
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if median_odds(np.exp(mid)) > M:
            lo = mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))


def main(argv=None):
    import pandas as pd

    import flgp.precision.classification as PC
    from flgp import FLGPClassifier

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["digits", "moons2", "torus4", "helix6",
                                                  "swiss5"])
    ap.add_argument("--draws", type=int, default=5)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = []
    for name in args.sets:
        X, y = load(name)
        for k in (1, 2, 3, 5, 10):
            for d in range(args.draws):
                lab = L.stratified_draw(y, k, d)
                yy = np.full(y.size, -1)
                yy[lab] = y[lab]
                unl = yy < 0
                est = FLGPClassifier(random_state=0).fit(X, yy)
                fit = est._chosen_fit
                U = fit.scores
                for rule, M in RULES:
                    if rule == "gap":
                        P = est.label_distributions_
                    else:
                        P = PC.scores_to_probabilities(U, odds_scale(U[unl], M))
                        if fit.class_prior is not None:
                            P = PC.balance_to_prior(P, fit.class_prior)[1]
                    acc = float(np.mean(P[unl].argmax(1) == y[unl]))
                    rows.append(dict(set=name, k=k, draw=d, rule=f"{rule} {M:g}",
                                     error=100 * (1 - acc), ece=L.ece(P[unl], y[unl]),
                                     conf_minus_acc=float(P[unl].max(1).mean()) - acc))
            cell = pd.DataFrame([r for r in rows if r["set"] == name and r["k"] == k])
            for rule, g in cell.groupby("rule", sort=False):
                print(f"{name:8s} k={k:2d} {rule:8s} error {g.error.mean():6.2f} % ECE "
                      f"{g.ece.mean():.3f} conf-acc {g.conf_minus_acc.mean():+.3f}", flush=True)
    out = os.path.join(HERE, "results", "spread_probe.csv")
    pd.DataFrame(rows).to_csv(out, index=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
