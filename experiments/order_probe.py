"""The full-resolution classifier's graph Matérn order on clouds of many coordinates: order 1
alone against the order weighed (1 or 2, what a fresh ``FLGPClassifier()`` does on a cloud
whose prior solves by conjugate gradients since 2026-11-29; a warm-started one keeps order
1 there). Error and ECE on the unlabelled points, and the mean confidence minus the
accuracy (negative: under-confident), at 1 / 2 / 3 / 5 / 10 labels a class, the same
stratified draws for both (docs/few_labels.md, "The order on many coordinates").

Sets: ``digits`` - scikit-learn's 1,797 handwritten digits (64 pixels); ``mnist10k`` - the
first 10,000 MNIST digits in 100 PCA dimensions (``experiments/few_labels_lib.py``).

    python experiments/order_probe.py --sets digits mnist10k

Writes ``experiments/results/order_probe.csv``.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
KS = (1, 2, 3, 5, 10)


def load(name):
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return X.astype(np.float64), y
    import few_labels_lib as L

    X, y = L.load_set("mnist")
    return X[:10_000], y[:10_000]


def ece(P, y, bins=15):
    conf, right = P.max(1), P.argmax(1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    return float(sum(np.mean(s) * abs(right[s].mean() - conf[s].mean())
                     for s in ((conf > a) & (conf <= b) for a, b in zip(edges[:-1], edges[1:]))
                     if s.any()))


def main(argv=None):
    import sys

    import pandas as pd

    sys.path.insert(0, HERE)
    from flgp import FLGPClassifier, GraphMaternPrior

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["digits", "mnist10k"],
                    choices=["digits", "mnist10k"])
    ap.add_argument("--draws", type=int, default=8)
    args = ap.parse_args(argv)
    rows = []
    warnings.simplefilter("ignore")
    for name in args.sets:
        X, y = load(name)
        C = int(y.max()) + 1
        for k in KS:
            for draw in range(args.draws):
                rng = np.random.default_rng(1000 * k + draw)
                lab = np.concatenate([rng.choice(np.flatnonzero(y == c), k, replace=False)
                                      for c in range(C)])
                yy = np.full(y.size, -1)
                yy[lab] = y[lab]
                u = yy < 0
                for rule, prior in (("order 1", GraphMaternPrior(nu=1)),
                                    ("order weighed", None)):
                    clf = FLGPClassifier(prior).fit(X, yy)
                    P = clf.label_distributions_[u]
                    accuracy = float(np.mean(P.argmax(1) == y[u]))
                    rows.append(dict(set=name, k=k, draw=draw, rule=rule,
                                     order=int(clf.matern_order_),
                                     error=100 * (1 - accuracy), ece=ece(P, y[u]),
                                     confidence_minus_accuracy=float(P.max(1).mean())
                                     - accuracy))
            cell = pd.DataFrame([r for r in rows if r["set"] == name and r["k"] == k])
            for rule, g in cell.groupby("rule", sort=False):
                print(f"{name:9s} k={k:2d} {rule:14s} error {g.error.mean():6.2f} % ECE "
                      f"{g.ece.mean():.3f} conf-acc {g.confidence_minus_accuracy.mean():+.3f}"
                      f" order 2 on {int((g.order == 2).sum())} of {len(g)}", flush=True)
    out = os.path.join(HERE, "results", "order_probe.csv")
    pd.DataFrame(rows).to_csv(out, index=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
