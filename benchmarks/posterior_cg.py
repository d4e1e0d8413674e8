"""The graph Matérn kernel's posterior solves by conjugate gradients
(``GraphMaternKernel(solver="cg")``: torch sparse products only, what runs on a GPU) against
CHOLMOD's factor (``solver="cholesky"``), on the CPU.

Data as in ``benchmarks/gpytorch_graph_matern.py``: nilearn's motor map (45,448 voxels,
30 % observed), ``ν = 2``, the kernel's own units and normalisation. At three points of
that benchmark's GPyTorch loop (the generic start, the generic end, the search start's end)
the posterior precision ``Q̃`` is solved for a random right-hand side both ways: conjugate
gradients to ``CG_RTOL`` (the package's), and CHOLMOD's numeric factorisation (its analysis
done before) and solve::

    python benchmarks/posterior_cg.py --json posterior_cg.json

Prints a table: CG iterations, CG seconds, factorisation + solve seconds, and the largest
difference between the two solutions relative to the solution's largest entry (medians of
``--repeats`` runs for the times; the machine's threads as torch and BLAS set them).
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

    sys.path.insert(0, HERE)
    from gpytorch_graph_matern import motor_map

    import flgp.kernels.graph_matern as gm
    from flgp.kernels import GraphMaternKernel

    graph, obs, _ = motor_map(0)
    kernel = GraphMaternKernel(graph, nu=2).double()
    eng, length2 = kernel._engine, kernel._length2
    vbar = eng.fixed_variance()
    b = np.random.default_rng(0).standard_normal((eng.n, 1))
    rows = []
    for label, k2, scale, noise in POINTS:
        k2 = (kernel.kappa2.item() if k2 is None else k2) * length2
        c = scale / vbar
        observed = gm._Observations(obs, np.full(obs.size, noise), eng.n)
        times = {"cg": [], "cholesky": []}
        solutions = {}
        for _ in range(args.repeats):
            for solver in ("cg", "cholesky"):
                eng.configure(solver, "cpu")
                eng.factors._keys.pop("posterior", None)  # a fresh factorisation each run
                eng._torch.pop("Qt", None)              # and a fresh matrix for CG
                t0 = time.perf_counter()
                solutions[solver] = eng.solve_posterior(k2, c, observed, b)
                times[solver].append(time.perf_counter() - t0)
            iterations = eng.last_cg_iterations
        eng.configure("cg", "cpu")
        solutions["cg"] = eng.solve_posterior(k2, c, observed, b)
        iterations = eng.last_cg_iterations
        want = solutions["cholesky"]
        rows.append(dict(point=label, kappa2_own=k2, outputscale=scale, noise=noise,
                         cg_iterations=int(iterations), cg_rtol=gm.CG_RTOL,
                         cg_seconds=float(np.median(times["cg"])),
                         cholmod_seconds=float(np.median(times["cholesky"])),
                         max_difference=float(np.abs(solutions["cg"] - want).max()
                                              / np.abs(want).max())))
    print(f"motor map n={eng.n} observed={obs.size} nu=2, CG to a relative residual of "
          f"{gm.CG_RTOL:g}")
    print(f"{'point':14s} {'CG its':>7s} {'CG s':>6s} {'factor+solve s':>15s} {'max diff':>9s}")
    for r in rows:
        print(f"{r['point']:14s} {r['cg_iterations']:7d} {r['cg_seconds']:6.2f} "
              f"{r['cholmod_seconds']:15.2f} {r['max_difference']:9.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(n=eng.n, observed=int(obs.size), rows=rows), fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
