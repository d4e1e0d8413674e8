"""The labelling loop: suggestions (against dense n x n recomputations of the same rules),
the classifier posteriors in the eigenbasis (against the estimators' own predictions),
warm starts (against cold fits) and bad input."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import flgp.models.labelling as labelling
from flgp import Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
from flgp.datasets import make_swiss_roll
from flgp.models.labelling import uncertainty_scores
from flgp.spectral.families import spectral_weights


def _roll(n=500, seed=0):
    X, t = make_swiss_roll(n, noise=0.3, random_state=seed)
    return X, t


def _regression(n=500, m=15, seed=0):
    X, t = _roll(n, seed)
    rng = np.random.default_rng(seed)
    y = np.sin(t) + 0.1 * rng.standard_normal(n)
    yy = np.full(n, np.nan)
    lab = rng.choice(n, m, replace=False)
    yy[lab] = y[lab]
    return X, y, yy


def _classes(n=500, C=3, m=20, seed=0):
    X, t = _roll(n, seed)
    y = np.digitize(t, np.quantile(t, np.linspace(0, 1, C + 1)[1:-1]))
    rng = np.random.default_rng(seed)
    lab = rng.choice(n, m, replace=False)
    while np.unique(y[lab]).size < C:
        lab = rng.choice(n, m, replace=False)
    yy = np.full(n, -1)
    yy[lab] = y[lab]
    return X, y, yy


def _classifier_suggest(clf, n, strategy, random_state=None):
    return clf.suggest_labels(n, strategy=strategy, random_state=random_state)


def _dense_regression_posterior(reg):
    """Prior covariance of the standardised latent over the whole cloud (n x n), the
    labelled rows and the noise variance, from the fitted hyperparameters."""
    ep = reg.eigenpairs_
    V = ep.eigenvectors
    s2 = reg.outputscale_ / reg._y_scale ** 2
    w = s2 * spectral_weights(ep, reg.diffusion_time_)
    w[reg.n_eigenpairs_:] = 0.0          # the leading eigenpairs the evidence chose
    K = (V * w) @ V.T
    return K, np.asarray(reg.labelled_indices_), reg.noise_ / reg._y_scale ** 2


def _condition(K, rows, noise):
    """Posterior covariance of a GP with prior covariance K after noisy labels at rows."""
    if len(rows) == 0:
        return K
    Kr = K[:, rows]
    A = K[np.ix_(rows, rows)] + noise * np.eye(len(rows))
    return K - Kr @ np.linalg.solve(A, Kr.T)


# -- suggestions against dense recomputations ------------------------------------------------
@pytest.mark.parametrize("method", ["flgp", "nystrom"])
def test_regressor_variance_reduction_is_the_dense_greedy_rule(method):
    # FLGP's eigenvectors are orthonormal over the cloud (G = I); Nyström's extended ones
    # are not, and G = Σ v vᵀ enters the rule
    X, y, yy = _regression()
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(method, n_induced=120)),
                        random_state=0).fit(X, yy)
    K, lab, noise = _dense_regression_posterior(reg)
    P = _condition(K, lab, noise)
    cand = np.setdiff1d(np.arange(X.shape[0]), lab)
    picked = []
    for _ in range(4):
        # reduction of the total variance tr(P) by a label at x: |P[:, x]|^2 / (P_xx + σ²)
        gain = (P[:, cand] ** 2).sum(0) / (np.diag(P)[cand] + noise)
        x = cand[np.argmax(gain)]
        picked.append(x)
        P = _condition(P, [x], noise)
        cand = cand[cand != x]
    got = reg.suggest_labels(4, strategy="variance_reduction")
    np.testing.assert_array_equal(got, picked)


def test_regressor_std_batch_is_the_posterior_sd_after_the_batch():
    X, y, yy = _regression(seed=1)
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=120)), random_state=0).fit(X, yy)
    K, lab, noise = _dense_regression_posterior(reg)
    P = _condition(K, lab, noise)
    np.testing.assert_allclose(np.sqrt(np.diag(P)) * reg._y_scale, reg.transduction_std_,
                               rtol=1e-6, atol=1e-9)
    cand = np.setdiff1d(np.arange(X.shape[0]), lab)
    picked = []
    for _ in range(5):
        x = cand[np.argmax(np.diag(P)[cand])]
        picked.append(x)
        P = _condition(P, [x], noise)
        cand = cand[cand != x]
    np.testing.assert_array_equal(reg.suggest_labels(5, strategy="std"), picked)
    np.testing.assert_array_equal(reg.suggest_labels(5, strategy="uncertainty"), picked)


@pytest.mark.parametrize("kw, heat", [(dict(), dict()),
                                      (dict(inference="laplace"),
                                       dict(average_diffusion_time=False)),
                                      (dict(multi_class="ovr"), dict())])
@pytest.mark.parametrize("C", [2, 3])
def test_classifier_posterior_matches_its_predictions(kw, heat, C):
    if C == 2 and "multi_class" in kw:
        pytest.skip("one-vs-rest needs three classes")
    X, y, yy = _classes(C=C)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=120), **heat), random_state=0,
                         **kw).fit(X, yy)
    post = clf.latent_posterior()
    V = clf.eigenpairs_.eigenvector_rows(np.arange(100))
    mean = V @ post.mean
    var = np.einsum("ij,kjl,il->ik", V, post.cov, V)
    m_ref, v_ref = clf.predict_latent(X[:100])
    np.testing.assert_allclose(mean, m_ref.reshape(100, -1), atol=1e-9)
    np.testing.assert_allclose(var, v_ref.reshape(100, -1), atol=1e-9)
    assert post.precision.shape == (1 if C == 2 else C,) and np.all(post.precision > 0)


def test_classifier_variance_reduction_is_the_dense_greedy_rule():
    from scipy.stats import norm

    X, y, yy = _classes(C=3, seed=2)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=120)), random_state=0).fit(X, yy)
    post = clf.latent_posterior()
    V = clf.eigenpairs_.eigenvectors
    Ps = [V @ S @ V.T for S in post.cov]                 # latent covariance per class
    # weights: the squared slope of each class probability in its latent (probit link)
    P = clf.label_distributions_
    om = [norm.pdf(norm.ppf(P[:, k])) ** 2 / (1 + np.diag(Pk)) for k, Pk in enumerate(Ps)]
    cand = np.flatnonzero(yy == -1)
    picked = []
    for _ in range(3):
        gain = sum(d * (w[:, None] * Pk[:, cand] ** 2).sum(0) / (1 + d * np.diag(Pk)[cand])
                   for Pk, d, w in zip(Ps, post.precision, om))
        x = cand[np.argmax(gain)]
        picked.append(x)
        Ps = [Pk - d * np.outer(Pk[:, x], Pk[:, x]) / (1 + d * Pk[x, x])
              for Pk, d in zip(Ps, post.precision)]
        cand = cand[cand != x]
    np.testing.assert_array_equal(_classifier_suggest(clf, 3, "variance_reduction"), picked)


def test_uncertainty_batches_spread_out():
    X, y, yy = _classes(n=800, C=2, m=10, seed=3)
    # a model whose most uncertain points crowd together (the heat kernel with its
    # constant mode), so that the spreading of the batch shows
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150), constant_variance=1.0, diffusion_time_prior="flat"),
                         random_state=0).fit(X, yy)
    unl = np.flatnonzero(yy == -1)
    H = uncertainty_scores(clf.label_distributions_[unl], "entropy")
    top = unl[np.argsort(-H, kind="stable")[:6]]
    for strategy in ("entropy", "margin", "least_confident"):
        got = _classifier_suggest(clf, 6, strategy)
        assert got[0] == unl[np.argmax(uncertainty_scores(clf.label_distributions_[unl],
                                                          strategy))]
        assert len(set(got)) == 6 and not np.isin(got, np.flatnonzero(yy != -1)).any()

    def spread(rows):
        D = np.linalg.norm(X[rows, None] - X[None, rows], axis=-1)
        return D[np.triu_indices(len(rows), 1)].min()

    # the plain top six crowd together; the greedy batch does not
    assert spread(_classifier_suggest(clf, 6, "entropy")) > 3 * spread(top)


def test_lazy_pool_gives_the_full_greedy(monkeypatch):
    X, y, yy = _regression(n=400, seed=4)
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=100)), random_state=0).fit(X, yy)
    full = reg.suggest_labels(8, strategy="std")
    monkeypatch.setattr(labelling, "_MIN_POOL", 3)
    monkeypatch.setattr(labelling, "_POOL_PER_PICK", 1)
    np.testing.assert_array_equal(reg.suggest_labels(8, strategy="std"), full)
    Xc, yc, yyc = _classes(n=400, C=3, seed=4)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=100))).fit(Xc, yyc)
    small = {s: clf.suggest_labels(6, strategy=s) for s in ("entropy", "margin")}
    monkeypatch.setattr(labelling, "_MIN_POOL", 1024)
    monkeypatch.setattr(labelling, "_POOL_PER_PICK", 32)
    for s, got in small.items():
        np.testing.assert_array_equal(got, clf.suggest_labels(6, strategy=s))


def test_deterministic_and_indices_with_x_unlabeled():
    X, y, yy = _regression(n=400, seed=5)
    lab = ~np.isnan(yy)
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=100)), random_state=0).fit(
        X[lab], yy[lab], X_unlabeled=X[~lab])
    n_lab = int(lab.sum())
    for s in ("variance_reduction", "std", "random"):
        a = reg.suggest_labels(5, strategy=s)
        np.testing.assert_array_equal(a, reg.suggest_labels(5, strategy=s))
        assert a.dtype == np.int64 and np.all(a >= n_lab) and np.all(a < X.shape[0])
    r1 = reg.suggest_labels(5, strategy="random", random_state=1)
    assert not np.array_equal(r1, reg.suggest_labels(5, strategy="random", random_state=2))
    np.testing.assert_array_equal(r1, reg.suggest_labels(5, strategy="random",
                                                         random_state=1))
    # a loop passing the same seed draws new rows once the labels change
    y2 = np.r_[yy[lab], np.full(int((~lab).sum()), np.nan)]
    y2[r1] = 0.0
    reg.fit(np.r_[X[lab], X[~lab]], y2)
    r2 = reg.suggest_labels(5, strategy="random", random_state=1)
    assert not np.isin(r2, r1).any() and not np.array_equal(r2 - n_lab, r1 - n_lab)


# -- warm starts ---------------------------------------------------------------------------
def test_regressor_warm_start_equals_cold_fit_and_detects_a_new_cloud():
    X, y, yy = _regression(n=600, seed=6)
    heat = dict(kernel="se", n_induced=120, bandwidth_grid=[0.5, 2.0])
    kw = dict(prior=HeatKernelPrior(Eigenbasis(**heat)), random_state=0)
    warm = FLGPRegressor(warm_start=True, **kw).fit(X, yy)
    ep = warm.eigenpairs_
    cands = [e for _, e in warm._cache.eigenpairs[1]]
    yy2 = yy.copy()
    new = warm.suggest_labels(10)
    yy2[new] = y[new]
    yy2[np.flatnonzero(~np.isnan(yy))[0]] += 0.5          # a changed label too
    warm.fit(X, yy2)
    assert any(warm.eigenpairs_ is e for e in cands)     # reused, not recomputed
    cold = FLGPRegressor(**kw).fit(X, yy2)
    assert cold._cache.eigenpairs is None
    np.testing.assert_allclose(warm.transduction_, cold.transduction_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(warm.transduction_std_, cold.transduction_std_, rtol=0,
                               atol=1e-10)
    assert warm.diffusion_time_ == pytest.approx(cold.diffusion_time_, rel=1e-12)
    # a changed cloud (one coordinate), or a changed graph setting, recomputes
    X2 = X.copy()
    X2[17, 1] += 1e-9
    warm.fit(X2, yy2)
    assert all(warm.eigenpairs_ is not e for e in cands)
    ep2 = warm.eigenpairs_
    warm.set_params(prior=HeatKernelPrior(Eigenbasis(n_neighbors=4, **heat))).fit(X2, yy2)
    assert warm.eigenpairs_ is not ep2 and warm.eigenpairs_ is not ep


def test_poisson_warm_start_equals_cold_fit():
    X, t = _roll(500, 7)
    rng = np.random.default_rng(7)
    counts = rng.poisson(np.exp(1 + np.sin(t))).astype(float)
    yy = np.full(500, np.nan)
    lab = rng.choice(500, 40, replace=False)
    yy[lab] = counts[lab]
    prior = [HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(), RBFPrior()]
    warm = FLGPRegressor(prior, likelihood="poisson", warm_start=True).fit(X, yy)
    ep = warm.eigenpairs_
    new = warm.suggest_labels(10)
    yy[new] = counts[new]
    warm.fit(X, yy)
    assert warm.eigenpairs_ is ep
    cold = FLGPRegressor(prior, likelihood="poisson").fit(X, yy)
    np.testing.assert_allclose(warm.transduction_, cold.transduction_, rtol=1e-10, atol=0)
    np.testing.assert_allclose(warm.transduction_std_, cold.transduction_std_, rtol=1e-10,
                               atol=0)


def test_classifier_warm_start_equals_cold_fit():
    X, y, yy = _classes(n=600, C=3, seed=8)
    warm = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=120)), warm_start=True).fit(X, yy)
    ep = warm.eigenpairs_
    new = warm.suggest_labels(10)
    yy[new] = y[new]
    warm.fit(X, yy)
    assert warm.eigenpairs_ is ep
    cold = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=120))).fit(X, yy)
    np.testing.assert_allclose(warm.label_distributions_, cold.label_distributions_,
                               rtol=0, atol=1e-10)
    X2 = X.copy()
    X2[0, 0] += 1e-6
    assert warm.fit(X2, yy).eigenpairs_ is not ep


# -- bad input -----------------------------------------------------------------------------
def test_bad_input_gets_clear_errors():
    X, y, yy = _regression(n=300, m=10, seed=9)
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=80)))
    with pytest.raises(NotFittedError):
        reg.suggest_labels()
    reg.fit(X, yy)
    n_unl = int(np.isnan(yy).sum())
    with pytest.raises(ValueError, match=f"only {n_unl} unlabelled row"):
        reg.suggest_labels(n_unl + 1)
    assert reg.suggest_labels(n_unl).size == n_unl          # all of them, ranked
    with pytest.raises(ValueError, match="unknown strategy 'entropy'.*'std'"):
        reg.suggest_labels(2, strategy="entropy")
    with pytest.raises(ValueError, match="at least 1"):
        reg.suggest_labels(0)
    with pytest.raises(TypeError, match="integer"):
        reg.suggest_labels(2.5)
    full = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=80))).fit(X, y)
    with pytest.raises(ValueError, match="without unlabelled rows"):
        full.suggest_labels(1)
    with pytest.raises(ValueError, match="method_='rbf'"):
        FLGPRegressor(RBFPrior(), max_iter=5).fit(X, yy).suggest_labels(1)
    Xc, yc, yyc = _classes(n=300, C=2, m=10, seed=9)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=80))).fit(Xc, yyc)
    with pytest.raises(ValueError, match="unknown strategy 'std'.*'entropy'"):
        _classifier_suggest(clf, 1, "std")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # no NaN / overflow warnings
        out = _classifier_suggest(clf, 3, "margin")
    assert np.all(yyc[out] == -1)


@pytest.mark.parametrize("prior", ["rbf", "graph_matern"])
def test_random_suggestions_with_every_regression_prior(prior):
    """strategy='random' draws unlabelled rows whatever the prior (before, the graph
    Matérn prior and the RBF GP refused every strategy); those that score by the
    eigenbasis name 'random' and the heat kernel as the ways out, and a fit with every row
    labelled says there is nothing to suggest first."""
    from flgp import GraphMaternPrior, RBFPrior

    rng = np.random.default_rng(3)
    X = rng.uniform(size=(400, 2))
    y = np.where(rng.random(400) < 0.1, np.sin(3 * X[:, 0]) + X[:, 1], np.nan)
    reg = FLGPRegressor(RBFPrior() if prior == "rbf" else GraphMaternPrior()).fit(X, y)
    assert reg.method_ == prior
    rows = reg.suggest_labels(7, strategy="random")
    assert rows.size == 7 and np.unique(rows).size == 7 and np.all(np.isnan(y[rows]))
    if prior == "rbf":
        with pytest.raises(ValueError, match="strategy='random' works with every prior"):
            reg.suggest_labels(3)
    else:                   # the graph Matérn prior suggests by its posterior sd
        with pytest.raises(ValueError, match="suggests by 'std' \\(its default\\) or"):
            reg.suggest_labels(3, strategy="variance_reduction")
    full = FLGPRegressor(RBFPrior()).fit(X, np.sin(3 * X[:, 0]))
    with pytest.raises(ValueError, match="nothing to suggest"):
        full.suggest_labels(1, strategy="random")


def test_graph_matern_regressor_suggests_by_its_posterior_sd():
    """At full resolution the regressor's default suggestions: the largest posterior sd
    first, then the greedy batch that multiplies each candidate's sd by the share of its
    variance the picks leave - the same picks as that rule on the dense posterior
    covariance at the reported numbers - unlabelled rows only, not the top six by sd; its
    latent_posterior refuses, naming transduction_; the classifier's names
    predict_latent."""
    from flgp import FLGPClassifier, GraphMaternPrior
    from flgp.precision import matern_precision

    rng = np.random.default_rng(4)
    X = rng.uniform(size=(500, 2))
    y = np.where(rng.random(500) < 0.08, np.sin(3 * X[:, 0]) + X[:, 1], np.nan)
    reg = FLGPRegressor(GraphMaternPrior()).fit(X, y)
    rows = reg.suggest_labels(6)
    unl = np.flatnonzero(np.isnan(y))
    assert np.all(np.isnan(y[rows])) and np.unique(rows).size == 6
    # a batch larger than the unlabelled rows: refused, saying how many remain
    with pytest.raises(ValueError, match=f"only {unl.size} unlabelled row"):
        reg.suggest_labels(unl.size + 1)
    # the rule on the dense posterior covariance
    K = reg.outputscale_ * np.linalg.inv(
        matern_precision(reg.graph_, reg.matern_kappa_ ** 2, reg.matern_order_).toarray())
    lab = reg.labelled_indices_
    post = K - K[:, lab] @ np.linalg.solve(K[np.ix_(lab, lab)] + reg.noise_ * np.eye(lab.size),
                                           K[lab])
    base = reg.transduction_std_[unl]
    score, picks = base.copy(), []
    for _ in range(6):
        picks.append(int(np.argmax(score)))
        cov = post[np.ix_(unl, unl[picks])]
        explained = np.einsum("ij,ji->i", cov, np.linalg.solve(cov[picks], cov.T))
        score = base * np.sqrt(np.clip(1.0 - explained / base ** 2, 0.0, 1.0))
        score[picks] = -np.inf
    np.testing.assert_array_equal(rows, unl[picks])
    top = unl[np.argsort(-base)[:6]]
    assert not np.array_equal(np.sort(rows), np.sort(top))    # spread, not the top six
    with pytest.raises(ValueError, match="transduction_ and transduction_std_"):
        reg.latent_posterior()
    yy = np.full(500, -1)
    yy[:6] = [0, 1, 0, 1, 0, 1]
    clf = FLGPClassifier(GraphMaternPrior()).fit(X, yy)
    with pytest.raises(ValueError, match="predict_latent"):
        clf.latent_posterior()


def test_graph_distance_helpers_refuse_bad_input():
    """graph_edge_lengths takes a square sparse stiffness; spread_by_graph_distance one
    finite uncertainty a candidate and 1 <= n <= candidates, each refused by name."""
    import scipy.sparse as sp

    from flgp.models.labelling import graph_edge_lengths, spread_by_graph_distance

    with pytest.raises(ValueError, match="square scipy.sparse"):
        graph_edge_lengths(np.eye(3))
    path = sp.diags([-np.ones(3), 2 * np.ones(4), -np.ones(3)], [-1, 0, 1]).tocsr()
    lengths = graph_edge_lengths(path)
    with pytest.raises(ValueError, match="one finite uncertainty"):
        spread_by_graph_distance(lengths, [0], [1, 2, 3], [1.0, np.nan, 1.0], 1)
    with pytest.raises(ValueError, match="n must be between 1 and the 3"):
        spread_by_graph_distance(lengths, [0], [1, 2, 3], np.ones(3), 4)
    # equal uncertainties: the node farthest from the label first, then its neighbour
    # farthest from both
    np.testing.assert_array_equal(spread_by_graph_distance(lengths, [0], [1, 2, 3],
                                                           np.ones(3), 2), [3, 1])
