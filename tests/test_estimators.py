import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                  RBFPrior)
from flgp.datasets import make_concentric_circles, make_spiral
from flgp.spectral import default_diffusion_time


def _standardise(X):
    X = (X - X.mean(0)) / X.std(0)
    return X / np.sqrt(X.shape[1])


def _semi_labels(y, m, seed, fill=-1):
    rng = np.random.default_rng(seed)
    lab = rng.choice(y.shape[0], m, replace=False)
    out = np.full(y.shape[0], fill, dtype=float if fill is np.nan else y.dtype)
    out[lab] = y[lab]
    return out, lab


def test_spiral_regression_beats_rbf():
    X, y, f = make_spiral(4000, noise=0.5, random_state=0)
    X = _standardise(X)
    yy, lab = _semi_labels(y, 200, 0, fill=np.nan)
    mask = np.isnan(yy)
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=500, n_eigenpairs=50)), GraphMaternPrior(),
                         RBFPrior()], random_state=0).fit(X, yy)
    rmse = np.sqrt(np.mean((reg.transduction_[mask] - f[mask]) ** 2))
    rbf = FLGPRegressor(RBFPrior()).fit(X, yy)
    rmse_rbf = np.sqrt(np.mean((rbf.transduction_[mask] - f[mask]) ** 2))
    assert rmse <= 0.25
    assert rmse < 0.7 * rmse_rbf
    # predictive std: smaller at labelled points than far from them, never NaN
    mean, std = reg.predict(X, return_std=True)
    assert np.all(np.isfinite(std)) and np.all(std > 0)
    np.testing.assert_allclose(mean, reg.transduction_, atol=1e-10)
    assert np.median(std[lab]) < np.median(std[mask])
    assert 0.1 < reg.noise_ < 0.5  # true noise variance 0.25


def test_circles_skflgp_error_below_two_percent():
    X, y = make_concentric_circles(2400, random_state=0)
    X = _standardise(X)
    yy, lab = _semi_labels(y, 100, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(kernel="se", subsample="kmeans", n_induced=600, n_eigenpairs=100)),
                             random_state=0).fit(X, yy)
    mask = yy == -1
    assert np.mean(clf.transduction_[mask] != y[mask]) < 0.02
    rbf = FLGPClassifier(RBFPrior()).fit(X, yy)
    assert np.mean(rbf.transduction_[mask] != y[mask]) > 0.3  # Euclidean kernels fail here


def test_three_classes_string_labels_and_x_unlabeled():
    X, y = make_concentric_circles(900, n_circles=3, radii=[0.5, 1.0, 1.5], random_state=1)
    names = np.array(["inner", "middle", "outer"])
    y = np.repeat([0, 1, 2], 300)
    rng = np.random.default_rng(1)
    lab = rng.choice(900, 30, replace=False)
    unl = np.setdiff1d(np.arange(900), lab)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), random_state=0).fit(
        X[lab], names[y[lab]], X_unlabeled=X[unl])
    pred = clf.predict(X[unl])
    assert set(clf.classes_) == set(names)
    assert np.mean(pred != names[y[unl]]) < 0.05
    proba = clf.predict_proba(X[unl])
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert proba.shape == (unl.size, 3)
    # the same fit with -1 marking unlabelled rows of the whole cloud
    yy = np.full(900, "-1", dtype=object)
    yy[lab] = names[y[lab]]
    X2 = np.r_[X[lab], X[unl]]
    y2 = np.r_[yy[lab], yy[unl]]
    clf2 = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), random_state=0).fit(X2, y2)
    np.testing.assert_array_equal(clf2.predict(X[unl]), pred)


def test_one_vs_rest_equals_separate_binary_fits():
    """multi_class="ovr": class c's latent is the binary GP of "c against the rest" on the
    same graph, with its own diffusion time; probabilities are those normalised."""
    X, _ = make_concentric_circles(900, n_circles=3, radii=[0.5, 1.0, 1.5], random_state=1)
    y = np.repeat([0, 1, 2], 300)
    yy, lab = _semi_labels(y, 45, 3)
    kw = dict(random_state=0)
    ovr = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), multi_class="ovr", **kw).fit(X, yy)
    assert ovr.diffusion_time_.shape == (3,)
    mean, var = ovr.predict_latent(X[:50])
    p = []
    for c in range(3):
        yc = np.where(yy == -1, -1, (yy == c).astype(int))
        # one-vs-rest keeps each class's MAP t: compare with MAP binary fits
        bin_c = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150), average_diffusion_time=False),
                               **kw).fit(X, yc)
        np.testing.assert_allclose(ovr.diffusion_time_[c], bin_c.diffusion_time_, rtol=1e-10)
        m_c, v_c = bin_c.predict_latent(X[:50])
        np.testing.assert_allclose(mean[:, c], m_c, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(var[:, c], v_c, rtol=1e-8, atol=1e-10)
        p.append(bin_c.predict_proba(X[:50])[:, 1])
    p = np.stack(p, 1)
    np.testing.assert_allclose(ovr.predict_proba(X[:50]), p / p.sum(1, keepdims=True),
                               rtol=1e-10)
    unl = yy == -1
    assert np.mean(ovr.transduction_[unl] != y[unl]) < 0.05
    with pytest.raises(ValueError, match="multi_class"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=150)), multi_class="crammer",
                       **kw).fit(X, yy)


def test_fitting_t_increases_marginal_likelihood():
    X, y = make_concentric_circles(1200, random_state=2)
    X = _standardise(X)
    yy, _ = _semi_labels(y, 60, 2)
    fitted = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=300)), random_state=0).fit(X, yy)
    t0 = default_diffusion_time(fitted.eigenvalues_)
    fixed = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=300), diffusion_time=t0),
                           random_state=0).fit(X, yy)
    # t is the MAP under pi(t) ~ t^-a0, i.e. it maximises evidence - (a0 - 1) log t over log t
    a = fitted.diffusion_time_prior_power - 1.0
    assert (fitted.log_marginal_likelihood_ - a * np.log(fitted.diffusion_time_)
            > fixed.log_marginal_likelihood_ - a * np.log(t0))
    Xs, ys, _ = make_spiral(1000, noise=0.3, random_state=0)
    ys_semi, _ = _semi_labels(ys, 80, 0, fill=np.nan)
    r_fit = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=200)), GraphMaternPrior(), RBFPrior()],
                          random_state=0).fit(Xs, ys_semi)
    r_fix = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=200), diffusion_time=10 * r_fit.diffusion_time_),
                           GraphMaternPrior(), RBFPrior()],
                          random_state=0, noise=r_fit.noise_).fit(Xs, ys_semi)
    assert r_fit.log_marginal_likelihood_ > r_fix.log_marginal_likelihood_


@pytest.mark.parametrize("Est", [FLGPClassifier, FLGPRegressor])
def test_pickle_round_trip(Est):
    X, y = make_concentric_circles(600, random_state=3)
    if Est is FLGPClassifier:
        yy, _ = _semi_labels(y, 40, 3)
    else:
        yy, _ = _semi_labels(y.astype(float), 40, 3, fill=np.nan)
    est = Est([HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(), RBFPrior()],
              random_state=0).fit(X, yy)
    est2 = pickle.loads(pickle.dumps(est))
    Xn = X[:50] * 1.01
    np.testing.assert_array_equal(est2.predict(Xn), est.predict(Xn))


def test_unlabelled_component_gets_prior_with_warning():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((200, 2))
    B = rng.standard_normal((200, 2)) + 50.0
    X = np.r_[A, B]
    y = np.full(400, -1)
    y[:10] = (A[:10, 0] > 0).astype(int)
    y[0], y[1] = 0, 1
    with pytest.warns(UserWarning, match="200 point\\(s\\) lie in 1 piece"):
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=40)), random_state=0).fit(X, y)
    prior = np.bincount(y[:10], minlength=2) / 10
    np.testing.assert_allclose(clf.label_distributions_[200:], np.tile(prior, (200, 1)))
    assert np.all(np.isfinite(clf.label_distributions_))
    np.testing.assert_allclose(clf.predict_proba(B[:5] + 0.01), np.tile(prior, (5, 1)))
    yr = np.full(400, np.nan)
    yr[:10] = A[:10, 0] + 3.0
    with pytest.warns(UserWarning, match="piece\\(s\\) of the graph"):
        reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=40)), random_state=0).fit(X, yr)
    np.testing.assert_allclose(reg.transduction_[200:], yr[:10].mean())
    assert np.all(np.isfinite(reg.transduction_std_)) and np.all(reg.transduction_std_ > 0)
    # there the sd is the prior's: outputscale * C_t(x, x) = s^2 n sum_l e^{-t l} v_l(x)^2
    ep = reg.eigenpairs_
    V = ep.eigenvector_rows(np.arange(200, 400))
    prior_var = reg.outputscale_ * ep.kernel_scale * (
        V ** 2 @ np.exp(-reg.diffusion_time_ * ep.eigenvalues))
    np.testing.assert_allclose(reg.transduction_std_[200:], np.sqrt(prior_var), rtol=1e-6)


def test_clear_errors():
    X, y = make_concentric_circles(300, random_state=0)
    yy = np.full(300, -1)
    yy[5] = 1
    with pytest.raises(ValueError, match="1 labelled point"):
        FLGPClassifier(HeatKernelPrior()).fit(X, yy)
    yy[6] = 1
    with pytest.raises(ValueError, match="all labelled points have the class"):
        FLGPClassifier(HeatKernelPrior()).fit(X, yy)
    with pytest.raises(ValueError, match="one entry per row"):
        FLGPClassifier(HeatKernelPrior()).fit(X, yy[:-1])
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FLGPClassifier(HeatKernelPrior()).fit(Xn, y)
    with pytest.raises(NotFittedError):
        FLGPClassifier(HeatKernelPrior()).predict(X)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=50))).fit(
        X, np.where(np.arange(300) % 10 == 0, y, -1))
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :1])
    yr = np.full(300, np.nan)
    yr[:3] = [1.0, np.inf, 2.0]
    with pytest.raises(ValueError, match="infinity"):
        FLGPRegressor().fit(X, yr)
    with pytest.raises(ValueError, match="The 'prior' parameter of FLGPRegressor must be"):
        FLGPRegressor(prior="svm").fit(X, y.astype(float))
    with pytest.raises(ValueError, match="overflow"):
        FLGPClassifier(HeatKernelPrior()).fit(X * 1e160, np.where(np.arange(300) % 10 == 0, y, -1))
    with pytest.raises(ValueError, match="overflow"):
        clf.predict_proba(np.array([[1e155, 0.0]]))


@pytest.mark.parametrize("Est, params, heat, match", [
    (FLGPRegressor, dict(noise=-1.0), {}, "'noise' parameter of FLGPRegressor must be a float"),
    (FLGPRegressor, dict(noise=0.0), {}, "'noise' parameter of FLGPRegressor must be a float"),
    (FLGPRegressor, dict(noise=np.inf), {}, "'noise' parameter"),
    (FLGPRegressor, {}, dict(diffusion_time=0.0), "'diffusion_time' parameter"),
    (FLGPClassifier, {}, dict(diffusion_time=-1.0), "'diffusion_time' parameter"),
    (FLGPClassifier, {}, dict(diffusion_time_prior_power=np.nan), "diffusion_time_prior_power"),
    (FLGPClassifier, {}, dict(kernel="se", bandwidth_grid=[]), "bandwidth_grid must hold"),
    (FLGPRegressor, {}, dict(kernel="se", bandwidth_grid=[-1.0]), "bandwidth_grid must hold"),
    (FLGPClassifier, {}, dict(kernel="se", bandwidth=-2.0), "'bandwidth' parameter"),
    (FLGPClassifier, {}, dict(spectrum="bogus"), "'spectrum' parameter"),
    (FLGPClassifier, {}, dict(amplitude=np.inf), "'amplitude' parameter"),
])
def test_bad_hyperparameters_are_named(Est, params, heat, match):
    X, y = make_concentric_circles(120, random_state=0)
    lab = np.arange(120) % 6 == 0
    target = np.where(lab, y, -1) if Est is FLGPClassifier else np.where(lab, y * 1.0, np.nan)
    engine = {k: v for k, v in heat.items() if k in Eigenbasis().get_params()}
    spectral = {k: v for k, v in heat.items() if k not in engine}
    with pytest.raises(ValueError, match=match):
        Est([HeatKernelPrior(Eigenbasis(n_induced=30, **engine), **spectral),
             GraphMaternPrior(), RBFPrior()], **params).fit(X, target)


def test_high_dimensional_noise_does_not_cut_points_off():
    """A circle in 22-D with noise: k-means puts many one-point clusters on data points.
    Without the coincident-row regularisation of the LAE weights those points were all but
    cut off from the graph and the regression blew up there (R^2 -858)."""
    n = 3000
    rng = np.random.default_rng(0)
    th = rng.uniform(0, 2 * np.pi, n)
    X = np.c_[np.cos(th), np.sin(th), rng.normal(0, 0.05, (n, 20))]
    f = np.sin(3 * th)
    lab = rng.choice(n, 300, replace=False)
    y = np.full(n, np.nan)
    y[lab] = f[lab] + 0.1 * rng.normal(size=300)
    reg = FLGPRegressor(random_state=0).fit(X, y)
    assert np.abs(reg.transduction_).max() < 2.0          # the truth lies in [-1, 1]
    assert reg.score(X, f) > 0.9


def test_three_labels_per_cluster_suffice_on_separated_clusters():
    """Two far-apart blobs, three labels each: the evidence must be free to pick a long
    diffusion time (a prior t^-2 kept t at the bottom of its range: accuracy 0.63)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 0.1, (500, 2)), rng.normal(0, 0.1, (500, 2)) + [100.0, 0.0]]
    y = np.r_[np.zeros(500, dtype=int), np.ones(500, dtype=int)]
    lab = np.array([0, 1, 2, 500, 501, 502])
    ys = np.full(1000, -1)
    ys[lab] = y[lab]
    with warnings.catch_warnings():
        # two connected components, both labelled: nothing to warn about
        warnings.simplefilter("error", UserWarning)
        clf = FLGPClassifier(HeatKernelPrior()).fit(X, ys)
        yr = np.full(1000, np.nan)
        yr[lab] = y[lab].astype(float)
        reg = FLGPRegressor().fit(X, yr)
    assert clf.score(X, y) == 1.0
    assert reg.score(X, y.astype(float)) > 0.9


def test_diffusion_time_mixture_weights():
    from flgp.models.search import diffusion_time_mixture
    grid = [(1.0, 5.0, "a"), (2.0, 3.0, "b"), (4.0, 3.0 + np.log(3.0), "c"),
            (8.0, 30.0, "d")]
    mix = diffusion_time_mixture(grid, 2.2, "map", mass=0.99)
    # posterior ∝ exp(-value): b : c : a = 1 : 1/3 : e^-2, d negligible
    w = np.array([1.0, 1 / 3, np.exp(-2.0)])
    w /= w.sum()
    assert [m[0] for m in mix] == [2.2, 4.0, 1.0]       # best grid value -> refined MAP
    assert [m[2] for m in mix] == ["map", "c", "a"]
    np.testing.assert_allclose([m[1] for m in mix], w, rtol=1e-12)
    one = diffusion_time_mixture(grid, 2.2, "map", mass=0.5)
    assert len(one) == 1 and one[0][1] == 1.0
    bad = [(1.0, np.inf, "a"), (2.0, np.nan, "b")]
    assert diffusion_time_mixture(bad, 1.5, "map") == [(1.5, 1.0, "map")]


@pytest.mark.parametrize("inference", ["ep", "laplace"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_averaged_probabilities_equal_fixed_time_fits(n_classes, inference):
    """The averaged prediction is the posterior-weighted mean of the predictions of
    classifiers refitted at each diffusion time (cold-started Laplace or EP; EP at the
    fitted amplitude)."""
    X, y = make_concentric_circles(900, n_circles=3, radii=[0.5, 1.0, 1.5], random_state=1)
    y = np.repeat(np.arange(3) % n_classes, 300)
    yy, lab = _semi_labels(y, 12, 4)   # few labels: a flat evidence, several t in the mix
    heat = dict(eigenbasis=Eigenbasis(subsample="random", n_induced=120))  # LAE: no grid
    kw = dict(random_state=0, inference=inference,
              calibration=None)  # a refit's own LOO scale differs
    clf = FLGPClassifier(HeatKernelPrior(average_diffusion_time=True, **heat),
                         **kw).fit(X, yy)
    mix = clf.diffusion_time_weights_
    assert mix.shape[0] >= 2 and np.isclose(mix[:, 1].sum(), 1.0)
    assert mix[0, 0] == clf.diffusion_time_
    amp = {} if inference == "laplace" else {"amplitude": clf.amplitude_}
    amp["constant_variance"] = clf.constant_variance_     # as the averaged fit chose
    ref = sum(w * FLGPClassifier(HeatKernelPrior(diffusion_time=t, **amp, **heat), **kw)
              .fit(X, yy).predict_proba(X[:60]) for t, w in mix)
    np.testing.assert_allclose(clf.predict_proba(X[:60]), ref, atol=1e-6)
    map_only = FLGPClassifier(HeatKernelPrior(average_diffusion_time=False, **heat),
                              **kw).fit(X, yy)
    assert map_only.diffusion_time_weights_ is None
    assert map_only.diffusion_time_ == clf.diffusion_time_
    # the default: averaging with Laplace (as before), the MAP t with EP
    default = FLGPClassifier(HeatKernelPrior(**heat), **kw).fit(X, yy)
    assert (default.diffusion_time_weights_ is None) == (inference == "ep")


def test_rbf_regressor_evidence_is_the_prior_marginal():
    """``log_marginal_likelihood_`` of the RBF baseline is log N(y | c, s^2 K + s_n^2 I) at
    the fitted values (dense scipy reference), and fitting emits no warning."""
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.where(np.arange(200) < 40, np.sin(2 * X[:, 0]), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg = FLGPRegressor(RBFPrior(), max_iter=30).fit(X, y)
        reg.predict(X[:40])
    g = reg.rbf_
    Z = (X[:40] - g.mu_) / g.sd_
    ell = g.lengthscale_
    s2, c = g.outputscale_, g.constant_
    d2 = ((Z[:, None, :] - Z[None]) ** 2).sum(-1)
    cov = s2 * np.exp(-0.5 * d2 / ell ** 2) + g.noise_ * np.eye(40)
    ref = multivariate_normal(np.full(40, c), cov).logpdf(y[:40])
    np.testing.assert_allclose(reg.log_marginal_likelihood_, ref, rtol=1e-6)


def test_rbf_regressor_does_not_depend_on_the_units_of_y():
    """Targets in tiny units give the same fit, rescaled (y is standardised); the fitted
    baseline pickles."""
    X = np.random.default_rng(0).uniform(-3, 3, (40, 1))
    y = np.sin(X[:, 0])
    fits = [FLGPRegressor(RBFPrior()).fit(X, y * s) for s in (1.0, 1e-6)]
    p1, s1 = fits[0].predict(X, return_std=True)
    p2, s2 = fits[1].predict(X, return_std=True)
    np.testing.assert_allclose(p2, 1e-6 * p1, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(s2, 1e-6 * s1, rtol=1e-6, atol=1e-12)
    assert np.corrcoef(p1, y)[0, 1] > 0.99
    again = pickle.loads(pickle.dumps(fits[1]))
    np.testing.assert_array_equal(again.predict(X), p2)


def test_spectral_weights_drop_negligible_and_subnormal_values():
    from types import SimpleNamespace

    from flgp.spectral.families import spectral_weights

    ep = SimpleNamespace(kernel_scale=3.0,
                         eigenvalues=np.array([0.0, 1e-3, 3.6e-3, 3.8e-3, 0.05, 0.9]))
    w = spectral_weights(ep, 1e4)
    # 3, 1.4e-4, 7e-16 (ratio 2.3e-16: kept), 1e-16 (ratio 3.1e-17: dropped), 5.8e-218, 0
    ref = 3.0 * np.exp(-1e4 * ep.eigenvalues)
    np.testing.assert_allclose(w[:3], ref[:3], rtol=1e-14)
    assert np.all(w[3:] == 0.0)
    W = spectral_weights(ep, np.array([1.0, 1e4]))
    assert W.shape == (2, 6)
    np.testing.assert_allclose(W[0], 3.0 * np.exp(-ep.eigenvalues), rtol=1e-14)
    assert not np.any((W > 0) & (W < np.finfo(float).tiny))


@pytest.mark.parametrize("method", ["nystrom", "glgp"])
def test_dense_methods_skip_grid_values_whose_kernel_is_low_rank(method):
    """On two circles the widest bandwidths of the default grid leave fewer than M positive
    eigenvalues; those candidates are skipped instead of aborting the fit, and a fixed
    bandwidth that wide is an error that says to make it smaller."""
    X, y = make_concentric_circles(600, n_circles=2, random_state=0)
    ys = np.full(600, -1)
    ys[::20] = y[::20]
    with pytest.raises(ValueError, match="smaller bandwidth"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(method, bandwidth=5.0))).fit(X, ys)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(method))).fit(X, ys)
    assert clf.bandwidth_scale_ < 10
    assert np.mean(clf.transduction_ == y) > 0.95


def test_dense_methods_on_ten_points():
    """The GLGP / Nyström bandwidth rule averages over 10 neighbours, capped at the points
    there are; an explicit n_neighbors beyond them is still an error."""
    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.arange(10) % 2
    for est in (FLGPClassifier(HeatKernelPrior(Eigenbasis("glgp", n_neighbors=2))),
                FLGPClassifier(HeatKernelPrior(Eigenbasis("nystrom", n_induced=8)))):
        proba = est.fit(X, y).predict_proba(X)
        assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(1), 1.0)
    with pytest.raises(ValueError, match="n_neighbors=12 exceeds"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis("glgp", n_neighbors=12))).fit(X, y)


def test_unorderable_labels_sparse_input_and_a_scalar_grid():
    import scipy.sparse as sp

    import flgp

    X, y = make_concentric_circles(300, n_circles=2, random_state=0)
    ys = np.full(300, -1)
    ys[::10] = y[::10]
    with pytest.raises(ValueError, match="labels mix types"):
        FLGPClassifier(HeatKernelPrior()).fit(X, np.array([0, "a"] * 150, dtype=object))
    with pytest.raises(ValueError, match=r"sparse matrix.*toarray"):
        flgp.compute_eigenpairs(sp.csr_matrix(X))
    # one bandwidth scale given as a number means that scale
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(kernel="se", bandwidth_grid=5))).fit(X, ys)
    assert clf.bandwidth_scale_ == 5.0


@pytest.mark.parametrize("method", ["flgp", "nystrom", "glgp"])
def test_points_far_outside_the_cloud_are_flagged(method):
    """The heat kernel is estimated on the cloud; a new point far outside it inherits the
    nearest part's values, which the user is told (points near the cloud are not)."""
    X, y = make_concentric_circles(600, n_circles=2, random_state=0)
    ys = np.full(600, -1)
    ys[::20] = y[::20]
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(method))).fit(X, ys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.predict_proba(X * 1.01)
    with pytest.warns(UserWarning, match="2 of 3 new point.*far outside"):
        clf.predict_proba(np.array([[1e4, 1e4], [0.0, 1e9], [0.5, 0.0]]))
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(method))).fit(
        X, np.where(ys >= 0, ys, np.nan))
    with pytest.warns(UserWarning, match="1 of 1 new point.*far outside"):
        reg.predict(np.array([[50.0, 0.0]]))


def test_no_far_warning_between_points_when_induced_points_are_the_cloud():
    """With as many induced points as points, every cloud point is at distance 0 from one;
    the reach must still cover the gaps between neighbouring points."""
    X, y = make_concentric_circles(400, n_circles=2, random_state=0)
    ys = np.full(400, -1)
    ys[::10] = y[::10]
    d2 = ((X[:, None, :] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    mid = 0.5 * (X + X[d2.argmin(1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=400))).fit(X, ys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.predict(mid)
        clf.predict_latent(mid)
    with pytest.warns(UserWarning, match="far outside") as rec:
        clf.predict(np.array([[30.0, 0.0]]))
    assert rec[0].filename == __file__      # attributed to the caller
