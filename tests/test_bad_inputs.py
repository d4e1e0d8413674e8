"""Inputs that used to slip through (issue 24): each fixed where it belongs, each with a
test that failed on the code before the fix."""

import time
import warnings

import numpy as np
import pytest
import torch

from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                  RBFPrior)
from flgp.datasets import make_concentric_circles, make_spiral, make_swiss_roll
from flgp.embedding import CompressedDiffusionMap
from flgp.kernels import HeatKernelFLGP


def _spiral(n=600, m=60, seed=0):
    X, y, f = make_spiral(n, noise=0.3, random_state=seed)
    rng = np.random.default_rng(seed)
    semi = np.full(n, np.nan)
    lab = rng.choice(n, m, replace=False)
    semi[lab] = y[lab]
    return X, semi


@pytest.mark.parametrize("method", ["flgp", "rbf"])
@pytest.mark.parametrize("scale, rtol", [(2.0 ** -664, 0.0), (2.0 ** 664, 0.0),
                                         (1e-200, 1e-5), (1e200, 1e-5), (1e-300, 1e-5)])
def test_regression_targets_at_any_scale(method, scale, rtol):
    """Targets scaled by 1e-200 (their variance underflowed: the mean was off by 71% of the
    data's scale) or 1e200 (their variance overflowed: an error) give the predictions of
    the unscaled targets, scaled: the GP is equivariant to the units of y. A power of two
    (2^±664 ~ 1e±200) scales every rounding step exactly, so the fit is the same bit for
    bit; any other unit rounds the standardised targets differently in the last digit,
    which the optimiser's tolerance (L-BFGS-B, ftol 2.2e-9) may amplify to ~1e-7 relative
    on another processor - the promise there is the optimiser's, not rounding's. The RBF
    GP had no such rescaling (NaN at 1e200, a mean off by 0.90 at 1e-200)."""
    X, y = _spiral()

    def prior():
        return (HeatKernelPrior(Eigenbasis(n_induced=100, n_eigenpairs=30)) if method == "flgp"
                else RBFPrior())

    ref = FLGPRegressor(prior()).fit(X, y)
    big = FLGPRegressor(prior()).fit(X, y * scale)
    mean0, sd0 = ref.predict(X[:50] * 1.01, return_std=True)
    mean1, sd1 = big.predict(X[:50] * 1.01, return_std=True)
    atol = 1e-12 if rtol == 0.0 else rtol * np.abs(mean0).max()
    np.testing.assert_allclose(mean1 / scale, mean0, rtol=rtol, atol=atol)
    np.testing.assert_allclose(sd1 / scale, sd0, rtol=max(rtol, 1e-15))
    np.testing.assert_allclose(big.transduction_ / scale, ref.transduction_, rtol=rtol,
                               atol=atol)
    lo0, hi0 = ref.predict_interval(X[:20], coverage=0.9)
    lo1, hi1 = big.predict_interval(X[:20], coverage=0.9)
    np.testing.assert_allclose(lo1 / scale, lo0, rtol=rtol, atol=atol)
    np.testing.assert_allclose(hi1 / scale, hi0, rtol=rtol, atol=atol)
    if method == "flgp":
        assert big.diffusion_time_ == pytest.approx(ref.diffusion_time_, rel=max(rtol, 1e-15))
    assert np.isfinite(big.log_marginal_likelihood_)


def test_heat_kernel_of_integer_coordinates_is_not_truncated():
    """Integer coordinates are promoted to torch's default float dtype (the kernel of
    ``[[1, 0], [0, 1]]`` was all zeros: eigenvector values cast to int64)."""
    X = np.random.default_rng(0).standard_normal((200, 2))
    X[:2] = [[1.0, 0.0], [0.0, 1.0]]
    k = HeatKernelFLGP(X, n_induced=40, n_eigenpairs=10, random_state=0)
    K_int = k(torch.tensor([[1, 0], [0, 1]])).to_dense()
    K_float = k(torch.tensor([[1.0, 0.0], [0.0, 1.0]])).to_dense()
    assert K_int.dtype == torch.get_default_dtype()
    assert torch.abs(K_float).max() > 0.1
    torch.testing.assert_close(K_int, K_float)


def test_compressed_diffusion_refuses_a_time_it_cannot_reach():
    """t = 10^6 on 300 points ran past 120 s; now it is refused before any diffusing,
    naming t."""
    X, _ = make_swiss_roll(300, random_state=0)[:2]
    start = time.perf_counter()
    with pytest.raises(ValueError, match="smaller t"):
        CompressedDiffusionMap(2, n_partitions=30, t=10**6, random_state=0).fit(X)
    assert time.perf_counter() - start < 30.0     # the guard, not the diffusion, answered
    # an ordinary t still runs
    Y = CompressedDiffusionMap(2, n_partitions=30, t=3, random_state=0).fit_transform(X)
    assert np.all(np.isfinite(Y))


@pytest.mark.parametrize("Est", [FLGPClassifier, FLGPRegressor])
def test_tiny_coordinates_get_a_clear_error(Est):
    """Coordinates scaled by 1e-160 made squared distances underflow (classifier error 0 ->
    32%, sds exactly 0, a warning about unlabelled components); they now fail like huge
    coordinates do, saying to rescale X."""
    X, y = make_concentric_circles(600, random_state=0)
    target = np.where(np.arange(600) % 10 == 0, y, -1 if Est is FLGPClassifier else np.nan)

    def prior():
        return [HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(), RBFPrior()]

    with pytest.raises(ValueError, match="underflow.*Rescale X"):
        Est(prior()).fit(X * 1e-160, target.astype(float) if Est is FLGPRegressor
                         else target)
    with pytest.raises(ValueError, match="overflow.*Rescale X"):
        Est(prior()).fit(X * 1e160, target.astype(float) if Est is FLGPRegressor
                         else target)


def test_labels_mixing_strings_and_integers_get_flgps_message():
    X, _ = make_concentric_circles(300, random_state=0)
    y = np.full(300, -1, dtype=object)
    y[:6] = [-1, "a", 1, "a", 1, "a"]
    with pytest.raises(ValueError, match="mix types that cannot be ordered"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=50))).fit(X, y)


def test_a_bandwidth_out_of_range_is_named():
    X, y = make_concentric_circles(300, random_state=0)
    semi = np.where(np.arange(300) % 10 == 0, y, -1)
    with pytest.raises(ValueError, match="bandwidth=1e-300 is out of float64's range"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(kernel="se", bandwidth=1e-300, n_induced=50))).fit(X, semi)
    from flgp import compute_eigenpairs
    with pytest.raises(ValueError, match="bandwidth=1e-300"):
        compute_eigenpairs(X, kernel="se", bandwidth=1e-300, n_induced=50)


def test_switching_method_clears_the_previous_fit():
    """set_params(prior=...) then fit used to keep the other method's attributes."""
    X, y = make_concentric_circles(600, random_state=0)
    semi = np.where(np.arange(600) % 12 == 0, y, -1)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=100))).fit(X, semi)
    heat_only = ("diffusion_time_", "eigenvalues_", "bandwidth_", "bandwidth_scale_",
                 "amplitude_", "predictive_scale_")
    assert all(hasattr(clf, a) for a in heat_only)
    clf.set_params(prior=RBFPrior()).fit(X, semi)
    assert not any(hasattr(clf, a) for a in heat_only)
    assert hasattr(clf, "rbf_") and clf.eigenpairs_ is None
    clf.set_params(prior=HeatKernelPrior()).fit(X, semi)
    assert not hasattr(clf, "rbf_")
    assert all(hasattr(clf, a) for a in heat_only)
    reg = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=100))).fit(*_spiral())
    reg.set_params(prior=RBFPrior(), max_iter=20).fit(*_spiral())
    assert not hasattr(reg, "diffusion_time_") and not hasattr(reg, "eigenvalues_")
    assert reg.method_ == "rbf" and reg.outputscale_ == reg.rbf_.outputscale_


def test_unsigned_labels_with_a_wrapped_minus_one_are_refused():
    """-1 stored in uint64 wraps to 2**64 - 1, which became a third class predicted
    everywhere."""
    X, y = make_concentric_circles(300, random_state=0)
    semi = np.where(np.arange(300) % 10 == 0, y, -1).astype(np.int64).astype(np.uint64)
    assert semi.max() == np.iinfo(np.uint64).max
    with pytest.raises(ValueError, match="wrapped around"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=50))).fit(X, semi)
    # unsigned labels without the wrapped value are ordinary labels
    labels = np.where(np.arange(300) % 10 == 0, y, 0).astype(np.uint8)
    clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=50))).fit(X, labels)
    assert clf.classes_.dtype == np.uint8


def test_labels_in_minus_one_plus_one_are_two_classes():
    """Binary labels in {-1, +1} (scikit-learn's check relabels to them) were refused as
    one class and unlabelled rows; where the rows not marked -1 hold one class, -1 is the
    other class (with a warning). Beside two classes or more, -1 still marks unlabelled
    rows, as it does where it marks more than half of the rows (semi-supervised data with
    one class labelled: refused), and None / NaN markers are never a class."""
    X, y = make_concentric_circles(300, random_state=0)
    pm = np.where(y == 1, 1, -1)
    with pytest.warns(UserWarning, match="read as two classes"):
        clf = FLGPClassifier().fit(X, pm)
    np.testing.assert_array_equal(clf.classes_, [-1, 1])
    assert clf.labelled_indices_.size == 300 and np.mean(clf.predict(X) == pm) > 0.95
    # -1 on most rows beside one class: unlabelled rows, one class, refused
    mostly = np.where(np.arange(300) % 3 == 0, 1, -1)
    with pytest.raises(ValueError, match="at least two classes"):
        FLGPClassifier().fit(X, mostly)
    # one class with NaN markers: still one class, refused
    semi = np.where(y == 1, 1.0, np.nan)
    with pytest.raises(ValueError, match="at least two classes"):
        FLGPClassifier().fit(X, semi)
    # -1 beside two classes: unlabelled
    semi = np.where(np.arange(300) % 10 == 0, y, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        clf = FLGPClassifier().fit(X, semi)
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    assert clf.labelled_indices_.size == 30


def test_count_means_beyond_float64_are_reported_not_overflowed():
    """Counts of a few million with a sharp jump. The posterior mean count exp(m + v/2)
    used to leave float64 here (the fit chased an exact interpolation of the counts'
    logarithms); with the overdispersion term and a sound optimisation it stays finite and
    follows the counts. Where a mean does leave float64 - forced here by a log-rate
    variance of 10^4 - it is inf with one UserWarning that says why, never 1e304 (a clip),
    NaN or numpy's RuntimeWarning."""
    X, t = make_swiss_roll(2000, random_state=0)[:2]
    tt = (t - t.min()) / np.ptp(t)
    counts = np.random.default_rng(0).poisson(np.where(tt > 0.5, 3e6, 1.0)).astype(float)
    y = np.full(2000, np.nan)
    lab = np.random.default_rng(5).choice(2000, 30, replace=False)
    y[lab] = counts[lab]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = FLGPRegressor(likelihood="poisson").fit(X, y)
    assert not caught, [str(w.message) for w in caught]
    assert np.all(np.isfinite(reg.transduction_))
    # at the labelled points the means follow the counts
    at = reg.transduction_[lab]
    big = counts[lab] > 1e5
    np.testing.assert_allclose(at[big], counts[lab][big], rtol=0.05)
    # a log-rate variance of 10^4: the mean is bounded by the rate the labels support
    # (RATE_CEILING times the largest count; docs/models.md, "Count data")
    reg._chosen_fit.predictor.nugget = 1e4
    bounded = reg.predict(X)
    assert np.all(np.isfinite(bounded))
    assert bounded.max() <= np.exp(reg._chosen_fit.predictor.ceiling) * (1 + 1e-9)
    # without the bound, a variance no float64 mean survives
    reg._chosen_fit.predictor.ceiling = np.inf
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mean, sd = reg.predict(X, return_std=True)
    kinds = {type(w.message) for w in caught if issubclass(w.category, Warning)}
    assert not any(issubclass(k, RuntimeWarning) for k in kinds), caught
    over = ~np.isfinite(mean)
    assert over.any() and np.all(mean[over] == np.inf)
    assert not np.isnan(mean).any() and not np.isnan(sd).any()
    assert any("beyond float64" in str(w.message) for w in caught)
    # where the mean is representable it is the log-normal mean exp(m + v/2)
    from flgp.models.regression_predictor import CountPredictor
    latent = CountPredictor.latent_of(reg._chosen_fit.predictor)
    lat = reg.eigenpairs_.map_points(X, latent, n_columns=2, project=latent.project)
    ok = ~over
    np.testing.assert_allclose(mean[ok], np.exp(lat[ok, 0] + 0.5 * lat[ok, 1] ** 2),
                               rtol=1e-10)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_fit_scans_the_cloud_for_nan_once(monkeypatch, compiled):
    """The cloud is validated once, at the estimator's boundary: one scan for NaN or
    infinity by flgp's checks - numpy's ``isfinite``, or the compiled one-read scan of the
    cloud - none by scikit-learn's (told not to), none below."""
    import sys

    import flgp
    from flgp.backends import compiled as kernels

    X, y = make_concentric_circles(1200, random_state=0)
    semi = np.where(np.arange(1200) % 20 == 0, y, -1)
    scans = []
    real, real_scan = np.isfinite, kernels.scan_cloud

    def counting(x, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        # the checks of flgp and scikit-learn (scipy's k-d tree checks its own input)
        if getattr(x, "shape", None) == X.shape and np.array_equal(x, X) and (
                caller.endswith("_validation.py") or "sklearn" in caller):
            scans.append(caller)
        return real(x, *args, **kwargs)

    def counting_scan(x, *args, **kwargs):
        if x.shape == X.shape and np.array_equal(x, X):
            scans.append("compiled scan")
        return real_scan(x, *args, **kwargs)

    monkeypatch.setattr(np, "isfinite", counting)
    monkeypatch.setattr(kernels, "scan_cloud", counting_scan)
    with flgp.config_context(compiled=compiled):
        for est in (FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=200))),
                    FLGPClassifier(HeatKernelPrior(Eigenbasis("nystrom", n_induced=100)))):
            scans.clear()
            est.fit(X, semi)
            assert len(scans) == 1, scans


def test_a_bad_parameter_fails_before_any_work(monkeypatch):
    """Parameters are checked when fit starts (scikit-learn's constraints): a bad spectrum
    used to be rejected only after the graph and k-means were built."""
    import flgp.spectral.candidates as candidates
    from sklearn.utils._param_validation import InvalidParameterError

    def no_graph(*args, **kwargs):
        raise AssertionError("the graph was built before the parameters were checked")

    monkeypatch.setattr(candidates, "cross_graph", no_graph)
    X, y = make_concentric_circles(300, random_state=0)
    semi = np.where(np.arange(300) % 10 == 0, y, -1)
    with pytest.raises(InvalidParameterError, match="'spectrum' parameter"):
        FLGPClassifier(HeatKernelPrior(Eigenbasis(spectrum="bogus"))).fit(X, semi)
    with pytest.raises(InvalidParameterError, match="'likelihood' parameter"):
        FLGPRegressor(likelihood="cauchy").fit(X, np.where(semi >= 0, 1.0, np.nan))


def test_an_outlier_rules_out_the_k_nn_graph_not_the_default_regressor():
    """One point far from the rest (its weights under the cloud's one bandwidth underflow
    to 0 - its mass 0, or C⁻¹G beyond float64): the k-NN graph names it (not as a
    duplicate); the default regressor weighs the other priors and says why the graph
    Matérn prior is out; that prior offered alone raises the same reason."""
    from flgp import GraphMaternPrior
    from flgp.graph import knn_point_graph

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(600, 2)), [[50.0, 0.0]]])
    y = np.where(rng.random(601) < 0.1, X[:, 0], np.nan)
    with pytest.raises(ValueError, match=r"1 point\(s\) lie so far .* \(row 600: its nearest"):
        knn_point_graph(X, 10)
    knn_point_graph(X[:600], 10)                  # the cloud without it is a graph
    reg = FLGPRegressor().fit(X, y)
    assert reg.method_ != "graph_matern" and "lie so far" in reg.skipped_methods_["graph_matern"]
    assert np.all(np.isfinite(reg.transduction_))
    with pytest.raises(ValueError, match="graph Matérn prior's k-NN graph of X: 1 point"):
        FLGPRegressor(GraphMaternPrior()).fit(X, y)


def test_two_points_and_equal_targets():
    """Two points: the default regressor leaves the heat kernel out (its cross graph keeps
    3 nearest induced points of at most 2) and fits; labelled targets that are all equal
    are fitted with a warning that names why the predictive sd is ~0 (before: sd 1e-151,
    silently)."""
    X = np.array([[0.0], [1.0]])
    reg = FLGPRegressor().fit(X, np.array([0.0, 1.0]))
    assert "heat kernel's cross graph" in reg.skipped_methods_["flgp"]
    assert np.all(np.isfinite(reg.predict(np.array([[0.5]]))))
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 2))
    y = np.full(300, np.nan)
    y[[10, 20, 30]] = 3.0
    with pytest.warns(UserWarning, match="all 3 labelled targets equal 3"):
        FLGPRegressor().fit(X, y)


def test_an_empty_graph_is_refused_by_name():
    """A graph without nodes (an empty mask, say): refused as such, not by a message about
    its units (before: "units must be finite ... mass=nan")."""
    import scipy.sparse as sp

    from flgp.graph import PointGraph

    with pytest.raises(ValueError, match="at least one node"):
        PointGraph(stiffness=sp.csr_matrix((0, 0)), mass=np.zeros(0), points=np.zeros((0, 3)),
                   kind="lattice", spacing=1.0)
