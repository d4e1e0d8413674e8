"""
The heat kernel in your own GPyTorch model
==========================================

:class:`~flgp.kernels.HeatKernelFLGP` is an ordinary ``gpytorch.kernels.Kernel`` with a
learnable ``diffusion_time``. It is built once from the whole point cloud, labelled and
unlabelled points together, and then takes coordinates like any other kernel: a point of
the cloud maps to its eigenvector row, any other point through the out-of-sample map. Here
it replaces the RBF kernel of a textbook ``ExactGP``, trained with Adam on the exact
marginal likelihood, on the FLGP paper's spiral.
"""

import gpytorch
import matplotlib.pyplot as plt
import numpy as np
import torch

import flgp
from flgp.datasets import make_spiral

torch.manual_seed(0)
X, y, f = make_spiral(3000, noise=0.5, random_state=0)
X = (X - X.mean(0)) / X.std(0)
rng = np.random.default_rng(1)   # not 0: the data generator used seed 0
train = np.sort(rng.choice(len(y), 150, replace=False))
x_train, y_train = torch.from_numpy(X[train]), torch.from_numpy(y[train])


class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel):
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(kernel)   # no outputscale built in

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


def fit(kernel, iters=60):
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(x_train, y_train, likelihood, kernel).double()
    model.train()
    likelihood.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    losses = []
    for _ in range(iters):
        optimizer.zero_grad()
        loss = -mll(model(x_train), y_train)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    likelihood.eval()
    with torch.no_grad():
        mean = model(torch.from_numpy(X)).mean.numpy()
    return mean, losses


# the kernel sees all 3,000 points; 150 of them are labelled
heat = flgp.kernels.HeatKernelFLGP(X, n_induced=400, n_eigenpairs=50, random_state=0)
print(f"initial diffusion time {heat.diffusion_time.item():.3g}")
heat_mean, heat_losses = fit(heat)
print(f"trained diffusion time {heat.diffusion_time.item():.3g}")
rbf_mean, rbf_losses = fit(gpytorch.kernels.RBFKernel())

rmse = {name: np.sqrt(np.mean((m - f) ** 2)) for name, m in
        [("heat", heat_mean), ("rbf", rbf_mean)]}
print(f"RMSE against the noise-free function: heat kernel {rmse['heat']:.3f}, "
      f"RBF {rmse['rbf']:.3f}")

# %%
# The RBF kernel smooths across neighbouring turns of the spiral, which are close in the
# plane but far apart along the curve; the heat kernel does not.

theta = np.linspace(0, 8 * np.pi, len(y))          # the points' angle along the spiral
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 1]})
axes[0].plot(theta, f, "k--", lw=1, label="true function")
axes[0].plot(theta, heat_mean, lw=1.2, label=f"heat kernel (RMSE {rmse['heat']:.2f})")
axes[0].plot(theta, rbf_mean, lw=1.2, label=f"RBF kernel (RMSE {rmse['rbf']:.2f})")
axes[0].scatter(theta[train], y[train], s=8, color="C3", zorder=3, label="training data")
axes[0].set_xlabel("θ, the angle along the spiral")
axes[0].legend(fontsize=8, loc="lower left")
axes[1].plot(heat_losses, label="heat kernel")
axes[1].plot(rbf_losses, label="RBF kernel")
axes[1].set_xlabel("Adam step")
axes[1].set_ylabel("negative marginal log likelihood")
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()
