"""Where a fit's time goes, stage by stage, beside each stage's arithmetic floor.

Two workloads (each repeat a fresh process; medians over ``--repeats``):

* ``mnist`` - all 70,000 MNIST digits, PCA to 100 dimensions, 100 labels drawn uniformly
  (seed 0), ``FLGPClassifier()`` (s = 1000, r = 3, M = 200, 10-class EP);
* ``curve`` - the noisy closed curve in R^3 of ``benchmarks/distributed.py``, 10^6 points,
  1,000 labels, ``FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=1000, n_eigenpairs=100)))``, fit +
  transduction (the engine's path: the default ``FLGPRegressor()`` also fits the exact RBF GP
  on the 1,000 labels, which wins this curve's evidence, and then transduces with it at
  ``O(m^2)`` a point - docs/benchmarks.md).

Stages come from :func:`flgp.record_stages`; a stage's parts (``name/part``) are
timed inside the blocks, on every thread, and are shown as shares of the stage's wall time.
The work counters (``stages.counts``, added by flgp's internal ``count``) give each stage's arithmetic:

* induced points - k-means: ``2 p s`` flops per point and Lloyd iteration (GEMM path,
  ``p > 16``; at the float32 rate) plus the seeding's ``2 p (4 s)^2`` distance matrix; in
  low dimension (k-d tree) the floor is reading the points once per iteration;
* neighbours + kernel - the neighbour search, ``2 n s p`` float32 flops (GEMM path) or a
  read of the points and a write of the ``n x r`` rows (k-d tree); the kernel weights
  (LAE: the local Gram ``2 r^2 p`` and the ``2^r - 1`` face solves, about ``30`` flops
  each, per row);
* column sums, transition + products - a read and a write of the ``n x r`` rows;
* eigenpairs - about ``4 s^3`` float64 flops (tridiagonal reduction and back-transform);
* hyperparameters - the EP posteriors' flops as counted by flgp.models.inference.ep;
* transduction - the eigenvector rows' sparse products and the predictor's arithmetic.

The floor of a stage is ``max(flops / GEMM rate, bytes / copy bandwidth)``, with the rates
measured in the same process just before the fit (torch ``matmul`` of 2000 x 2000 float32
and float64 matrices on the benchmark's threads; a numpy copy of 256 MB): what the stage
would take if all of its arithmetic ran at the speed of a large GEMM. Stages without
counters (calibration, the predictor's set-up) show no floor.

    python benchmarks/profile.py                         # both workloads, 3 repeats
    python benchmarks/profile.py --workloads mnist --json benchmarks/results/profile.json
    python benchmarks/profile.py --trees new=.,old=/path/to/old/checkout   # A/B, alternating
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# this folder holds a file named like the dask.distributed package: keep it off the path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

WORKLOADS = ("mnist", "curve")
MNIST_CACHE = "/tmp/flgp-profile-mnist-pca100.npz"
TOP_ORDER = ["check", "labels", "induced points", "neighbours + kernel", "column sums",
             "transition + products", "eigenpairs", "labelled rows", "hyperparameters",
             "calibration", "predictor", "transduction"]
PARENT = {"pass 1": "neighbours + kernel", "induced points": "induced points",
          "map": "transduction"}


# -- data ---------------------------------------------------------------------------------

def mnist_pca(cache: str = MNIST_CACHE):
    """MNIST 70,000 x 784 -> PCA 100 (float64), cached in ``cache``."""
    import numpy as np

    if os.path.exists(cache):
        d = np.load(cache)
        return d["X"], d["y"]
    from sklearn.decomposition import PCA

    from flgp.datasets import load_mnist

    X, y = load_mnist()
    Z = PCA(n_components=100, random_state=0).fit_transform(X).astype(np.float64)
    np.savez(cache, X=Z, y=y)
    return Z, y


def _curve(n: int):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_flgp_bench_distributed",
                                                  os.path.join(_HERE, "distributed.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._data_in_memory(n, False)


def workload(name: str, n_curve: int = 10**6):
    """``(X, y, make_estimator, error(est))`` of a workload."""
    import numpy as np

    if name == "mnist":
        from flgp import FLGPClassifier

        X, truth = mnist_pca()
        rng = np.random.default_rng(0)
        lab = rng.choice(truth.size, 100, replace=False)
        y = np.full(truth.size, -1)
        y[lab] = truth[lab]
        unl = y == -1
        return X, y, FLGPClassifier, lambda est: float(np.mean(est.transduction_[unl]
                                                               != truth[unl]))
    from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior

    X, f, y = _curve(n_curve)
    return X, y, lambda: FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=1000, n_eigenpairs=100))), \
        lambda est: float(np.sqrt(np.mean((est.transduction_ - f) ** 2)))


# -- machine rates --------------------------------------------------------------------------

def machine_rates(threads: int) -> dict:
    """GEMM rates (flop/s) of torch float32 and float64 2000 x 2000 products on ``threads``
    threads and on one, and the bytes/s of a 256 MB numpy copy (read + write)."""
    import numpy as np
    import torch

    out = {}
    saved = torch.get_num_threads()
    for th in sorted({1, threads}):
        torch.set_num_threads(th)
        for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
            A = torch.randn(2000, 2000, dtype=dtype)
            B = torch.randn(2000, 2000, dtype=dtype)
            A @ B
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                A @ B
                ts.append(time.perf_counter() - t0)
            out[f"gemm_{tag}_{th}t"] = 2 * 2000**3 / statistics.median(ts)
    torch.set_num_threads(saved)
    a = np.ones(2**25)
    b = np.empty_like(a)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(time.perf_counter() - t0)
    out["copy_bytes_per_s"] = 2 * a.nbytes / statistics.median(ts)
    out["gemm_f32"] = out[f"gemm_f32_{threads}t"]
    out["gemm_f64"] = out[f"gemm_f64_{threads}t"]
    return out


# -- one run ------------------------------------------------------------------------------

def run_one(args, queue):
    name, tree, threads, n_curve = args
    sys.path.insert(0, os.path.abspath(tree))
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    import flgp
    from flgp import record_stages

    if not os.path.abspath(flgp.__file__).startswith(os.path.abspath(tree)):
        raise RuntimeError(f"flgp imported from {flgp.__file__}, not {tree}")
    X, y, make, error = workload(name, n_curve)
    # a small fit first, so that one-time costs (lazy imports, first BLAS calls) stay out
    rng = np.random.default_rng(1)
    small = rng.choice(X.shape[0], 3000, replace=False)
    if name == "curve":
        # 50 labelled rows among them whatever n is (1,000 labels in 10^7 rows would
        # leave a random 3,000 with none)
        small[:50] = np.flatnonzero(~np.isnan(y))[:50]
        small = np.unique(small)
    make().fit(X[small], y[small] if name == "curve" else np.where(
        np.arange(3000) < 50, np.arange(3000) % 10, -1))
    rates = machine_rates(threads)
    with record_stages() as stages:
        t0 = time.perf_counter()
        est = make().fit(X, y)
        wall = time.perf_counter() - t0
    counts = dict(getattr(stages, "counts", {}))
    queue.put(dict(workload=name, tree=tree, wall_s=wall, error=error(est),
                   stages=list(stages), counts=counts, rates=rates,
                   n=int(X.shape[0]), p=int(X.shape[1]),
                   s=int(est.eigenpairs_.extension.graph.n_induced),
                   r=int(est.eigenpairs_.extension.graph.n_neighbors),
                   M=int(est.eigenpairs_.n_eigenpairs),
                   kernel=est.eigenpairs_.extension.graph.kernel))


def spawn(target, args):
    """``target(args, queue)`` in a fresh process; returns what it put on the queue (also
    used by benchmarks/peers.py)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(args, q))
    p.start()
    while True:       # a child that dies (an exception, the OOM killer) must not hang us
        try:
            res = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"the benchmark process exited with code {p.exitcode} "
                                   f"before reporting") from None
    p.join()
    return res


def engine_stages(X, n_eigenpairs: int, **graph_options) -> tuple:
    """``build_cross_graph(X, **graph_options)`` and ``flgp_eigenpairs`` timed by the graph's
    stage timers: ``(induced points, neighbours + kernel, column sums + transition +
    products, eigenpairs, total)`` seconds (``benchmarks/engine.py``, ``scale.py``)."""
    from flgp import record_stages
    from flgp.graph import build_cross_graph
    from flgp.spectral import flgp_eigenpairs

    with record_stages() as stages:
        t0 = time.perf_counter()
        graph = build_cross_graph(X, **graph_options)
        t1 = time.perf_counter()
        flgp_eigenpairs(graph, n_eigenpairs)
        t2 = time.perf_counter()
    top = {}
    for name, sec in stages:
        if "/" not in name:
            top[name] = top.get(name, 0.0) + sec
    kernel_s = top.get("column sums", 0.0) + top.get("transition + products", 0.0)
    return (top.get("induced points", 0.0), top.get("neighbours + kernel", 0.0), kernel_s,
            t2 - t1, t2 - t0)


# -- floors ---------------------------------------------------------------------------------

def floors(res: dict) -> dict:
    """``stage -> (flops, bytes, floor seconds)`` from a run's counters and sizes."""
    n, p, s, r = res["n"], res["p"], res["s"], res["r"]
    c, rates = res["counts"], res["rates"]
    f32, f64, bw = rates["gemm_f32"], rates["gemm_f64"], rates["copy_bytes_per_s"]
    out = {}
    lloyd = c.get("lloyd point-iterations", 0.0)
    seed = c.get("kmeans seeding points", 0.0)
    if p > 16:
        fl = 2.0 * p * s * lloyd
        out["induced points"] = (fl + 2.0 * p * seed**2, 0.0,
                                 fl / f32 + 2.0 * p * seed**2 / f64)
    else:
        by = 8.0 * p * lloyd
        out["induced points"] = (0.0, by, by / bw)
    search_fl = 2.0 * n * s * p if p > 16 else 0.0
    kern_fl = n * (2.0 * r * r * p + 30.0 * (2**r - 1)) if res["kernel"] == "lae" else n * r
    by = 8.0 * n * (p + 3 * r)
    out["neighbours + kernel"] = (search_fl + kern_fl, by,
                                  max(search_fl / f32 + kern_fl / f64, by / bw))
    rows_bytes = 8.0 * n * r * 3
    out["column sums"] = (2.0 * n * r, rows_bytes, rows_bytes / bw)
    out["transition + products"] = (2.0 * n * r * r, rows_bytes,
                                     max(2.0 * n * r * r / f64, rows_bytes / bw))
    out["eigenpairs"] = (4.0 * s**3, 0.0, 4.0 * s**3 / f64)
    ep = c.get("ep posterior flops")
    if ep:
        out["hyperparameters"] = (ep, 0.0, ep / f64)
    tr = c.get("eigenvector row flops", 0.0) + c.get("predictor flops", 0.0)
    if tr:
        out["transduction"] = (tr, 8.0 * n * 2, max(tr / f64, 16.0 * n / bw))
    return out


# -- tables -------------------------------------------------------------------------------

def summarise(runs: list) -> dict:
    """Medians over the runs of one (workload, tree): wall, error, each stage's seconds,
    its parts' shares, its floor."""
    walls = [r["wall_s"] for r in runs]
    per_stage, parts, fl = {}, {}, {}
    for r in runs:
        top, sub = {}, {}
        for name, sec in r["stages"]:
            if "/" in name:
                head, part = name.split("/", 1)
                parent = PARENT.get(head, head)
                sub.setdefault(parent, {})
                sub[parent][part] = sub[parent].get(part, 0.0) + sec
            else:
                top[name] = top.get(name, 0.0) + sec
        top["other"] = max(r["wall_s"] - sum(top.values()), 0.0)
        for k, v in top.items():
            per_stage.setdefault(k, []).append(v)
        for k, d in sub.items():
            tot = sum(d.values())
            for part, v in d.items():
                parts.setdefault(k, {}).setdefault(part, []).append(v / tot if tot else 0.0)
        for k, v in floors(r).items():
            fl.setdefault(k, []).append(v)
    stages = []
    names = [k for k in TOP_ORDER if k in per_stage] + \
        [k for k in per_stage if k not in TOP_ORDER and k != "other"] + ["other"]
    for k in names:
        sec = statistics.median(per_stage[k])
        row = dict(stage=k, seconds=sec, runs=per_stage[k])
        if k in fl:
            row["flops"] = statistics.median(v[0] for v in fl[k])
            row["bytes"] = statistics.median(v[1] for v in fl[k])
            row["floor_s"] = statistics.median(v[2] for v in fl[k])
        if k in parts:
            row["parts"] = {part: statistics.median(v) for part, v in parts[k].items()}
        stages.append(row)
    r0 = runs[0]
    return dict(workload=r0["workload"], tree=r0["tree"], wall_s=statistics.median(walls),
                walls=walls, error=statistics.median(r["error"] for r in runs),
                n=r0["n"], p=r0["p"], s=r0["s"], r=r0["r"], M=r0["M"],
                rates={k: statistics.median(r["rates"][k] for r in runs)
                       for k in r0["rates"]},
                counts={k: statistics.median(r["counts"].get(k, 0.0) for r in runs)
                        for k in r0["counts"]},
                stages=stages)


def fmt_table(summary: dict, other: dict | None = None) -> str:
    """A markdown table of one summary (``other``: a second tree's, for a ratio column)."""
    lines = []
    sm = summary
    rates = sm["rates"]
    lines.append(f"{sm['workload']}: n = {sm['n']:,}, p = {sm['p']}, s = {sm['s']}, "
                 f"r = {sm['r']}, M = {sm['M']}; tree {sm['tree']}; wall {sm['wall_s']:.2f} s "
                 f"(runs {', '.join(f'{w:.2f}' for w in sm['walls'])}), error "
                 f"{sm['error']:.4f}")
    lines.append(f"GEMM rate {rates['gemm_f32'] / 1e9:.0f} GFLOP/s float32, "
                 f"{rates['gemm_f64'] / 1e9:.0f} GFLOP/s float64; copy "
                 f"{rates['copy_bytes_per_s'] / 1e9:.1f} GB/s")
    head = "| stage | s | floor s | x floor | GFLOP | parts |"
    if other:
        head = "| stage | s | floor s | x floor | GFLOP | parts | other tree s | ratio |"
    lines += ["", head, "|" + "---|" * (head.count("|") - 1)]
    oth = {r["stage"]: r for r in other["stages"]} if other else {}
    for row in sm["stages"]:
        floor = row.get("floor_s")
        fl = f"{floor:.3f}" if floor else "-"
        ratio = f"{row['seconds'] / floor:.0f}" if floor else "-"
        gf = f"{row['flops'] / 1e9:.2f}" if row.get("flops") else "-"
        parts = ", ".join(f"{k} {v:.0%}" for k, v in row.get("parts", {}).items())
        line = f"| {row['stage']} | {row['seconds']:.3f} | {fl} | {ratio} | {gf} | {parts} |"
        if other:
            o = oth.get(row["stage"])
            if o:
                line += f" {o['seconds']:.3f} | {row['seconds'] / max(o['seconds'], 1e-9):.2f} |"
            else:
                line += " - | - |"
        lines.append(line)
    tot_floor = sum(r.get("floor_s", 0.0) for r in sm["stages"])
    lines.append(f"| **total** | **{sm['wall_s']:.3f}** | {tot_floor:.3f} | "
                 f"{sm['wall_s'] / tot_floor:.0f} | | |"
                 + (f" **{other['wall_s']:.3f}** | **{sm['wall_s'] / other['wall_s']:.2f}** |"
                    if other else ""))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch and BLAS threads")
    ap.add_argument("--n-curve", type=float, default=1e6)
    ap.add_argument("--trees", default=f"this={_ROOT}",
                    help="name=path[,name=path]: flgp checkouts, run alternately; the "
                         "first is compared against the second")
    ap.add_argument("--json", help="write the summaries (and every run) here")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    trees = [tuple(t.split("=", 1)) for t in a.trees.split(",") if t]
    names = [w for w in a.workloads.split(",") if w]
    for w in names:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {WORKLOADS}")
    if "mnist" in names:
        mnist_pca()                      # the PCA once, outside the timed processes
    results = []
    for w in names:
        runs = {t: [] for t, _ in trees}
        for rep in range(a.repeats):
            order = trees if rep % 2 == 0 else trees[::-1]
            for tname, path in order:
                res = spawn(run_one, (w, path, a.threads, int(a.n_curve)))
                runs[tname].append(res)
                print(f"{w} {tname} repeat {rep}: {res['wall_s']:.2f} s, error "
                      f"{res['error']:.4f}", flush=True)
        sums = {t: summarise(rs) for t, rs in runs.items()}
        first = trees[0][0]
        other = sums[trees[1][0]] if len(trees) > 1 else None
        print()
        print(fmt_table(sums[first], other))
        if other:
            print()
            print(fmt_table(other))
        print()
        results.append(dict(workload=w, summaries=sums,
                            runs={t: rs for t, rs in runs.items()}))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(threads=a.threads, repeats=a.repeats, results=results), fh,
                      indent=1)


if __name__ == "__main__":
    main()
