"""The priors as objects (flgp.models.priors): the new form fits what the old parameters
fitted, the old parameters still work behind a FutureWarning (constructor, set_params,
pickles), wrong priors are refused, and each prior gives its GPyTorch kernel."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError

from flgp import (FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                  RBFPrior)
from flgp.datasets import make_concentric_circles, make_spiral
from flgp.graph import lattice_graph
from flgp.kernels import GraphMaternKernel, HeatKernelFLGP


@pytest.fixture(scope="module")
def circles():
    X, y = make_concentric_circles(600, random_state=0)
    ys = np.full(600, -1)
    lab = np.random.default_rng(0).choice(600, 30, replace=False)
    ys[lab] = y[lab]
    return X, ys


@pytest.fixture(scope="module")
def spiral():
    X, y, _ = make_spiral(500, noise=0.3, random_state=0)
    yy = np.full(500, np.nan)
    yy[::10] = y[::10]
    return X, yy


def test_at_most_twelve_parameters():
    for est in (FLGPClassifier(), FLGPRegressor()):
        params = est.get_params(deep=False)
        assert len(params) <= 12, sorted(params)
        assert "prior" in params and "kernel" not in params and "method" not in params


def test_old_parameters_fit_the_same_model_with_a_future_warning(circles):
    X, ys = circles
    new = FLGPClassifier(HeatKernelPrior(n_induced=80, n_eigenpairs=30),
                         random_state=0).fit(X, ys)
    with pytest.warns(FutureWarning, match=r"prior=HeatKernelPrior\("):
        old = FLGPClassifier(method="flgp", n_induced=80, n_eigenpairs=30, random_state=0)
    assert old.get_params()["prior"].get_params() == new.prior.get_params()
    old.fit(X, ys)
    # the same model: equal to the search's tolerance (not bitwise across processors)
    np.testing.assert_allclose(old.label_distributions_, new.label_distributions_,
                               rtol=1e-6, atol=1e-8)
    assert old.method_ == new.method_ == "flgp"
    # the old names read back from the prior object
    assert (new.n_induced, new.n_eigenpairs, new.kernel, new.method) == (80, 30, "lae", "flgp")


def test_old_method_names_map_to_prior_objects():
    with pytest.warns(FutureWarning):
        assert isinstance(FLGPRegressor(method="gmrf", matern_order=3).prior,
                          GraphMaternPrior)
    with pytest.warns(FutureWarning):
        reg = FLGPRegressor(method="gmrf", matern_order=3)
    assert reg.prior.nu == 3 and reg.matern_order == 3 and reg.method == "gmrf"
    with pytest.warns(FutureWarning):
        assert isinstance(FLGPClassifier(method="rbf").prior, RBFPrior)
    # heat settings under the default method: all three priors, the heat one configured
    with pytest.warns(FutureWarning):
        reg = FLGPRegressor(n_induced=50)
    kinds = [type(p) for p in reg.prior]
    assert kinds == [HeatKernelPrior, GraphMaternPrior, RBFPrior]
    assert reg.prior[0].n_induced == 50 and reg.method == "auto"
    # no old parameter, no warning, and prior stays None (scikit-learn's clone check)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert FLGPClassifier().prior is None and FLGPRegressor().method == "auto"


def test_set_params_folds_old_names_and_clone_keeps_the_prior():
    est = FLGPClassifier(HeatKernelPrior(n_induced=70), random_state=3)
    twin = clone(est)
    assert twin.prior is not est.prior and twin.prior.get_params() == est.prior.get_params()
    with pytest.warns(FutureWarning):
        est.set_params(kernel="se")
    assert isinstance(est.prior, HeatKernelPrior)
    assert (est.prior.kernel, est.prior.n_induced, est.random_state) == ("se", 70, 3)
    est.set_params(prior=GraphMaternPrior(nu=2))
    assert est.method == "gmrf" and est.matern_order == 2
    # nested parameters, scikit-learn's way
    est.set_params(prior__nu=1)
    assert est.prior.nu == 1


def test_old_pickles_load_with_their_settings(circles):
    X, ys = circles
    est = FLGPClassifier(HeatKernelPrior(n_induced=80, n_eigenpairs=30),
                         random_state=0).fit(X, ys)
    # the state a fitted classifier pickled before 2026-11-28 had: the old parameters
    state = dict(est.__getstate__())        # a copy: not the estimator's own dict
    del state["prior"]
    state.update(method="flgp", kernel="lae", n_induced=80, n_eigenpairs=30,
                 n_neighbors=3, learning_rate="deprecated", graph=None, matern_order=None)
    old = FLGPClassifier.__new__(FLGPClassifier)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # loading warns about nothing
        old.__setstate__(state)
    assert isinstance(old.prior, HeatKernelPrior) and old.prior.n_induced == 80
    np.testing.assert_array_equal(old.predict_proba(X[:20]), est.predict_proba(X[:20]))
    again = pickle.loads(pickle.dumps(est))
    assert again.prior.get_params() == est.prior.get_params()


def test_a_list_weighs_only_its_members(spiral):
    X, yy = spiral
    reg = FLGPRegressor([GraphMaternPrior(), RBFPrior()]).fit(X, yy)
    assert set(reg.log_evidence_) == {"gmrf", "rbf"}
    assert reg.method_ == max(reg.log_evidence_, key=reg.log_evidence_.get)
    both = FLGPRegressor().fit(X, yy)
    assert set(both.log_evidence_) == {"flgp", "gmrf", "rbf"}
    for name in ("gmrf", "rbf"):                # the same fits, whoever else is weighed
        # (to the searches' tolerance: a hundredth of a nat)
        assert reg.log_evidence_[name] == pytest.approx(both.log_evidence_[name], abs=1e-2)
    alone = FLGPRegressor(HeatKernelPrior()).fit(X, yy)
    assert alone.method_ == "flgp"
    np.testing.assert_allclose(alone.log_marginal_likelihood_,
                               both.log_evidence_["flgp"], rtol=0, atol=1e-2)


def test_wrong_priors_are_refused(spiral):
    X, yy = spiral
    with pytest.raises(InvalidParameterError, match="prior"):
        FLGPRegressor(prior="gmrf").fit(X, yy)
    with pytest.raises(TypeError, match="HeatKernelPrior, GraphMaternPrior or RBFPrior"):
        FLGPRegressor([GraphMaternPrior(), "rbf"]).fit(X, yy)
    with pytest.raises(ValueError, match="more than once"):
        FLGPRegressor([GraphMaternPrior(), GraphMaternPrior(nu=2)]).fit(X, yy)
    with pytest.raises(ValueError, match="names no prior"):
        FLGPRegressor([]).fit(X, yy)
    # the classifier's spectral prior given to a regressor
    with pytest.raises(ValueError, match="amplitude.*classifier's prior only"):
        FLGPRegressor(HeatKernelPrior(amplitude=None)).fit(X, yy)
    # a prior's own settings are validated at fit, naming the prior
    with pytest.raises(InvalidParameterError, match="'n_neighbors' parameter of HeatKernelPrior"):
        FLGPRegressor(HeatKernelPrior(n_neighbors=0)).fit(X, yy)
    with pytest.raises(ValueError, match="diffusion_time"):
        FLGPRegressor(HeatKernelPrior(diffusion_time=np.inf)).fit(X, yy)
    with pytest.raises(ValueError, match="lae_regularization"):
        FLGPRegressor(HeatKernelPrior(lae_regularization=np.inf)).fit(X, yy)
    with pytest.raises(ValueError, match="nu = 1 or 2"):
        FLGPClassifier(GraphMaternPrior(nu=3)).fit(X, np.where(np.isnan(yy), -1,
                                                               yy > 0).astype(int))
    # both forms at once, and a name that never existed
    # (the constructor raises nothing, as scikit-learn's; fit says what is wrong)
    with pytest.raises(ValueError, match="either prior= or the old parameters"):
        FLGPRegressor(GraphMaternPrior(), n_induced=40).fit(X, yy)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_induce'"):
        FLGPRegressor(n_induce=40).fit(X, yy)
    # set right afterwards, it fits
    fixed = FLGPRegressor(n_induce=40).set_params(prior=RBFPrior()).fit(X, yy)
    assert fixed.method_ == "rbf"


def test_each_prior_gives_its_gpytorch_kernel(spiral):
    X, _ = spiral
    heat = HeatKernelPrior(n_induced=60, n_eigenpairs=20).gpytorch_kernel(X, random_state=0)
    direct = HeatKernelFLGP(X, n_induced=60, n_eigenpairs=20, random_state=0)
    x = torch.from_numpy(X[:30])
    with torch.no_grad():
        np.testing.assert_allclose(heat(x).to_dense().numpy(), direct(x).to_dense().numpy(),
                                   rtol=1e-9, atol=1e-12)
    ijk = np.stack(np.meshgrid(*(np.arange(6),) * 3, indexing="ij"), -1).reshape(-1, 3)
    graph = lattice_graph(ijk)
    kernel = GraphMaternPrior(graph, nu=1).gpytorch_kernel()
    assert isinstance(kernel, GraphMaternKernel) and kernel.nu == 1
    assert isinstance(GraphMaternPrior().gpytorch_kernel(X[:200]), GraphMaternKernel)
    with pytest.raises(ValueError, match="needs the cloud X"):
        GraphMaternPrior().gpytorch_kernel()
    import gpytorch
    assert isinstance(RBFPrior().gpytorch_kernel(), gpytorch.kernels.ScaleKernel)


def test_estimators_pickled_before_the_prior_objects_load_and_predict():
    """tests/data/estimators_before_priors.pkl: four fits pickled by flgp as of commit
    8059381 (the parameters still the estimators' own), with their predictions then."""
    import pathlib

    path = pathlib.Path(__file__).parent / "data" / "estimators_before_priors.pkl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # loading warns about nothing
        old = pickle.loads(path.read_bytes())
    fits, expected = old["fits"], old["expected"]
    new_c, new_r = old["X"]
    heat = fits["clf_heat"].prior
    assert isinstance(heat, HeatKernelPrior)
    assert (heat.n_induced, heat.n_eigenpairs) == (40, 10)
    assert fits["clf_default"].prior is None and fits["clf_default"].method == "auto"
    assert isinstance(fits["reg_gmrf"].prior, GraphMaternPrior)
    assert fits["reg_gmrf"].prior.nu == 2 and fits["reg_gmrf"].matern_order == 2
    auto = fits["reg_auto"].prior
    assert [type(p) for p in auto] == [HeatKernelPrior, GraphMaternPrior, RBFPrior]
    assert (auto[0].n_induced, auto[0].n_eigenpairs) == (40, 20)
    for name, fit in fits.items():
        got = fit.predict_proba(new_c) if name.startswith("clf") else fit.predict(new_r)
        np.testing.assert_allclose(got, expected[name], rtol=1e-10, atol=1e-13)
    # and they refit under the new parameters
    assert clone(fits["reg_gmrf"]).get_params()["prior"].nu == 2


def test_a_list_without_the_heat_kernel_refuses_what_only_the_heat_kernel_fits(spiral):
    da = pytest.importorskip("dask.array")
    X, yy = spiral
    pair = [GraphMaternPrior(), RBFPrior()]
    with pytest.raises(ValueError, match="dask cloud is fitted by the heat kernel alone"):
        FLGPRegressor(pair).fit(da.from_array(X, chunks=100), da.from_array(yy, chunks=100))
    labels = np.where(np.isnan(yy), -1, (yy > 0).astype(int))
    with pytest.raises(ValueError, match="HeatKernelPrior"):
        FLGPClassifier(pair).fit(da.from_array(X, chunks=100), labels)
    counts = np.where(np.isnan(yy), np.nan, np.round(np.abs(yy) * 3))
    with pytest.raises(ValueError, match="poisson.*does not include"):
        FLGPRegressor(pair, likelihood="poisson").fit(X, counts)
    # with the heat kernel listed, a dask cloud fits it
    reg = FLGPRegressor([HeatKernelPrior(n_induced=60), GraphMaternPrior()]).fit(
        da.from_array(X, chunks=100), da.from_array(yy, chunks=100))
    assert reg.method_ == "flgp"


def test_the_old_graph_keyword_is_named_not_printed():
    """FLGPClassifier(graph=g), the old spelling, warns in one line that names the graph
    (before, the warning printed the whole PointGraph: 19,000 characters on 400 points);
    the graph's pieces warning points at the prior object, not at the old keyword."""
    import warnings as w

    from flgp.graph import self_tuning_knn_graph

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    y = np.full(400, -1)
    y[[0, 1]] = [0, 1]
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        FLGPClassifier(graph=self_tuning_knn_graph(X, 15)).fit(X, y)
    future = [str(c.message) for c in caught if c.category is FutureWarning]
    assert future and all(len(m) < 400 and "\n" not in m for m in future)
    assert "GraphMaternPrior(graph=...)" in future[0]
    blobs = np.vstack([X, X + 100.0])
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        FLGPClassifier().fit(blobs, np.r_[y, np.full(400, -1)])
    pieces = [str(c.message) for c in caught if "falls apart" in str(c.message)]
    assert pieces and "GraphMaternPrior(graph=" in pieces[0] and "pass graph=" not in pieces[0]
