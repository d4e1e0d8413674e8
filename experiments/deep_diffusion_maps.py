"""Reproduce Deep Diffusion Maps' Table 2 (MRE) and Figures 4-7 (García-Heredia et al.).

Each data set is split into D_a (training) and D_b (test). Diffusion maps (DM) on
D = D_a ∪ D_b is the reference; Nyström (DM on D_a, extended to D_b, Sec. 2.3) and Deep
Diffusion Maps (a network trained on cost (38) over D_a) are compared with it by the mean
relative error of pairwise distances (eq. 40), with 95% bootstrap-percentile intervals
(1000 resamples of the pairs). σ is the quantile q of the pairwise distances of D_a and the
same σ is used by all three methods; hyperparameters from Table 1, training from
Sec. 5.1.3 (Adam, learning rate 1e-2, batch 512, 10% validation).

    python experiments/deep_diffusion_maps.py                      # synthetic sets + MNIST
    python experiments/deep_diffusion_maps.py --sets helix s_curve # a subset
    python experiments/deep_diffusion_maps.py --quick              # 300 epochs, 200 resamples

Writes experiments/results/deep_diffusion_maps_table2.csv and one PNG per data set.
"""

from __future__ import annotations

import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from scipy.spatial.distance import pdist  # noqa: E402

from flgp.datasets import make_s_curve, make_swiss_roll  # noqa: E402
from flgp.embedding.deep import DeepDiffusionMap, conv_network  # noqa: E402
from flgp.embedding.diffusion_map import DiffusionMap  # noqa: E402
from flgp.embedding.metrics import mean_relative_error  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "results")

# Table 1: d, q, alpha, t
TABLE1 = {
    "swiss_roll": dict(d=2, q=5e-3, alpha=1.0, t=100),
    "s_curve": dict(d=2, q=5e-3, alpha=1.0, t=100),
    "helix": dict(d=2, q=3e-2, alpha=1.0, t=100),
    "mnist_d2": dict(d=2, q=5e-3, alpha=0.0, t=1),
    "mnist_d6": dict(d=6, q=5e-3, alpha=0.0, t=1),
}
# Table 2: 95% bootstrap intervals of the MRE (%), (D_a, D_b) x (Nyström, DDM)
TABLE2 = {
    "swiss_roll": {"a": {"nystrom": (10.5, 11.3), "ddm": (15.0, 16.0)},
                   "b": {"nystrom": (10.8, 11.5), "ddm": (20.2, 21.9)}},
    "s_curve": {"a": {"nystrom": (9.2, 10.0), "ddm": (9.4, 10.2)},
                "b": {"nystrom": (9.5, 10.1), "ddm": (10.7, 11.7)}},
    "helix": {"a": {"nystrom": (1.9, 1.9), "ddm": (2.0, 2.1)},
              "b": {"nystrom": (1.9, 1.9), "ddm": (2.1, 2.1)}},
    "mnist_d2": {"a": {"nystrom": (2.5, 2.5), "ddm": (15.5, 15.5)},
                 "b": {"nystrom": (2.7, 2.8), "ddm": (17.2, 17.7)}},
    "mnist_d6": {"a": {"nystrom": (0.6, 0.6), "ddm": (7.6, 7.6)},
                 "b": {"nystrom": (1.2, 1.2), "ddm": (8.4, 8.5)}},
}
SYNTHETIC = ("swiss_roll", "s_curve", "helix")


def make_paper_helix(n, *, third="sin", random_state=None):
    """The paper's closed 'Helix' (Sec. 5.1.1): x = (cos θ, sin 2θ, cos 3θ), θ ~ U[0, 2π).

    As printed, cos 3θ makes the curve pass through the origin twice (θ = π/2 and 3π/2), so
    it is not the closed one-dimensional *manifold* the paper describes; ``third="sin"``
    (default) uses sin 3θ, which is an embedded closed curve (and what the authors' code
    generates). ``third="cos"`` gives the formula as printed.
    """
    rng = np.random.default_rng(random_state)
    th = rng.uniform(0.0, 2 * np.pi, n)
    z = np.sin(3 * th) if third == "sin" else np.cos(3 * th)
    return np.c_[np.cos(th), np.sin(2 * th), z], th


def load_set(name, seed, helix_third):
    """(X_a, X_b, colour_a, colour_b) of one data set: 2000 points split in half (synthetic)
    or 5000 MNIST digits 0-5 split 4000 / 1000."""
    rng = np.random.default_rng(seed)
    if name == "swiss_roll":
        X, c = make_swiss_roll(2000, random_state=seed)
    elif name == "s_curve":
        X, c = make_s_curve(2000, random_state=seed)
    elif name == "helix":
        X, c = make_paper_helix(2000, third=helix_third, random_state=seed)
    else:
        from flgp.datasets import load_mnist

        Xall, yall = load_mnist()
        keep = np.flatnonzero(yall <= 5)
        pick = rng.choice(keep, 5000, replace=False)
        X, c = np.asarray(Xall[pick], dtype=np.float64), yall[pick]
        return X[:4000], X[4000:], c[:4000], c[4000:]
    perm = rng.permutation(X.shape[0])
    a, b = perm[:1000], perm[1000:]
    return X[a], X[b], c[a], c[b]


def relative_errors(Y, Y_ref):
    """Per-pair relative errors of eq. (40); their mean is the MRE."""
    d_ref = pdist(Y_ref)
    return np.abs(pdist(Y) - d_ref) / d_ref


def bootstrap_interval(errors, n_boot, rng, level=0.95):
    """Percentile bootstrap interval of the mean over the pairs (as the paper's Table 2)."""
    n = errors.shape[0]
    means = np.empty(n_boot)
    for k in range(n_boot):
        means[k] = errors[rng.integers(0, n, n)].mean()
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def run_set(name, args):
    hp = TABLE1[name]
    d, q, alpha, t = hp["d"], hp["q"], hp["alpha"], hp["t"]
    Xa, Xb, ca, cb = load_set(name.split("_d")[0] if name.startswith("mnist") else name,
                              args.seed, args.helix_third)
    sigma = float(np.quantile(pdist(Xa), q))
    eps = 2.0 * sigma ** 2                    # exp(-|x-y|^2 / (2 σ^2)) = exp(-|x-y|^2 / eps)
    dm_kw = dict(epsilon=eps, t=t, alpha=alpha, normalization="symmetric",
                 coordinates="markov")

    t0 = time.perf_counter()
    ref = DiffusionMap(d, **dm_kw).fit(np.vstack([Xa, Xb])).embedding_
    ref_a, ref_b = ref[:len(Xa)], ref[len(Xa):]
    t_dm = time.perf_counter() - t0

    t0 = time.perf_counter()
    nys = DiffusionMap(d, **dm_kw).fit(Xa)
    nys_a, nys_b = nys.embedding_, nys.transform(Xb)
    t_nys = time.perf_counter() - t0

    mnist = name.startswith("mnist")
    network = None
    if mnist and args.mnist_network == "conv":
        network = (lambda p, k: conv_network(k, (28, 28)))
    max_epochs = args.max_epochs_mnist if mnist else args.max_epochs
    ddm_kw = dict(sigma=sigma, alpha=alpha, t=t, network=network, standardize=not mnist,
                  batch_size=args.batch_size, learning_rate=args.learning_rate,
                  patience=args.patience, validation_fraction=0.1, device=args.device,
                  random_state=args.seed)
    if args.time_budget is not None:          # cap the epochs by a 20-epoch probe's speed
        DeepDiffusionMap(d, max_epochs=3, **ddm_kw).fit(Xa)      # warm-up (CUDA start)
        probe = DeepDiffusionMap(d, max_epochs=20, **ddm_kw).fit(Xa)
        per_epoch = probe.training_time_ / probe.n_epochs_
        capped = max(20, int(args.time_budget / per_epoch))
        print(f"{per_epoch * 1e3:.1f} ms an epoch: at most {min(capped, max_epochs)} of "
              f"{max_epochs} epochs in {args.time_budget:.0f} s", flush=True)
        max_epochs = min(max_epochs, capped)
    ddm = DeepDiffusionMap(d, max_epochs=max_epochs, **ddm_kw)
    ddm.fit(Xa)
    ddm_a, ddm_b = ddm.transform(Xa), ddm.transform(Xb)

    rng = np.random.default_rng(args.seed)
    rows = []
    for subset, ref_s, ests in (("a", ref_a, {"nystrom": nys_a, "ddm": ddm_a}),
                                ("b", ref_b, {"nystrom": nys_b, "ddm": ddm_b})):
        for method, Y in ests.items():
            err = relative_errors(Y, ref_s)
            mre = float(err.mean())
            assert abs(mre - mean_relative_error(Y, ref_s)) < 1e-12
            lo, hi = bootstrap_interval(err, args.n_bootstrap, rng)
            plo, phi = TABLE2[name][subset][method]
            rows.append(dict(dataset=name, subset=f"D_{subset}", method=method,
                             mre_pct=100 * mre, ci_lo_pct=100 * lo, ci_hi_pct=100 * hi,
                             paper_lo_pct=plo, paper_hi_pct=phi,
                             within_or_below=bool(round(100 * mre, 1) <= phi),
                             sigma=sigma, d=d, q=q, alpha=alpha, t=t,
                             epochs=ddm.n_epochs_, best_epoch=ddm.best_epoch_,
                             ddm_train_s=ddm.training_time_, dm_s=t_dm, nystrom_s=t_nys))
    plot_set(name, (nys_b, ref_b, ddm_b), cb, ddm, args.out)
    return rows


def plot_set(name, embeddings, colour, ddm, out):
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    cmap = "tab10" if name.startswith("mnist") else "viridis"
    for ax, Y, title in zip(axes, embeddings, ("Nyström", "DM", "DDM")):
        sc = ax.scatter(Y[:, 0], Y[:, 1], c=colour, s=4, cmap=cmap)
        ax.set_title(f"{title} — D_b")
        ax.set_xlabel("coordinate 1")
        ax.set_ylabel("coordinate 2")
    fig.colorbar(sc, ax=axes[2])
    ax = axes[3]
    ax.semilogy(ddm.history_["loss"], label="training", lw=0.8)
    if ddm.history_["val_loss"]:
        ax.semilogy(ddm.history_["val_loss"], label="validation", lw=0.8)
    ax.axvline(ddm.best_epoch_, color="k", ls=":", label="kept")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cost (38)")
    ax.legend()
    ax.set_title("DDM training")
    fig.suptitle(f"Deep diffusion maps — {name}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"deep_diffusion_maps_{name}.png"), dpi=110)
    plt.close(fig)


def format_table(df):
    lines = [f"{'data set':<11} {'set':<4} {'method':<8} {'ours MRE % [95% CI]':<26} "
             f"{'paper':<14} {'ok':<4} {'epochs':>6} {'train s':>8}"]
    for r in df.itertuples():
        lines.append(f"{r.dataset:<11} {r.subset:<4} {r.method:<8} "
                     f"{r.mre_pct:6.2f} [{r.ci_lo_pct:5.2f}, {r.ci_hi_pct:5.2f}]      "
                     f"({r.paper_lo_pct:4.1f}, {r.paper_hi_pct:4.1f})   "
                     f"{'yes' if r.within_or_below else 'NO':<4} "
                     f"{r.epochs if r.method == 'ddm' else '':>6} "
                     f"{(f'{r.ddm_train_s:.0f}' if r.method == 'ddm' else ''):>8}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SYNTHETIC) + ["mnist_d2", "mnist_d6"],
                    choices=list(TABLE1))
    ap.add_argument("--quick", action="store_true",
                    help="300 epochs (100 for MNIST), 200 bootstrap resamples")
    ap.add_argument("--max-epochs", type=int, default=5000, help="paper: 5000")
    ap.add_argument("--max-epochs-mnist", type=int, default=300,
                    help="paper: 10000 on a GPU; CPU budget default 300")
    ap.add_argument("--patience", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--learning-rate", type=float, default=1e-2)
    ap.add_argument("--mnist-network", choices=("dense", "conv"), default="dense",
                    help="paper: conv (Sec. 5.1.2); dense = 128-64-32 on the 784 pixels")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--helix-third", choices=("sin", "cos"), default="sin",
                    help="third helix coordinate: sin 3θ (embedded curve) or cos 3θ (as printed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default=None, help="torch device for DDM, e.g. cuda")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds of DDM training per set: fewer epochs than the cap when a "
                         "20-epoch probe says the cap would not fit")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    if args.quick:
        args.max_epochs, args.max_epochs_mnist, args.n_bootstrap = 300, 100, 200
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.sets:
        print(f"--- {name} ---", flush=True)
        rows += run_set(name, args)
        df = pd.DataFrame(rows)
        path = os.path.join(args.out, "deep_diffusion_maps_table2.csv")
        if os.path.exists(path):              # keep the rows of sets not re-run now
            old = pd.read_csv(path)
            df = pd.concat([old[~old.dataset.isin(df.dataset)], df], ignore_index=True)
        df.to_csv(path, index=False)
        print(format_table(df[df.dataset == name]), flush=True)
    print("\nTable 2 (MRE, %): ours [bootstrap 95% CI] beside the paper's interval")
    print(format_table(pd.DataFrame(rows)))


if __name__ == "__main__":
    main()
