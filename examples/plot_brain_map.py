"""
Predicting a brain activation map from a quarter of its voxels
==============================================================

nilearn's sample motor activation map (a group z map, left vs right button press, on a
3 mm MNI grid; it ships with nilearn, nothing is downloaded) restricted to He et al.'s
activation region ``|z| > 1.96``. A random 28% of the region's voxels are observed (the
paper's smallest share, 5,000 of 17,711); :func:`~flgp.predict_image` fits a heat-kernel
:class:`~flgp.FLGPRegressor` on the voxel centres in mm and returns the predictive mean and
standard deviation as NIfTI images on the map's grid. The same call with
``FLGPRegressor(method="rbf")`` gives flgp's RBF Gaussian process for comparison.
"""

import matplotlib.pyplot as plt
import numpy as np
from nilearn import plotting
from nilearn.datasets import load_sample_motor_activation_image
from nilearn.image import math_img

from flgp import FLGPRegressor, predict_image

zmap = load_sample_motor_activation_image()                # a path to a .nii.gz file
region = math_img("np.abs(img) > 1.96", img=zmap)         # a mask on the map's grid
share = 5000 / 17711                                       # observed: 28% of the region

heat = predict_image(zmap, region, share, random_state=0,
                     regressor=FLGPRegressor(n_induced=1000, n_eigenpairs=500))
vox = heat.voxels                      # the region: coordinates (mm), z values, indices
print(f"region: {len(vox)} voxels, observed: {heat.n_observed}; "
      f"heat kernel fitted in {heat.seconds:.1f} s "
      f"(diffusion time {heat.regressor.diffusion_time_:.3g})")

# %%
# The observed voxels, the predicted mean and the predictive standard deviation
# ------------------------------------------------------------------------------
# ``heat.mean`` and ``heat.sd`` are NIfTI images (0 outside the region), so nilearn plots
# them directly; ``vox.to_nifti`` puts any per-voxel values back on the grid. The standard
# deviation is that of the map's value; it is smallest at and next to observed voxels. Its
# colour scale stops at its 95th percentile (about 0.7; the median is about 0.34): a few
# dozen voxels exceed 3, typically 12 mm from the nearest observed voxel (half of all
# voxels are within 3 mm of one).

truth_img = vox.to_nifti(vox.values)                       # the map in the region
observed_img = vox.to_nifti(np.where(heat.observed, vox.values, 0.0))
peak = vox.coords[np.argmax(np.abs(vox.values))]           # cut through the largest |z|
vmax = float(np.abs(vox.values).max())                     # one colour scale for z
sd_max = float(np.percentile(heat.sd.get_fdata()[tuple(vox.ijk.T)], 95))
fig, axes = plt.subplots(4, 1, figsize=(8, 11))
shown = [(truth_img, f"the z map in the region ({len(vox)} voxels)", dict(vmax=vmax)),
         (observed_img, f"observed: {heat.n_observed} voxels", dict(vmax=vmax)),
         (heat.mean, "heat-kernel GP: predictive mean", dict(vmax=vmax)),
         (heat.sd, "heat-kernel GP: predictive sd",
          dict(cmap="viridis", symmetric_cbar=False, vmin=0, vmax=sd_max))]
for ax, (img, title, kw) in zip(axes, shown):
    plotting.plot_stat_map(img, axes=ax, cut_coords=peak, title=title, **kw)
plt.show()

# %%
# Held-out error: heat kernel against the RBF GP
# ----------------------------------------------
# The same observed voxels (same ``random_state``), flgp's RBF GP: length-scale,
# amplitude and noise by marginal likelihood, here with 40 Adam steps of 0.2 instead of
# the default 100 of 0.1 to keep the example under a minute. On this draw both reach the
# same fit (noise variance 0.0060 against 0.0064, length-scale within 6%; trimmed MSE
# 0.100-0.104 against 0.098-0.111, three runs each: GPyTorch's log-determinant estimates
# are random) and the default took three times as long. Error on the unobserved
# voxels: the trimmed MSE of He et al. (errors below their 1% and above their 99%
# quantile dropped) and the plain MSE.

rbf = predict_image(zmap, region, share, random_state=0,
                    regressor=FLGPRegressor(method="rbf", max_iter=40, learning_rate=0.2))
assert np.array_equal(rbf.observed, heat.observed)


def trimmed_mse(err, trim=0.01):
    lo, hi = np.quantile(err, [trim, 1 - trim])
    return float(np.mean(err[(err >= lo) & (err <= hi)] ** 2))


held_out = tuple(vox.ijk[~heat.observed].T)
truth = vox.values[~heat.observed]
rows = []
for name, res in (("heat kernel (FLGP)", heat), ("RBF GP", rbf)):
    err = res.mean.get_fdata()[held_out] - truth
    rows.append((name, trimmed_mse(err), float(np.mean(err ** 2)), res.seconds))
print(f"{len(truth)} held-out voxels; variance of the map over the region "
      f"{np.var(vox.values):.1f}")
print(f"{'':20} {'trimmed MSE':>11} {'MSE':>7} {'fit s':>6}")
for name, tmse, mse, sec in rows:
    print(f"{name:20} {tmse:11.3f} {mse:7.3f} {sec:6.1f}")

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([r[0] for r in rows], [r[1] for r in rows], color=["C0", "C1"])
ax.set_ylabel("trimmed MSE, unobserved voxels")
ax.set_title(f"{len(truth)} held-out voxels")
fig.tight_layout()
plt.show()

# %%
# On this map the RBF GP is the better prior: the map is a smoothed volume cut at
# ``|z| = 1.96``, its values continue smoothly across the cut and the gaps between the
# region's blobs, which an RBF of the ambient coordinates sees and a heat kernel confined
# to the region does not; and 500 eigenvectors of a 1,000-centre graph cannot represent
# it exactly. The heat kernel is the faster of the two. ``docs/real_data.md`` has the
# diagnosis and the paper's three observed shares.
