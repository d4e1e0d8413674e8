"""Brain maps at full resolution (issue 33's targets): the default regressor against each of
its candidates, on nilearn's bundled maps, in fresh processes.

Workloads (``--workloads``, comma-separated):

* ``whole`` - the whole-brain motor map (``load_sample_motor_activation_image``, 45,448
  voxels), 30 % observed: ``flgp nifti MAP --observed-fraction 0.3`` at its defaults, as a
  subprocess (wall time, peak memory), and the held-out trimmed MSE (the largest 1 % of
  squared errors left out) and the coverage of 95 % intervals of a new observation.
* ``threshold`` - the same map cut at ``|z| > 1.96`` (7,407 voxels) with 2,091 / 3,137 /
  4,182 observed voxels: the default against the exact RBF GP, the low-rank heat kernel
  and the voxel lattice's graph Matérn prior, each fitted alone.
* ``surface`` - fsaverage5, each hemisphere, 10 % of vertices observed
  (``--surface-observed``), sulcal depth,
  thickness (vertices with thickness > 0) and curvature: the default against its three
  candidates.
* ``lattice1e6`` - a synthetic 100³ lattice (10^6 voxels), 10 % observed: the default with
  the lattice graph (the iterative path), wall time and peak memory of a fresh process.
* ``mni3``, ``mni2``, ``gm1`` - issue 45's template resolutions, not in the default set: a
  smooth field on nilearn's MNI152 brain mask at 3 mm (69,765 voxels) and 2 mm (235,375),
  20 % observed, and on its grey-matter mask at 1 mm (1,524,955), 10 % observed; the
  default regressor on the mask's lattice (as ``flgp nifti``): time, peak memory, test MSE
  in noise variances, coverage.

Each fit runs in a fresh process (``--repeats`` times, medians quoted - the default's and
each prior's alone, and their ratio, the choosing cost). Prints a table and
can write JSON::

    python benchmarks/full_resolution.py --json benchmarks/results/full_resolution.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def _trimmed_mse(pred, truth):
    err = np.sort((pred - truth) ** 2)
    return float(np.mean(err[:int(0.99 * err.size)]))


def _coverage(pred, sd, truth):
    return float(np.mean(np.abs(pred - truth) <= 1.959964 * sd))


def _motor():
    from nilearn.datasets import load_sample_motor_activation_image

    return load_sample_motor_activation_image()


def whole_brain(seed: int) -> dict:
    """``flgp nifti`` on the whole motor map in a subprocess: wall time and peak memory
    (``/usr/bin/time -v`` where it exists, else resource's rusage of the child)."""
    import nibabel as nib
    import resource

    path = _motor()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "pred")
        cmd = [sys.executable, "-m", "flgp.cli", "nifti", path, "--observed-fraction", "0.3",
               "--out", out, "--seed", str(seed), "--quiet", "--include-noise"]
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if run.returncode != 0:
            raise RuntimeError(run.stderr)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 ** 2   # GB
        img = nib.load(path)
        data = img.get_fdata()
        mask = np.isfinite(data) & (data != 0)
        ijk = np.argwhere(mask)
        y = data[mask]
        rng = np.random.default_rng(seed)
        obs = np.zeros(y.size, bool)
        obs[rng.choice(y.size, int(round(0.3 * y.size)), replace=False)] = True
        mean = nib.load(out + "_mean.nii.gz").get_fdata()[tuple(ijk.T)]
        sd = nib.load(out + "_sd.nii.gz").get_fdata()[tuple(ijk.T)]
    un = ~obs
    chosen = [ln for ln in run.stdout.splitlines() if ln.startswith("FLGPRegressor")]
    return dict(workload="whole", seconds=wall, peak_gb=peak,
                tmse=_trimmed_mse(mean[un], y[un]), coverage=_coverage(mean[un], sd[un], y[un]),
                chosen=chosen[0] if chosen else "", n=int(y.size), m=int(obs.sum()))


def _fit_region(coords, y, obs, method, graph):
    from flgp import FLGPRegressor
    from flgp.models.priors import priors_for, with_graph

    reg = FLGPRegressor(with_graph(priors_for(method), graph))
    start = time.perf_counter()
    reg.fit(coords, np.where(obs, y, np.nan))
    seconds = time.perf_counter() - start
    mean = np.asarray(reg.transduction_)
    sd = np.sqrt(np.asarray(reg.transduction_std_) ** 2 + reg.noise_)
    un = ~obs
    return dict(seconds=seconds, tmse=_trimmed_mse(mean[un], y[un]),
                coverage=_coverage(mean[un], sd[un], y[un]),
                chosen=getattr(reg, "method_", method))


def threshold_data(m: int, seed: int):
    """``(voxel centres, map values, observed mask, lattice graph)``: the motor map cut at
    ``|z| > 1.96`` with ``m`` voxels observed (uniformly, ``seed``)."""
    import nibabel as nib

    from flgp.graph import lattice_graph

    img = nib.load(_motor())
    data = img.get_fdata()
    mask = np.abs(data) > 1.96
    ijk = np.argwhere(mask)
    y = data[mask]
    coords = ijk @ img.affine[:3, :3].T + img.affine[:3, 3]
    obs = np.zeros(y.size, bool)
    obs[np.random.default_rng(seed).choice(y.size, m, replace=False)] = True
    return coords, y, obs, lattice_graph(ijk, img.affine)


def threshold(m: int, method: str, seed: int) -> dict:
    coords, y, obs, graph = threshold_data(m, seed)
    out = _fit_region(coords, y, obs, method, graph)
    return dict(workload="threshold", m=m, n=int(y.size), method=method, **out)


def surface_data(hemi: str, kind: str, fraction: float, seed: int):
    """``(vertices, map values, observed mask, mesh graph)``: an fsaverage5 pial map
    (thickness: the vertices with thickness > 0) with a ``fraction`` observed."""
    from nilearn import datasets

    from flgp.graph.mesh import mesh_graph

    mesh = datasets.load_fsaverage("fsaverage5")["pial"].parts[hemi]
    img = datasets.load_fsaverage_data("fsaverage5", mesh_type="pial", data_type=kind)
    y = np.asarray(img.data.parts[hemi], dtype=np.float64)
    V, F = np.asarray(mesh.coordinates, dtype=np.float64), np.asarray(mesh.faces)
    region = np.ones(y.size, bool) if kind != "thickness" else y > 0
    inside = region[F].all(1)
    on_face = np.zeros(y.size, bool)
    on_face[F[inside].ravel()] = True
    region &= on_face
    keep = np.flatnonzero(region)
    new = np.full(y.size, -1)
    new[keep] = np.arange(keep.size)
    graph = mesh_graph(V[keep], new[F[inside]])
    obs = np.zeros(keep.size, bool)
    obs[np.random.default_rng(seed).choice(keep.size, int(round(fraction * keep.size)),
                                            replace=False)] = True
    return V[keep], y[keep], obs, graph


def surface(hemi: str, kind: str, method: str, seed: int, fraction: float = 0.1) -> dict:
    V, yk, obs, graph = surface_data(hemi, kind, fraction, seed)
    out = _fit_region(V, yk, obs, method, graph)
    return dict(workload="surface", hemi=hemi, kind=kind, method=method, n=int(yk.size),
                m=int(obs.sum()), **out)


def lattice_1e6(seed: int) -> dict:
    """A synthetic 100³ lattice (10^6 voxels), 10 % observed with noise sd 0.05: the
    default regressor with the lattice graph (beyond a factor's reach: the iterative
    path). Wall time of graph + fit, peak memory of the process, RMSE to the noise-free
    map at the unobserved voxels."""
    import resource

    from flgp import FLGPRegressor
    from flgp.graph import lattice_graph
    from flgp.models.priors import with_graph

    ijk = np.argwhere(np.ones((100, 100, 100), bool))
    x = ijk.astype(float)
    truth = np.sin(x[:, 0] / 8.0) * np.cos(x[:, 1] / 11.0) + 0.02 * x[:, 2]
    rng = np.random.default_rng(seed)
    obs = rng.random(truth.size) < 0.1
    y = np.where(obs, truth + 0.05 * rng.standard_normal(truth.size), np.nan)
    start = time.perf_counter()
    reg = FLGPRegressor(with_graph(None, lattice_graph(ijk))).fit(x, y)
    seconds = time.perf_counter() - start
    un = ~obs
    return dict(workload="lattice1e6", n=int(truth.size), m=int(obs.sum()), seconds=seconds,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
                rmse=float(np.sqrt(np.mean((reg.transduction_[un] - truth[un]) ** 2))),
                chosen=f"{reg.method_} nu={reg.matern_order_}")


def template_mask(resolution: int, kind: str, fraction: float, seed: int) -> dict:
    """A smooth field on one of nilearn's MNI152 masks (``kind`` "brain" or "gm", at
    ``resolution`` mm), ``fraction`` of its voxels observed with noise of 0.1 the field's
    sd: the default regressor on the mask's lattice graph, as ``flgp nifti`` fits it. Wall
    time of graph + fit, peak memory, test MSE in noise variances, coverage of 95 %
    intervals of a new observation (and of the noise-free field by the latent's)."""
    import resource

    from nilearn.datasets import load_mni152_brain_mask, load_mni152_gm_mask

    from flgp import FLGPRegressor
    from flgp.graph import lattice_graph
    from flgp.models.priors import with_graph

    load = load_mni152_gm_mask if kind == "gm" else load_mni152_brain_mask
    ijk = np.argwhere(np.asarray(load(resolution=resolution).get_fdata()) > 0)
    mm = ijk * float(resolution)
    truth = (np.sin(mm[:, 0] / 9.0) * np.cos(mm[:, 1] / 13.0)
             + 0.5 * np.sin((mm[:, 2] + mm[:, 0]) / 21.0))
    noise = 0.1 * truth.std()
    rng = np.random.default_rng(seed)
    obs = rng.random(truth.size) < fraction
    y = np.where(obs, truth + noise * rng.standard_normal(truth.size), np.nan)
    x = ijk.astype(float)
    start = time.perf_counter()
    reg = FLGPRegressor(with_graph(None, lattice_graph(ijk))).fit(x, y)
    seconds = time.perf_counter() - start
    test = np.flatnonzero(~obs)
    tmse = float(np.mean((reg.transduction_[test] - truth[test]) ** 2) / noise ** 2)
    sub = test[::20]
    mean, sd = reg.predict(x[sub], return_std=True)
    new = truth[sub] + noise * rng.standard_normal(sub.size)
    return dict(workload=f"mni152 {kind} {resolution} mm", n=int(truth.size),
                m=int(obs.sum()), seconds=seconds,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
                tmse=tmse,
                coverage=float(np.mean(np.abs(new - mean)
                                       < 1.96 * np.sqrt(sd ** 2 + reg.noise_))),
                latent_coverage=float(np.mean(np.abs(truth[sub] - mean) < 1.96 * sd)),
                noise_ratio=float(reg.noise_ / noise ** 2),
                chosen=f"{reg.method_} nu={reg.matern_order_}")


def _child(queue, fn, args):
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    try:
        queue.put(fn(*args))
    except Exception as exc:          # pragma: no cover - reported by the parent
        queue.put({"error": repr(exc)})


def fresh(fn, *args) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, fn, args))
    p.start()
    out = q.get()
    p.join()
    if "error" in out:
        raise RuntimeError(f"{fn.__name__}{args}: {out['error']}")
    return out


def _choosing_cost(label: str, cell: dict) -> None:
    """Print the default's wall time over that of the prior it chose, fitted alone in the
    same run (medians of ``--repeats`` fresh processes each; issue 44's target: 1.3)."""
    chosen = cell["auto"]["chosen"]
    if chosen in cell:
        ratio = cell["auto"]["seconds"] / cell[chosen]["seconds"]
        print(f"{label}: the default / {chosen} alone = {ratio:.2f}", flush=True)


def median_of(runs, keys=("seconds", "tmse", "coverage", "peak_gb")):
    out = dict(runs[0])
    for k in keys:
        if k in out:
            out[k] = float(np.median([r[k] for r in runs]))
    out["runs"] = len(runs)
    return out


# issue 45's template resolutions: (mm, mask, observed fraction)
TEMPLATE_WORKLOADS = {"mni3": (3, "brain", 0.2), "mni2": (2, "brain", 0.2),
                      "gm1": (1, "gm", 0.1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="whole,threshold,surface,lattice1e6")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--surface-observed", type=float, default=0.1,
                    help="surface workload: the share of vertices observed (default 0.1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    work = args.workloads.split(",")
    rows = []
    if "whole" in work:
        rows.append(median_of([whole_brain(args.seed) for _ in range(args.repeats)]))
        r = rows[-1]
        print(f"whole brain n={r['n']} m={r['m']}: {r['seconds']:.1f} s, peak "
              f"{r['peak_gb']:.2f} GB, tMSE {r['tmse']:.4f}, 95% coverage "
              f"{r['coverage']:.3f}\n  {r['chosen']}", flush=True)
    methods = ["auto", "graph_matern", "flgp", "rbf"]
    if "threshold" in work:
        for m in (2091, 3137, 4182):
            cell = {}
            for method in methods:
                runs = [fresh(threshold, m, method, args.seed)
                        for _ in range(args.repeats)]
                cell[method] = median_of(runs)
                rows.append(cell[method])
                r = rows[-1]
                print(f"threshold m={m} {method:>5} ({r['chosen']}): {r['seconds']:.1f} s, "
                      f"tMSE {r['tmse']:.4f}, coverage {r['coverage']:.3f}", flush=True)
            _choosing_cost(f"threshold m={m}", cell)
    if "surface" in work:
        for hemi in ("left", "right"):
            for kind in ("sulcal", "thickness", "curvature"):
                cell = {}
                for method in methods:
                    runs = [fresh(surface, hemi, kind, method, args.seed, args.surface_observed)
                            for _ in range(args.repeats)]
                    cell[method] = median_of(runs)
                    rows.append(cell[method])
                    r = rows[-1]
                    print(f"fsaverage5 {hemi} {kind} {method:>5} ({r['chosen']}): "
                          f"{r['seconds']:.1f} s, tMSE {r['tmse']:.5f}, coverage "
                          f"{r['coverage']:.3f}", flush=True)
                _choosing_cost(f"fsaverage5 {hemi} {kind}", cell)
    if "lattice1e6" in work:
        rows.append(median_of([fresh(lattice_1e6, args.seed) for _ in range(args.repeats)],
                              keys=("seconds", "peak_gb", "rmse")))
        r = rows[-1]
        print(f"100^3 lattice, 10% observed ({r['chosen']}): {r['seconds']:.1f} s, peak "
              f"{r['peak_gb']:.2f} GB, RMSE {r['rmse']:.4f}", flush=True)
    for name, (resolution, kind, fraction) in TEMPLATE_WORKLOADS.items():
        if name in work:
            rows.append(median_of([fresh(template_mask, resolution, kind, fraction,
                                         args.seed) for _ in range(args.repeats)]))
            r = rows[-1]
            print(f"{r['workload']} (n={r['n']}, m={r['m']}, {r['chosen']}): "
                  f"{r['seconds']:.1f} s, peak {r['peak_gb']:.2f} GB, tMSE "
                  f"{r['tmse']:.3f} noise variances, coverage {r['coverage']:.3f} "
                  f"(latent {r['latent_coverage']:.3f}, noise_ {r['noise_ratio']:.2f} "
                  f"of the true)", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
