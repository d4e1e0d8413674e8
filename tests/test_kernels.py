import pickle

import gpytorch
import numpy as np
import pytest
import torch

from conftest import noisy_circle
from flgp.kernels import HeatKernel, HeatKernelFLGP, HeatKernelGLGP, HeatKernelNystrom
from flgp.spectral import compute_eigenpairs


def _cloud(rng, n=240):
    return noisy_circle(n, rng)


def _kernels(X):
    return [
        HeatKernelFLGP(X, n_induced=40, n_eigenpairs=12, random_state=0),
        HeatKernelFLGP(X, n_induced=40, n_eigenpairs=12, kernel="se", subsample="random",
                       random_state=0),
        HeatKernelGLGP(X, n_eigenpairs=12),
        HeatKernelNystrom(X, n_induced=40, n_eigenpairs=12, random_state=0),
    ]


@pytest.fixture
def cloud(rng):
    return _cloud(rng)


def _dense_reference(k, x1, x2):
    ep = k.eigenpairs
    v1, v2 = ep.extend(x1.numpy()), ep.extend(x2.numpy())
    t = float(k.diffusion_time)
    return ep.kernel_scale * (v1 * np.exp(-t * ep.eigenvalues)) @ v2.T


def test_symmetric_psd_diag_and_dense_reference(cloud):
    x = torch.from_numpy(cloud[:60])
    xn = torch.from_numpy(cloud[:30] * 1.01)
    for k in _kernels(cloud):
        K = k(x).to_dense().detach()
        np.testing.assert_allclose(K, K.T, atol=1e-12)
        assert torch.linalg.eigvalsh(K + 1e-6 * torch.eye(60)).min() > 0
        np.testing.assert_allclose(k(x, diag=True).detach(), K.diagonal(), atol=1e-10)
        np.testing.assert_allclose(K, _dense_reference(k, x, x), atol=1e-10)
        Kc = k(xn, x).to_dense().detach()
        np.testing.assert_allclose(Kc, _dense_reference(k, xn, x), atol=1e-10)


def test_cache_never_returns_values_of_other_inputs(cloud):
    """New tensors often reuse a freed tensor's address, and writes through a numpy view
    leave the version counter alone: the cache must match inputs by value."""
    k = _kernels(cloud)[0]
    for i in range(12):
        x = torch.tensor(cloud[10 * i:10 * i + 10] + 0.01)  # freed at the next iteration
        np.testing.assert_allclose(k(x).to_dense().detach(), _dense_reference(k, x, x),
                                   atol=1e-10)
    x = torch.from_numpy(cloud[:20].copy())
    k(x).to_dense()
    x.numpy()[:] *= 1.02                                    # in place, behind torch's back
    np.testing.assert_allclose(k(x).to_dense().detach(), _dense_reference(k, x, x),
                               atol=1e-10)


def test_low_rank_operator_root(cloud):
    k = _kernels(cloud)[0]
    x = torch.from_numpy(cloud[:80])
    op = k(x).evaluate_kernel()
    from linear_operator.operators import LowRankRootLinearOperator
    assert isinstance(op, LowRankRootLinearOperator)
    assert op.root.shape == (80, 12)
    # Woodbury solve equals a dense solve
    y = torch.randn(80, dtype=torch.float64)
    noisy = op.add_diagonal(torch.tensor(0.1, dtype=torch.float64))
    dense = op.to_dense() + 0.1 * torch.eye(80, dtype=torch.float64)
    np.testing.assert_allclose(noisy.solve(y[:, None]).squeeze().detach(),
                               torch.linalg.solve(dense, y).detach(), atol=1e-8)
    ld_fast = noisy.logdet()
    np.testing.assert_allclose(ld_fast.detach(), torch.logdet(dense).detach(), rtol=1e-8)


def test_batch_shapes(cloud):
    ep = compute_eigenpairs(cloud, n_induced=40, n_eigenpairs=10, random_state=0)
    k = HeatKernel(ep, batch_shape=torch.Size([2]))
    k.diffusion_time = torch.tensor([[[50.0]], [[500.0]]])
    xb = torch.from_numpy(np.stack([cloud[:20], cloud[20:40]]))
    K = k(xb).to_dense()
    assert K.shape == (2, 20, 20)
    for b, t in enumerate([50.0, 500.0]):
        kb = HeatKernel(ep, diffusion_time=t)
        np.testing.assert_allclose(K[b].detach(), kb(xb[b]).to_dense().detach(), atol=1e-10)
    assert k(xb, diag=True).shape == (2, 20)


def test_gradient_and_gradcheck(cloud):
    k = _kernels(cloud)[0]
    x = torch.from_numpy(cloud[:25])
    k(x).to_dense().sum().backward()
    g = k.raw_diffusion_time.grad
    assert torch.isfinite(g).all() and g.abs().sum() > 0

    def f(raw):
        k.raw_diffusion_time.data = raw.detach()
        t = k.raw_diffusion_time_constraint.transform(raw)
        from flgp.spectral.families import heat_kernel
        v = k.eigenvector_values(x)
        return heat_kernel(v, v, k.eigenvalues, t.squeeze(-1), k.kernel_scale)

    raw = k.raw_diffusion_time.detach().double().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (raw,))


def test_diffusion_time_property_and_prior(cloud):
    ep = compute_eigenpairs(cloud, n_induced=40, n_eigenpairs=10, random_state=0)
    prior = gpytorch.priors.GammaPrior(2.0, 0.01)
    k = HeatKernel(ep, diffusion_time=123.0, diffusion_time_prior=prior)
    assert abs(float(k.diffusion_time) - 123.0) < 1e-4
    k.diffusion_time = 7.0
    assert abs(float(k.diffusion_time) - 7.0) < 1e-6
    names = [item[0] for item in k.named_priors()]
    assert names == ["diffusion_time_prior"]
    # the prior's log density enters through the registered closure
    (_, module, p, closure, _) = list(k.named_priors())[0]
    assert abs(float(closure(module)) - 7.0) < 1e-6
    assert torch.isfinite(p.log_prob(closure(module))).all()


def test_pickle_and_dtype(cloud):
    k = _kernels(cloud)[0]
    x = torch.from_numpy(cloud[:20])
    k2 = pickle.loads(pickle.dumps(k))
    np.testing.assert_allclose(k2(x).to_dense().detach(), k(x).to_dense().detach())
    k32 = HeatKernel(k.eigenpairs).to(torch.float32)
    assert k32.eigenvectors.dtype == torch.float32
    assert k32(x.float()).to_dense().dtype == torch.float32


def test_exact_gp_training_lowers_loss(cloud, rng):
    k = _kernels(cloud)[0]
    x = torch.from_numpy(cloud[:80])
    th = np.arctan2(cloud[:80, 1], cloud[:80, 0])
    y = torch.from_numpy(np.sin(2 * th) + 0.05 * rng.standard_normal(80))

    class GP(gpytorch.models.ExactGP):
        def __init__(self, x, y, lik):
            super().__init__(x, y, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(k)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(x, y, lik).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model.train()
    losses = []
    t0 = float(k.diffusion_time)
    for _ in range(40):
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5
    assert float(k.diffusion_time) != t0
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(cloud[80:120])).mean
    th_test = np.arctan2(cloud[80:120, 1], cloud[80:120, 0])
    assert np.sqrt(np.mean((pred.numpy() - np.sin(2 * th_test)) ** 2)) < 0.2


def test_variational_gp_with_bernoulli(cloud):
    k = _kernels(cloud)[0]
    x = torch.from_numpy(cloud[:100])
    y = torch.from_numpy((cloud[:100, 0] > 0).astype(np.float64))

    class VGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing):
            dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
            strat = gpytorch.variational.VariationalStrategy(self, inducing, dist,
                                                             learn_inducing_locations=False)
            super().__init__(strat)
            self.covar_module = k

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                torch.zeros(x.shape[:-1], dtype=x.dtype), self.covar_module(x))

    model = VGP(x[:30]).double()
    lik = gpytorch.likelihoods.BernoulliLikelihood()
    elbo = gpytorch.mlls.VariationalELBO(lik, model, num_data=100)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = -elbo(model(x), y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < first
    with torch.no_grad():
        p = lik(model(x)).mean
    assert ((p > 0.5).double() == y).double().mean() > 0.9


# -- GPyTorch's own kernel test mixin --------------------------------------------------------
import unittest  # noqa: E402

from gpytorch.test.base_kernel_test_case import BaseKernelTestCase  # noqa: E402

_MIXIN_CLOUDS = {}


class TestHeatKernelMixin(BaseKernelTestCase, unittest.TestCase):
    """GPyTorch's batch, diagonal, indexing, expansion, pickling and dtype tests on the FLGP
    heat kernel. The kernel lives on a fixed cloud, so each test gets a cloud of the
    dimension its inputs have (2 for the batched data; the active-dims tests select 4 and
    6 of the 10 columns of their data)."""

    _DIMS = {"test_active_dims_list": 4, "test_active_dims_range": 6}

    def setUp(self):
        torch.manual_seed(0)
        self.dim = self._DIMS.get(self._testMethodName, 2)

    def _eigenpairs(self, dim):
        if dim not in _MIXIN_CLOUDS:
            X = np.random.default_rng(dim).standard_normal((300, dim))
            _MIXIN_CLOUDS[dim] = compute_eigenpairs(X, n_induced=60, n_eigenpairs=12,
                                                    random_state=0)
        return _MIXIN_CLOUDS[dim]

    def create_kernel_no_ard(self, **kwargs):
        ep = self._eigenpairs(self.dim)
        k = HeatKernel(ep, **kwargs)
        # distinct diffusion times across a batch, so a wrong batch member is noticed
        batch = k.batch_shape
        n = int(np.prod(batch)) if len(batch) else 1
        t = torch.linspace(5.0, 50.0, n).reshape(*batch, 1, 1) if len(batch) else 12.0
        k.diffusion_time = t
        return k


def test_batched_kernel_index_is_the_batch_member():
    """``kernel[i]`` of a batch of heat kernels (one diffusion time each) is the kernel
    with the i-th diffusion time, and ``expand_batch`` keeps the eigenpairs unbatched."""
    X = np.random.default_rng(0).standard_normal((300, 2))
    ep = compute_eigenpairs(X, n_induced=60, n_eigenpairs=12, random_state=0)
    k = HeatKernel(ep, batch_shape=torch.Size([3]))
    k.diffusion_time = torch.tensor([2.0, 20.0, 200.0]).reshape(3, 1, 1)
    x = torch.from_numpy(X[:15])
    for i, t in enumerate([2.0, 20.0, 200.0]):
        ref = HeatKernel(ep, diffusion_time=t)(x).to_dense()
        np.testing.assert_allclose(k[i](x).to_dense().detach(), ref.detach(), atol=1e-10)
    assert k[1].eigenvectors.shape == ep.eigenvectors.shape
    big = k.expand_batch(torch.Size([4, 3]))
    assert big.batch_shape == torch.Size([4, 3])
    assert big.eigenvectors.shape == ep.eigenvectors.shape
    np.testing.assert_allclose(big(x).to_dense()[2, 1].detach(),
                               k[1](x).to_dense().detach(), atol=1e-10)


# -- the other spectral families --------------------------------------------------------------
from flgp.kernels import GreenKernel, MaternKernel  # noqa: E402


def test_matern_and_green_kernels_against_their_closed_forms(cloud):
    """The graph Matérn kernel c Σ (1 + tλ/ν)^-ν v vᵀ and the pseudo-inverse c Σ λ_2/λ v vᵀ
    (zero modes weight 1), written out from the eigenpairs, at cloud and new points."""
    ep = compute_eigenpairs(cloud, n_induced=40, n_eigenpairs=12, random_state=0)
    lam = ep.eigenvalues
    x = torch.from_numpy(cloud[:40])
    xn = torch.from_numpy(cloud[:20] * 1.02)
    v, vn = ep.extend(x.numpy()), ep.extend(xn.numpy())
    lam2 = lam[lam > 1e-10].min()
    matern = MaternKernel(ep, nu=1.5, diffusion_time=7.0)
    t = float(matern.diffusion_time)              # as stored (float32 raw parameter)
    for k, w in [(matern, (1 + t * lam / 1.5) ** -1.5),
                 (GreenKernel(ep), np.where(lam > 1e-10, lam2 / np.maximum(lam, 1e-300), 1.0))]:
        ref = ep.kernel_scale * (v * w) @ v.T
        np.testing.assert_allclose(k(x).to_dense().detach(), ref, atol=1e-10)
        np.testing.assert_allclose(k(xn, x).to_dense().detach(),
                                   ep.kernel_scale * (vn * w) @ v.T, atol=1e-10)
        np.testing.assert_allclose(k(x, diag=True).detach(), np.diag(ref), atol=1e-10)
    # Matérn tends to the heat kernel as ν grows, at the same t
    heat = HeatKernel(ep, diffusion_time=7.0).double()(x).to_dense().detach()
    far = MaternKernel(ep, nu=1e6, diffusion_time=7.0).double()(x).to_dense().detach()
    np.testing.assert_allclose(far, heat, rtol=1e-4, atol=1e-6)


def test_matern_time_scale_learns_and_green_has_none(cloud):
    ep = compute_eigenpairs(cloud, n_induced=40, n_eigenpairs=12, random_state=0)
    k = MaternKernel(ep, nu=2.0, diffusion_time=5.0)
    x = torch.from_numpy(cloud[:25])
    k(x).to_dense().sum().backward()
    g = k.raw_diffusion_time.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
    from flgp.spectral.families import family_log_weights

    v = k.eigenvector_values(x).double()
    lam = k.eigenvalues.double()

    def f(log_t):                      # the kernel block as a function of log t
        w = family_log_weights(lam, log_t.exp(), "matern", 2.0).exp()
        return (v * w) @ v.T

    assert torch.autograd.gradcheck(f, (torch.tensor([np.log(5.0)], dtype=torch.float64,
                                                     requires_grad=True),))
    green = GreenKernel(ep)
    assert not any(True for _ in green.named_parameters())
    with pytest.raises(ValueError, match="no diffusion time"):
        GreenKernel(ep, diffusion_time=3.0)
    restored = pickle.loads(pickle.dumps(k))
    np.testing.assert_allclose(restored(x).to_dense().detach(), k(x).to_dense().detach())


class TestMaternKernelMixin(TestHeatKernelMixin):
    """GPyTorch's kernel tests on the graph Matérn kernel."""

    def create_kernel_no_ard(self, **kwargs):
        ep = self._eigenpairs(self.dim)
        k = MaternKernel(ep, nu=1.5, **kwargs)
        batch = k.batch_shape
        n = int(np.prod(batch)) if len(batch) else 1
        k.diffusion_time = (torch.linspace(5.0, 50.0, n).reshape(*batch, 1, 1) if len(batch)
                            else 12.0)
        return k


def test_every_heat_kernel_names_a_wrong_number_of_features():
    """GLGP's and Nyström's kernels, like FLGP's, refuse inputs with another number of
    features than their cloud's with a ValueError that says so (before: torch's "mat1 and
    mat2 shapes cannot be multiplied")."""
    from flgp.datasets import make_spiral
    from flgp.kernels import HeatKernelFLGP, HeatKernelGLGP, HeatKernelNystrom

    X, _, _ = make_spiral(400, noise=0.3, random_state=0)
    for kernel in (HeatKernelFLGP(X, random_state=0), HeatKernelGLGP(X),
                   HeatKernelNystrom(X, random_state=0)):
        with pytest.raises(ValueError, match="X has 1 features but the graph was built on 2"):
            kernel(torch.from_numpy(X[:5, :1])).to_dense()
        assert torch.isfinite(kernel(torch.from_numpy(X[:5])).to_dense()).all()
