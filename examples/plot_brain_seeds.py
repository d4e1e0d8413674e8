"""
Seed-correlation maps of a fitted brain map
===========================================

The FLGP paper summarises the manifold of activation by seed maps: the correlation,
under the fitted prior, between a seed voxel and every voxel of the brain, one seed a
region of an atlas (its voxel of largest ``|value|``), and the regions' correlation
matrix. :func:`flgp.models.seed_correlation` computes both from a
:func:`~flgp.predict_image` fit of the graph Matérn prior on the voxel lattice: a seed's
map is a few sparse solves, the marginal variances exact or estimated
(docs/images.md). The command line does the same with ``flgp nifti MAP ... --seeds-atlas
ATLAS``.

nilearn's sample motor activation map ships with nilearn; an atlas does not (nilearn's
atlases are downloaded), so this example cuts the brain into 12 parcels by k-means of
the voxel coordinates as a stand-in - any integer atlas on the map's grid works the same.
"""

import matplotlib.pyplot as plt
import numpy as np
from nilearn import plotting
from nilearn.datasets import load_sample_motor_activation_image
from sklearn.cluster import KMeans

from flgp import FLGPRegressor, GraphMaternPrior, predict_image
from flgp.models import seed_correlation

zmap = load_sample_motor_activation_image()
res = predict_image(zmap, None, 0.3, random_state=0,
                    regressor=FLGPRegressor(GraphMaternPrior()))
vox, reg = res.voxels, res.regressor
print(f"{len(vox)} voxels, {res.n_observed} observed: graph Matérn order "
      f"{reg.matern_order_}, range parameter kappa {reg.matern_kappa_:.3g} / mm; fitted "
      f"in {res.seconds:.1f} s")

# a stand-in atlas: 12 parcels of the brain (labels 1-12, 0 outside)
parcels = KMeans(12, n_init=3, random_state=0).fit_predict(vox.coords) + 1
atlas = vox.to_nifti(parcels.astype(float))

seeds = seed_correlation(res, atlas=atlas)
print(f"seeds (region: voxel row): "
      + ", ".join(f"{lab}: {row}" for lab, row in zip(seeds.labels, seeds.seeds)))

# %%
# Two seeds' maps
# ---------------
# ``seeds.to_nifti(voxels)`` is a 4-d image, one volume a region: nilearn plots each.

maps = seeds.to_nifti(vox)
strongest = np.argsort(-np.abs(vox.values[seeds.seeds]))[:2]
fig, axes = plt.subplots(2, 1, figsize=(8, 6))
for ax, k in zip(axes, strongest):
    seed_xyz = vox.coords[seeds.seeds[k]]
    plotting.plot_stat_map(maps.slicer[..., int(k)], axes=ax, cut_coords=seed_xyz,
                           vmax=1.0, threshold=0.05,
                           title=f"region {seeds.labels[k]}: correlation with its seed")
plt.show()

# %%
# The regions' correlation matrix
# -------------------------------
# Under the prior the correlation falls with the distance between seeds (the prior's
# range, ``kappa``); ``posterior=True`` would give it given the observed voxels.

distance = np.linalg.norm(vox.coords[seeds.seeds][:, None] - vox.coords[seeds.seeds][None],
                          axis=2)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
im = ax0.imshow(seeds.matrix, vmin=-1, vmax=1, cmap="RdBu_r")
ax0.set_xticks(range(len(seeds.labels)), seeds.labels)
ax0.set_yticks(range(len(seeds.labels)), seeds.labels)
ax0.set_title("correlation between the regions' seeds")
fig.colorbar(im, ax=ax0, shrink=0.8)
upper = np.triu_indices(len(seeds.labels), 1)
ax1.scatter(distance[upper], seeds.matrix[upper], s=12)
ax1.set_xlabel("distance between seeds (mm)")
ax1.set_ylabel("prior correlation")
ax1.set_title("correlation against distance")
fig.tight_layout()
plt.show()
