"""The full-resolution classifier (FLGPClassifier(method="gmrf")) and its parts: the
bucketed k-NN search, the self-tuning graph, the Green-function scores and the
class-size prior."""

import numpy as np
import pytest
import scipy.sparse as sp

from flgp import FLGPClassifier
from flgp.graph.knn import bucket_knn, self_tuning_knn_graph
from flgp.precision.classification import (balance_to_prior, class_size_prior,
                                           green_scores, scores_to_probabilities)


def _blobs(n=1500, p=30, C=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((C, p)) * 3.0
    y = rng.integers(0, C, n)
    X = centres[y] + rng.standard_normal((n, p))
    return X, y


def test_bucket_knn_against_brute_force():
    """Every returned pair is a true distance (exactly), sorted; the recall of the 10
    nearest is high on a clustered 30-d cloud."""
    X, _ = _blobs()
    ind, sq = bucket_knn(X, 10, n_buckets=20)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    exact = np.argsort(D, axis=1)[:, :10]
    np.testing.assert_allclose(sq, np.take_along_axis(D, ind, 1), rtol=1e-12)
    assert np.all(np.diff(sq, axis=1) >= 0) and np.all(ind != np.arange(len(X))[:, None])
    recall = np.mean([np.intersect1d(a, b).size / 10 for a, b in zip(ind, exact)])
    assert recall > 0.95
    with pytest.raises(ValueError, match="n_neighbors"):
        bucket_knn(X[:5], 5)


def test_self_tuning_graph_is_poisson_learnings():
    """w_ij = exp(-4 d_ij² / d_k(i)²) on each point's k nearest, symmetrised as (W + Wᵀ)/2."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    g = self_tuning_knn_graph(X, 5)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    nn = np.argsort(D, 1)[:, :5]
    W = np.zeros((200, 200))
    for i in range(200):
        dk2 = D[i, nn[i, -1]]
        W[i, nn[i]] = np.exp(-4 * D[i, nn[i]] / dk2)
    W = 0.5 * (W + W.T)
    np.testing.assert_allclose(g.adjacency.toarray(), W, atol=1e-12)
    np.testing.assert_allclose(g.stiffness.toarray(), np.diag(W.sum(1)) - W, atol=1e-12)


def test_green_scores_are_the_centred_pseudo_inverse_solution():
    """U = P (L + κ²I)^{-ν} P B with centred label sources, against a dense solve."""
    X, y = _blobs(300, 5, 3)
    g = self_tuning_knn_graph(X, 8)
    lab = np.array([0, 1, 2, 3, 4, 5])
    kappa2 = 1e-3
    for nu in (1, 2):
        U = green_scores(g, lab, y[lab], 3, nu=nu, kappa2=kappa2, tol=1e-12)
        B = np.zeros((300, 3))
        np.add.at(B, (lab, y[lab]), 1.0)
        B[lab] -= B[lab].mean(0)
        K = g.stiffness.toarray() + kappa2 * np.eye(300)
        P = np.eye(300) - 1.0 / 300
        ref = B
        for _ in range(nu):
            ref = P @ np.linalg.solve(K, P @ ref)
        np.testing.assert_allclose(U, ref, atol=1e-7 * np.abs(ref).max())


def test_class_size_prior_and_balance():
    assert np.allclose(class_size_prior([0, 1, 2], 3), 1 / 3)
    np.testing.assert_allclose(class_size_prior([0, 0, 0, 1], 3), [4 / 7, 2 / 7, 1 / 7])
    np.testing.assert_allclose(class_size_prior([0, 1], 2, [3, 1]), [0.75, 0.25])
    with pytest.raises(ValueError, match="positive finite shares"):
        class_size_prior([0, 1], 2, [1, -1])
    P = scores_to_probabilities(np.random.default_rng(0).standard_normal((500, 3)), 0.5)
    w, Q = balance_to_prior(P, np.array([0.5, 0.3, 0.2]))
    np.testing.assert_allclose(Q.mean(0), [0.5, 0.3, 0.2], atol=1e-5)
    np.testing.assert_allclose(Q.sum(1), 1.0)
    # the weights are one factor a class: Q ∝ P w row by row
    R = P * w
    np.testing.assert_allclose(Q, R / R.sum(1, keepdims=True))


def test_gmrf_classifier_on_blobs_with_one_label_a_class():
    X, y = _blobs()
    lab = np.array([np.flatnonzero(y == c)[0] for c in range(4)])
    yy = np.full(len(y), -1)
    yy[lab] = y[lab]
    clf = FLGPClassifier(method="gmrf").fit(X, yy)
    unl = yy == -1
    assert clf.method_ == "gmrf" and clf.graph_.kind == "knn"
    assert np.mean(clf.transduction_[unl] != y[unl]) < 0.05
    P = clf.label_distributions_
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(1), 1.0)
    np.testing.assert_allclose(P.mean(0), clf.class_prior_, atol=1e-4)   # balanced shares
    # new points: at a node, that node's probabilities; near one, close to them
    np.testing.assert_allclose(clf.predict_proba(X[:20]), P[:20], atol=1e-9)
    assert np.mean(clf.predict(X[:200] + 0.01) == clf.transduction_[:200]) > 0.95
    with pytest.raises(ValueError, match="method_='gmrf'"):
        clf.predict_latent(X[:3])
    # no class prior: the softmax of the scores alone
    raw = FLGPClassifier(method="gmrf", class_prior=None).fit(X, yy)
    assert raw.class_prior_ is None and np.allclose(raw.class_weights_, 1.0)


def test_gmrf_classifier_graph_that_falls_apart_warns():
    rng = np.random.default_rng(0)
    X = np.r_[rng.standard_normal((100, 2)), rng.standard_normal((100, 2)) + 100.0]
    yy = np.full(200, -1)
    yy[[0, 1]] = [0, 1]
    with pytest.warns(UserWarning, match=r"falls apart into 2 pieces \(sizes 100, 100\); "
                                         r"1 of them hold no label \(sizes 100\)"):
        clf = FLGPClassifier(method="gmrf").fit(X, yy)
    P = clf.label_distributions_
    assert np.all(np.isfinite(P))
    # the unlabelled piece: one constant score a class, so every point at the same
    # probabilities
    np.testing.assert_allclose(P[100:], P[100:101].repeat(100, 0), atol=1e-6)


def test_balanced_log_odds_is_the_bayes_factor():
    """Against a direct sum over the multinomial likelihood: equal shares, and the shares
    integrated over the uniform Dirichlet (the Dirichlet-multinomial's closed form, checked
    by Monte Carlo)."""
    from math import factorial, log

    from flgp.precision.classification import balanced_log_odds

    counts = np.array([3, 1, 0])
    m, C = counts.sum(), 3
    coef = factorial(m) / np.prod([factorial(c) for c in counts])
    p_equal = coef * float(C) ** (-int(m))
    rng = np.random.default_rng(0)
    shares = rng.dirichlet(np.ones(C), 400_000)
    p_unknown = coef * np.mean(np.prod(shares ** counts, axis=1))
    assert abs(balanced_log_odds(counts) - log(p_equal / p_unknown)) < 0.01
    # stratified counts favour equal classes; a 70 / 30 sample does not
    assert balanced_log_odds([10] * 10) > 0 and balanced_log_odds([70, 30]) < -5
    np.testing.assert_allclose(class_size_prior([0] * 70 + [1] * 30, 2), [71 / 102, 31 / 102])
    np.testing.assert_allclose(class_size_prior([0] * 11 + [1] * 9, 2), [0.5, 0.5])


def test_auto_method_follows_the_fewest_labels():
    """method='auto': the full-resolution classifier while some class has at most two
    labels, the low-rank heat kernel from three a class on; the labelling loop says why it
    cannot run on the former."""
    X, y = _blobs(800, 5, 3)
    for per_class, expected in ((1, "gmrf"), (2, "gmrf"), (3, "flgp")):
        lab = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(3)])
        yy = np.full(len(y), -1)
        yy[lab] = y[lab]
        clf = FLGPClassifier(method="auto", n_induced=100).fit(X, yy)
        assert clf.method_ == expected
        assert np.mean(clf.transduction_[yy == -1] != y[yy == -1]) < 0.05
    one = np.concatenate([np.flatnonzero(y == c)[:1] for c in range(3)])
    yy = np.full(len(y), -1)
    yy[one] = y[one]
    clf = FLGPClassifier(method="gmrf").fit(X, yy)
    with pytest.raises(ValueError, match="method='gmrf'"):
        clf.suggest_labels(2)
