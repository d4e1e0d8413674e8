"""The labelling loop: which points to label next, and what a label update costs.

Learning curves - error on the unlabelled points against the number of labels - when the
labels are added in rounds by ``FLGPClassifier.suggest_labels`` (expected variance
reduction, entropy, margin) or at random, beside scikit-learn's
``LabelSpreading(kernel="knn")`` with entropy sampling (the top-entropy unlabelled points
of each round, written here). Every FLGP refit is a warm start (``warm_start=True``: the
graph and eigenpairs are computed once per data set).

Data sets: six concentric circles (12,000 points, binary, the FLGP paper's data with the
authors' preprocessing; 10 random labels to start, +10 a round up to 100; LKFLGP, and
LRFLGP - random induced points - as ``circles_random``), a four-class
Swiss roll (20,000 points, noise 0.5, classes by the quartiles of the roll parameter;
10 -> 100 by 10) and MNIST (all 70,000 digits, PCA to 100 dimensions; 20 -> 200 by 20).
Five seeds: the seed draws the starting labels (the data are fixed).

Costs (MNIST): a cold fit (fresh estimator) against a label-update refit (warm start),
medians over repeats, with the fit's stages.

Counts: a Poisson rate that varies along a Swiss roll (20,000 points, ``log λ = 1 +
1.2 sin(t)`` in the roll parameter ``t`` - rates 0.8 to 9 - and a low-count regime
``log λ = -1 + 1.5 sin(t)`` - rates 0.08 to 1.6; 300 labelled counts, five seeds):
``FLGPRegressor(likelihood="poisson")`` against a Gaussian ``FLGPRegressor`` fitted to
``log1p(y)`` (its mean count ``exp(m + (sd² + noise)/2) - 1``, and the plain
``expm1(m)``): mean Poisson deviance of the unlabelled counts, and against the true rate.

    python benchmarks/labelling.py                    # everything (about half an hour)
    python benchmarks/labelling.py --sets swiss counts --seeds 2

Writes ``benchmarks/results/labelling.json`` and ``benchmarks/results/labelling.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

RESULTS = os.path.join(os.path.dirname(__file__), "results")
SETS = ("circles", "circles_random", "swiss", "mnist", "counts")
STRATEGIES = ("variance_reduction", "entropy", "margin", "random")
LS_NAME = "LabelSpreading + entropy"

# MNIST 70k in 100 PCA dimensions, as benchmarks/calibration.py loads it
from calibration import _mnist  # noqa: E402


def load_set(name):
    """``(X, y, estimator settings, labels at the start, labels per round, last count)``."""
    from flgp import Eigenbasis, HeatKernelPrior
    from flgp.datasets import make_concentric_circles, make_swiss_roll
    from flgp.reproduce.circles import standardise

    if name in ("circles", "circles_random"):
        X, y = make_concentric_circles(12000, random_state=0)
        # LKFLGP (k-means induced points) cuts the graph between the circles: one label
        # per circle is enough; LRFLGP (random induced points) does not, a harder problem
        heat = (HeatKernelPrior(Eigenbasis(n_induced=600)) if name == "circles"
                else HeatKernelPrior(Eigenbasis(n_induced=600, subsample="random")))
        # the heat kernel's loop (its eigenbasis reused across rounds; its expected variance
        # reduction): the heat kernel alone
        return standardise(X), np.asarray(y), dict(prior=heat), 10, 10, 100
    if name == "swiss":
        X, t = make_swiss_roll(20000, noise=0.5, random_state=0)
        return (X, np.digitize(t, np.quantile(t, [0.25, 0.5, 0.75])),
                dict(prior=HeatKernelPrior()), 10, 10, 100)
    if name == "mnist":
        X, y = _mnist()
        return X, y, dict(prior=HeatKernelPrior()), 20, 20, 200
    raise ValueError(f"unknown data set {name!r}")


def start_labels(y, m, seed):
    """``m`` random rows with at least two classes among them."""
    rng = np.random.default_rng(seed)
    while True:
        lab = rng.choice(y.shape[0], m, replace=False)
        if np.unique(y[lab]).size >= 2:
            return lab


def _error(pred, y, lab):
    unl = np.ones(y.shape[0], dtype=bool)
    unl[lab] = False
    return float(np.mean(pred[unl] != y[unl]))


def flgp_curve(model, X, y, lab, step, last, strategy, seed):
    """One learning curve: fit, suggest ``step`` rows, label them, refit (warm)."""
    lab = list(lab)
    curve, fits, suggests = [], [], []
    rng = np.random.default_rng(seed)      # "random": new draws every round
    while True:
        yy = np.full(y.shape[0], -1)
        yy[lab] = y[lab]
        t0 = time.perf_counter()
        model.fit(X, yy)
        fits.append((len(lab), time.perf_counter() - t0))
        curve.append((len(lab), _error(model.transduction_, y, lab)))
        if len(lab) >= last:
            return curve, fits, suggests
        t0 = time.perf_counter()
        new = model.suggest_labels(step, strategy=strategy, random_state=rng)
        suggests.append(time.perf_counter() - t0)
        assert not set(new) & set(lab)
        lab += [int(i) for i in new]


class _CachedGraphLabelSpreading:
    """``LabelSpreading(kernel="knn")`` whose k-nearest-neighbour graph is built once per
    cloud (the benchmark refits it on the same points every round)."""

    _graphs = {}

    def __new__(cls, **kw):
        from sklearn.semi_supervised import LabelSpreading

        class Cached(LabelSpreading):
            def _build_graph(self):
                key = (self.X_.shape, float(self.X_[:, 0].sum()), float(self.X_[-1].sum()))
                if key not in cls._graphs:
                    cls._graphs.clear()
                    cls._graphs[key] = super()._build_graph()
                return cls._graphs[key]

        return Cached(**kw)


def label_spreading_curve(X, y, lab, step, last):
    """LabelSpreading (kNN graph, 10 neighbours, alpha 0.99) with entropy sampling: each
    round labels the ``step`` unlabelled points whose label distributions have the largest
    entropy."""
    lab = list(lab)
    curve = []
    while True:
        yy = np.full(y.shape[0], -1)
        yy[lab] = y[lab]
        ls = _CachedGraphLabelSpreading(kernel="knn", n_neighbors=10, alpha=0.99,
                                        max_iter=100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ls.fit(X, yy)
        curve.append((len(lab), _error(ls.transduction_, y, lab)))
        if len(lab) >= last:
            return curve
        P = np.clip(np.nan_to_num(ls.label_distributions_, nan=0.0), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            H = -np.sum(np.where(P > 0, P * np.log(P), 0.0), axis=1)
        H[lab] = -np.inf
        lab += [int(i) for i in np.argsort(-H, kind="stable")[:step]]


def run_classification(name, seeds):
    from flgp import FLGPClassifier
    from flgp import record_stages

    X, y, kw, m0, step, last = load_set(name)
    model = FLGPClassifier(warm_start=True, random_state=0, **kw)
    rows = []
    cost = None
    for seed in range(seeds):
        lab0 = start_labels(y, m0, seed)
        for strategy in STRATEGIES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                curve, fits, sug = flgp_curve(model, X, y, lab0, step, last, strategy, seed)
            rows.append(dict(set=name, seed=seed, method=strategy, curve=curve, fits=fits,
                             suggest_seconds=sug))
            print(f"{name:8s} seed {seed} {strategy:19s} "
                  + " ".join(f"{m}:{e * 100:.1f}" for m, e in curve)
                  + f"  (refit median {statistics.median(f[1] for f in fits[1:]):.2f} s, "
                  f"suggest median {statistics.median(sug) if sug else 0:.2f} s)",
                  flush=True)
        curve = label_spreading_curve(X, y, lab0, step, last)
        rows.append(dict(set=name, seed=seed, method=LS_NAME, curve=curve))
        print(f"{name:8s} seed {seed} {LS_NAME:19s} "
              + " ".join(f"{m}:{e * 100:.1f}" for m, e in curve), flush=True)
    if name == "mnist":
        cost = refit_cost(X, y, kw, record_stages)
    return rows, cost


def refit_cost(X, y, kw, record_stages, m=100, repeats=3):
    """Cold fit (a fresh estimator) against a label-update refit (warm start, the same
    cloud with the labels of a new draw), medians of ``repeats``, and their stages."""
    from flgp import FLGPClassifier

    def labels(seed):
        yy = np.full(y.shape[0], -1)
        lab = start_labels(y, m, 100 + seed)
        yy[lab] = y[lab]
        return yy

    cold, warm, cold_stages, warm_stages = [], [], [], []
    warm_model = FLGPClassifier(warm_start=True, random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warm_model.fit(X, labels(99))
        for r in range(repeats):
            yy = labels(r)
            with record_stages() as st:
                t0 = time.perf_counter()
                FLGPClassifier(random_state=0, **kw).fit(X, yy)
                cold.append(time.perf_counter() - t0)
            cold_stages.append(st)
            with record_stages() as st:
                t0 = time.perf_counter()
                warm_model.fit(X, yy)
                warm.append(time.perf_counter() - t0)
            warm_stages.append(st)

    def stage_sums(stages):
        out = {}
        for s in stages:
            for k, v in s:
                out.setdefault(k, []).append(v)
        return {k: statistics.median(v) for k, v in out.items()}

    out = dict(n=int(X.shape[0]), labels=m, cold_seconds=cold, warm_seconds=warm,
               cold_median=statistics.median(cold), warm_median=statistics.median(warm),
               cold_stages=stage_sums(cold_stages), warm_stages=stage_sums(warm_stages))
    out["ratio"] = out["warm_median"] / out["cold_median"]
    return out


COUNT_REGIMES = {"moderate": (1.0, 1.2), "low": (-1.0, 1.5)}   # log λ = a + b sin(t)


def run_counts(seeds, n=20000, m=300):
    from sklearn.metrics import mean_poisson_deviance

    from flgp import FLGPRegressor
    from flgp.datasets import make_swiss_roll

    X, t = make_swiss_roll(n, noise=0.5, random_state=0)
    rows = []
    for (regime, (a, b)), seed in ((r, s) for r in COUNT_REGIMES.items()
                                   for s in range(seeds)):
        rate = np.exp(a + b * np.sin(t))
        rng = np.random.default_rng(seed)
        y = rng.poisson(rate).astype(float)
        lab = rng.choice(n, m, replace=False)
        unl = np.ones(n, dtype=bool)
        unl[lab] = False
        yy = np.full(n, np.nan)
        yy[lab] = y[lab]
        out = dict(set="counts", regime=regime, seed=seed)
        t0 = time.perf_counter()
        pois = FLGPRegressor(likelihood="poisson").fit(X, yy)
        out["poisson_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        gauss = FLGPRegressor().fit(X, np.log1p(yy))
        out["gaussian_seconds"] = time.perf_counter() - t0
        mu, sd = gauss.transduction_, gauss.transduction_std_
        preds = {"poisson": pois.transduction_,
                 "gaussian log1p (log-normal mean)": np.exp(mu + (sd ** 2 + gauss.noise_) / 2)
                 - 1.0,
                 "gaussian log1p (expm1)": np.expm1(mu)}
        for key, p in preds.items():
            p = np.maximum(p, 1e-6)
            out[key] = dict(
                deviance=float(mean_poisson_deviance(y[unl], p[unl])),
                deviance_to_rate=float(np.mean(2 * (rate[unl] * np.log(rate[unl] / p[unl])
                                                    - (rate[unl] - p[unl])))),
                rmse_rate=float(np.sqrt(np.mean((p[unl] - rate[unl]) ** 2))))
        out["true rate deviance"] = float(mean_poisson_deviance(y[unl], rate[unl]))
        lo, hi = pois.predict_interval(X[unl], coverage=0.9)
        out["poisson_interval_coverage"] = float(np.mean((y[unl] >= lo) & (y[unl] <= hi)))
        out["poisson_t"], out["gaussian_t"] = pois.diffusion_time_, gauss.diffusion_time_
        rows.append(out)
        print(f"counts   {regime:8s} seed {seed} deviance: Poisson {out['poisson']['deviance']:.4f}, "
              f"Gaussian on log1p {out['gaussian log1p (log-normal mean)']['deviance']:.4f} "
              f"/ {out['gaussian log1p (expm1)']['deviance']:.4f} (true rate "
              f"{out['true rate deviance']:.4f}); 90% interval covers "
              f"{out['poisson_interval_coverage']:.3f}", flush=True)
    return rows


def summarise(rows):
    """Mean and sd of the error at each label count, per set and method."""
    out = {}
    for r in rows:
        if "curve" not in r:
            continue
        for m, e in r["curve"]:
            out.setdefault((r["set"], r["method"], m), []).append(e)
    table = []
    for (name, method, m), errs in sorted(out.items()):
        errs = np.array(errs)
        table.append(dict(set=name, method=method, labels=m, error=float(errs.mean()),
                          error_sd=float(errs.std(ddof=1)) if errs.size > 1 else 0.0,
                          seeds=int(errs.size)))
    return table


def targets(table, cost):
    """The issue's targets, as measured."""
    out = {}
    mn = [r for r in table if r["set"] == "mnist"]
    if mn:
        rand200 = [r["error"] for r in mn if r["method"] == "random" and r["labels"] == 200]
        best = min((r for r in mn if r["method"] in STRATEGIES and r["method"] != "random"
                    and r["labels"] <= 100), key=lambda r: r["error"], default=None)
        if rand200 and best:
            # the fewest labels at which each strategy reaches random's error at 200
            reach = {}
            for s in STRATEGIES[:-1]:
                ok = sorted(r["labels"] for r in mn if r["method"] == s
                            and r["error"] <= rand200[0])
                reach[s] = ok[0] if ok else None
            out["mnist"] = dict(random_error_at_200=rand200[0], best_at_most_100=best,
                                labels_to_reach_random_200=reach,
                                met=bool(best["error"] <= rand200[0]))
    if cost:
        out["refit_cost"] = dict(ratio=cost["ratio"], met=bool(cost["ratio"] <= 0.05))
    return out


def print_tables(table, cost, counts, goal):
    for name in sorted({r["set"] for r in table}):
        rs = [r for r in table if r["set"] == name]
        counts_ = sorted({r["labels"] for r in rs})
        show = [c for c in counts_ if c in (counts_[0], counts_[1], counts_[len(counts_) // 2],
                                             counts_[-1])]
        print(f"\n{name}: error % on the unlabelled points (mean (sd) over "
              f"{rs[0]['seeds']} seeds)")
        print(f"{'method':26s}" + "".join(f"{c:>15d}" for c in show))
        for method in list(STRATEGIES) + [LS_NAME]:
            cells = {r["labels"]: r for r in rs if r["method"] == method}
            if cells:
                print(f"{method:26s}" + "".join(
                    f"{cells[c]['error'] * 100:8.2f} ({cells[c]['error_sd'] * 100:4.2f})"
                    for c in show))
    if cost:
        print(f"\nMNIST refit cost (n = {cost['n']}, {cost['labels']} labels): cold fit "
              f"{cost['cold_median']:.2f} s, label-update refit {cost['warm_median']:.2f} s "
              f"({cost['ratio'] * 100:.1f}% of cold)")
        print("  cold stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in
                                             cost["cold_stages"].items()))
        print("  warm stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in
                                             cost["warm_stages"].items()))
    keys = ["poisson", "gaussian log1p (log-normal mean)", "gaussian log1p (expm1)"]
    for regime in COUNT_REGIMES:
        cs = [c for c in counts if c.get("regime", "moderate") == regime]
        if not cs:
            continue
        a, b = COUNT_REGIMES[regime]
        print(f"\ncounts, {regime} rates (Swiss roll, n = 20000, log rate {a:g} + {b:g} "
              f"sin t, 300 labels, {len(cs)} seeds): mean Poisson deviance of the "
              f"unlabelled counts (mean (sd)); to the true rate; rate RMSE; seeds won")
        base = np.array([c["poisson"]["deviance"] for c in cs])
        for k in keys:
            d = np.array([c[k]["deviance"] for c in cs])
            dr = np.array([c[k]["deviance_to_rate"] for c in cs])
            rm = np.array([c[k]["rmse_rate"] for c in cs])
            won = "" if k == "poisson" else f"  Poisson better on {int((base < d).sum())}/{d.size}"
            print(f"  {k:34s} {d.mean():.4f} ({d.std(ddof=1) if d.size > 1 else 0:.4f})  "
                  f"{dr.mean():.4f}  {rm.mean():.3f}{won}")
        print(f"  {'true rate':34s} {np.mean([c['true rate deviance'] for c in cs]):.4f}")
        print(f"  Poisson 90% interval coverage "
              f"{np.mean([c['poisson_interval_coverage'] for c in cs]):.3f}")
    if "mnist" in goal:
        g = goal["mnist"]
        b = g["best_at_most_100"]
        print(f"\nMNIST target: random labelling reaches {g['random_error_at_200'] * 100:.2f}% "
              f"with 200 labels; {b['method']} reaches {b['error'] * 100:.2f}% with "
              f"{b['labels']} -> {'met' if g['met'] else 'missed'}; labels each strategy "
              f"needs for random's 200-label error: {g['labels_to_reach_random_200']}")
    if "refit_cost" in goal:
        print(f"Refit target (<= 5% of a cold fit): {goal['refit_cost']['ratio'] * 100:.1f}% "
              f"-> {'met' if goal['refit_cost']['met'] else 'missed'}")


def plot(table, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s for s in ("circles", "circles_random", "swiss", "mnist")
             if any(r["set"] == s for r in table)]
    if not names:
        return
    cols = 2 if len(names) > 1 else 1
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.ravel(), names):
        for method in list(STRATEGIES) + [LS_NAME]:
            rs = sorted((r for r in table if r["set"] == name and r["method"] == method),
                        key=lambda r: r["labels"])
            if not rs:
                continue
            m = np.array([r["labels"] for r in rs])
            e = np.array([r["error"] for r in rs]) * 100
            sd = np.array([r["error_sd"] for r in rs]) * 100
            style = "--" if method == LS_NAME else ("-." if method == "random" else "-")
            ax.plot(m, e, style, marker="o", ms=3, label=method)
            ax.fill_between(m, np.maximum(e - sd, 0.0), e + sd, alpha=0.12)
        ax.set_title(f"{name} (mean ± sd over seeds)")
        ax.set_xlabel("labels")
        ax.set_ylabel("error on unlabelled points (%)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes.ravel()[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=os.path.join(RESULTS, "labelling.json"))
    ap.add_argument("--plot", default=os.path.join(RESULTS, "labelling.png"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the other sets' results already in the JSON file")
    ap.add_argument("--report", action="store_true",
                    help="print the tables and draw the plot from the JSON file, run nothing")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.json) as fh:
            old = json.load(fh)
        print_tables(old["table"], old.get("refit_cost"), old.get("counts") or [],
                     old.get("targets") or {})
        plot(old["table"], args.plot)
        return
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(RESULTS, exist_ok=True)
    rows, cost, counts = [], None, []
    old = {}
    if args.merge and os.path.exists(args.json):
        with open(args.json) as fh:
            old = json.load(fh)
    t0 = time.perf_counter()

    def save():
        # after every set, so that a long run keeps what it has measured
        all_rows = [r for r in old.get("runs", []) if r["set"] not in args.sets] + rows
        all_cost = cost if "mnist" in args.sets else old.get("refit_cost")
        all_counts = counts if "counts" in args.sets else old.get("counts") or []
        table = summarise(all_rows)
        goal = targets(table, all_cost)
        with open(args.json, "w") as fh:
            json.dump(dict(table=table, runs=all_rows, refit_cost=all_cost,
                           counts=all_counts, targets=goal, seeds=args.seeds), fh, indent=1)
        return table, all_cost, all_counts, goal

    with threadpool_limits(args.threads):
        for name in args.sets:
            if name == "counts":
                counts = run_counts(args.seeds)
            else:
                r, c = run_classification(name, args.seeds)
                rows += r
                cost = c or cost
            table, all_cost, all_counts, goal = save()
    print_tables(table, all_cost, all_counts, goal)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    plot(table, args.plot)


if __name__ == "__main__":
    main()
