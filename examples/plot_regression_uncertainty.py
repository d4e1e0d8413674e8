"""
Regression with uncertainty bands on a spiral
=============================================

The FLGP paper's spiral: a function of the arc length along a two-dimensional spiral,
observed with noise at 5% of 4,000 points. :class:`~flgp.FLGPRegressor` fits the
diffusion time, the outputscale and the noise by marginal likelihood and returns a
predictive mean and standard deviation at every point, and a band of two standard
deviations around the mean.
"""

import matplotlib.pyplot as plt
import numpy as np

from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior
from flgp.datasets import make_spiral

X, y, f = make_spiral(4000, noise=0.5, random_state=0)   # y = f + noise
rng = np.random.default_rng(1)   # not 0: the data generator used seed 0
y_semi = np.where(rng.random(len(y)) < 0.05, y, np.nan)   # NaN marks an unlabelled row
labelled = ~np.isnan(y_semi)

reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=50)), random_state=0).fit(X, y_semi)
mean, std = reg.predict(X, return_std=True)
print(f"diffusion time {reg.diffusion_time_:.3g}, noise variance {reg.noise_:.3g}")
print(f"RMSE against the noise-free function: {np.sqrt(np.mean((mean - f) ** 2)):.3f}")
print(f"points whose true f lies in mean ± 2 std: {np.mean(abs(mean - f) < 2 * std):.0%}")

# %%
# The spiral unrolled: the points are evenly spaced in the angle ``θ`` along the curve, so
# the function, the labels and the band can be drawn against it. ``std`` is the standard
# deviation of the latent function ``f``; the observations scatter by the noise on top.

fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1, 2]})
sc = axes[0].scatter(X[:, 0], X[:, 1], c=mean, s=2, cmap="viridis")
axes[0].set_title("predictive mean on the spiral")
axes[0].set_aspect("equal")
fig.colorbar(sc, ax=axes[0], shrink=0.8)

theta = np.linspace(0, 8 * np.pi, len(y))      # θ of make_spiral
axes[1].fill_between(theta, mean - 2 * std, mean + 2 * std, color="C0", alpha=0.3,
                     label="mean ± 2 std")
axes[1].plot(theta, mean, color="C0", lw=1, label="predictive mean")
axes[1].plot(theta, f, color="k", lw=1, ls="--", label="true function")
axes[1].scatter(theta[labelled], y[labelled], s=6, color="C3", label="observed", zorder=3)
axes[1].set_xlabel("θ, the angle along the spiral")
axes[1].set_title("unrolled")
axes[1].legend(loc="lower left", fontsize=8)
fig.tight_layout()
plt.show()
