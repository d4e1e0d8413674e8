"""Fit time and peak memory of the embedding transformers, dense against FLGP.

Each configuration runs in a fresh process (its peak resident memory is its own); times
are medians over ``--repeats`` runs. Data: a noisy Swiss roll-like closed curve in R^3
(p = 3), as in the engine benchmark.

    python benchmarks/embedding.py                 # dense to n = 5000, FLGP to n = 10^6
    python benchmarks/embedding.py --quick
    python benchmarks/embedding.py --json benchmarks/results/embedding.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import time

CONFIGS = [  # (transformer, method, n, k)
    ("DiffusionMap", "dense", 2_000, 10),
    ("GPEmbedding", "dense", 2_000, 10),
    ("DiffusionMap", "dense", 5_000, 10),
    ("GPEmbedding", "dense", 5_000, 10),
    ("DiffusionMap", "flgp", 5_000, 10),
    ("GPEmbedding", "flgp", 5_000, 10),
    ("DiffusionMap", "flgp", 100_000, 10),
    ("GPEmbedding", "flgp", 100_000, 10),
    ("GPEmbedding", "flgp", 1_000_000, 10),
]
QUICK = [c for c in CONFIGS if c[2] <= 5_000 and c[2] != 5_000 or c[1] == "flgp"
         and c[2] <= 100_000]


def _data(n, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    th = rng.uniform(0, 2 * np.pi, n)
    return np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.01 * rng.standard_normal((n, 3))


def _run_one(args, queue):
    name, method, n, k, repeats = args
    import torch

    torch.set_num_threads(int(os.environ.get("FLGP_BENCH_THREADS", "2")))
    import flgp.embedding as emb

    X = _data(n)
    times = []
    for rep in range(repeats):
        est = getattr(emb, name)(k, method=method, t=8, random_state=rep)
        t0 = time.perf_counter()
        est.fit_transform(X)
        times.append(time.perf_counter() - t0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"transformer": name, "method": method, "n": n, "k": k,
               "fit_s_median": statistics.median(times), "fit_s_all": times,
               "peak_rss_mb": peak_mb})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    rows = []
    print(f"{'transformer':<13} {'method':<6} {'n':>9} {'k':>3} {'fit s (median)':>15} "
          f"{'peak MB':>9}")
    for name, method, n, k in (QUICK if args.quick else CONFIGS):
        q = ctx.Queue()
        proc = ctx.Process(target=_run_one, args=((name, method, n, k, args.repeats), q))
        proc.start()
        row = q.get()
        proc.join()
        rows.append(row)
        print(f"{name:<13} {method:<6} {n:>9,} {k:>3} {row['fit_s_median']:>15.2f} "
              f"{row['peak_rss_mb']:>9.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
