"""Screening in ``FLGPRegressor()``: how far each full-rank prior's search
climbs after its coarse stage, and whether leaving a trailing search unfinished ever
changes the choice.

For each workload and each of the graph Matérn prior and the RBF GP the script pauses the
search after its coarse stage (``representation.screen``: the graph Matérn prior's starting
grid of its first order, the RBF GP's grid with its best point polished - what a search
trailing by the margin is judged by) and finishes it - and for the heat kernel
compares one L-BFGS-B start at its largest rank with its whole search - printing the coarse and the
final log evidence, the gain per label and the time of each stage; then the choice the
full weighing makes (both searches finished) against the one the default makes (a search
left unfinished when its coarse evidence lies more than ``max(100, 0.1 m)`` nats below
the best evidence fitted: docs/models.md, "Screening"). Workloads: the fsaverage5 pial maps
(sulcal depth, thickness, curvature; both hemispheres; 20 % observed), the motor map cut
at ``|z| > 1.96`` with 2,091 / 3,137 / 4,182 observed voxels, and three clouds (a noisy
spiral, a Swiss roll and a torus, 10 % labelled, on their k-NN graphs)::

    python benchmarks/screening.py --json benchmarks/results/screening.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import full_resolution as brain  # noqa: E402


def _clouds(seed: int):
    from flgp.datasets import make_spiral, make_swiss_roll, make_torus

    rng = np.random.default_rng(seed)
    X, y, _ = make_spiral(4000, noise=0.3, random_state=seed)
    yield "spiral", X, y, rng.random(y.size) < 0.1, None
    X, t = make_swiss_roll(2000, random_state=seed)
    y = np.sin(t) + 0.1 * rng.standard_normal(t.size)
    yield "swiss roll", X, y, rng.random(y.size) < 0.1, None
    X, angles = make_torus(2000, random_state=seed)
    y = np.sin(2 * angles[:, 0]) * np.cos(angles[:, 1]) + 0.1 * rng.standard_normal(len(X))
    yield "torus", X, y, rng.random(y.size) < 0.1, None


def workloads(seed: int, which):
    if "surface" in which:
        for hemi in ("left", "right"):
            for kind in ("sulcal", "thickness", "curvature"):
                V, y, obs, graph = brain.surface_data(hemi, kind, 0.2, seed)
                yield f"fsaverage5 {hemi} {kind}", V, y, obs, graph
    if "threshold" in which:
        for m in (2091, 3137, 4182):
            X, y, obs, graph = brain.threshold_data(m, seed)
            yield f"motor |z|>1.96, m={m}", X, y, obs, graph
    if "clouds" in which:
        yield from _clouds(seed)


def measure(name, X, y, obs, graph) -> dict:
    from flgp import FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
    from flgp.models.representation import Standardisation, screening_margin

    labelled = np.flatnonzero(obs)
    y_lab = y[labelled]
    standard = Standardisation.of_targets(y_lab)
    z = standard.standardise(y_lab)
    priors = [GraphMaternPrior(graph) if graph is not None else GraphMaternPrior(), RBFPrior()]
    est = FLGPRegressor(priors)
    row = dict(workload=name, n=int(len(X)), m=int(labelled.size),
               margin=screening_margin(labelled.size))
    for prior in priors:
        rep = FLGPRegressor.REPRESENTATIONS[prior.method]
        start = time.perf_counter()
        paused = rep.screen(est, X, labelled, y_lab, z, standard)
        first = paused.log_evidence
        paused.tighten()                      # what a search trailing by the margin gets
        coarse_s = time.perf_counter() - start
        start = time.perf_counter()
        fit = paused.finish()
        finish_s = time.perf_counter() - start
        row[prior.method] = dict(first=first, coarse=paused.log_evidence,
                                 final=fit.log_evidence,
                                 gain_per_label=(fit.log_evidence - paused.log_evidence)
                                 / labelled.size, coarse_s=coarse_s, finish_s=finish_s,
                                 staged=not paused.final)
    # the heat kernel: its coarse stage (one L-BFGS-B start at the largest rank) against
    # its whole search, on the eigenbasis its own fit chose
    from flgp.models.heat_kernel import fit_hyperparameters, noise_bounds

    heat = HeatKernelPrior()
    alone = FLGPRegressor(heat)
    start = time.perf_counter()
    alone.fit(X, np.where(obs, y, np.nan))
    finish_s = time.perf_counter() - start
    eigenpairs, options = alone.eigenpairs_, alone._fit_options()
    start = time.perf_counter()
    first = fit_hyperparameters(heat, options, eigenpairs,
                                eigenpairs.eigenvector_rows(labelled), z,
                                noise_bounds(options, standard), n_starts=1)
    coarse_s = time.perf_counter() - start
    coarse = standard.log_evidence_of_y(-first["nll_evidence"], labelled.size)
    final = alone.log_marginal_likelihood_
    row["flgp"] = dict(coarse=coarse, final=final, gain_per_label=(final - coarse)
                       / labelled.size, coarse_s=coarse_s, finish_s=finish_s, staged=True)
    row["full_choice"] = max(("graph_matern", "rbf", "flgp"), key=lambda k: row[k]["final"])
    default = FLGPRegressor([*priors, heat])
    start = time.perf_counter()
    default.fit(X, np.where(obs, y, np.nan))
    row["default_s"] = time.perf_counter() - start
    row["default_choice"] = default.method_
    row["screened_out"] = [k for k, why in default.skipped_methods_.items()
                           if why.startswith("screened out")]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="surface,threshold,clouds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)
    rows = []
    print("| workload | m | margin | graph Matérn coarse -> final (gain/label, s) | rbf coarse -> "
          "final (gain/label, s) | heat kernel coarse -> final (gain/label, s) | all "
          "finished | default (screened out) |")
    print("| --- | ---: | ---: | --- | --- | --- | --- | --- |")
    for name, X, y, obs, graph in workloads(args.seed, args.workloads.split(",")):
        r = measure(name, X, y, obs, graph)
        rows.append(r)
        cells = []
        for k in ("graph_matern", "rbf", "flgp"):
            c = r[k]
            cells.append(f"{c['coarse']:.1f} -> {c['final']:.1f} ({c['gain_per_label']:.3f}, "
                         f"{c['coarse_s']:.2f} + {c['finish_s']:.2f} s)")
        print(f"| {name} | {r['m']} | {r['margin']:.0f} | {' | '.join(cells)} | "
              f"{r['full_choice']} | {r['default_choice']} "
              f"({', '.join(r['screened_out']) or '-'}) |", flush=True)
    worst = max(max(r[k]["gain_per_label"] for k in ("graph_matern", "rbf", "flgp")) for r in rows)
    agree = sum(r["full_choice"] == r["default_choice"] for r in rows)
    print(f"\nlargest gain after a coarse stage: {worst:.3f} nats a label; the default "
          f"chose as the full weighing on {agree} of {len(rows)} workloads")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
