"""
Predicting a whole-brain activation map from 30% of its voxels
==============================================================

nilearn's sample motor activation map (a group z map, left vs right button press, on a
3 mm MNI grid; it ships with nilearn, nothing is downloaded): all 45,448 voxels of the
brain, 30% of them observed. :func:`~flgp.predict_image` fits the default
:class:`~flgp.FLGPRegressor` on the voxel centres in mm. Its default (``prior=None``) weighs,
by their exact marginal likelihood, a graph Matérn prior on the voxel lattice itself (a
sparse precision at full resolution, :mod:`flgp.precision`), the low-rank heat kernel of
1,000 induced points and 100 eigenpairs, and - below 6,000 observed voxels - an exact RBF
GP; the mean and standard deviation come back as NIfTI images on the map's grid.
"""

import matplotlib.pyplot as plt
import numpy as np
from nilearn import plotting
from nilearn.datasets import load_sample_motor_activation_image

from flgp import FLGPRegressor, HeatKernelPrior, predict_image

zmap = load_sample_motor_activation_image()                # a path to a .nii.gz file
res = predict_image(zmap, None, 0.3, random_state=0, include_noise=True)
reg = res.regressor
vox = res.voxels                       # the region: coordinates (mm), z values, indices
print(f"brain: {len(vox)} voxels, observed: {res.n_observed}; fitted in "
      f"{res.seconds:.1f} s")
print(f"chosen: {reg.method_} (graph Matérn order {reg.matern_order_} on the voxel "
      f"lattice); log evidence of each candidate: "
      + ", ".join(f"{k} {v:.0f}" for k, v in reg.log_evidence_.items()))
print("left out:", reg.skipped_methods_)

# %%
# The map, the observed voxels, the predicted mean and its uncertainty
# --------------------------------------------------------------------
# ``res.mean`` and ``res.sd`` are NIfTI images, so nilearn plots them directly;
# ``vox.to_nifti`` puts any per-voxel values back on the grid. ``include_noise=True`` made
# ``res.sd`` the sd of a new observation (the image header says which).

truth_img = vox.to_nifti(vox.values)
observed_img = vox.to_nifti(np.where(res.observed, vox.values, 0.0))
peak = vox.coords[np.argmax(np.abs(vox.values))]           # cut through the largest |z|
vmax = float(np.abs(vox.values).max())
sd_max = float(np.percentile(res.sd.get_fdata()[tuple(vox.ijk.T)], 99))
fig, axes = plt.subplots(4, 1, figsize=(8, 11))
shown = [(truth_img, "the z map", dict(vmax=vmax)),
         (observed_img, f"observed: {res.n_observed} voxels", dict(vmax=vmax)),
         (res.mean, "graph Matérn GP: predictive mean", dict(vmax=vmax)),
         (res.sd, "predictive sd of a new observation",
          dict(cmap="viridis", symmetric_cbar=False, vmin=0, vmax=sd_max))]
for ax, (img, title, kw) in zip(axes, shown):
    plotting.plot_stat_map(img, axes=ax, cut_coords=peak, title=title, **kw)
plt.show()

# %%
# Held-out error and coverage, against the low-rank heat kernel
# -------------------------------------------------------------
# The same observed voxels with the heat kernel alone (``HeatKernelPrior()``): 100 eigenpairs keep about a third of a
# heat kernel's prior variance on a region this size (Weyl's law: ``M ≈ 0.37 V / ℓ³``
# eigenpairs for a length-scale of ``ℓ`` voxels), so the low-rank prior smooths the map
# too much. Error on the unobserved voxels: the trimmed MSE of He et al. (the largest 1%
# of the squared errors left out); coverage of the 95% intervals of a new observation.

low = predict_image(zmap, None, 0.3, random_state=0, include_noise=True,
                    regressor=FLGPRegressor(HeatKernelPrior()))
held_out = tuple(vox.ijk[~res.observed].T)
truth = vox.values[~res.observed]
rows = []
for name, r in (("graph Matérn (default)", res), ("low-rank heat kernel", low)):
    mean, sd = r.mean.get_fdata()[held_out], r.sd.get_fdata()[held_out]
    sq = np.sort((mean - truth) ** 2)
    rows.append((name, float(np.mean(sq[:int(0.99 * sq.size)])),
                 float(np.mean(np.abs(mean - truth) <= 1.96 * sd)), r.seconds))
print(f"{truth.size} held-out voxels; variance of the map {np.var(vox.values):.2f}")
print(f"{'':24} {'trimmed MSE':>11} {'coverage':>9} {'fit s':>6}")
for name, tmse, cov, sec in rows:
    print(f"{name:24} {tmse:11.3f} {cov:9.3f} {sec:6.1f}")

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([r[0] for r in rows], [r[1] for r in rows], color=["C0", "C1"])
ax.set_yscale("log")
ax.set_ylabel("trimmed MSE, unobserved voxels")
fig.tight_layout()
plt.show()
