"""Inputs that crashed or misled (issue 32): each gets the right answer or an error that
names the input and what to change, and a test that fails on the code before the fix."""

import gzip
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from scipy.special import log_ndtr

import flgp
from flgp import Eigenbasis, FLGPClassifier, HeatKernelPrior
from flgp.graph.neighbors import kdtree_nearest, nearest_induced_points
from flgp.models.inference.ep import (ep_multinomial_probit, ep_probit, multinomial_loo,
                                      multinomial_predict, orthant_log_probability,
                                      probit_latent, probit_loo)
from flgp.spectral.families import heat_log_weights, spectral_weights


def _moons(n=400, every=20, seed=0):
    from sklearn.datasets import make_moons

    X, y = make_moons(n, noise=0.2, random_state=seed)      # one connected cloud
    semi = np.full(n, -1)
    semi[::every] = y[::every]
    return X, y, semi


# -- a prior without modes: the prior's answer, with a warning -------------------------------

def test_ep_without_modes_is_the_prior():
    """``d = 0`` features (every weight of the spectrum 0): the latent is 0, so each label
    has probability 1/2 (binary) or 1/C; evidence and leave-one-out terms are sums of
    their logs, and predictions are 1/C. LAPACK's trtrs refused the empty factor (info -7,
    reported as a singular matrix)."""
    m = 7
    y = np.array([1, -1, 1, 1, -1, 1, -1], dtype=float)
    st = ep_probit(np.zeros((m, 0)), y)
    assert st.log_evidence == pytest.approx(m * log_ndtr(0.0))
    a, b = probit_loo(st)
    np.testing.assert_allclose(log_ndtr(a / b), log_ndtr(0.0))
    mean, var = probit_latent(st, np.zeros((5, 0)))
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_array_equal(var, 0.0)

    codes = np.array([0, 1, 2, 2, 1, 0, 0])
    C = 3
    st = ep_multinomial_probit(np.zeros((m, 0)), codes, C)
    assert st.log_evidence == pytest.approx(-m * np.log(C))
    a, S = multinomial_loo(st, codes)
    # the orthant probability of N(0, 11ᵀ + I) in C - 1 dimensions is 1/C
    np.testing.assert_allclose(np.exp(orthant_log_probability(a, S)), 1.0 / C, atol=2e-3)
    proba = multinomial_predict(st, np.zeros((4, 0)))
    np.testing.assert_allclose(proba, 1.0 / C, atol=2e-3)


@pytest.mark.parametrize("params, none_left", [
    (dict(diffusion_time=1e300), False),
    (dict(eigenbasis=Eigenbasis(n_eigenpairs=1)), False),
    (dict(eigenbasis=Eigenbasis(n_induced=2, n_neighbors=2)), True),
])
def test_a_degenerate_prior_gives_the_prior_answer_with_a_warning(params, none_left):
    """An endless diffusion time, one eigenpair, two induced points: LinAlgError (info -7)
    before; now probabilities, and a warning that names what to change. With no mode left
    every point gets 1/2."""
    X, y, semi = _moons()
    with pytest.warns(UserWarning, match="n_eigenpairs, n_induced"):
        clf = FLGPClassifier(HeatKernelPrior(**params)).fit(X, semi)
    proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(1), 1.0)
    if none_left:
        np.testing.assert_allclose(proba, 0.5)
    else:       # the constant mode alone: one prediction for the whole (connected) cloud
        np.testing.assert_allclose(proba, proba[:1].repeat(len(X), 0), atol=1e-12)


def test_induced_points_far_from_the_cloud_give_an_answer():
    """Induced points 1000 away from every point: a LinAlgError before; now the prior's
    answer with warnings about the unusable eigenpairs and the empty prior."""
    X, y, semi = _moons()
    with pytest.warns(UserWarning):
        clf = FLGPClassifier(HeatKernelPrior(Eigenbasis(induced_points=X[:100] + 1000.0))).fit(X, semi)
    assert np.all(np.isfinite(clf.predict_proba(X[:10])))


# -- the constant mode's variance -----------------------------------------------------------

def test_a_large_constant_variance_does_not_flush_the_other_modes():
    """The flush of negligible weights is relative to the family's own weights: a constant
    mode of variance 1e30 zeroed every other mode (the accuracy fell to chance)."""
    ep = flgp.compute_eigenpairs(_moons()[0], n_induced=60, n_eigenpairs=20,
                                 random_state=0)
    w1 = spectral_weights(ep, 3.0)
    wc = spectral_weights(ep, 3.0, constant=1e30)
    np.testing.assert_array_equal(wc[1:], w1[1:])
    assert wc[0] == pytest.approx(1e30 * w1[0])


@pytest.mark.parametrize("inference", ["ep", "laplace"])
def test_constant_variance_up_to_its_bound_fits(inference):
    """``constant_variance`` up to 1e6 (a flat prior on the offset) fits as well as 1;
    above it, a clear error instead of NaN probabilities (EP, 1e100) or a Cholesky
    failure (Laplace, 1e16)."""
    from sklearn.utils._param_validation import InvalidParameterError

    X, y, semi = _moons()
    unl = semi == -1
    errors = []
    for c in (1.0, 1e6):
        proba = FLGPClassifier(HeatKernelPrior(constant_variance=c), inference=inference).fit(
            X, semi).predict_proba(X)
        assert np.all(np.isfinite(proba))
        errors.append(np.mean(proba.argmax(1)[unl] != y[unl]))
    assert errors[1] <= errors[0] + 0.03
    with pytest.raises(InvalidParameterError, match="constant_variance"):
        FLGPClassifier(HeatKernelPrior(constant_variance=1e100), inference=inference).fit(X, semi)


# -- the same answer with or without the compiled kernels, on grids -------------------------

def _grid(a, b, c):
    axes = np.meshgrid(np.arange(a), np.arange(b), np.arange(c), indexing="ij")
    return np.stack(axes, -1).reshape(-1, 3).astype(float)


def test_the_k_d_tree_breaks_ties_by_the_smaller_index():
    """On a grid most points have tied neighbours; scipy's tree returned them in an order
    of its own (895 of 2,000 rows differed from the compiled search). Compared with brute
    force by (squared distance, index)."""
    G = _grid(20, 20, 5)
    U = G[np.random.default_rng(0).choice(len(G), 200, replace=False)]
    idx, sq = kdtree_nearest(G, U, 3, 1)
    d2 = ((G[:, None, :] - U[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(200), d2.shape), d2), axis=1)[:, :3]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(sq, np.take_along_axis(d2, order, 1))
    with flgp.config_context(compiled=True):
        compiled_idx, _ = nearest_induced_points(G, U, 3)
    np.testing.assert_array_equal(compiled_idx, idx)


def test_a_grid_fit_does_not_depend_on_the_compiled_kernels():
    """The classifier on a 20 x 20 x 5 grid: probabilities 0.62 apart with and without
    the compiled kernels (ties in the search and in the k-means assignments)."""
    G = _grid(20, 20, 5)
    y = (G[:, 0] + G[:, 1] > 19).astype(int)
    rng = np.random.default_rng(0)
    semi = np.full(len(G), -1)
    lab = rng.choice(len(G), 40, replace=False)
    semi[lab] = y[lab]
    out = []
    for on in (True, False):
        with flgp.config_context(compiled=on):
            out.append(FLGPClassifier(HeatKernelPrior(), random_state=0).fit(G, semi).predict_proba(G))
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)      # EP's tolerance


# -- settings in threads --------------------------------------------------------------------

def test_config_contexts_in_two_threads_restore_their_own_values():
    """Two threads inside ``config_context(working_memory=...)``, leaving in the order
    they entered, left working_memory at the first one's value (one global dict restored
    from snapshots)."""
    before = flgp.get_config()
    inside = threading.Barrier(2)
    seen = {}

    def work(value, name):
        with flgp.config_context(working_memory=value):
            inside.wait()
            seen[name] = flgp.get_config()["working_memory"]
            inside.wait()

    threads = [threading.Thread(target=work, args=(v, k)) for k, v in (("a", 1.0), ("b", 8.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": 1.0, "b": 8.0}
    assert flgp.get_config() == before


def test_worker_threads_see_the_callers_context():
    from flgp._chunks import map_threads

    with flgp.config_context(compiled=False, working_memory=2.0):
        seen = map_threads(lambda _: flgp.get_config(), range(4), threads=2)
    assert all(s == {"compiled": False, "working_memory": 2.0} for s in seen)


@pytest.mark.parametrize("value", [1e308, float("inf"), 0.0, -1.0])
def test_an_impossible_working_memory_is_refused(value):
    """1e308 MiB was accepted, then every fit failed with 'cannot convert float NaN to
    integer'."""
    before = flgp.get_config()
    with pytest.raises(ValueError, match="working_memory"):
        flgp.set_config(working_memory=value)
    assert flgp.get_config() == before


# -- damaged NIfTI files --------------------------------------------------------------------

@pytest.fixture
def damaged_niftis(tmp_path):
    nib = pytest.importorskip("nibabel")
    img = nib.Nifti1Image(np.random.default_rng(0).standard_normal((10, 10, 10)), np.eye(4))
    good = tmp_path / "good.nii.gz"
    img.to_filename(good)
    raw = bytearray(good.read_bytes())
    flipped = raw.copy()
    for k in range(200, 260):
        flipped[k] ^= 0xFF
    (tmp_path / "flipped.nii.gz").write_bytes(bytes(flipped))
    (tmp_path / "truncated.nii.gz").write_bytes(bytes(raw[:len(raw) // 2]))
    with pytest.raises((OSError, EOFError, Exception)):     # the files really are damaged
        gzip.decompress(bytes(flipped))
    return tmp_path


@pytest.mark.parametrize("name", ["flipped", "truncated"])
def test_a_damaged_nifti_is_named(damaged_niftis, name):
    """Flipped bytes in the gzip stream ended in a zlib.error traceback (exit 1) from the
    command line; a truncated file in a bare EOFError from predict_image."""
    path = damaged_niftis / f"{name}.nii.gz"
    with pytest.raises(ValueError, match=f"{name}.nii.gz.*cannot be read as a NIfTI"):
        flgp.predict_image(str(path), None, 0.3)
    run = subprocess.run([sys.executable, "-m", "flgp.cli", "nifti", str(path),
                          "--observed-fraction", "0.3", "--out",
                          str(damaged_niftis / "out")], capture_output=True, text=True)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith("flgp nifti: error:") and name in lines[-1]
    assert "Traceback" not in run.stderr


# -- the GPyTorch kernels -------------------------------------------------------------------

def _eigenpairs():
    X = np.random.default_rng(0).standard_normal((200, 2))
    return X, flgp.compute_eigenpairs(X, n_induced=40, n_eigenpairs=10, random_state=0)


def test_a_batched_green_kernel_on_unbatched_inputs():
    """GreenKernel(batch_shape=[2]) on a (6, 2) input: GPyTorch expected [2, 6, 6] and got
    [6, 6] (the pseudo-inverse has no batched hyperparameter to carry the batch)."""
    X, ep = _eigenpairs()
    k = flgp.kernels.GreenKernel(ep, batch_shape=torch.Size([2]))
    K = k(torch.from_numpy(X[:6])).to_dense()
    assert K.shape == (2, 6, 6)
    single = flgp.kernels.GreenKernel(ep)(torch.from_numpy(X[:6])).to_dense()
    torch.testing.assert_close(K[0], single)
    torch.testing.assert_close(K[1], single)


def test_setting_the_diffusion_time_of_a_double_kernel_is_exact():
    """The setter went through torch's default float32: t = 1234.57 came back with a
    relative error of 1.5e-8 in a float64 kernel, and 1e300 as inf (a NaN covariance)."""
    X, ep = _eigenpairs()
    k = flgp.kernels.HeatKernel(ep).double()
    k.diffusion_time = 1234.57
    assert float(k.diffusion_time.detach()) == pytest.approx(1234.57, rel=1e-13)
    k.diffusion_time = 1e300
    assert float(k.diffusion_time.detach()) == pytest.approx(1e300, rel=1e-13)
    K = k(torch.from_numpy(X[:6])).to_dense()
    assert torch.isfinite(K).all()
    with pytest.raises(ValueError, match="finite and positive"):
        k.diffusion_time = -1.0


def test_an_endless_diffusion_time_keeps_the_zero_modes():
    """``-t λ`` at ``t = inf`` and ``λ = 0`` is 0 (weight 1), not NaN."""
    lam = np.array([0.0, 0.1, 0.5])
    np.testing.assert_array_equal(np.exp(heat_log_weights(lam, np.inf)), [1.0, 0.0, 0.0])
    out = heat_log_weights(torch.tensor(lam), torch.tensor(float("inf"))).exp()
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))


# -- counts of any size ---------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1e6, 1e12])
def test_large_counts_get_finite_means_that_follow_the_rate(scale):
    """Counts of 10^6 and more, with a rate that varies over the cloud: the plain Poisson
    model made the rank-M prior interpolate their logarithms exactly, with log-rate sds of
    60 and infinite means between the labels (median relative error 1.5 at 10^5..10^9).
    The overdispersion term (fitted), a stable Hessian factor and Newton's restart from
    the prior's mean fix it."""
    from flgp import FLGPRegressor
    from flgp.datasets import make_spiral

    X, _, f = make_spiral(600, noise=0.3, random_state=0)
    rng = np.random.default_rng(0)
    rate = scale * np.exp(f)
    counts = rng.poisson(rate).astype(float)
    semi = np.full(600, np.nan)
    lab = rng.choice(600, 60, replace=False)
    semi[lab] = counts[lab]
    reg = FLGPRegressor(likelihood="poisson").fit(X, semi)
    mean = reg.predict(X)
    assert np.all(np.isfinite(mean))
    unl = np.isnan(semi)
    assert np.median(np.abs(mean[unl] - rate[unl]) / rate[unl]) < 0.3
    assert 0.0 < reg.overdispersion_ <= 10.0
    lo, hi = reg.predict_interval(X, coverage=0.9)
    assert np.mean((counts[unl] >= lo[unl]) & (counts[unl] <= hi[unl])) > 0.7


def test_the_overdispersion_gradient_matches_an_explicit_model():
    """The nugget's Laplace posterior and evidence gradient through the Schur complement
    equal those of the model with the m extra columns σ I written out."""
    from flgp.models.inference.laplace import laplace_weights, laplace_weights_grad

    rng = np.random.default_rng(0)
    m, M = 25, 10
    V = rng.standard_normal((m, M)) / 3
    Phi = V * np.exp(0.5 * rng.normal(size=M))
    y = rng.poisson(np.exp(0.4 + Phi @ rng.standard_normal(M)
                           + 0.5 * rng.standard_normal(m))).astype(float)
    nugget = 0.3
    st = laplace_weights(Phi, y, offset=0.4, nugget=nugget, tol=1e-14, max_iter=500)
    Psi = np.c_[Phi, np.sqrt(nugget) * np.eye(m)]
    ref = laplace_weights(Psi, y, offset=0.4, tol=1e-14, max_iter=500)
    assert st.log_evidence == pytest.approx(ref.log_evidence, abs=1e-10)
    g, g_nugget = laplace_weights_grad(st, Phi, y, nugget_gradient=True)
    g_ref = laplace_weights_grad(ref, Psi, y)
    np.testing.assert_allclose(g, g_ref[:M], atol=1e-10)
    assert g_nugget == pytest.approx(g_ref[M:].sum(), abs=1e-10)
    h = 1e-5
    num = (laplace_weights(Phi, y, offset=0.4, nugget=nugget * np.exp(h), tol=1e-14).log_evidence
           - laplace_weights(Phi, y, offset=0.4, nugget=nugget * np.exp(-h),
                             tol=1e-14).log_evidence) / (2 * h)
    assert g_nugget == pytest.approx(num, abs=1e-6)


def test_count_intervals_end_for_rates_beyond_float64():
    """A log-rate of 700 with sd 5: the interval's search doubled its bound to infinity
    and bisected forever."""
    from flgp.models.inference.poisson import poisson_interval

    lo, hi = poisson_interval(np.array([2.0, 40.0, 700.0]), np.array([0.5, 3.0, 5.0]), 0.9)
    assert np.all(lo <= hi)
    assert np.isfinite(hi[:2]).all() and hi[2] == np.inf
    # a log-rate of 40 (10^17) and sd 3: the upper quantile lies far above the median
    assert np.exp(40.0) < hi[1] < np.exp(40.0 + 3 * 3.0)
