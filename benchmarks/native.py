"""The compiled row kernels (flgp.backends.compiled) against their numpy twins, kernel by kernel.

Each kernel runs on the inputs of one pass of a 10^6-point fit (a noisy closed curve in
R^3, s = 1,000 k-means-like induced points, r = 3; the transductions' projections 1 and 100
columns wide; MNIST-like 100-dimensional rows for the LAE weights), on one thread,
alternating with its twin (``flgp.config_context(compiled=False)``); medians of
``--repeats``. The table gives both times and their ratio, and checks that both give the
same numbers (largest difference).

    python benchmarks/native.py --repeats 5 --json benchmarks/results/native.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def _inputs(n: int, rng):
    th = rng.uniform(0, 2 * np.pi, n)
    X = np.c_[np.cos(th), np.sin(th), np.cos(3 * th)] + 0.05 * rng.standard_normal((n, 3))
    U = X[rng.choice(n, 1000, replace=False)].copy()
    return X, U


def cases(n: int, rng):
    """``(name, rows, run)`` with ``run()`` returning an array to compare."""
    import flgp
    from flgp.graph.cross_graph import validate_cloud
    from flgp.graph.cross_kernel import lae_weights
    from flgp.graph import kmeans_centres
    from flgp.graph.neighbors import nearest_induced_points, search_tree
    from flgp.graph.passes import lse_partial
    from flgp.graph.transition import transition_rows
    from flgp.spectral.flgp import FLGPRowMap

    X, U = _inputs(n, rng)
    tree = search_tree(U, 3)
    idx, sq = nearest_induced_points(X, U, 3, tree=tree, workers=1)
    w = lae_weights(X, U, idx, regularization=1e-3)
    with np.errstate(divide="ignore"):
        log_k = np.log(w)
    log_c = np.log(np.bincount(idx.ravel(), weights=w.ravel(), minlength=1000) + 1e-300)
    A = transition_rows(log_k, idx, log_c)
    Xh = rng.standard_normal((n // 10, 100))
    Uh = Xh[:1000].copy()
    idx_h = nearest_induced_points(Xh, Uh, 3)[0]
    out = [
        ("nearest induced points (p = 3)", n,
         lambda: nearest_induced_points(X, U, 3, workers=1,
                                        tree=tree if flgp.get_config()["compiled"]
                                        else None)[1]),
        ("LAE weights (p = 3)", n, lambda: lae_weights(X, U, idx, regularization=1e-3)),
        ("LAE weights (p = 100)", n // 10,
         lambda: lae_weights(Xh, Uh, idx_h, regularization=1e-3)),
        ("column log-sum-exp", n, lambda: lse_partial(log_k, idx, 1000)),
        ("transition rows", n, lambda: transition_rows(log_k, idx, log_c)),
        ("products (Λ, AᵀA; blocks of 32,768 rows)", n, lambda: _gram_in_blocks(idx, A)),
        ("k-means++ seeding (4,000 points, 1,000 centres)", 4000,
         lambda: kmeans_centres(X[:4000], 1000, n_iter=0, random_state=0).points),
        ("cloud check", n, lambda: np.asarray(validate_cloud(X)[:1])),
    ]
    comps = np.zeros(1000, dtype=np.int64)
    for k in (1, 100):
        P = rng.standard_normal((1000, k))
        out.append((f"A_b P ({k} columns; blocks of 16,384 rows)", n,
                    lambda P=P: _in_blocks(FLGPRowMap(P, comps).vectors, idx, A)))
    S = rng.standard_normal((1000, 1000))
    S = S @ S.T
    from flgp.spectral.flgp import _SquaredNormTable

    table = _SquaredNormTable(S)
    out.append(("a S aᵀ (variance table; blocks of 16,384 rows)", n,
                lambda: _in_blocks(lambda i, a: FLGPRowMap((table,), comps).vectors(i, a)[0],
                                   idx, A)))
    return out


def _in_blocks(fn, idx, A, block=16_384):
    """``fn(idx, A)`` block by block into one array, as a transduction pass runs it."""
    first = fn(idx[:block], A[:block])
    out = np.empty((len(idx),) + first.shape[1:])
    out[:block] = first
    for a in range(block, len(idx), block):
        out[a:a + block] = fn(idx[a:a + block], A[a:a + block])
    return out


def _gram_in_blocks(idx, A, block=32_768):
    """``AᵀA`` summed over blocks as the products pass forms it (the numpy twin's block
    size: its sparse product is fastest there)."""
    from flgp.graph.passes import products_partial

    total = np.zeros((1000, 1000))
    for a in range(0, len(idx), block):
        gram = products_partial(idx[a:a + block], A[a:a + block], 1000, dense=True)["gram"]
        total += gram.toarray() if hasattr(gram, "toarray") else gram
    return total


def _time(fn, compiled: bool):
    import flgp

    with flgp.config_context(compiled=compiled):
        t0 = time.perf_counter()
        value = fn()
        return time.perf_counter() - t0, value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch

    from flgp.backends import compiled
    from flgp.backends import limit_blas_threads

    torch.set_num_threads(1)
    if not compiled.available():
        raise SystemExit("flgp.backends.compiled was not built: pip install -e . with a C compiler")
    rng = np.random.default_rng(0)
    rows = []
    with limit_blas_threads(1):
        for name, n_rows, fn in cases(int(args.n), rng):
            compiled, twin = [], []
            for _ in range(args.repeats):
                tc, vc = _time(fn, True)
                tn, vn = _time(fn, False)
                compiled.append(tc)
                twin.append(tn)
            diff = float(np.max(np.abs(np.asarray(vc, dtype=np.float64)
                                       - np.asarray(vn, dtype=np.float64))))
            rows.append({"kernel": name, "rows": n_rows,
                         "compiled_s": statistics.median(compiled),
                         "numpy_s": statistics.median(twin),
                         "max_abs_difference": diff})
            r = rows[-1]
            print(f"| {name} | {n_rows:,} | {r['compiled_s']:.4f} | {r['numpy_s']:.4f} | "
                  f"{r['numpy_s'] / r['compiled_s']:.1f} | {diff:.1e} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"repeats": args.repeats, "threads": 1, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
