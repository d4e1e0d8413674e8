"""
Cortical thickness on a surface mesh from 10% of its vertices
=============================================================

FreeSurfer's fsaverage5 left pial surface (10,242 vertices, shipped with nilearn) and its
cortical thickness map. A random 10% of the vertices with a thickness (the medial wall has
none) are observed; :func:`~flgp.predict_surface` predicts the others. The default
:class:`~flgp.FLGPRegressor` weighs, by their evidence, a graph Matérn prior on the mesh
itself (cotangent stiffness and lumped vertex areas: the SPDE matrices), the low-rank heat
kernel and an exact RBF GP of the vertices' 3-d coordinates.
"""

import matplotlib.pyplot as plt
import numpy as np
from nilearn import datasets, plotting

from flgp import predict_surface

mesh = datasets.load_fsaverage("fsaverage5")["pial"].parts["left"]
thickness = datasets.load_fsaverage_data("fsaverage5", mesh_type="pial",
                                         data_type="thickness").data.parts["left"]
thickness = np.asarray(thickness, dtype=float)
res = predict_surface(mesh, thickness, 0.1, mask=thickness > 0, random_state=0,
                      include_noise=True)
reg = res.regressor
print(f"{int(res.mask.sum())} vertices, {res.n_observed} observed; fitted in "
      f"{res.seconds:.1f} s; chosen: {reg.method_}")
print("log evidence:", {k: round(float(v), 1) for k, v in reg.log_evidence_.items()})

held = res.mask & ~res.observed
err = np.sort((res.mean[held] - thickness[held]) ** 2)
cover = np.mean(np.abs(res.mean[held] - thickness[held]) <= 1.96 * res.sd[held])
print(f"held-out trimmed MSE {np.mean(err[:int(0.99 * err.size)]):.4f} (variance of the "
      f"map {np.var(thickness[res.mask]):.3f}); 95% intervals cover {cover:.3f}")

# %%
# The map, the observed vertices and the prediction
# -------------------------------------------------
observed = np.where(res.observed, thickness, np.nan)
fig, axes = plt.subplots(1, 3, subplot_kw={"projection": "3d"}, figsize=(12, 4))
for ax, (values, title) in zip(axes, [(thickness, "thickness (mm)"),
                                      (observed, "observed 10%"),
                                      (res.mean, "predictive mean")]):
    plotting.plot_surf(mesh, values, axes=ax, view="lateral", cmap="viridis",
                       vmin=1.0, vmax=4.0, title=title, engine="matplotlib")
plt.show()
