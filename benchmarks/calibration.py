"""Are the classifiers' probabilities right? Error, ECE, NLL and Brier score of
``FLGPClassifier`` (EP with the leave-one-out predictive scale, the default; EP without it;
the earlier Laplace model) beside scikit-learn's
``LabelSpreading`` and ``LabelPropagation`` on the same draws.

Metrics on the unlabelled points of each draw:

* error - of the most probable class;
* ECE - expected calibration error: 15 equal-width bins of the top-class probability,
  ``Σ_b (n_b / n) |accuracy_b - confidence_b|``;
* NLL - ``sklearn.metrics.log_loss`` (probabilities clipped at float64 epsilon);
* Brier - ``mean_i Σ_c (p_ic - [y_i = c])²``;
* conf - mean top-class probability.

Data sets (the issue's): MNIST (all 70,000 digits, PCA to 100 dimensions, 100 and 200
labels); a Swiss roll (20,000 points, noise 0.5, four classes by the quartiles of the roll
parameter, 40 labels); two moons (5,000 points, noise 0.15, 20 labels); six concentric
circles (12,000 points, the FLGP paper's Table 1 data with the authors' preprocessing, 100
labels); and the circles' random-subsample variants SRFLGP / LRFLGP (error only matters
there: the authors' R package, whose labels come from a Pólya-Gamma sampler, was more
accurate than our Laplace fit).

    python benchmarks/calibration.py                       # every set (about an hour)
    python benchmarks/calibration.py --sets moons swiss --draws 3
    python benchmarks/calibration.py --json benchmarks/results/calibration.json

Writes ``benchmarks/results/calibration.json`` and one reliability diagram per data set
(``benchmarks/results/calibration_<set>.png``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np
import torch
from threadpoolctl import threadpool_limits

RESULTS = os.path.join(os.path.dirname(__file__), "results")
N_BINS = 15

# name -> (draws by default, constructor of (X, y) for a draw, labels per draw)
SETS = ("moons", "swiss", "circles", "circles_random", "mnist100", "mnist200")


def ece(P, y, n_bins=N_BINS):
    conf = P.max(1)
    correct = P.argmax(1) == y
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        b = (conf > lo) & (conf <= hi)
        if b.any():
            total += b.mean() * abs(correct[b].mean() - conf[b].mean())
    return float(total)


def reliability(P, y, n_bins=N_BINS):
    """Per bin: mean confidence, accuracy and count."""
    conf = P.max(1)
    correct = P.argmax(1) == y
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        b = (conf > lo) & (conf <= hi)
        if b.any():
            out.append((float(conf[b].mean()), float(correct[b].mean()), int(b.sum())))
    return out


def metrics(P, y):
    from sklearn.metrics import log_loss

    n, C = P.shape
    onehot = np.eye(C)[y]
    return dict(error=float(np.mean(P.argmax(1) != y)), ece=ece(P, y),
                nll=float(log_loss(y, P, labels=np.arange(C))),
                brier=float(np.mean(((P - onehot) ** 2).sum(1))),
                conf=float(P.max(1).mean()))


# -- data ------------------------------------------------------------------------------------
_MNIST = {}


def _mnist():
    if "Z" not in _MNIST:
        from sklearn.decomposition import PCA

        from flgp.datasets import load_mnist

        X, y = load_mnist()
        _MNIST["Z"] = PCA(n_components=100, random_state=0).fit_transform(X).astype(
            np.float64)
        _MNIST["y"] = np.asarray(y, dtype=np.int64)
    return _MNIST["Z"], _MNIST["y"]


def make_draw(name, draw):
    """``(X, y, labelled indices)`` of one draw of a data set."""
    from flgp.datasets import make_concentric_circles, make_swiss_roll
    from flgp.reproduce.circles import standardise

    rng = np.random.default_rng(draw)
    if name == "moons":
        from sklearn.datasets import make_moons
        X, y = make_moons(5000, noise=0.15, random_state=draw)
        m = 20
    elif name == "swiss":
        X, t = make_swiss_roll(20000, noise=0.5, random_state=draw)
        y = np.digitize(t, np.quantile(t, [0.25, 0.5, 0.75]))
        m = 40
    elif name in ("circles", "circles_random"):
        X, y = make_concentric_circles(12000, random_state=draw)
        X = standardise(X)
        m = 100
    elif name.startswith("mnist"):
        X, y = _mnist()
        m = int(name[5:])
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {SETS}")
    lab = rng.choice(X.shape[0], m, replace=False)
    # every class needs a label for the comparison to be about calibration
    while np.unique(y[lab]).size < np.unique(y).size:
        lab = rng.choice(X.shape[0], m, replace=False)
    return X, np.asarray(y, dtype=np.int64), lab


def methods_for(name):
    from sklearn.semi_supervised import LabelPropagation, LabelSpreading

    from flgp import Eigenbasis, FLGPClassifier, GraphMaternPrior, HeatKernelPrior, RBFPrior

    def heat(**settings):
        """The heat kernel alone, its eigenbasis with ``settings``: what the rows named
        after its settings (kernel, induced points) measure."""
        return HeatKernelPrior(Eigenbasis(**settings))

    if name == "circles_random":
        return {f"{k}{s}FLGP {inf}": (lambda k=k, s=s, inf=inf, seed=0: FLGPClassifier(
            heat(kernel={"S": "se", "L": "lae"}[k], subsample="random", n_induced=600),
            inference=inf, random_state=seed))
            for k in "SL" for s in "R" for inf in ("ep", "laplace")}
    size = dict(n_induced=600) if name == "circles" else {}
    out = {
        # the heat kernel's classifier and the default
        "FLGP (EP)": lambda seed=0: FLGPClassifier(heat(**size), random_state=seed),
        "FLGPClassifier() default": lambda seed=0: FLGPClassifier(
            [heat(**size), GraphMaternPrior(), RBFPrior()] if size else None,
            random_state=seed),
        "FLGP (EP, no LOO scale)": lambda seed=0: FLGPClassifier(
            heat(**size), calibration=None, random_state=seed),
        "FLGP (Laplace)": lambda seed=0: FLGPClassifier(heat(**size), random_state=seed,
                                                        inference="laplace"),
        "LabelSpreading": lambda seed=0: LabelSpreading(kernel="knn", n_neighbors=10,
                                                        alpha=0.99, max_iter=100),
        "LabelPropagation": lambda seed=0: LabelPropagation(kernel="knn", n_neighbors=10,
                                                            max_iter=1000),
    }
    return out


def run_set(name, draws, only=None):
    rows = []
    for draw in range(draws):
        X, y, lab = make_draw(name, draw)
        yy = np.full(X.shape[0], -1)
        yy[lab] = y[lab]
        unl = yy == -1
        for method, make in methods_for(name).items():
            if only and not any(o in method for o in only):
                continue
            est = make(seed=draw)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, yy)
            seconds = time.perf_counter() - t0
            P = np.asarray(est.label_distributions_, dtype=np.float64)[unl]
            P = np.nan_to_num(P, nan=0.0)
            s = P.sum(1, keepdims=True)
            P = np.where(s > 0, P / np.where(s > 0, s, 1), 1.0 / P.shape[1])
            codes = np.searchsorted(est.classes_, y[unl])
            row = dict(set=name, draw=draw, method=method, seconds=seconds,
                       reliability=reliability(P, codes), **metrics(P, codes))
            for key in ("diffusion_time_", "amplitude_"):
                if hasattr(est, key):
                    row[key.rstrip("_")] = np.asarray(getattr(est, key)).tolist()
            rows.append(row)
            print(f"{name:15s} draw {draw} {method:22s} err {row['error']*100:6.2f}% "
                  f"ECE {row['ece']:.3f} NLL {row['nll']:.3f} Brier {row['brier']:.3f} "
                  f"conf {row['conf']:.3f} {seconds:6.2f} s", flush=True)
    return rows


def summarise(rows):
    out = {}
    for r in rows:
        out.setdefault((r["set"], r["method"]), []).append(r)
    table = []
    for (name, method), rs in out.items():
        agg = dict(set=name, method=method, draws=len(rs),
                   seconds_median=statistics.median(r["seconds"] for r in rs))
        for key in ("error", "ece", "nll", "brier", "conf"):
            vals = np.array([r[key] for r in rs])
            agg[key] = float(vals.mean())
            agg[key + "_sd"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
        table.append(agg)
    return table


def print_table(table):
    print(f"\n{'set':15s} {'method':22s} {'error %':>14s} {'ECE':>7s} {'NLL':>7s} "
          f"{'Brier':>7s} {'conf':>6s} {'time':>7s}")
    for a in table:
        print(f"{a['set']:15s} {a['method']:22s} {a['error']*100:6.2f} ({a['error_sd']*100:4.2f}) "
              f"{a['ece']:7.3f} {a['nll']:7.3f} {a['brier']:7.3f} {a['conf']:6.3f} "
              f"{a['seconds_median']:6.2f}s")


def plot(rows, name, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method = {}
    for r in rows:
        if r["set"] == name:
            by_method.setdefault(r["method"], []).extend(r["reliability"])
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="calibrated")
    for method, pts in by_method.items():
        pts = np.array(pts)
        edges = np.linspace(0, 1, N_BINS + 1)
        conf, acc, cnt = pts[:, 0], pts[:, 1], pts[:, 2]
        idx = np.clip(np.digitize(conf, edges) - 1, 0, N_BINS - 1)
        xs, ys = [], []
        for b in range(N_BINS):
            sel = idx == b
            if cnt[sel].sum() > 0:
                xs.append(np.average(conf[sel], weights=cnt[sel]))
                ys.append(np.average(acc[sel], weights=cnt[sel]))
        ax.plot(xs, ys, marker="o", ms=3, label=method)
    ax.set_xlabel("top-class probability (bin mean)")
    ax.set_ylabel("accuracy in the bin")
    ax.set_title(f"reliability: {name} (all draws pooled)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--draws", type=int, default=None,
                    help="draws per set (default: 5 for MNIST and circles_random, else 10)")
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only the methods whose name contains one of these strings")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=os.path.join(RESULTS, "calibration.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(RESULTS, exist_ok=True)
    rows = []
    with threadpool_limits(args.threads):
        for name in args.sets:
            draws = args.draws or (5 if name.startswith("mnist") or name == "circles_random"
                                   else 10)
            rows += run_set(name, draws, args.only)
            plot(rows, name, os.path.join(RESULTS, f"calibration_{name}.png"))
    table = summarise(rows)
    print_table(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(summary=table, runs=rows), fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
