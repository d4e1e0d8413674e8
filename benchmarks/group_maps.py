"""Group maps from simulated subjects (``flgp.group_map``): fit time, peak memory, the
coverage of the group map's 95 % intervals, and the family-wise error and power of its
excursion sets.

Workloads:

* ``motor`` - two masks of nilearn's sample motor map (``--masks``): ``threshold``, the
  map cut at ``|z| > 1.96`` (7,407 voxels of 3 mm, as ``benchmarks/full_resolution.py``'s
  ``threshold``), and ``whole``, every voxel of the map (the whole brain, 45,448 voxels);
  their voxel lattices; ``S = 10`` and ``20`` simulated subjects ``y_s = g + d_s + ε_s``:
  ``g`` a level plus three Gaussian blobs, ``d_s`` draws of a graph Matérn field
  (``ν = 2``, ``κ = 0.15 / mm``, sd 0.5), ``ε_s`` white noise of sd 1. Each fit in a fresh
  process (wall time of ``flgp.group_map`` and of the excursion set ``{g > 0.5}`` at
  ``α = 0.05`` after it, peak resident memory of the process); the coverage of ``g`` by
  ``mean ± 1.96 sd``; the set's voxels where ``g > 0.5`` and where not.
* ``fwer`` - a 12 × 12 × 4 lattice of 3 mm voxels (576 nodes) and a curved mesh (a torus
  of radii 3 and 1 on a 40 × 15 parametric grid, 600 vertices; blob widths and ``κ`` in
  units of its spacing as the lattice's in voxels), ``S = 10``, ``--simulations`` (default
  50) simulations each: the excursion set ``{g > u}`` at ``α = 0.05`` (1,000 draws); its
  family-wise error (the fraction of simulations whose set holds any node where
  ``g ≤ u``) and its power (the share of the nodes with ``g > u`` found, averaged),
  against Bonferroni thresholds at ``α / n`` of the voxel-wise one-sample t-map of the
  subjects, ``(ȳ - u) / (s / √S)``, and of the posterior z-map, ``(mean - u) / sd``.

Prints a table; ``--json PATH`` writes the rows::

    python benchmarks/group_maps.py --simulations 200 --json benchmarks/results/group_maps.json
    python benchmarks/group_maps.py --masks whole --subjects 20 --simulations 0
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

NOISE_SD, DEVIATION_SD, KAPPA, NU = 1.0, 0.5, 0.15, 2
LEVEL, BLOB_HEIGHT, BLOB_WIDTH_MM = 0.0, 1.5, 8.0


def motor_mask(mask: str = "threshold"):
    """``(ijk, affine)`` of the motor map's voxels with ``|z| > 1.96`` (``"threshold"``) or
    of all of them (``"whole"``)."""
    import nibabel as nib
    from nilearn.datasets import load_sample_motor_activation_image

    img = nib.load(load_sample_motor_activation_image())
    z = img.get_fdata()
    inside = np.abs(z) > 1.96 if mask == "threshold" else np.isfinite(z) & (z != 0)
    return np.argwhere(inside), img.affine


def simulate(ijk, affine, n_subjects, seed, n_blobs=3, graph=None, mm=1.0):
    """``(graph, maps (n, S), g)``: the model of the module notes on the voxels ``ijk``
    (or on ``graph``, its lengths ``mm`` millimetres each)."""
    from flgp.graph import lattice_graph
    from flgp.precision import PatternCholesky, matern_precision

    rng = np.random.default_rng(seed)
    graph = lattice_graph(ijk, affine) if graph is None else graph
    X = graph.points
    centres = X[rng.choice(len(X), n_blobs, replace=False)]
    width = BLOB_WIDTH_MM / mm
    g = LEVEL + BLOB_HEIGHT * sum(np.exp(-((X - c) ** 2).sum(1) / (2 * width ** 2))
                                  for c in centres)
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    Q = matern_precision(own, (KAPPA * mm * length) ** 2, NU)
    chol = PatternCholesky(Q)
    chol.factor(Q)
    d = chol.sample(n_subjects, rng)
    d *= DEVIATION_SD / d.std()
    maps = g[:, None] + d + NOISE_SD * rng.standard_normal((len(X), n_subjects))
    return graph, maps, g


def motor_worker(n_subjects: int, seed: int, mask: str = "threshold") -> dict:
    """One fit and its excursion set on a motor mask (in this process)."""
    import flgp

    ijk, affine = motor_mask(mask)
    graph, maps, g = simulate(ijk, affine, n_subjects, seed)
    start = time.perf_counter()
    result = flgp.group_map(maps, graph=graph)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    found = result.excursion_set(0.5, 0.05, random_state=seed).mask
    set_seconds = time.perf_counter() - start
    inside = np.abs(result.mean - g) <= 1.959964 * result.std
    h = result.hyperparameters
    return dict(workload="motor", mask=mask, n_subjects=n_subjects, n_nodes=graph.n_nodes,
                seconds=seconds, set_seconds=set_seconds,
                set_true=int(np.sum(found & (g > 0.5))),
                set_false=int(np.sum(found & (g <= 0.5))), active=int(np.sum(g > 0.5)),
                peak_gb=resource.getrusage(
                    resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
                coverage=float(inside.mean()),
                rmse_group=float(np.sqrt(np.mean((result.mean - g) ** 2))),
                rmse_mean_map=float(np.sqrt(np.mean((maps.mean(1) - g) ** 2))),
                nu_group=h["nu_group"], nu_subject=h["nu_subject"],
                kappa_subject=h["kappa_subject"], noise=h["noise"],
                evaluations=result.record["n_evaluations_subject"]
                + result.record["n_evaluations_group"])


def motor(n_subjects: int, seed: int, mask: str) -> dict:
    """:func:`motor_worker` in a fresh process (its peak memory its own)."""
    run = subprocess.run([sys.executable, __file__, "--worker", str(n_subjects),
                          "--seed", str(seed), "--masks", mask], capture_output=True,
                         text=True,
                         env=dict(os.environ))
    if run.returncode != 0:
        raise RuntimeError(run.stderr)
    return json.loads(run.stdout.strip().splitlines()[-1])


def fwer_geometry(name: str):
    """``(ijk, affine, graph, mm)`` of a simulation geometry: the lattice's voxels (3 mm) or
    the torus mesh (its spacing standing for 3 mm)."""
    if name == "lattice":
        return (np.argwhere(np.ones((12, 12, 4), bool)), np.diag([3.0, 3.0, 3.0, 1.0]),
                None, 1.0)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from excursion_sets import torus_geometry

    _, graph, spacing = torus_geometry(40, 15)
    return None, None, graph, 3.0 / spacing


def fwer(n_simulations: int, seed: int, n_subjects: int = 10, u: float = 0.5,
         alpha: float = 0.05, geometry: str = "lattice") -> dict:
    """The excursion sets' family-wise error and power over simulations on a lattice or
    a mesh."""
    import warnings

    from scipy.stats import norm, t as student

    import flgp

    ijk, affine, mesh, mm = fwer_geometry(geometry)
    errors = {"excursion": 0, "t_bonferroni": 0, "z_bonferroni": 0}
    found = {k: [] for k in errors}
    seconds = []
    for k in range(n_simulations):
        graph, maps, g = simulate(ijk, affine, n_subjects, seed + k, n_blobs=2,
                                  graph=mesh, mm=mm)
        n = graph.n_nodes
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = flgp.group_map(maps, graph=graph)
            sets = {"excursion": result.excursion_set(u, alpha, n_samples=1000,
                                                      random_state=k).mask}
        seconds.append(time.perf_counter() - start)
        ybar, s = maps.mean(1), maps.std(1, ddof=1)
        t_map = (ybar - u) / (s / np.sqrt(n_subjects))
        sets["t_bonferroni"] = t_map > student.ppf(1 - alpha / n, n_subjects - 1)
        sets["z_bonferroni"] = (result.mean - u) / result.std > norm.ppf(1 - alpha / n)
        truly = g > u
        for name, mask in sets.items():
            errors[name] += bool(np.any(mask & ~truly))
            found[name].append(np.count_nonzero(mask & truly) / max(truly.sum(), 1))
    rows = []
    for name in errors:
        p = errors[name] / n_simulations
        rows.append(dict(workload="fwer", geometry=geometry, method=name,
                         n_simulations=n_simulations, n_subjects=n_subjects,
                         n_nodes=int(graph.n_nodes), u=u, alpha=alpha,
                         fwer=p, fwer_se=float(np.sqrt(max(p * (1 - p), 1e-12)
                                                       / n_simulations)),
                         power=float(np.mean(found[name])),
                         seconds_per_fit=float(np.median(seconds))))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--subjects", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--masks", nargs="+", default=["threshold", "whole"],
                        choices=["threshold", "whole"])
    parser.add_argument("--geometries", nargs="+", default=["lattice", "torus"],
                        choices=["lattice", "torus"])
    parser.add_argument("--skip-motor", action="store_true")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(motor_worker(args.worker, args.seed, args.masks[0])))
        return
    rows = [] if args.skip_motor else [motor(S, args.seed, mask) for mask in args.masks
                                       for S in args.subjects]
    for row in rows:
        print(f"motor mask {row['n_nodes']} voxels, S={row['n_subjects']:>2}: "
              f"{row['seconds']:6.1f} s + set {row['set_seconds']:.1f} s "
              f"({row['set_true']} of {row['active']} active voxels, {row['set_false']} "
              f"not), peak {row['peak_gb']:.2f} GB, coverage of g's 95 % "
              f"intervals {row['coverage']:.3f}, RMSE of g {row['rmse_group']:.3f} (of the "
              f"mean map {row['rmse_mean_map']:.3f}), nu_g={row['nu_group']}, "
              f"nu_d={row['nu_subject']}, noise={row['noise']:.3f} (true "
              f"{NOISE_SD ** 2:.3f}), {row['evaluations']} factorisations")
    for geometry in args.geometries if args.simulations else ():
        found = fwer(args.simulations, args.seed, geometry=geometry)
        for row in found:
            print(f"{geometry} {row['n_nodes']} nodes, S={row['n_subjects']}, "
                  f"{row['n_simulations']} simulations, {row['method']:>13}: family-wise "
                  f"error {row['fwer']:.3f} ± {row['fwer_se']:.3f}, power "
                  f"{row['power']:.3f} ({row['seconds_per_fit']:.1f} s a fit)")
        rows += found
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
