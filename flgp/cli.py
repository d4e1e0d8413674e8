"""The ``flgp`` command line: ``circles``, ``nifti``, ``surface`` and ``group``
(``flgp COMMAND --help`` lists each one's options). Nothing imports this module."""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np


def _circles(args) -> int:
    from .reproduce.circles import N_INDUCED as CIRCLES_INDUCED
    from .reproduce.circles import (TABLE1_METHODS, format_table, plot_covariances, run_circles,
                                    summarise)

    methods = TABLE1_METHODS if not args.methods else [
        name.strip() for name in args.methods.split(",")]
    unknown = [name for name in methods if name not in TABLE1_METHODS]
    if unknown:
        return _fail("circles", f"unknown method(s) {', '.join(map(repr, unknown))}; "
                                f"choose from {', '.join(TABLE1_METHODS)}.")
    if args.repetitions < 1:
        return _fail("circles", f"--repetitions must be at least 1; got {args.repetitions}.")
    if args.n < 12:
        return _fail("circles", f"--n must be at least 12 (two points a circle); got "
                                f"{args.n}.")
    if not 4 <= args.m < args.n:
        return _fail("circles", f"--m (labels) must be at least 4 and below --n = {args.n}; "
                                f"got {args.m}.")
    induced = [name for name in methods if name not in ("RBF GP", "KSVM", "GLGP")]
    if induced and args.n < CIRCLES_INDUCED:
        return _fail("circles", f"--n must be at least {CIRCLES_INDUCED} for "
                                f"{', '.join(induced)} (the paper's {CIRCLES_INDUCED} induced "
                                f"points); got {args.n}. Give a larger --n, or --methods "
                                f"among RBF GP, KSVM, GLGP.")
    os.makedirs(args.out, exist_ok=True)
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


def _fail(command, message) -> int:
    """A user-fixable error: one line on stderr (line breaks become spaces), exit status 2."""
    print(f"flgp {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


class _WarningLines(warnings.catch_warnings):
    """Inside: each warning shown as one line ``flgp COMMAND: warning: ...`` on stderr (the
    user's filters still apply)."""

    def __init__(self, command):
        super().__init__()
        self.command = command

    def __enter__(self):
        out = super().__enter__()

        def show(message, category, filename, lineno, file=None, line=None):
            text = " ".join(str(message).split())
            print(f"flgp {self.command}: warning: {text}", file=sys.stderr)

        warnings.showwarning = show
        return out


def _nifti(args) -> int:
    from .datasets.fmri import volume_of, volumes_of
    from .models import FLGPRegressor, predict_image
    from .models.priors import priors_for

    try:
        import nibabel  # noqa: F401 - the extra's check
    except ImportError:
        return _fail("nifti", 'needs nibabel, the "fmri" extra of flgp: '
                              'pip install "flgp[fmri]"')
    images = {}
    for label, path in (("MAP", args.map), ("--mask", args.mask),
                        ("--observed", args.observed)):
        if path is None:
            continue
        if not os.path.isfile(path):
            return _fail("nifti", f"{label} {path!r}: no such file.")
        try:
            # read (and cached) here; MAP may hold several volumes (predict_image reads it)
            images[label] = (volumes_of(path, label)[0] if label == "MAP"
                             else volume_of(path, label)[0])
        except (ValueError, TypeError) as exc:
            return _fail("nifti", str(exc))
    reg = FLGPRegressor(priors_for(args.method, n_induced=args.n_induced,
                                   n_eigenpairs=args.n_eigenpairs,
                                   n_neighbors=args.n_neighbors),
                        random_state=args.seed)
    observed = images.get("--observed", args.observed_fraction)
    try:
        with _WarningLines("nifti"):
            res = predict_image(images["MAP"], images.get("--mask"), observed,
                                regressor=reg, random_state=args.seed, fill=args.fill,
                                include_noise=args.include_noise, progress=not args.quiet,
                                hyperparameters=("shared" if args.shared_hyperparameters
                                                 else "own"), n_jobs=args.n_jobs)
    except (ValueError, TypeError, OSError) as exc:
        return _fail("nifti", str(exc))
    paths = [f"{args.out}_mean.nii.gz", f"{args.out}_sd.nii.gz"]
    try:
        os.makedirs(os.path.dirname(os.path.abspath(paths[0])), exist_ok=True)
        for img, path in zip((res.mean, res.sd), paths):
            img.to_filename(path)
    except OSError as exc:
        return _fail("nifti", f"cannot write {args.out}_*.nii.gz: {exc}")
    vox, fitted = res.voxels, res.regressor
    n, m = len(vox), res.n_observed
    size = " x ".join(f"{v:.3g}" for v in np.sqrt((vox.affine[:3, :3] ** 2).sum(0)))
    print(f"{args.map}: grid {' x '.join(map(str, vox.shape))}, voxels {size} mm")
    print(f"region {n} voxels, observed {m} ({100 * m / n:.1f}%), predicted {n - m}")
    if res.maps:
        print(f"{len(res.mean.shape) == 4 and res.mean.shape[3]} maps in {res.seconds:.1f} s:")
        for row in res.maps:
            parts = [f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in row.items() if value is not None]
            print("  " + ", ".join(parts))
    else:
        print(_fit_line(fitted, res.seconds))
    sd = res.sd.get_fdata()[tuple(vox.ijk[~res.observed].T)]
    if sd.size:
        print(f"predictive sd at the unobserved voxels: median {np.median(sd):.3g} "
              f"(range {sd.min():.3g} to {sd.max():.3g})"
              + (", of a new observation (the noise included)" if args.include_noise
                 else ", of the map (no noise; --include-noise for a new observation)"))
    print(f"wrote {paths[0]} and {paths[1]}")
    if args.excursion is not None:
        code = _excursion(args, "nifti", fitted, lambda v, path: res.voxels.to_nifti(
            v, fill=args.fill).to_filename(path), ".nii.gz",
            plot=lambda F, result, args, path: _plot_excursion_image(res.voxels, F, result,
                                                                     args, path))
        if code:
            return code
    if args.seeds_atlas is not None:
        return _seed_maps(args, res)
    return 0


def _excursion_arguments(parser, suffix: str) -> None:
    parser.add_argument("--excursion", type=float, default=None, metavar="U",
                        help=f"also write where the map exceeds U jointly with posterior "
                             f"probability at least 1 - alpha: the excursion function as "
                             f"PREFIX_excursion_F{suffix}, the set (1 inside) as "
                             f"PREFIX_excursion_set{suffix} and a plot, "
                             f"PREFIX_excursion.png (one map; a graph Matérn fit)")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="with --excursion: the set's error rate (default 0.05)")
    parser.add_argument("--below", action="store_true",
                        help="with --excursion: where the map is below U instead")


def _excursion(args, command: str, fitted, write, suffix: str, plot=None) -> int:
    """``--excursion U``: the excursion function and set of the fitted map at ``U``
    (:func:`flgp.excursion_set`), written by ``write(values, path)``; returns the exit code."""
    from .models import excursion_set

    if isinstance(fitted, list) or fitted is None:
        return _fail(command, "--excursion needs one map (its own fit); fit the maps one "
                              "at a time.")
    if fitted.method_ != "graph_matern":
        return _fail(command, f"--excursion needs the joint posterior of the graph Matérn "
                              f"prior (--method graph_matern, its default with --excursion); this "
                              f"fit is method_={fitted.method_!r}, whose posterior gives "
                              f"marginal sds only.")
    start = time.perf_counter()
    side = "<" if args.below else ">"
    try:
        with _WarningLines(command):
            result = excursion_set(fitted, args.excursion, args.alpha, side=side,
                                   random_state=args.seed)
    except (ValueError, TypeError) as exc:
        return _fail(command, str(exc))
    return _write_excursion(args, command, result, write, suffix, plot, start)


def _write_excursion(args, command: str, result, write, suffix: str, plot, start) -> int:
    """Write the excursion function and set of ``result`` (an ExcursionSet) by
    ``write(values, path)``, with a plot and a summary line; returns the exit code."""
    function = result.function
    # F below its computed limit is not computed (NaN): written as 0
    F = np.nan_to_num(function.F, nan=0.0)
    paths = [f"{args.out}_excursion_F{suffix}", f"{args.out}_excursion_set{suffix}",
             f"{args.out}_excursion.png"]
    try:
        write(F, paths[0])
        write(result.mask.astype(np.float64), paths[1])
        (plot or _plot_excursion)(F, result, args, paths[2])
    except OSError as exc:
        return _fail(command, f"cannot write {args.out}_excursion*: {exc}")
    word = "below" if args.below else "above"
    print(f"excursion set {word} {args.excursion:g} at alpha {args.alpha:g}: "
          f"{result.n_nodes_in_set} of {F.size} points, joint posterior probability "
          f"{result.joint_probability:.3f} (lower bound {result.joint_lower:.3f}, "
          f"{function.n_samples} draws) in {time.perf_counter() - start:.1f} s; "
          f"{int(np.sum(function.marginal >= 1 - args.alpha))} points have a marginal "
          f"probability >= {1 - args.alpha:g} (voxel by voxel, no joint control)")
    print(f"wrote {', '.join(paths)}")
    return 0


def _plot_excursion_image(voxels, F, result, args, path) -> None:
    """nilearn orthogonal slices of the excursion function with the set's outline, cut at the
    set's point of largest marginal (or F's largest value)."""
    from nilearn import plotting

    F_img = voxels.to_nifti(F)
    at = int(np.argmax(F)) if not result.mask.any() else \
        int(np.flatnonzero(result.mask)[np.argmax(result.function.marginal[result.mask])])
    word = "below" if args.below else "above"
    display = plotting.plot_stat_map(
        F_img, bg_img=None, threshold=1e-3, vmax=1.0, cmap="viridis",
        cut_coords=voxels.coords[at], draw_cross=False,
        title=f"excursion function, {word} {args.excursion:g} "
              f"({result.n_nodes_in_set} voxels at alpha {args.alpha:g})")
    if result.mask.any():
        display.add_contours(voxels.to_nifti(result.mask.astype(np.float64)),
                             levels=[0.5], colors="r", linewidths=1.0)
    display.savefig(path, dpi=120)
    display.close()


def _plot_excursion(F, result, args, path) -> None:
    """The excursion function's values, sorted, with the set's threshold."""
    from matplotlib.figure import Figure      # no pyplot: no backend to choose

    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.subplots()
    marginal = np.sort(result.function.marginal)[::-1]
    ax.plot(marginal, label="marginal probability (point by point)", color="0.6")
    ax.plot(np.sort(F)[::-1], label="excursion function F (joint)", color="C0")
    ax.axhline(1 - args.alpha, color="C3", lw=0.8, ls="--",
               label=f"1 - alpha = {1 - args.alpha:g}")
    ax.axvline(result.n_nodes_in_set, color="C3", lw=0.8)
    ax.set_xlim(0, max(1, 3 * max(result.n_nodes_in_set,
                                  int(np.sum(marginal >= 0.5)))))
    ax.set_xlabel("points, by decreasing value")
    ax.set_ylabel("probability")
    ax.set_title(f"{'below' if args.below else 'above'} {args.excursion:g}: "
                 f"{result.n_nodes_in_set} points in the set")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _seed_maps(args, res) -> int:
    """``--seeds-atlas``: the fitted prior's (or posterior's) correlation maps of each atlas
    region's seed (its voxel of largest |value|), and the regions' correlation matrix as CSV
    and plot (flgp.models.seed_correlation)."""
    from .models import seed_correlation

    if not os.path.isfile(args.seeds_atlas):
        return _fail("nifti", f"--seeds-atlas {args.seeds_atlas!r}: no such file.")
    start = time.perf_counter()
    try:
        with _WarningLines("nifti"):
            seeds = seed_correlation(res, atlas=args.seeds_atlas,
                                     posterior=args.seeds_posterior)
    except (ValueError, TypeError, OSError) as exc:
        return _fail("nifti", str(exc))
    maps = f"{args.out}_seeds.nii.gz"
    table = f"{args.out}_seed_matrix.csv"
    figure = f"{args.out}_seed_matrix.png"
    try:
        seeds.to_nifti(res.voxels, fill=args.fill).to_filename(maps)
        labels = [str(v) for v in seeds.labels]
        np.savetxt(table, seeds.matrix, delimiter=",", fmt="%.6f",
                   header=",".join(labels), comments="")
        _plot_seed_matrix(seeds.matrix, labels, figure)
    except OSError as exc:
        return _fail("nifti", f"cannot write {args.out}_seed*: {exc}")
    which = "posterior" if args.seeds_posterior else "prior"
    print(f"{len(labels)} atlas regions: seed maps of the fitted {which} in "
          f"{time.perf_counter() - start:.1f} s")
    print(f"wrote {maps}, {table} and {figure}")
    return 0


def _plot_seed_matrix(matrix, labels, path) -> None:
    from matplotlib.figure import Figure      # no pyplot: no backend to choose

    k = len(labels)
    fig = Figure(figsize=(min(10.0, 4 + 0.12 * k), min(9.5, 3.5 + 0.12 * k)))
    ax = fig.subplots()
    im = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
    if k <= 40:
        ax.set_xticks(range(k), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(k), labels, fontsize=7)
    ax.set_title("correlation between the regions' seeds")
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _surface_parser(sub) -> None:
    f = sub.add_parser("surface", help="predict the unobserved vertices of a per-vertex "
                                       "map on a surface mesh, with uncertainty",
                       description="Fit FLGPRegressor on the vertices (mm) of MESH with "
                                   "DATA's values at the observed vertices as targets, and "
                                   "write the predictive mean and standard deviation as "
                                   "GIfTI files PREFIX_mean.func.gii and PREFIX_sd.func.gii "
                                   "(FILL outside the region). MESH and DATA: any files "
                                   "nilearn reads (GIfTI, FreeSurfer surfaces and morph "
                                   "data).")
    f.add_argument("mesh", metavar="MESH", help="surface mesh (e.g. lh.pial.gii, lh.pial)")
    f.add_argument("data", metavar="DATA", help="per-vertex map (e.g. lh.thickness, "
                   "*.func.gii)")
    f.add_argument("--mask", default=None, help="per-vertex mask file (non-zero = inside); "
                   "default: every vertex with a finite value")
    obs = f.add_mutually_exclusive_group(required=True)
    obs.add_argument("--observed", default=None, help="per-vertex file, non-zero = observed")
    obs.add_argument("--observed-fraction", type=float, default=None, metavar="F",
                     help="observe a random share F in (0, 1) of the region's vertices")
    f.add_argument("--out", required=True, metavar="PREFIX",
                   help="writes PREFIX_mean.func.gii and PREFIX_sd.func.gii")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--method", default=None,
                   choices=["auto", "graph_matern", "flgp", "nystrom", "glgp", "rbf"],
                   help="FLGPRegressor's method (default auto: the mesh's graph Matérn "
                        "prior, the low-rank heat kernel or the RBF GP, by evidence; "
                        "graph_matern with --excursion)")
    f.add_argument("--fill", type=float, default=0.0, help="value outside the region")
    f.add_argument("--include-noise", action="store_true", help="sd of a new observation "
                   "instead of that of the map")
    _excursion_arguments(f, ".func.gii")


def _surface(args) -> int:
    try:
        import nibabel  # noqa: F401 - the extra's check
        import nilearn  # noqa: F401
    except ImportError:
        return _fail("surface", 'needs nibabel and nilearn, the "fmri" extra of flgp: '
                                'pip install "flgp[fmri]"')
    from .models import FLGPRegressor
    from .models.priors import priors_for
    from .models.surface import (load_mesh, load_surface_values, predict_surface,
                                 write_gifti)

    try:
        V, F = load_mesh(args.mesh)
        values = load_surface_values(args.data, V.shape[0], "DATA")
        mask = (None if args.mask is None
                else load_surface_values(args.mask, V.shape[0], "--mask") != 0)
        observed = (args.observed_fraction if args.observed is None
                    else load_surface_values(args.observed, V.shape[0], "--observed") != 0)
        with _WarningLines("surface"):
            res = predict_surface((V, F), values, observed, mask=mask,
                                  regressor=FLGPRegressor(priors_for(args.method),
                                                          random_state=args.seed),
                                  random_state=args.seed, fill=args.fill,
                                  include_noise=args.include_noise)
    except (ValueError, TypeError, OSError) as exc:
        return _fail("surface", str(exc))
    paths = [f"{args.out}_mean.func.gii", f"{args.out}_sd.func.gii"]
    try:
        os.makedirs(os.path.dirname(os.path.abspath(paths[0])), exist_ok=True)
        write_gifti(res.mean, paths[0], description="flgp: posterior mean of the map")
        write_gifti(res.sd, paths[1], description=f"flgp: predictive sd ({res.sd_kind})")
    except OSError as exc:
        return _fail("surface", f"cannot write {args.out}_*.func.gii: {exc}")
    reg = res.regressor
    n, m = int(res.mask.sum()), res.n_observed
    print(f"{args.mesh}: {V.shape[0]} vertices, region {n}, observed {m} "
          f"({100 * m / n:.1f}%), predicted {n - m}")
    outside = V.shape[0] - n
    if outside:
        print(f"flgp surface: note: {outside} vertices outside the region (no finite value"
              f"{', or outside --mask' if mask is not None else ''}) hold --fill = "
              f"{args.fill:g} in both files: not a prediction, and their sd is not a "
              f"certainty", file=sys.stderr)
    print(_fit_line(reg, res.seconds))
    print(f"sd written: {res.sd_kind}")
    print(f"wrote {paths[0]} and {paths[1]}")
    if args.excursion is not None:
        def write(values, path):
            full = np.full(V.shape[0], 0.0)
            full[res.mask] = values
            write_gifti(full, path, description="flgp: excursion "
                        f"{'below' if args.below else 'above'} {args.excursion:g}")
        return _excursion(args, "surface", reg, write, ".func.gii")
    return 0


def _group(args) -> int:
    from .models import group_contrast, group_map

    try:
        import nibabel  # noqa: F401 - the extra's check
    except ImportError:
        return _fail("group", 'needs nibabel, the "fmri" extra of flgp: '
                              'pip install "flgp[fmri]"')
    for label, paths in (("MAPS", args.maps), ("--minus", args.minus or []),
                         ("--mask", [args.mask] if args.mask else [])):
        for path in paths:
            if not os.path.isfile(path):
                return _fail("group", f"{label} {path!r}: no such file.")
    # one file: a 4-d image of the subjects' maps (or one 3-d map); several: 3-d maps
    maps = [paths[0] if len(paths) == 1 else list(paths)
            for paths in (args.maps, args.minus) if paths]
    mask = args.mask
    try:
        with _WarningLines("group"):
            if len(maps) == 1:
                res = group_map(maps[0], mask, fill=args.fill, random_state=args.seed)
            else:
                res = group_contrast(maps[0], maps[1], mask, fill=args.fill,
                                     random_state=args.seed)
    except (ValueError, TypeError, OSError) as exc:
        return _fail("group", str(exc))
    paths = [f"{args.out}_mean.nii.gz", f"{args.out}_sd.nii.gz"]
    try:
        os.makedirs(os.path.dirname(os.path.abspath(paths[0])), exist_ok=True)
        res.mean.to_filename(paths[0])
        res.std.to_filename(paths[1])
    except OSError as exc:
        return _fail("group", f"cannot write {args.out}_*.nii.gz: {exc}")
    fits = [res] if len(maps) == 1 else [res.group_a, res.group_b]
    for name, fit in zip(("MAPS", "--minus"), fits):
        print(f"{name}: {fit.n_subjects} subjects on {fit.graph.n_nodes} voxels, "
              + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in fit.hyperparameters.items())
              + f" ({fit.seconds:.1f} s)")
    print(f"wrote {paths[0]} and {paths[1]}")
    if args.excursion is None:
        return 0
    start = time.perf_counter()
    try:
        with _WarningLines("group"):
            result = res.excursion_set(args.excursion, args.alpha,
                                       side="<" if args.below else ">",
                                       random_state=args.seed)
    except (ValueError, TypeError) as exc:
        return _fail("group", str(exc))
    return _write_excursion(
        args, "group", result,
        lambda v, path: res.to_image(v, fill=args.fill).to_filename(path), ".nii.gz",
        lambda F, result, args, path: _plot_excursion_image(res.voxels, F, result, args,
                                                            path), start)


def _fit_line(fitted, seconds) -> str:
    """One line saying which prior predicts, and why (the evidence of each candidate)."""
    chosen = getattr(fitted, "method_", fitted.method)
    weighed = "the priors weighed" if fitted.method == "auto" else f"{fitted.method!r}"
    parts = [f"FLGPRegressor ({weighed}): {chosen}"]
    if chosen == "graph_matern":
        parts.append(f"graph Matérn order {fitted.matern_order_} on the "
                     f"{fitted.graph_.kind} graph")
    elif chosen != "rbf" and getattr(fitted, "diffusion_time_", None) is not None:
        parts.append(f"diffusion time {fitted.diffusion_time_:.4g}")
    parts += [f"noise variance {fitted.noise_:.3g}",
              f"log evidence {fitted.log_marginal_likelihood_:.1f}", f"fit {seconds:.1f} s"]
    line = ", ".join(parts)
    evidence = getattr(fitted, "log_evidence_", None)
    if evidence:
        line += "\nlog evidence of the candidates: " + ", ".join(
            f"{k} {v:.1f}" for k, v in evidence.items())
    skipped = getattr(fitted, "skipped_methods_", None)
    if skipped:
        line += "".join(f"\nskipped {k}: {v}" for k, v in skipped.items())
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="flgp", description="Gaussian processes on point clouds, images and surfaces.")
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
    f = sub.add_parser("nifti", help="predict the unobserved voxels of a region of a 3-d "
                                     "NIfTI image, with uncertainty",
                       description="Fit FLGPRegressor on the voxel centres (mm) of a "
                                   "region of MAP, with MAP's values at the observed "
                                   "voxels as targets, and write the predictive mean and "
                                   "standard deviation as PREFIX_mean.nii.gz and "
                                   "PREFIX_sd.nii.gz on MAP's grid (FILL outside the "
                                   "region). Nothing is resampled: masks must be on MAP's "
                                   "grid.")
    f.add_argument("map", metavar="MAP", help="3-d NIfTI image, or a 4-d one of several maps "
                                              "on one grid (one volume a subject or "
                                              "contrast: each fitted, the outputs 4-d)")
    f.add_argument("--mask", default=None, help="NIfTI mask of the region (non-zero = "
                   "inside) on MAP's grid; default: every finite, non-zero voxel of MAP")
    obs = f.add_mutually_exclusive_group(required=True)
    obs.add_argument("--observed", default=None, help="NIfTI mask of the observed voxels "
                     "(non-zero = observed), inside the region")
    obs.add_argument("--observed-fraction", type=float, default=None, metavar="F",
                     help="observe a random share F in (0, 1) of the region's voxels "
                          "(drawn with --seed)")
    f.add_argument("--out", required=True, metavar="PREFIX",
                   help="writes PREFIX_mean.nii.gz and PREFIX_sd.nii.gz")
    f.add_argument("--seed", type=int, default=0, help="seeds the observed fraction and "
                   "the regressor's induced points (default 0)")
    f.add_argument("--method", default=None,
                   choices=["auto", "graph_matern", "flgp", "nystrom", "glgp", "rbf"],
                   help="FLGPRegressor's method (default auto: the voxel lattice's graph "
                        "Matérn prior at full resolution, the low-rank heat kernel or the "
                        "RBF GP, whichever has the highest evidence; graph_matern with "
                        "--excursion, whose joint posterior it needs)")
    f.add_argument("--n-induced", type=int, default=None, metavar="S",
                   help="induced points (default: FLGPRegressor's, min(1000, n/4))")
    f.add_argument("--n-eigenpairs", type=int, default=None, metavar="M",
                   help="eigenpairs (default: FLGPRegressor's, min(100, S - 1))")
    f.add_argument("--n-neighbors", type=int, default=3, metavar="R",
                   help="nearest induced points per voxel (default 3)")
    f.add_argument("--fill", type=float, default=0.0, help="value outside the region "
                   "(default 0; nan allowed)")
    f.add_argument("--include-noise", action="store_true", help="sd of a new observation "
                   "(adds the fitted noise variance) instead of that of the map")
    _excursion_arguments(f, ".nii.gz")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.add_argument("--shared-hyperparameters", action="store_true",
                   help="several maps: one graph Matérn prior for all, by their pooled "
                        "evidence (one factorisation serves every map) instead of each "
                        "map's own fit")
    f.add_argument("--n-jobs", type=int, default=None, metavar="J",
                   help="several maps: processes fitting them at once (default: as many "
                        "as the cores, the maps and the memory allow; 1: one after "
                        "another)")
    f.add_argument("--seeds-atlas", default=None, metavar="ATLAS",
                   help="integer atlas on MAP's grid (0: no region): also write each "
                        "region's seed-correlation map (its seed: the voxel of largest "
                        "|value|) as PREFIX_seeds.nii.gz, and the regions' correlation "
                        "matrix as PREFIX_seed_matrix.csv and .png (one map; a graph "
                        "Matérn fit)")
    f.add_argument("--seeds-posterior", action="store_true",
                   help="with --seeds-atlas: the posterior's correlations (given the "
                        "observed voxels) instead of the prior's")
    _surface_parser(sub)
    g = sub.add_parser("group", help="the population map of several subjects' maps on "
                                     "one mask (a two-level graph Matérn model), or the "
                                     "contrast of two groups; writes PREFIX_mean.nii.gz "
                                     "and PREFIX_sd.nii.gz")
    g.add_argument("maps", metavar="MAPS", nargs="+",
                   help="the subjects' 3-d NIfTI maps, or one 4-d image (a volume a "
                        "subject)")
    g.add_argument("--minus", metavar="MAPS", nargs="+", default=None,
                   help="a second group's maps: the contrast MAPS - these")
    g.add_argument("--mask", default=None, help="NIfTI mask (non-zero = inside; default: "
                                                "the voxels non-zero in every map)")
    g.add_argument("--out", required=True, metavar="PREFIX",
                   help="output prefix (PREFIX_mean.nii.gz, PREFIX_sd.nii.gz)")
    g.add_argument("--seed", type=int, default=0, help="seeds the posterior's draws")
    g.add_argument("--fill", type=float, default=0.0, help="value outside the mask")
    _excursion_arguments(g, ".nii.gz")
    args = ap.parse_args(argv)
    if args.command in ("nifti", "surface") and args.method is None:
        # an excursion set needs the graph Matérn prior's joint posterior
        args.method = "auto" if args.excursion is None else "graph_matern"
    if args.command == "circles":
        return _circles(args)
    if args.command == "nifti":
        return _nifti(args)
    if args.command == "surface":
        return _surface(args)
    if args.command == "group":
        return _group(args)
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
