"""The regressor's choice between the manifold (heat kernel) and the Euclidean (RBF) GP by
their evidence (``FLGPRegressor()``), against each alone, on the same draws.

Sets: nilearn's motor activation map (|z| > 1.96, 7,407 voxels; 2,091 / 3,137 / 4,182
observed, the paper's proportions; needs nilearn), the spiral regression, a signal on a
folded sheet (the Swiss roll: the manifold must win) and a smooth blob cut by a threshold
(the RBF must win). For each: trimmed MSE on the unobserved points (the largest 1% of
squared errors left out, as experiments/fmri.py), coverage of the 95% predictive intervals
of a new observation, fit time, and which prior the evidence chose.

    python benchmarks/kernel_choice.py [--draws 2] [--sets motor,spiral,sheet,blob]
                                       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

from flgp import FLGPRegressor  # noqa: E402
from flgp.models.priors import priors_for  # noqa: E402
from flgp.datasets import make_spiral, make_swiss_roll  # noqa: E402


def trimmed_mse(err, trim=0.01):
    e = np.sort(np.asarray(err) ** 2)
    return float(e[:int(np.ceil((1.0 - trim) * e.size))].mean())


def motor():
    from nilearn.datasets import load_sample_motor_activation_image

    from flgp.datasets import load_voxels

    vox = load_voxels(load_sample_motor_activation_image(), threshold=1.96)
    return [(f"motor m={m}", vox.coords, vox.values, vox.values, m)
            for m in (2091, 3137, 4182)]


def spiral():
    X, y, f = make_spiral(4000, noise=0.5, random_state=0)
    return [("spiral m=200", X, y, f, 200)]


def sheet():
    X, t = make_swiss_roll(4000, random_state=0)[:2]
    f = np.sin(1.5 * t)                       # varies along the sheet, not across the gaps
    y = f + 0.1 * np.random.default_rng(0).standard_normal(4000)
    return [("folded sheet m=200", X, y, f, 200)]


def blob():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (8000, 3))
    f = np.exp(-np.sum((X - 0.2) ** 2, 1) / 0.3)
    keep = f > 0.25                           # a smooth map cut at a threshold
    X, f = X[keep], f[keep]
    y = f + 0.02 * rng.standard_normal(f.size)
    return [(f"thresholded blob m={int(0.25 * f.size)}", X, y, f, int(0.25 * f.size))]


SETS = {"motor": motor, "spiral": spiral, "sheet": sheet, "blob": blob}
METHODS = ("flgp", "rbf", "auto")


def run(sets, draws):
    rows = []
    for make in sets:
        for name, X, y, f, m in SETS[make]():
            for draw in range(draws):
                rng = np.random.default_rng(draw)
                obs = np.zeros(len(y), dtype=bool)
                obs[rng.choice(len(y), m, replace=False)] = True
                y_semi = np.where(obs, y, np.nan)
                for method in METHODS:
                    start = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        reg = FLGPRegressor(priors_for(method)).fit(X, y_semi)
                    seconds = time.perf_counter() - start
                    mean, sd = reg.transduction_[~obs], reg.transduction_std_[~obs]
                    half = 1.959964 * np.sqrt(sd ** 2 + reg.noise_)
                    rows.append(dict(set=name, draw=draw, method=method,
                                     chosen=reg.method_, seconds=seconds,
                                     tmse=trimmed_mse(mean - f[~obs]),
                                     coverage=float(np.mean(np.abs(y[~obs] - mean) <= half)),
                                     log_evidence=float(reg.log_marginal_likelihood_)))
                    print(f"{name:28s} draw {draw} {method:5s} -> {reg.method_:5s} "
                          f"tMSE {rows[-1]['tmse']:.4f} cover {rows[-1]['coverage']:.3f} "
                          f"{seconds:6.1f} s", flush=True)
    return rows


def summarise(rows):
    import pandas as pd

    df = pd.DataFrame(rows)
    out = df.groupby(["set", "method"]).agg(tmse=("tmse", "mean"), coverage=("coverage", "mean"),
                                             seconds=("seconds", "median"),
                                             chosen=("chosen", lambda c: ",".join(sorted(set(c)))))
    return out.reset_index()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--sets", default="motor,spiral,sheet,blob")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = run(args.sets.split(","), args.draws)
    print(summarise(rows).to_string(index=False))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
