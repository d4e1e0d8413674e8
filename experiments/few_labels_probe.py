"""Why flgp's default classifier collapses at one label per class, and what fixes it.

Stages (each writes CSVs under experiments/results/; notes/few_labels.md quotes them):

    python experiments/few_labels_probe.py sweep --sets mnist swiss5 ...
        EP evidence, LOO scale and error over a grid of hyperparameters - spectral family
        (heat, graph Matérn ν = 1, 2, pseudo-inverse), diffusion time t, amplitude A, and
        the constant mode's prior weight γ (1: flgp's kernel, 0: centred) - per data set,
        labels per class and draw. -> few_labels_sweep_<set>.csv
    python experiments/few_labels_probe.py baselines --sets ...
        graphlearning Poisson / Laplace learning on the same draws -> few_labels_baselines.csv
    python experiments/few_labels_probe.py representation
        MNIST: best-in-hindsight error against s, M, r and the kNN graph's own eigenbasis
        (GP regression mean of centred one-hot labels, kernel space) -> few_labels_repr.csv
    python experiments/few_labels_probe.py rules --sets ...
        full predictive (error, ECE, NLL) of candidate hyperparameter rules on the same
        draws -> few_labels_rules_<set>.csv

Every draw is ``stratified_draw(y, k, draw)`` (experiments/few_labels_lib.py), so all
scripts and the benchmark see the same labelled points.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import few_labels_lib as L  # noqa: E402

K_DRAWS = {1: 10, 2: 10, 3: 5, 5: 5, 10: 5}
SWEEP_DRAWS = {1: 5, 2: 5, 3: 3, 5: 3, 10: 3}
FAMILIES = [("heat", None), ("matern", 1.0), ("matern", 2.0), ("green", None)]
AMPLITUDES = (1.0, 10.0, 100.0)
CONSTS = (1.0, 0.0)
N_T = 16


def t_grid(lam, n=N_T):
    """flgp's diffusion-time range ``[0.1 / λ_M, 10 / λ_2]`` (log grid)."""
    from flgp.spectral.families import diffusion_time_range
    lo, hi = diffusion_time_range(lam)
    return np.exp(np.linspace(np.log(lo), np.log(hi), n))


def _write(path, rows, header):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(header)
        w.writerows(rows)


# ----------------------------------------------------------------------------------------
def sweep(sets, ks, draws_override=None):
    from flgp.models.inference.ep import fit_predictive_scale, multinomial_loo, probit_loo
    header = ["set", "k", "draw", "family", "nu", "const", "A", "t", "log_ev", "kappa",
              "err", "sweeps"]
    for name in sets:
        X, y = L.load_set(name)
        n, C = y.size, int(y.max()) + 1
        lam, V = L.eigen(name)
        V = np.asarray(V)
        ts = t_grid(lam)
        path = os.path.join(L.RESULTS, f"few_labels_sweep_{name}.csv")
        done = set()
        if os.path.exists(path):
            import pandas as pd
            old = pd.read_csv(path)
            done = set(zip(old.k, old.draw))
        for k in ks:
            nd = (draws_override or SWEEP_DRAWS)[k]
            for d in range(nd):
                if (k, d) in done:
                    continue
                t0 = time.time()
                lab = L.stratified_draw(y, k, d, C)
                u = L.unlabelled_mask(n, lab)
                Vl, yl = V[lab], y[lab]
                rows = []
                for fam, nu in FAMILIES:
                    grid = [np.nan] if fam == "green" else ts
                    for const in CONSTS:
                        for A in AMPLITUDES:
                            init = None
                            for t in grid:
                                w = L.weights(lam, n, fam, t, nu, A, const)
                                try:
                                    st, keep = L.ep_fit(Vl, yl, C, w, init=init)
                                except np.linalg.LinAlgError:
                                    rows.append([name, k, d, fam, nu, const, A, t, np.nan,
                                                 np.nan, np.nan, -1])
                                    init = None
                                    continue
                                init = st
                                F = L.latent_mean(V, st, keep, w, C)
                                err = float(np.mean(F[u].argmax(1) != y[u]))
                                loo = (probit_loo(st) if C == 2 else multinomial_loo(st, yl))
                                kappa = fit_predictive_scale([loo])
                                rows.append([name, k, d, fam, nu, const, A, t,
                                             st.log_evidence, kappa, err, st.n_sweeps])
                _write(path, rows, header)
                print(f"{name} k={k} draw={d}: {len(rows)} fits in {time.time() - t0:.1f}s",
                      flush=True)


# ----------------------------------------------------------------------------------------
def baselines(sets, ks):
    import graphlearning as gl
    header = ["set", "k", "draw", "method", "err", "time"]
    path = os.path.join(L.RESULTS, "few_labels_baselines.csv")
    for name in sets:
        X, y = L.load_set(name)
        n, C = y.size, int(y.max()) + 1
        W = L.knn_weights(name)
        rows = []
        for k in ks:
            for d in range(K_DRAWS[k]):
                lab = L.stratified_draw(y, k, d, C)
                u = L.unlabelled_mask(n, lab)
                for meth, model in (("poisson", gl.ssl.poisson(W)),
                                    ("laplace", gl.ssl.laplace(W))):
                    t0 = time.perf_counter()
                    model.fit(lab, y[lab])
                    pred = model.predict()
                    rows.append([name, k, d, meth, float(np.mean(pred[u] != y[u])),
                                 time.perf_counter() - t0])
        _write(path, rows, header)
        print(name, "done", flush=True)


# ----------------------------------------------------------------------------------------
def _regression_error(V, lam, n, lab, y, u, C, family, t, nu, const, noise=1.0):
    """Error of the GP-regression posterior mean of centred one-hot labels (kernel space:
    ``K_xl (K_ll + noise I)^-1 Ỹ``; cost n M m)."""
    w = L.weights(lam, n, family, t, nu, 1.0, const)
    keep = L.feature_cols(w)
    Vl = V[lab][:, keep] * w[keep]
    Kll = Vl @ V[lab][:, keep].T
    Y = np.eye(C)[y[lab]]
    Y -= Y.mean(0)
    alpha = np.linalg.solve(Kll + noise * np.eye(lab.size), Y)
    F = np.empty((n, C))
    B = Vl.T @ alpha
    for a in range(0, n, 20000):
        F[a:a + 20000] = np.asarray(V[a:a + 20000])[:, keep] @ B
    return float(np.mean(F[u].argmax(1) != y[u]))


def representation(ks=(1, 10)):
    name = "mnist"
    X, y = L.load_set(name)
    n, C = y.size, 10
    header = ["basis", "s", "M", "r", "k", "draw", "family", "nu", "const", "t", "err"]
    path = os.path.join(L.RESULTS, "few_labels_repr.csv")
    bases = [("flgp", 1000, 100, 3), ("flgp", 1000, 200, 3), ("flgp", 1000, 500, 3),
             ("flgp", 1000, 999, 3), ("flgp", 2000, 200, 3), ("flgp", 2000, 500, 3),
             ("flgp", 2000, 1000, 3), ("flgp", 1000, 200, 5), ("flgp", 4000, 500, 3),
             ("knn", None, 100, 10), ("knn", None, 300, 10),
             ("flgp", 2000, 100, 3), ("flgp", 3000, 100, 3)]
    done = set()
    if os.path.exists(path):
        import pandas as pd
        old = pd.read_csv(path)
        done = set(zip(old.basis, old.s.fillna(0).astype(int), old.M, old.r))
    for basis, s, M, r in bases:
        if (basis, s or 0, M, r) in done:
            continue
        t0 = time.time()
        if basis == "flgp":
            lam, V = L.eigen(name, s=s, M=M, r=r)
        else:
            lam, V = L.knn_eigen(name, M=M)
        V = np.asarray(V)
        print(f"{basis} s={s} M={M} r={r}: eigenpairs {time.time() - t0:.0f}s", flush=True)
        lo, hi = 0.1 / lam[-1], 10 / lam[lam > L.ZERO].min()
        ts = np.exp(np.linspace(np.log(lo), np.log(hi), 14))
        rows = []
        for k in ks:
            for d in range(K_DRAWS[k] if k == 1 else 3):
                lab = L.stratified_draw(y, k, d, C)
                u = L.unlabelled_mask(n, lab)
                for fam, nu in (("heat", None), ("green", None)):
                    for const in (0.0,):
                        for t in ([np.nan] if fam == "green" else ts):
                            err = _regression_error(V, lam, n, lab, y, u, C, fam, t, nu, const)
                            rows.append([basis, s, M, r, k, d, fam, nu, const, t, err])
        _write(path, rows, header)
        print(f"   done in {time.time() - t0:.0f}s", flush=True)


# ----------------------------------------------------------------------------------------
HEAT = (("heat", None),)
RULES = {
    # the current default, emulated: heat kernel with its constant mode, A = 1, t by the
    # evidence alone (flat in log t), LOO scale over every labelled point
    "default": dict(consts=(1.0,), prior_sd=None, calibration="loo"),
    # (d) the constant mode removed (gamma = 0), otherwise as the default
    "centred": dict(consts=(0.0,), prior_sd=None, calibration="loo_cp"),
    # (a) + cloud prior on t (log-normal around t_C = 2 / lambda_C, sd 2 in log t)
    "prior": dict(consts=(0.0,), prior_sd=2.0, calibration="loo_cp"),
    "prior_sd1": dict(consts=(0.0,), prior_sd=1.0, calibration="loo_cp"),
    # (b) t integrated over the evidence with a flat prior in log t: with the constant
    # mode (the code's average_diffusion_time=True) and without it
    "default_bma": dict(consts=(1.0,), prior_sd=None, mode="bma", calibration="loo"),
    "centred_bma": dict(consts=(0.0,), prior_sd=None, mode="bma", calibration="loo_cp"),
    # (b) t integrated over its posterior (prior x evidence) instead of maximised
    "prior_bma": dict(consts=(0.0,), prior_sd=2.0, mode="bma", calibration="loo_cp"),
    # amplitude by the evidence as well
    "prior_A": dict(consts=(0.0,), amplitudes=(1.0, 10.0, 100.0), prior_sd=2.0,
                    calibration="loo_cp"),
    # (c) family by the evidence: heat, graph Matern nu = 1, 2, pseudo-inverse
    "prior_family": dict(families=(("heat", None), ("matern", 1.0), ("matern", 2.0),
                                   ("green", None)), consts=(0.0,), prior_sd=2.0,
                         calibration="loo_cp"),
    # (d) gamma in {0, 1} by the evidence
    "prior_gamma": dict(consts=(0.0, 1.0), prior_sd=2.0, calibration="loo_cp"),
    # amplitude as the mean prior variance (normalised kernel), by the evidence
    "prior_rho": dict(consts=(0.0,), amplitudes=(1.0, 10.0, 100.0), normalise=True,
                      prior_sd=2.0, calibration="loo_cp"),
    "prior_rho_bma": dict(consts=(0.0,), amplitudes=(1.0, 10.0, 100.0), normalise=True,
                          prior_sd=2.0, mode="bma", calibration="loo_cp"),
    # the constant mode kept, with the prior on t
    "prior_const": dict(consts=(1.0,), prior_sd=2.0, calibration="loo_cp"),
}
ORACLE_KAPPAS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def rules(sets, ks, names=None, eval_max=10000, s_induced=None):
    header = ["set", "k", "draw", "rule", "family", "nu", "const", "A", "t", "kappa",
              "n_comp", "log_ev", "err", "ece", "nll", "conf", "ece_k1", "oracle_kappa",
              "oracle_ece", "fit_s", "pred_s"]
    names = list(RULES) if names is None else names
    for name in sets:
        X, y = L.load_set(name)
        n, C = y.size, int(y.max()) + 1
        lam, V = L.eigen(name, s=s_induced)
        V = np.asarray(V)
        tag = name if s_induced is None else f"{name}_s{s_induced}"
        path = os.path.join(L.RESULTS, f"few_labels_rules_{tag}.csv")
        done = set()
        if os.path.exists(path):
            import pandas as pd
            old = pd.read_csv(path)
            done = set(zip(old.k, old.draw, old.rule))
        rng = np.random.default_rng(123)
        for k in ks:
            for d in range(K_DRAWS[k]):
                lab = L.stratified_draw(y, k, d, C)
                u = np.flatnonzero(L.unlabelled_mask(n, lab))
                ev = np.sort(rng.choice(u, eval_max, replace=False)) if u.size > eval_max else u
                Vev = np.ascontiguousarray(V[ev])
                yev = y[ev]
                rows = []
                for rule in names:
                    if (k, d, rule) in done:
                        continue
                    kw = dict(RULES[rule])
                    sub = slice(0, min(3000, ev.size))
                    # fit on the labelled rows, predict the evaluation rows
                    P, info = L.fit_rule(lam, _Rows(V, lab, Vev), np.arange(lab.size), y[lab],
                                         C, n_cloud=n, extra_rows=sub,
                                         extra_kappas=ORACLE_KAPPAS if rule == "prior" else (),
                                         **kw)
                    oracle = (np.nan, np.nan)
                    ece1 = np.nan
                    if info["extra"]:
                        eces = {kap: L.ece(Pk, yev[sub]) for kap, Pk in info["extra"].items()}
                        ece1 = eces[1.0]
                        kbest = min(eces, key=eces.get)
                        oracle = (kbest, eces[kbest])
                    rows.append([name, k, d, rule, info["family"], info["nu"], info["const"],
                                 info["A"], info["t"], info["kappa"], info["n_comp"],
                                 info["log_ev"], float(np.mean(P.argmax(1) != yev)),
                                 L.ece(P, yev), L.nll(P, yev), float(P.max(1).mean()), ece1,
                                 oracle[0], oracle[1], info["fit_s"], info["pred_s"]])
                    print(name, k, d, rule, f"t={info['t']:.3g} kappa={info['kappa']:.2f} "
                          f"err={rows[-1][12]:.3f} ece={rows[-1][13]:.3f}", flush=True)
                _write(path, rows, header)


class _Rows:
    """``V`` for fit_rule: the labelled rows first (indexable by the positions
    0..m-1), the evaluation rows for prediction."""

    def __init__(self, V, lab, Vev):
        self.Vl = np.ascontiguousarray(V[lab])
        self.Vev = Vev
        self.shape = (Vev.shape[0], V.shape[1])

    def __getitem__(self, idx):
        if isinstance(idx, np.ndarray):
            return self.Vl[idx]
        return self.Vev[idx]


# ----------------------------------------------------------------------------------------
if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", choices=["sweep", "baselines", "representation", "rules"])
    ap.add_argument("--sets", nargs="+", default=["mnist"])
    ap.add_argument("--k", nargs="+", type=int, default=[1, 2, 3, 5, 10])
    ap.add_argument("--rules", nargs="+", default=None)
    ap.add_argument("--s", type=int, default=None, help="rules: induced points (default flgp's)")
    args = ap.parse_args()
    if args.stage == "sweep":
        sweep(args.sets, args.k)
    elif args.stage == "baselines":
        baselines(args.sets, args.k)
    elif args.stage == "representation":
        representation()
    elif args.stage == "rules":
        rules(args.sets, args.k, args.rules, s_induced=args.s)
