"""The full-resolution classifier (FLGPClassifier(method="graph_matern")) and its parts: the
bucketed k-NN search, the self-tuning graph, the Green-function scores and the
class-size prior."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from flgp import Eigenbasis, FLGPClassifier, GraphMaternPrior, HeatKernelPrior, RBFPrior
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


def test_bucket_knn_with_fewer_candidates_than_neighbours_searches_every_row():
    """Buckets of a few points probed one at a time: those with fewer candidates than
    the neighbours asked for are searched against the whole cloud - distinct neighbours
    (each once, none the point itself), the exact ones for those points."""
    X, _ = _blobs(n=200, p=20)
    ind, sq = bucket_knn(X, 5, n_buckets=100, n_probe=1)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    np.testing.assert_allclose(sq, np.take_along_axis(D, ind, 1), rtol=1e-12)
    assert all(np.unique(row).size == 5 for row in ind)
    assert np.all(ind != np.arange(len(X))[:, None])
    exact = np.all(np.isclose(sq, np.sort(D, axis=1)[:, :5], rtol=1e-9), axis=1)
    assert 0 < exact.sum() < len(X)        # the small buckets' points, not the others


def test_bucket_selection_under_a_bound_is_argpartitions():
    """The search's selection (the k smallest of a row ranked only among the entries under
    the k-th smallest of a subset of its columns) picks the same columns as a full
    argpartition, also with ties, infinities and a subset that holds the row's minimum."""
    from flgp.graph.knn import _smallest_under_bound

    rng = np.random.default_rng(3)
    for trial in range(20):
        S = rng.standard_normal((40, 300)).astype(np.float32)
        S[rng.random(S.shape) < 0.02] = np.inf
        if trial % 2:
            S = np.round(S, 1)                                     # many ties
        own = slice(50 + trial, 120 + trial)
        k = int(rng.integers(1, 12))
        got = _smallest_under_bound(S, k, S[:, own])
        want = np.argpartition(S, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(S, want, 1).max(1)
        assert got.shape == (40, k) and all(len(set(r)) == k for r in got)
        # the same values (the columns may differ only among ties at the k-th value)
        np.testing.assert_array_equal(np.sort(np.take_along_axis(S, got, 1), 1),
                                      np.sort(np.take_along_axis(S, want, 1), 1))
        assert np.all(np.take_along_axis(S, got, 1).max(1) == kth)


def test_bucket_knn_does_not_depend_on_threads():
    """The buckets are searched on several threads; each writes its own rows, so the
    neighbours are the same on one thread and on two."""
    import torch

    X, _ = _blobs(900, 20, 3, seed=1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bucket_knn(X, 7, n_buckets=15)
        torch.set_num_threads(2)
        two = bucket_knn(X, 7, n_buckets=15)
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


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


def test_class_shares_that_do_not_sum_to_one_are_normalised():
    """class_prior=[2, 1] (or a mapping {0: 4, 1: 2}) is the prior [2/3, 1/3]: the fitted
    class_prior_ says so and the fit equals the one given the normalised shares."""
    X, y = _blobs(400, 2, 2)
    yy = np.full(len(y), -1)
    yy[[int(np.flatnonzero(y == c)[i]) for c in (0, 1) for i in (0, 1)]] = [0, 0, 1, 1]
    ref = FLGPClassifier(class_prior=[2 / 3, 1 / 3]).fit(X, yy)
    for shares in ([2, 1], {0: 4.0, 1: 2.0}):
        clf = FLGPClassifier(class_prior=shares).fit(X, yy)
        np.testing.assert_allclose(clf.class_prior_, [2 / 3, 1 / 3], rtol=1e-12)
        np.testing.assert_allclose(clf.label_distributions_, ref.label_distributions_,
                                   atol=1e-10)


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


def test_graph_matern_classifier_on_blobs_with_one_label_a_class():
    X, y = _blobs()
    lab = np.array([np.flatnonzero(y == c)[0] for c in range(4)])
    yy = np.full(len(y), -1)
    yy[lab] = y[lab]
    clf = FLGPClassifier(GraphMaternPrior()).fit(X, yy)
    unl = yy == -1
    assert clf.method_ == "graph_matern" and clf.graph_.kind == "knn"
    assert np.mean(clf.transduction_[unl] != y[unl]) < 0.05
    P = clf.label_distributions_
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(1), 1.0)
    np.testing.assert_allclose(P.mean(0), clf.class_prior_, atol=1e-4)   # balanced shares
    # new points: at a node, that node's probabilities; near one, close to them
    np.testing.assert_allclose(clf.predict_proba(X[:20]), P[:20], atol=1e-9)
    assert np.mean(clf.predict(X[:200] + 0.01) == clf.transduction_[:200]) > 0.95
    # the latent posterior at the nodes: the scores and positive variances
    mean, var = clf.predict_latent(X[:20])
    assert mean.shape == var.shape == (20, 4) and np.all(var > 0)
    np.testing.assert_allclose(mean, clf._chosen_fit.scores[:20], atol=1e-12)
    # no class prior: the softmax of the scores alone
    raw = FLGPClassifier(GraphMaternPrior(), class_prior=None).fit(X, yy)
    assert raw.class_prior_ is None and np.allclose(raw.class_weights_, 1.0)


def test_graph_matern_classifier_graph_that_falls_apart_warns():
    rng = np.random.default_rng(0)
    X = np.r_[rng.standard_normal((100, 2)), rng.standard_normal((100, 2)) + 100.0]
    yy = np.full(200, -1)
    yy[[0, 1]] = [0, 1]
    with pytest.warns(UserWarning, match=r"falls apart into 2 pieces \(sizes 100, 100\); "
                                         r"1 of them hold no label \(sizes 100\)"):
        clf = FLGPClassifier(GraphMaternPrior()).fit(X, yy)
    P = clf.label_distributions_
    assert np.all(np.isfinite(P))
    # the unlabelled piece gets the prior: the class prior's probabilities (balanced
    # here) and latent means 0; the labelled piece alone carries the balanced shares
    np.testing.assert_array_equal(P[100:], np.full((100, 2), 0.5))
    np.testing.assert_allclose(P[:100].mean(0), clf.class_prior_, atol=1e-6)
    np.testing.assert_array_equal(clf.predict_latent(X[100:110])[0], 0.0)
    # new points: among the unlabelled piece's nodes the prior, among the labelled
    # piece's its probabilities
    np.testing.assert_allclose(clf.predict_proba(X[100:110] + 0.01), 0.5, atol=1e-12)
    np.testing.assert_allclose(clf.predict_proba(X[:10]), P[:10], atol=1e-9)


def test_graph_matern_classifier_unlabelled_piece_gets_an_unequal_class_prior():
    """A user's unequal class prior: the unlabelled piece's probabilities are exactly it
    (never re-weighted by the labelled piece's class factors), the labelled piece's average
    it too."""
    rng = np.random.default_rng(1)
    X = np.r_[rng.standard_normal((120, 2)), rng.standard_normal((80, 2)) + 100.0]
    yy = np.full(200, -1)
    yy[[0, 1, 2]] = [0, 1, 2]
    prior = np.array([0.5, 0.3, 0.2])
    with pytest.warns(UserWarning, match="hold no label"):
        clf = FLGPClassifier(GraphMaternPrior(), class_prior=prior).fit(X, yy)
    P = clf.label_distributions_
    np.testing.assert_allclose(P[120:], np.tile(prior, (80, 1)), atol=1e-15)
    np.testing.assert_allclose(P[:120].mean(0), prior, atol=1e-6)


def test_classifier_warns_of_a_point_labelled_with_two_classes():
    from flgp.models.classifier import warn_conflicting_labels

    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, 2))
    X[7] = X[3]                                    # one point, twice
    X[9] = X[4]                                    # twice, the same class: fine
    yy = np.full(300, -1)
    yy[[3, 7, 4, 9, 20]] = [0, 1, 1, 1, 0]
    with pytest.warns(UserWarning, match=r"1 point\(s\) are labelled more than once with "
                                         r"different classes .*row 3 \(0\), row 7 \(1\)"):
        clf = FLGPClassifier().fit(X, yy)
    assert np.all(np.isfinite(clf.label_distributions_))
    # at full resolution too the point's probabilities are shared between its classes:
    # both copies observe both classes (before, each kept its own and they differed)
    P = clf.label_distributions_
    assert clf.method_ == "graph_matern"
    np.testing.assert_allclose(P[3], P[7], rtol=1e-12)
    # no warning without a clash
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_conflicting_labels(X, np.array([3, 4, 9, 20]), np.array([0, 1, 1, 0]),
                                np.array([0, 1]))


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


def test_auto_is_full_resolution_and_suggests_labels():
    """method='auto' (the default): the full-resolution classifier for a numpy cloud at any
    label count; its labelling loop runs (margin by default, the rows not labelled yet,
    ``variance_reduction`` refused with what to use)."""
    X, y = _blobs(800, 5, 3)
    for per_class in (1, 2, 3, 10):
        lab = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(3)])
        yy = np.full(len(y), -1)
        yy[lab] = y[lab]
        clf = FLGPClassifier([HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(),
                              RBFPrior()]).fit(X, yy)
        assert clf.method_ == "graph_matern"
        assert np.mean(clf.transduction_[yy == -1] != y[yy == -1]) < 0.05
    rows = clf.suggest_labels(5)
    assert rows.size == 5 and np.unique(rows).size == 5 and np.all(yy[rows] == -1)
    with pytest.raises(ValueError, match="margin"):
        clf.suggest_labels(2, strategy="variance_reduction")
    with pytest.raises(ValueError, match="at most"):
        clf.suggest_labels(len(y))


def _all_pair_distances(lengths):
    """Shortest paths by min-plus squaring of the dense length matrix (a reference
    independent of Dijkstra): ``(n, n)``, ``inf`` between pieces."""
    n = lengths.shape[0]
    D = np.full((n, n), np.inf)
    L = lengths.tocoo()
    D[L.row, L.col] = L.data
    np.fill_diagonal(D, 0.0)
    for _ in range(int(np.ceil(np.log2(n))) + 1):
        D = np.minimum(D, np.min(D[:, :, None] + D[None, :, :], axis=1))
    return D


def test_margin_suggestions_weigh_the_score_gap_by_the_distance_to_the_labels():
    """The default suggestion at full resolution is the unlabelled row with the largest
    ``(1 - g / max g) d / max d``: ``g`` the gap of its two largest latent means
    (predict_latent at the nodes, sorted here by numpy) - not the probabilities' margin,
    which the class weights move - and ``d`` its shortest-path distance to the nearest
    label with edge lengths ``-log(w / max w)`` (all pairs by min-plus products here); each
    pick of a batch then counts as a label. A piece of the graph without a label comes
    first."""
    from flgp.models.labelling import graph_edge_lengths

    X, y = _blobs(600, 5, 3, seed=4)
    yy = np.full(len(y), -1)
    lab = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(3)])
    yy[lab] = y[lab]
    clf = FLGPClassifier(class_prior=[0.6, 0.3, 0.1]).fit(X, yy)
    mean, _ = clf.predict_latent(X)
    unl = np.flatnonzero(yy == -1)
    top = np.sort(mean[unl], axis=1)[:, -2:]
    gap = top[:, 1] - top[:, 0]
    W = -clf.graph_.stiffness.tocsr()
    W.setdiag(0.0)
    W.eliminate_zeros()
    lengths = W.copy()
    lengths.data = -np.log(W.data / W.data.max())
    np.testing.assert_allclose(graph_edge_lengths(clf.graph_.stiffness).toarray(),
                               np.maximum(lengths.toarray(), 1e-3 * lengths.data.mean())
                               * (W.toarray() > 0))
    D = _all_pair_distances(graph_edge_lengths(clf.graph_.stiffness))
    uncertainty = 1.0 - gap / gap.max()
    rows, sources = [], list(lab)
    for _ in range(3):
        d = D[np.ix_(unl, sources)].min(axis=1)
        score = uncertainty * d / d.max()
        score[np.isin(unl, rows)] = -np.inf
        rows.append(unl[np.argmax(score)])
        sources.append(rows[-1])
    np.testing.assert_array_equal(clf.suggest_labels(3), rows)
    P = clf.label_distributions_[unl]
    by_probability = unl[np.argmin(np.diff(np.sort(P, axis=1)[:, -2:], axis=1)[:, 0])]
    assert by_probability != clf.suggest_labels(1)[0]       # the weights move that one
    # an unlabelled piece far away: a row of it first (one label there speaks for it all:
    # the batch moves on)
    far = np.random.default_rng(5).standard_normal((40, 5)) + 60.0
    X2, yy2 = np.r_[X, far], np.r_[yy, np.full(40, -1)]
    with pytest.warns(UserWarning, match="hold no label"):
        clf2 = FLGPClassifier().fit(X2, yy2)
    rows = clf2.suggest_labels(3)
    assert rows[0] >= len(X) and np.all(rows[1:] < len(X))


def test_the_loop_asks_the_clusters_no_label_has_reached():
    """Sixteen blobs on a ring, classes at random (the labelling loop's clustered
    benchmark), a label in each of two blobs, two rounds of four suggestions with a refit
    between: the eight picks lie in eight different blobs, none of the two first
    labelled, on three draws (the latent posterior's long correlations reach every blob
    and leave some confidently wrong; the graph distance to the labels does not)."""
    angles = np.arange(16) * 2 * np.pi / 16
    centres = np.c_[np.cos(angles), np.sin(angles)] * 8.0
    blob = np.repeat(np.arange(16), 250)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = np.concatenate([rng.standard_normal((250, 2)) * 0.5 + c for c in centres])
        classes = rng.integers(0, 2, 16)
        classes[[0, 5]] = [0, 1]
        y = classes[blob]
        yy = np.full(len(X), -1)
        yy[[0, 250 * 5]] = [0, 1]
        clf = FLGPClassifier(warm_start=True)
        picked = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)      # a piece without labels
            for _ in range(2):
                rows = clf.fit(X, yy).suggest_labels(4)
                picked.extend(blob[rows])
                yy[rows] = y[rows]
        assert np.unique(picked).size == 8 and not np.isin(picked, [0, 5]).any(), picked


# -- the least-squares GP classifier (issue 43) --------------------------------------------

def _small_problem(n=300, seed=0, per_class=(3, 4, 2)):
    from flgp.precision import SparsePrecisionPrior

    rng = np.random.default_rng(seed)
    X, y = _blobs(n, 3, 3, seed)
    g = self_tuning_knn_graph(X, 8)
    lab = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), k, replace=False)
                                  for c, k in enumerate(per_class)]))
    prior = SparsePrecisionPrior(g, nu=1, kappa2=1e-3, centred=True, solver="amg",
                                 tol=1e-12)
    Q = g.stiffness.toarray() + 1e-3 * np.diag(g.mass)
    P = np.eye(n) - 1.0 / n
    K = P @ np.linalg.inv(Q) @ P
    return X, y, g, lab, prior, K


def test_least_squares_classifier_is_the_dense_gp_regression():
    """Posterior mean, evidence (against scipy's normal density at the profiled noise) and variances of
    LeastSquaresClassification equal the dense GP regression of the centred one-hot
    labels; the column store solves each label's column once."""
    from scipy.stats import multivariate_normal

    from flgp.precision.classification import LabelledColumns, LeastSquaresClassification

    X, y, g, lab, prior, K = _small_problem()
    columns = LabelledColumns(prior)
    W = columns(lab)
    np.testing.assert_allclose(W, K[:, lab], atol=1e-8 * np.abs(K).max())
    codes, C, rho = y[lab], 3, 0.3
    model = LeastSquaresClassification(W, lab, codes, C, rho)
    s = np.mean(np.diag(K)[lab])
    T = np.eye(C)[codes]
    T -= T.mean(0)
    S = rho * K[np.ix_(lab, lab)] / s + np.eye(lab.size)
    mean = rho * K[:, lab] / s @ np.linalg.solve(S, T)
    np.testing.assert_allclose(model.mean, mean, atol=1e-8)
    noise = np.einsum("ic,ic->c", T, np.linalg.solve(S, T)) / lab.size
    ev = sum(multivariate_normal(np.zeros(lab.size), noise[c] * S).logpdf(T[:, c])
             for c in range(C))
    assert model.log_evidence == pytest.approx(ev, abs=1e-6)
    var = rho * np.diag(K) / s - rho ** 2 * np.einsum(
        "ij,ji->i", K[:, lab] / s, np.linalg.solve(S, K[lab] / s))
    np.testing.assert_allclose(model.unit_variances(W, np.diag(K)), var, atol=1e-8)
    # columns asked again are not solved again; new ones are
    calls = []
    original = prior.cross_covariance
    prior.cross_covariance = lambda nodes: calls.append(len(nodes)) or original(nodes)
    columns(lab[::-1])
    columns(np.r_[lab, [0, 1]])
    assert calls == [2]


def test_least_squares_classifier_with_a_class_without_labels():
    """A fourth class no label has: its latent mean 0 and its noise the labelled classes'
    mean (no targets profile it); the other classes' means and the evidence (against
    scipy's normal density, labelled classes only) as if it were absent."""
    from scipy.stats import multivariate_normal

    from flgp.precision.classification import LabelledColumns, LeastSquaresClassification

    X, y, g, lab, prior, K = _small_problem()
    W = LabelledColumns(prior)(lab)
    codes, rho = y[lab], 0.3
    three = LeastSquaresClassification(W, lab, codes, 3, rho)
    four = LeastSquaresClassification(W, lab, codes, 4, rho)
    np.testing.assert_array_equal(four.mean[:, 3], 0.0)
    np.testing.assert_allclose(four.mean[:, :3], three.mean, atol=1e-12)
    np.testing.assert_allclose(four.noise[:3], three.noise, rtol=1e-12)
    assert four.noise[3] == pytest.approx(three.noise.mean(), rel=1e-12)
    s = np.mean(np.diag(K)[lab])
    S = rho * K[np.ix_(lab, lab)] / s + np.eye(lab.size)
    T = np.eye(3)[codes]
    T -= T.mean(0)
    ev = sum(multivariate_normal(np.zeros(lab.size), three.noise[c] * S).logpdf(T[:, c])
             for c in range(3))
    assert four.log_evidence == pytest.approx(ev, abs=1e-6)


def test_classifier_with_a_class_named_in_class_prior_without_labels():
    """A mapping class_prior naming a class no label has: a warning names it, it joins
    classes_ in order, no NaN; its probability is at most its share, and it takes the blob
    that no labelled class claims while the labelled points keep their class; a mapping
    that leaves out a labelled class, or names an unorderable one, is refused; the heat
    kernel refuses such a class."""
    from flgp import HeatKernelPrior

    rng = np.random.default_rng(3)
    X = np.r_[rng.standard_normal((150, 2)), rng.standard_normal((150, 2)) + [6.0, 0.0],
              rng.standard_normal((150, 2)) + [3.0, 6.0]]
    yy = np.full(450, -1)
    yy[[0, 1, 150, 151]] = [5, 5, 9, 9]
    prior = {5: 0.3, 7: 0.4, 9: 0.3}
    with pytest.warns(UserWarning, match=r"names 1 class\(es\) without a label: \[7\]"):
        clf = FLGPClassifier(class_prior=prior).fit(X, yy)
    np.testing.assert_array_equal(clf.classes_, [5, 7, 9])
    np.testing.assert_allclose(clf.class_prior_, [0.3, 0.4, 0.3])
    P = clf.label_distributions_
    assert np.all(np.isfinite(P)) and np.allclose(P.sum(1), 1.0)
    assert P[:, 1].max() <= 0.4 + 1e-12
    assert np.all(P[[0, 1], 0] > 0.9) and np.all(P[[150, 151], 2] > 0.9)
    np.testing.assert_allclose(clf.predict_proba(X[:40]), P[:40], atol=1e-12)
    # the labelled classes keep their labelled blobs; the unnamed blob goes to class 7
    assert np.mean(clf.transduction_[:150] == 5) > 0.8
    assert np.mean(clf.transduction_[150:300] == 9) > 0.8
    assert np.mean(clf.transduction_[300:] == 7) > 0.5
    mean, var = clf.predict_latent(X[:5])
    np.testing.assert_array_equal(mean[:, 1], 0.0)
    assert np.all(var > 0)
    with pytest.raises(ValueError, match=r"names the classes \[5, 7\] but not \[9\]"):
        FLGPClassifier(class_prior={5: 1.0, 7: 1.0}).fit(X, yy)
    with pytest.raises(ValueError, match="cannot be ordered"):
        FLGPClassifier(class_prior={5: 1.0, 9: 1.0, "x": 1.0}).fit(X, yy)
    with pytest.raises(ValueError, match="need the full-resolution classifier"), \
            pytest.warns(UserWarning, match="without a label"):
        FLGPClassifier(HeatKernelPrior(), class_prior=prior).fit(X, yy)


def test_a_class_without_labels_does_not_take_labelled_clusters():
    """Four blobs: two hold labels of class 0, one of class 1, one none; class 2, named
    in class_prior with half the points, takes no blob that holds a label and no labelled
    point - connected (its probability at most 5 % in the labelled blobs) or apart (the
    unlabelled blob a piece of its own: exactly the prior there)."""
    rng = np.random.default_rng(0)
    for sep in (6.0, 10.0):
        centres = np.array([[0, 0], [sep, 0], [0, sep], [sep, sep]])
        X = np.concatenate([rng.normal(size=(200, 2)) + c for c in centres])
        y = np.full(800, -1)
        y[[0, 1, 200, 201]] = 0
        y[[400, 401]] = 1
        prior = {0: 0.25, 1: 0.25, 2: 0.5}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            clf = FLGPClassifier(class_prior=prior).fit(X, y)
        P, t = clf.label_distributions_, clf.transduction_
        assert np.all(np.isfinite(P)) and P[:, 2].max() <= 0.5 + 1e-12
        for b, cls in enumerate((0, 0, 1)):
            blob = slice(200 * b, 200 * (b + 1))
            assert np.mean(t[blob] == 2) < 0.05
            assert np.mean(t[blob] == cls) > 0.9
        assert np.all(np.argmax(P[[0, 1, 200, 201, 400, 401]], axis=1) == [0, 0, 0, 0, 1, 1])
        if sep == 10.0:
            np.testing.assert_allclose(P[600:], np.tile([0.25, 0.25, 0.5], (200, 1)),
                                       atol=1e-12)
        else:
            assert P[:600, 2].mean() < 0.05


def test_small_ratio_is_poisson_learning():
    """As ρ → 0 the posterior mean is ρ times the Green-function scores: Poisson learning's
    solution (green_scores) for ν = 1."""
    from flgp.precision.classification import LeastSquaresClassification

    X, y, g, lab, prior, K = _small_problem(per_class=(1, 1, 1))
    model = LeastSquaresClassification(prior.cross_covariance(lab), lab, y[lab], 3, 1e-6)
    U = green_scores(g, lab, y[lab], 3, kappa2=1e-3, tol=1e-12)
    s = np.mean(np.diag(K)[lab])
    np.testing.assert_allclose(model.mean / 1e-6 * s, U, rtol=1e-4, atol=1e-4 * np.abs(U).max())


def test_the_labelling_loop_at_full_resolution():
    """A warm refit with the suggested labels equals a cold fit given the same
    provenance; suggested rows do not count as a random sample of the class sizes (a cold
    fit that reads them as one tilts the shares); the batch spreads (no two picks among
    each other's 5 nearest neighbours)."""
    from flgp.graph.knn import NeighborIndex

    X, y = _blobs(900, 3, 3, 1)
    yy = np.full(len(y), -1)
    for c in range(3):
        yy[np.flatnonzero(y == c)[0]] = c
    clf = FLGPClassifier(warm_start=True).fit(X, yy)
    assert clf.method_ == "graph_matern"
    rows = clf.suggest_labels(6)
    assert np.all(yy[rows] == -1) and np.unique(rows).size == 6
    _, near = NeighborIndex(X).kneighbors(X[rows], 6)
    assert not any(set(near[i, 1:]) & set(rows) for i in range(6))
    yy[rows] = y[rows]
    warm = clf.fit(X, yy).label_distributions_.copy()
    cold = FLGPClassifier()
    cold._suggested = (clf._cloud_key, rows)
    np.testing.assert_allclose(cold.fit(X, yy).label_distributions_, warm, atol=1e-9)
    assert np.allclose(clf.class_prior_, 1 / 3)
    # a fit that does not know the provenance reads every label's class
    naive = FLGPClassifier().fit(X, yy)
    np.testing.assert_allclose(naive.class_prior_, class_size_prior(y[yy >= 0], 3))


def test_labelled_columns_grow_and_pickle():
    """The column store adds columns one call at a time (as the labelling loop does), each
    equal to the prior's own column; a pickled store keeps its columns (not the solver)."""
    import pickle

    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import LabelledColumns

    X, _ = _blobs(300, 5, 3)
    g = self_tuning_knn_graph(X, 8)
    prior = SparsePrecisionPrior(g, nu=1, kappa2=0.05, centred=True)
    store = LabelledColumns(prior)
    rng = np.random.default_rng(0)
    nodes = rng.choice(300, 40, replace=False)
    for k in range(0, 40, 3):
        got = store(nodes[:k + 3])
    np.testing.assert_allclose(got, prior.cross_covariance(nodes), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(store(nodes[[7, 2]]), got[:, [7, 2]])
    back = pickle.loads(pickle.dumps(store))
    assert back.prior is None and back._store.shape == (300, 40)
    np.testing.assert_array_equal(back._columns, store._columns)


def test_classifier_prior_solves_by_a_factor_on_low_dimensional_clouds(monkeypatch):
    """The prior's solver follows the documented rule (a factor on points of up to two
    coordinates, or three up to CLASSIFIER_FACTOR_3D_NODES; AMG beyond), and the two give
    the same fit to the conjugate gradients' tolerance."""
    import flgp.models.graph_matern as GM

    rng = np.random.default_rng(4)
    flat = self_tuning_knn_graph(rng.standard_normal((300, 2)), 10)
    solid = self_tuning_knn_graph(rng.standard_normal((300, 3)), 10)
    wide = self_tuning_knn_graph(rng.standard_normal((300, 5)), 10)
    assert GM.classifier_solver(flat) == GM.classifier_solver(solid) == "cholesky"
    assert GM.classifier_solver(wide) == "amg"
    monkeypatch.setattr(GM, "CLASSIFIER_FACTOR_3D_NODES", 299)
    assert GM.classifier_solver(solid) == "amg" and GM.classifier_solver(flat) == "cholesky"

    X, y = _blobs(n=900, p=2, C=3, seed=5)
    yy = np.full(y.size, -1)
    yy[np.flatnonzero(y == 0)[:4]] = 0
    yy[np.flatnonzero(y == 1)[:4]] = 1
    yy[np.flatnonzero(y == 2)[:4]] = 2
    from flgp import GraphMaternPrior

    exact = [FLGPClassifier(GraphMaternPrior(nu=nu)).fit(X, yy) for nu in (1, 2)]
    assert exact[0]._chosen_fit.columns.prior.solver == "cholesky"
    # the default chooses the order on a factored prior, and by conjugate gradients in a
    # fresh fit; a warm-started classifier solving by conjugate gradients keeps order 1
    assert sorted(FLGPClassifier().fit(X, yy).probability_variation_)[-1][0] == 2
    assert sorted(FLGPClassifier(warm_start=True).fit(X, yy)
                  .probability_variation_)[-1][0] == 2
    monkeypatch.setattr(GM, "classifier_solver", lambda graph: "amg")
    assert {nu for nu, _ in FLGPClassifier().fit(X, yy).probability_variation_} == {1, 2}
    warm = FLGPClassifier(warm_start=True).fit(X, yy)
    assert {nu for nu, _ in warm.probability_variation_} == {1}
    assert warm.matern_order_ == 1
    for nu in (1, 2):
        # order 2's columns raised to RAISE_TOL_FACTOR x the tolerance
        iterative = FLGPClassifier(GraphMaternPrior(nu=nu)).fit(X, yy)
        assert iterative._chosen_fit.columns.prior.solver == "amg"
        U, V = exact[nu - 1]._chosen_fit.scores, iterative._chosen_fit.scores
        np.testing.assert_allclose(V, U, atol=1e-2 * np.abs(U).max())
        np.testing.assert_allclose(iterative.label_distributions_,
                                   exact[nu - 1].label_distributions_, atol=2e-2)


def test_graph_total_variation_against_the_dense_sum():
    """graph_total_variation is sum_{i<j} w_ij |p_i - p_j|_1 / 2 over sum_{i<j} w_ij, from
    the dense weight matrix (in chunks smaller than the edge list as well)."""
    from flgp.precision.classification import graph_edges, graph_total_variation

    rng = np.random.default_rng(4)
    n, C = 30, 3
    W = rng.random((n, n)) * (rng.random((n, n)) < 0.3)
    W = np.triu(W, 1)
    W = W + W.T
    G = sp.csr_matrix(np.diag(W.sum(1)) - W)
    P = rng.dirichlet(np.ones(C), n)
    dense = 0.25 * np.sum(W * np.abs(P[:, None, :] - P[None, :, :]).sum(-1)) / (0.5 * W.sum())
    edges = graph_edges(G)
    assert edges[0].size == np.count_nonzero(np.triu(W, 1))
    assert graph_total_variation(edges, P) == pytest.approx(dense, rel=1e-12)
    assert graph_total_variation(edges, P, chunk=7) == pytest.approx(dense, rel=1e-12)
    # a labelling (one-hot rows) gives the cut share of the edges' weight
    lab = rng.integers(0, C, n)
    cut = W[lab[:, None] != lab[None, :]].sum() / W.sum()
    assert graph_total_variation(edges, np.eye(C)[lab]) == pytest.approx(cut, rel=1e-12)


def test_order_and_ratio_chosen_by_the_least_total_variation():
    """The classifier fits every candidate order and ratio (nu in ORDER_CANDIDATES; rho in
    RHO_CANDIDATES from two labels a class, RHO_ONE_LABEL below) and keeps, of those that
    give the most labelled points their own class, the one whose probabilities vary least
    across the graph's edges: its probabilities are those of a fit at that order and ratio
    alone; a prior that fixes nu chooses the ratio only."""
    import flgp.precision.classification as PC
    from sklearn.datasets import make_moons

    from flgp import GraphMaternPrior

    X, y = make_moons(1500, noise=0.1, random_state=0)
    rng = np.random.default_rng(1)
    lab = np.r_[rng.choice(np.flatnonzero(y == 0), 4, replace=False),
                rng.choice(np.flatnonzero(y == 1), 4, replace=False)]
    for per_class, ratios in ((4, PC.RHO_CANDIDATES), (1, (PC.RHO_ONE_LABEL,))):
        rows = np.r_[lab[:per_class], lab[4:4 + per_class]]
        yy = np.full(y.size, -1)
        yy[rows] = y[rows]
        clf = FLGPClassifier().fit(X, yy)
        variation = clf.probability_variation_
        candidates = [(nu, rho) for nu in PC.ORDER_CANDIDATES for rho in ratios]
        assert sorted(variation) == sorted(candidates)
        edges = PC.graph_edges(clf.graph_.stiffness)
        chosen = (clf.matern_order_, clf.prior_to_noise_ratio_)
        assert variation[chosen] == pytest.approx(
            PC.graph_total_variation(edges, clf.label_distributions_), rel=1e-12)
        kept = {}
        saved = PC.RHO_CANDIDATES, PC.RHO_ONE_LABEL
        for nu, rho in candidates:
            PC.RHO_CANDIDATES, PC.RHO_ONE_LABEL = (rho,), rho
            try:
                alone = FLGPClassifier(GraphMaternPrior(nu=nu)).fit(X, yy)
            finally:
                PC.RHO_CANDIDATES, PC.RHO_ONE_LABEL = saved
            assert alone.probability_variation_ is None
            assert (alone.matern_order_, alone.prior_to_noise_ratio_) == (nu, rho)
            P = alone.label_distributions_
            kept[(nu, rho)] = PC.labels_kept(P[rows], y[rows])
            # equal to the class balance's tolerance (1e-9 on the shares; the joint fit
            # starts each candidate's balance from the previous one's weights)
            assert PC.graph_total_variation(edges, P) == pytest.approx(
                variation[(nu, rho)], rel=1e-7)
            if (nu, rho) == chosen:
                np.testing.assert_allclose(P, clf.label_distributions_, atol=1e-8)
        assert chosen == PC.chosen_candidate(variation, kept)
    # a prior that fixes the order: the ratio alone is chosen
    fixed = FLGPClassifier(GraphMaternPrior(nu=1)).fit(X, yy)
    assert fixed.probability_variation_ is None and fixed.matern_order_ == 1
    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    fixed = FLGPClassifier(GraphMaternPrior(nu=2)).fit(X, yy)
    assert sorted(fixed.probability_variation_) == [(2, rho) for rho in PC.RHO_CANDIDATES]
    # a graph whose mass varies (a mesh's lumped areas): order 1 only
    from flgp.graph import mesh_graph

    k = 15
    grid = np.linspace(0.0, 1.0, k)
    V = np.c_[np.meshgrid(grid, grid)[0].ravel(), np.meshgrid(grid, grid)[1].ravel(),
              np.zeros(k * k)]
    idx = np.arange(k * k).reshape(k, k)
    a, b, c, d = (idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(),
                  idx[1:, 1:].ravel())
    mesh = mesh_graph(V, np.r_[np.c_[a, b, c], np.c_[b, d, c]])
    ym = np.full(k * k, -1)
    ym[[0, 1, k * k - 1, k * k - 2]] = [0, 0, 1, 1]
    on_mesh = FLGPClassifier(GraphMaternPrior(graph=mesh)).fit(V, ym)
    assert on_mesh.matern_order_ == 1
    assert sorted(on_mesh.probability_variation_) == [(1, rho) for rho in PC.RHO_CANDIDATES]


def test_candidates_that_misread_their_labels_are_passed_over():
    """Six concentric circles of 2,400 points, 100 random labels: the order-2 prior blurs
    rings of opposite classes and misreads some of its own labels while its
    probabilities vary least; the default keeps a candidate that reads every label as
    the order-1 fit does, and errs no more than that fit."""
    from flgp import GraphMaternPrior
    from flgp.datasets import make_concentric_circles
    from flgp.precision.classification import labels_kept
    from flgp.reproduce.circles import standardise

    X, y = make_concentric_circles(2400, random_state=1)
    X = standardise(X)
    lab = np.random.default_rng(1).choice(y.size, 100, replace=False)
    yy = np.full(y.size, -1)
    yy[lab] = y[lab]
    unl = yy < 0
    clf = FLGPClassifier().fit(X, yy)
    first = FLGPClassifier(GraphMaternPrior(nu=1)).fit(X, yy)
    second = FLGPClassifier(GraphMaternPrior(nu=2)).fit(X, yy)
    codes = np.searchsorted(clf.classes_, y[lab])
    assert labels_kept(second.label_distributions_[lab], codes) < lab.size
    assert labels_kept(clf.label_distributions_[lab], codes) == lab.size
    err = np.mean(clf.transduction_[unl] != y[unl])
    assert err <= np.mean(first.transduction_[unl] != y[unl]) + 0.01
    assert err < np.mean(second.transduction_[unl] != y[unl])


def test_second_order_columns_raised_from_the_first():
    """The order-2 store raises the order-1 store's columns by one solve each: equal to
    the order-2 prior's own columns and to the dense centred (P Q_2^-1 P)[:, nodes], and
    the first order's store holds the same nodes afterwards."""
    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import LabelledColumns

    X, _ = _blobs(250, 4, 3)
    g = self_tuning_knn_graph(X, 8)
    one = SparsePrecisionPrior(g, nu=1, kappa2=0.05, centred=True, amplitude=2.0)
    two = one.with_order(2)
    assert two.nu == 2 and one.nu == 1 and two._solve is one._solve
    first = LabelledColumns(one)
    second = LabelledColumns(two, lower=first)
    nodes = np.array([3, 70, 140, 5])
    S = g.stiffness.toarray() + 0.05 * np.diag(g.mass)
    Q2 = S @ np.diag(1.0 / g.mass) @ S
    P = np.eye(250) - 1.0 / 250
    dense = 2.0 * (P @ np.linalg.inv(Q2) @ P)[:, nodes]
    np.testing.assert_allclose(second(nodes[:2]), dense[:, :2], atol=1e-9 * np.abs(dense).max())
    np.testing.assert_allclose(second(nodes), dense, atol=1e-9 * np.abs(dense).max())
    np.testing.assert_allclose(second(nodes), two.cross_covariance(nodes),
                               atol=1e-9 * np.abs(dense).max())
    np.testing.assert_array_equal(np.sort(first.nodes), np.sort(nodes))
    # by AMG: the raising solves to RAISE_TOL_FACTOR x tol, still near the dense columns
    amg = SparsePrecisionPrior(g, nu=1, kappa2=0.05, centred=True, amplitude=2.0,
                               solver="amg", tol=1e-9)
    raised = LabelledColumns(amg.with_order(2), lower=LabelledColumns(amg))(nodes)
    np.testing.assert_allclose(raised, dense, atol=1e-6 * np.abs(dense).max())
    with pytest.raises(ValueError, match="one order lower"):
        LabelledColumns(two, lower=second)
    with pytest.raises(ValueError, match="raise_order makes order nu"):
        one.raise_order(np.zeros((250, 1)))
    with pytest.raises(ValueError, match="positive integer"):
        one.with_order(0)
    from flgp.graph import mesh_graph

    grid = np.linspace(0.0, 1.0, 4)
    V = np.c_[np.repeat(grid, 4), np.tile(grid, 4), np.zeros(16)]
    idx = np.arange(16).reshape(4, 4)
    a, b, c, d = (idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(),
                  idx[1:, 1:].ravel())
    mesh = mesh_graph(V, np.r_[np.c_[a, b, c], np.c_[b, d, c]])
    with pytest.raises(ValueError, match="uniform mass"):
        SparsePrecisionPrior(mesh, nu=1, kappa2=0.1, centred=True).with_order(2)
    with pytest.raises(ValueError, match="tol must be a relative residual"):
        amg._amg.solve(np.ones(250), tol=2.0)
    with pytest.raises(ValueError, match="one row per node"):
        two.raise_order(np.zeros((7, 1)))


def test_score_scale_is_the_median_top_two_gap():
    """score_scale: the median over rows of the gap between the two largest scores over
    MARGIN_LOGITS (the mean gap where most rows tie, 1 where all do); bad input refused."""
    from flgp.precision.classification import MARGIN_LOGITS, score_scale

    U = np.array([[3.0, 1.0, 0.0], [0.0, 0.5, 0.4], [2.0, 2.0, -1.0], [5.0, -1.0, 1.0],
                  [0.0, 0.0, 0.7]])
    # gaps 2, 0.1, 0, 4, 0.7: median 0.7
    assert score_scale(U) == pytest.approx(0.7 / MARGIN_LOGITS, rel=1e-15)
    ties = np.array([[1.0, 1.0], [2.0, 2.0], [0.0, 3.0]])
    assert score_scale(ties) == pytest.approx(1.0 / MARGIN_LOGITS, rel=1e-15)
    assert score_scale(np.ones((4, 3))) == 1.0
    with pytest.raises(ValueError, match="n_classes >= 2"):
        score_scale(np.ones((4, 1)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        score_scale(np.array([[np.nan, 1.0]]))


def test_labels_kept_and_the_choice_among_them():
    from flgp.precision.classification import chosen_candidate, labels_kept

    P = np.array([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.7, 0.3], [0.6, 0.4]])
    # rows 0 and 2 take their own class; rows 1, 3, 4 do not
    assert labels_kept(P, [0, 0, 1, 1, 1]) == 2
    assert labels_kept(P, [0, 1, 1, 0, 0]) == 5
    with pytest.raises(ValueError, match="one row a labelled point"):
        labels_kept(P, [0, 1])
    cuts = {"a": 0.1, "b": 0.2, "c": 0.3}
    assert chosen_candidate(cuts) == "a"
    assert chosen_candidate(cuts, {"a": 1, "b": 2, "c": 2}) == "b"
    with pytest.raises(ValueError, match="every candidate"):
        chosen_candidate(cuts, {"a": 1})


def test_balance_of_nearly_certain_classes_does_not_diverge():
    """A class whose points are all nearly certain (a piece of the graph with one class's
    label: its other classes 200 logits down) barely moves its share with its weight, and
    the Newton step there is huge: the balance still meets the shares, keeps every row's
    most probable class, and returns positive weights (before: weights (0, 0, 1), every
    point given to that class)."""
    n_a, n_b = 370, 630
    logits = np.zeros((n_a + n_b, 3))
    logits[:n_a] = [-200.0, -200.0, 0.0]
    rng = np.random.default_rng(0)
    side = rng.integers(0, 2, n_b)
    logits[n_a:, 0] = np.where(side == 0, 3.0, -3.0)
    logits[n_a:, 1] = -logits[n_a:, 0]
    logits[n_a:, 2] = -125.0
    P = scores_to_probabilities(logits, 1.0)
    prior = np.full(3, 1.0 / 3.0)
    w, Q = balance_to_prior(P, prior)
    assert np.all(w > 0) and np.all(np.isfinite(w))
    np.testing.assert_allclose(Q.mean(0), prior, atol=1e-6)
    np.testing.assert_array_equal(Q.argmax(1), P.argmax(1))


def test_variation_and_balance_inputs_are_checked():
    """graph_edges, graph_total_variation, chosen_candidate and balance_to_prior's start
    refuse what they cannot use, saying what to give."""
    from flgp.precision.classification import (chosen_candidate, graph_edges,
                                               graph_total_variation)

    G = sp.csr_matrix(np.array([[1.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 1.0]]))
    edges = graph_edges(G)
    P = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match="square stiffness"):
        graph_edges(sp.csr_matrix(np.ones((2, 3))))
    with pytest.raises(ValueError, match="one row of P per node"):
        graph_total_variation(edges, P[:2])
    with pytest.raises(ValueError, match="finite"):
        graph_total_variation(edges, np.where(np.eye(3, 2) > 0, np.nan, 0.5))
    with pytest.raises(ValueError, match="three 1-d arrays"):
        graph_total_variation((edges[0], edges[1][:1], edges[2]), P)
    with pytest.raises(ValueError, match="non-negative"):
        graph_total_variation((edges[0], edges[1], -edges[2]), P)
    assert graph_total_variation(edges, P) == 0.0
    with pytest.raises(ValueError, match="at least one candidate"):
        chosen_candidate({})
    with pytest.raises(ValueError, match="positive finite class weights"):
        balance_to_prior(P, [0.5, 0.5], start=[1.0, 0.0])
    with pytest.raises(ValueError, match="positive finite class weights"):
        balance_to_prior(P, [0.5, 0.5], start=[1.0, 1.0, 1.0])


def test_randomly_suggested_labels_count_towards_the_class_sizes():
    """Rows suggested at random are a random sample of the classes: the next warm fit
    reads their labels for the class-size prior, as a fresh fit does (before, it left them
    out, as it must for the uncertain rows the other strategies pick: two blobs of 4:1 with
    one label each and 60 random suggestions, the warm fit gave the small class 43 % of the
    points, the fresh one 20 %)."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(1600, 2)), rng.normal(size=(400, 2)) + [2.0, 0.0]])
    y = np.r_[np.zeros(1600, int), np.ones(400, int)]
    yy = np.full(2000, -1)
    yy[[0, 1600]] = [0, 1]
    clf = FLGPClassifier(warm_start=True).fit(X, yy)
    rows = clf.suggest_labels(60, strategy="random")
    yy[rows] = y[rows]
    warm = clf.fit(X, yy)
    fresh = FLGPClassifier().fit(X, yy)
    np.testing.assert_allclose(warm.class_prior_, fresh.class_prior_)
    np.testing.assert_array_equal(warm.transduction_, fresh.transduction_)
    assert abs(np.mean(warm.transduction_ == 1) - 0.2) < 0.05


def test_an_unpickled_classifier_rebuilds_its_model():
    """A pickle keeps the labels and the ratio, not the prior's solver: the unpickled
    classifier rebuilds its least-squares model at first use and gives the same latent
    posterior and the same spread batch, bit for bit (before, predict_latent raised and
    suggest_labels silently returned the most uncertain rows unspread)."""
    import copy
    import pickle

    X, y = _blobs(600, 5, 3)
    yy = np.full(len(y), -1)
    lab = np.concatenate([np.flatnonzero(y == c)[:2] for c in range(3)])
    yy[lab] = y[lab]
    clf = FLGPClassifier().fit(X, yy)
    before = clf.predict_latent(X[:5]), clf.suggest_labels(8)
    for back in (pickle.loads(pickle.dumps(clf)), copy.deepcopy(clf)):
        assert back._chosen_fit.model is None and back._chosen_fit.columns is None
        mean, var = back.predict_latent(X[:5])
        np.testing.assert_array_equal(mean, before[0][0])
        np.testing.assert_array_equal(var, before[0][1])
        np.testing.assert_array_equal(back.suggest_labels(8), before[1])
    state = clf._chosen_fit.__getstate__()
    assert state["model"] is None and state["columns"] is None
    bare = pickle.loads(pickle.dumps(clf))
    del bare._chosen_fit._model_arguments           # nothing to rebuild the model from
    with pytest.raises(ValueError, match="does not hold; fit it again"):
        bare.predict_latent(X[:2])


# -- the posterior precision form (issue 60) -------------------------------------------------

def _curve(n=3000, seed=0, m=120):
    """A noisy 3-d helix, two classes along its length, ``m`` random labels."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(0, 1, n)
    X = np.c_[np.cos(20 * u), np.sin(20 * u), u] + 0.01 * rng.standard_normal((n, 3))
    y = (np.sin(10 * u) > 0).astype(int)
    yy = np.full(n, -1)
    lab = rng.choice(n, m, replace=False)
    yy[lab] = y[lab]
    return X, y, yy


@pytest.mark.parametrize("solver,nu", [("cholesky", 1), ("cholesky", 2), ("amg", 1)])
def test_precision_form_is_the_labelled_block_model(solver, nu):
    """At the same scale s the posterior-precision model equals the labelled-block one:
    posterior mean, profiled noise and (factored) evidence to 1e-8, a class without labels
    included; its unit variances agree with the dense ones within their Monte Carlo error
    and its covariance columns exactly."""
    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import (LabelledColumns, LeastSquaresClassification,
                                               PrecisionLeastSquares)

    X, y, g, lab, _, _ = _small_problem(per_class=(4, 5, 3))
    lab = np.r_[lab, lab[:1]]                          # a node observed twice
    codes = np.r_[y[lab[:-1]], (y[lab[0]] + 1) % 3]    # ... with two classes
    prior = SparsePrecisionPrior(g, nu=nu, kappa2=1e-3, centred=True, solver=solver,
                                 tol=1e-12)
    store = LabelledColumns(prior)
    W = store(lab)
    for rho in (0.01, 0.3, 30.0):
        dense = LeastSquaresClassification(W, lab, codes, 4, rho)
        sparse = PrecisionLeastSquares(prior, lab, codes, 4, rho, dense.scale)
        scale = np.abs(dense.mean).max()
        np.testing.assert_allclose(sparse.mean, dense.mean, atol=1e-8 * scale)
        np.testing.assert_array_equal(sparse.mean[:, 3], 0.0)
        np.testing.assert_allclose(sparse.noise, dense.noise, rtol=1e-8)
        if solver == "cholesky":
            assert sparse.log_evidence == pytest.approx(dense.log_evidence, abs=1e-6)
        else:
            assert sparse.log_evidence is None
    exact = dense.unit_variances(W, np.diag(_small_problem()[5]) if nu == 1 else
                                 prior.marginal_variances(n_samples=None))
    var = sparse.node_unit_variances(n_samples=400)
    assert abs(var.mean() / exact.mean() - 1.0) < 0.1


def test_labelled_prior_scale_is_exact_for_few_and_estimated_for_many():
    """The scale is the exact mean prior variance at the labelled nodes (one term an
    observation) while they fit in one block; beyond, an estimate from a random subset
    within a few standard errors of the exact mean, the same for the same labels, reusing
    the variances a store knows."""
    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import (SCALE_BLOCK, LabelledColumns,
                                               labelled_prior_scale)

    X, y, yy = _curve(2000, m=400)
    g = self_tuning_knn_graph(X, 10)
    prior = SparsePrecisionPrior(g, nu=1, kappa2=1e-3, centred=True, solver="amg",
                                 tol=1e-10)
    lab = np.flatnonzero(yy >= 0)
    exact = prior.marginal_variances(lab)
    few = np.r_[lab[:SCALE_BLOCK - 2], lab[:1]]
    s, se, used = labelled_prior_scale(LabelledColumns(prior), few)
    assert s == pytest.approx(np.mean(prior.marginal_variances(few)), rel=1e-2)
    assert se == 0.0 and used == SCALE_BLOCK - 2
    store = LabelledColumns(prior)
    s, se, used = labelled_prior_scale(store, lab)
    assert SCALE_BLOCK <= used < lab.size and 0 < se <= 0.05 * s
    assert abs(s - exact.mean()) <= 4 * se
    calls = []
    original = prior.cross_covariance
    prior.cross_covariance = lambda *a, **k: calls.append(1) or original(*a, **k)
    assert labelled_prior_scale(store, lab[::-1]) == (s, se, used)
    assert calls == []


def test_solve_plan_by_counted_solves():
    """Few labels a class: the labelled block (a solve a label); many labels and two
    classes: the posterior precision (C - 1 solves a ratio, counted twice); order 2 by
    conjugate gradients (labelled block only) weighed while it costs at most
    ORDER_TWO_COST_RATIO times order 1 alone; a factored prior's factorisations
    counted."""
    from flgp.models.graph_matern import _column_stores, solve_plan
    from flgp.precision.classification import RHO_CANDIDATES

    X, y, yy = _curve(1500, m=1400)
    g = self_tuning_knn_graph(X, 10)
    lab = np.flatnonzero(yy >= 0)
    chain = _column_stores(g, 2)
    stores = {1: chain[0], 2: chain[1]}
    assert chain[0].prior.solver == "cholesky"
    ratios = RHO_CANDIDATES
    # factored, 1000 labels: order 1's columns and order 2's means from them (1000 + 3
    # solves) against 3 factorisations an order (2 x (3 x (1 + 40) + 16 / 3) and
    # 2 x (3 x (1 + 200) + 2 x 16 / 3)); order 1 alone at 300 labels: 300 against 257
    assert solve_plan(stores, lab[:1000], 2, ratios) == {1: "columns", 2: "columns"}
    assert solve_plan({1: chain[0]}, lab[:300], 2, ratios) == {1: "precision"}
    # order 2 alone at 1400 labels: 1403 against 1227
    assert solve_plan({2: chain[1]}, lab, 2, ratios) == {2: "precision"}
    assert solve_plan(stores, lab[:6], 2, ratios) == {1: "columns", 2: "columns"}
    lab = lab[:300]
    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import LabelledColumns
    amg = SparsePrecisionPrior(g, nu=1, kappa2=1e-3, centred=True, solver="amg")
    cg = {1: LabelledColumns(amg)}
    cg[2] = LabelledColumns(amg.with_order(2), lower=cg[1])
    # conjugate gradients: 300 + 3 solves against 2 x (3 + 16 / 3): order 1 alone, in the
    # precision form
    assert solve_plan(cg, lab, 2, ratios) == {1: "precision"}
    # one label a class of ten: 10 + 9 solves against 2 x (9 + 10 / 3): both orders,
    # columns
    ten = lab[:10]
    assert solve_plan(cg, ten, 10, (0.01,)) == {1: "columns", 2: "columns"}
    # held columns cost nothing
    cg[1](lab[:40])
    cg[2](lab[:40])
    assert solve_plan(cg, lab[:40], 2, ratios) == {1: "columns", 2: "columns"}


def test_default_classifier_on_many_labels_uses_the_precision_form():
    """A curve with many labels on a conjugate-gradient graph: the classifier fits order
    1 in the posterior precision form, errs little, and its latent posterior, suggestions
    and pickle work: the unpickled fit rebuilds the same model."""
    import pickle

    X, y, yy = _curve(6000, m=400)
    X4 = np.c_[X, 0.01 * np.random.default_rng(1).standard_normal(6000)]   # 4 coords: CG
    clf = FLGPClassifier().fit(X4, yy)
    fit = clf._chosen_fit
    assert clf.method_ == "graph_matern" and fit.plan == {1: "precision"}
    assert fit.columns.prior.solver == "amg"
    unl = yy < 0
    assert np.mean(clf.transduction_[unl] != y[unl]) < 0.03
    mean, var = clf.predict_latent(X4[:20])
    assert np.all(np.isfinite(mean)) and np.all(var > 0)
    rows = clf.suggest_labels(4)
    assert np.all(yy[rows] < 0) and np.unique(rows).size == 4
    back = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(back.predict_latent(X4[:20])[0], mean)
    np.testing.assert_array_equal(back.suggest_labels(4), rows)


def test_second_order_models_from_first_order_columns():
    """Order 2's model from order 1's columns (block W₁ᵀ C W₁, mean K₁ C W₁ α by a solve a
    class) equals the dense one under K₂ = P Q₂⁻¹ P: mean, noise, evidence; its latent
    variances come from order 2's columns raised on demand."""
    from flgp.models.graph_matern import _column_stores
    from flgp.precision.classification import LeastSquaresClassification, raised_models
    from flgp.precision.matern import matern_precision

    X, y, g, lab, _, _ = _small_problem(per_class=(4, 5, 3))
    chain = _column_stores(g, 2)
    for store in chain:                                  # tight solves for the check
        store.prior.tol = 1e-12
    n = g.n_nodes
    P = np.eye(n) - 1.0 / n
    K2 = P @ np.linalg.inv(matern_precision(g, chain[0].prior.kappa2, 2).toarray()) @ P
    ratios = (0.01, 3.0)
    models = raised_models(chain[1], lab, y[lab], 3, ratios)
    for rho, model in zip(ratios, models):
        dense = LeastSquaresClassification(K2[:, model.labelled], model.labelled,
                                           model.codes, 3, rho)
        np.testing.assert_allclose(model.mean, dense.mean, atol=1e-7 * np.abs(dense.mean).max())
        np.testing.assert_allclose(model.noise, dense.noise, rtol=1e-7)
        assert model.log_evidence == pytest.approx(dense.log_evidence, abs=1e-6)
    held = chain[1].nodes.size
    var = models[0].node_unit_variances(chain[1])
    assert chain[1].nodes.size == held + lab.size and np.all(var >= 0)


def test_cost_and_scale_inputs_are_checked():
    from flgp.models.graph_matern import classifier_cost
    from flgp.precision import SparsePrecisionPrior
    from flgp.precision.classification import LabelledColumns, labelled_prior_scale

    with pytest.raises(ValueError, match="at least two classes"):
        classifier_cost(1000, 3, [5])
    with pytest.raises(ValueError, match="at least one point"):
        classifier_cost(0, 3, [1, 1])
    X, _ = _blobs(200, 3, 2)
    store = LabelledColumns(SparsePrecisionPrior(self_tuning_knn_graph(X, 8), nu=1,
                                                 kappa2=1e-3, centred=True))
    with pytest.raises(ValueError, match=r"node index in \[0, 200\)"):
        labelled_prior_scale(store, [3, 200])
