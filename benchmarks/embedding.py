"""Embedding transformers: where ``method="auto"`` switches from dense to FLGP, how
``DiffusionMap()`` at its defaults compares with scikit-learn's ``SpectralEmbedding``, and
fit time and peak memory at scale.

Three tables, each configuration in a fresh process (its peak resident memory is its own),
times the median of ``--repeats`` runs:

1. **crossover** - ``DiffusionMap`` and ``GPEmbedding`` at their defaults (k = 2,
   ``t="auto"``) with ``method="dense"`` and ``method="flgp"`` on the Swiss roll, n = 100 to
   3000; the dense fit grows as n^3. ``method="auto"`` uses the dense algorithm while it is
   cheap (printed: the largest n at which the dense fit took at most 0.1 s, and the largest
   n at which ``method="auto"`` chose it).
2. **vs scikit-learn** - ``DiffusionMap()`` (all defaults) against
   ``SpectralEmbedding(n_components=2, n_neighbors=10)`` on the Swiss roll at n = 10^4 and
   5 * 10^4, the two fitted alternately in one process; |Spearman| of the leading
   coordinate with the roll parameter (the worst of the repeats).
3. **scaling** - k = 10, t = 8, a noisy closed curve in R^3 (p = 3), dense to n = 5000,
   FLGP to n = 10^6, with peak memory.

    python benchmarks/embedding.py --json benchmarks/results/embedding.json
    python benchmarks/embedding.py --quick          # smaller grids, 3 repeats

Threads: ``FLGP_BENCH_THREADS`` (default 2) for torch and the BLAS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import time
import warnings

CROSSOVER_NS = [100, 200, 300, 500, 700, 800, 900, 1000, 1500, 2000, 3000]
SKLEARN_NS = [10_000, 50_000]
SCALING = [  # (transformer, method, n, k)
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
CHEAP_S = 0.1


def _threads() -> int:
    return int(os.environ.get("FLGP_BENCH_THREADS", "2"))


def _setup():
    import torch

    torch.set_num_threads(_threads())
    warnings.filterwarnings("ignore", category=UserWarning)


def _curve(n, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    th = rng.uniform(0, 2 * np.pi, n)
    return np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.01 * rng.standard_normal((n, 3))


def _spearman(Y, t):
    from scipy.stats import spearmanr

    return float(abs(spearmanr(Y[:, 0], t)[0]))


def _crossover_one(args, queue):
    n, repeats = args
    _setup()
    import flgp.embedding as emb
    from flgp.datasets import make_swiss_roll

    X, t = make_swiss_roll(n, random_state=0)
    row = {"n": n}
    for name in ("DiffusionMap", "GPEmbedding"):
        for method in ("dense", "flgp"):
            times, rho = [], []
            for rep in range(repeats + 1):          # the first run warms up, not timed
                est = getattr(emb, name)(method=method, random_state=rep)
                t0 = time.perf_counter()
                Y = est.fit_transform(X)
                if rep:
                    times.append(time.perf_counter() - t0)
                    rho.append(_spearman(Y, t))
            row[f"{name}_{method}_s"] = statistics.median(times)
            row[f"{name}_{method}_s_all"] = times
            if name == "DiffusionMap":
                row[f"{name}_{method}_spearman_min"] = min(rho)
        row[f"{name}_auto"] = getattr(emb, name)(random_state=0).fit(X).method_
    queue.put(row)


def _sklearn_one(args, queue):
    n, repeats = args
    _setup()
    from sklearn.manifold import SpectralEmbedding

    from flgp.datasets import make_swiss_roll
    from flgp.embedding import DiffusionMap

    X, t = make_swiss_roll(n, random_state=0)
    res = {"flgp": ([], []), "sklearn": ([], [])}
    method = None
    for rep in range(repeats + 1):
        order = ("flgp", "sklearn") if rep % 2 else ("sklearn", "flgp")
        for who in order:
            est = DiffusionMap() if who == "flgp" else SpectralEmbedding(
                n_components=2, n_neighbors=10)
            t0 = time.perf_counter()
            Y = est.fit_transform(X)
            el = time.perf_counter() - t0
            if who == "flgp":
                method = est.method_
            if rep:                                 # the first round warms up
                res[who][0].append(el)
                res[who][1].append(_spearman(Y, t))
    queue.put({"n": n, "DiffusionMap_method": method,
               "DiffusionMap_s": statistics.median(res["flgp"][0]),
               "DiffusionMap_s_all": res["flgp"][0],
               "DiffusionMap_spearman_min": min(res["flgp"][1]),
               "SpectralEmbedding_s": statistics.median(res["sklearn"][0]),
               "SpectralEmbedding_s_all": res["sklearn"][0],
               "SpectralEmbedding_spearman_min": min(res["sklearn"][1])})


def _scaling_one(args, queue):
    name, method, n, k, repeats = args
    _setup()
    import flgp.embedding as emb

    X = _curve(n)
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


def _run(target, args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=target, args=(args, q))
    proc.start()
    row = q.get()
    proc.join()
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["crossover", "sklearn", "scaling"])
    args = ap.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads()))
    out = {"machine": {"cpus": os.cpu_count(), "threads": _threads(),
                       "python": platform.python_version()},
           "repeats": repeats}

    if "crossover" not in args.skip:
        ns = [n for n in CROSSOVER_NS if n <= 1500] if args.quick else CROSSOVER_NS
        print("1. method='auto': dense vs FLGP at the defaults (k = 2, t='auto'), Swiss roll; "
              "fit s (median); |Spearman| of the leading coordinate with the roll parameter")
        print(f"{'n':>6} {'DM dense':>9} {'DM flgp':>8} {'ratio':>6} {'rho dense':>9} "
              f"{'rho flgp':>8} {'GP dense':>9} {'GP flgp':>8} {'ratio':>6} {'auto':>6}")
        rows = []
        for n in ns:
            r = _run(_crossover_one, (n, repeats))
            rows.append(r)
            print(f"{n:>6} {r['DiffusionMap_dense_s']:>9.3f} {r['DiffusionMap_flgp_s']:>8.3f} "
                  f"{r['DiffusionMap_dense_s'] / r['DiffusionMap_flgp_s']:>6.1f} "
                  f"{r['DiffusionMap_dense_spearman_min']:>9.4f} "
                  f"{r['DiffusionMap_flgp_spearman_min']:>8.4f} "
                  f"{r['GPEmbedding_dense_s']:>9.3f} {r['GPEmbedding_flgp_s']:>8.3f} "
                  f"{r['GPEmbedding_dense_s'] / r['GPEmbedding_flgp_s']:>6.1f} "
                  f"{r['DiffusionMap_auto']:>6}", flush=True)
        cheap = [r["n"] for r in rows if max(r["DiffusionMap_dense_s"],
                                             r["GPEmbedding_dense_s"]) <= CHEAP_S]
        faster = [r["n"] for r in rows
                  if r["DiffusionMap_dense_s"] <= r["DiffusionMap_flgp_s"]]
        auto = [r["n"] for r in rows if r["DiffusionMap_auto"] == "dense"]
        print(f"largest n with a dense fit <= {CHEAP_S} s: {max(cheap) if cheap else None}; "
              f"largest n where dense is as fast as FLGP: {max(faster) if faster else None}; "
              f"largest n where method='auto' chose dense: {max(auto) if auto else None}")
        out["crossover"] = rows
        out["largest_n_dense_under_0.1s"] = max(cheap) if cheap else None
        out["largest_n_dense_as_fast_as_flgp"] = max(faster) if faster else None
        out["largest_n_auto_dense"] = max(auto) if auto else None

    if "sklearn" not in args.skip:
        print("\n2. DiffusionMap() vs SpectralEmbedding(n_components=2, n_neighbors=10), "
              "Swiss roll, fitted alternately; fit s (median), |Spearman| (worst run)")
        print(f"{'n':>7} {'DiffusionMap':>12} {'method':>7} {'rho':>7} "
              f"{'SpectralEmb.':>12} {'rho':>7} {'speed-up':>8}")
        rows = []
        for n in ([10_000] if args.quick else SKLEARN_NS):
            r = _run(_sklearn_one, (n, repeats))
            rows.append(r)
            print(f"{n:>7,} {r['DiffusionMap_s']:>12.3f} {r['DiffusionMap_method']:>7} "
                  f"{r['DiffusionMap_spearman_min']:>7.4f} {r['SpectralEmbedding_s']:>12.3f} "
                  f"{r['SpectralEmbedding_spearman_min']:>7.4f} "
                  f"{r['SpectralEmbedding_s'] / r['DiffusionMap_s']:>8.1f}", flush=True)
        out["vs_sklearn"] = rows

    if "scaling" not in args.skip:
        configs = [c for c in SCALING if c[2] < 5_000 or c[1] == "flgp" and c[2] <= 100_000] \
            if args.quick else SCALING
        print("\n3. scaling: k = 10, t = 8, noisy closed curve in R^3")
        print(f"{'transformer':<13} {'method':<6} {'n':>9} {'k':>3} {'fit s (median)':>15} "
              f"{'peak MB':>9}")
        rows = []
        for name, method, n, k in configs:
            r = _run(_scaling_one, (name, method, n, k, min(repeats, 3)))
            rows.append(r)
            print(f"{name:<13} {method:<6} {n:>9,} {k:>3} {r['fit_s_median']:>15.2f} "
                  f"{r['peak_rss_mb']:>9.0f}", flush=True)
        out["scaling"] = rows

    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
