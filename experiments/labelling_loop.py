"""The labelling loop: fit -> suggest -> label -> update, on a four-class Swiss roll.

A user has 20,000 points and 10 labels, and pays for each new label. Each round the
classifier suggests the 10 rows whose labels it expects to help most
(``suggest_labels``, expected variance reduction by default), an oracle (here: the true
classes) labels them, and the model is refitted with ``warm_start=True``, which reuses the
graph and eigenpairs and reruns only the GP part. The same loop with random rows to label
is the baseline.

    python experiments/labelling_loop.py

Prints the learning curves and the cost of each step, and writes
``experiments/results/labelling_loop.png``.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from flgp import FLGPClassifier, HeatKernelPrior
from flgp.datasets import make_swiss_roll

RESULTS = os.path.join(os.path.dirname(__file__), "results")
ROUNDS, BATCH, START = 9, 10, 10


def loop(X, y, start, strategy):
    model = FLGPClassifier(HeatKernelPrior(), warm_start=True)   # its eigenbasis loop
    y_partial = np.full(y.shape[0], -1)
    y_partial[start] = y[start]                            # the labels we have
    curve = []
    for r in range(ROUNDS + 1):
        t0 = time.perf_counter()
        model.fit(X, y_partial)                            # warm after the first round
        fit_s = time.perf_counter() - t0
        unlabelled = y_partial == -1
        error = np.mean(model.transduction_[unlabelled] != y[unlabelled])
        curve.append((int((~unlabelled).sum()), float(error), fit_s))
        if r == ROUNDS:
            return curve
        rows = model.suggest_labels(BATCH, strategy=strategy, random_state=r)
        y_partial[rows] = y[rows]                          # ask the oracle


def main():
    X, t = make_swiss_roll(20000, noise=0.5, random_state=0)
    y = np.digitize(t, np.quantile(t, [0.25, 0.5, 0.75]))
    start = np.random.default_rng(1).choice(y.shape[0], START, replace=False)
    curves = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # components without labels, early on
        for strategy in ("variance_reduction", "margin", "random"):
            curves[strategy] = loop(X, y, start, strategy)
    print(f"{'labels':>7s}" + "".join(f"{s:>20s}" for s in curves))
    for k in range(ROUNDS + 1):
        print(f"{curves['random'][k][0]:7d}" + "".join(
            f"{c[k][1] * 100:19.2f}%" for c in curves.values()))
    fits = [c[2] for c in curves["variance_reduction"]]
    print(f"\nfirst (cold) fit {fits[0]:.2f} s; label updates (warm) median "
          f"{np.median(fits[1:]):.2f} s")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for s, c in curves.items():
        c = np.array(c)
        ax.plot(c[:, 0], c[:, 1] * 100, "-." if s == "random" else "-", marker="o", ms=3,
                label=s)
    ax.set_yscale("log")
    ax.set_xlabel("labels")
    ax.set_ylabel("error on unlabelled points (%)")
    ax.set_title("Swiss roll, 4 classes, n = 20,000")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "labelling_loop.png")
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    with threadpool_limits(2):
        main()
