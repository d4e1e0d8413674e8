"""The priors as objects (flgp.models.priors): the new form fits what the old parameters
fitted, the old parameters still work behind a FutureWarning (constructor, set_params,
pickles), wrong priors are refused, and each prior gives its GPyTorch kernel."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError

from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
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


def test_at_most_ten_parameters():
    """Each estimator and each prior has at most ten parameters: the heat kernel's
    eigenbasis is an object of its own, the classifier's calibration the classifier's."""
    for est in (FLGPClassifier(), FLGPRegressor()):
        params = est.get_params(deep=False)
        assert len(params) <= 10, sorted(params)
        assert "prior" in params and "kernel" not in params and "method" not in params
    for prior in (HeatKernelPrior(), GraphMaternPrior(), RBFPrior()):
        assert len(prior.get_params(deep=False)) <= 10, type(prior).__name__
    assert "calibration" in FLGPClassifier().get_params()
    assert "calibration" not in HeatKernelPrior().get_params()


def test_old_keywords_are_refused_and_settings_read_back_from_the_prior():
    """The parameters before the prior objects (method=, matern_order=, n_induced=, ...)
    are refused by the constructor and by set_params, naming the valid parameters; the
    prior's settings read back as read-only attributes; the default warns of nothing."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'method'"):
        FLGPRegressor(method="graph_matern")
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_induced'"):
        FLGPClassifier(n_induced=50)
    with pytest.raises(ValueError, match="Invalid parameter 'kernel'.*'prior'"):
        FLGPClassifier().set_params(kernel="se")
    reg = FLGPRegressor(GraphMaternPrior(nu=3))
    assert reg.matern_order == 3 and reg.method == "graph_matern"
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=50)), GraphMaternPrior(), RBFPrior()])
    assert reg.n_induced == 50 and reg.method == "auto"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert FLGPClassifier().prior is None and FLGPRegressor().method == "auto"


def test_set_params_sets_the_prior_and_clone_keeps_it():
    est = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=70)), random_state=3)
    twin = clone(est)
    assert twin.prior is not est.prior and twin.prior.eigenbasis is not est.prior.eigenbasis
    assert twin.prior.eigenbasis.get_params() == est.prior.eigenbasis.get_params()
    # the eigenbasis's settings are nested parameters too
    est.set_params(prior__eigenbasis__n_induced=90)
    assert est.n_induced == 90 and est.prior.basis.n_induced == 90
    est.set_params(prior=GraphMaternPrior(nu=2))
    assert est.method == "graph_matern" and est.matern_order == 2
    # nested parameters, scikit-learn's way
    est.set_params(prior__nu=1)
    assert est.prior.nu == 1

def test_a_list_weighs_only_its_members(spiral):
    X, yy = spiral
    reg = FLGPRegressor([GraphMaternPrior(), RBFPrior()]).fit(X, yy)
    assert set(reg.log_evidence_) == {"graph_matern", "rbf"}
    assert reg.method_ == max(reg.log_evidence_, key=reg.log_evidence_.get)
    both = FLGPRegressor().fit(X, yy)
    assert set(both.log_evidence_) == {"flgp", "graph_matern", "rbf"}
    for name in ("graph_matern", "rbf"):                # the same fits, whoever else is weighed
        # (to the searches' tolerance: a hundredth of a nat)
        assert reg.log_evidence_[name] == pytest.approx(both.log_evidence_[name], abs=1e-2)
    alone = FLGPRegressor(HeatKernelPrior()).fit(X, yy)
    assert alone.method_ == "flgp"
    np.testing.assert_allclose(alone.log_marginal_likelihood_,
                               both.log_evidence_["flgp"], rtol=0, atol=1e-2)


def test_wrong_priors_are_refused(spiral):
    X, yy = spiral
    with pytest.raises(InvalidParameterError, match="prior"):
        FLGPRegressor(prior="graph_matern").fit(X, yy)
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
    with pytest.raises(InvalidParameterError, match="'n_neighbors' parameter of Eigenbasis"):
        FLGPRegressor(HeatKernelPrior(Eigenbasis(n_neighbors=0))).fit(X, yy)
    with pytest.raises(ValueError, match="diffusion_time"):
        FLGPRegressor(HeatKernelPrior(diffusion_time=np.inf)).fit(X, yy)
    with pytest.raises(ValueError, match="lae_regularization"):
        FLGPRegressor(HeatKernelPrior(Eigenbasis(lae_regularization=np.inf))).fit(X, yy)
    with pytest.raises(ValueError, match="nu = 1 or 2"):
        FLGPClassifier(GraphMaternPrior(nu=3)).fit(X, np.where(np.isnan(yy), -1,
                                                               yy > 0).astype(int))
    # an old keyword beside a prior, and a name that never existed: the constructor
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_induced'"):
        FLGPRegressor(GraphMaternPrior(), n_induced=40)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_induce'"):
        FLGPRegressor(n_induce=40)


def test_each_prior_gives_its_gpytorch_kernel(spiral):
    X, _ = spiral
    heat = HeatKernelPrior(Eigenbasis(n_induced=60, n_eigenpairs=20)).gpytorch_kernel(X, random_state=0)
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
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=60)), GraphMaternPrior()]).fit(
        da.from_array(X, chunks=100), da.from_array(yy, chunks=100))
    assert reg.method_ == "flgp"
