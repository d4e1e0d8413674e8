"""Many maps on one graph (flgp.precision.maps): each map's fit against a dense reference,
the lattice rounding, the sharing of the whole graph's work, and the path through
predict_image."""

import numpy as np
import pytest

from flgp.graph.lattice import lattice_graph
from flgp.precision import gaussian
from flgp.precision.gaussian import (LINE_MAX_EVALUATIONS, LINE_TOLERANCE,
                                     LINE_VALUE_TOLERANCE, MaternRegression,
                                     fit_matern, precomputed_fits, precomputed_key,
                                     search_matern, search_subgraph)
from flgp.precision.maps import SNAP_STEP, fit_matern_maps, unit_variances, whole_graph_fits
from flgp.precision.matern import matern_precision

BALL = 150


def _study(n_maps=3, seed=0):
    i, j, k = np.indices((12, 10, 6))
    ijk = np.c_[i.ravel(), j.ravel(), k.ravel()]
    graph = lattice_graph(ijk, np.diag([2.0, 2.0, 2.0, 1.0]))
    rng = np.random.default_rng(seed)
    observed = np.sort(rng.choice(graph.n_nodes, graph.n_nodes // 3, replace=False))
    x = ijk.astype(float)
    cols = [np.sin(x[:, 0] / (2 + c)) + np.cos(x[:, 1] / (3 + c)) + 0.3 * x[:, 2] / (1 + c)
            for c in range(n_maps)]
    Y = np.column_stack(cols)[observed] + 0.1 * rng.standard_normal((observed.size, n_maps))
    Z = (Y - Y.mean(0)) / Y.std(0)
    return graph, observed, Z


def _dense(graph_own, observed, z, nu, kappa2, ratio):
    """The log evidence (amplitude profiled) and posterior mean from dense matrices."""
    Q = matern_precision(graph_own, kappa2, nu).toarray()
    cov = np.linalg.inv(Q)
    S = cov[np.ix_(observed, observed)] + ratio * np.eye(observed.size)
    alpha = np.linalg.solve(S, z)
    m = observed.size
    A = z @ alpha / m
    logdet = np.linalg.slogdet(S)[1]
    log_ev = -0.5 * m * (np.log(2 * np.pi * A) + 1.0) - 0.5 * logdet
    Qt = Q.copy()
    Qt[observed, observed] += 1.0 / ratio
    return log_ev, cov[:, observed] @ alpha, A * np.diag(np.linalg.inv(Qt))


def test_each_map_equals_the_dense_reference_at_its_lattice_point():
    graph, observed, Z = _study()
    fits = fit_matern_maps(graph, observed, Z, (1, 2), search_max_nodes=BALL)
    own = graph.in_own_units()
    for j, (best, reg, by_order) in enumerate(fits):
        assert best.log_evidence == max(f.log_evidence for f in by_order.values())
        sub, sub_obs, sub_z = search_subgraph(own, observed, Z[:, j], BALL)
        _, _, local = search_matern(sub, sub_obs, sub_z, (1, 2), lattice=SNAP_STEP)
        for nu, fit in by_order.items():
            log_ev, mean, _ = _dense(own, observed, Z[:, j], fit.nu, fit.kappa2, fit.ratio)
            assert fit.log_evidence == pytest.approx(log_ev, rel=1e-8, abs=1e-6)
            np.testing.assert_allclose(fit.mean, mean, rtol=1e-7, atol=1e-9)
            # at its own search's optimum on the ball (up to the search's tolerance: the
            # maps' evaluations came from solves of several right-hand sides), a point of
            # the lattice in log κ² and log r̃ (r = r̃ v̄(κ))
            reach = SNAP_STEP + LINE_TOLERANCE
            assert abs(np.log(fit.kappa2 / local[nu].kappa2)) <= reach
            assert abs(np.log(fit.ratio / local[nu].ratio)) <= reach
            # (or on a bound of the search)
            ranges = gaussian.matern_search_ranges(sub)
            log_top = np.log(gaussian.largest_eigenvalue(sub))
            u = np.log(fit.kappa2)
            v = np.log(fit.ratio / MaternRegression(sub, sub_obs, sub_z, nu)
                       .prior_variance(fit.kappa2))
            for x, ends in ((u, (gaussian._lowest_log_kappa2(nu, ranges, log_top),
                                 ranges["log_kappa2"][1])), (v, ranges["log_ratio"])):
                assert (abs(x / SNAP_STEP - round(x / SNAP_STEP)) < 1e-9
                        or min(abs(x - e) for e in ends) < 1e-9)
        # the variances: the Monte Carlo estimate against the dense diagonal
        var, se = reg.variances(best, n_samples=64, random_state=0)
        _, _, exact = _dense(own, observed, Z[:, j], best.nu, best.kappa2, best.ratio)
        assert np.mean(np.abs(var - exact) <= 3 * se + 1e-12) > 0.95
        assert np.mean(np.abs(var - exact) / exact) < 0.1
        # ... and the one estimator fit_matern's regression would use at that point
        alone = MaternRegression(own, observed, Z[:, j], best.nu)
        at = alone.evaluate(best.kappa2, best.ratio)
        np.testing.assert_allclose(var, alone.variances(at, 64, 0)[0], rtol=1e-9)
        assert best.length_unit == pytest.approx(graph.own_units()[0])
        with pytest.raises(ValueError, match="n_samples=64"):
            reg.variances(best, n_samples=32, random_state=0)


def test_maps_that_round_alike_share_one_factorisation():
    graph, observed, Z = _study(n_maps=2)
    Z = np.column_stack([Z[:, 0], Z[:, 0], Z[:, 1]])        # the first two are one map
    calls = []

    def run(fn, tasks):
        calls.append((fn.__name__, tasks))
        return [fn(*args) for args in tasks]

    fits = fit_matern_maps(graph, observed, Z, (1, 2), search_max_nodes=BALL, run=run)
    assert [name for name, _ in calls] == ["ball_searches", "whole_graph_fits",
                                          "unit_variances"]
    assert len(calls[0][1]) == 1
    # one task an order, each lattice point in one of them, once
    points = {(f.nu, f.kappa2, f.ratio) for fit in fits for f in fit[2].values()}
    asked = [(task[3],) + point[:2] for task in calls[1][1] for point in task[4]]
    assert len(calls[1][1]) == len({nu for nu, _, _ in asked})
    assert sorted(asked) == sorted(points)
    assert len(asked) <= len(fits[0][2]) + len(fits[2][2])
    a, b = fits[0][0], fits[1][0]
    assert (a.nu, a.kappa2, a.ratio) == (b.nu, b.kappa2, b.ratio)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert a.log_evidence == b.log_evidence
    assert fits[0][1].unit_variance is fits[1][1].unit_variance
    # the variances from an evaluation's factor equal those from a factor of their own
    own = graph.in_own_units()
    [(fits_p, (var, se, total, sum_se))] = whole_graph_fits(own, observed, Z, a.nu, [
        (a.kappa2, a.ratio, [0], 16, 3)])
    [alone] = unit_variances(own, observed, a.nu, [(a.kappa2, a.ratio, 16, 3)])
    np.testing.assert_array_equal(var, alone[0])
    np.testing.assert_array_equal(se, alone[1])
    assert total == alone[2] and sum_se == alone[3]
    assert fits_p[0].log_evidence == pytest.approx(a.log_evidence, rel=1e-9)
    # the observed sum is the single-map regression's (Monte Carlo, or exact where its
    # error would leave the cross-validated amplitude's denominator loose)
    single = MaternRegression(own, observed, Z[:, 0], a.nu)
    single.variances(fits_p[0], 16, 3)
    assert (single.observed_sum, single.observed_sum_se) == (total, sum_se)
    [shared] = unit_variances(own, observed, a.nu, [(a.kappa2, a.ratio, 64, 0)])  # defaults
    assert (fits[0][1].observed_sum, fits[0][1].observed_sum_se) == shared[2:]


def test_fit_matern_returns_a_precomputed_fit_only_for_its_targets_and_the_default_search():
    graph, observed, Z = _study(n_maps=2)
    (entry,) = [fit_matern_maps(graph, observed, Z[:, :1], (1, 2), search_max_nodes=BALL)[0]]
    key = precomputed_key(graph, observed, Z[:, 0], (1, 2))
    with precomputed_fits({key: entry}):
        best, reg, by_order = fit_matern(graph, observed, Z[:, 0], nus=(1, 2))
        assert best is entry[0] and reg is entry[1] and by_order is entry[2]
        elsewhere, _, _ = fit_matern(graph.in_units(2.0, 1.0), observed, Z[:, 0], nus=(1, 2),
                                     search_max_nodes=BALL)
        assert elsewhere is not entry[0]                 # another graph's weights
        other, _, _ = fit_matern(graph, observed, Z[:, 1], nus=(1, 2), search_max_nodes=BALL)
        assert other is not entry[0]
        fixed, _, _ = fit_matern(graph, observed, Z[:, 0], nus=(1, 2), noise=0.1,
                               search_max_nodes=BALL)
        assert fixed is not entry[0]
    searched, _, _ = fit_matern(graph, observed, Z[:, 0], nus=(1, 2), search_max_nodes=BALL)
    assert searched is not entry[0]


def test_bad_input_is_named():
    graph, observed, Z = _study(n_maps=1)
    with pytest.raises(ValueError, match="one column a map"):
        fit_matern_maps(graph, observed, Z[:, 0], search_max_nodes=BALL)
    bad = Z.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        fit_matern_maps(graph, observed, bad, search_max_nodes=BALL)
    for wrong in (np.r_[observed[:-1], graph.n_nodes], np.r_[observed[:-1], observed[0]]):
        with pytest.raises(ValueError, match="distinct node indices"):
            fit_matern_maps(graph, wrong, Z, search_max_nodes=BALL)
    with pytest.raises(ValueError, match="Fit each map with fit_matern"):
        fit_matern_maps(graph, observed, Z)                  # 720 nodes: no ball
    assert gaussian.on_lattice(0.31, -1.0, 1.0, 0.2) == pytest.approx(0.4)
    assert gaussian.on_lattice(-0.29, -1.0, 1.0, 0.2) == pytest.approx(-0.2)
    # near a bound, the bound; beyond it, clipped
    assert gaussian.on_lattice(-0.97, -0.99, 1.0, 0.2) == pytest.approx(-0.99)
    assert gaussian.on_lattice(-0.93, -0.99, 1.0, 0.2) == pytest.approx(-0.99)
    assert gaussian.on_lattice(-0.87, -0.99, 1.0, 0.2) == pytest.approx(-0.8)
    assert gaussian.on_lattice(5.0, -1.0, 0.95, 0.2) == pytest.approx(0.95)


def test_predict_image_shares_the_searches_of_several_maps(monkeypatch):
    nib = pytest.importorskip("nibabel")
    from flgp import FLGPRegressor, GraphMaternPrior, predict_image
    from flgp.models import image as image_module

    graph, observed, Z = _study(n_maps=3)
    i, j, k = np.indices((12, 10, 6))
    data = np.zeros((12, 10, 6, 3))
    rng = np.random.default_rng(1)
    for c in range(3):
        data[..., c] = (np.sin(i / (2 + c)) + np.cos(j / (3 + c)) + 0.3 * k / (1 + c)
                        + 0.1 * rng.standard_normal(i.shape))
    img = nib.Nifti1Image(data.astype(np.float32), np.diag([2.0, 2.0, 2.0, 1.0]))
    region = np.ones((12, 10, 6), bool)
    monkeypatch.setattr(gaussian, "SEARCH_MAX_NODES", BALL)
    used = []
    real = image_module._shared_searches

    def spy(*args):
        out = real(*args)
        used.append(out)
        return out

    monkeypatch.setattr(image_module, "_shared_searches", spy)
    # the graph Matérn prior alone: on 720 voxels the RBF GP would be weighed too
    reg = FLGPRegressor(GraphMaternPrior())
    res = predict_image(img, region, 0.3, regressor=reg, n_jobs=1)
    assert len(used) == 1 and all(e is not None for e in used[0])
    values = np.asarray(img.get_fdata())[region]
    obs = np.flatnonzero(res.observed)
    mean = res.mean.get_fdata()[region]
    for c, entry in enumerate(used[0]):
        (best, _, by_order), = entry.values()
        y = values[obs, c]
        # the map's posterior mean is the precomputed fit's, in the map's units
        np.testing.assert_allclose(mean[:, c], (y.mean() + y.std() * best.mean)
                                   .astype(np.float32), rtol=1e-5, atol=1e-5)
        row = res.maps[c]
        assert row["method"] == "graph_matern" and row["order"] == best.nu
        assert row["kappa"] == pytest.approx(best.kappa)
        # the evidence at the reported (cross-validated) amplitude and noise
        cv = res.regressor[c].amplitude_cv_scale_
        assert row["log_evidence"] == pytest.approx(
            best.log_evidence - obs.size * np.log(y.std())
            - 0.5 * obs.size * (np.log(cv) + 1.0 / cv - 1.0))
    again = predict_image(img, region, 0.3, regressor=reg, n_jobs=2)
    np.testing.assert_array_equal(again.mean.get_fdata(), res.mean.get_fdata())
    np.testing.assert_array_equal(again.sd.get_fdata(), res.sd.get_fdata())



def test_fits_of_one_cloud_share_the_heat_kernels_eigenpairs(monkeypatch):
    from flgp import Eigenbasis, FLGPRegressor, HeatKernelPrior
    from flgp.models import eigenbasis

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 2))
    ys = [np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(300) for _ in range(2)]
    for y in ys:
        y[rng.choice(300, 200, replace=False)] = np.nan
    alone = [FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=60, n_eigenpairs=20))).fit(X, y)
             for y in ys]
    made = []
    real = eigenbasis.eigenpair_candidates

    def spy(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(eigenbasis, "eigenpair_candidates", spy)
    store = {}
    with eigenbasis.shared_candidates(store):
        shared = [FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=60, n_eigenpairs=20))).fit(X, y)
                  for y in ys]
    assert len(made) == 1                                  # computed once
    for a, b in zip(alone, shared):
        np.testing.assert_array_equal(a.transduction_, b.transduction_)
        np.testing.assert_array_equal(a.transduction_std_, b.transduction_std_)
    # other settings: computed again
    with eigenbasis.shared_candidates(store):
        FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=50, n_eigenpairs=20))).fit(X, ys[0])
    assert len(made) == 2


def test_searches_in_step_go_as_each_alone_and_share_their_common_points(monkeypatch):
    from flgp.precision import maps

    graph, observed, Z = _study(n_maps=3)
    own = graph.in_own_units()
    sub, sub_obs, sub_Z = search_subgraph(own, observed, Z, BALL)
    calls = {"evaluate_each": 0, "evaluate": 0}
    for name in calls:
        def spy(self, *args, _real=getattr(MaternRegression, name), _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(MaternRegression, name, spy)
    found = maps.ball_searches(own, observed, Z, (2, 1), BALL)
    for j in range(3):
        best, reg, local = search_matern(sub, sub_obs, sub_Z[:, j], (2, 1),
                                       lattice=SNAP_STEP)
        points, evaluations, optima = found[j]
        assert set(optima) <= set(local)
        # the same search, up to its tolerances (evaluations from a solve of several
        # right-hand sides differ from a map's own in rounding only)
        reach = SNAP_STEP + LINE_TOLERANCE
        for nu, (kappa2, ratio, log_ev) in optima.items():
            assert abs(np.log(kappa2 / local[nu].kappa2)) <= reach
            assert abs(np.log(ratio / local[nu].ratio)) <= reach
            assert log_ev == pytest.approx(local[nu].log_evidence, abs=LINE_VALUE_TOLERANCE)
            assert points[nu][2:] == (kappa2, ratio)
        assert abs(evaluations - reg.n_evaluations) <= LINE_MAX_EVALUATIONS
    # every map starts from the same grid: those points are factored once for all
    assert calls["evaluate_each"] <= calls["evaluate"] - 2 * 9
    # the groups do not change the fits
    one = fit_matern_maps(graph, observed, Z, (2, 1), search_max_nodes=BALL)
    three = fit_matern_maps(graph, observed, Z, (2, 1), search_max_nodes=BALL, n_groups=3)
    for a, b in zip(one, three):
        assert a[0].nu == b[0].nu
        assert abs(np.log(a[0].kappa2 / b[0].kappa2)) <= SNAP_STEP + LINE_TOLERANCE
        assert a[0].log_evidence == pytest.approx(b[0].log_evidence,
                                                  abs=LINE_VALUE_TOLERANCE)


def test_a_search_alone_on_the_lattice_asks_only_lattice_points():
    graph, observed, Z = _study(n_maps=1)
    own = graph.in_own_units()
    sub, sub_obs, sub_z = search_subgraph(own, observed, Z[:, 0], BALL)
    asked = []
    from flgp.precision.gaussian import drive, search_steps

    def evaluate(nu, u, v):
        asked.append((u, v))
        reg = MaternRegression(sub, sub_obs, sub_z, nu)
        k2 = float(np.exp(u))
        return reg.evaluate(k2, float(np.exp(v)) * reg.prior_variance(k2))

    local, _ = drive(search_steps(sub, (2,), lattice=SNAP_STEP), evaluate)
    assert len(asked) == len(set(asked)) > 9
    ranges = gaussian.matern_search_ranges(sub)
    u_ends = (gaussian._lowest_log_kappa2(2, ranges, np.log(gaussian.largest_eigenvalue(sub))),
              ranges["log_kappa2"][1])
    for u, v in asked:
        for x, ends in ((u, u_ends), (v, ranges["log_ratio"])):
            assert ends[0] <= x <= ends[1]
            assert (abs(x / SNAP_STEP - round(x / SNAP_STEP)) < 1e-9
                    or min(abs(x - e) for e in ends) < 1e-9)
    with pytest.raises(ValueError, match="lattice must be a finite step > 0"):
        search_matern(sub, sub_obs, sub_z, (2,), lattice=0.0)
    # the same search off the lattice: its optimum within a step of the lattice's
    best, _, plain = search_matern(sub, sub_obs, sub_z, (2,))
    assert abs(np.log(plain[2].kappa2) - np.log(local[2].kappa2)) <= 2 * SNAP_STEP + \
        LINE_TOLERANCE
    assert local[2].log_evidence >= plain[2].log_evidence - 1.0


def test_each_point_is_solved_once_for_each_map_that_asks(monkeypatch):
    from flgp.precision import maps

    graph, observed, Z = _study(n_maps=6)
    own = graph.in_own_units()
    asked, solved = [], []
    real_lockstep, real_each = maps.lockstep, MaternRegression.evaluate_each

    def lockstep(steps, evaluate_many):
        def spy(point, which):
            asked.extend((point, j) for j in which)
            return evaluate_many(point, which)
        return real_lockstep(steps, spy)

    def each(self, kappa2, ratio, columns=None):
        solved.extend((self.nu, kappa2, ratio, j) for j in columns)
        return real_each(self, kappa2, ratio, columns)

    monkeypatch.setattr(maps, "lockstep", lockstep)
    monkeypatch.setattr(MaternRegression, "evaluate_each", each)
    found = maps.ball_searches(own, observed, Z, (2, 1), BALL)
    # several maps ask for some points (the shared start grid), in one round or later ...
    points = [p for p, _ in asked]
    assert len(points) > len(set(points))
    # ... and each point is solved once for each map that asks for it, for no other
    assert len(solved) == len(set(solved)) == len(set(asked))
    assert len({s[:3] for s in solved}) == len(set(points))
    # every map's evidences are those of its own fit at its optima
    sub, sub_obs, sub_Z = search_subgraph(own, observed, Z, BALL)
    for j, (points, _, optima) in enumerate(found):
        for nu, (kappa2, ratio, log_ev) in optima.items():
            alone = MaternRegression(sub, sub_obs, sub_Z[:, j], nu).evaluate(kappa2, ratio)
            assert log_ev == pytest.approx(alone.log_evidence, rel=1e-9, abs=1e-6)
