"""
The graph Matérn prior on a cortical mesh in your own GPyTorch model
====================================================================

:class:`~flgp.kernels.GraphMaternKernel` puts flgp's full-resolution prior - the graph
Matérn precision ``Q = K (C⁻¹K)^{ν-1}``, ``K = κ²C + G``, of a
:class:`~flgp.graph.PointGraph` - into an ordinary GPyTorch ``ExactGP``. Its kernel
matrices are sparse-solve operators, and the marginal likelihood and predictions go
through the sparse posterior precision: nothing of size ``n x n`` (or even ``m x m``) is
formed. Here: FreeSurfer's fsaverage5 left pial surface (shipped with nilearn), its
cortical thickness on the 9,971 vertices that have one, 20 % of them observed, 60 Adam
steps on the exact marginal likelihood, and the prediction of the other 80 %.
"""

import time

import gpytorch
import matplotlib.pyplot as plt
import numpy as np
import torch
from nilearn import datasets, plotting

from flgp.graph import mesh_graph
from flgp.kernels import GraphMaternKernel

torch.set_num_threads(2)
mesh = datasets.load_fsaverage("fsaverage5")["pial"].parts["left"]
thickness = np.asarray(datasets.load_fsaverage_data(
    "fsaverage5", mesh_type="pial", data_type="thickness").data.parts["left"], dtype=float)

# the graph: the mesh restricted to the vertices with a thickness (the medial wall has
# none), on the triangles whose three corners all have one
V, F = np.asarray(mesh.coordinates, dtype=float), np.asarray(mesh.faces)
inside = (thickness > 0)[F].all(1)
keep = np.unique(F[inside])
new = np.full(V.shape[0], -1)
new[keep] = np.arange(keep.size)
graph = mesh_graph(V[keep], new[F[inside]])
y = thickness[keep]
rng = np.random.default_rng(0)
obs = np.sort(rng.choice(keep.size, int(round(0.2 * keep.size)), replace=False))
test = np.setdiff1d(np.arange(keep.size), obs)
print(f"{graph.n_nodes} vertices, {obs.size} observed")

# inputs are the vertices' coordinates (nodes of the graph, looked up exactly)
x = torch.as_tensor(graph.points[obs])
centre = float(y[obs].mean())
y_train = torch.as_tensor(y[obs] - centre)


class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood):
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        # no outputscale built in: ScaleKernel's is folded into the sparse operator
        self.covar_module = gpytorch.kernels.ScaleKernel(GraphMaternKernel(graph, nu=2))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


likelihood = gpytorch.likelihoods.GaussianLikelihood(
    noise_constraint=gpytorch.constraints.GreaterThan(1e-6))
model = GP(x, y_train, likelihood).double()
model.covar_module.outputscale = torch.tensor(float(y_train.var()), dtype=torch.float64)
likelihood.noise = torch.tensor(0.1 * float(y_train.var()), dtype=torch.float64)
mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
steps = 60
optimizer = torch.optim.Adam(model.parameters(), lr=0.3)
model.train()
likelihood.train()
evidence = []
start = time.perf_counter()
for step in range(steps):
    optimizer.zero_grad()
    loss = -mll(model(x), y_train)
    loss.backward()
    optimizer.step()
    evidence.append(-loss.item() * obs.size)
kernel = model.covar_module.base_kernel
trace = kernel.trace_diagnostics
print(f"{steps} Adam steps in {time.perf_counter() - start:.1f} s: log evidence "
      f"{evidence[0]:.1f} -> {evidence[-1]:.1f}; kappa = {kernel.kappa2.sqrt().item():.3f} "
      f"/mm, outputscale {model.covar_module.outputscale.item():.3f}, noise "
      f"{likelihood.noise.item():.4f} (the log-determinant's gradient: "
      f"{trace['estimator']}, {trace['n_probes']} probes)")

# %%
# Predict the unobserved 80 %: the posterior mean through one sparse solve, the variances
# (more than 2,000 test vertices) by the Rao-Blackwellised Monte Carlo estimator.
model.eval()
likelihood.eval()
with torch.no_grad():
    pred = likelihood(model(torch.as_tensor(graph.points[test])))
    mean = pred.mean.numpy() + centre
    sd = pred.variance.sqrt().numpy()
rmse = np.sqrt(np.mean((mean - y[test]) ** 2))
cover = np.mean(np.abs(mean - y[test]) <= 1.96 * sd)
print(f"held-out RMSE {rmse:.3f} mm (sd of the map {y.std():.3f}); 95 % intervals cover "
      f"{cover:.3f}")

# %%
# The map, the prediction (the observed 20 % kept as they are), its standard deviation
# and the training curve
def on_mesh(values):
    """Values at the graph's vertices as a map of the whole mesh (NaN on the medial wall)."""
    out = np.full(V.shape[0], np.nan)
    out[keep] = values
    return out


predicted = y.copy()
predicted[test] = mean
spread = np.zeros(keep.size)
spread[test] = sd
fig = plt.figure(figsize=(15, 3.8))
for i, (values, title, limits, bar) in enumerate([
        (y, "thickness (mm)", (1.0, 4.0), False),
        (predicted, "GPyTorch posterior mean", (1.0, 4.0), True),
        (spread, "predictive sd (mm)", (0.0, 0.4), True)]):
    ax = fig.add_subplot(1, 4, i + 1, projection="3d")
    plotting.plot_surf(mesh, on_mesh(values), axes=ax, view="lateral", cmap="viridis",
                       vmin=limits[0], vmax=limits[1], colorbar=bar, title=title,
                       engine="matplotlib")
ax = fig.add_subplot(1, 4, 4)
ax.plot(evidence)
ax.set_xlabel("Adam step")
ax.set_ylabel("exact log evidence")
fig.subplots_adjust(left=0.02, right=0.97, wspace=0.3)
plt.show()
