"""The fewest labels: flgp against graph-based semi-supervised learning at 1-10 labels per
class.

Data sets (experiments/few_labels_lib.py ``load_set``; no download):

* ``mnist``    - all 70,000 digits, PCA to 100 dimensions, 10 classes;
* ``swiss5``   - Swiss roll, 20,000 points, noise 0.5, five classes along its length;
* ``torus4``   - torus, 10,000 points, four sectors of the long angle (no gap between
                 classes);
* ``circles6`` - the FLGP paper's six circles (6,000 points), each circle a class;
* ``helix6``   - 3-turn helix, 6,000 points, six half-turns;
* ``moons2``   - two moons, 5,000 points, noise 0.15 (binary);
* ``spheres3`` - three nested noisy spheres in R³ (4,500 points; classes that nest);
* ``spirals2`` - two interleaved noisy spirals (4,000 points, noise 0.45; classes that touch);
* ``mnist6``   - the confusable MNIST digits 3, 4, 5, 7, 8, 9 (41,354 images).
* ``mnist6s``  - 200 images of each of those digits (1,200): one label a class errs ~40 %.

Labels: ``k`` per class (stratified), k = 1, 2, 3, 5, 10; 20 draws at k = 1, 10 above
(``--quick``: 3, 3, 2, 2, 2). Every method sees the same draws
(``stratified_draw(y, k, draw)``). Methods (default: the first two flgp entries, both
Poisson learnings and LabelSpreading):

* flgp, through its public API, one entry per constructor-kwargs dict in ``FLGP_METHODS``:
  the default (every prior), the heat kernel alone (``HeatKernelPrior()``),
  ``GraphMaternPrior()`` alone (full resolution, issue 34), the heat kernel with
  ``inference="laplace"``, ``HeatKernelPrior(spectral_family="auto")`` and the model before
  issue 25 (``HeatKernelPrior(constant_variance=1, diffusion_time_prior="flat")``;
  docs/few_labels.md);
* graphlearning's Poisson and Laplace learning on its default 10-nearest-neighbour weight
  matrix (built from exact neighbours), and Poisson learning with its class-size
  correction (``class_priors`` uniform; at k <= 2 only, its volume projection being slow);
  their times are the solve's, and the summary adds graphlearning's own graph build (its
  annoy search, timed once a set) for the comparison with flgp's fit;
* scikit-learn ``LabelSpreading(kernel="knn", n_neighbors=10, alpha=0.99)`` (its kNN graph
  passed as a callable kernel, computed once per data set exactly as ``kernel="knn"``
  computes it).

Metrics on the unlabelled points: error, the mean top probability beside it (what a
calibrated classifier's accuracy would be), ECE (15 bins), NLL (where there are
probabilities: graphlearning's scores are not), fit time (flgp: graph and eigenpairs included).

graphlearning is a benchmark-only peer, never a dependency of flgp; install it beside flgp
(``pip install graphlearning``; tested with 1.7.5). Without it the graphlearning rows are
left out and said so.

    python benchmarks/few_labels.py --quick
    python benchmarks/few_labels.py --sets mnist swiss5 torus4
    python benchmarks/few_labels.py --checks     # MNIST 100/200 random labels, circles Table 1
    python benchmarks/few_labels.py --smooth     # known class probabilities: their error

``--smooth``: two clouds whose class probability is a known smooth function of position -
``plane``, 5,000 uniform points in the unit square with ``logit P(y = 1) = 3 sin 2πu +
2 (v - 1/2)``, and ``roll``, a Swiss roll of 5,000 points (noise 0.1) with ``logit P =
2.5 sin t + 0.15 (h - 10.5)`` - each label drawn from that probability; 100, 300 and 1,000
random labels, three draws: the mean absolute difference between the predicted and the
true probability on the unlabelled points, beside the mean top probability of each and
the share of points where the most probable class is not the Bayes classifier's; beside
them an *oracle smoother*, the labels' Gaussian-kernel average at the bandwidth (of 40)
that brings it closest to the truth - a reference that knows ``p``.

Writes ``benchmarks/results/few_labels.json``, ``few_labels.png`` (error and ECE against
labels per class) and ``few_labels_reliability.png`` (the first flgp method's reliability
diagram a cloud: accuracy against the top probability, pooled over the draws, a curve for
each number of labels a class).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "experiments"))
import few_labels_lib as L  # noqa: E402
from sklearn.base import clone  # noqa: E402

from flgp import Eigenbasis, GraphMaternPrior, HeatKernelPrior, RBFPrior  # noqa: E402

RESULTS = os.path.join(HERE, "results")
KS = (1, 2, 3, 5, 10)
DRAWS = {1: 20, 2: 10, 3: 10, 5: 10, 10: 10}
QUICK_DRAWS = {1: 3, 2: 3, 3: 2, 5: 2, 10: 2}
DEFAULT_SETS = ("mnist", "swiss5", "torus4", "circles6", "helix6", "moons2", "spheres3",
                "spirals2", "mnist6", "mnist6s")
# the reliability diagrams' bins of the top probability
RELIABILITY_BINS = 10

# flgp methods: name -> FLGPClassifier kwargs (the public API only).
FLGP_METHODS = {
    # the default (issue 43: prior=None, every prior - the full-resolution classifier on a
    # numpy cloud)
    "flgp default": {},
    # the low-rank heat kernel (the default from issue 25 to issue 43): no constant mode,
    # spectral prior on t, heat family
    "flgp heat kernel": {"prior": HeatKernelPrior()},
    # full resolution: the graph Matérn GP on the cloud's own k-NN graph (issue 34; the
    # least-squares GP classifier since issue 43)
    "flgp gmrf": {"prior": GraphMaternPrior()},
    "flgp laplace": {"prior": HeatKernelPrior(), "inference": "laplace"},
    # heat / Matérn / pseudo-inverse chosen by the evidence
    "flgp auto family": {"prior": HeatKernelPrior(spectral_family="auto")},
    # the model before issue 25: constant mode of variance 1, flat prior on t
    "flgp before": {"prior": HeatKernelPrior(constant_variance=1.0,
                                             diffusion_time_prior="flat")},
}
DEFAULT_METHODS = ("flgp default", "flgp heat kernel", "poisson (graphlearning)",
                   "poisson balanced (graphlearning)", "LabelSpreading")


def with_heat_settings(kwargs, **settings):
    """``kwargs`` with ``settings`` (``n_induced=600``, ...) given to the heat kernel
    prior's eigenbasis: the default (every prior) becomes every prior with those settings,
    a heat kernel prior takes them, and the graph Matérn prior has no use for them. No
    settings: ``kwargs`` as they are."""
    if not settings:
        return kwargs

    def heat(p):
        if not isinstance(p, HeatKernelPrior):
            return p
        return clone(p).set_params(eigenbasis=clone(p.basis).set_params(**settings))

    prior = kwargs.get("prior")
    if prior is None:
        prior = [HeatKernelPrior(Eigenbasis(**settings)), GraphMaternPrior(), RBFPrior()]
    else:
        prior = [heat(p) for p in prior] if isinstance(prior, list) else heat(prior)
    return dict(kwargs, prior=prior)


def spelled(kwargs):
    """``kwargs`` as JSON can hold them: the prior objects by their repr."""
    return {k: repr(v) if k == "prior" else v for k, v in kwargs.items()}


def _timed_fit(est, X, yy) -> float:
    """Seconds of ``est.fit(X, yy)``, its warnings silenced (they are the same each draw)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, yy)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------
# flgp through its public API
# ------------------------------------------------------------------------------------------
def fit_flgp(X, y, lab, kwargs, seed=0):
    """Probabilities ``(n, C)`` on every row, fit seconds, a note and fitted values."""
    from flgp import FLGPClassifier
    C = int(y.max()) + 1
    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    est = FLGPClassifier(random_state=seed, **kwargs)
    sec = _timed_fit(est, X, yy)
    P = np.zeros((y.size, C))
    P[:, est.classes_] = np.asarray(est.label_distributions_, dtype=np.float64)
    info = (dict(t=np.asarray(est.diffusion_time_).tolist(),
                 kappa=np.asarray(getattr(est, "predictive_scale_", 1.0)).tolist())
            if est.method_ != "graph_matern" else {})
    return P, sec, "", info


# ------------------------------------------------------------------------------------------
# graph baselines
# ------------------------------------------------------------------------------------------
_GRAPHS = {}
# graphlearning's own weight-matrix build (annoy), once a set: added to Poisson learning's
# solve for the time comparison at the fewest labels (the peer builds its graph every fit)
GRAPH_BUILD_SECONDS = {}


def _graphs(name, X):
    """graphlearning's weight matrix and LabelSpreading's kNN connectivity graph, once per
    set (exact 10 nearest neighbours)."""
    if name not in _GRAPHS:
        from sklearn.neighbors import NearestNeighbors
        t0 = time.perf_counter()
        W = L.knn_weights(name)
        t_w = time.perf_counter() - t0
        t0 = time.perf_counter()
        nn = NearestNeighbors(n_neighbors=10).fit(X)
        G = nn.kneighbors_graph(nn._fit_X, 10, mode="connectivity")
        t_g = time.perf_counter() - t0
        t_gl = None
        try:                       # graphlearning's own graph build (its annoy search)
            import annoy  # noqa: F401
            import graphlearning as gl
            t0 = time.perf_counter()
            gl.weightmatrix.knn(X, 10)
            t_gl = time.perf_counter() - t0
        except ImportError:
            pass
        _GRAPHS[name] = (W, G)
        GRAPH_BUILD_SECONDS[name] = t_gl
        print(f"{name}: kNN weight matrix {t_w:.1f} s (cached neighbours), LabelSpreading "
              f"graph {t_g:.1f} s - one-off, not in the fit times below; graphlearning's "
              f"own build (annoy) "
              f"{'not installed' if t_gl is None else f'{t_gl:.2f} s'}", flush=True)
    return _GRAPHS[name]


def fit_graph(method, name, X, y, lab):
    C = int(y.max()) + 1
    W, G = _graphs(name, X)
    if method in ("poisson", "laplace", "poisson_balanced"):
        import graphlearning as gl
        if method == "laplace":
            model = gl.ssl.laplace(W)
        else:     # the balanced variant: graphlearning's class_priors, uniform shares
            model = gl.ssl.poisson(W, class_priors=None if method == "poisson"
                                   else np.full(C, 1.0 / C))
        t0 = time.perf_counter()
        model.fit(lab, y[lab])
        pred = model.predict()
        return None, pred, time.perf_counter() - t0
    from sklearn.semi_supervised import LabelSpreading
    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    est = LabelSpreading(kernel=lambda A, B=None: G, n_neighbors=10, alpha=0.99)
    sec = _timed_fit(est, X, yy)
    P = np.zeros((y.size, C))
    P[:, est.classes_] = np.nan_to_num(est.label_distributions_)
    s = P.sum(1, keepdims=True)
    P = np.where(s > 0, P / np.where(s > 0, s, 1), 1.0 / C)
    return P, P.argmax(1), sec


# graphlearning's class-size correction iterates up to 10^4 argmax passes over the cloud
# (about a minute a draw on MNIST at times); it is the fewest labels' comparison, so it runs
# at k <= 2 only
BALANCED_AT_MOST = {"poisson balanced (graphlearning)": 2}
GRAPH_METHODS = {"poisson (graphlearning)": "poisson", "laplace (graphlearning)": "laplace",
                 "poisson balanced (graphlearning)": "poisson_balanced",
                 "LabelSpreading": "spreading"}


# ------------------------------------------------------------------------------------------
def run(sets, draws, methods, first_draw=0):
    rows = []
    for name in sets:
        X, y = L.load_set(name)
        C = int(y.max()) + 1
        for k in draws:
            for d in range(first_draw, first_draw + draws[k]):
                lab = L.stratified_draw(y, k, d, C)
                u = L.unlabelled_mask(y.size, lab)
                for meth in methods:
                    if meth in BALANCED_AT_MOST and k > BALANCED_AT_MOST[meth]:
                        continue
                    note, info = "", {}
                    if meth in FLGP_METHODS:
                        P, sec, note, info = fit_flgp(X, y, lab, FLGP_METHODS[meth])
                        pred = P.argmax(1)
                    else:
                        P, pred, sec = fit_graph(GRAPH_METHODS[meth], name, X, y, lab)
                    if meth in GRAPH_METHODS and GRAPH_METHODS[meth] != "spreading":
                        info = dict(graph_seconds=GRAPH_BUILD_SECONDS.get(name))
                    row = dict(set=name, k=k, draw=d, method=meth + note, seconds=sec,
                               error=float(np.mean(pred[u] != y[u])),
                               ece=None if P is None else L.ece(P[u], y[u]),
                               nll=None if P is None else L.nll(P[u], y[u]),
                               top=None if P is None else float(P[u].max(1).mean()),
                               **info)
                    if P is not None:
                        row["reliability"] = reliability_counts(P[u], y[u])
                    rows.append(row)
                    ece_txt = "  -  " if P is None else f"{row['ece']:.3f}"
                    top_txt = "  -  " if P is None else f"{row['top']:.3f}"
                    print(f"{name:9s} k={k:2d} draw {d} {row['method']:34s} "
                          f"err {row['error'] * 100:6.2f}%  top p {top_txt}  ECE {ece_txt}  "
                          f"{sec:6.2f} s", flush=True)
    return rows


def reliability_counts(P, y) -> dict:
    """Per bin of the top probability (``RELIABILITY_BINS`` equal bins): the points, the
    correct ones and the sum of their top probabilities."""
    conf = P.max(1)
    correct = (P.argmax(1) == y).astype(float)
    idx = np.minimum((conf * RELIABILITY_BINS).astype(int), RELIABILITY_BINS - 1)
    return {key: np.bincount(idx, weights=w, minlength=RELIABILITY_BINS).tolist()
            for key, w in (("n", None), ("correct", correct), ("confidence", conf))}


def plot_reliability(rows, path):
    """A reliability diagram a cloud for the first flgp method that ran: accuracy against
    mean top probability in each bin, pooled over the draws, one curve a number of labels
    a class (the diagonal: calibrated)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in rows if "reliability" in r and r["method"] in FLGP_METHODS]
    if not ran:
        return
    method = ran[0]["method"]
    sets = list(dict.fromkeys(r["set"] for r in ran))
    cols = min(3, len(sets))
    fig, axes = plt.subplots(-(-len(sets) // cols), cols, figsize=(3.6 * cols,
                             3.4 * -(-len(sets) // cols)), squeeze=False)
    for ax, name in zip(axes.ravel(), sets):
        for k in sorted({r["k"] for r in ran if r["set"] == name}):
            rs = [r["reliability"] for r in ran
                  if r["set"] == name and r["k"] == k and r["method"] == method]
            n = np.sum([r["n"] for r in rs], axis=0)
            ok = n > 0
            acc = np.sum([r["correct"] for r in rs], axis=0)[ok] / n[ok]
            conf = np.sum([r["confidence"] for r in rs], axis=0)[ok] / n[ok]
            ax.plot(conf, acc, marker="o", ms=3, label=f"{k} a class")
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(name)
        ax.set_xlabel("top probability")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(sets):]:
        ax.axis("off")
    fig.suptitle(f"{method}: reliability")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["set"], r["k"], r["method"]), []).append(r)
    out = []
    for (name, k, meth), rs in groups.items():
        a = dict(set=name, k=k, method=meth, draws=len(rs),
                 seconds_median=statistics.median(r["seconds"] for r in rs))
        if rs[0].get("graph_seconds") is not None:     # the peer's graph build + its solve
            a["seconds_with_graph_median"] = statistics.median(
                r["seconds"] + r["graph_seconds"] for r in rs)
        for key in ("error", "ece", "nll", "top"):
            v = np.array([r[key] for r in rs if r.get(key) is not None], dtype=float)
            a[key] = float(v.mean()) if v.size else None
            a[key + "_sd"] = float(v.std(ddof=1)) if v.size > 1 else None
            a[key + "_median"] = float(np.median(v)) if v.size else None
        out.append(a)
    return out


def print_table(table):
    print(f"\n{'set':9s} {'k':>3s} {'method':34s} {'error % (sd)':>15s} {'median':>7s} "
          f"{'top p':>6s} {'ECE':>6s} {'NLL':>6s} {'time':>7s}")
    for a in sorted(table, key=lambda a: (a["set"], a["k"], a["method"])):
        ece = "   -  " if a["ece"] is None else f"{a['ece']:.3f}"
        nll = "   -  " if a["nll"] is None else f"{a['nll']:.3f}"
        top = "   -  " if a.get("top") is None else f"{a['top']:.3f}"
        print(f"{a['set']:9s} {a['k']:3d} {a['method']:34s} {a['error'] * 100:6.2f} "
              f"({(a['error_sd'] or 0) * 100:5.2f}) {a['error_median'] * 100:6.2f} "
              f"{top:>6s} {ece:>6s} {nll:>6s} {a['seconds_median']:6.2f}s"
              + (f" (+ graph: {a['seconds_with_graph_median']:.2f} s)"
                 if "seconds_with_graph_median" in a else ""))


def plot(table, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sets = sorted({a["set"] for a in table})
    fig, axes = plt.subplots(len(sets), 2, figsize=(10, 3.0 * len(sets)), squeeze=False)
    for i, name in enumerate(sets):
        for j, key in enumerate(("error", "ece")):
            ax = axes[i, j]
            for meth in sorted({a["method"] for a in table if a["set"] == name}):
                pts = sorted((a["k"], a[key]) for a in table
                             if a["set"] == name and a["method"] == meth and a[key] is not None)
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3, label=meth)
            ax.set_xscale("log")
            ax.set_xticks(KS)
            ax.set_xticklabels([str(k) for k in KS])
            ax.set_title(f"{name}: {key}")
            ax.set_xlabel("labels per class")
            if key == "ece":
                ax.axhline(0.05, color="0.6", lw=0.8, ls="--")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------
# no-regression checks: MNIST with 100 / 200 random labels, the circles' Table 1
# ------------------------------------------------------------------------------------------
def checks(methods, draws=5, which=("mnist", "circles")):
    from flgp.datasets import make_concentric_circles
    from flgp.reproduce.circles import standardise
    rows = []
    Xm, ym = L.load_set("mnist")
    cases = [("mnist", 100), ("mnist", 200)] if "mnist" in which else []
    if "circles" in which:
        cases += [(f"circles{n}", m) for n in (2400, 12000) for m in (50, 100)]
    for name, m in cases:
        for d in range(draws):
            if name == "mnist":
                X, y = Xm, ym
                lab = L.random_draw(y, m, d)      # benchmarks/calibration.py's draws
                extra = {}
            else:
                X, y = make_concentric_circles(int(name[7:]), random_state=d)
                X = standardise(X)
                rng = np.random.default_rng(d)
                lab = rng.choice(y.size, m, replace=False)
                while np.unique(y[lab]).size < 2:
                    lab = rng.choice(y.size, m, replace=False)
                extra = dict(n_induced=600)
            u = L.unlabelled_mask(y.size, lab)
            for meth in methods:
                if meth not in FLGP_METHODS:
                    continue
                kw = with_heat_settings(FLGP_METHODS[meth], **extra)
                P, sec, note, info = fit_flgp(X, y, lab, kw)
                r = dict(set=name, m=m, draw=d, method=meth + note, seconds=sec,
                         error=float(np.mean(P[u].argmax(1) != y[u])), ece=L.ece(P[u], y[u]),
                         nll=L.nll(P[u], y[u]))
                rows.append(r)
                print(f"{name:12s} m={m:3d} draw {d} {r['method']:34s} err "
                      f"{r['error'] * 100:6.2f}% ECE {r['ece']:.3f} NLL {r['nll']:.3f} "
                      f"{sec:6.2f} s", flush=True)
    return rows


def smooth_cloud(kind, seed, n=5000):
    """``(X, y, p)``: a cloud, labels drawn from ``p``, and ``p = P(y = 1 | x)``."""
    rng = np.random.default_rng(seed)
    if kind == "plane":
        X = rng.uniform(0.0, 1.0, (n, 2))
        logit = 3.0 * np.sin(2 * np.pi * X[:, 0]) + 2.0 * (X[:, 1] - 0.5)
    else:
        t = 1.5 * np.pi * (1 + 2 * rng.uniform(size=n))
        h = 21.0 * rng.uniform(size=n)
        X = np.c_[t * np.cos(t), h, t * np.sin(t)] + 0.1 * rng.standard_normal((n, 3))
        logit = 2.5 * np.sin(t) + 0.15 * (h - 10.5)
    p = 1.0 / (1.0 + np.exp(-logit))
    return X, (rng.uniform(size=n) < p).astype(np.int64), p


# the oracle smoother's bandwidths: a grid in units of the cloud's spread (the largest
# coordinate standard deviation)
ORACLE_BANDWIDTHS = np.geomspace(0.01, 1.0, 40)


def oracle_smoother(X, lab, y_lab, p, unlabelled):
    """A reference no method can reach without the truth: the labels' Gaussian-kernel
    average (Nadaraya-Watson, ambient coordinates) at the bandwidth that brings it closest
    to the true probability ``p`` on the unlabelled points; ``(|P - p|, P)`` there."""
    from scipy.spatial.distance import cdist
    D2 = cdist(X[unlabelled], X[lab], "sqeuclidean")
    spread = float(X.std(axis=0).max())
    best = (np.inf, None)
    for h in ORACLE_BANDWIDTHS * spread:
        K = np.exp(-(D2 - D2.min(axis=1, keepdims=True)) / (2.0 * h * h))
        P = K @ y_lab / K.sum(axis=1)
        best = min(best, (float(np.mean(np.abs(P - p[unlabelled]))), P), key=lambda b: b[0])
    return best


def smooth(methods, draws=3):
    from flgp import FLGPClassifier

    rows = []
    for kind in ("plane", "roll"):
        for m in (100, 300, 1000):
            for d in range(draws):
                X, y, p = smooth_cloud(kind, d)
                lab = np.random.default_rng(100 + d).choice(y.size, m, replace=False)
                u = L.unlabelled_mask(y.size, lab)
                yy = np.full(y.size, -1)
                yy[lab] = y[lab]
                mae, P = oracle_smoother(X, lab, y[lab].astype(float), p, u)
                rows.append(dict(cloud=kind, m=m, draw=d, method="oracle smoother",
                                 seconds=0.0, method_="knows p",
                                 bayes_disagreement=float(np.mean((P > 0.5) != (p[u] > 0.5))),
                                 mae=mae, top=float(np.maximum(P, 1 - P).mean()),
                                 true_top=float(np.maximum(p[u], 1 - p[u]).mean())))
                for meth in methods:
                    if meth not in FLGP_METHODS:
                        continue
                    t0 = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        clf = FLGPClassifier(**FLGP_METHODS[meth]).fit(X, yy)
                    P = np.asarray(clf.label_distributions_)[:, 1]
                    rows.append(dict(cloud=kind, m=m, draw=d, method=meth,
                                     seconds=time.perf_counter() - t0,
                                     method_=clf.method_,
                                     bayes_disagreement=float(np.mean(
                                         (P[u] > 0.5) != (p[u] > 0.5))),
                                     mae=float(np.mean(np.abs(P[u] - p[u]))),
                                     top=float(np.maximum(P[u], 1 - P[u]).mean()),
                                     true_top=float(np.maximum(p[u], 1 - p[u]).mean())))
                    r = rows[-1]
                    print(f"{kind:6s} m={m:5d} draw {d} {meth:20s} |P - p| {r['mae']:.3f}  "
                          f"top p {r['top']:.3f} (true {r['true_top']:.3f})  against the "
                          f"Bayes classifier {r['bayes_disagreement']:.3f}  "
                          f"({r['method_']})", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), choices=L.SETS)
    ap.add_argument("--quick", action="store_true", help="fewer draws (3, 3, 2, 2, 2)")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="subset of: " + ", ".join(list(FLGP_METHODS) + list(GRAPH_METHODS)))
    ap.add_argument("--checks", action="store_true",
                    help="run the no-regression checks (MNIST 100/200 random labels, "
                         "circles Table 1) instead")
    ap.add_argument("--smooth", action="store_true",
                    help="the clouds of known smooth class probabilities instead")
    ap.add_argument("--check-sets", nargs="+", default=["mnist", "circles"],
                    choices=["mnist", "circles"])
    ap.add_argument("--ks", nargs="+", type=int, default=None, choices=KS,
                    help="labels per class to run (default: all of 1, 2, 3, 5, 10)")
    ap.add_argument("--draws", type=int, default=None,
                    help="draws at each k instead of 20 / 10 (draw d is the same labelled "
                         "set in every run, so more draws extend the fewer)")
    ap.add_argument("--first-draw", type=int, default=0,
                    help="start at this draw (with --draws: extend an earlier run)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits
    methods = args.methods or list(DEFAULT_METHODS)
    try:
        import graphlearning  # noqa: F401
    except ImportError:
        gone = [m for m in methods if "graphlearning" in m]
        if gone:
            print(f"graphlearning is not installed (pip install graphlearning): leaving out "
                  f"{', '.join(gone)}", flush=True)
        methods = [m for m in methods if m not in gone]
    os.makedirs(RESULTS, exist_ok=True)
    with threadpool_limits(args.threads):
        if args.smooth:
            rows = smooth([m for m in methods if m in FLGP_METHODS],
                          draws=2 if args.quick else 3)
            path = args.json or os.path.join(RESULTS, "few_labels_smooth.json")
            print()
            for key in sorted({(r["cloud"], r["m"], r["method"]) for r in rows}):
                rs = [r for r in rows if (r["cloud"], r["m"], r["method"]) == key]
                print(f"{key[0]:6s} m={key[1]:5d} {key[2]:20s} |P - p| "
                      f"{np.mean([r['mae'] for r in rs]):.3f}  top p "
                      f"{np.mean([r['top'] for r in rs]):.3f} (true "
                      f"{np.mean([r['true_top'] for r in rs]):.3f})  against the Bayes "
                      f"classifier {np.mean([r['bayes_disagreement'] for r in rs]):.3f}")
            with open(path, "w") as fh:
                json.dump(dict(runs=rows), fh, indent=1)
            print(f"wrote {path}")
            return
        if args.checks:
            rows = checks(methods, draws=2 if args.quick else 5, which=args.check_sets)
            path = args.json or os.path.join(RESULTS, "few_labels_checks.json")
            groups = {}
            for r in rows:
                groups.setdefault((r["set"], r["m"], r["method"]), []).append(r)
            summary = []
            for (name, m, meth), rs in groups.items():
                summary.append(dict(set=name, m=m, method=meth, draws=len(rs), **{
                    key: float(np.mean([r[key] for r in rs]))
                    for key in ("error", "ece", "nll", "seconds")}))
                print(f"{name:12s} m={m:3d} {meth:34s} err {summary[-1]['error'] * 100:6.2f}% "
                      f"ECE {summary[-1]['ece']:.3f} NLL {summary[-1]['nll']:.3f} "
                      f"{summary[-1]['seconds']:.2f} s")
            with open(path, "w") as fh:
                json.dump(dict(summary=summary, runs=rows), fh, indent=1)
            print(f"wrote {path}")
            return
        draws = dict(QUICK_DRAWS if args.quick else DRAWS)
        if args.draws is not None:
            draws = {k: args.draws for k in draws}
        if args.ks is not None:
            draws = {k: n for k, n in draws.items() if k in args.ks}
        rows = run(args.sets, draws, methods, first_draw=args.first_draw)
    table = summarise(rows)
    print_table(table)
    path = args.json or os.path.join(RESULTS, "few_labels.json")
    with open(path, "w") as fh:
        json.dump(dict(flgp_methods={name: spelled(kw) for name, kw in FLGP_METHODS.items()},
                       summary=table, runs=rows), fh, indent=1)
    plot(table, os.path.splitext(path)[0] + ".png")
    plot_reliability(rows, os.path.splitext(path)[0] + "_reliability.png")
    print(f"wrote {path}, {os.path.splitext(path)[0]}.png and "
          f"{os.path.splitext(path)[0]}_reliability.png")


if __name__ == "__main__":
    main()
