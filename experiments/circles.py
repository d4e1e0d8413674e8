"""Reproduce the FLGP paper's concentric-circles study (Tables 1-2, Figure 4).

All eight methods of Table 1 on n in {2400, 4800, 12000} x m in {50, 100}; error on the
unlabelled points and fit + predict wall time; our table next to the paper's (mean (sd));
CSV + PNG under experiments/results/.

    python experiments/circles.py                   # 20 repetitions (hours on 2 cores)
    python experiments/circles.py --repetitions 5   # fewer
"""

from __future__ import annotations

import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from flgp.reproduce.circles import (TABLE1_METHODS, SCENARIOS, format_table,  # noqa: E402
                                    plot_covariances, run_circles, summarise)

OUT = os.path.join(os.path.dirname(__file__), "results")


def plot_errors(summary, path):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, m in zip(axes, (50, 100)):
        block = summary[summary.m == m]
        methods = [x for x in TABLE1_METHODS if x in set(block.method)]
        width = 0.8 / 3
        for k, n in enumerate(sorted(block.n.unique())):
            b = block[block.n == n].set_index("method").reindex(methods)
            x = np.arange(len(methods)) + (k - 1) * width
            ax.bar(x, b.error_mean, width, yerr=b.error_sd, label=f"ours n={n}", alpha=0.8)
            ax.scatter(x, b.paper_error_mean, color="k", marker="_", s=120, zorder=3,
                       label="paper" if k == 0 else None)
        ax.set_xticks(np.arange(len(methods)))
        ax.set_xticklabels(methods, rotation=40, ha="right")
        ax.set_title(f"m = {m} labels")
        ax.set_ylabel("error on unlabelled points (%)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repetitions", type=int, default=20)
    ap.add_argument("--glgp-max-n", type=int, default=4800,
                    help="skip GLGP (dense n x n) above this n")
    ap.add_argument("--methods", nargs="+", default=list(TABLE1_METHODS), choices=list(TABLE1_METHODS),
                    help="rerun only these methods; with --merge the other methods' rows "
                         "are kept from the existing runs CSV")
    ap.add_argument("--merge", action="store_true",
                    help="replace only the rerun methods' rows in circles_table1_runs.csv")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    df, models = run_circles(SCENARIOS, args.methods, args.repetitions,
                             glgp_max_n=args.glgp_max_n, keep_models=True)
    runs_csv = os.path.join(args.out, "circles_table1_runs.csv")
    if args.merge and os.path.exists(runs_csv):
        import pandas as pd

        old = pd.read_csv(runs_csv)
        df = pd.concat([old[~old.method.isin(args.methods)], df], ignore_index=True)
    summary = summarise(df)
    print(format_table(summary))
    df.to_csv(runs_csv, index=False)
    summary.to_csv(os.path.join(args.out, "circles_table1.csv"), index=False)
    plot_errors(summary, os.path.join(args.out, "circles_table1.png"))
    X, fitted = models[(4800, 100)]
    if set(TABLE1_METHODS) <= set(fitted):
        plot_covariances(os.path.join(args.out, "circles_figure4.png"), X, fitted)


if __name__ == "__main__":
    main()
