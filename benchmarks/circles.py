"""Fit + predict time and peak memory of every circles method (FLGP paper, Table 2).

Each (n, method) runs in a fresh process, so its peak resident memory is its own; times are
medians over ``--repeats`` fits (fit includes predicting every unlabelled point, which is
``transduction_``). m = 100 labels, s = 600, r = 3, M = 100 as in the paper.

    python benchmarks/circles.py                     # n = 2400, 12000, 120000
    python benchmarks/circles.py --sizes 12000 --methods LKFLGP,SKFLGP --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import time

METHODS = ["RBF GP", "KSVM", "GLGP", "Nystrom-GLGP", "SRFLGP", "SKFLGP", "LRFLGP", "LKFLGP"]
# authors' R/Rcpp package measured on a 2-core machine like ours (SPEC), n = 12000, m = 100
AUTHORS_R_2CORE = {"LKFLGP": 0.39, "SKFLGP": 3.13, "LRFLGP": 0.32, "SRFLGP": 2.23}


def _one(args, queue):
    n, m, method, repeats = args
    import warnings

    import numpy as np
    import torch

    torch.set_num_threads(int(os.environ.get("FLGP_BENCH_THREADS", "2")))
    from flgp.datasets import make_concentric_circles
    from flgp.reproduce.circles import make_method, standardise

    times, errors = [], []
    for rep in range(repeats):
        X, y = make_concentric_circles(n, random_state=rep)
        X = standardise(X)
        rng = np.random.default_rng(rep)
        lab = rng.choice(n, m, replace=False)
        yy = np.full(n, -1)
        yy[lab] = y[lab]
        est = make_method(method, random_state=rep)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, yy)
        times.append(time.perf_counter() - t0)
        unl = yy == -1
        errors.append(float(np.mean(est.transduction_[unl] != y[unl]) * 100))
    queue.put(dict(n=n, m=m, method=method, seconds_median=statistics.median(times),
                   seconds_all=times, error_mean=float(np.mean(errors)), repeats=repeats,
                   peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2400,12000,120000")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--glgp-max-n", type=int, default=4800,
                    help="skip GLGP above this n (dense n x n, O(n^3))")
    ap.add_argument("--json", help="write the results to this JSON file")
    a = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    results = []
    print(f"{'n':>7} {'method':<13} {'median s':>9} {'error %':>8} {'peak GB':>8} "
          f"{'R 2-core s':>10}")
    for n in [int(v) for v in a.sizes.split(",")]:
        for method in a.methods.split(","):
            if method == "GLGP" and n > a.glgp_max_n:
                continue
            repeats = a.repeats if n <= 12000 else 1
            q = ctx.Queue()
            p = ctx.Process(target=_one, args=((n, a.m, method, repeats), q))
            p.start()
            r = q.get()
            p.join()
            results.append(r)
            ref = AUTHORS_R_2CORE.get(method) if n == 12000 else None
            print(f"{n:>7} {method:<13} {r['seconds_median']:9.3f} {r['error_mean']:8.2f} "
                  f"{r['peak_rss_gb']:8.2f} {ref if ref is not None else '':>10}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
