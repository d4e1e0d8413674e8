"""The ``flgp`` command line. Nothing imports this module.

    flgp circles [--n 4800] [--m 100] [--repetitions 2] [--out experiments/results]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _circles(args) -> int:
    from .reproduce.circles import TABLE1_METHODS, format_table, plot_covariances, run_circles, summarise

    os.makedirs(args.out, exist_ok=True)
    methods = TABLE1_METHODS if not args.methods else args.methods.split(",")
    print(f"Six concentric circles, n = {args.n}, m = {args.m} labels, "
          f"{args.repetitions} repetition(s), methods: {', '.join(methods)}")
    t0 = time.perf_counter()
    df, models = run_circles(scenarios=[(args.n, args.m)], methods=methods,
                             repetitions=args.repetitions, glgp_max_n=args.glgp_max_n,
                             seed=args.seed, progress=not args.quiet, keep_models=True)
    summary = summarise(df)
    print(format_table(summary))
    csv = os.path.join(args.out, f"circles_n{args.n}_m{args.m}.csv")
    summary.to_csv(csv, index=False)
    df.to_csv(csv.replace(".csv", "_runs.csv"), index=False)
    png = os.path.join(args.out, f"circles_covariance_n{args.n}.png")
    if not args.no_plot:
        X, fitted = models[(args.n, args.m)]
        plot_covariances(png, X, fitted)
    print(f"\nwrote {csv}" + ("" if args.no_plot else f" and {png}") +
          f" in {time.perf_counter() - t0:.0f} s")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="flgp", description="Heat-kernel GPs on point clouds.")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("circles", help="semi-supervised classification of six concentric "
                                       "circles: every method of the FLGP paper's Table 1")
    c.add_argument("--n", type=int, default=4800, help="number of points (default 4800)")
    c.add_argument("--m", type=int, default=100, help="number of labels (default 100)")
    c.add_argument("--repetitions", type=int, default=2)
    c.add_argument("--methods", default="", help="comma-separated subset of the methods")
    c.add_argument("--glgp-max-n", type=int, default=4800,
                   help="skip GLGP (dense n x n) above this n")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default=os.path.join("experiments", "results"))
    c.add_argument("--no-plot", action="store_true")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.command == "circles":
        return _circles(args)
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
