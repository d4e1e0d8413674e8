"""Deep Diffusion Maps (papers/004): cost (38), Theorem 4.1, the estimator's API."""

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from sklearn.exceptions import NotFittedError

from flgp.embedding.deep import (DeepDiffusionMap, _batch_loss, conv_network,
                                 deep_diffusion_cost, diffusion_quantities)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny networks train ~10x faster on one thread than on two busy ones."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _arc(n, rng):
    th = np.sort(rng.uniform(0.0, np.pi, n))
    return np.c_[np.cos(th), np.sin(th)] + 0.01 * rng.standard_normal((n, 2))


def _dense_dm(X, sigma, alpha, t, d):
    """Independent dense diffusion map (eqs. 5-19) by a full eigendecomposition of A."""
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = np.exp(-D2 / (2 * sigma ** 2))
    q = K.sum(1)
    W = K / np.outer(q ** alpha, q ** alpha)
    dW = W.sum(1)
    pi = dW / dW.sum()
    A = W / np.sqrt(np.outer(dW, dW))
    lam, phi = np.linalg.eigh(A)
    lam, phi = lam[::-1], phi[:, ::-1]
    Psi = lam[1:d + 1] ** t * phi[:, 1:d + 1] / np.sqrt(pi)[:, None]
    return Psi, lam, phi, pi, A


def test_cost_38_matches_direct_formula(rng):
    X = _arc(25, rng)
    sigma, alpha, t = 0.3, 0.5, 3
    _, lam, phi, pi_ref, A = _dense_dm(X, sigma, alpha, t, 2)
    pi, T, n_comp = diffusion_quantities(X, sigma, alpha, t)
    assert n_comp == 1
    np.testing.assert_allclose(pi, pi_ref, rtol=1e-12)
    A2t = np.linalg.matrix_power(A, 2 * t)
    np.testing.assert_allclose(T, A2t - np.sqrt(np.outer(pi, pi)), atol=1e-13)

    F = rng.standard_normal((25, 2))
    J = 0.0                                       # eq. (38), term by term
    for i in range(25):
        for j in range(25):
            r = np.sqrt(pi[i] * pi[j])
            J += (r * F[i] @ F[j] - (A2t[i, j] - r)) ** 2
    assert deep_diffusion_cost(F, pi, T) == pytest.approx(J, rel=1e-10)
    # the training loss on the full sample is exactly J (n-scaled, see _batch_loss)
    n = 25
    loss = _batch_loss(torch.as_tensor(F), torch.as_tensor(np.sqrt(n * pi)),
                       torch.as_tensor(n * T))
    assert float(loss) == pytest.approx(J, rel=1e-10)


def _theorem_problem():
    rng = np.random.default_rng(1)
    X = _arc(40, rng)
    sigma, alpha, t, d = 0.25, 1.0, 2, 2
    Psi, lam, _, pi, _ = _dense_dm(X, sigma, alpha, t, d)
    assert lam[2] - lam[3] > 1e-2                 # an eigengap: a unique minimiser
    return X, sigma, alpha, t, d, Psi, lam, pi


def test_theorem_41_direct_minimisation():
    """The global minimiser of cost (38) over free Γ is the diffusion map up to an
    orthogonal transform, and the minimum is the Eckart-Young residual."""
    X, sigma, alpha, t, d, Psi, lam, pi = _theorem_problem()
    n = X.shape[0]
    _, T, _ = diffusion_quantities(X, sigma, alpha, t)
    s = torch.as_tensor(np.sqrt(n * pi))
    Tn = torch.as_tensor(n * T)
    G = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    G.requires_grad_(True)
    opt = torch.optim.LBFGS([G], max_iter=500, tolerance_grad=1e-14,
                            tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _batch_loss(G, s, Tn)
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
    F = G.detach().numpy()
    np.testing.assert_allclose(F @ F.T, Psi @ Psi.T, atol=1e-6 * np.abs(Psi @ Psi.T).max())
    R, _ = orthogonal_procrustes(F, Psi)
    assert np.linalg.norm(F @ R - Psi) < 1e-5 * np.linalg.norm(Psi)
    residual = np.sum(lam[d + 1:] ** (4 * t))     # discarded part of ||A^{2t} - √π√πᵀ||_F^2
    assert deep_diffusion_cost(F, pi, T) == pytest.approx(residual, rel=1e-6)


def test_theorem_41_network_learns_the_diffusion_map():
    """Theorem 4.1 through the network: the trained f_θ(X) equals the diffusion map up to an
    orthogonal transform (Procrustes) on a tiny problem."""
    X, sigma, alpha, t, d, Psi, _, _ = _theorem_problem()
    ddm = DeepDiffusionMap(d, sigma=sigma, alpha=alpha, t=t, batch_size=64,
                           learning_rate=1e-2, max_epochs=400, patience=None,
                           validation_fraction=0.0, progress=False, random_state=0).fit(X)
    F = ddm.embedding_
    R, _ = orthogonal_procrustes(F, Psi)
    err = np.linalg.norm(F @ R - Psi) / np.linalg.norm(Psi)
    assert err < 0.03
    # a random network is far from it: the test can fail
    untrained = DeepDiffusionMap(d, sigma=sigma, alpha=alpha, t=t, max_epochs=1,
                                 validation_fraction=0.0, progress=False,
                                 random_state=0).fit(X).embedding_
    R0, _ = orthogonal_procrustes(untrained, Psi)
    assert np.linalg.norm(untrained @ R0 - Psi) / np.linalg.norm(Psi) > 0.2


def _small_fit(**kw):
    rng = np.random.default_rng(3)
    X = np.c_[_arc(60, rng), rng.uniform(0, 0.1, 60)]
    params = dict(quantile=0.1, t=2, max_epochs=20, batch_size=32, progress=False,
                  random_state=0)
    params.update(kw)
    return X, DeepDiffusionMap(2, **params).fit(X)


def test_transform_shape_and_determinism():
    X, a = _small_fit()
    _, b = _small_fit()
    _, c = _small_fit(random_state=1)
    Xnew = X[:7] + 0.01
    assert a.transform(Xnew).shape == (7, 2)
    assert a.transform(Xnew).dtype == np.float64
    np.testing.assert_array_equal(a.embedding_, b.embedding_)
    np.testing.assert_array_equal(a.transform(Xnew), b.transform(Xnew))
    np.testing.assert_allclose(a.transform(X), a.embedding_, rtol=0, atol=0)
    assert not np.allclose(a.embedding_, c.embedding_)
    assert a.n_epochs_ == 20 and 1 <= a.best_epoch_ <= 20
    assert len(a.history_["loss"]) == 20 and len(a.history_["val_loss"]) == 20
    assert a.sigma_ == pytest.approx(np.quantile(
        np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))[np.triu_indices(60, 1)], 0.1))


def test_early_stopping_keeps_best_epoch():
    _, m = _small_fit(max_epochs=400, patience=5, learning_rate=0.05)
    assert m.n_epochs_ < 400
    v = np.asarray(m.history_["val_loss"])
    assert m.best_epoch_ == m.n_epochs_ - 5
    assert v[m.best_epoch_ - 1] <= v.min() * (1 + 1e-4) + 1e-15


def test_user_module_and_factory():
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    before = [p.detach().clone() for p in net.parameters()]
    X, m = _small_fit(network=net)
    for p, q in zip(before, net.parameters()):   # the argument is not modified
        assert torch.equal(p, q)
    assert m.network_ is not net
    _, f = _small_fit(network=lambda p, k: torch.nn.Linear(p, k).double())
    assert f.transform(X).shape == (60, 2)
    with pytest.raises(TypeError, match="must return a torch.nn.Module"):
        _small_fit(network=lambda p, k: "not a module")
    with pytest.raises(ValueError, match="network output has shape"):
        _small_fit(network=torch.nn.Linear(3, 5))
    with pytest.raises(TypeError, match="'network' parameter"):
        _small_fit(network=3)


def test_conv_network_shapes():
    net = conv_network(6, (28, 28))
    assert net(torch.zeros(4, 784)).shape == (4, 6)


@pytest.mark.parametrize("kw, err, match", [
    (dict(n_components=60), ValueError, "n_components"),
    (dict(n_components=0), ValueError, "n_components"),
    (dict(quantile=0.0), ValueError, "quantile"),
    (dict(quantile=1.5), ValueError, "quantile"),
    (dict(sigma=-1.0), ValueError, "sigma"),
    (dict(alpha=np.nan), ValueError, "alpha"),
    (dict(t=0), ValueError, "'t' parameter"),
    (dict(t=1.5), TypeError, "'t' parameter"),
    (dict(learning_rate=0.0), ValueError, "learning_rate"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(validation_fraction=1.0), ValueError, "validation_fraction"),
    (dict(patience=0), ValueError, "patience"),
    (dict(hidden_layer_sizes=(8, 0)), ValueError, "hidden_layer_sizes"),
])
def test_bad_parameters(kw, err, match):
    rng = np.random.default_rng(0)
    X = _arc(60, rng)
    params = dict(max_epochs=2, progress=False)
    params.update(kw)
    n_comp = params.pop("n_components", 2)
    with pytest.raises(err, match=match):
        DeepDiffusionMap(n_comp, **params).fit(X)


def test_bad_inputs():
    rng = np.random.default_rng(0)
    X = _arc(30, rng)
    m = DeepDiffusionMap(2, max_epochs=2, progress=False)
    with pytest.raises(NotFittedError):
        m.transform(X)
    Xnan = X.copy()
    Xnan[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.fit(Xnan)
    with pytest.raises(ValueError, match="2D array|2-d"):
        m.fit(X[:, 0])
    with pytest.raises(ValueError, match="duplicate"):
        DeepDiffusionMap(2, quantile=0.1, max_epochs=2, progress=False).fit(
            np.repeat(X[:5], 6, axis=0))
    m.fit(X)
    with pytest.raises(ValueError, match="features"):
        m.transform(np.c_[X, X])
    with pytest.raises(ValueError, match=r"falls apart into 2 pieces \(sizes 30, 30\)"):
        Xfar = np.r_[X, X + 100.0]
        DeepDiffusionMap(2, quantile=0.05, max_epochs=2, disconnected="raise",
                         progress=False).fit(Xfar)
    with pytest.raises(ValueError, match="'disconnected' parameter"):
        DeepDiffusionMap(2, disconnected=False, progress=False).fit(X)


def test_pieces_give_the_block_diagonal_target():
    """A cloud in two far pieces: T = A^{2t} - sqrt(pi) sqrt(pi)^T with A the block-diagonal
    of each piece's own eqs. (5)-(12) (numpy here), pi its degrees over their sum; the
    network trains on it, with a warning naming the pieces."""
    rng = np.random.default_rng(0)
    X = np.r_[_arc(40, rng), _arc(25, rng) + 100.0]
    sigma, alpha, t = 0.3, 0.5, 2
    pi, T, n_pieces = diffusion_quantities(X, sigma, alpha, t)
    assert n_pieces == 2
    A = np.zeros((65, 65))
    deg = np.zeros(65)
    for idx in (np.arange(40), np.arange(40, 65)):
        Xp = X[idx]
        K = np.exp(-((Xp[:, None] - Xp[None]) ** 2).sum(-1) / (2 * sigma ** 2))
        q = K.sum(1)
        W = K / np.outer(q ** alpha, q ** alpha)
        deg[idx] = W.sum(1)
        A[np.ix_(idx, idx)] = W / np.sqrt(np.outer(deg[idx], deg[idx]))
    ref_pi = deg / deg.sum()
    np.testing.assert_allclose(pi, ref_pi, rtol=1e-9)
    ref_T = np.linalg.matrix_power(A, 2 * t) - np.sqrt(np.outer(ref_pi, ref_pi))
    np.testing.assert_allclose(T, ref_T, atol=1e-10)
    with pytest.warns(UserWarning, match=r"falls apart into 2 pieces \(sizes 40, 25\)"):
        m = DeepDiffusionMap(2, sigma=sigma, alpha=alpha, t=t, max_epochs=5, progress=False,
                             random_state=0).fit(X)
    assert m.n_pieces_ == 2 and np.all(np.isfinite(m.embedding_))
    np.testing.assert_array_equal(m.piece_labels_, np.repeat([0, 1], [40, 25]))

