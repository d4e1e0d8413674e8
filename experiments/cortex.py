"""Regression of cortical thickness on the folded cortical surface (fs_LR-32k vertices).

brainspace ships an HCP group-average cortical-thickness map on the Conte69 fs_LR-32k
midthickness surfaces: the vertices (medial wall dropped) are a folded 2-d sheet in 3-d,
where Euclidean distance across a sulcus lies about how far apart two points of cortex are.
Same workflow as experiments/fmri.py (He et al., Sec. 5.3): m observed vertices, the
thickness at every other vertex predicted; RBF GP (extrinsic) vs LKFLGP (s = 1500, r = 3,
M = 500); MSE on the unobserved vertices after dropping the top and bottom 1% of errors;
wall time per fit. Figure: the map, and the prior correlation of every left-hemisphere
vertex to a seed vertex under each fitted kernel.

Needs ``pip install brainspace nibabel`` (brainspace's data files only; VTK is not used).

    python experiments/cortex.py                  # 10 repetitions
    python experiments/cortex.py --quick          # 2 repetitions
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "2")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from flgp.datasets import load_conte69_thickness  # noqa: E402
# the same methods, error measure and prior-correlation map as the fMRI study
from fmri import basis_bound, make_method, prior_correlation, trimmed_mse  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "results")
METHODS = ["RBF GP", "Nystrom-GLGP", "LKFLGP"]
M_LABELLED = (1000, 2000, 4000)


def run(X, z, m_values, methods, repetitions, seed=0):
    n = X.shape[0]
    rows, models = [], {}
    for m in m_values:
        for rep in range(repetitions):
            rng = np.random.default_rng(seed + rep)
            lab = rng.choice(n, size=m, replace=False)
            y = np.full(n, np.nan)
            y[lab] = z[lab]
            unl = np.isnan(y)
            for name in methods:
                est = make_method(name, random_state=seed + rep)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(X, y)
                sec = time.perf_counter() - t0
                err = est.transduction_[unl] - z[unl]
                mse = trimmed_mse(err)
                print(f"  m={m} rep={rep} {name}: trimmed MSE {mse:.4f} in {sec:.1f} s",
                      flush=True)
                rows.append(dict(m=m, method=name, repetition=rep, mse=mse,
                                 mse_untrimmed=float(np.mean(err ** 2)), seconds=sec,
                                 basis_bound=basis_bound(est, z),
                                 diffusion_time=getattr(est, "diffusion_time_", np.nan),
                                 noise=est.noise_))
                if rep == 0 and m == m_values[0]:
                    models[name] = est
    return pd.DataFrame(rows), models


def plot(surf, models, path):
    X = surf.vertices
    lh = np.flatnonzero(surf.hemisphere == "lh")
    # seed: a left-hemisphere vertex near the lateral surface's centre (lateral view: y, z)
    centre = np.array([X[lh, 0].min(), X[lh, 1].mean(), X[lh, 2].mean()])
    seed = lh[np.argmin(((X[lh] - centre) ** 2).sum(1))]
    panels = [("thickness (mm)", surf.values, "magma")]
    for name in ("LKFLGP", "Nystrom-GLGP", "RBF GP"):
        if name in models:
            panels.append((f"{name}: prior corr. to seed",
                           prior_correlation(models[name], X, seed), "viridis"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4))
    order = lh[np.argsort(-X[lh, 0])]  # draw medial first, lateral (small x) on top
    for ax, (title, val, cmap) in zip(np.atleast_1d(axes), panels):
        sc = ax.scatter(X[order, 1], X[order, 2], c=val[order], s=0.5, cmap=cmap)
        ax.scatter(X[seed, 1], X[seed, 2], c="red", marker="x", s=60)
        ax.set_title(f"{title}\nleft hemisphere, lateral view", fontsize=9)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(sc, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repetitions", type=int, default=10)
    ap.add_argument("--m", type=int, nargs="+", default=list(M_LABELLED))
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    ap.add_argument("--quick", action="store_true", help="2 repetitions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    threadpool_limits(args.threads)
    if args.quick:
        args.repetitions = min(args.repetitions, 2)
    os.makedirs(args.out, exist_ok=True)
    surf = load_conte69_thickness()
    X, z = surf.vertices, surf.values
    print(f"{X.shape[0]} cortical vertices (both hemispheres, medial wall dropped); "
          f"thickness variance {np.var(z):.4f} mm^2")
    df, models = run(X, z, args.m, args.methods, args.repetitions, seed=args.seed)
    summary = df.groupby(["m", "method"], sort=False).agg(
        mse_mean=("mse", "mean"), mse_sd=("mse", "std"),
        mse_untrimmed_mean=("mse_untrimmed", "mean"), basis_bound=("basis_bound", "mean"),
        noise=("noise", "mean"),
        seconds_median=("seconds", "median"), repetitions=("mse", "size")).reset_index()
    summary["mse_sd"] = summary["mse_sd"].fillna(0.0)
    print("\ntrimmed MSE (mm^2) on unobserved vertices; median seconds per fit on 2 cores")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    df.to_csv(os.path.join(args.out, "cortex_runs.csv"), index=False)
    summary.to_csv(os.path.join(args.out, "cortex.csv"), index=False)
    plot(surf, models, os.path.join(args.out, "cortex_seed_correlation.png"))


if __name__ == "__main__":
    main()
