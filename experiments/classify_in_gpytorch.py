"""Multi-class heat-kernel GP classification in a user's own GPyTorch script.

A batch of ``C`` variational GPs (``batch_shape=torch.Size([C])``) whose heat kernel has
one diffusion time per class, the multinomial-probit likelihood that ``FLGPClassifier``
fits by nested EP (``flgp.models.MultinomialProbitLikelihood``), and Adam on the
variational ELBO: the user's loop moves the ``C`` diffusion times. The script prints the
diffusion times and the ELBO as they move, then error and calibration on the unlabelled
points beside ``FLGPClassifier`` on the same labels, and writes a CSV and a plot to
``experiments/results/``.

    python experiments/classify_in_gpytorch.py [--iters 150]
"""

from __future__ import annotations

import argparse
import os
import warnings

import gpytorch
import numpy as np
import torch

import flgp
from flgp.datasets import make_swiss_roll
from flgp.models import MultinomialProbitLikelihood

OUT = os.path.join(os.path.dirname(__file__), "results")


class ClassGPs(gpytorch.models.ApproximateGP):
    """One latent GP per class; the heat kernel carries ``C`` diffusion times."""

    def __init__(self, inducing, kernel, n_classes):
        batch = torch.Size([n_classes])
        dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0],
                                                                    batch_shape=batch)
        # the heat kernel is defined on the cloud's points: inducing points stay put
        base = gpytorch.variational.VariationalStrategy(self, inducing, dist,
                                                        learn_inducing_locations=False)
        strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(
            base, num_tasks=n_classes)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean(batch_shape=batch)
        self.covar_module = kernel

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


def ece(P, y, bins=15):
    conf, right = P.max(1), P.argmax(1) == y
    edges = np.linspace(0, 1, bins + 1)
    return float(sum(((conf > lo) & (conf <= hi)).mean()
                     * abs(right[(conf > lo) & (conf <= hi)].mean()
                           - conf[(conf > lo) & (conf <= hi)].mean())
                     for lo, hi in zip(edges[:-1], edges[1:])
                     if ((conf > lo) & (conf <= hi)).any()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--labels", type=int, default=60)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    X, t = make_swiss_roll(args.n, noise=0.5, random_state=0)
    y = np.digitize(t, np.quantile(t, [1 / 3, 2 / 3]))               # 3 classes along the roll
    C = 3
    lab = rng.choice(args.n, args.labels, replace=False)
    unl = np.setdiff1d(np.arange(args.n), lab)

    # the kernel sees the whole cloud; one diffusion time per class
    kernel = flgp.kernels.HeatKernelFLGP(X, n_induced=500, n_eigenpairs=60, random_state=0,
                                         batch_shape=torch.Size([C]))
    x_lab = torch.from_numpy(X[lab])
    y_lab = torch.from_numpy(y[lab])
    model = ClassGPs(x_lab, kernel, C).double()
    lik = MultinomialProbitLikelihood(C).double()
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=len(lab))
    opt = torch.optim.Adam([*model.parameters(), *lik.parameters()], lr=args.lr)
    model.train()
    lik.train()
    for i in range(args.iters):
        opt.zero_grad()
        loss = -mll(model(x_lab), y_lab)
        loss.backward()
        opt.step()
        if i % 25 == 0 or i == args.iters - 1:
            ts = ", ".join(f"{v:.1f}" for v in kernel.diffusion_time.detach().flatten())
            print(f"iter {i:3d}  -ELBO = {loss.item():8.4f}  t = ({ts})")
    model.eval()
    lik.eval()
    with torch.no_grad(), gpytorch.settings.num_likelihood_samples(256):
        P = lik(model(torch.from_numpy(X[unl]))).probs.mean(0).numpy()
    err_gp = float(np.mean(P.argmax(1) != y[unl]))
    ece_gp = ece(P, y[unl])

    yy = np.full(args.n, -1)
    yy[lab] = y[lab]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = flgp.FLGPClassifier(flgp.HeatKernelPrior(flgp.Eigenbasis(n_induced=500, n_eigenpairs=60)),
                                  random_state=0).fit(X, yy)
    Q = clf.label_distributions_[unl]
    err_ep = float(np.mean(Q.argmax(1) != y[unl]))
    ece_ep = ece(Q, y[unl])
    print(f"\nunlabelled points: GPyTorch batch GP error {err_gp:.3%} ECE {ece_gp:.3f}; "
          f"FLGPClassifier (nested EP, shared t = {clf.diffusion_time_:.1f}) error "
          f"{err_ep:.3%} ECE {ece_ep:.3f}")

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "classify_in_gpytorch.csv")
    with open(path, "w") as fh:
        fh.write("model,error,ece,diffusion_times\n")
        ts = " ".join(f"{v:.3f}" for v in kernel.diffusion_time.detach().flatten())
        fh.write(f"gpytorch batch GP (VariationalELBO),{err_gp:.5f},{ece_gp:.4f},{ts}\n")
        fh.write(f"FLGPClassifier (nested EP),{err_ep:.5f},{ece_ep:.4f},"
                 f"{clf.diffusion_time_:.3f}\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, probs, title in [(axes[0], P, "GPyTorch batch GP"), (axes[1], Q, "FLGPClassifier")]:
        ax.scatter(t[unl], X[unl, 1], c=probs.argmax(1), s=3, cmap="viridis", rasterized=True,
                   alpha=0.3 + 0.7 * (probs.max(1) - 1 / C) / (1 - 1 / C))
        ax.scatter(t[lab], X[lab, 1], c="red", s=12, marker="x", label="labels")
        ax.set_xlabel("roll parameter")
        ax.set_ylabel("height")
        ax.set_title(f"{title}: predicted class (opacity = confidence)")
    axes[0].legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "classify_in_gpytorch.png"), dpi=80)
    print(f"wrote {path} and classify_in_gpytorch.png")


if __name__ == "__main__":
    main()
