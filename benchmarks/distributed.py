"""Beyond one machine's memory: the in-memory engine and the Dask engine from 10^5 to 10^8
points.

A noisy closed curve in R^3 (the engine benchmarks' cloud) with a smooth function on it,
``f(θ) = sin 2θ + cos(5θ) / 2``; 1,000 labelled points (``f`` plus N(0, 0.1²) noise for the
regressor, the sign of ``f`` for the classifier); the error is measured on every point
(RMSE against ``f``, or the misclassification rate). The regressor is the heat-kernel GP
(``HeatKernelPrior()``) in both engines, so that the rows compare one model.

* ``memory`` rows: the estimator on numpy arrays, in a fresh process each; peak resident
  memory of that process, and what the fit added above the imports and the data.
* ``dask`` rows: the same estimator on dask arrays read from a zarr store (written by the
  script under ``--store``), through a ``LocalCluster`` of ``--workers`` worker processes
  (one thread each, 4 GiB memory limit); peak memory of the client process (which also runs
  the scheduler) and of each worker; the lazy transduction is computed as the error.

Each row records its stages (``flgp.record_stages``). Results are printed as a table,
and written as JSON and as a log-log plot of time and peak memory against n.

    python benchmarks/distributed.py --memory 1e5,1e6,1e7 --dask 1e5,1e6,1e7,1e8 \\
        --json benchmarks/results/distributed.json --plot benchmarks/results/distributed.png
    python benchmarks/distributed.py --memory 1e6 --dask "" --estimator classifier
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time

# this file is named like the dask.distributed package: keep its folder off the import path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

S, M, LABELS = 1000, 100, 1000
BLOCK = 1_000_000            # rows generated (and written) at once
NOISE = 0.01


def _block(seed: int, start: int, stop: int):
    """Points and truth of rows ``start:stop`` of one BLOCK-row block (``start`` a multiple
    of BLOCK; each block has its own seed, so every n shares its first rows)."""
    import numpy as np

    rng = np.random.default_rng([seed, start // BLOCK])
    th = rng.uniform(0.0, 2.0 * np.pi, stop - start)
    X = np.empty((stop - start, 3))
    X[:, 0] = np.cos(th)
    X[:, 1] = np.sin(th)
    X[:, 2] = np.cos(3.0 * th)
    X += NOISE * rng.standard_normal(X.shape)
    return X, np.sin(2.0 * th) + 0.5 * np.cos(5.0 * th)


def _labels(n: int, truth_at, classifier: bool):
    """Indices and values of the LABELS labelled rows (drawn uniformly)."""
    import numpy as np

    rng = np.random.default_rng(12345)
    idx = np.sort(rng.choice(n, size=LABELS, replace=False))
    f = truth_at(idx)
    if classifier:
        return idx, (f > 0).astype(np.int8)
    return idx, f + 0.1 * rng.standard_normal(LABELS)


def _data_in_memory(n: int, classifier: bool):
    import numpy as np

    X = np.empty((n, 3))
    f = np.empty(n)
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        X[a:b], f[a:b] = _block(0, a, b)
    idx, values = _labels(n, lambda i: f[i], classifier)
    y = np.full(n, -1, dtype=np.int8) if classifier else np.full(n, np.nan)
    y[idx] = values
    return X, f, y


def write_store(path: str, n: int) -> None:
    """The cloud, the truth and both kinds of labels as zarr arrays under ``path`` (skipped
    when a complete store is there). Written in BLOCK-row slabs, never whole."""
    import numpy as np
    import zarr

    done = os.path.join(path, "complete")
    if os.path.exists(done):
        return
    chunk = _chunk_rows(n)
    Xz = zarr.create_array(store=os.path.join(path, "X"), shape=(n, 3), chunks=(chunk, 3),
                           dtype="float64", overwrite=True)
    fz = zarr.create_array(store=os.path.join(path, "f"), shape=(n,), chunks=(chunk,),
                           dtype="float64", overwrite=True)
    unit = max(chunk, BLOCK)                     # a multiple of both (see _chunk_rows)
    for a in range(0, n, unit):
        b = min(n, a + unit)
        Xc, fc = np.empty((b - a, 3)), np.empty(b - a)
        for lo in range(a, b, BLOCK):
            hi = min(b, lo + BLOCK)
            Xc[lo - a:hi - a], fc[lo - a:hi - a] = _block(0, lo, hi)
        Xz[a:b], fz[a:b] = Xc, fc
    for kind, dtype, fill in (("regressor", "float64", np.nan), ("classifier", "int8", -1)):
        idx, values = _labels(n, lambda i: fz.get_orthogonal_selection(i),
                              kind == "classifier")
        yz = zarr.create_array(store=os.path.join(path, f"y_{kind}"), shape=(n,),
                               chunks=(chunk,), dtype=dtype, fill_value=fill,
                               overwrite=True)
        yz.set_orthogonal_selection(idx, values.astype(dtype))
    open(done, "w").close()


def _chunk_rows(n: int) -> int:
    """Rows per zarr chunk and dask block: about 16 blocks, at most 2 * 10^6 rows each; a
    divisor of BLOCK below it, a multiple above."""
    rows = int(min(max(n // 16, 10_000), 2_000_000))
    if rows >= BLOCK:
        return rows - rows % BLOCK
    return next(d for d in range(rows, BLOCK + 1) if BLOCK % d == 0)


def _estimator(classifier: bool):
    from flgp import Eigenbasis, FLGPClassifier, FLGPRegressor, HeatKernelPrior

    # the heat kernel alone in both engines: on numpy inputs the default classifier fits
    # the full-resolution prior and the default regressor also an exact RBF GP (not on dask
    # ones), whose transduction is O(m^2) a point
    heat = HeatKernelPrior(Eigenbasis(n_induced=S, n_eigenpairs=M))
    return FLGPClassifier(heat) if classifier else FLGPRegressor(heat)


def _error(pred, f, classifier: bool):
    import numpy as np

    if classifier:
        return float(np.mean(pred != (f > 0)))
    return float(np.sqrt(np.mean((pred - f) ** 2)))


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _current_gb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def run_memory(args, queue):
    n, classifier, threads = args
    import torch

    torch.set_num_threads(threads)
    import flgp  # noqa: F401  (imports count in the baseline)
    from flgp import record_stages

    X, f, y = _data_in_memory(n, classifier)
    base_peak, base_now = _rss_gb(), _current_gb()
    est = _estimator(classifier)
    with record_stages() as stages:
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    peak = _rss_gb()
    queue.put(dict(path="memory", n=n, estimator=type(est).__name__, wall_s=wall,
                   error=_error(est.transduction_, f, classifier), client_peak_gb=peak,
                   added_gb=peak - base_now, baseline_gb=base_peak, worker_peak_gb=[],
                   stages=_merge(stages), data_gb=X.nbytes / 2**30))


def _warm_up():
    import dask.array  # noqa: F401
    import flgp  # noqa: F401


def _worker_peak():
    import resource as r

    return r.getrusage(r.RUSAGE_SELF).ru_maxrss / 2**20


def run_dask(args, queue):
    n, classifier, store, workers = args
    import logging

    import dask.array as da
    from distributed import Client, LocalCluster

    from flgp import record_stages

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           memory_limit="4GiB", dashboard_address=None,
                           silence_logs=logging.ERROR)
    client = Client(cluster)
    client.run(_warm_up)          # the workers import flgp (and torch) before the clock
    try:
        kind = "classifier" if classifier else "regressor"
        X = da.from_zarr(os.path.join(store, "X"))
        y = da.from_zarr(os.path.join(store, f"y_{kind}"))
        f = da.from_zarr(os.path.join(store, "f"))
        est = _estimator(classifier)
        with record_stages() as stages:
            t0 = time.perf_counter()
            try:
                est.fit(X, y)
            except Exception as exc:        # e.g. an estimator without dask support
                queue.put(dict(path="dask", n=n, estimator=type(est).__name__,
                               failed=f"{type(exc).__name__}: {str(exc)[:300]}"))
                return
            fitted = time.perf_counter() - t0
            pred = est.transduction_
            if classifier:
                err = da.mean(pred != (f > 0))
            else:
                err = da.sqrt(da.mean((pred - f) ** 2))
            error = float(err.compute())
            wall = time.perf_counter() - t0
        stages.append(("transduction (computed)", wall - fitted))
        peaks = sorted(client.run(_worker_peak).values())
        queue.put(dict(path="dask", n=n, estimator=type(est).__name__, wall_s=wall,
                       fit_s=fitted, error=error, client_peak_gb=_rss_gb(),
                       worker_peak_gb=peaks, stages=_merge(stages), workers=workers,
                       blocks=int(X.numblocks[0]), data_gb=n * 3 * 8 / 2**30))
    finally:
        client.close()
        cluster.close()


def _merge(stages):
    """Seconds per stage; the parts of a stage timed inside its blocks (``stage/part``,
    thread-seconds) are left out (benchmarks/profile.py shows them)."""
    out = {}
    for name, sec in stages:
        if "/" not in name:
            out[name] = out.get(name, 0.0) + sec
    return out


def _spawn(target, args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(args, q))
    p.start()
    res = q.get()
    p.join()
    return res


def _fmt(r):
    if "failed" in r:
        return f"{r['path']:>6} {r['n']:>11,} {r['estimator']:>15} | failed: {r['failed']}"
    workers = ",".join(f"{v:.2f}" for v in r["worker_peak_gb"]) or "-"
    stages = "; ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
    extra = f" +{r['added_gb']:.2f}" if "added_gb" in r else ""
    return (f"{r['path']:>6} {r['n']:>11,} {r['estimator']:>15} | {r['wall_s']:8.1f} "
            f"{r['error']:8.4f} | {r['client_peak_gb']:5.2f}{extra:>6} {workers:>10} | "
            f"{stages}")


HEADER = (f"{'path':>6} {'n':>11} {'estimator':>15} | {'wall s':>8} {'error':>8} | "
          f"{'client GB':>11} {'workers GB':>10} | stages (s)")


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for key in sorted({(r["path"], r["estimator"]) for r in results if "failed" not in r}):
        rs = sorted((r for r in results if (r["path"], r["estimator"]) == key
                     and "failed" not in r), key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        label = f"{key[0]}, {key[1]}"
        a1.loglog(ns, [r["wall_s"] for r in rs], "o-", label=label)
        a2.loglog(ns, [r["client_peak_gb"] for r in rs], "o-", label=f"{label}: client")
        if key[0] == "dask":
            a2.loglog(ns, [max(r["worker_peak_gb"]) for r in rs], "s--",
                      label=f"{label}: largest worker")
    for ax in (a1, a2):
        lines = ax.get_lines()
        if lines:
            x0, y0 = lines[0].get_xdata()[0], lines[0].get_ydata()[0]
            ax.loglog([x0, 1e8], [y0, y0 * 1e8 / x0], "k:", label="slope 1")
        ax.set_xlabel("n (points)")
        ax.legend(fontsize=7)
    a1.set_ylabel("fit + transduction (s)")
    a2.set_ylabel("peak resident memory (GB)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _sizes(text: str):
    return [int(float(v)) for v in text.split(",") if v.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory", default="1e5,1e6,1e7", help="n for the in-memory rows")
    ap.add_argument("--dask", default="1e5,1e6,1e7,1e8", help="n for the zarr + dask rows")
    ap.add_argument("--estimator", default="regressor", choices=["regressor", "classifier"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (in-memory rows)")
    ap.add_argument("--store", default="/tmp/flgp-distributed",
                    help="directory of the zarr stores (one per n)")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    a = ap.parse_args(argv)
    classifier = a.estimator == "classifier"
    results = []
    if a.json and os.path.exists(a.json):          # keep the other rows of the file
        with open(a.json) as fh:
            results = [r for r in json.load(fh)
                       if r.get("estimator") != ("FLGPClassifier" if classifier
                                                 else "FLGPRegressor")]
    print(f"s={S}, r=3, M={M}, {LABELS} labels; error = "
          f"{'misclassification rate' if classifier else 'RMSE against f'}")
    print(HEADER)
    for n in _sizes(a.memory):
        res = _spawn(run_memory, (n, classifier, a.threads))
        results.append(res)
        print(_fmt(res), flush=True)
    for n in _sizes(a.dask):
        store = os.path.join(a.store, f"n{n}")
        t0 = time.perf_counter()
        write_store(store, n)
        print(f"{'':>6} store {store}: {time.perf_counter() - t0:.0f} s", flush=True)
        res = _spawn(run_dask, (n, classifier, store, a.workers))
        results.append(res)
        print(_fmt(res), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=2)
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
