"""Record, or compare against, the outputs of a fixed set of fits.

A structural change must not change what the package computes. This script fits every
estimator and transformer (and the engine, a GPyTorch kernel, a Dask fit and the labelling
loop) on small built-in data with fixed seeds and stores every output array:

    python scripts/behaviour_snapshot.py --save before.npz      # on the old code
    python scripts/behaviour_snapshot.py --compare before.npz   # on the new code

``--compare`` prints, for every output, whether it is bitwise equal and otherwise its
largest relative difference, and exits 1 when any differs by more than ``--rtol``
(default 1e-10, relative to the array's largest magnitude).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


def _semi(y, m, seed, fill=-1):
    rng = np.random.default_rng(seed)
    out = np.full(len(y), fill, dtype=np.float64 if fill != -1 else y.dtype)
    idx = rng.choice(len(y), m, replace=False)
    out[idx] = y[idx]
    return out


LEGACY = {}      # --legacy: the classifier's model as it was before the fewest-labels work


def _cases():
    import flgp
    from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                      RBFPrior)

    engine_names = set(Eigenbasis().get_params())
    heat_names = engine_names | set(HeatKernelPrior().get_params())

    def with_prior(kw, heat_extra=None):
        """``(prior, estimator keywords)`` of a case's keywords: ``method`` and the heat
        kernel's and graph Matérn prior's settings become prior objects."""
        kw = dict(kw)
        method = kw.pop("method", "auto")
        heat = {k: kw.pop(k) for k in list(kw) if k in heat_names}
        heat.update(heat_extra or {})
        spectral = {k: heat.pop(k) for k in list(heat) if k not in engine_names}
        matern = {"nu": kw.pop("matern_order")} if "matern_order" in kw else {}
        if method in ("flgp", "glgp", "nystrom"):
            prior = HeatKernelPrior(Eigenbasis(method, **heat), **spectral)
        elif method == "graph_matern":
            prior = GraphMaternPrior(**matern)
        elif method == "rbf":
            prior = RBFPrior()
        else:
            prior = (None if not (heat or spectral or matern) else
                     [HeatKernelPrior(Eigenbasis(**heat), **spectral),
                      GraphMaternPrior(**matern), RBFPrior()])
        return prior, kw
    from flgp.datasets import make_concentric_circles, make_spiral, make_swiss_roll
    from flgp.embedding import (CompressedDiffusionMap, DeepDiffusionMap, DiffusionMap,
                                GPEmbedding)
    from flgp.kernels import HeatKernelFLGP

    Xc, yc = make_concentric_circles(2400, random_state=0)
    Xc = (Xc - Xc.mean(0)) / Xc.std(0) / np.sqrt(2)
    yc_semi = _semi(yc, 100, 1)
    Xc_new = Xc[:50] * 1.01 + 0.01
    Xs, ys, fs = make_spiral(1500, noise=0.5, random_state=0)
    ys_semi = _semi(ys, 80, 2, fill=np.nan)
    Xr, tr = make_swiss_roll(1500, random_state=0)[:2]
    yr = np.digitize(tr, np.quantile(tr, [1 / 3, 2 / 3]))
    yr_semi = _semi(yr, 30, 3)

    def eig(**kw):
        ep = flgp.compute_eigenpairs(Xs, n_induced=150, n_eigenpairs=20, random_state=0, **kw)
        return {"eigenvalues": ep.eigenvalues, "eigenvectors": ep.eigenvectors,
                "extend": ep.extend(Xs[:20] * 1.01)}

    yield "eig_flgp_lae_kmeans", lambda: eig()
    yield "eig_flgp_se_random", lambda: eig(kernel="se", subsample="random")
    yield "eig_flgp_two_step", lambda: eig(spectrum="two_step")
    yield "eig_glgp", lambda: eig(method="glgp")
    yield "eig_nystrom", lambda: eig(method="nystrom")

    def clf(X, y, Xn, **kw):
        prior, rest = with_prior(kw, LEGACY)
        c = FLGPClassifier(prior, **rest).fit(X, y)
        out = {"proba": c.label_distributions_, "new": c.predict_proba(Xn)}
        for name in ("diffusion_time_", "amplitude_", "predictive_scale_",
                     "log_marginal_likelihood_", "bandwidth_scale_"):
            v = getattr(c, name, None)
            if v is not None:
                out[name] = np.atleast_1d(np.asarray(v, dtype=np.float64))
        if kw.get("method", "flgp") not in ("rbf", "graph_matern"):
            mean, var = c.predict_latent(Xn)
            out["latent_mean"], out["latent_var"] = mean, var
            out["suggest"] = np.asarray(c.suggest_labels(5), dtype=np.float64)
        return out

    yield "clf_lk_ep", lambda: clf(Xc, yc_semi, Xc_new, n_induced=600)
    yield "clf_lk_laplace", lambda: clf(Xc, yc_semi, Xc_new, n_induced=600,
                                        inference="laplace")
    yield "clf_sr_ep", lambda: clf(Xc, yc_semi, Xc_new, n_induced=600, kernel="se",
                                   subsample="random")
    yield "clf_amplitude_none", lambda: clf(Xc, yc_semi, Xc_new, n_induced=600,
                                            amplitude=None)
    yield "clf_glgp", lambda: clf(Xc[:1200], yc_semi[:1200], Xc_new, method="glgp")
    yield "clf_nystrom", lambda: clf(Xc, yc_semi, Xc_new, method="nystrom", n_induced=300)
    yield "clf_rbf", lambda: clf(Xc, yc_semi, Xc_new, method="rbf")
    yield "clf_multi_ep", lambda: clf(Xr, yr_semi, Xr[:30] * 1.01, n_induced=300)
    yield "clf_multi_laplace", lambda: clf(Xr, yr_semi, Xr[:30] * 1.01, n_induced=300,
                                           inference="laplace")
    yield "clf_graph_matern", lambda: clf(Xr, yr_semi, Xr[:30] * 1.01, method="graph_matern")
    yield "clf_gmrf_order2", lambda: clf(Xr, yr_semi, Xr[:30] * 1.01, method="graph_matern",
                                         matern_order=2)
    yield "clf_multi_ovr", lambda: clf(Xr, yr_semi, Xr[:30] * 1.01, n_induced=300,
                                       multi_class="ovr")
    # the default on a cloud of five coordinates: the full-resolution prior solved by
    # conjugate gradients (AMG), its order weighed in a fresh fit, order 1 warm-started
    Xw = np.c_[Xr, np.random.default_rng(4).normal(scale=0.5, size=(Xr.shape[0], 2))]
    yield "clf_default_cg", lambda: clf(Xw, yr_semi, Xw[:30] * 1.01)
    yield "clf_default_cg_warm", lambda: clf(Xw, yr_semi, Xw[:30] * 1.01, warm_start=True)

    def reg(**kw):
        prior, rest = with_prior(kw)
        r = FLGPRegressor(prior, **rest).fit(Xs, ys_semi if kw.get("likelihood") != "poisson"
                                    else np.where(np.isnan(ys_semi), np.nan,
                                                  np.round(np.exp(ys_semi / 4))))
        mean, std = r.predict(Xs[:40] * 1.01, return_std=True)
        out = {"transduction": r.transduction_, "transduction_std": r.transduction_std_,
               "mean": mean, "std": std}
        for name in ("diffusion_time_", "outputscale_", "noise_", "log_marginal_likelihood_"):
            v = getattr(r, name, None)
            if v is not None:
                out[name] = np.atleast_1d(np.asarray(v, dtype=np.float64))
        lo, hi = r.predict_interval(Xs[:40], coverage=0.8)
        out["interval"] = np.c_[lo, hi]
        return out

    yield "reg_lk", lambda: reg(n_induced=300, n_eigenpairs=50)
    yield "reg_se", lambda: reg(n_induced=300, n_eigenpairs=50, kernel="se")
    yield "reg_nystrom", lambda: reg(method="nystrom", n_induced=200, n_eigenpairs=50)
    yield "reg_poisson", lambda: reg(n_induced=300, n_eigenpairs=50, likelihood="poisson")
    yield "reg_rbf", lambda: reg(method="rbf", max_iter=50)
    yield "reg_graph_matern", lambda: reg(method="graph_matern")

    def dask_fit():
        import dask
        import dask.array as da

        with dask.config.set(scheduler="synchronous"):
            c = FLGPClassifier([HeatKernelPrior(Eigenbasis(n_induced=600), **LEGACY), GraphMaternPrior(),
                                RBFPrior()]).fit(da.from_array(Xc, chunks=700),
                                                  da.from_array(yc_semi, chunks=700))
            return {"proba": np.asarray(c.label_distributions_.compute()),
                    "t": np.atleast_1d(c.diffusion_time_)}

    yield "clf_dask", dask_fit

    def heat():
        k = HeatKernelFLGP(Xs, n_induced=100, n_eigenpairs=20, random_state=0)
        k.diffusion_time = 3.0
        x = torch.from_numpy(Xs[:30])
        return {"K": k(x).to_dense().detach().numpy(),
                "K_new": k(x * 1.01, x).to_dense().detach().numpy()}

    yield "heat_kernel", heat

    def emb(est, X):
        Y = est.fit_transform(X)
        return {"Y": Y, "new": est.transform(X[:25] * 1.01 + 0.01)}

    yield "dm_dense", lambda: emb(DiffusionMap(3), Xr[:500])
    yield "dm_flgp", lambda: emb(DiffusionMap(3, method="flgp", random_state=0), Xr)
    yield "gpe_dense", lambda: emb(GPEmbedding(4, random_state=0), Xr[:500])
    yield "gpe_flgp", lambda: emb(GPEmbedding(4, method="flgp", random_state=0), Xr)
    yield "cdm", lambda: emb(CompressedDiffusionMap(3, n_partitions=80, random_state=0), Xr)
    yield "ddm", lambda: emb(DeepDiffusionMap(2, t=10, max_epochs=30, progress=False,
                                              random_state=0), Xr[:400])


def run(names=None) -> dict:
    out = {}
    for name, fn in _cases():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = fn()
        for key, value in res.items():
            out[f"{name}/{key}"] = np.asarray(value, dtype=np.float64)
        print(f"  {name}: {', '.join(res)}", flush=True)
    return out


def compare(before: dict, after: dict, rtol: float) -> int:
    bad = 0
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            print(f"MISSING  {key} ({'before' if key not in before else 'after'} lacks it)")
            bad += 1
            continue
        a, b = before[key], after[key]
        if a.shape != b.shape:
            print(f"SHAPE    {key}: {a.shape} vs {b.shape}")
            bad += 1
            continue
        if np.array_equal(a, b, equal_nan=True):
            print(f"equal    {key}")
            continue
        scale = max(float(np.nanmax(np.abs(a))) if a.size else 0.0, 1e-300)
        diff = float(np.nanmax(np.abs(a - b))) / scale
        tag = "close   " if diff <= rtol else "DIFFERS "
        bad += diff > rtol
        print(f"{tag} {key}: max relative difference {diff:.3g}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save")
    ap.add_argument("--compare")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--rtol", type=float, default=1e-10)
    ap.add_argument("--legacy", action="store_true",
                    help="fit the classifiers with constant_variance=1, "
                         "diffusion_time_prior='flat' (the model before 2026-11-25's "
                         "fewest-labels defaults), to compare with a snapshot of older code")
    args = ap.parse_args(argv)
    if args.legacy:
        LEGACY.update(constant_variance=1.0, diffusion_time_prior="flat")
    names = set(args.only.split(",")) if args.only else None
    result = run(names)
    if args.save:
        np.savez_compressed(args.save, **result)
        print(f"saved {len(result)} arrays to {args.save}")
    if args.compare:
        before = dict(np.load(args.compare))
        if names:
            before = {k: v for k, v in before.items() if k.split("/")[0] in names}
        bad = compare(before, result, args.rtol)
        print(f"{len(result)} arrays compared, {bad} differ beyond rtol={args.rtol:g}")
        return int(bad > 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
