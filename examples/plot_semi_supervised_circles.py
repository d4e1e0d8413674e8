"""
Semi-supervised classification: six concentric circles
======================================================

Six circles, classes alternating from one circle to the next, and labels for only 100 of
2,400 points. A Gaussian process with a Euclidean (RBF) kernel cannot tell neighbouring
circles apart; the heat kernel of the point cloud follows the circles, because it is
estimated from the unlabelled points too (the FLGP paper's Table 1 in miniature).
"""

import matplotlib.pyplot as plt
import numpy as np

from flgp import Eigenbasis, FLGPClassifier, HeatKernelPrior, RBFPrior
from flgp.datasets import make_concentric_circles

X, y = make_concentric_circles(2400, random_state=0)
X = (X - X.mean(0)) / X.std(0) / np.sqrt(2)          # the FLGP paper's preprocessing

# -1 marks an unlabelled row
rng = np.random.default_rng(1)   # not 0: the data generator used seed 0
labelled = rng.choice(len(y), 100, replace=False)
y_semi = np.full(len(y), -1)
y_semi[labelled] = y[labelled]
unlabelled = y_semi == -1

# %%
# Fit the heat-kernel GP (LAE cross kernel, k-means induced points: LKFLGP) and the RBF
# baseline on the same labels. ``transduction_`` holds the predicted label of every point
# of the cloud.

flgp_clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=400)), random_state=0).fit(X, y_semi)
rbf_clf = FLGPClassifier(RBFPrior()).fit(X, y_semi)
for name, clf in [("heat kernel (LKFLGP)", flgp_clf), ("RBF kernel", rbf_clf)]:
    error = np.mean(clf.transduction_[unlabelled] != y[unlabelled])
    print(f"{name:>20}: error on the unlabelled points {100 * error:.1f}%")

# %%
# The predicted probability of class 1 at every point; black circles mark the labelled
# points.

fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), sharex=True, sharey=True)
for ax, clf, title in [(axes[0], flgp_clf, "heat kernel (LKFLGP)"),
                       (axes[1], rbf_clf, "RBF kernel")]:
    proba = clf.predict_proba(X)[:, 1]
    ax.scatter(X[:, 0], X[:, 1], c=proba, s=3, cmap="coolwarm", vmin=0, vmax=1)
    ax.scatter(X[labelled, 0], X[labelled, 1], c=y[labelled], s=30, cmap="coolwarm",
               vmin=0, vmax=1, edgecolors="k")
    error = np.mean(clf.transduction_[unlabelled] != y[unlabelled])
    ax.set_title(f"{title}: {100 * error:.1f}% error")
    ax.set_aspect("equal")
fig.suptitle("P(class 1), 100 labelled points of 2,400")
fig.tight_layout()
plt.show()
