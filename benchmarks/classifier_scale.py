"""The default classifier at scale: time, peak memory and error as the points and labels
grow, and MNIST's fit beside graphlearning's.

* ``curve`` - a noisy 3-d curve, ``X = [cos 20u, sin 20u, u] + 0.01 ε`` (``u`` uniform on
  [0, 1]), two classes by ``sin 10u > 0``, ``m`` labels drawn uniformly (seed 0); for each
  ``(n, m)`` in a fresh process: ``FLGPClassifier()`` (which representation its rule took,
  its time and peak resident memory, its error on the unlabelled points), the heat kernel
  alone (``FLGPClassifier(HeatKernelPrior())``) on the same draw, and - up to
  ``--graph-matern-max-n`` points - the graph Matérn prior alone (``GraphMaternPrior()``: the
  full-resolution classifier whatever its cost).
* ``mnist`` - all 70,000 digits, PCA to 100 dimensions: ``FLGPClassifier()``'s fit against
  graphlearning's graph build plus Poisson learning (``gl.weightmatrix.knn(X, 10)``,
  ``gl.ssl.poisson``; ``pip install graphlearning annoy``), in the same process, at one
  label a class (stratified draws 0-2) and with 100 random labels (seeds 0-2): medians of
  the draws, and the ratio.

    python benchmarks/classifier_scale.py                      # both, n up to 10^7
    python benchmarks/classifier_scale.py --workloads curve --sizes 100000 1000000 \\
        --labels 100 300 1000 10000 --json benchmarks/results/classifier_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# this folder holds a file named like the dask.distributed package: keep it off the path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def curve(n, m, seed=0):
    """``(X, y, yy)``: the curve's points, classes and labels (-1 unlabelled)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    u = rng.uniform(0.0, 1.0, n)
    X = np.c_[np.cos(20 * u), np.sin(20 * u), u] + 0.01 * rng.standard_normal((n, 3))
    y = (np.sin(10 * u) > 0).astype(np.int64)
    yy = np.full(n, -1)
    lab = rng.choice(n, m, replace=False)
    yy[lab] = y[lab]
    return X, y, yy


def _fit_curve(args, out):
    """One fit in this (fresh) process: ``out.put`` its row."""
    n, m, prior, threads = args
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from threadpoolctl import threadpool_limits

    from flgp import FLGPClassifier, GraphMaternPrior, HeatKernelPrior

    X, y, yy = curve(n, m)
    est = FLGPClassifier({"default": None, "heat kernel": HeatKernelPrior(),
                          "graph matern": GraphMaternPrior()}[prior])
    with threadpool_limits(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, yy)
        seconds = time.perf_counter() - t0
    unl = yy < 0
    fit = est._chosen_fit
    out.put(dict(workload="curve", n=n, labels=m, prior=prior, method=est.method_,
                 seconds=seconds,
                 peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                 error=float(np.mean(est.transduction_[unl] != y[unl])),
                 plan={str(k): v for k, v in (getattr(fit, "plan", None) or {}).items()},
                 skipped=est.skipped_methods_))


def run_curve(sizes, labels, graph_matern_max_n, threads):
    import runpy

    # benchmarks/profile.py's fresh-process runner (by path: "profile" is a stdlib name)
    spawn = runpy.run_path(os.path.join(_HERE, "profile.py"))["spawn"]
    rows = []
    for n in sizes:
        for m in labels:
            priors = ["default", "heat kernel"] + (["graph matern"] if n <= graph_matern_max_n
                                                   else [])
            for prior in priors:
                try:
                    r = spawn(_fit_curve, (n, m, prior, threads))
                except RuntimeError as exc:          # killed (memory): say so, go on
                    r = dict(workload="curve", n=n, labels=m, prior=prior, method="-",
                             seconds=float("nan"), peak_gb=float("nan"),
                             error=float("nan"), plan={}, skipped={}, failed=str(exc))
                rows.append(r)
                print(f"curve n={n:>10,} m={m:>6,} {prior:12s} -> {r['method']:5s} "
                      f"{r['seconds']:7.1f} s {r['peak_gb']:6.2f} GB error "
                      f"{100 * r['error']:.2f} % {r['plan'] or ''}", flush=True)
    return rows


def run_mnist(threads, draws=3):
    import numpy as np
    from threadpoolctl import threadpool_limits

    sys.path.insert(0, os.path.join(_ROOT, "experiments"))
    import few_labels_lib as L
    import graphlearning as gl

    from flgp import FLGPClassifier

    X, y = L.load_set("mnist")
    rows = []
    with threadpool_limits(threads):
        for kind in ("one a class", "100 random"):
            for d in range(draws):
                lab = (L.stratified_draw(y, 1, d, 10) if kind == "one a class"
                       else np.random.default_rng(d).choice(y.size, 100, replace=False))
                yy = np.full(y.size, -1)
                yy[lab] = y[lab]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    est = FLGPClassifier().fit(X, yy)
                    ours = time.perf_counter() - t0
                t0 = time.perf_counter()
                W = gl.weightmatrix.knn(X, 10)
                graph = time.perf_counter() - t0
                t0 = time.perf_counter()
                model = gl.ssl.poisson(W)
                model.fit(lab, y[lab])
                pred = model.predict()
                poisson = time.perf_counter() - t0
                unl = yy < 0
                r = dict(workload="mnist", labels=kind, draw=d, seconds=ours,
                         error=float(np.mean(est.transduction_[unl] != y[unl])),
                         method=est.method_, peer_graph_seconds=graph,
                         peer_solve_seconds=poisson,
                         peer_error=float(np.mean(pred[unl] != y[unl])),
                         ratio=ours / (graph + poisson),
                         plan={str(k): v for k, v in
                               (getattr(est._chosen_fit, "plan", None) or {}).items()})
                rows.append(r)
                print(f"mnist {kind:11s} draw {d}: flgp {ours:5.2f} s "
                      f"({100 * r['error']:.2f} %) graphlearning {graph:.2f} + "
                      f"{poisson:.2f} s ({100 * r['peer_error']:.2f} %): "
                      f"{r['ratio']:.2f}x {r['plan']}", flush=True)
    return rows


def print_table(rows):
    curve_rows = [r for r in rows if r["workload"] == "curve"]
    if curve_rows:
        print(f"\n{'n':>10} {'labels':>7} {'prior':>12} {'took':>6} {'seconds':>8} "
              f"{'peak GB':>8} {'error %':>8}")
        for r in curve_rows:
            print(f"{r['n']:>10,} {r['labels']:>7,} {r['prior']:>12} {r['method']:>6} "
                  f"{r['seconds']:8.1f} {r['peak_gb']:8.2f} {100 * r['error']:8.2f}")
    for kind in ("one a class", "100 random"):
        rs = [r for r in rows if r["workload"] == "mnist" and r["labels"] == kind]
        if rs:
            med = statistics.median
            peer = med(r["peer_graph_seconds"] + r["peer_solve_seconds"] for r in rs)
            print(f"mnist {kind:11s}: flgp {med(r['seconds'] for r in rs):.2f} s, "
                  f"graphlearning {peer:.2f} s, ratio (median of draws) "
                  f"{med(r['ratio'] for r in rs):.2f}; error "
                  f"{100 * statistics.mean(r['error'] for r in rs):.2f} % against "
                  f"{100 * statistics.mean(r['peer_error'] for r in rs):.2f} %")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["curve", "mnist"],
                    choices=["curve", "mnist"])
    ap.add_argument("--sizes", nargs="+", type=int,
                    default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--labels", nargs="+", type=int, default=[100, 300, 1000, 10_000])
    ap.add_argument("--graph-matern-max-n", type=int, default=1_000_000,
                    help="fit GraphMaternPrior() alone up to this many points")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    if "curve" in args.workloads:
        rows += run_curve(args.sizes, args.labels, args.graph_matern_max_n, args.threads)
    if "mnist" in args.workloads:
        rows += run_mnist(args.threads)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
