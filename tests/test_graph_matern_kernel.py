"""The full-resolution graph Matérn prior as a GPyTorch kernel
(:class:`flgp.kernels.GraphMaternKernel`): kernel matrices, the exact marginal likelihood
and its gradients, the stochastic trace estimator, predictions, batches, fantasies and bad
inputs, against dense references on small lattice, mesh and k-NN graphs."""

import pickle
import unittest

import gpytorch
import numpy as np
import pytest
import torch
from gpytorch.test.base_kernel_test_case import BaseKernelTestCase
from linear_operator.operators import DiagLinearOperator

import flgp.kernels.graph_matern as gm
from flgp.graph import knn_point_graph, lattice_graph, mesh_graph
from flgp.kernels import GraphMaternKernel
from flgp.kernels.graph_matern import (GraphMaternCovariance, GraphMaternNoisyCovariance,
                                       GraphMaternPosteriorCovariance,
                                       GraphMaternPredictionStrategy)
from flgp.precision import matern_precision
from flgp.precision.gaussian import MaternRegression

F64 = torch.float64


# -- graphs --------------------------------------------------------------------------------

def _lattice():
    """A 3-d block of 9 x 8 x 2 voxels of 2 x 2 x 3 mm."""
    return lattice_graph(np.argwhere(np.ones((9, 8, 2), bool)), np.diag([2.0, 2.0, 3.0, 1.0]))


def _mesh():
    """A wavy 11 x 10 grid of triangles in 3-d (units: cm)."""
    u, v = np.meshgrid(np.linspace(0, 4, 11), np.linspace(0, 3, 10), indexing="ij")
    V = np.c_[u.ravel(), v.ravel(), 0.3 * np.sin(u.ravel()) * np.cos(v.ravel())]
    idx = np.arange(V.shape[0]).reshape(11, 10)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[:-1, 1:].ravel(), \
        idx[1:, 1:].ravel()
    return mesh_graph(V, np.r_[np.c_[a, b, d], np.c_[a, d, c]])


def _knn():
    X = np.random.default_rng(3).random((120, 2)) * 50.0          # metres, say
    return knn_point_graph(X, 8)


GRAPHS = {"lattice": _lattice, "mesh": _mesh, "knn": _knn}
_CACHE = {}


def graph(name):
    if name not in _CACHE:
        _CACHE[name] = GRAPHS[name]()
    return _CACHE[name]


def _kappa2(g):
    """A κ² (user units) for a range of about four spacings."""
    return 1.0 / (4.0 * g.spacing) ** 2


# -- dense references ----------------------------------------------------------------------

def kernel64(g, kappa2=None, **kw):
    """A float64 kernel whose κ² is exactly ``kappa2`` (a float32 parameter would round it)."""
    k = GraphMaternKernel(g, **kw).double()
    k.kappa2 = _kappa2(g) if kappa2 is None else kappa2
    return k


def dense_inverse(g, kappa2, nu):
    """``Q_ν(κ)⁻¹`` of ``g`` in its own units of the points, by numpy."""
    return np.linalg.inv(matern_precision(g, kappa2, nu).toarray())


def dense_kernel_torch(kernel, g, kappa2):
    """The kernel's dense matrix (all nodes) as a differentiable function of the user's
    ``κ²`` (a tensor), in the graph's given units: ``Q⁻¹ / mean_r [Q⁻¹]_rr`` with the mean
    at ``κ`` (``normalize="variance"``) or at ``κ_h = 1/(10h)`` (``"fixed"``), or ``Q⁻¹``."""
    C = torch.as_tensor(g.mass, dtype=F64)
    G = torch.as_tensor(g.stiffness.toarray(), dtype=F64)
    K = kappa2 * torch.diag(C) + G
    Q = K
    for _ in range(kernel.nu - 1):
        Q = Q @ torch.diag(1.0 / C) @ K
    S = torch.linalg.inv(0.5 * (Q + Q.T))
    if kernel.normalize == "none":
        return S
    r = kernel.reference_nodes
    if kernel.normalize == "variance":
        return S / S[r, r].mean()
    Sh = np.linalg.inv(matern_precision(g, 1.0 / (10.0 * g.spacing) ** 2, kernel.nu).toarray())
    return S / Sh[r, r].mean()


class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel, mean=None, batch_shape=torch.Size()):
        super().__init__(x, y, likelihood)
        self.mean_module = mean if mean is not None else gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(kernel, batch_shape=batch_shape)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


def _problem(name, nu=2, m=30, seed=0, **kw):
    g = graph(name)
    rng = np.random.default_rng(seed)
    obs = np.sort(rng.choice(g.n_nodes, m, replace=False))
    x = torch.as_tensor(g.points[obs], dtype=F64)
    y = np.sin(g.points[obs, 0] / (3 * g.spacing)) + 0.1 * rng.standard_normal(m)
    y = torch.as_tensor(y, dtype=F64)
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    kernel = kernel64(g, nu=nu, **kw)
    model = GP(x, y, lik, kernel, gpytorch.means.ConstantMean()).double()
    model.covar_module.outputscale = 1.7
    model.mean_module.constant.data.fill_(0.2)
    lik.noise = 0.05
    return g, obs, x, y, model, lik


def _dense_loss(model, g, obs, y):
    k = model.covar_module.base_kernel
    S = dense_kernel_torch(k, g, k.kappa2.reshape(()).to(F64))
    cov = model.covar_module.outputscale * S[np.ix_(obs, obs)] \
        + model.likelihood.noise * torch.eye(obs.size, dtype=F64)
    mean = model.mean_module.constant.expand(obs.size)
    mvn = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
    return -mvn.log_prob(y) / obs.size


def _grads(model, loss_fn):
    model.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


# -- the kernel matrix ---------------------------------------------------------------------

@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("nu", [1, 2, 3])
def test_kernel_matrix_equals_dense_inverse(name, nu):
    g = graph(name)
    k2 = _kappa2(g)
    S = dense_inverse(g, k2, nu)
    rng = np.random.default_rng(1)
    a, b = rng.choice(g.n_nodes, 25, replace=False), rng.choice(g.n_nodes, 17, replace=False)
    xa, xb = torch.as_tensor(g.points[a]), torch.as_tensor(g.points[b])
    raw = kernel64(g, k2, nu=nu, normalize="none")
    np.testing.assert_allclose(raw(xa, xb).to_dense().detach(), S[np.ix_(a, b)],
                               rtol=1e-9, atol=1e-12 * np.abs(S).max())
    k = kernel64(g, k2, nu=nu, normalize="variance")
    r = k.reference_nodes
    Sn = S / S[r, r].mean()
    K = k(xa).to_dense().detach().numpy()
    np.testing.assert_allclose(K, Sn[np.ix_(a, a)], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    assert np.linalg.eigvalsh(K).min() > 0
    np.testing.assert_allclose(k(xa, diag=True).detach(), np.diag(Sn)[a], rtol=1e-9)
    np.testing.assert_allclose(k(xa, xb).to_dense().detach(), Sn[np.ix_(a, b)], rtol=1e-9,
                               atol=1e-12)
    # node indices as a float tensor (..., N, 1) give the same matrix
    ki = kernel64(g, k2, nu=nu, inputs="index", normalize="variance")
    ia = torch.as_tensor(a, dtype=F64)[:, None]
    np.testing.assert_allclose(ki(ia).to_dense().detach(), K, rtol=1e-12)
    assert isinstance(k(xa).evaluate_kernel(), GraphMaternCovariance)
    # the default: Q⁻¹ over its mean reference variance at a range of ten spacings
    kf = kernel64(g, k2, nu=nu)
    Sh = dense_inverse(g, 1.0 / (10.0 * g.spacing) ** 2, nu)
    # (Q at κ_h is ill-conditioned for ν = 3: the dense inverse is good to ~1e-8)
    np.testing.assert_allclose(kf(xa).to_dense().detach(), S[np.ix_(a, a)] / Sh[r, r].mean(),
                               rtol=1e-7)


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_high_orders_far_from_unit_scales(scale):
    """ν = 8 on a k-NN cloud in units 1e-3 and 1e3: in float64 every normalisation gives
    finite entries equal to the dense ``Q⁻¹ = (K⁻¹C)^{ν-1} K⁻¹`` (entries near 1e±50:
    outside float32, inside float64); in float32 a ValueError says what to change
    wherever the amplitude or the prior variance leaves float32's range (no inf, NaN or
    overflow error from torch)."""
    g = knn_point_graph(np.random.default_rng(5).random((60, 2)) * scale, 6)
    nu, k2 = 8, 1.0 / (4.0 * g.spacing) ** 2
    C = g.mass
    Kinv = np.linalg.inv(k2 * np.diag(C) + g.stiffness.toarray())
    S = Kinv.copy()
    for _ in range(nu - 1):
        S = Kinv @ (C[:, None] * S)
    x = torch.arange(6, dtype=F64)[:, None]
    for normalize in ("none", "fixed", "variance"):
        k = kernel64(g, k2, nu=nu, normalize=normalize, inputs="index")
        K = k(x).to_dense().detach().numpy()
        assert np.all(np.isfinite(K))
        if normalize == "none":
            assert not 1e-30 < abs(K[0, 0]) < 1e30          # outside float32's comfort
            np.testing.assert_allclose(K, S[:6, :6], rtol=1e-6)
        elif normalize == "variance":
            r = k.reference_nodes
            np.testing.assert_allclose(K, S[:6, :6] / S[r, r].mean(), rtol=1e-6)
    k32 = GraphMaternKernel(g, nu=nu, normalize="none", inputs="index")
    k32.kappa2 = k2
    with pytest.raises(ValueError, match=r"outside what torch.float32 holds; compute in "
                                         r"float64"):
        k32(x.float()).to_dense()


def test_a_graph_with_nan_masses_is_refused_by_name():
    """A graph whose masses (or weights) were changed to NaN after it was built: the
    kernel refuses it naming the first bad node, before any factorisation; so does a
    graph built that way."""
    import dataclasses

    g = _knn()
    mass = g.mass.copy()
    mass[7] = np.nan
    changed = dataclasses.replace(g, mass=g.mass.copy())
    changed.mass[7] = np.nan
    with pytest.raises(ValueError, match=r"1 are not \(node 7: nan\)"):
        GraphMaternKernel(changed)
    with pytest.raises(ValueError, match=r"mass of every node.*node 7: nan"):
        dataclasses.replace(g, mass=mass)
    weights = g.stiffness.copy()
    weights.data[0] = np.inf
    with pytest.raises(ValueError, match="stiffness .* NaN or infinite"):
        dataclasses.replace(g, stiffness=weights)


def test_units_do_not_change_the_normalised_kernel():
    """The same lattice in mm and in metres: κ² moves by 10⁶, the kernel stays."""
    ijk = np.argwhere(np.ones((7, 6, 3), bool))
    mm = lattice_graph(ijk, np.diag([2.0, 2.0, 2.0, 1.0]))
    metres = lattice_graph(ijk, np.diag([2e-3, 2e-3, 2e-3, 1.0]))
    k_mm = kernel64(mm, 0.02, nu=3)
    k_m = kernel64(metres, 0.02e6, nu=3)
    a = np.arange(0, 126, 5)
    np.testing.assert_allclose(k_m(torch.as_tensor(metres.points[a])).to_dense().detach(),
                               k_mm(torch.as_tensor(mm.points[a])).to_dense().detach(),
                               rtol=1e-9)
    assert k_mm.kappa2.item() == pytest.approx(0.02)
    np.testing.assert_allclose(k_mm.graph.stiffness.toarray(), k_m.graph.stiffness.toarray(),
                               rtol=1e-9, atol=1e-12)


def test_scale_kernel_folds_into_the_sparse_operator():
    g = graph("lattice")
    k = kernel64(g)
    x = torch.as_tensor(g.points[:20])
    sk = gpytorch.kernels.ScaleKernel(k).double()
    sk.outputscale = 2.5
    op = sk(x).evaluate_kernel()
    assert isinstance(op, GraphMaternCovariance)
    np.testing.assert_allclose(op.to_dense().detach(), 2.5 * k(x).to_dense().detach(),
                               rtol=1e-12)
    noisy = op + DiagLinearOperator(torch.full((20,), 0.1, dtype=F64))
    assert isinstance(noisy, GraphMaternNoisyCovariance)
    # an outputscale batch wider than the kernel's: still the sparse operator
    sk3 = gpytorch.kernels.ScaleKernel(k, batch_shape=torch.Size([3])).double()
    sk3.outputscale = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    op3 = sk3(x).evaluate_kernel()
    assert isinstance(op3, GraphMaternCovariance) and op3.shape == (3, 20, 20)
    np.testing.assert_allclose(op3.to_dense()[2].detach(), 3 * k(x).to_dense().detach(),
                               rtol=1e-12)


# -- the marginal likelihood and its gradients ---------------------------------------------

@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("nu", [1, 2])
@pytest.mark.parametrize("normalize", ["fixed", "variance", "none"])
def test_mll_and_gradients_equal_dense_autograd(name, nu, normalize):
    g, obs, x, y, model, lik = _problem(name, nu=nu, normalize=normalize)
    if normalize == "none":             # an outputscale of the order of Q⁻¹'s entries
        with torch.no_grad():
            model.covar_module.outputscale = 1.7 / float(
                dense_inverse(g, _kappa2(g), nu).diagonal().mean())
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    model.train()
    loss, grads = _grads(model, lambda: -mll(model(x), y))
    ref_loss, ref = _grads(model, lambda: _dense_loss(model, g, obs, y))
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
    assert set(grads) == set(ref) and len(grads) == 4
    for n in grads:
        np.testing.assert_allclose(grads[n], ref[n], rtol=1e-7, atol=1e-10, err_msg=n)
    assert model.covar_module.base_kernel.trace_diagnostics["estimator"] == "exact"


def test_mll_never_uses_dense_solvers(monkeypatch):
    """Above GPyTorch's max_cholesky_size the log likelihood still goes through the sparse
    operator (GPyTorch's Cholesky, CG and Lanczos are never called)."""
    g = lattice_graph(np.argwhere(np.ones((30, 30, 1), bool)))
    rng = np.random.default_rng(0)
    obs = np.sort(rng.choice(g.n_nodes, 850, replace=False))
    x = torch.as_tensor(g.points[obs])
    y = torch.as_tensor(rng.standard_normal(850))
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(x, y, lik, GraphMaternKernel(g, kappa2=0.05)).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)

    def forbidden(*args, **kwargs):
        raise AssertionError("a dense solver was called")

    import linear_operator
    monkeypatch.setattr(linear_operator.utils, "linear_cg", forbidden)
    monkeypatch.setattr(linear_operator.operators._linear_operator.LinearOperator, "cholesky",
                        forbidden)
    calls = []
    orig = GraphMaternNoisyCovariance.inv_quad_logdet

    def spy(self, *a, **kw):
        calls.append(self.shape)
        return orig(self, *a, **kw)

    monkeypatch.setattr(GraphMaternNoisyCovariance, "inv_quad_logdet", spy)
    loss = -mll(model(x), y)
    loss.backward()
    assert calls == [torch.Size([850, 850])]
    assert np.isfinite(loss.item())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_heteroskedastic_noise_and_repeated_nodes():
    """FixedNoiseGaussianLikelihood (one noise variance per target) and a node observed
    twice: the log likelihood and its gradients equal the dense ones."""
    g = graph("mesh")
    rng = np.random.default_rng(4)
    obs = np.r_[np.sort(rng.choice(g.n_nodes, 20, replace=False)), 7, 7]
    x = torch.as_tensor(g.points[obs])
    y = torch.as_tensor(rng.standard_normal(obs.size))
    noise = torch.as_tensor(rng.uniform(0.02, 0.2, obs.size))
    lik = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
        noise=noise, learn_additional_noise=True).double()
    model = GP(x, y, lik, GraphMaternKernel(g, nu=2, kappa2=_kappa2(g))).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    loss, grads = _grads(model, lambda: -mll(model(x), y))

    def dense():
        k = model.covar_module.base_kernel
        S = dense_kernel_torch(k, g, k.kappa2.reshape(()))
        cov = model.covar_module.outputscale * S[np.ix_(obs, obs)] + torch.diag(
            noise + lik.second_noise)
        return -torch.distributions.MultivariateNormal(torch.zeros(obs.size, dtype=F64),
                                                       cov).log_prob(y) / obs.size

    ref_loss, ref = _grads(model, dense)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
    for n in grads:
        np.testing.assert_allclose(grads[n], ref[n], rtol=1e-7, atol=1e-10, err_msg=n)


def test_functions_pass_gradcheck():
    """The autograd functions' backward passes against finite differences (float64)."""
    g = graph("knn")
    rng = np.random.default_rng(5)
    rows = np.sort(rng.choice(g.n_nodes, 12, replace=False))
    test = np.arange(5)
    k = GraphMaternKernel(g, nu=2, kappa2=_kappa2(g)).double()
    eng = k._engine
    k2 = torch.tensor(k.kappa2.item() * k._length2, dtype=F64, requires_grad=True)
    c = torch.tensor(1.3, dtype=F64, requires_grad=True)
    d = torch.as_tensor(rng.uniform(0.05, 0.2, 12)).requires_grad_(True)
    R = torch.as_tensor(rng.standard_normal((12, 2))).requires_grad_(True)

    def inv_quad_logdet(k2, c, d, R):
        q, ld = gm._InvQuadLogdet.apply(k2, c, d, R, eng, rows, True)
        return q, ld

    assert torch.autograd.gradcheck(inv_quad_logdet, (k2, c, d, R))
    assert torch.autograd.gradcheck(
        lambda k2, c, d, R: gm._NoisySolve.apply(k2, c, d, R, eng, rows), (k2, c, d, R))
    assert torch.autograd.gradcheck(
        lambda k2, c, d, R: gm._PosteriorMean.apply(k2, c, d, R, eng, rows, test),
        (k2, c, d, R))
    V = torch.as_tensor(rng.standard_normal((12, 3))).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda k2, c, V: gm._CovarianceMatmul.apply(k2, c, V, eng, test, rows), (k2, c, V))
    assert torch.autograd.gradcheck(lambda k2: gm._ReferenceVariance.apply(k2, eng), (k2,))
    assert torch.autograd.gradcheck(
        lambda k2: gm._PriorEntries.apply(k2, eng, rows, rows[::-1].copy()), (k2,))
    # a diagonal (its forward pass's columns kept for the backward), a node twice
    twice = np.r_[rows, rows[:3]]
    assert torch.autograd.gradcheck(
        lambda k2: gm._PriorEntries.apply(k2, eng, twice, twice.copy()), (k2,))


def test_a_diagonals_derivative_from_its_kept_columns_equals_the_dense_one():
    """``∂ diag(Q⁻¹)/∂κ² = -diag(Q⁻¹ Q' Q⁻¹)`` at some nodes (one twice): from the forward
    pass's kept columns, from fresh solves, and densely; and nothing is kept beyond
    ``KEPT_COLUMN_ENTRIES``."""
    g = graph("lattice")
    k = GraphMaternKernel(g, nu=2, kappa2=_kappa2(g)).double()
    eng, k2 = k._engine, k.kappa2.item() * k._length2
    nodes = np.array([3, 40, 40, 77, 120])
    weights = np.array([0.5, -1.0, 2.0, 0.3, 1.1])
    values, columns = eng.prior_entries(k2, nodes, nodes, keep=True)
    S = np.linalg.inv(eng.Q(k2).toarray())
    np.testing.assert_allclose(values, S[nodes, nodes], rtol=1e-10)
    dense = -np.sum(weights * (S @ eng.dQ(k2).toarray() @ S)[nodes, nodes])
    kept = eng.prior_entries_grad(k2, nodes, nodes, weights, columns=columns)
    fresh = eng.prior_entries_grad(k2, nodes, nodes, weights)
    assert kept == pytest.approx(dense, rel=1e-9) and fresh == pytest.approx(dense, rel=1e-9)
    old = gm.KEPT_COLUMN_ENTRIES
    try:
        gm.KEPT_COLUMN_ENTRIES = eng.n * 3          # four distinct nodes: too many
        assert eng.prior_entries(k2, nodes, nodes, keep=True)[1] is None
    finally:
        gm.KEPT_COLUMN_ENTRIES = old


class _VariationalGP(gpytorch.models.ApproximateGP):
    """GPyTorch's variational GP with the graph Matérn kernel, inducing points at nodes."""

    def __init__(self, g, inducing, solver="auto"):
        dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
        strategy = gpytorch.variational.VariationalStrategy(
            self, inducing, dist, learn_inducing_locations=False)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(GraphMaternKernel(g, nu=2,
                                                                           solver=solver))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


@pytest.mark.parametrize("likelihood, solver", [("bernoulli", "cholesky"),
                                                ("poisson", "cholesky"), ("bernoulli", "cg")])
def test_variational_models_with_bernoulli_and_poisson_likelihoods(likelihood, solver):
    """Non-Gaussian likelihoods through GPyTorch's approximate inference: labels or counts
    from a smooth field on a 20 x 20 lattice, 150 observed, 40 inducing nodes; Adam on the
    ELBO lowers it, and the fit recovers the field's sign (Bernoulli) or its rate
    (Poisson) at every node - by the factors, or by conjugate gradients (the blocks' solves
    need no log-determinant)."""
    torch.manual_seed(0)
    ijk = np.argwhere(np.ones((20, 20, 1), bool))
    g = lattice_graph(ijk)
    rng = np.random.default_rng(0)
    field = np.sin(ijk[:, 0] / 4.0) + np.cos(ijk[:, 1] / 5.0)
    obs = rng.choice(g.n_nodes, 150, replace=False)
    if likelihood == "bernoulli":
        y = (rng.random(obs.size) < 1 / (1 + np.exp(-4 * field[obs]))).astype(np.float64)
        lik = gpytorch.likelihoods.BernoulliLikelihood()
    else:
        y = rng.poisson(np.exp(1.0 + field[obs])).astype(np.float64)
        lik = gpytorch.likelihoods.PoissonLikelihood()
    x = torch.as_tensor(g.points[obs], dtype=F64)
    inducing = torch.as_tensor(g.points[rng.choice(g.n_nodes, 40, replace=False)], dtype=F64)
    model = _VariationalGP(g, inducing, solver).double()
    elbo = gpytorch.mlls.VariationalELBO(lik, model, num_data=obs.size)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = -elbo(model(x), torch.as_tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.1
    model.eval()
    with torch.no_grad():
        latent = model(torch.as_tensor(g.points, dtype=F64)).mean.numpy()
    if likelihood == "bernoulli":
        assert np.mean((latent > 0) == (field > 0)) > 0.8
    else:
        assert np.corrcoef(latent, field)[0, 1] > 0.75


# -- the stochastic estimator of the log-determinant's gradient ----------------------------

def _logdet_gradients(g, obs, estimator, random_state, n_probes=8):
    """``(∂/∂κ², ∂/∂a, Σ_i ∂/∂d_i)`` of ``log|a P Q⁻¹ Pᵀ + D|`` (own units) and the
    kernel's diagnostics."""
    k = GraphMaternKernel(g, nu=2, kappa2=_kappa2(g), trace_estimator=estimator,
                          n_probes=n_probes, random_state=random_state).double()
    eng = k._engine
    k2 = torch.tensor(k.kappa2.item() * k._length2, dtype=F64, requires_grad=True)
    c = torch.tensor(2.0, dtype=F64, requires_grad=True)
    d = torch.full((obs.size,), 0.01, dtype=F64, requires_grad=True)
    _, ld = gm._InvQuadLogdet.apply(k2, c, d, None, eng, obs, True)
    ld.backward()
    return np.array([k2.grad.item(), c.grad.item(), d.grad.sum().item()]), \
        dict(eng.last_trace), k2.item()


def test_finite_difference_of_logdet_K_is_exact_to_1e5():
    g = lattice_graph(np.argwhere(np.ones((20, 20, 1), bool)))
    k = GraphMaternKernel(g, nu=2).double()
    eng = k._engine
    for k2 in (1e-3, 0.05, 2.0):
        K = eng.family(1).matrix(k2).toarray()
        exact = np.trace(np.linalg.solve(K, np.diag(eng.mass)))
        assert eng.dlogdet_K(k2) == pytest.approx(exact, rel=1e-5)


def test_stochastic_gradient_error_within_its_stated_standard_error():
    """On a 1,600-node lattice with 480 observed nodes: the estimator's gradient of the
    log-determinant in κ² is unbiased (the mean of 30 seeds within 4 standard errors of
    the exact value), its reported standard error matches the seeds' spread (within a
    factor 2), and every estimate - of the κ², amplitude and noise gradients - lies
    within 5 of its reported standard errors; per unit of the log of each parameter the
    standard errors are below 2 % of the κ² gradient and 0.1 nats for the others."""
    g = lattice_graph(np.argwhere(np.ones((40, 40, 1), bool)))
    obs = np.sort(np.random.default_rng(0).choice(g.n_nodes, 480, replace=False))
    exact, info, k2 = _logdet_gradients(g, obs, "exact", 0)
    assert info["estimator"] == "exact"
    errors, ses = [], []
    for seed in range(30):
        est, info, _ = _logdet_gradients(g, obs, "stochastic", seed)
        assert info["estimator"] == "stochastic" and info["n_probes"] == 8
        errors.append(est[0] - exact[0])
        ses.append(info["delta_se"])
        assert abs(est[0] - exact[0]) <= 5 * info["delta_se"]
        c, d = 2.0, 0.01                            # the amplitude and noise of the helper
        assert abs(est[1] - exact[1]) <= 5 * info["weighted_diagonal_se"]
        assert abs(est[2] - exact[2]) <= 5 * c * info["noise_diagonal_se"]
        assert c * info["weighted_diagonal_se"] < 0.1
        assert d * c * info["noise_diagonal_se"] < 0.1
    errors, ses = np.array(errors), np.array(ses)
    assert abs(errors.mean()) <= 4 * ses.mean() / np.sqrt(errors.size)
    assert 0.5 <= errors.std(ddof=1) / ses.mean() <= 2.0
    assert k2 * ses.mean() < 0.02 * abs(k2 * exact[0])


def test_stochastic_probes_are_a_function_of_the_point():
    g = lattice_graph(np.argwhere(np.ones((30, 30, 1), bool)))
    obs = np.arange(0, 900, 3)
    a = _logdet_gradients(g, obs, "stochastic", 7)[0]
    b = _logdet_gradients(g, obs, "stochastic", 7)[0]
    c = _logdet_gradients(g, obs, "stochastic", 8)[0]
    np.testing.assert_array_equal(a, b)
    assert a[0] != c[0]


# -- predictions ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(GRAPHS))
def test_predictions_equal_the_dense_posterior_and_the_regressor(name):
    g, obs, x, y, model, lik = _problem(name, nu=2)
    model.eval()
    lik.eval()
    test = np.setdiff1d(np.arange(g.n_nodes), obs)[:40]
    xt = torch.as_tensor(g.points[test])
    with torch.no_grad():
        f = model(xt)
        pred = lik(f)
    assert isinstance(model.prediction_strategy, GraphMaternPredictionStrategy)
    assert isinstance(f.lazy_covariance_matrix, GraphMaternPosteriorCovariance)
    k = model.covar_module.base_kernel
    a, sigma2, c0 = model.covar_module.outputscale.item(), lik.noise.item(), \
        model.mean_module.constant.item()
    S = a * dense_kernel_torch(k, g, torch.tensor(k.kappa2.item(), dtype=F64)).numpy()
    Kxx = S[np.ix_(obs, obs)] + sigma2 * np.eye(obs.size)
    Ktx = S[np.ix_(test, obs)]
    mu = c0 + Ktx @ np.linalg.solve(Kxx, y.numpy() - c0)
    cov = S[np.ix_(test, test)] - Ktx @ np.linalg.solve(Kxx, Ktx.T)
    np.testing.assert_allclose(f.mean, mu, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(f.variance, np.diag(cov), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(pred.variance, np.diag(cov) + sigma2, rtol=1e-8)
    np.testing.assert_allclose(f.covariance_matrix, cov, rtol=1e-7, atol=1e-10)
    # flgp's regressor at the same hyperparameters: κ² in the graph's own units, the
    # noise-to-signal ratio r = σ² / (a / v̄) with the amplitude of Q_own⁻¹
    with torch.no_grad():
        _, scale = k.own_hyperparameters()
    amp = a * scale.item()
    reg = MaternRegression(k.graph, obs, y.numpy() - c0, 2)
    mu_reg = reg.posterior_mean(k.kappa2.item() * k._length2, sigma2 / amp)
    np.testing.assert_allclose(f.mean - c0, mu_reg[test], rtol=1e-9, atol=1e-12)


# -- solves by conjugate gradients ---------------------------------------------------------

@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("nu", [1, 2])
def test_conjugate_gradient_solves_equal_the_factors(name, nu):
    """``solver="cg"``: the prior's and the posterior's solves by conjugate gradients on
    torch sparse matrices equal CHOLMOD's (and the dense inverse)."""
    g = graph(name)
    k = GraphMaternKernel(g, nu=nu, kappa2=_kappa2(g)).double()
    eng, k2 = k._engine, k.kappa2.item() * k._length2
    rng = np.random.default_rng(1)
    B = rng.standard_normal((eng.n, 3))
    obs = gm._Observations(np.sort(rng.choice(eng.n, 20, replace=False)),
                           rng.uniform(0.05, 0.2, 20), eng.n)
    eng.configure("cholesky", "cpu")
    prior, posterior = eng.solve_Q(k2, B), eng.solve_posterior(k2, 1.7, obs, B)
    eng.configure("cg", "cpu")
    cg_prior, cg_posterior = eng.solve_Q(k2, B), eng.solve_posterior(k2, 1.7, obs, B)
    eng.configure("cholesky", "cpu")
    dense = np.linalg.solve(eng.Q(k2).toarray(), B)
    for got, want in ((cg_prior, prior), (cg_posterior, posterior), (prior, dense)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7 * np.abs(want).max())
    assert not np.array_equal(cg_prior, prior)       # another computation, not the factor's


def test_conjugate_gradient_model_predicts_and_trains_as_the_factors():
    """A model whose kernel solves by conjugate gradients: the same marginal likelihood and
    gradients (the log-determinant stays on the factor), the same predictions and
    predictive covariance products, the same variational steps."""
    results = {}
    for solver in ("cholesky", "cg"):
        g, obs, x, y, model, lik = _problem("mesh", nu=2, solver=solver)
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
        model.train()
        loss, grads = _grads(model, lambda: -mll(model(x), y))
        model.eval()
        lik.eval()
        test = np.setdiff1d(np.arange(g.n_nodes), obs)[:25]
        with torch.no_grad():
            f = model(torch.as_tensor(g.points[test]))
            product = f.lazy_covariance_matrix @ torch.ones(test.size, 2, dtype=F64)
        assert model.covar_module.base_kernel._engine.solver == solver
        results[solver] = (loss, grads, f.mean, product)
    (l0, g0, m0, p0), (l1, g1, m1, p1) = results["cholesky"], results["cg"]
    assert float(l1) == pytest.approx(float(l0), rel=1e-9)
    for n in g0:
        np.testing.assert_allclose(g1[n], g0[n], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(m1, m0, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(p1, p0, rtol=1e-7, atol=1e-9)


def test_conjugate_gradients_that_cannot_converge_raise(monkeypatch):
    g = graph("lattice")
    k = GraphMaternKernel(g, nu=2, kappa2=_kappa2(g), solver="cg").double()
    monkeypatch.setattr(gm, "CG_MIN_ITER", 2)
    monkeypatch.setattr(gm, "CG_MAX_ITER_PER_NODE", 0)
    x = torch.as_tensor(g.points[:10])
    with pytest.raises(gm.CGNotConvergedError, match="solver='cholesky'"):
        k(x).to_dense()
    with pytest.raises(ValueError, match="solver must be one of"):
        GraphMaternKernel(g, solver="lu")


def test_many_test_nodes_use_the_monte_carlo_variances(monkeypatch):
    """Beyond EXACT_VARIANCE_ROWS test nodes the predictive variances are the
    Rao-Blackwellised estimate: each node within its stated relative standard error
    ``sqrt(2 / n_variance_samples)`` (4 of them at most; on average within one), the error
    shrinking like ``1 / sqrt(samples)``; the estimate carries no gradient, the mean
    does."""
    g, obs, x, y, model, lik = _problem("lattice", nu=2)
    model.eval()
    xt = torch.as_tensor(g.points)
    with torch.no_grad():
        exact = model(xt).variance
    monkeypatch.setattr(gm, "EXACT_VARIANCE_ROWS", 10)
    errors = {}
    for samples in (64, 1024):
        model.covar_module.base_kernel._engine.n_variance_samples = samples
        model.prediction_strategy = None
        f = model(xt)
        est = f.variance
        rel = ((est.detach() - exact) / exact).numpy()
        bound = np.sqrt(2.0 / samples)
        assert np.abs(rel).max() < 4 * bound and np.abs(rel).mean() < bound
        errors[samples] = np.abs(rel).mean()
    assert errors[1024] < 0.5 * errors[64]
    with pytest.raises(RuntimeError, match="carry no gradient"):
        est.sum().backward()
    model.zero_grad()
    f.mean.sum().backward()
    assert model.covar_module.base_kernel.raw_kappa2.grad.abs() > 0


def test_predictive_mean_gradient_equals_dense():
    g, obs, x, y, model, lik = _problem("mesh", nu=2)
    model.eval()
    test = np.arange(0, g.n_nodes, 7)
    xt = torch.as_tensor(g.points[test])
    _, grads = _grads(model, lambda: (model(xt).mean ** 2).sum())

    def dense():
        k = model.covar_module.base_kernel
        S = model.covar_module.outputscale * dense_kernel_torch(k, g, k.kappa2.reshape(()))
        c0 = model.mean_module.constant
        Kxx = S[np.ix_(obs, obs)] + lik.noise * torch.eye(obs.size, dtype=F64)
        mu = c0 + S[np.ix_(test, obs)] @ torch.linalg.solve(Kxx, y - c0)
        return (mu ** 2).sum()

    model.prediction_strategy = None
    _, ref = _grads(model, dense)
    for n in grads:
        np.testing.assert_allclose(grads[n], ref[n], rtol=1e-7, atol=1e-10, err_msg=n)


def test_a_sum_of_kernels_falls_back_to_gpytorch():
    """GraphMaternKernel + RBFKernel: GPyTorch's generic algebra (through the operator's
    sparse products) gives the dense log likelihood and predictions."""
    g, obs, x, y, model, lik = _problem("mesh", nu=2)
    rbf = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    rbf.base_kernel.lengthscale = 2.0
    rbf.outputscale = 0.3
    model.covar_module = model.covar_module + rbf
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    value = mll(model(x), y).item()
    k = model.covar_module.kernels[0]
    S = (k.outputscale * dense_kernel_torch(k.base_kernel, g,
                                            k.base_kernel.kappa2.reshape(()))).detach()
    xa = torch.as_tensor(g.points)
    R = rbf(xa).to_dense().detach()
    cov = (S + R)[np.ix_(obs, obs)] + lik.noise.detach() * torch.eye(obs.size, dtype=F64)
    c0 = model.mean_module.constant.detach()
    ref = torch.distributions.MultivariateNormal(c0.expand(obs.size), cov).log_prob(y)
    np.testing.assert_allclose(value, ref.item() / obs.size, rtol=1e-8)
    model.eval()
    test = np.arange(0, g.n_nodes, 9)
    with torch.no_grad():
        mean = model(xa[test]).mean
    Ktx = (S + R)[np.ix_(test, obs)]
    np.testing.assert_allclose(mean, c0 + Ktx @ torch.linalg.solve(cov, y - c0), rtol=1e-7,
                               atol=1e-9)


# -- training ------------------------------------------------------------------------------

def test_adam_steps_decrease_the_loss():
    g, obs, x, y, model, lik = _problem("knn", nu=2, m=60)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model.train()
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.05
    assert all(np.isfinite(losses))


def test_float32_model_trains_and_predicts():
    """GPyTorch's default dtype end to end (the factors stay float64 inside)."""
    g = graph("lattice")
    rng = np.random.default_rng(8)
    obs = np.sort(rng.choice(g.n_nodes, 40, replace=False))
    x = torch.as_tensor(g.points[obs], dtype=torch.float32)
    y = torch.as_tensor(np.sin(g.points[obs, 0] / 5.0), dtype=torch.float32)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    model = GP(x, y, lik, GraphMaternKernel(g), gpytorch.means.ConstantMean())
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        opt.step()
    assert loss.dtype == torch.float32 and np.isfinite(loss.item())
    model.eval()
    with torch.no_grad():
        pred = lik(model(torch.as_tensor(g.points[:20], dtype=torch.float32)))
        mixed = model(torch.as_tensor(g.points[:20]))          # float64 test inputs
    assert pred.mean.dtype == torch.float32 and torch.isfinite(pred.variance).all()
    np.testing.assert_allclose(mixed.mean.double(), pred.mean.double(), rtol=1e-4, atol=1e-5)


def test_large_graph_uses_the_estimator_in_training():
    """A graph too large for the exact traces trains with the estimator (the loss itself
    stays exact: equal to the dense one)."""
    g = lattice_graph(np.argwhere(np.ones((45, 45, 1), bool)))
    rng = np.random.default_rng(2)
    obs = np.sort(rng.choice(g.n_nodes, 1000, replace=False))
    x = torch.as_tensor(g.points[obs])
    y = torch.as_tensor(np.sin(g.points[obs, 0] / 6.0) + 0.1 * rng.standard_normal(1000))
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(x, y, lik, GraphMaternKernel(g, nu=1, kappa2=0.02)).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model.covar_module.base_kernel.trace_diagnostics["estimator"] == "stochastic"
    assert losses[-1] < losses[0]


# -- batches and fantasies -----------------------------------------------------------------

def test_batch_of_independent_maps_equals_separate_models():
    g = graph("lattice")
    rng = np.random.default_rng(6)
    obs = np.sort(rng.choice(g.n_nodes, 25, replace=False))
    x = torch.as_tensor(g.points[obs])
    Y = torch.as_tensor(rng.standard_normal((2, 25)))
    b = torch.Size([2])
    lik = gpytorch.likelihoods.GaussianLikelihood(batch_shape=b).double()
    kern = GraphMaternKernel(g, nu=2, batch_shape=b).double()
    kern.kappa2 = torch.tensor([0.01, 0.05], dtype=F64).reshape(2, 1, 1)
    model = GP(x, Y, lik, kern, gpytorch.means.ZeroMean(batch_shape=b), batch_shape=b).double()
    model.covar_module.outputscale = torch.tensor([1.0, 3.0], dtype=F64)
    lik.noise = torch.tensor([[0.05], [0.2]], dtype=F64)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    out = mll(model(x), Y)
    assert out.shape == (2,)
    model.eval()
    xt = torch.as_tensor(g.points[:10])
    with torch.no_grad():
        pred = model(xt)
    for i, (k2, s, nz) in enumerate([(0.01, 1.0, 0.05), (0.05, 3.0, 0.2)]):
        lik_i = gpytorch.likelihoods.GaussianLikelihood().double()
        m_i = GP(x, Y[i], lik_i, kernel64(g, k2, nu=2)).double()
        m_i.covar_module.outputscale = torch.tensor(s, dtype=F64)
        lik_i.noise = torch.tensor(nz, dtype=F64)
        m_i.train()
        ref = gpytorch.mlls.ExactMarginalLogLikelihood(lik_i, m_i)(m_i(x), Y[i])
        np.testing.assert_allclose(out[i].item(), ref.item(), rtol=1e-9)
        m_i.eval()
        with torch.no_grad():
            p_i = m_i(xt)
        np.testing.assert_allclose(pred.mean[i], p_i.mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(pred.variance[i], p_i.variance, rtol=1e-8)


def test_maps_sharing_one_prior_through_expanded_inputs():
    """Several maps with one κ: train inputs expanded to b x m x p, an unbatched kernel;
    each member is the single-map model (the factor is reused across members)."""
    g = graph("mesh")
    rng = np.random.default_rng(7)
    obs = np.sort(rng.choice(g.n_nodes, 20, replace=False))
    x = torch.as_tensor(g.points[obs])
    Y = torch.as_tensor(rng.standard_normal((3, 20)))
    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(x.expand(3, 20, 3), Y, lik, kernel64(g)).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    out = mll(model(x.expand(3, 20, 3)), Y)
    for i in range(3):
        lik_i = gpytorch.likelihoods.GaussianLikelihood().double()
        m_i = GP(x, Y[i], lik_i, kernel64(g)).double()
        ref = gpytorch.mlls.ExactMarginalLogLikelihood(lik_i, m_i)(m_i(x), Y[i])
        np.testing.assert_allclose(out[i].item(), ref.item(), rtol=1e-9)


def test_fantasy_model_equals_refitting_with_the_new_points():
    g, obs, x, y, model, lik = _problem("lattice", nu=2)
    model.eval()
    test = np.setdiff1d(np.arange(g.n_nodes), obs)
    xt = torch.as_tensor(g.points[test[:15]])
    with torch.no_grad():
        model(xt)
        new = test[20:25]
        xn, yn = torch.as_tensor(g.points[new]), torch.linspace(-1, 1, 5, dtype=F64)
        fant = model.get_fantasy_model(xn, yn)
        pf = fant(xt)
    assert isinstance(fant.prediction_strategy, GraphMaternPredictionStrategy)
    full = GP(torch.cat([x, xn]), torch.cat([y, yn]), lik,
              model.covar_module.base_kernel, gpytorch.means.ConstantMean()).double()
    full.load_state_dict(model.state_dict())
    full.eval()
    with torch.no_grad():
        pr = full(xt)
    np.testing.assert_allclose(pf.mean, pr.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pf.variance, pr.variance, rtol=1e-8)


# -- bad inputs ----------------------------------------------------------------------------

def test_bad_inputs_raise_clear_errors():
    g = graph("lattice")
    k = GraphMaternKernel(g).double()
    x = torch.as_tensor(g.points[:5])
    with pytest.raises(ValueError, match=r"input row 1 .* is not a node of the graph"):
        k(torch.stack([x[0], x[1] + 0.5])).to_dense()
    with pytest.raises(ValueError, match="inputs have 2 coordinates but the graph's nodes"):
        k(x[:, :2]).to_dense()
    with pytest.raises(ValueError, match="NaN or inf"):
        k(torch.full((2, 3), float("nan"), dtype=F64)).to_dense()
    ki = GraphMaternKernel(g, inputs="index")
    with pytest.raises(ValueError, match="is not a node index"):
        ki(torch.tensor([[0.0], [2.5]])).to_dense()
    with pytest.raises(ValueError, match="is not a node index"):
        ki(torch.tensor([[float(g.n_nodes)]])).to_dense()
    with pytest.raises(ValueError, match=r"shape \(\.\.\., N, 1\)"):
        ki(torch.zeros(3, 2)).to_dense()
    with pytest.raises(ValueError, match="positive integer"):
        GraphMaternKernel(g, nu=1.5)
    with pytest.raises(ValueError, match="inputs must be one of"):
        GraphMaternKernel(g, inputs="nodes")
    with pytest.raises(ValueError, match="normalize must be one of"):
        GraphMaternKernel(g, normalize=True)
    with pytest.raises(ValueError, match="trace_estimator must be one of"):
        GraphMaternKernel(g, trace_estimator="hutch")
    with pytest.raises(ValueError, match="n_probes must be an integer >= 2"):
        GraphMaternKernel(g, n_probes=1)
    with pytest.raises(ValueError, match="n_variance_samples must be an integer >= 2"):
        GraphMaternKernel(g, n_variance_samples=0.5)
    with pytest.raises(TypeError, match="needs a flgp.graph.PointGraph"):
        GraphMaternKernel(np.eye(3))
    with pytest.raises(ValueError, match="kappa2 must be finite and positive"):
        k.kappa2 = -1.0
    with pytest.raises(ValueError, match="kappa2 must be finite and positive"):
        GraphMaternKernel(g, kappa2=float("inf"))


def test_non_finite_hyperparameters_raise():
    g, obs, x, y, model, lik = _problem("knn")
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    with torch.no_grad():
        model.covar_module.base_kernel.raw_kappa2.fill_(float("nan"))
    with pytest.raises(ValueError, match="kappa2 must be finite and > 0"):
        mll(model(x), y)
    g, obs, x, y, model, lik = _problem("knn")
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    with torch.no_grad():
        lik.noise_covar.raw_noise.fill_(float("inf"))
    with pytest.raises(ValueError, match="noise variances must be finite and > 0"):
        mll(model(x), y)
    g, obs, x, y, model, lik = _problem("knn")
    with torch.no_grad():
        model.covar_module.raw_outputscale.fill_(float("nan"))
    with pytest.raises(ValueError, match="amplitude .* must be finite and > 0"):
        gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)(model(x), y)


def test_last_dim_is_batch_is_refused():
    g = graph("lattice")
    k = GraphMaternKernel(g)
    x = torch.as_tensor(g.points[:3], dtype=torch.float32)
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="last_dim_is_batch"):
        k(x, last_dim_is_batch=True).to_dense()


def test_pickle_copy_dtype():
    g = graph("mesh")
    k = GraphMaternKernel(g, kappa2=_kappa2(g))
    x = torch.as_tensor(g.points[:12], dtype=torch.float32)
    K = k(x).to_dense().detach()
    assert K.dtype == torch.float32
    restored = pickle.loads(pickle.dumps(k))
    np.testing.assert_allclose(restored(x).to_dense().detach(), K, rtol=1e-6)
    k64 = k.double()
    assert k64(x.double()).to_dense().dtype == F64
    op = k64(x.double()).evaluate_kernel()
    assert op.to(torch.float32).rows.dtype == torch.int64


# -- GPyTorch's kernel test mixin ----------------------------------------------------------

_MIXIN = np.random.default_rng(11)
_DATA10 = _MIXIN.standard_normal((50, 10))          # its columns are the nodes' coordinates
# a 12 x 12 grid in 2-d (the mixin's batch data have 2 columns)
_GRID = knn_point_graph(np.argwhere(np.ones((12, 12), bool)).astype(float), 8)
_MIXIN_GRAPHS = {}


def _mixin_graph(name):
    """The graph whose nodes a mixin test's data are: k-NN graphs on the columns the
    active-dims tests select, the grid otherwise."""
    if name not in _MIXIN_GRAPHS:
        if name == "test_active_dims_list":
            _MIXIN_GRAPHS[name] = knn_point_graph(_DATA10[:, [0, 2, 4, 6]], 8)
        elif name == "test_active_dims_range":
            _MIXIN_GRAPHS[name] = knn_point_graph(_DATA10[:, 3:9], 8)
        else:
            _MIXIN_GRAPHS[name] = _GRID
    return _MIXIN_GRAPHS[name]


def _grid_nodes(*shape):
    """Coordinates of random nodes of the grid, ``*shape x 2``."""
    rng = np.random.default_rng(int(np.prod(shape)))
    idx = rng.integers(0, _GRID.n_nodes, size=shape)
    return torch.as_tensor(_GRID.points[idx], dtype=torch.get_default_dtype())


class TestGraphMaternKernelMixin(BaseKernelTestCase, unittest.TestCase):
    """GPyTorch's batch, diagonal, indexing, expansion, pickling and dtype tests. Inputs
    must be graph nodes, so the data methods return node coordinates: of a 12 x 12 grid
    for the batch tests, and - for the active-dims tests, whose data have 10 columns -
    k-NN graphs built on the columns they select."""

    def create_kernel_no_ard(self, **kwargs):
        k = GraphMaternKernel(_mixin_graph(self._testMethodName), nu=2, **kwargs)
        batch = k.batch_shape
        n = int(np.prod(batch)) if len(batch) else 1
        # distinct κ² across a batch, so that a wrong batch member is noticed
        k.kappa2 = (torch.linspace(0.01, 0.3, n).reshape(*batch, 1, 1) if len(batch)
                    else 0.05)
        return k

    def create_data_no_batch(self):
        return torch.as_tensor(_DATA10, dtype=torch.get_default_dtype())

    def create_data_single_batch(self):
        return _grid_nodes(2, 3)

    def create_data_double_batch(self):
        return _grid_nodes(3, 2, 50)
