"""flgp against its peers on the same inputs: MNIST 70,000 (PCA 100), 100 labels.

* ``flgp`` - ``FLGPClassifier()`` (s = 1000 k-means induced points, r = 3, LAE, M = 100,
  10-class EP with the diffusion time by marginal likelihood), its ``transduction_``;
* ``graphlearning`` - Calder's graphlearning: the symmetrised Gaussian k-NN graph
  (``gl.weightmatrix.knn(X, 10)``) and Poisson learning (``gl.ssl.poisson``). Its k-NN
  search is annoy (approximate, graphlearning's default above 5 dimensions) when annoy
  imports, else scikit-learn's exact brute-force search passed as ``knn_data`` (said in
  the output);
* ``labelspreading`` - scikit-learn's ``LabelSpreading(kernel="knn", n_neighbors=10)``.

Every run is a fresh process that loads the PCA'd digits (computed once and cached, not
timed) and times everything from the points and the labels to a label for every point;
the error is measured on the unlabelled points. Repeat ``i`` draws its 100 labels with seed
``i`` - the same for every method - and runs the methods in a rotated order, so the
methods alternate on the shared machine. Medians over ``--repeats`` (>= 3), with the
ratio of flgp's median time to each peer's.

graphlearning (and annoy) are benchmark-only peers, never dependencies of flgp:
``pip install graphlearning`` (tested with 1.7.5; annoy optional).

    python benchmarks/peers.py --repeats 3 --json benchmarks/results/peers.json
    python benchmarks/peers.py --extra-path /tmp/peerpkgs      # where annoy is installed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

METHODS = ("flgp", "graphlearning", "labelspreading")
N_LABELS = 100


def _profile_module():
    """``benchmarks/profile.py`` (loaded by path: this folder is kept off the import
    path): its PCA'd digits and its fresh-process runner."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_flgp_bench_profile",
                                                  os.path.join(_HERE, "profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mnist_pca():
    return _profile_module().mnist_pca()


def _labels(truth, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    lab = np.sort(rng.choice(truth.size, N_LABELS, replace=False))
    return lab


def run_one(args, queue):
    method, seed, threads, extra = args
    if extra:
        sys.path.insert(0, extra)
    sys.path.insert(0, _ROOT)
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)
    X, truth = mnist_pca()
    lab = _labels(truth, seed)
    unl = np.ones(truth.size, dtype=bool)
    unl[lab] = False
    note = ""
    if method == "flgp":
        from flgp import FLGPClassifier

        y = np.full(truth.size, -1)
        y[lab] = truth[lab]
        t0 = time.perf_counter()
        pred = FLGPClassifier().fit(X, y).transduction_
        wall = time.perf_counter() - t0
    elif method == "graphlearning":
        import graphlearning as gl

        try:
            import annoy  # noqa: F401
            knn_data, note = None, "annoy k-NN (approximate)"
        except ImportError:
            knn_data, note = "sklearn", "exact k-NN (scikit-learn brute force)"
        t0 = time.perf_counter()
        if knn_data == "sklearn":
            from sklearn.neighbors import NearestNeighbors

            dist, ind = NearestNeighbors(n_neighbors=10, algorithm="brute",
                                         n_jobs=threads).fit(X).kneighbors(X)
            knn_data = (ind, dist)
        W = gl.weightmatrix.knn(X, 10, knn_data=knn_data)
        pred = gl.ssl.poisson(W).fit_predict(lab, truth[lab])
        wall = time.perf_counter() - t0
    else:
        from sklearn.semi_supervised import LabelSpreading

        y = np.full(truth.size, -1)
        y[lab] = truth[lab]
        t0 = time.perf_counter()
        pred = LabelSpreading(kernel="knn", n_neighbors=10, n_jobs=threads).fit(
            X, y).transduction_
        wall = time.perf_counter() - t0
    queue.put(dict(method=method, seed=seed, wall_s=wall, note=note,
                   error=float(np.mean(np.asarray(pred)[unl] != truth[unl]))))


def summarise(runs):
    out = {}
    for m in METHODS:
        rs = [r for r in runs if r["method"] == m]
        if rs:
            out[m] = dict(wall_s=statistics.median(r["wall_s"] for r in rs),
                          error=statistics.median(r["error"] for r in rs),
                          walls=[r["wall_s"] for r in rs], errors=[r["error"] for r in rs],
                          note=rs[0]["note"])
    return out


def table(summary) -> str:
    flgp = summary.get("flgp")
    lines = ["| method | median s | runs (s) | median error % | errors % | flgp time / "
             "method time |", "|---|---:|---|---:|---|---:|"]
    for m, s in summary.items():
        ratio = f"{flgp['wall_s'] / s['wall_s']:.2f}" if flgp else "-"
        name = m + (f" ({s['note']})" if s["note"] else "")
        lines.append(f"| {name} | {s['wall_s']:.2f} | "
                     f"{', '.join(f'{w:.2f}' for w in s['walls'])} | {100 * s['error']:.2f} | "
                     f"{', '.join(f'{100 * e:.2f}' for e in s['errors'])} | {ratio} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--extra-path", default="",
                    help="a folder put first on the children's import path (e.g. where "
                         "annoy is installed for graphlearning)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.repeats < 3:
        print("note: fewer than 3 repeats; the medians are not robust")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    methods = [m for m in a.methods.split(",") if m]
    mnist_pca()                                   # the PCA once, before any timing
    runs = []
    for rep in range(a.repeats):
        order = methods[rep % len(methods):] + methods[:rep % len(methods)]
        for m in order:
            res = _profile_module().spawn(run_one, (m, rep, a.threads, a.extra_path))
            runs.append(res)
            print(f"repeat {rep} {m}: {res['wall_s']:.2f} s, error {100 * res['error']:.2f}%"
                  f"{' (' + res['note'] + ')' if res['note'] else ''}", flush=True)
    summary = summarise(runs)
    print()
    print(table(summary))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(threads=a.threads, repeats=a.repeats, labels=N_LABELS,
                           summary=summary, runs=runs), fh, indent=1)


if __name__ == "__main__":
    main()
