"""The labelling loop from one label per class (issue 43's protocol): MNIST, all 70,000
digits in 100 PCA dimensions; a start of one label per class (stratified, seeded 100, 101,
102 by default); nine rounds of ten suggestions each, to 100 labels; the error and expected
calibration error on the unlabelled points after the last round, and the whole loop's time
(the first fit included).

Methods, on the same starts:

* ``flgp default``: ``FLGPClassifier(warm_start=True)`` and ``suggest_labels(10)`` - the
  full-resolution classifier and its default strategy (the score margin weighted by the
  graph distance to the nearest label, a batch greedy with each pick counting as a label;
  each refit solves for the new labels' columns only);
* ``flgp heat kernel``: the same loop with the heat kernel alone,
  ``FLGPClassifier(HeatKernelPrior(), warm_start=True)`` (expected variance reduction in
  the eigenbasis);
* ``poisson + uncertainty (graphlearning)``: graphlearning's Poisson learning on its
  10-NN graph with its active learner and smallest-margin uncertainty sampling, ten
  queries a round (graphlearning 1.7.5; a benchmark-only peer, ``pip install
  graphlearning annoy``); its time includes its graph build.

    python benchmarks/labelling_loop.py --json benchmarks/results/labelling_loop.json

``--cloud blobs``: the loop on clustered data - sixteen Gaussian blobs (250 points, sd
0.5) on a ring, classes drawn at random per blob, two labels a class to start, six rounds
of ``suggest_labels(3)`` against ``strategy="random"`` on the same starts (seeds 0-2),
at ring radii 6, 8 (the blobs touch) and 10 (apart), and with three classes at radius 8:
the error after 22 (23) labels, its ratio to random's, and the picks that fell in a blob
a label had already reached while three or more blobs had none.

    python benchmarks/labelling_loop.py --cloud blobs --json benchmarks/results/labelling_blobs.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "experiments"))
import few_labels_lib as L  # noqa: E402

from flgp import HeatKernelPrior  # noqa: E402

ROUNDS, BATCH = 9, 10


def ece(P, y, bins=15):
    conf, pred = P.max(1), P.argmax(1)
    out = 0.0
    for a, b in zip(np.linspace(0, 1, bins + 1)[:-1], np.linspace(0, 1, bins + 1)[1:]):
        s = (conf > a) & (conf <= b)
        if s.any():
            out += s.mean() * abs(np.mean(pred[s] == y[s]) - conf[s].mean())
    return float(out)


def start(y, seed):
    rng = np.random.default_rng(seed)
    return np.array([rng.choice(np.flatnonzero(y == c)) for c in range(int(y.max()) + 1)])


def flgp_loop(X, y, lab, kwargs):
    from flgp import FLGPClassifier

    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    refits = []
    t0 = time.perf_counter()
    clf = FLGPClassifier(warm_start=True, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, yy)
        for _ in range(ROUNDS):
            rows = clf.suggest_labels(BATCH)
            yy[rows] = y[rows]
            t1 = time.perf_counter()
            clf.fit(X, yy)
            refits.append(time.perf_counter() - t1)
    seconds = time.perf_counter() - t0
    unl = yy < 0
    P = np.asarray(clf.label_distributions_)
    # a cold fit of the first round's labels: what a refit is measured against
    first = np.full(y.size, -1)
    first[lab] = y[lab]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t1 = time.perf_counter()
        FLGPClassifier(**kwargs).fit(X, first)
        cold = time.perf_counter() - t1
    return dict(error=float(np.mean(P[unl].argmax(1) != y[unl])), ece=ece(P[unl], y[unl]),
                seconds=seconds, labels=int((~unl).sum()), refit_seconds=refits,
                cold_fit_seconds=cold, largest_refit_share=max(refits) / cold)


def graphlearning_loop(X, y, lab):
    import graphlearning as gl

    t0 = time.perf_counter()
    W = gl.weightmatrix.knn(X, 10)
    learner = gl.active_learning.active_learner(gl.ssl.poisson(W), gl.active_learning.unc_sampling,
                                                lab.copy(), y[lab].copy())
    for _ in range(ROUNDS):
        q = learner.select_queries(batch_size=BATCH)
        learner.update(q, y[q])
    seconds = time.perf_counter() - t0
    u = learner.u
    unl = np.ones(y.size, dtype=bool)
    unl[learner.labeled_ind] = False
    # scores, not probabilities: their softmax's ECE is not comparable (left out)
    return dict(error=float(np.mean(np.argmax(u, 1)[unl] != y[unl])), ece=None,
                seconds=seconds, labels=int((~unl).sum()))


METHODS = {"flgp default": lambda X, y, lab: flgp_loop(X, y, lab, {}),
           "flgp heat kernel": lambda X, y, lab: flgp_loop(X, y, lab,
                                                           {"prior": HeatKernelPrior()}),
           "poisson + uncertainty (graphlearning)": graphlearning_loop}


def ring_of_blobs(seed, radius, classes, per_blob=250, blobs=16):
    rng = np.random.default_rng(seed)
    angles = np.arange(blobs) * 2 * np.pi / blobs
    centres = np.c_[np.cos(angles), np.sin(angles)] * radius
    X = np.concatenate([rng.normal(size=(per_blob, 2)) * 0.5 + c for c in centres])
    cls = rng.integers(0, classes, blobs)
    cls[:classes] = np.arange(classes)
    rng.shuffle(cls)
    blob = np.repeat(np.arange(blobs), per_blob)
    return X, cls[blob], blob


def blob_loop(X, y, blob, lab, strategy, rounds=6, batch=3):
    from flgp import FLGPClassifier

    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    clf = FLGPClassifier(warm_start=True)
    repeats = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(rounds):
            rows = clf.fit(X, yy).suggest_labels(batch, strategy=strategy)
            reached = set(blob[yy >= 0].tolist())
            if len(set(blob.tolist()) - reached) >= batch:
                repeats += int(np.isin(blob[rows], list(reached)).sum())
            yy[rows] = y[rows]
        clf.fit(X, yy)
    unl = yy < 0
    return dict(error=float(np.mean(clf.transduction_[unl] != y[unl])),
                labels=int((~unl).sum()), reached=int(np.unique(blob[~unl]).size),
                picks_in_reached_blobs=repeats)


def blobs_main(args):
    rows = []
    for radius, classes in ((6.0, 2), (8.0, 2), (10.0, 2), (8.0, 3)):
        errs = {}
        for strategy in (None, "random"):
            runs = []
            for seed in (0, 1, 2):
                X, y, blob = ring_of_blobs(seed, radius, classes)
                rng = np.random.default_rng(seed)
                lab = np.concatenate([rng.choice(np.flatnonzero(y == c), 2, replace=False)
                                      for c in range(classes)])
                runs.append(blob_loop(X, y, blob, lab, strategy))
            name = "default" if strategy is None else "random"
            errs[name] = float(np.mean([r["error"] for r in runs]))
            rows.append(dict(radius=radius, classes=classes, strategy=name, runs=runs))
            print(f"radius {radius:4.1f} {classes} classes {name:8s} error "
                  f"{100 * errs[name]:5.1f} %  blobs labelled "
                  f"{[r['reached'] for r in runs]}  picks in reached blobs "
                  f"{[r['picks_in_reached_blobs'] for r in runs]}", flush=True)
        print(f"radius {radius:4.1f} {classes} classes: default / random = "
              f"{errs['default'] / errs['random']:.2f}\n", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cloud", choices=["mnist", "blobs"], default="mnist")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    if args.cloud == "blobs":
        with threadpool_limits(args.threads):
            rows = blobs_main(args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(dict(rounds=6, batch=3, runs=rows), fh, indent=1)
            print(f"wrote {args.json}")
        return

    X, y = L.load_set("mnist")
    rows = []
    with threadpool_limits(args.threads):
        for seed in args.seeds:
            lab = start(y, seed)
            for name in args.methods:
                r = dict(method=name, seed=seed, **METHODS[name](X, y, lab))
                rows.append(r)
                e = "-" if r["ece"] is None else f"{r['ece']:.3f}"
                times = r.get("refit_seconds")
                refit = ("" if times is None else
                         f"; refits {min(times):.2f}-{max(times):.2f} s against a cold "
                         f"fit's {r['cold_fit_seconds']:.2f} s (at most "
                         f"{100 * r['largest_refit_share']:.0f} %)")
                print(f"seed {seed} {name:40s} {r['labels']} labels: error "
                      f"{100 * r['error']:.2f} %, ECE {e}, {r['seconds']:.1f} s{refit}",
                      flush=True)
    print("\nmeans over seeds")
    for name in args.methods:
        rs = [r for r in rows if r["method"] == name]
        eces = [r["ece"] for r in rs if r["ece"] is not None]
        print(f"{name:40s} error {100 * np.mean([r['error'] for r in rs]):.2f} %  ECE "
              f"{(np.mean(eces) if eces else float('nan')):.3f}  time "
              f"{np.median([r['seconds'] for r in rs]):.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(rounds=ROUNDS, batch=BATCH, runs=rows), fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
