"""Excursion sets from the joint posterior (flgp.models.excursion): error control, power
and cost, measured on simulated fields of known truth.

Workloads:

* ``lattice`` - a 20 x 20 x 10 voxel patch (4,000 voxels, 6-connectivity);
* ``torus`` - a curved mesh: a torus (radii 3 and 1) triangulated on an 80 x 30
  parametric grid (2,400 vertices; flgp's cotangent mesh graph).

Each simulation draws a field ``f = background + Σ blobs``: three to five Gaussian blobs
of height 1 and width 2-3 spacings at random centres, on a smooth background (a random
combination of low-frequency sines, amplitude 0.15); observes 30 % of the nodes with
Gaussian noise of sd 10 % or 30 % of the field's sd (over the nodes); fits
``FLGPRegressor(prior=GraphMaternPrior(graph=...))`` at its defaults; and thresholds at
``u = 0.5`` (half the blobs' height) on the side ``f > u``:

* ``excursion`` - :func:`flgp.models.excursion.excursion_set` at α = 0.05 at its defaults
  (1,000 joint draws, the conservative rule at 2 standard errors);
* ``marginal`` - the nodes with marginal probability ``Φ((μ - u) / σ) ≥ 0.95``
  (uncorrected, for reference);
* ``bonferroni`` - the voxel-wise z-map ``(μ - u) / σ`` of the same fit, one-sided p-values
  ``1 - Φ(z)`` below ``0.05 / n`` (nilearn's ``height_control="bonferroni"``);
* ``fdr`` - the same p-values by Benjamini-Hochberg at 0.05 (nilearn's
  ``height_control="fdr"``).

The two voxel-wise rules are implemented here with scipy on the z-map (the rules nilearn's
``threshold_stats_img`` applies, without building NIfTI images). Reported per workload and
noise level: the family-wise error (the fraction of simulations whose set holds any node
where the truth is ``≤ u``; the excursion set's target is ≤ 0.05 - its guarantee is on
the posterior, so this measures how well the fitted model describes the simulated
fields), the mean false-discovery proportion, power (truly active nodes found, mean
over simulations, and their share of the active nodes), and seconds per set.

``--real`` also times the excursion set on nilearn's whole-brain motor map (45,448
voxels, 30 % observed; targets 60 s and 4 GB) and an fsaverage5 hemisphere (10,242
vertices, sulcal depth, 10 % observed; target 30 s), from data nilearn ships or caches
(no download). Prints a table; ``--json PATH`` writes the numbers::

    python benchmarks/excursion_sets.py --real --json benchmarks/results/excursion_sets.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings

import inspect

import numpy as np
from scipy.special import ndtr

LEVEL, ALPHA, HEIGHT = 0.5, 0.05, 1.0
OBSERVED_FRACTION = 0.3


def _default_draws() -> int:
    """The joint draws :func:`flgp.models.excursion.excursion_set` takes by default."""
    from flgp.models.excursion import excursion_set
    return inspect.signature(excursion_set).parameters["n_samples"].default
NOISE_LEVELS = (0.1, 0.3)


def lattice_geometry():
    from flgp.graph import lattice_graph

    ijk = np.argwhere(np.ones((20, 20, 10), bool))
    return ijk.astype(np.float64), lattice_graph(ijk), 1.0


def torus_geometry(n_major: int = 80, n_minor: int = 30, major: float = 3.0,
                   minor: float = 1.0):
    """A torus triangulated on its parametric grid: vertices and the mesh graph."""
    from flgp.graph import mesh_graph

    a, b = np.meshgrid(2 * np.pi * np.arange(n_major) / n_major,
                       2 * np.pi * np.arange(n_minor) / n_minor, indexing="ij")
    V = np.c_[((major + minor * np.cos(b)) * np.cos(a)).ravel(),
              ((major + minor * np.cos(b)) * np.sin(a)).ravel(),
              (minor * np.sin(b)).ravel()]
    i, j = np.meshgrid(np.arange(n_major), np.arange(n_minor), indexing="ij")
    v00 = (i * n_minor + j).ravel()
    v10 = (((i + 1) % n_major) * n_minor + j).ravel()
    v01 = (i * n_minor + (j + 1) % n_minor).ravel()
    v11 = (((i + 1) % n_major) * n_minor + (j + 1) % n_minor).ravel()
    faces = np.r_[np.c_[v00, v10, v11], np.c_[v00, v11, v01]]
    graph = mesh_graph(V, faces)
    return V, graph, float(graph.spacing)


GEOMETRIES = {"lattice": lattice_geometry, "torus": torus_geometry}


def simulate_field(points, spacing, rng):
    """A smooth background (amplitude 0.15) plus 3-5 Gaussian blobs of height 1 and width
    2-3 spacings (Euclidean distance: on the torus, blobs are small next to its radii)."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    extent = hi - lo
    background = np.zeros(points.shape[0])
    for _ in range(3):
        w = rng.normal(size=points.shape[1]) * 2 * np.pi / np.max(extent)
        background += np.sin(points @ w + rng.uniform(0, 2 * np.pi))
    background *= 0.15 / np.max(np.abs(background))
    field = background.copy()
    for _ in range(rng.integers(3, 6)):
        centre = points[rng.integers(points.shape[0])]
        width = rng.uniform(2.0, 3.0) * spacing
        field += HEIGHT * np.exp(-np.sum((points - centre) ** 2, axis=1) / (2 * width ** 2))
    return field


def voxelwise_sets(z, level=0.05):
    """``(Bonferroni, Benjamini-Hochberg)`` masks of one-sided p-values ``1 - Φ(z)``."""
    p = ndtr(-z)
    n = p.size
    bonferroni = p < level / n
    order = np.argsort(p, kind="stable")
    below = p[order] <= level * np.arange(1, n + 1) / n
    k = np.flatnonzero(below).max() + 1 if below.any() else 0
    fdr = np.zeros(n, bool)
    fdr[order[:k]] = True
    return bonferroni, fdr


def one_simulation(geometry: str, noise_fraction: float, seed: int) -> dict:
    import flgp
    from flgp.models.excursion import excursion_set

    points, graph, spacing = _geometry(geometry)
    rng = np.random.default_rng(seed)
    truth = simulate_field(points, spacing, rng)
    n = truth.size
    observed = np.zeros(n, bool)
    observed[rng.choice(n, int(round(OBSERVED_FRACTION * n)), replace=False)] = True
    noise_sd = noise_fraction * truth.std()
    y = np.where(observed, truth + noise_sd * rng.standard_normal(n), np.nan)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = flgp.FLGPRegressor(prior=flgp.GraphMaternPrior(graph=graph)).fit(points, y)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    result = excursion_set(reg, LEVEL, ALPHA, random_state=seed)
    set_seconds = time.perf_counter() - start
    mean, sd = np.asarray(reg.transduction_), np.asarray(reg.transduction_std_)
    z = (mean - LEVEL) / sd
    bonferroni, fdr = voxelwise_sets(z)
    sets = dict(excursion=result.mask, marginal=ndtr(z) >= 1 - ALPHA,
                bonferroni=bonferroni, fdr=fdr)
    active = truth > LEVEL
    out = dict(geometry=geometry, noise=noise_fraction, seed=seed, n=n,
               n_active=int(active.sum()), fit_seconds=fit_seconds,
               set_seconds=set_seconds, order=int(reg.matern_order_),
               joint_lower=result.joint_lower)
    for name, mask in sets.items():
        false = int(np.sum(mask & ~active))
        found = int(np.sum(mask & active))
        out[name] = dict(found=found, false=false,
                         fdp=false / max(int(mask.sum()), 1))
    return out


_GEOMETRY_CACHE = {}


def _geometry(name):
    if name not in _GEOMETRY_CACHE:
        _GEOMETRY_CACHE[name] = GEOMETRIES[name]()
    return _GEOMETRY_CACHE[name]


RULES = ("excursion", "marginal", "bonferroni", "fdr")


def summarise(rows):
    table = []
    for geometry in GEOMETRIES:
        for noise in NOISE_LEVELS:
            cell = [r for r in rows if r["geometry"] == geometry and r["noise"] == noise]
            if not cell:
                continue
            active = np.array([r["n_active"] for r in cell], dtype=float)
            entry = dict(geometry=geometry, noise=noise, n_sims=len(cell),
                         n_nodes=cell[0]["n"], mean_active=float(active.mean()),
                         fit_seconds=float(np.median([r["fit_seconds"] for r in cell])),
                         set_seconds=float(np.median([r["set_seconds"] for r in cell])))
            for rule in RULES:
                fwer = np.mean([r[rule]["false"] > 0 for r in cell])
                found = np.array([r[rule]["found"] for r in cell], dtype=float)
                entry[rule] = dict(
                    fwer=float(fwer), fwer_se=float(np.sqrt(fwer * (1 - fwer) / len(cell))),
                    mean_fdp=float(np.mean([r[rule]["fdp"] for r in cell])),
                    found=float(found.mean()),
                    power=float(np.mean(found / np.maximum(active, 1))))
            table.append(entry)
    return table


def print_table(table):
    print(f"{'workload':<8} {'noise':>5} {'sims':>5} {'active':>7} {'rule':<11} "
          f"{'FWER':>13} {'mean FDP':>9} {'found':>8} {'power':>6}")
    for e in table:
        for k, rule in enumerate(RULES):
            r = e[rule]
            head = (f"{e['geometry']:<8} {e['noise']:>5.1f} {e['n_sims']:>5d} "
                    f"{e['mean_active']:>7.1f}" if k == 0 else " " * 28)
            print(f"{head} {rule:<11} {r['fwer']:>6.3f} ± {r['fwer_se']:.3f} "
                  f"{r['mean_fdp']:>9.4f} {r['found']:>8.1f} {r['power']:>6.3f}")
        print(f"{'':28} fit {e['fit_seconds']:.2f} s, excursion set {e['set_seconds']:.2f} s "
              f"(medians; {e['n_nodes']} nodes, {_default_draws()} draws)")


def run_simulations(n_sims: int, workers: int, seed: int, progress: bool):
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    tasks = [(g, noise, seed + 1000 * k + i) for k, (g, noise) in enumerate(
        (g, noise) for g in GEOMETRIES for noise in NOISE_LEVELS) for i in range(n_sims)]
    jobs = (delayed(one_simulation)(*t) for t in tasks)
    return list(tqdm(Parallel(n_jobs=workers, return_as="generator")(jobs), total=len(tasks),
                     disable=None if progress else True, desc="simulations"))


# -- real maps ----------------------------------------------------------------------------

def _peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def motor_map(seed: int) -> dict:
    """The whole-brain motor map (45,448 voxels), 30 % observed: fit, then the excursion set
    at ``u = 3`` (z units) and α = 0.05, timed apart."""
    from nilearn.datasets import load_sample_motor_activation_image

    from flgp.datasets.fmri import load_voxels
    from flgp.graph import lattice_graph

    vox = load_voxels(load_sample_motor_activation_image())
    values, graph = vox.values, lattice_graph(vox.ijk, vox.affine)
    return _timed_set("motor", graph, values, 0.3, 3.0, seed)


def fsaverage_hemisphere(seed: int, hemi: str = "left") -> dict:
    """An fsaverage5 hemisphere's sulcal depth, 10 % observed: the excursion set at the
    90th percentile of the map and α = 0.05."""
    from nilearn import datasets

    from flgp.graph import mesh_graph

    mesh = datasets.load_fsaverage("fsaverage5")["pial"].parts[hemi]
    img = datasets.load_fsaverage_data("fsaverage5", mesh_type="pial", data_type="sulcal")
    values = np.asarray(img.data.parts[hemi], dtype=np.float64)
    V, F = np.asarray(mesh.coordinates, dtype=np.float64), np.asarray(mesh.faces)
    graph = mesh_graph(V, F)
    return _timed_set(f"fsaverage5 {hemi}", graph, values, 0.1,
                      float(np.quantile(values, 0.9)), seed)


def _timed_set(name, graph, values, fraction, u, seed):
    """The default graph Matérn fit of ``values`` on ``graph`` with ``fraction`` of its
    nodes observed, then the excursion set above ``u`` at α = 0.05, each timed."""
    import flgp
    from flgp.models.excursion import excursion_set

    rng = np.random.default_rng(seed)
    observed = np.zeros(values.size, bool)
    observed[rng.choice(values.size, int(round(fraction * values.size)),
                        replace=False)] = True
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = flgp.FLGPRegressor(prior=flgp.GraphMaternPrior(graph=graph)).fit(
            graph.points, np.where(observed, values, np.nan))
    fit_seconds = time.perf_counter() - start
    peak_fit = _peak_gb()
    start = time.perf_counter()
    result = excursion_set(reg, u, ALPHA, random_state=seed)
    seconds = time.perf_counter() - start
    return _real_row(name, values.size, reg, result, fit_seconds, seconds, peak_fit,
                     values, u)


def _real_row(name, n, reg, result, fit_seconds, seconds, peak_fit, values, u):
    active = values > u
    return dict(workload=name, n=int(n), order=int(reg.matern_order_), level=u,
                fit_seconds=fit_seconds, set_seconds=seconds, peak_gb_after_fit=peak_fit,
                peak_gb=_peak_gb(), set_nodes=int(result.n_nodes_in_set),
                joint=result.joint_probability, joint_lower=result.joint_lower,
                set_in_map_above_u=float(np.mean(active[result.mask]))
                if result.n_nodes_in_set else None)


def _run_real(name, seed):
    """A real-map workload in a fresh process (its own peak memory)."""
    import subprocess

    code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import excursion_sets as b; print(json.dumps(b.{name}({seed})))")
    env = dict(os.environ)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    if run.returncode != 0:
        return dict(workload=name, error=run.stderr.strip().splitlines()[-1:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-sims", type=int, default=100,
                        help="simulations per workload and noise level (4 cells)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real", action="store_true",
                        help="also time the motor map and an fsaverage5 hemisphere")
    parser.add_argument("--no-simulations", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    out = {"level": LEVEL, "alpha": ALPHA, "draws": _default_draws(),
           "observed_fraction": OBSERVED_FRACTION}
    if not args.no_simulations:
        start = time.perf_counter()
        rows = run_simulations(args.n_sims, args.workers, args.seed, args.progress)
        out["simulation_seconds"] = time.perf_counter() - start
        out["table"] = summarise(rows)
        print_table(out["table"])
        print(f"simulations: {out['simulation_seconds']:.0f} s on {args.workers} workers")
    if args.real:
        out["real"] = [_run_real("fsaverage_hemisphere", args.seed),
                       _run_real("motor_map", args.seed)]
        for row in out["real"]:
            print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
