"""Many maps on one mask (issue 45): maps per minute, peak memory and each map's test error
against its own single-map fit.

The mask is the whole brain of nilearn's sample motor activation map (45,448 voxels at
3 mm); the maps are that map and smooth random fields on the same grid (white noise
smoothed by Gaussians of 4, 8 and 12 mm sd, scaled to unit sd, plus noise of sd 0.1),
``--observed`` of each map's voxels observed (the same voxels for every map). Three ways of
fitting them:

* ``own`` - one 4-d call of :func:`flgp.predict_image`, each map its own hyperparameters
  (the default; maps fitted in as many processes as the cores and memory allow; on this
  mask the maps' graph Matérn searches share the whole lattice's work,
  :func:`flgp.precision.fit_matern_maps`);
* ``shared`` - one call with ``hyperparameters="shared"`` (one prior by the pooled
  evidence, one factorisation for every map);
* ``single`` - each map alone, a call each (the reference for the per-map error).

Each way runs in a fresh process (wall time; peak memory: the summed peaks of the process
and the worker processes that fitted the maps). Error: the mean squared error
at the unobserved voxels against the noise-free map, relative to the single-map fit's;
coverage: 95 % intervals of a new observation.

    python benchmarks/many_maps.py --maps 6 --json benchmarks/results/many_maps.json
    python benchmarks/many_maps.py --maps 100 --ways own     # the issue's hundred maps
    python benchmarks/many_maps.py --maps 20 --ways own --smooth --json /tmp/smooth.json

``--smooth``: the fields smoothed by 8, 10 and 12 mm in turn and each map's noise (the
motor map's too) 5, 10, 20 and 30 % of its sd in turn; also printed: the time a map, the
median coverage and the test error as a root mean square in noise sds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from full_resolution import fresh  # noqa: E402 - one fresh process a fit


# ``--smooth``: the fields' smoothing sds (mm) and the noise sds (fractions of the field's
# sd), in turn
SMOOTH_SCALES = (8.0, 10.0, 12.0)
SMOOTH_NOISES = (0.05, 0.1, 0.2, 0.3)


def make_maps(n_maps: int, seed: int, smooth: bool = False):
    """``(image of n_maps volumes, noise-free values (n, k), region mask)``. ``smooth``:
    the fields smoothed by Gaussians of ``SMOOTH_SCALES`` mm sd, the noise of each map
    (the motor map's too) ``SMOOTH_NOISES`` of its sd in turn; else 4, 8 and 12 mm and
    noise of sd 0.1."""
    import nibabel as nib
    from nilearn.datasets import load_sample_motor_activation_image
    from scipy.ndimage import gaussian_filter

    img = nib.load(load_sample_motor_activation_image())
    data = np.asarray(img.get_fdata())
    region = np.isfinite(data) & (data != 0)
    voxel = float(np.sqrt((img.affine[:3, :3] ** 2).sum(0)).mean())
    rng = np.random.default_rng(seed)
    clean = [np.where(region, data / data[region].std(), 0.0)]
    scales = SMOOTH_SCALES if smooth else (4.0, 8.0, 12.0)
    while len(clean) < n_maps:
        sd_mm = scales[(len(clean) - 1) % len(scales)]
        field = gaussian_filter(rng.standard_normal(data.shape), sd_mm / voxel)
        field = np.where(region, field, 0.0)
        clean.append(field / field[region].std())
    clean = np.stack(clean[:n_maps], axis=3)
    noise = (np.resize(SMOOTH_NOISES, n_maps) if smooth else np.full(n_maps, 0.1))
    noisy = clean + noise * rng.standard_normal(clean.shape) * region[..., None]
    noisy[~region] = 0.0
    return (nib.Nifti1Image(noisy.astype(np.float32), img.affine), clean[region],
            region)


def _tree_peak_gb() -> float:
    """The summed peak resident memory (``VmHWM``) of this process and its descendants
    still alive - the worker processes that fitted the maps (Linux; 0 elsewhere): an
    upper bound on what they held at once."""
    parent = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {os.getpid()}, True
    while grew:
        kids = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= kids
        grew = bool(kids)
    total = 0.0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) / 1024 ** 2
        except OSError:
            continue
    return total


def run_way(way: str, n_maps: int, observed: float, seed: int, smooth: bool = False) -> dict:
    import resource

    from flgp import predict_image

    image, clean, region = make_maps(n_maps, seed, smooth)
    start = time.perf_counter()
    if way == "single":
        means, sds, noises = [], [], []
        for j in range(n_maps):
            res = predict_image(image.slicer[..., j], region, observed, random_state=seed,
                                include_noise=True)
            means.append(res.mean.get_fdata()[region])
            sds.append(res.sd.get_fdata()[region])
        mean, sd = np.stack(means, 1), np.stack(sds, 1)
        obs = res.observed
    else:
        res = predict_image(image, region, observed, random_state=seed, include_noise=True,
                            hyperparameters=way if way == "shared" else "own")
        mean, sd = res.mean.get_fdata()[region], res.sd.get_fdata()[region]
        obs = res.observed
    seconds = time.perf_counter() - start
    peak_gb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
                  _tree_peak_gb())
    # the worker processes go now (their peaks read): left to their idle timeout, they
    # keep this process from exiting for five minutes
    from joblib.externals.loky import get_reusable_executor
    get_reusable_executor().shutdown(kill_workers=True)
    test = ~obs
    noisy = np.asarray(image.get_fdata())[region]
    mse = np.mean((mean[test] - clean[test]) ** 2, axis=0)
    coverage = np.mean(np.abs(noisy[test] - mean[test]) <= 1.96 * sd[test], axis=0)
    noise = np.resize(SMOOTH_NOISES, n_maps) if smooth else np.full(n_maps, 0.1)
    return dict(way=way, maps=n_maps, smooth=smooth, n=int(region.sum()), m=int(obs.sum()),
                seconds=seconds, maps_per_minute=60.0 * n_maps / seconds,
                peak_gb=peak_gb,
                mse=mse.tolist(), coverage=coverage.tolist(),
                relative_error=np.sqrt(mse / noise ** 2).tolist())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", type=int, default=6)
    ap.add_argument("--observed", type=float, default=0.3)
    ap.add_argument("--ways", default="own,shared,single")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smooth", action="store_true",
                    help="smooth maps: fields smoothed by 8-12 mm, noise 5-30 %% of their sd")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = {way: fresh(run_way, way, args.maps, args.observed, args.seed, args.smooth)
            for way in args.ways.split(",")}
    ref = rows.get("single")
    print(f"{args.maps} maps on the motor map's mask ({rows[next(iter(rows))]['n']} voxels, "
          f"{100 * args.observed:.0f} % observed)")
    print(f"{'way':>7} {'seconds':>8} {'maps/min':>9} {'peak GB':>8} "
          f"{'MSE / single (max)':>19} {'coverage (min-max)':>19}")
    for way, r in rows.items():
        ratio = (max(a / b for a, b in zip(r["mse"], ref["mse"])) if ref else float("nan"))
        print(f"{way:>7} {r['seconds']:8.1f} {r['maps_per_minute']:9.2f} "
              f"{r['peak_gb']:8.2f} {ratio:19.3f} "
              f"{min(r['coverage']):9.3f}-{max(r['coverage']):.3f}")
    for way, r in rows.items():
        print(f"{way:>7}: {r['seconds'] / r['maps']:.2f} s a map; coverage median "
              f"{np.median(r['coverage']):.3f}; RMSE / noise sd median "
              f"{np.median(r['relative_error']):.3f} (max {max(r['relative_error']):.3f})")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(list(rows.values()), fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
