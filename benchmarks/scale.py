"""How the FLGP engine scales with n: time per stage and peak memory from 10^4 to 10^7
points (p = 3) and to 10^6 points (p = 100), s = 1000 induced points (k-means), r = 3,
LAE kernel, M = 100 eigenpairs — the package defaults; the graph build's own stage timers
("neighbours" includes the LAE weights, "kernel" the column sums, transition and products).

Each configuration runs in a fresh process (its peak resident memory is its own); times are
medians over ``--repeats`` runs (one run at n >= 10^7). Writes a table, JSON and a log-log
plot (time and memory against n, with a slope-1 guide).

    python benchmarks/scale.py                         # both dimensions, n up to 10^7
    python benchmarks/scale.py --max-n 1000000 --backends torch,keops
    python benchmarks/scale.py --json benchmarks/results/scale.json \
        --plot benchmarks/results/scale.png
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

SIZES = {3: [10_000, 100_000, 1_000_000, 10_000_000], 100: [10_000, 100_000, 1_000_000]}
S, R, M = 1000, 3, 100   # s is --induced (default 1000)


def _data(n, p, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    th = rng.uniform(0, 2 * np.pi, n)
    base = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)]
    Q = np.linalg.qr(rng.standard_normal((max(p, 3), max(p, 3))))[0][:3, :p]
    X = base @ Q
    X += 0.01 * rng.standard_normal((n, p))
    return X


def _run_one(args, queue):
    n, p, backend, repeats, S = args
    import torch

    torch.set_num_threads(int(os.environ.get("FLGP_BENCH_THREADS", "2")))
    X = _data(n, p)
    engine_stages = _profile()["engine_stages"]
    rows = [engine_stages(X, M, n_induced=S, n_neighbors=R, random_state=rep,
                                         backend=backend) for rep in range(repeats)]
    med = [statistics.median(c) for c in zip(*rows)]
    queue.put(dict(n=n, p=p, backend=backend, s=S, r=R, M=M, kmeans_s=med[0],
                   neighbors_s=med[1], kernel_s=med[2], eigenpairs_s=med[3], total_s=med[4],
                   peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                   data_gb=X.nbytes / 2**30, repeats=repeats))


def _profile() -> dict:
    """The names of ``benchmarks/profile.py`` (``spawn``, ``engine_stages``), run by path."""
    import runpy

    return runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "profile.py"))


HEADER = (f"{'n':>10} {'p':>4} {'s':>5} {'backend':>7} | {'k-means':>8} {'neighb':>8} "
          f"{'kernel':>8} {'eigen':>8} {'total':>8} | {'peak GB':>7} {'data GB':>7}")


def _fmt(r):
    return (f"{r['n']:>10,} {r['p']:>4} {r['s']:>5} {r['backend']:>7} | {r['kmeans_s']:8.2f} "
            f"{r['neighbors_s']:8.2f} {r['kernel_s']:8.2f} {r['eigenpairs_s']:8.2f} "
            f"{r['total_s']:8.2f} | {r['peak_rss_gb']:7.2f} {r['data_gb']:7.2f}")


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    keys = sorted({(r["p"], r["backend"]) for r in results})
    for p, b in keys:
        rs = sorted((r for r in results if r["p"] == p and r["backend"] == b),
                    key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        a1.loglog(ns, [r["total_s"] for r in rs], "o-", label=f"p={p}, {b}")
        a2.loglog(ns, [r["peak_rss_gb"] for r in rs], "o-", label=f"p={p}, {b}")
    for ax in (a1, a2):
        lo, hi = 1e4, 1e7
        ref = ax.get_lines()[0].get_ydata()[0] if ax.get_lines() else 1.0
        ax.loglog([lo, hi], [ref, ref * hi / lo], "k:", label="slope 1")
        ax.set_xlabel("n")
        ax.legend(fontsize=7)
    a1.set_ylabel("engine time (s)")
    a2.set_ylabel("peak resident memory (GB)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-n", type=int, default=10_000_000)
    ap.add_argument("--dims", default="3,100")
    ap.add_argument("--backends", default="torch", help="comma list of torch, keops")
    ap.add_argument("--induced", type=int, default=S, help="s, the induced points (1000)")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    a = ap.parse_args(argv)
    spawn = _profile()["spawn"]
    print(f"FLGP engine, s={a.induced}, r={R}, M={M}, k-means + LAE; times in seconds (median of "
          f"{a.repeats}, one run at n >= 10^7); peak = max resident memory of the process")
    print(HEADER)
    results = []
    for p in [int(d) for d in a.dims.split(",")]:
        for backend in a.backends.split(","):
            for n in SIZES[p]:
                if n > a.max_n:
                    continue
                reps = 1 if n >= 10_000_000 else a.repeats
                res = spawn(_run_one, (n, p, backend, reps, a.induced))
                results.append(res)
                print(_fmt(res), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
