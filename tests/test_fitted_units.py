"""The graph Matérn regressor's fitted numbers describe its own fit, in the user's units:
on lattices with anisotropic and non-unit voxels, a mesh and k-NN clouds at scales 1e-3
and 1e3, the dense Gaussian evidence at (matern_kappa_, outputscale_, noise_) with the
precision built on the graph as given is log_marginal_likelihood_, the dense posterior
sd is the reported sd within its standard errors, and a GPyTorch model built from the
reported numbers gives the same evidence."""

import numpy as np
import pytest
import torch

from flgp import FLGPRegressor, GraphMaternPrior
from flgp.graph import lattice_graph, mesh_graph
from flgp.precision import matern_precision


def _field(x, seed, frac=0.4):
    """A smooth field at the points ``x`` observed at a random ``frac`` with small noise
    (NaN elsewhere)."""
    rng = np.random.default_rng(seed)
    t = (x - x.mean(0)) / x.std(0).max()
    f = np.sin(2.5 * t[:, 0]) + np.cos(2.0 * t[:, 1]) + 0.5 * t[:, -1]
    return np.where(rng.random(len(f)) < frac, f + 0.05 * rng.standard_normal(len(f)),
                    np.nan)


def _lattice(spacing, shape=(6, 5, 4)):
    ijk = np.argwhere(np.ones(shape, bool))
    affine = np.diag(list(spacing) + [1.0])
    affine[:3, 3] = (3.0, -7.0, 11.0)
    return lattice_graph(ijk, affine)


def _mesh(n=160, size=40.0, seed=3):
    """A triangulated patch of a paraboloid (Delaunay triangles of random parameter
    points), in mm."""
    from scipy.spatial import Delaunay

    uv = np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 2))
    faces = Delaunay(uv).simplices
    V = np.c_[uv, 0.3 * (uv ** 2).sum(axis=1)] * size
    return mesh_graph(V, faces)


def _cloud(scale, n=220):
    from sklearn.datasets import make_moons

    X, _ = make_moons(n, noise=0.05, random_state=0)
    return X * scale


CASES = {
    "lattice 2 x 3 x 1 mm, nu = 2": lambda: (_lattice((2.0, 3.0, 1.0)), 2),
    "lattice 0.5 x 1 x 4 mm": lambda: (_lattice((0.5, 1.0, 4.0)), None),
    "lattice 2 mm": lambda: (_lattice((2.0, 2.0, 2.0), (7, 6, 5)), None),
    "mesh": lambda: (_mesh(), None),
    "k-NN cloud x 1e-3": lambda: (_cloud(1e-3), None),
    "k-NN cloud x 1e3": lambda: (_cloud(1e3), None),
}


def _fit(case, seed=1):
    graph, nu = CASES[case]()
    if isinstance(graph, np.ndarray):                 # a cloud: the regressor's k-NN graph
        X, prior = graph, GraphMaternPrior(nu=nu)
    else:
        X, prior = graph.points, GraphMaternPrior(graph, nu=nu)
    y = _field(X, seed)
    return FLGPRegressor(prior).fit(X, y), X, y


def _dense(reg, y):
    """``(log evidence, posterior sd)`` of the dense Gaussian process at the reported
    numbers: prior ``outputscale_ Q_ν(κ)⁻¹`` on ``graph_`` as given, noise ``noise_``,
    mean the observed targets' mean."""
    Q = matern_precision(reg.graph_, reg.matern_kappa_ ** 2, reg.matern_order_).toarray()
    K = reg.outputscale_ * np.linalg.inv(Q)
    lab = np.flatnonzero(~np.isnan(y))
    S = K[np.ix_(lab, lab)] + reg.noise_ * np.eye(lab.size)
    r = y[lab] - y[lab].mean()
    ev = -0.5 * (lab.size * np.log(2 * np.pi) + np.linalg.slogdet(S)[1]
                 + r @ np.linalg.solve(S, r))
    post = K - K[:, lab] @ np.linalg.solve(S, K[lab])
    return ev, np.sqrt(np.maximum(np.diag(post), 0.0))


@pytest.mark.parametrize("case", list(CASES))
def test_reported_numbers_reproduce_the_evidence_and_the_sd(case):
    reg, X, y = _fit(case)
    assert reg.method_ == "graph_matern"
    ev, sd = _dense(reg, y)
    assert reg.log_marginal_likelihood_ == pytest.approx(ev, abs=1e-6)
    z = np.abs(reg.transduction_std_ - sd) / np.maximum(reg.transduction_std_error_,
                                                        1e-12 * sd.max())
    assert np.median(z) < 2.0 and z.max() < 5.0
    # the evidence's own maximum is the dense evidence at the numbers divided by the
    # cross-validated scale
    c = reg.amplitude_cv_scale_
    best = reg.matern_log_evidence_[reg.matern_order_]
    m = np.count_nonzero(~np.isnan(y))
    assert best == pytest.approx(reg.log_marginal_likelihood_
                                 + 0.5 * m * (np.log(c) + 1 / c - 1), abs=1e-6)


@pytest.mark.parametrize("case", ["lattice 2 x 3 x 1 mm, nu = 2", "mesh",
                                  "k-NN cloud x 1e-3", "k-NN cloud x 1e3"])
def test_a_gpytorch_model_from_the_reported_numbers_has_the_same_evidence(case):
    import gpytorch

    from flgp.kernels import GraphMaternKernel

    reg, X, y = _fit(case)
    kernel = gpytorch.kernels.ScaleKernel(GraphMaternKernel(
        reg.graph_, nu=reg.matern_order_, inputs="index", kappa2=reg.matern_kappa_ ** 2,
        normalize="none")).double()
    kernel.outputscale = reg.outputscale_
    nodes = np.arange(len(y), dtype=np.float64)[:, None]
    value = _gpytorch_evidence(kernel, nodes, y, float(np.nanmean(y)), reg.noise_)
    assert value == pytest.approx(reg.log_marginal_likelihood_, rel=1e-6, abs=1e-6)


def test_a_piece_without_observations_has_the_prior_sd():
    """A piece of a graph that holds no observation: its nodes' reported sd is the prior
    sd sqrt(outputscale_ diag Q⁻¹) of that piece (within its standard errors)."""
    import scipy.sparse as sp

    from flgp.graph import PointGraph

    mesh = _mesh()
    V = mesh.points
    # two copies of the mesh, side by side, not joined: observations on the first only
    n = V.shape[0]
    G = sp.block_diag([mesh.stiffness, mesh.stiffness]).tocsr()
    both = PointGraph(stiffness=G, mass=np.r_[mesh.mass, mesh.mass],
                      points=np.r_[V, V + [100.0, 0.0, 0.0]], kind="mesh",
                      spacing=mesh.spacing)
    y = np.r_[_field(V, 2, frac=0.5), np.full(n, np.nan)]
    with pytest.warns(UserWarning, match="without an observed target"):
        reg = FLGPRegressor(GraphMaternPrior(both)).fit(both.points, y)
    Q = matern_precision(both, reg.matern_kappa_ ** 2, reg.matern_order_).toarray()
    prior_sd = np.sqrt(reg.outputscale_ * np.diag(np.linalg.inv(Q)))[n:]
    z = np.abs(reg.transduction_std_[n:] - prior_sd) / reg.transduction_std_error_[n:]
    assert np.median(z) < 2.0 and z.max() < 5.0


def _gpytorch_evidence(kernel, inputs, y, constant, noise):
    """GPyTorch's exact log marginal likelihood of the labelled ``y`` (NaN: unlabelled)
    with ``kernel`` on the labelled rows of ``inputs``, a ``ConstantMean`` at
    ``constant`` and a ``GaussianLikelihood`` at ``noise``."""
    import gpytorch

    lab = np.flatnonzero(~np.isnan(y))
    train_x = torch.as_tensor(inputs[lab], dtype=torch.float64)
    train_y = torch.as_tensor(y[lab], dtype=torch.float64)

    class Model(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(train_x, train_y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = kernel

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(1e-12)).double()
    model = Model(likelihood).double()
    model.mean_module.constant.data.fill_(float(constant))
    likelihood.noise = noise
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    with torch.no_grad(), gpytorch.settings.fast_computations(False, False, False):
        return float(mll(model(train_x), train_y)) * lab.size


@pytest.mark.parametrize("prior", ["graph matern", "rbf", "heat kernel"])
def test_the_fitted_prior_gives_the_kernel_of_the_evidence(prior):
    """``prior_`` holds what the fit chose in the user's units (anisotropic features: one
    length-scale a feature for the RBF GP), and its GPyTorch kernel, with the constant and
    the noise it holds, gives the regressor's log evidence to 1e-6."""
    from sklearn.datasets import make_moons

    from flgp import Eigenbasis, HeatKernelPrior, RBFPrior

    X, _ = make_moons(300, noise=0.05, random_state=0)
    X = X * np.array([3.0, 0.5])
    y = np.sin(3 * X[:, 0]) + 0.05 * np.random.default_rng(0).standard_normal(300)
    y[::3] = np.nan
    given = {"graph matern": GraphMaternPrior(), "rbf": RBFPrior(),
             "heat kernel": HeatKernelPrior(Eigenbasis(n_induced=60))}[prior]
    reg = FLGPRegressor(given).fit(X, y)
    fitted = reg.prior_
    assert type(fitted) is type(given) and fitted is not given
    assert given.get_params() == type(given)().get_params() or prior == "heat kernel"
    assert fitted.noise_ == reg.noise_ and fitted.outputscale_ == reg.outputscale_
    if prior == "graph matern":
        assert fitted.graph is reg.graph_ and fitted.nu == reg.matern_order_
        assert fitted.kappa_ == reg.matern_kappa_
    elif prior == "rbf":
        sd = X[~np.isnan(y)].std(0)               # the fit standardises the labelled rows
        np.testing.assert_allclose(fitted.lengthscale_ / fitted.lengthscale_[0],
                                   sd / sd[0], rtol=1e-12)
    else:
        assert fitted.diffusion_time == reg.diffusion_time_
        assert fitted.eigenbasis.n_eigenpairs == reg.n_eigenpairs_
        assert given.diffusion_time is None and given.eigenbasis.n_eigenpairs is None
    value = _gpytorch_evidence(fitted.gpytorch_kernel(X), X, y, fitted.constant_,
                               fitted.noise_)
    assert value == pytest.approx(reg.log_marginal_likelihood_, rel=1e-6, abs=1e-6)


def test_the_classifier_keeps_its_fitted_prior():
    """The classifier's ``prior_``: the graph, order and ratio at full resolution; the
    time of the heat kernel as its setting (the prior given keeps its own); one
    length-scale a feature for the RBF GP - each prior's kernel built from it."""
    from sklearn.datasets import make_moons

    from flgp import Eigenbasis, FLGPClassifier, HeatKernelPrior, RBFPrior

    X, y = make_moons(300, noise=0.05, random_state=0)
    yy = np.where(np.arange(300) % 10 == 0, y, -1)
    clf = FLGPClassifier().fit(X, yy)
    assert clf.method_ == "graph_matern" and isinstance(clf.prior_, GraphMaternPrior)
    assert clf.prior_.graph is clf.graph_ and clf.prior_.nu == clf.matern_order_
    assert clf.prior_.prior_to_noise_ratio_ == clf.prior_to_noise_ratio_
    # κ on the self-tuning graph, whose weights have no units: the same whatever the
    # units of X, a fixed share of the graph's own 1 / length
    wide = FLGPClassifier().fit(X * 1e3, yy)
    assert wide.prior_.kappa_ == pytest.approx(clf.prior_.kappa_, rel=1e-9)
    assert 0 < clf.prior_.kappa_ < 0.01
    heat = HeatKernelPrior(Eigenbasis(n_induced=60))
    clf = FLGPClassifier(heat).fit(X, yy)
    assert clf.prior_.diffusion_time == clf.diffusion_time_ and heat.diffusion_time is None
    assert clf.prior_.amplitude_ == clf.amplitude_
    clf = FLGPClassifier(RBFPrior()).fit(X, yy)
    assert clf.prior_.lengthscale_.shape == (2,) and np.all(clf.prior_.lengthscale_ > 0)
    for prior in (FLGPClassifier().fit(X, yy).prior_, clf.prior_):
        kernel = prior.gpytorch_kernel(X)
        K = kernel(torch.as_tensor(X[:5], dtype=torch.float64)).to_dense()
        assert K.dtype == torch.float64 and torch.all(torch.linalg.eigvalsh(K) > -1e-10)
