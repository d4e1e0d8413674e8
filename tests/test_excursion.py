"""Excursion sets from the joint posterior (flgp.precision.excursion,
flgp.models.excursion), against independent computations on small graphs: the dense
posterior covariance, scipy's multivariate normal orthant probabilities, the closed-form
marginals and binomial tail probabilities."""

import warnings

import numpy as np
import pytest
from scipy.special import ndtr
from scipy.stats import binom, multivariate_normal

import flgp
from flgp.graph import lattice_graph
from flgp.precision import excursion as excursion_module
from flgp.precision.excursion import (candidate_nodes, excursion_function,
                                      graph_matern_posterior_draws)
from flgp.precision.matern import matern_precision
from flgp.models.excursion import excursion_set, posterior_draws_of

NU, KAPPA2, RATIO, AMPLITUDE = 2, 0.3, 0.05, 1.7
OBSERVED = np.array([0, 5])


@pytest.fixture(scope="module")
def small():
    """An 8-node lattice with anisotropic voxels (units other than the graph's own), its
    dense posterior covariance and a mean crossing the level."""
    ijk = np.argwhere(np.ones((4, 2, 1), bool))
    graph = lattice_graph(ijk, np.diag([2.0, 3.0, 2.0, 1.0]))
    Qt = matern_precision(graph, KAPPA2, NU).toarray()
    Qt[OBSERVED, OBSERVED] += 1.0 / RATIO
    cov = AMPLITUDE * np.linalg.inv(Qt)
    mean = np.array([1.0, 0.8, 1.2, 0.5, 0.9, 0.1, 0.7, -0.3])
    return graph, cov, mean


def _draws(graph, mean, n_samples, random_state=0, block_size=None, nodes=None):
    return graph_matern_posterior_draws(graph, NU, KAPPA2, RATIO, OBSERVED,
                                        amplitude=AMPLITUDE, mean=mean, n_samples=n_samples,
                                        block_size=block_size, random_state=random_state,
                                        nodes=nodes)


def test_sampler_covariance_matches_dense_inverse(small):
    graph, cov, mean = small
    S = 20_000
    X = np.concatenate(list(_draws(graph, mean, S)), axis=1)
    assert X.shape == (8, S)
    # standard errors of the sample mean and of each sample covariance entry (Gaussian)
    se_mean = np.sqrt(np.diag(cov) / S)
    assert np.all(np.abs(X.mean(axis=1) - mean) <= 4.5 * se_mean)
    d = np.diag(cov)
    se_cov = np.sqrt((np.outer(d, d) + cov ** 2) / S)
    assert np.all(np.abs(np.cov(X) - cov) <= 4.5 * se_cov)


def test_candidate_draws_match_the_dense_marginal(small):
    """Draws of some nodes from the trailing block of a factor that eliminates them last
    have their joint marginal law: mean, covariance and exact sds."""
    graph, cov, mean = small
    S = 20_000
    wanted = np.array([6, 2, 3])
    draws = _draws(graph, mean, S, nodes=wanted)
    rows = draws.nodes
    assert set(wanted) <= set(rows.tolist()) and len(set(rows.tolist())) == rows.size
    X = np.concatenate(list(draws), axis=1)
    assert X.shape == (rows.size, S)
    sub = cov[np.ix_(rows, rows)]
    d = np.diag(sub)
    assert np.all(np.abs(X.mean(axis=1) - mean[rows]) <= 4.5 * np.sqrt(d / S))
    assert np.all(np.abs(np.cov(X) - sub) <= 4.5 * np.sqrt((np.outer(d, d) + sub ** 2) / S))
    assert np.allclose(draws.marginal_sd(), np.sqrt(d), rtol=1e-9)


def test_too_many_candidates_draw_every_node(small, monkeypatch):
    graph, _, mean = small
    monkeypatch.setattr(excursion_module, "DENSE_BLOCK_MAX_FILL", 0)
    draws = _draws(graph, mean, 10, nodes=np.array([1, 2]))
    assert draws.nodes is None and next(iter(draws)).shape == (8, 10)


def test_excursion_function_from_candidates(small):
    graph, cov, mean = small
    sd = np.sqrt(np.diag(cov))
    u, S = 0.6, 20_000
    nodes = candidate_nodes(mean, sd, u, ">", 0.5)
    assert np.array_equal(nodes, np.argsort(-(mean - u) / sd, kind="stable")[:nodes.size])
    assert np.all(ndtr((mean[nodes] - u) / sd[nodes]) >= 0.5)
    draws = _draws(graph, mean, S, nodes=nodes, random_state=5)
    ef = excursion_function(mean, draws, u, sd=sd)
    K = ef.n_computed
    assert nodes.size <= K < 8 and np.all(np.isnan(ef.joint[K:])) and np.all(np.isnan(ef.F[
        ef.order[K:]]))
    assert ef.F_limit == ef.marginal[ef.order[K]] < 0.5
    for k in range(1, K + 1):
        idx = ef.order[:k]
        exact = multivariate_normal(mean=u - mean[idx], cov=cov[np.ix_(idx, idx)],
                                    abseps=1e-7, releps=1e-7).cdf(np.zeros(k))
        assert abs(ef.joint[k - 1] - exact) <= 4.5 * np.sqrt(exact * (1 - exact) / S) + 1e-5
    assert ef.set_at(0.05).n_nodes_in_set <= K      # 1 - α above F_limit: determined
    # 1 - α below F_limit with every drawn prefix in the set: undetermined, refused
    if ef.joint_lower[K - 1] >= 1 - 0.99 and ef.F_limit >= 1 - 0.99:
        with pytest.raises(ValueError, match="F_limit"):
            ef.set_at(0.99)


def test_draws_are_reproducible_and_blocked(small):
    graph, _, mean = small
    draws = _draws(graph, mean, 50, block_size=16)
    blocks = list(draws)
    assert [b.shape[1] for b in blocks] == [16, 16, 16, 2] and len(draws) == 4
    again = np.concatenate(list(draws), axis=1)
    assert np.array_equal(np.concatenate(blocks, axis=1), again)
    other = np.concatenate(list(_draws(graph, mean, 50, random_state=1, block_size=16)), 1)
    assert not np.array_equal(again, other)


def test_marginal_sd_exact_and_by_rbmc(small, monkeypatch):
    graph, cov, mean = small
    sd = np.sqrt(np.diag(cov))
    assert np.allclose(_draws(graph, mean, 10).marginal_sd(), sd, rtol=1e-10)
    # beyond EXACT_SD_MAX_NODES: Rao-Blackwellised Monte Carlo (relative error ~ a few %)
    monkeypatch.setattr(excursion_module, "EXACT_SD_MAX_NODES", 0)
    assert np.allclose(_draws(graph, mean, 10).marginal_sd(), sd, rtol=0.1)


def test_marginals_are_the_closed_form(small):
    graph, cov, mean = small
    sd = np.sqrt(np.diag(cov))
    u = 0.6
    draws = _draws(graph, mean, 2000)
    ef = excursion_function(mean, draws, u)               # sd from the factor, exactly
    assert np.allclose(ef.marginal, ndtr((mean - u) / sd), atol=1e-12)
    assert np.array_equal(ef.order, np.argsort(-(mean - u) / sd, kind="stable"))
    # an array of draws without sd: its own standard deviations, within Monte Carlo error
    X = np.concatenate(list(_draws(graph, mean, 20_000)), axis=1)
    ef_array = excursion_function(mean, X, u)
    assert np.allclose(ef_array.marginal, ndtr((mean - u) / sd), atol=0.01)


@pytest.mark.parametrize("u", [0.2, 0.6])
def test_joint_probabilities_match_orthant_probabilities(small, u):
    graph, cov, mean = small
    S = 20_000
    ef = excursion_function(mean, _draws(graph, mean, S, random_state=3), u)
    order = ef.order
    for k in range(1, 9):
        nodes = order[:k]
        # P(f_nodes > u) = P(-f_nodes < -u): the CDF of N(u - μ, Σ) at 0
        exact = multivariate_normal(mean=u - mean[nodes], cov=cov[np.ix_(nodes, nodes)],
                                    abseps=1e-7, releps=1e-7).cdf(np.zeros(k))
        se = np.sqrt(exact * (1 - exact) / S)
        assert abs(ef.joint[k - 1] - exact) <= 4.5 * se + 1e-5, (k, ef.joint[k - 1], exact)
        assert np.isclose(ef.joint_se[k - 1], np.sqrt(ef.joint[k - 1]
                                                      * (1 - ef.joint[k - 1]) / S))


def test_monotone_and_bounded(small):
    graph, _, mean = small
    S = 4000
    ef = excursion_function(mean, _draws(graph, mean, S), 0.4)
    assert np.all(np.diff(ef.joint) <= 0) and np.all(np.diff(ef.joint_lower) <= 0)
    assert np.all(ef.joint_lower <= ef.joint)
    # F(s) = P_k <= p(s): the joint probability never exceeds the marginal
    assert np.all(ef.F <= ef.marginal + 4.5 * np.sqrt(ef.marginal * (1 - ef.marginal) / S)
                  + 1e-12)
    assert np.array_equal(ef.F[ef.order], ef.joint)
    assert np.array_equal(ef.F_lower[ef.order], ef.joint_lower)


def test_lower_bounds_are_clopper_pearson(small):
    graph, _, mean = small
    S = 3000
    ef = excursion_function(mean, _draws(graph, mean, S), 0.4, n_sd=2.0)
    counts = np.rint(ef.joint * S).astype(int)
    positive = counts > 0
    # at the bound L the count or more has binomial probability Φ(-2) exactly
    tail = binom.sf(counts[positive] - 1, S, ef.joint_lower[positive])
    assert np.allclose(tail, ndtr(-2.0), rtol=1e-6)
    assert np.all(ef.joint_lower[~positive] == 0)


@pytest.mark.parametrize("alpha", [0.05, 0.2, 0.5, 0.9])
def test_set_is_the_prefix_with_lower_bound_above_level(small, alpha):
    graph, _, mean = small
    ef = excursion_function(mean, _draws(graph, mean, 4000), 0.3)
    result = ef.set_at(alpha)
    K = result.n_nodes_in_set
    assert np.all(ef.joint_lower[:K] >= 1 - alpha)
    assert K == 8 or ef.joint_lower[K] < 1 - alpha
    expected = np.zeros(8, bool)
    expected[ef.order[:K]] = True
    assert np.array_equal(result.mask, expected)
    assert np.array_equal(result.mask, ef.F_lower >= 1 - alpha)
    if K:
        assert result.joint_lower >= 1 - alpha
        assert result.joint_probability == ef.joint[K - 1]


def test_conservative_rule_holds_its_confidence():
    """Independent nodes, where P_k is a product of marginals: over many Monte Carlo
    replications the set overshoots (true joint probability below 1 - α) at most about
    Φ(-2) = 2.3 % of the time."""
    rng = np.random.default_rng(0)
    mean = np.linspace(4.0, 0.0, 20)
    u, alpha, S = 0.0, 0.1, 400
    true_joint = np.cumprod(ndtr(mean - u))             # nodes already in marginal order
    reps, overshoot = 400, 0
    for _ in range(reps):
        X = mean[:, None] + rng.standard_normal((20, S))
        K = excursion_function(mean, X, u, sd=np.ones(20)).set_size(alpha)
        overshoot += K > 0 and true_joint[K - 1] < 1 - alpha
    assert overshoot / reps <= 0.05


def test_sides_agree_under_negation(small):
    graph, _, mean = small
    X = np.concatenate(list(_draws(graph, mean, 3000)), axis=1)
    sd = _draws(graph, mean, 1).marginal_sd()
    below = excursion_function(mean, X, 0.5, "<", sd=sd)
    above = excursion_function(-mean, -X, -0.5, ">", sd=sd)
    for name in ("marginal", "order", "joint", "joint_se", "joint_lower"):
        assert np.array_equal(getattr(below, name), getattr(above, name)), name
    assert np.array_equal(below.set_at(0.1).mask, above.set_at(0.1).mask)


def test_blocks_and_array_agree(small):
    graph, _, mean = small
    draws = _draws(graph, mean, 1000, block_size=64)
    sd = draws.marginal_sd()
    X = np.concatenate(list(draws), axis=1)
    a, b = excursion_function(mean, draws, 0.5, sd=sd), excursion_function(mean, X, 0.5,
                                                                            sd=sd)
    assert np.array_equal(a.joint, b.joint) and a.n_samples == b.n_samples == 1000


def test_bad_inputs(small, monkeypatch):
    graph, _, mean = small
    X = mean[:, None] + np.random.default_rng(0).standard_normal((8, 100))
    sd = np.ones(8)
    for u in (np.nan, np.inf, "1", None):
        with pytest.raises(ValueError, match="u"):
            excursion_function(mean, X, u, sd=sd)
    with pytest.raises(ValueError, match="side"):
        excursion_function(mean, X, 0.5, ">=", sd=sd)
    ef = excursion_function(mean, X, 0.5, sd=sd)
    for alpha in (0.0, 1.0, -0.1, 1.5, np.nan, True):
        with pytest.raises(ValueError, match="alpha"):
            ef.set_at(alpha)
    bad = mean.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="mean"):
        excursion_function(bad, X, 0.5, sd=sd)
    with pytest.raises(ValueError, match="sd"):
        excursion_function(mean, X, 0.5, sd=np.where(np.arange(8) == 2, np.nan, 1.0))
    with pytest.raises(ValueError, match="sd"):
        excursion_function(mean, X, 0.5, sd=-sd)
    with pytest.raises(ValueError, match="draws"):
        excursion_function(mean, X[:5], 0.5, sd=sd)
    with pytest.raises(ValueError, match="non-finite"):
        excursion_function(mean, np.where(X > 2, np.inf, X), 0.5, sd=sd)
    with pytest.raises(ValueError, match="in blocks"):
        excursion_function(mean, iter([X]), 0.5)            # blocks without sd
    with pytest.raises(ValueError, match="draws of 5 of them"):
        excursion_function(mean, X[:5], 0.5, nodes=np.arange(5))    # some nodes, no sd
    # a level out of the posterior's reach warns and gives empty sets
    with pytest.warns(UserWarning, match="beyond the posterior's reach"):
        far = excursion_function(mean, X, 50.0, sd=sd)
    assert far.set_at(0.05).n_nodes_in_set == 0
    # the sampler's boundary
    with pytest.raises(ValueError, match="kappa2"):
        graph_matern_posterior_draws(graph, NU, -1.0, RATIO, OBSERVED)
    with pytest.raises(ValueError, match="ratio"):
        graph_matern_posterior_draws(graph, NU, KAPPA2, np.nan, OBSERVED)
    with pytest.raises(ValueError, match="observed"):
        graph_matern_posterior_draws(graph, NU, KAPPA2, RATIO, np.array([0, 8]))
    with pytest.raises(ValueError, match="nu"):
        graph_matern_posterior_draws(graph, 1.5, KAPPA2, RATIO, OBSERVED)
    monkeypatch.setattr(excursion_module, "factors", lambda n: False)
    with pytest.raises(ValueError, match="conjugate gradients"):
        graph_matern_posterior_draws(graph, NU, KAPPA2, RATIO, OBSERVED)


# -- a fitted regressor ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def fitted():
    ijk = np.argwhere(np.ones((6, 5, 2), bool))
    graph = lattice_graph(ijk, np.diag([2.5, 2.5, 3.0, 1.0]))
    X = graph.points
    rng = np.random.default_rng(1)
    f = 3.0 * np.sin(X[:, 0] / 5.0) + np.cos(X[:, 1] / 4.0) + 100.0
    observed = rng.random(f.size) < 0.4
    y = np.where(observed, f + 0.3 * rng.standard_normal(f.size), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = flgp.FLGPRegressor(prior=flgp.GraphMaternPrior(graph=graph)).fit(X, y)
    return reg, graph, y


def _dense_posterior(reg, graph, y):
    """The posterior mean and covariance from the fitted prior's public attributes, by
    dense linear algebra on the graph as given."""
    p = reg.prior_
    ratio = p.noise_ / p.outputscale_
    o = reg.labelled_indices_
    Qt = matern_precision(graph, p.kappa_ ** 2, p.nu).toarray()
    Qt[o, o] += 1.0 / ratio
    c = p.constant_
    mean = c + np.linalg.solve(Qt, np.bincount(o, y[o] - c, minlength=graph.n_nodes) / ratio)
    return mean, p.outputscale_ * np.linalg.inv(Qt)


def test_regressor_posterior_is_reproduced(fitted):
    reg, graph, y = fitted
    assert reg.method_ == "graph_matern"
    mean, cov = _dense_posterior(reg, graph, y)
    # the fitted attributes give the fit's own posterior: its mean exactly, ...
    assert np.allclose(mean, reg.transduction_, rtol=0, atol=1e-6 * np.ptp(y[~np.isnan(y)]))
    sd = np.sqrt(np.diag(cov))
    # ... its sd (Rao-Blackwellised Monte Carlo in the fit) within its standard error
    assert np.all(np.abs(reg.transduction_std_ - sd)
                  <= 5 * reg.transduction_std_error_ + 1e-9 * sd)
    # the sampler's draws have the same sds, within their own Monte Carlo error
    S = 4000
    X = np.concatenate(list(posterior_draws_of(reg, n_samples=S)), axis=1)
    sample_sd = X.std(axis=1)
    se = np.sqrt(reg.transduction_std_error_ ** 2 + (sd / np.sqrt(2 * S)) ** 2)
    assert np.all(np.abs(sample_sd - reg.transduction_std_) <= 5 * se)
    assert np.all(np.abs(X.mean(axis=1) - reg.transduction_) <= 5 * sd / np.sqrt(S))


def test_regressor_excursion_set(fitted):
    reg, graph, y = fitted
    u = float(np.median(reg.transduction_))
    result = excursion_set(reg, u, 0.05, n_samples=4000)
    assert result.mask.shape == (graph.n_nodes,)
    assert result.n_nodes_in_set > 0 and result.joint_lower >= 0.95
    # the set's joint probability against the dense posterior's orthant probability
    mean, cov = _dense_posterior(reg, graph, y)
    nodes = np.flatnonzero(result.mask)
    exact = multivariate_normal(mean=u - mean[nodes], cov=cov[np.ix_(nodes, nodes)],
                                abseps=1e-6, releps=1e-6).cdf(np.zeros(nodes.size))
    assert abs(result.joint_probability - exact) <= 4.5 * result.joint_se + 2e-3
    assert exact >= 0.95 - 2e-3
    below = excursion_set(reg, u, 0.05, side="<", n_samples=4000)
    assert not np.any(below.mask & result.mask)
    again = excursion_set(reg, u, 0.05, n_samples=4000)
    assert np.array_equal(again.mask, result.mask)


def test_regressor_refusals(fitted):
    reg, graph, y = fitted
    with pytest.raises(ValueError, match="not fitted"):
        excursion_set(flgp.FLGPRegressor(), 0.0)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 2))
    heat = flgp.FLGPRegressor(prior=flgp.HeatKernelPrior()).fit(
        X, np.where(np.arange(120) % 3 == 0, X[:, 0], np.nan))
    with pytest.raises(ValueError, match="GraphMaternPrior"):
        excursion_set(heat, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        excursion_set(reg, 100.0, alpha=1.0, n_samples=10)


# -- the command line ------------------------------------------------------------------------
def _blob_image(tmp_path):
    """A 10 x 10 x 4 NIfTI map (2 mm voxels) of one smooth blob of height 1 on 0.1."""
    nib = pytest.importorskip("nibabel")
    i, j, k = np.indices((10, 10, 4))
    data = 0.1 + np.exp(-((i - 4.5) ** 2 + (j - 4.5) ** 2 + (k - 1.5) ** 2) / 8.0)
    path = tmp_path / "map.nii.gz"
    nib.Nifti1Image(data.astype(np.float32), np.diag([2.0, 2.0, 2.0, 1.0])).to_filename(path)
    return path, data


def test_cli_nifti_excursion_matches_the_api(tmp_path, capsys):
    """``flgp nifti --excursion``: F and the set on the map's grid, the same as
    excursion_set on predict_image's regressor with the same seed; the set where F
    reaches 1 - alpha."""
    nib = pytest.importorskip("nibabel")
    from flgp.cli import main

    path, data = _blob_image(tmp_path)
    # --excursion fits the graph Matérn prior by default
    rc = main(["nifti", str(path), "--observed-fraction", "0.4",
               "--out", str(tmp_path / "o"), "--excursion", "0.5", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "excursion set above 0.5 at alpha 0.05" in out
    F = nib.load(tmp_path / "o_excursion_F.nii.gz").get_fdata()
    inside = nib.load(tmp_path / "o_excursion_set.nii.gz").get_fdata()
    assert (tmp_path / "o_excursion.png").stat().st_size > 0
    assert set(np.unique(inside)) <= {0.0, 1.0}
    res = flgp.predict_image(path, None, 0.4, random_state=0,
                             regressor=flgp.FLGPRegressor(flgp.GraphMaternPrior()))
    ref = excursion_set(res.regressor, 0.5, 0.05, random_state=0)
    # two fits of the same map (their hyperparameters an optimiser's, equal to its
    # tolerance) and the same seeded draws: a draw within that tolerance of u may flip,
    # moving F by at most a few draws (1e-3 each) and the set by a node or two
    got = inside[tuple(res.voxels.ijk.T)].astype(bool)
    assert np.sum(got != ref.mask) <= max(2, 0.01 * ref.mask.sum())
    np.testing.assert_allclose(F[tuple(res.voxels.ijk.T)],
                               np.nan_to_num(ref.function.F, nan=0.0), atol=5e-3)
    assert inside.sum() > 0 and np.all(F[inside == 1] >= 0.95 - 1e-6)
    # the set lies where the blob exceeds the level
    assert np.all(data[inside == 1] > 0.5)


def test_cli_excursion_refuses_a_fit_without_a_joint_posterior(tmp_path, capsys):
    pytest.importorskip("nibabel")
    from flgp.cli import main

    path, _ = _blob_image(tmp_path)
    rc = main(["nifti", str(path), "--observed-fraction", "0.4", "--method", "rbf",
               "--out", str(tmp_path / "o"), "--excursion", "0.5", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("flgp nifti: error: ") and "--method graph_matern" in err
    assert not (tmp_path / "o_excursion_F.nii.gz").exists()
    rc = main(["nifti", str(path), "--observed-fraction", "0.4", "--method", "graph_matern",
               "--out", str(tmp_path / "o"), "--excursion", "0.5", "--alpha", "1.5",
               "--quiet"])
    assert rc == 2 and "alpha" in capsys.readouterr().err


def test_cli_surface_excursion_below(tmp_path, capsys):
    """``flgp surface --excursion U --below`` on a flat triangulated grid: the set where
    the map lies below U jointly, written per vertex (0 outside)."""
    nib = pytest.importorskip("nibabel")
    from flgp.cli import main
    from flgp.models.surface import write_gifti

    n = 16
    g = np.arange(n, dtype=float)
    V = np.c_[np.repeat(g, n), np.tile(g, n), np.zeros(n * n)]
    idx = np.arange(n * n).reshape(n, n)
    F = np.concatenate([np.c_[idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(),
                              idx[:-1, 1:].ravel()],
                        np.c_[idx[1:, :-1].ravel(), idx[1:, 1:].ravel(),
                              idx[:-1, 1:].ravel()]])
    mesh = nib.gifti.GiftiImage(darrays=[
        nib.gifti.GiftiDataArray(V.astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
        nib.gifti.GiftiDataArray(F.astype(np.int32), intent="NIFTI_INTENT_TRIANGLE")])
    nib.save(mesh, tmp_path / "flat.surf.gii")
    values = -np.exp(-((V[:, 0] - 7.5) ** 2 + (V[:, 1] - 7.5) ** 2) / 10.0)
    write_gifti(values, tmp_path / "map.func.gii")
    rc = main(["surface", str(tmp_path / "flat.surf.gii"), str(tmp_path / "map.func.gii"),
               "--observed-fraction", "0.4", "--method", "graph_matern", "--out",
               str(tmp_path / "s"), "--excursion", "-0.5", "--below"])
    assert rc == 0
    assert "excursion set below -0.5" in capsys.readouterr().out
    inside = nib.load(tmp_path / "s_excursion_set.func.gii").darrays[0].data
    Fv = nib.load(tmp_path / "s_excursion_F.func.gii").darrays[0].data
    assert inside.shape == (n * n,) and inside.sum() > 0
    assert np.all(values[inside == 1] < -0.5) and np.all(Fv[inside == 1] >= 0.95 - 1e-6)
