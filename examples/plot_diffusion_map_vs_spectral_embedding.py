"""
Diffusion map and spectral embedding of a Swiss roll
====================================================

Both embed a point cloud with eigenvectors of a graph built on it. scikit-learn's
``SpectralEmbedding`` (Laplacian eigenmaps) keeps the eigenvectors as they are;
:class:`~flgp.embedding.DiffusionMap` scales the ``l``-th one by ``μ_l^t``, the ``t``-th
power of its eigenvalue (with ``t`` chosen from the spectrum by default), so that
Euclidean distance in the embedding is the diffusion distance on the cloud, and
coordinates of fast-decaying modes shrink. Points are coloured by their position along the
roll: both methods unroll it, their first coordinate following that position.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.manifold import SpectralEmbedding

from flgp.datasets import make_swiss_roll
from flgp.embedding import DiffusionMap

X, t = make_swiss_roll(1500, random_state=0)     # t: position along the roll

dmap = DiffusionMap(n_components=2, random_state=0)
Y_dm = dmap.fit_transform(X)
Y_se = SpectralEmbedding(n_components=2, n_neighbors=15, random_state=0).fit_transform(X)
print(f"diffusion time t = {dmap.t_:.3g}; eigenvalues mu_1, mu_2 = "
      f"{dmap.eigenvalues_[1]:.4f}, {dmap.eigenvalues_[2]:.4f}")
print(f"scales mu^t of the two diffusion coordinates: "
      f"{dmap.eigenvalues_[1] ** dmap.t_:.3f}, {dmap.eigenvalues_[2] ** dmap.t_:.3f}")

# %%
# Left to right: the cloud, the two embeddings (equal axes), and each method's first
# coordinate against the position along the roll (scaled to [0, 1] and oriented alike:
# eigenvector signs are arbitrary). The roll is about four times longer than it is wide, so
# the second eigenvector is the second harmonic along its length, a function of the first:
# both embeddings are arcs. The diffusion map's arc is flatter, its second coordinate
# scaled by ``μ_2^t`` against ``μ_1^t`` for the first.

fig = plt.figure(figsize=(12, 3.3))
ax = fig.add_subplot(1, 4, 1, projection="3d")
ax.scatter(X[:, 0], X[:, 1], X[:, 2], c=t, s=3, cmap="Spectral")
ax.view_init(10, -70)
ax.set_title("Swiss roll, 1,500 points")
ax.set_axis_off()
for i, (name, Y) in enumerate([("DiffusionMap", Y_dm),
                               ("SpectralEmbedding (scikit-learn)", Y_se)], start=2):
    ax = fig.add_subplot(1, 4, i)
    ax.scatter(Y[:, 0], Y[:, 1], c=t, s=3, cmap="Spectral")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(name, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
ax = fig.add_subplot(1, 4, 4)
for name, Y in [("DiffusionMap", Y_dm), ("SpectralEmbedding", Y_se)]:
    c = Y[:, 0] * np.sign(np.corrcoef(Y[:, 0], t)[0, 1])
    ax.scatter(t, (c - c.min()) / np.ptp(c), s=2, label=name)
ax.set_xlabel("position along the roll")
ax.set_title("first coordinate", fontsize=10)
ax.legend(fontsize=8, markerscale=4)
fig.tight_layout()
plt.show()
