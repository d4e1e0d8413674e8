"""Whether the graph Matérn kernel's solves could run by preconditioned conjugate gradients
(what a GPU path would run: sparse products only) instead of CHOLMOD's factor.

Data as in ``benchmarks/gpytorch_graph_matern.py``: nilearn's motor map (45,448 voxels,
30 % observed), ``ν = 2``, the kernel's own units and normalisation. At three points of
that benchmark's GPyTorch loop (the generic start, the generic end, the search start's end)
the posterior precision ``Q̃ = (v̄ / a) Q + Pᵀ P / σ²`` is solved for a random right-hand
side by Jacobi-preconditioned CG (scipy, one core) to a relative residual of 1e-8, against
CHOLMOD's numeric factorisation and solve of the same matrix::

    python benchmarks/posterior_cg.py --json posterior_cg.json

Prints a table: CG iterations, CG seconds, factorisation + solve seconds, and the largest
difference between the two solutions relative to the solution's largest entry (medians of
``--repeats`` runs for the times).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# the loop's three points: (user kappa2 or None for the kernel's default, outputscale,
# noise) - docs/models.md, "Measured"
POINTS = (("generic start", None, 4.0, 0.04), ("generic end", 1.09e-5, 2.99, 3.15e-4),
          ("search end", 1.0e-5, 2.99, 8.89e-7))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    sys.path.insert(0, HERE)
    from gpytorch_graph_matern import motor_map

    from flgp.kernels import GraphMaternKernel
    from flgp.precision.cholesky import PatternCholesky

    graph, obs, _ = motor_map(0)
    kernel = GraphMaternKernel(graph, nu=2).double()
    eng, length2 = kernel._engine, kernel._length2
    vbar = eng.fixed_variance()
    n = eng.n
    W = sp.csr_matrix((np.ones(obs.size), (obs, obs)), shape=(n, n))
    b = np.random.default_rng(0).standard_normal(n)
    rows = []
    for label, k2, scale, noise in POINTS:
        k2 = kernel.kappa2.item() if k2 is None else k2
        A = (eng.Q(k2 * length2) * (vbar / scale) + W / noise).tocsr()
        A.sort_indices()
        M = sp.diags(1.0 / A.diagonal())
        cg_times, chol_times, iterations = [], [], 0
        for _ in range(args.repeats):
            count = [0]
            t0 = time.perf_counter()
            x_cg, info = spla.cg(A, b, rtol=1e-8, maxiter=100_000, M=M,
                                 callback=lambda _: count.__setitem__(0, count[0] + 1))
            cg_times.append(time.perf_counter() - t0)
            iterations = count[0]
            chol = PatternCholesky(A)            # the analysis once, as the kernel does
            t0 = time.perf_counter()
            chol.factor(A)
            x_chol = chol.solve(b[:, None])[:, 0]
            chol_times.append(time.perf_counter() - t0)
        rows.append(dict(point=label, kappa2=k2, outputscale=scale, noise=noise,
                         cg_iterations=iterations, cg_converged=bool(info == 0),
                         cg_seconds=float(np.median(cg_times)),
                         cholmod_seconds=float(np.median(chol_times)),
                         max_difference=float(np.abs(x_cg - x_chol).max()
                                              / np.abs(x_chol).max())))
    print(f"motor map n={n} observed={obs.size} nu=2, nnz(Q~)={A.nnz}")
    print(f"{'point':14s} {'CG its':>7s} {'CG s':>6s} {'factor+solve s':>15s} {'max diff':>9s}")
    for r in rows:
        print(f"{r['point']:14s} {r['cg_iterations']:7d} {r['cg_seconds']:6.2f} "
              f"{r['cholmod_seconds']:15.2f} {r['max_difference']:9.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(n=n, observed=int(obs.size), rows=rows), fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
