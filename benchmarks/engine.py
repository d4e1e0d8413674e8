"""Per-stage time and peak memory of the FLGP eigenpair engine.

Stages (the graph build's own stage timers): induced points, neighbour search with the
kernel weights, column sums + transition + products, eigenpairs; the total includes the
input check. Each configuration runs in a fresh process (so its peak resident memory is
its own); times are medians over ``--repeats`` runs.

    python benchmarks/engine.py               # the three sizes of the engine issue
    python benchmarks/engine.py --quick       # small sizes only
    python benchmarks/engine.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

CONFIGS = [  # (n, p, s, M, r)
    (12_000, 2, 600, 200, 3),
    (70_000, 100, 1_000, 200, 3),
    (1_000_000, 3, 1_000, 200, 3),
]


def _data(n, p, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    # a curved p-dimensional cloud: a noisy closed curve embedded by a random rotation
    th = rng.uniform(0, 2 * np.pi, n)
    base = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)]
    Q = np.linalg.qr(rng.standard_normal((max(p, 3), max(p, 3))))[0][:3, :p]
    return base @ Q + 0.01 * rng.standard_normal((n, p))


def _run_one(args, queue):
    n, p, s, M, r, subsample, kernel, repeats = args
    import torch

    torch.set_num_threads(int(os.environ.get("FLGP_BENCH_THREADS", "2")))
    X = _data(n, p)
    engine_stages = _profile()["engine_stages"]
    rows = [engine_stages(X, M, n_induced=s, n_neighbors=r, subsample=subsample,
                                         kernel=kernel, random_state=rep) for rep in range(repeats)]
    med = [statistics.median(c) for c in zip(*rows)]
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    data_gb = X.nbytes / 2**30
    queue.put(dict(n=n, p=p, s=s, M=M, r=r, subsample=subsample, kernel=kernel,
                   landmarks_s=med[0], neighbors_s=med[1], kernel_s=med[2],
                   eigenpairs_s=med[3], total_s=med[4], peak_rss_gb=peak_gb,
                   data_gb=data_gb, repeats=repeats))


def _profile() -> dict:
    """The names of ``benchmarks/profile.py`` (``spawn``, ``engine_stages``), run by path."""
    import runpy

    return runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "profile.py"))


def run(configs, repeats):
    spawn = _profile()["spawn"]
    out = []
    for (n, p, s, M, r) in configs:
        for subsample in ("random", "kmeans"):
            for kernel in ("lae", "se"):
                res = spawn(_run_one, (n, p, s, M, r, subsample, kernel, repeats))
                out.append(res)
                print(_fmt(res), flush=True)
    return out


HEADER = (f"{'n':>9} {'p':>4} {'s':>5} {'sub':>7} {'kern':>4} | {'landmk':>7} {'neigh':>7} "
          f"{'kernel':>7} {'eigen':>7} {'total':>7} | {'peak GB':>7}")


def _fmt(r):
    return (f"{r['n']:>9} {r['p']:>4} {r['s']:>5} {r['subsample']:>7} {r['kernel']:>4} | "
            f"{r['landmarks_s']:7.3f} {r['neighbors_s']:7.3f} {r['kernel_s']:7.3f} "
            f"{r['eigenpairs_s']:7.3f} {r['total_s']:7.3f} | {r['peak_rss_gb']:7.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the 12,000-point case")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results to this JSON file")
    a = ap.parse_args(argv)
    configs = CONFIGS[:1] if a.quick else CONFIGS
    print("times in seconds (median of %d); peak = max resident memory of the process"
          % a.repeats)
    print(HEADER)
    res = run(configs, a.repeats)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
