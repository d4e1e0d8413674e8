r"""Classification at full resolution: the graph Matérn GP classifier in its
small-amplitude limit, and a prior on the classes' sizes.

**The latent.** Each class latent ``f_c ~ GP(0, A G_ν)`` on the nodes of a graph, with the
graph Matérn covariance ``G_ν = P (L + κ²I)^{-ν} P`` (``L = D - W``; ``P = I - 11ᵀ/n``
removes the constant mode, the GP form of Poisson learning's centring) and a multinomial
probit or softmax likelihood. As the amplitude ``A → 0`` the posterior mean of ``f_c`` is,
to first order in ``A``, ``A γ G_ν b_c`` with ``b_c`` the likelihood's gradient at ``f = 0``:
``b_c = Σ_l (1[y_l = c] - 1/C) e_l`` up to a constant ``γ`` - the labels as sources, centred.
For ``ν = 1`` and ``κ → 0`` that is exactly Poisson learning's solution (Calder et al.
2020); it needs ``C`` sparse solves whatever the number of labels (:func:`green_scores`:
algebraic-multigrid-preconditioned conjugate gradients).

**The amplitude from the cloud.** With one label per class the evidence cannot set ``A``
(it is nearly flat; docs/few_labels.md) and leave-one-out cannot calibrate a class with a
single label. The scale is instead set from the cloud: the class probabilities are the
softmax of the scores scaled so that their spread over the unlabelled points is
``SCORE_SPREAD = 5`` logits, ``p_c(x) ∝ exp(5 u_c(x) / sd(u))``. Measured on six clouds
(MNIST, a Swiss roll, a torus, a helix, two moons, six circles; 1 and 3 labels per class):
spreads of 3 / 5 / 8 logits give expected calibration errors of 0.08-0.13 / 0.04-0.09 /
0.03-0.15 - 5 the best compromise (docs/few_labels.md, "Full resolution").

**Class sizes** (:func:`class_size_prior`, :func:`balance_to_prior`). A class whose one
label sits near a boundary is swallowed by its neighbours' when nothing says how large
each class is. The probabilities are re-weighted by one factor a class so that their
average over the cloud equals the classes' prior shares ``π`` - the posterior under a
prior that fixes the shares (the fixed point of Saerens, Latinne and Decaestecker's 2002
prior adjustment with ``π`` given; found by Newton's method on its convex dual). ``π`` is
balanced unless the labels say otherwise - unless the Bayes factor of "equal classes"
against "unknown shares" (uniform Dirichlet) for the label counts is below one - and then
the labels' frequencies smoothed by one count a class (their posterior mean); or the
user's. Stratified labels (equal counts) always give balanced shares. Measured on MNIST
with 100 and 200 random labels (unequal counts from balanced classes), re-weighting to the
smoothed label frequencies raised the error from 4.7-6.5 % (balanced) to 8.4-17.1 %: a
hundred labels estimate ten shares too poorly to be used unless the evidence asks for it.
"""

from __future__ import annotations

import numpy as np

from .prior import SparsePrecisionPrior

__all__ = ["green_scores", "scores_to_probabilities", "class_size_prior",
           "balanced_log_odds", "balance_to_prior", "SCORE_SPREAD", "KAPPA_RELATIVE"]

# the spread over the cloud of the scaled scores, in logits (see the module notes)
SCORE_SPREAD = 5.0
# κ² relative to the graph's own 1 / length² (the median of diag(C⁻¹G): the median degree
# on a graph of unit mass): a nearly intrinsic prior (Poisson learning's κ = 0)
KAPPA_RELATIVE = 1e-5
# relative residual of the conjugate-gradient solves (Poisson learning's graphlearning
# default is 1e-3 as well; the argmax moves at about one point in 10^4 against 1e-8)
SOLVE_TOL = 1e-3


def green_scores(graph, labelled, codes, n_classes, *, nu: int = 1, kappa2=None,
                 tol: float = SOLVE_TOL):
    """``U = G_ν B`` (``n x C``): the class scores of every node (see the module notes),
    centred over the nodes. ``labelled``: distinct node indices, ``codes``: their classes.
    ``G_ν`` is the centred graph Matérn prior
    (:class:`~flgp.precision.prior.SparsePrecisionPrior`, AMG-CG solves) and ``G_ν B`` its
    cross-covariance with the labelled nodes times the centred sources."""
    C = int(n_classes)
    labelled = np.asarray(labelled, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    sources = np.zeros((labelled.size, C))
    sources[np.arange(labelled.size), codes] = 1.0
    sources -= sources.mean(axis=0)
    if kappa2 is None:
        # relative to the graph's own 1 / length² (PointGraph.own_units): the same prior
        # whatever the units of the points
        kappa2 = KAPPA_RELATIVE / graph.own_units()[0] ** 2
    prior = SparsePrecisionPrior(graph, nu=nu, kappa2=kappa2, centred=True, solver="amg",
                                 tol=tol)
    # every row of the sources sums to 0 (one 1 a label, minus the label shares), so
    # every row of U does: C - 1 solves and the last column is minus the sum of the others
    U = prior.cross_covariance(labelled, weights=sources[:, :-1])
    return np.column_stack([U, -U.sum(axis=1)])


def scores_to_probabilities(U, scale, weights=None):
    """``p_c ∝ w_c exp(U_c / scale)`` row by row (``scale = sd(u) / SCORE_SPREAD``)."""
    Z = np.asarray(U, dtype=np.float64) / float(scale)
    Z -= Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    if weights is not None:
        P *= weights
    P /= P.sum(axis=1, keepdims=True)
    return P


def balanced_log_odds(counts) -> float:
    """Log Bayes factor of "the classes are equally large" against "their shares are
    unknown" (a uniform Dirichlet prior on the shares) for the label counts of a random
    sample: ``-m log C - [log Γ(C) + Σ_c log n_c! - log Γ(m + C)]``. Positive when the
    counts are what equal classes would give."""
    from scipy.special import gammaln

    n = np.asarray(counts, dtype=np.float64)
    C, m = n.size, float(n.sum())
    return float(-m * np.log(C) - (gammaln(C) + gammaln(n + 1.0).sum() - gammaln(m + C)))


def class_size_prior(codes, n_classes, prior="auto"):
    """The classes' prior shares ``π``: ``"auto"`` - balanced unless the label counts say
    otherwise (:func:`balanced_log_odds` below 0), then the label counts plus one,
    normalised (the shares' posterior mean under a uniform Dirichlet prior); ``"balanced"``;
    ``"labels"`` - those smoothed label frequencies; or the user's shares (validated)."""
    C = int(n_classes)
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=C).astype(float)
    if isinstance(prior, str):
        if prior == "balanced" or (prior == "auto" and balanced_log_odds(counts) >= 0.0):
            return np.full(C, 1.0 / C)
        if prior in ("auto", "labels"):
            return (counts + 1.0) / (counts.sum() + C)
        raise ValueError(f"class_prior must be 'auto', 'balanced', 'labels', None or "
                         f"{C} shares; got {prior!r}.")
    pi = np.asarray(prior, dtype=np.float64).ravel()
    if pi.shape != (C,) or not np.all(np.isfinite(pi)) or np.any(pi <= 0):
        raise ValueError(f"class_prior must hold {C} positive finite shares (one a class, "
                         f"in the order of classes_); got {prior!r}.")
    return pi / pi.sum()


def balance_to_prior(P, prior, max_iter: int = 50, tol: float = 1e-9):
    """``(weights, P')``: one factor a class such that the rows of ``P' ∝ P w`` average to
    ``prior`` over the cloud (see the module notes). ``w = e^θ`` minimises the convex
    ``F(θ) = mean_i log Σ_c P_ic e^{θ_c} - πᵀθ``, whose gradient is the shares' error; Newton's
    method with its ``C x C`` Hessian ``mean_i (diag q_i - q_i q_iᵀ)`` and step halving
    converges in a few steps where iterative proportional fitting crawls (well separated
    classes: probabilities near 0 and 1)."""
    P = np.asarray(P, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    n, C = P.shape
    logP = np.log(np.maximum(P, 1e-300))
    theta = np.zeros(C)

    def state(th):
        Z = logP + th
        top = Z.max(axis=1, keepdims=True)
        E = np.exp(Z - top)
        s = E.sum(axis=1, keepdims=True)
        value = float(np.mean(np.log(s[:, 0]) + top[:, 0]) - prior @ th)
        return value, E / s

    value, Q = state(theta)
    for _ in range(int(max_iter)):
        grad = Q.mean(axis=0) - prior
        if np.max(np.abs(grad)) < tol:
            break
        H = np.diag(Q.mean(axis=0)) - (Q.T @ Q) / n + 1e-12 * np.eye(C)
        step = -np.linalg.lstsq(H, grad, rcond=None)[0]
        size = 1.0
        while size > 1e-8:
            new_value, new_Q = state(theta + size * step)
            if new_value <= value - 1e-4 * size * float(-grad @ step):
                break
            size *= 0.5
        theta, value, Q = theta + size * step, new_value, new_Q
    w = np.exp(theta - theta.max())
    return w, Q
