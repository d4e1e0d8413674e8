"""
A group map from several subjects, and where the population exceeds a level
============================================================================

Eight simulated subjects' maps on one mask: the voxels of nilearn's sample motor map with
``|z| > 3`` (3 mm voxels; the map ships with nilearn). The population map ``g`` is the
motor map itself, halved; each subject adds a smooth deviation of its own (a graph Matérn
field) and white noise. :func:`~flgp.group_map` fits the two-level model
``y_s = g + d_s + ε_s`` - the group map and the subjects' deviations graph Matérn fields,
their hyperparameters from the maps - and gives ``g``'s posterior and the excursion set
where it exceeds a level at every voxel jointly with posterior probability 0.95
(``docs/excursions.md``, "A group map from many subjects").
"""

import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
from nilearn import plotting
from nilearn.datasets import load_sample_motor_activation_image

import flgp
from flgp.graph import lattice_graph
from flgp.precision import PatternCholesky, matern_precision

zmap = nib.load(load_sample_motor_activation_image())
data = zmap.get_fdata()
mask = np.abs(data) > 3.0
ijk = np.argwhere(mask)
truth = 0.5 * data[mask]                       # the population map g at the mask's voxels

# subjects: g + a smooth deviation (order 2, range ~ 10 mm, sd 0.5) + noise of sd 1
rng = np.random.default_rng(0)
n_subjects = 8
graph = lattice_graph(ijk, zmap.affine)
own = graph.in_own_units()
length = graph.own_units()[0]
Q = matern_precision(own, (0.15 * length) ** 2, 2)
chol = PatternCholesky(Q)
chol.factor(Q)
deviations = chol.sample(n_subjects, rng)
deviations *= 0.5 / deviations.std()
subjects = (truth[:, None] + deviations
            + rng.standard_normal((truth.size, n_subjects)))
volumes = np.zeros(mask.shape + (n_subjects,))
volumes[mask] = subjects
maps = nib.Nifti1Image(volumes, zmap.affine)     # a 4-d image, one volume a subject

group = flgp.group_map(maps, mask)
print(f"{group.graph.n_nodes} voxels, {group.n_subjects} subjects, fitted in "
      f"{group.seconds:.1f} s")
for name, value in group.hyperparameters.items():
    print(f"  {name:18s} {value:.4g}")

# %%
# The group map against the truth
# -------------------------------
# The posterior mean of ``g`` pools the subjects through the field's smoothness: nearer
# the truth than the plain mean of the maps, with intervals that cover it.

mean = group.mean.get_fdata()[mask]
sd = group.std.get_fdata()[mask]
ybar = subjects.mean(axis=1)
print(f"RMSE to the truth: group map {np.sqrt(np.mean((mean - truth) ** 2)):.3f}, mean of "
      f"the maps {np.sqrt(np.mean((ybar - truth) ** 2)):.3f}; the 95 % intervals cover "
      f"{np.mean(np.abs(mean - truth) <= 1.96 * sd):.1%} of the voxels")

# %%
# Where the population map exceeds a level
# ----------------------------------------
# The excursion set ``{g > 2}`` at ``α = 0.05``: the voxels where the population map
# exceeds 2 jointly with posterior probability at least 0.95 - its error rate is that of
# holding any voxel where ``g ≤ 2``, under the fitted model.

u = 2.0
found = group.excursion_set(u, alpha=0.05)
wrong = int(np.sum(found.mask & (truth <= u)))
print(f"excursion set g > {u:g}: {found.n_nodes_in_set} voxels (of {int(np.sum(truth > u))} "
      f"where the truth exceeds {u:g}), {wrong} at or below it; joint probability "
      f"{found.joint_probability:.3f}")

at = group.voxels.coords[np.argmax(mean)]
fig, axes = plt.subplots(2, 1, figsize=(8, 6))
plotting.plot_stat_map(group.voxels.to_nifti(truth), axes=axes[0], cut_coords=at,
                       title="the population map g (truth)")
display = plotting.plot_stat_map(group.mean, axes=axes[1], cut_coords=at,
                                 title=f"group map (posterior mean), set g > {u:g} in red")
display.add_contours(group.to_image(found.mask), levels=[0.5], colors="r")
plt.show()
