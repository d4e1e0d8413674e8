"""Group maps from many subjects (flgp.precision.group, flgp.models.group) against
independent dense computations on small lattices: Gaussian conditioning of the stacked
model (every subject's map, the dense covariance ``11ᵀ ⊗ Σ_g + I ⊗ Σ_w``), scipy's
multivariate normal densities, Monte Carlo moments of the joint draws."""

import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import flgp
from flgp.graph import lattice_graph
from flgp.precision import group as group_module
from flgp.precision.group import (GroupParameters, GroupPosterior, contrast_draws,
                                  fit_group, group_log_likelihood)
from flgp.precision.matern import matern_precision

PARAMS = GroupParameters(nu_group=2, kappa2_group=0.2, amplitude_group=1.5, level=0.7,
                         nu_subject=2, kappa2_subject=0.02, amplitude_subject=0.8,
                         noise=0.3)
AFFINE = np.diag([2.0, 2.0, 3.0, 1.0])          # anisotropic mm voxels: not the own units


def _covariances(graph, p):
    Sg = p.amplitude_group * np.linalg.inv(
        matern_precision(graph, p.kappa2_group, p.nu_group).toarray())
    Sw = (p.amplitude_subject * np.linalg.inv(
        matern_precision(graph, p.kappa2_subject, p.nu_subject).toarray())
        + p.noise * np.eye(graph.n_nodes))
    return Sg, Sw


def _dense_posterior(graph, Y, p):
    """g's posterior mean and covariance by conditioning the stacked maps (n S of them)."""
    n, S = Y.shape
    Sg, Sw = _covariances(graph, p)
    K = np.kron(np.ones((S, S)), Sg) + np.kron(np.eye(S), Sw)
    C = np.kron(np.ones((1, S)), Sg)
    y = Y.T.ravel() - p.level
    return p.level + C @ np.linalg.solve(K, y), Sg - C @ np.linalg.solve(K, C.T)


def _simulate(graph, p, S, seed):
    rng = np.random.default_rng(seed)
    Sg, Sw = _covariances(graph, p)
    g = p.level + np.linalg.cholesky(Sg) @ rng.standard_normal(graph.n_nodes)
    return g[:, None] + np.linalg.cholesky(Sw) @ rng.standard_normal((graph.n_nodes, S))


@pytest.fixture(scope="module")
def lattice():
    graph = lattice_graph(np.argwhere(np.ones((6, 6, 3), bool)), AFFINE)
    return graph, _simulate(graph, PARAMS, 4, seed=0)


@pytest.fixture(scope="module")
def tiny():
    graph = lattice_graph(np.argwhere(np.ones((4, 3, 2), bool)), AFFINE)
    return graph, _simulate(graph, PARAMS, 3, seed=1)


def test_posterior_matches_dense_conditioning_of_every_map(lattice):
    graph, Y = lattice
    mean, cov = _dense_posterior(graph, Y, PARAMS)
    post = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1], PARAMS)
    np.testing.assert_allclose(post.mean, mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(post.marginal_sd(), np.sqrt(np.diag(cov)), rtol=1e-10)
    joint_cov = np.linalg.inv(post.precision.toarray())
    np.testing.assert_allclose(joint_cov[:graph.n_nodes, :graph.n_nodes], cov, rtol=0,
                               atol=1e-10)


def test_log_likelihoods_match_scipy(lattice):
    graph, Y = lattice
    n, S = Y.shape
    Sg, Sw = _covariances(graph, PARAMS)
    stacked = multivariate_normal(np.full(n * S, PARAMS.level),
                                  np.kron(np.ones((S, S)), Sg) + np.kron(np.eye(S), Sw))
    assert group_log_likelihood(graph, Y, PARAMS) == pytest.approx(
        stacked.logpdf(Y.T.ravel()), rel=1e-10)
    mean_map = multivariate_normal(np.full(n, PARAMS.level), Sg + Sw / S)
    post = GroupPosterior(graph, Y.mean(axis=1), S, PARAMS)
    assert post.log_likelihood == pytest.approx(mean_map.logpdf(Y.mean(axis=1)), rel=1e-10)


def test_level_none_is_the_maximum_likelihood_level(lattice):
    graph, Y = lattice
    from dataclasses import replace

    post = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1], replace(PARAMS, level=None))
    mu = post.parameters.level
    for shift in (-0.05, 0.05):
        other = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1],
                               replace(PARAMS, level=mu + shift))
        assert other.log_likelihood < post.log_likelihood


def test_draws_have_the_dense_posterior_moments(tiny):
    graph, Y = tiny
    mean, cov = _dense_posterior(graph, Y, PARAMS)
    post = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1], PARAMS)
    n_samples = 20_000
    draws = post.draws(n_samples, random_state=3)
    X = np.concatenate(list(draws), axis=1)
    assert X.shape == (graph.n_nodes, n_samples)
    np.testing.assert_allclose(draws.marginal_sd(), np.sqrt(np.diag(cov)), rtol=1e-10)
    d = np.diag(cov)
    assert np.all(np.abs(X.mean(axis=1) - mean) <= 4.5 * np.sqrt(d / n_samples))
    se_cov = np.sqrt((np.outer(d, d) + cov ** 2) / n_samples)
    assert np.all(np.abs(np.cov(X) - cov) <= 4.5 * se_cov)
    # the same draws on every pass
    np.testing.assert_array_equal(np.concatenate(list(draws), axis=1), X)


def test_monte_carlo_sd_agrees_with_the_exact_one(lattice, monkeypatch):
    graph, Y = lattice
    post = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1], PARAMS)
    exact = post.marginal_sd()
    monkeypatch.setattr(group_module, "EXACT_SD_MAX_NODES", 10)
    estimate = GroupPosterior(graph, Y.mean(axis=1), Y.shape[1], PARAMS).marginal_sd()
    assert not np.allclose(estimate, exact, rtol=1e-8, atol=0)
    # RBMC with 256 draws: relative standard errors of a variance of a few per cent
    np.testing.assert_allclose(estimate, exact, rtol=0.1)


def test_units_of_the_graph_do_not_change_the_posterior(lattice):
    """The same lattice in cm instead of mm, with κ and A in the new units: the same
    posterior and likelihood."""
    graph, Y = lattice
    cm = lattice_graph(np.argwhere(np.ones((6, 6, 3), bool)), AFFINE * [[.1], [.1], [.1],
                                                                        [1]])
    from dataclasses import replace

    p_cm = replace(PARAMS, kappa2_group=PARAMS.kappa2_group * 100,
                   amplitude_group=PARAMS.amplitude_group * 10.0 ** (2 * PARAMS.nu_group),
                   kappa2_subject=PARAMS.kappa2_subject * 100,
                   amplitude_subject=PARAMS.amplitude_subject
                   * 10.0 ** (2 * PARAMS.nu_subject))
    a = GroupPosterior(graph, Y.mean(axis=1), 4, PARAMS)
    b = GroupPosterior(cm, Y.mean(axis=1), 4, p_cm)
    np.testing.assert_allclose(b.mean, a.mean, atol=1e-9)
    assert b.log_likelihood == pytest.approx(a.log_likelihood, rel=1e-9)


def _terms(graph, Y, p):
    """``(within term, mean-map term)`` of the log-likelihood at ``p``."""
    n, S = Y.shape
    mean_term = GroupPosterior(graph, Y.mean(axis=1), S, p).log_likelihood
    return group_log_likelihood(graph, Y, p) - mean_term + 0.5 * n * np.log(S), mean_term


def test_fit_maximises_the_likelihood_and_finds_the_noise():
    from dataclasses import replace

    graph = lattice_graph(np.argwhere(np.ones((6, 6, 3), bool)), AFFINE)
    Y = _simulate(graph, PARAMS, 10, seed=2)
    post, record = fit_group(graph, Y)
    p = post.parameters
    assert record["log_likelihood"] == pytest.approx(group_log_likelihood(graph, Y, p),
                                                     rel=1e-10)
    # each stage maximises its term: the truth's within term, and the truth's group
    # prior with the fitted subjects' part, are no better (to the search's tolerance)
    within, mean_term = _terms(graph, Y, p)
    assert within >= _terms(graph, Y, PARAMS)[0] - 0.5
    true_group = replace(p, nu_group=PARAMS.nu_group, kappa2_group=PARAMS.kappa2_group,
                         amplitude_group=PARAMS.amplitude_group, level=None)
    assert mean_term >= _terms(graph, Y, true_group)[1] - 0.5
    for change in (dict(amplitude_group=p.amplitude_group * 2),
                   dict(amplitude_group=p.amplitude_group / 2),
                   dict(noise=p.noise * 1.5), dict(kappa2_subject=p.kappa2_subject * 3)):
        assert group_log_likelihood(graph, Y, replace(p, **change)) < \
            record["log_likelihood"] + 0.05
    # 9 deviation maps of 108 voxels: the noise within a quarter of the truth
    assert p.noise == pytest.approx(PARAMS.noise, rel=0.25)


def test_deviations_weaker_than_the_noise_are_found_on_their_ridge():
    """Subjects' deviations of order 2 (sd 0.5, κ 0.15 / mm) under noise of sd 1 on a
    16 × 16 × 8 lattice of 3 mm voxels: the evidence's ridge runs diagonally in (log κ², log r̃), where the
    line searches alone stopped on order 1 with the noise 20 % low, 10 nats below the
    truth's within term; the polish of every order finds order 2, the noise and at least
    the truth's likelihood."""
    from dataclasses import replace

    from flgp.precision import PatternCholesky

    graph = lattice_graph(np.argwhere(np.ones((16, 16, 8), bool)),
                          np.diag([3.0, 3.0, 3.0, 1.0]))
    length, mass = graph.own_units()
    own = graph.in_units(length, mass)
    rng = np.random.default_rng(1)
    Q = matern_precision(own, (0.15 * length) ** 2, 2)
    chol = PatternCholesky(Q)
    chol.factor(Q)
    d = chol.sample(10, rng)
    scale = 0.5 / d.std()
    Y = 1.0 + scale * d + rng.standard_normal(d.shape)
    p = fit_group(graph, Y)[0].parameters
    truth = replace(p.in_units(length, mass), nu_subject=2,
                    kappa2_subject=(0.15 * length) ** 2, amplitude_subject=scale ** 2,
                    noise=1.0).in_units(1.0 / length, 1.0 / mass)
    assert p.nu_subject == 2
    assert p.noise == pytest.approx(1.0, rel=0.1)
    assert _terms(graph, Y, p)[0] >= _terms(graph, Y, truth)[0] - 0.5


def test_group_map_of_arrays_and_images_agree(lattice):
    nib = pytest.importorskip("nibabel")
    graph, Y = lattice
    result = flgp.group_map(Y, graph=graph)
    assert isinstance(result.mean, np.ndarray) and result.mean.shape == (graph.n_nodes,)
    ref, _ = fit_group(graph, Y)
    np.testing.assert_allclose(result.mean, ref.mean)
    np.testing.assert_allclose(result.std, ref.marginal_sd())
    assert result.n_subjects == 4 and result.hyperparameters["nu_group"] in (1, 2, 3, 4)
    # the same maps as a 4-d image with a mask that is the whole box
    data = Y.reshape(6, 6, 3, 4)
    img = nib.Nifti1Image(data, AFFINE)
    as_image = flgp.group_map(img, np.ones((6, 6, 3), bool))
    assert isinstance(as_image.mean, nib.Nifti1Image)
    np.testing.assert_allclose(as_image.mean.affine, AFFINE)
    np.testing.assert_allclose(as_image.mean.get_fdata().ravel(), result.mean, rtol=1e-5,
                               atol=1e-6)
    # a list of 3-d images is the same as the 4-d image
    listed = flgp.group_map([nib.Nifti1Image(data[..., s], AFFINE) for s in range(4)])
    np.testing.assert_allclose(listed.mean.get_fdata(), as_image.mean.get_fdata())
    found = as_image.excursion_set(result.mean.mean(), alpha=0.1, n_samples=500)
    assert as_image.to_image(found.mask).shape == (6, 6, 3)


def test_excursion_set_holds_jointly_under_the_dense_posterior(lattice):
    graph, Y = lattice
    result = flgp.group_map(Y, graph=graph)
    p = result.parameters
    u = float(np.quantile(result.mean - 3.0 * result.std, 0.7))
    found = result.excursion_set(u, alpha=0.05, n_samples=4000, random_state=1)
    assert found.n_nodes_in_set > 0
    mean, cov = _dense_posterior(graph, Y, p)
    rng = np.random.default_rng(7)
    X = rng.multivariate_normal(mean, cov, size=20_000)
    joint = np.mean(np.all(X[:, found.mask] > u, axis=1))
    assert joint >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / 20_000)
    below = result.excursion_set(u, alpha=0.05, side="<", n_samples=2000)
    assert not np.any(below.mask & found.mask)


def test_contrast_matches_the_difference_of_dense_posteriors():
    graph = lattice_graph(np.argwhere(np.ones((4, 3, 2), bool)), AFFINE)
    Ya = _simulate(graph, PARAMS, 5, seed=4)
    from dataclasses import replace

    Yb = _simulate(graph, replace(PARAMS, level=0.2), 3, seed=5)
    contrast = flgp.group_contrast(Ya, Yb, graph=graph)
    ma, ca = _dense_posterior(graph, Ya, contrast.group_a.parameters)
    mb, cb = _dense_posterior(graph, Yb, contrast.group_b.parameters)
    np.testing.assert_allclose(contrast.mean, ma - mb, atol=1e-9)
    np.testing.assert_allclose(contrast.std, np.sqrt(np.diag(ca) + np.diag(cb)), rtol=1e-9)
    n_samples = 20_000
    draws = contrast.draws(n_samples, random_state=2)
    X = np.concatenate(list(draws), axis=1)
    cov = ca + cb
    d = np.diag(cov)
    np.testing.assert_allclose(draws.marginal_sd(), np.sqrt(d), rtol=1e-9)
    assert np.all(np.abs(X.mean(axis=1) - (ma - mb)) <= 4.5 * np.sqrt(d / n_samples))
    assert np.all(np.abs(np.cov(X) - cov) <= 4.5 * np.sqrt((np.outer(d, d) + cov ** 2)
                                                           / n_samples))
    found = contrast.excursion_set(0.0, alpha=0.05, n_samples=1000)
    assert found.mask.shape == (graph.n_nodes,)
    # direct use of the precision-level function gives the same draws
    again = contrast_draws(contrast.group_a.posterior, contrast.group_b.posterior,
                           n_samples, random_state=2)
    np.testing.assert_array_equal(np.concatenate(list(again), axis=1), X)


def test_bad_inputs_raise_clear_errors(lattice):
    nib = pytest.importorskip("nibabel")
    graph, Y = lattice
    with pytest.raises(ValueError, match="at least 2"):
        flgp.group_map(Y[:, :1], graph=graph)
    with pytest.raises(ValueError, match="one row a node"):
        flgp.group_map(Y[:-1], graph=graph)
    bad = Y.copy()
    bad[5, 2] = np.nan
    with pytest.raises(ValueError, match="subject 2 has 1 NaN"):
        flgp.group_map(bad, graph=graph)
    with pytest.raises(ValueError, match="give the graph"):
        flgp.group_map(Y)
    with pytest.raises(ValueError, match="not a mask"):
        flgp.group_map(Y, np.ones((6, 6, 3), bool), graph=graph)
    data = Y.reshape(6, 6, 3, 4)
    maps = [nib.Nifti1Image(data[..., s], AFFINE) for s in range(4)]
    with pytest.raises(ValueError, match="grid"):
        flgp.group_map(maps[:3] + [nib.Nifti1Image(data[:5, ..., 3], AFFINE)])
    with pytest.raises(ValueError, match="shape"):
        flgp.group_map(nib.Nifti1Image(data, AFFINE), np.ones((6, 6, 2), bool))
    with pytest.raises(ValueError, match="grid"):
        flgp.group_map(nib.Nifti1Image(data, AFFINE),
                       nib.Nifti1Image(np.ones((6, 6, 3), np.uint8), np.eye(4)))
    nan_data = data.copy()
    nan_data[1, 1, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"voxel \(1, 1, 1\)"):
        flgp.group_map(nib.Nifti1Image(nan_data, AFFINE), np.ones((6, 6, 3), bool))
    with pytest.raises(ValueError, match="one grid"):
        flgp.group_contrast(nib.Nifti1Image(data, AFFINE), nib.Nifti1Image(data, np.eye(4)))
    with pytest.raises(ValueError, match="is an array"):
        flgp.group_contrast(Y, nib.Nifti1Image(data, AFFINE), graph=graph)
    with pytest.raises(ValueError, match="identical"):
        fit_group(graph, np.repeat(Y[:, :1], 3, axis=1))
    with pytest.raises(ValueError, match="kappa2_group"):
        GroupPosterior(graph, Y.mean(axis=1), 4, GroupParameters(
            nu_group=2, kappa2_group=-1.0, amplitude_group=1.0, level=0.0, nu_subject=1,
            kappa2_subject=1.0, amplitude_subject=1.0, noise=1.0))
    with pytest.raises(ValueError, match="n_samples"):
        GroupPosterior(graph, Y.mean(axis=1), 4, PARAMS).draws(0)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="block_size"):
            GroupPosterior(graph, Y.mean(axis=1), 4, PARAMS).draws(10, block_size=bad)


def test_subjects_of_very_different_noise_warn(lattice):
    graph, Y = lattice
    noisy = Y.copy()
    noisy[:, 0] += 5.0 * np.random.default_rng(0).standard_normal(graph.n_nodes)
    with pytest.warns(UserWarning, match="one noise variance"):
        fit_group(graph, noisy, nus=(1,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_group(graph, Y, nus=(1,))


def test_large_graphs_search_on_a_ball_and_profile_the_level_on_the_whole(lattice):
    """Past ``2 search_max_nodes`` nodes the hyperparameters come from a ball; the level
    and the posterior from the whole graph."""
    from dataclasses import replace

    graph, Y = lattice
    post, record = fit_group(graph, Y, nus=(2,), search_max_nodes=40)
    assert record["searched_nodes"] < graph.n_nodes
    p = post.parameters
    assert record["log_likelihood"] == pytest.approx(group_log_likelihood(graph, Y, p),
                                                     rel=1e-10)
    for shift in (-0.05, 0.05):
        assert GroupPosterior(graph, Y.mean(axis=1), 4, replace(
            p, level=p.level + shift)).log_likelihood < post.log_likelihood
    # the group prior's (κ_g, A_g) polished on the whole graph: the mean map's likelihood
    # there is at a local maximum in both (the polish's tolerance, 0.05 nats)
    for name, factor in (("kappa2_group", 1.5), ("amplitude_group", 1.5)):
        for f in (factor, 1.0 / factor):
            moved = replace(p, **{name: getattr(p, name) * f})
            assert GroupPosterior(graph, Y.mean(axis=1), 4, moved).log_likelihood < (
                post.log_likelihood + 0.05)
    assert record["n_evaluations_whole_graph"] > 0


def test_effects_outside_the_search_ball_are_not_shrunk_away():
    """A group map whose effect lies away from the ball the search sees: the whole-graph
    polish fits the group prior to the whole mean map - a higher likelihood than the
    ball's hyperparameters give, and a posterior nearer the truth at the effect."""
    graph = lattice_graph(np.argwhere(np.ones((30, 10, 3), bool)), AFFINE)
    X = graph.points
    g = 2.0 * np.exp(-((X - X[np.argmax(X[:, 0])]) ** 2).sum(1) / (2 * 6.0 ** 2))
    rng = np.random.default_rng(3)
    Y = g[:, None] + 0.3 * rng.standard_normal((graph.n_nodes, 6))
    post, record = fit_group(graph, Y, nus=(2,), search_max_nodes=300)
    assert record["searched_nodes"] <= 300 and record["n_evaluations_whole_graph"] > 0
    # the ball's own hyperparameters, on the whole graph
    length, mass = graph.own_units()
    sub, _, sub_maps = group_module.search_subgraph(graph.in_units(length, mass),
                                                    np.arange(graph.n_nodes), Y, 300)
    ball_params = group_module._fit_own_units(sub, sub_maps, (2,), (2,))[0].in_units(
        1.0 / length, 1.0 / mass)
    from dataclasses import replace
    ball = GroupPosterior(graph, Y.mean(axis=1), 6, replace(ball_params, level=None))
    assert post.log_likelihood > ball.log_likelihood + 1.0
    peak = g > 1.0
    error = np.abs(post.mean[peak] - g[peak]).mean()
    assert error < 0.5 * np.abs(ball.mean[peak] - g[peak]).mean()
    # about where a search of the whole graph itself lands
    whole, _ = fit_group(graph, Y, nus=(2,))
    assert post.log_likelihood > whole.log_likelihood - 1.0
    assert error < np.abs(whole.mean[peak] - g[peak]).mean() + 0.05


def test_cli_group_writes_the_api_maps_and_excursion_set(lattice, tmp_path, capsys):
    """``flgp group``: the mean and sd images and, with --excursion, F and the set - the
    same as group_map / group_contrast with the same seed; 3-d files or one 4-d file."""
    nib = pytest.importorskip("nibabel")
    from flgp.cli import main

    graph, Y = lattice
    data = Y.reshape(6, 6, 3, 4).astype(np.float32)
    four_d = tmp_path / "maps.nii.gz"
    nib.Nifti1Image(data, AFFINE).to_filename(four_d)
    u = float(np.quantile(Y.mean(axis=1), 0.7))
    rc = main(["group", str(four_d), "--out", str(tmp_path / "g"), "--excursion", str(u)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "MAPS: 4 subjects on 108 voxels" in out and f"above {u:g} at alpha 0.05" in out
    ref = flgp.group_map(nib.load(four_d), random_state=0)
    mean = nib.load(tmp_path / "g_mean.nii.gz").get_fdata()
    sd = nib.load(tmp_path / "g_sd.nii.gz").get_fdata()
    np.testing.assert_allclose(mean, ref.mean.get_fdata(), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sd, ref.std.get_fdata(), rtol=1e-6, atol=1e-8)
    found = ref.excursion_set(u, 0.05, random_state=0)
    inside = nib.load(tmp_path / "g_excursion_set.nii.gz").get_fdata()
    np.testing.assert_array_equal(inside.ravel().astype(bool), found.mask)
    F = nib.load(tmp_path / "g_excursion_F.nii.gz").get_fdata().ravel()
    np.testing.assert_allclose(F, np.nan_to_num(found.function.F, nan=0.0), atol=1e-6)
    assert (tmp_path / "g_excursion.png").stat().st_size > 0
    # two groups as 3-d files: the contrast
    paths = []
    for s in range(4):
        paths.append(tmp_path / f"s{s}.nii.gz")
        nib.Nifti1Image(data[..., s], AFFINE).to_filename(paths[-1])
    rc = main(["group", *map(str, paths[:2]), "--minus", *map(str, paths[2:]),
               "--out", str(tmp_path / "c")])
    assert rc == 0
    assert "--minus: 2 subjects" in capsys.readouterr().out
    contrast = flgp.group_contrast([nib.load(p) for p in paths[:2]],
                                   [nib.load(p) for p in paths[2:]], random_state=0)
    np.testing.assert_allclose(nib.load(tmp_path / "c_mean.nii.gz").get_fdata(),
                               contrast.mean.get_fdata(), rtol=1e-6, atol=1e-8)
    # a missing file: one line on stderr, exit status 2
    assert main(["group", str(tmp_path / "none.nii.gz"), "--out", str(tmp_path / "x")]) == 2
    assert "no such file" in capsys.readouterr().err
