"""
Large data: a dask array
========================

flgp's estimators take dask (and zarr) arrays as well as numpy arrays
(``pip install 'flgp[dask]'``). The engine then runs as dask tasks, one per block of rows,
on whatever scheduler is active (threads by default, or a ``dask.distributed`` cluster);
only ``s``-sized and ``s x s`` summaries are ever gathered, the fitted model holds no
``n``-sized numpy array, and ``transduction_`` and ``predict`` are lazy dask arrays. The
cloud can therefore be larger than memory, e.g. read from disk with
``dask.array.from_zarr``.

Here 200,000 points of a Swiss roll, in blocks of 25,000 rows, with a noisy target known
at 0.1% of them (about 200 points). :doc:`/distributed` describes the engine, clusters and
what was measured.
"""

import time

import dask.array as da
import matplotlib.pyplot as plt
import numpy as np

import flgp
from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior
from flgp.datasets import make_swiss_roll

n = 200_000
X_np, t = make_swiss_roll(n, random_state=0)
f = np.sin(t) + 0.1 * X_np[:, 1]                 # varies along and across the roll
rng = np.random.default_rng(1)   # not 0: the data generator used seed 0
y_np = np.where(rng.random(n) < 0.001, f + 0.1 * rng.standard_normal(n), np.nan)

X = da.from_array(X_np, chunks=(25_000, 3))
y = da.from_array(y_np, chunks=25_000)           # NaN marks an unlabelled row

# HeatKernelPrior: the heat-kernel GP. On dask inputs that is what the default
# (prior=None) fits anyway; on numpy inputs the default would also fit an exact RBF GP and
# keep it when its evidence is higher (it is on this roll), at O(m^2) a predicted point.
start = time.perf_counter()
reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=50)), random_state=0).fit(X, y)
print(f"fit on {n:,} points in {time.perf_counter() - start:.1f} s")
print("transduction_:", repr(reg.transduction_))

# %%
# Predictions stay lazy until computed. Here: the predictive mean at 5,000 random points
# of the cloud, which are also what the plot shows.

show = np.sort(rng.choice(n, 5_000, replace=False))
mean = reg.predict(X[show]).compute()
rmse = np.sqrt(np.mean((mean - f[show]) ** 2))
print(f"RMSE at 5,000 points against the noise-free target: {rmse:.3f}")

# %%
# On a numpy array the same passes run over blocks of rows in this process. Their size
# follows flgp's memory budget, ``flgp.config_context(working_memory=...)`` (MiB per block,
# 64 by default): a smaller budget means smaller blocks, less memory at a time and more
# blocks per pass. The fitted model is the same.

with flgp.config_context(working_memory=16):
    reg_np = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=50)),
                           random_state=0).fit(X_np, y_np)
mean_np = reg_np.predict(X_np[show])
print(f"numpy fit: largest difference from the dask fit's predictions "
      f"{np.max(np.abs(mean_np - mean)):.1e}")

fig = plt.figure(figsize=(10, 4))
for i, (values, title) in enumerate([(f[show], "target"),
                                     (mean, f"predictive mean (RMSE {rmse:.2f})")]):
    ax = fig.add_subplot(1, 2, i + 1, projection="3d")
    ax.scatter(*X_np[show].T, c=values, s=2, cmap="viridis", vmin=f.min(), vmax=f.max())
    ax.view_init(10, -70)
    ax.set_title(title)
    ax.set_axis_off()
fig.suptitle(f"{n:,} points, {np.sum(~np.isnan(y_np))} labelled, fitted on a dask array")
fig.tight_layout()
plt.show()
