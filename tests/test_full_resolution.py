"""The full-resolution prior in the estimators: FLGPRegressor(GraphMaternPrior()), the
evidence choice among several priors, predict_surface and the surface command line."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

from flgp import (Eigenbasis, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior,
                  predict_surface)
from flgp.graph import lattice_graph
from flgp.precision import MaternRegression, matern_precision


def _box_map(shape=(12, 12, 6), frac=0.3, seed=0, noise=0.02):
    ijk = np.argwhere(np.ones(shape, bool))
    x = ijk.astype(float)
    truth = np.sin(x[:, 0] / 3.0) + np.cos(x[:, 1] / 4.0) + 0.2 * x[:, 2]
    rng = np.random.default_rng(seed)
    obs = np.zeros(len(x), bool)
    obs[rng.choice(len(x), int(frac * len(x)), replace=False)] = True
    y = truth + noise * rng.standard_normal(len(x))
    return ijk, x, truth, np.where(obs, y, np.nan), obs


def _flat_mesh(k=20, size=50.0):
    g = np.linspace(0, 1, k)
    xx, yy = np.meshgrid(g, g)
    V = np.c_[xx.ravel(), yy.ravel(), np.zeros(k * k)] * size
    idx = np.arange(k * k).reshape(k, k)
    a, b, c, d = (idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(),
                  idx[1:, 1:].ravel())
    return V, np.r_[np.c_[a, b, c], np.c_[b, d, c]]


def test_graph_matern_regressor_is_the_dense_posterior_at_its_hyperparameters():
    """At the reported values - outputscale_ and noise_ in units of y², the prior
    outputscale_ Q_ν(κ)⁻¹ with Q_ν built on the graph as given at κ = matern_kappa_ -
    transduction_ is the dense posterior mean, log_marginal_likelihood_ the dense
    evidence in the units of y, the sd the dense posterior sd within the RBMC estimator's
    error; the evidence's own optimum (log_evidence_, evidence_outputscale_) is the
    dense evidence at the amplitude and noise divided by the cross-validated scale, which
    is generalised cross-validation's amplitude."""
    # (a draw on which the cross-validated scale is not 1: on most, at the evidence's
    # optimum, it is within 1 %)
    ijk, x, truth, y, obs = _box_map((7, 6, 5), seed=2)
    g = lattice_graph(ijk)
    reg = FLGPRegressor(GraphMaternPrior(graph=g)).fit(x, y)
    assert reg.method_ == "graph_matern" and reg.matern_order_ in (1, 2, 3, 4)
    z_mean = np.nanmean(y)
    lab = np.flatnonzero(obs)
    Q = matern_precision(g, reg.matern_kappa_ ** 2, reg.matern_order_).toarray()
    K = np.linalg.inv(Q)

    def dense(amplitude, noise):
        Sigma = amplitude * K
        S = Sigma[np.ix_(lab, lab)] + noise * np.eye(lab.size)
        r = y[lab] - z_mean
        ev = -0.5 * (lab.size * np.log(2 * np.pi) + np.linalg.slogdet(S)[1]
                     + r @ np.linalg.solve(S, r))
        return Sigma, S, ev

    Sigma, S, ev = dense(reg.outputscale_, reg.noise_)
    mean = Sigma[:, lab] @ np.linalg.solve(S, y[lab] - z_mean)
    np.testing.assert_allclose(reg.transduction_, z_mean + mean, atol=1e-8)
    assert reg.log_marginal_likelihood_ == pytest.approx(ev, abs=1e-6)
    c = reg.amplitude_cv_scale_
    assert abs(c - 1.0) > 0.02                   # (a scale that matters here)
    assert reg.evidence_outputscale_ == pytest.approx(reg.outputscale_ / c, rel=1e-12)
    _, S1, ev1 = dense(reg.outputscale_ / c, reg.noise_ / c)
    best = reg.matern_log_evidence_[reg.matern_order_]
    assert best == pytest.approx(ev1, abs=1e-6)
    assert reg.log_marginal_likelihood_ < best
    # generalised cross-validation's amplitude, ‖S₁⁻¹r‖² / tr S₁⁻¹ for the evidence's
    # S₁: from the Monte Carlo variances, or (where their error would leave it known to
    # worse than 1 %) from the exact sum of the observed nodes' variances
    S1i = np.linalg.inv(S1)
    assert c == pytest.approx(np.sum((S1i @ (y[lab] - z_mean)) ** 2) / np.trace(S1i),
                              rel=0.01)
    post = Sigma - Sigma[:, lab] @ np.linalg.solve(S, Sigma[lab])
    sd = np.sqrt(np.diag(post))
    err = np.abs(reg.transduction_std_ - sd) / reg.transduction_std_error_
    assert np.median(err) < 2.0 and err.max() < 6.0
    # new points: exact at the nodes, between nodes a blend of the nearest nodes
    np.testing.assert_allclose(reg.predict(x[:20]), reg.transduction_[:20], atol=1e-6)
    lo, hi = reg.predict_interval(x[:20], 0.9)
    assert np.all(lo < reg.transduction_[:20]) and np.all(hi > reg.transduction_[:20])


def test_auto_weighs_three_priors_by_evidence_and_says_why():
    ijk, x, truth, y, obs = _box_map()
    reg = FLGPRegressor([HeatKernelPrior(), GraphMaternPrior(graph=lattice_graph(ijk)),
                         RBFPrior()]).fit(x, y)
    # each prior weighed, or left out with the reason (the heat kernel by its ceiling, the
    # graph Matérn prior by screening: its starting grid far below the RBF GP's evidence)
    assert set(reg.log_evidence_) | set(reg.skipped_methods_) == {"flgp", "graph_matern", "rbf"}
    assert "rbf" in reg.log_evidence_
    assert reg.method_ == max(reg.log_evidence_, key=reg.log_evidence_.get)
    why = reg.skipped_methods_["graph_matern"]
    assert why.startswith("screened out")
    # fitted alone, the graph Matérn prior indeed ends below the winner, and at or above
    # the coarse evidence the message gives
    alone = FLGPRegressor(GraphMaternPrior(lattice_graph(ijk))).fit(x, y)
    coarse = float(why.split("log evidence of ")[1].split(",")[0])
    assert coarse - 0.1 <= alone.log_marginal_likelihood_ < reg.log_evidence_["rbf"]
    assert reg.log_marginal_likelihood_ == pytest.approx(reg.log_evidence_[reg.method_])
    unobs = ~obs
    rmse = np.sqrt(np.mean((reg.transduction_[unobs] - truth[unobs]) ** 2))
    assert rmse < 0.05 * truth.std()
    # a cloud in more than 16 dimensions: the k-NN graph Matérn prior is left out, saying why
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 20))
    yy = np.where(np.arange(300) < 60, X[:, 0], np.nan)
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=60)), GraphMaternPrior(),
                         RBFPrior()]).fit(X, yy)
    assert "graph_matern" in reg.skipped_methods_ and "20 features" in reg.skipped_methods_["graph_matern"]


def test_a_heat_kernel_that_cannot_win_is_not_searched():
    """On the box map the heat kernel's evidence ceiling lies below the winner's evidence:
    the default does not search it, says so with both numbers, and the heat kernel fitted
    alone indeed stays below the ceiling and the winner."""
    import re

    ijk, x, truth, y, obs = _box_map()
    graph = lattice_graph(ijk)
    reg = FLGPRegressor([HeatKernelPrior(), GraphMaternPrior(graph), RBFPrior()]).fit(x, y)
    why = reg.skipped_methods_["flgp"]
    ceiling = float(re.search(r"cannot exceed (-?[0-9.]+)", why).group(1))
    best = reg.log_evidence_[reg.method_]
    assert ceiling < best and "flgp" not in reg.log_evidence_
    alone = FLGPRegressor(HeatKernelPrior()).fit(x, y)
    assert alone.log_marginal_likelihood_ <= ceiling + 0.1      # the message rounds to 0.1
    # with the heat kernel offered alone nothing is bounded away
    assert alone.method_ == "flgp"


def test_graph_matern_on_the_knn_graph_of_a_cloud():
    """No graph given: the k-NN graph of X; on a noisy curve the fit follows the curve."""
    from flgp.datasets import make_spiral

    X, y, f = make_spiral(1500, noise=0.3, random_state=0)
    rng = np.random.default_rng(0)
    semi = np.where(rng.random(1500) < 0.1, y, np.nan)
    reg = FLGPRegressor(GraphMaternPrior()).fit(X, semi)
    assert reg.graph_.kind == "knn" and reg.graph_.n_nodes == 1500
    assert np.sqrt(np.mean((reg.transduction_ - f) ** 2)) < 0.35
    with pytest.warns(UserWarning, match="farther than"):
        reg.predict(X[:3] + 100.0)


def test_a_numpy_integer_seed_seeds_the_variances():
    ijk, x, truth, y, obs = _box_map(shape=(8, 8, 4))
    prior = GraphMaternPrior(graph=lattice_graph(ijk))
    sds = {seed: FLGPRegressor(prior, random_state=seed).fit(x, y).transduction_std_
           for seed in (3, np.int64(3), 0)}
    np.testing.assert_array_equal(sds[3], sds[np.int64(3)])
    assert not np.array_equal(sds[3], sds[0])      # the seed reaches the Monte Carlo draws


def test_a_graph_that_falls_apart_gives_each_piece_its_prior_and_says_so():
    ijk = np.r_[np.argwhere(np.ones((5, 5, 3), bool)),
                np.argwhere(np.ones((4, 4, 2), bool)) + 20]
    g = lattice_graph(ijk)
    x = ijk.astype(float)
    y = np.full(len(x), np.nan)
    y[:40:3] = np.sin(x[:40:3, 0])                  # observations in the first piece only
    with pytest.warns(UserWarning, match="falls apart into 2 pieces"):
        reg = FLGPRegressor(GraphMaternPrior(graph=g)).fit(x, y)
    second = np.arange(75, len(x))
    assert np.all(np.isfinite(reg.transduction_)) and np.all(np.isfinite(reg.transduction_std_))
    # the prior there: the targets' mean, a sd larger than anywhere observed
    np.testing.assert_allclose(reg.transduction_[second], np.nanmean(y), atol=1e-6)
    assert reg.transduction_std_[second].min() > reg.transduction_std_[:75].max()


def test_graph_matern_bad_input():
    ijk, x, truth, y, obs = _box_map((5, 5, 3))
    with pytest.raises(ValueError, match="graph has 75 nodes but the cloud has 74 rows"):
        FLGPRegressor(GraphMaternPrior(lattice_graph(ijk))).fit(x[:-1], y[:-1])
    with pytest.raises(ValueError, match="method='graph_matern' is Gaussian only"):
        FLGPRegressor(GraphMaternPrior(), likelihood="poisson").fit(x, np.abs(np.round(y)))
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="'nu' parameter of GraphMaternPrior"):
        FLGPRegressor(GraphMaternPrior(nu=7)).fit(x, y)
    with pytest.raises(ValueError, match="one target"):
        MaternRegression(lattice_graph(ijk), np.array([0, 0]), np.array([1.0, 2.0]), 2)


# -- surfaces ---------------------------------------------------------------------------

def test_predict_surface_on_a_flat_mesh():
    V, F = _flat_mesh()
    values = np.sin(V[:, 0] / 10.0) + 0.01 * np.random.default_rng(0).standard_normal(400)
    res = predict_surface((V, F), values, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    assert res.regressor.graph_.kind == "mesh" and res.sd_kind == "latent"
    held = ~res.observed
    assert np.sqrt(np.mean((res.mean[held] - values[held]) ** 2)) < 0.1
    # a mask leaves vertices out: they get the fill value
    mask = V[:, 0] < 30.0
    part = predict_surface((V, F), values, 0.3, mask=mask, fill=np.nan)
    assert np.all(np.isnan(part.mean[~part.mask])) and np.all(np.isfinite(part.mean[part.mask]))
    with pytest.raises(ValueError, match="one value per vertex"):
        predict_surface((V, F), values[:-1], 0.3)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        predict_surface((V, F), values, 1.5)
    # counts have no Gaussian noise to add to a new observation's sd
    with pytest.raises(ValueError, match="include_noise=True.*poisson"):
        predict_surface((V, F), np.round(np.exp(values)), 0.3, include_noise=True,
                        regressor=FLGPRegressor(likelihood="poisson"))


def test_an_observed_vertex_on_no_face_of_the_region_is_left_out_and_said_so():
    V, F = _flat_mesh()
    values = np.sin(V[:, 0] / 10.0)
    mask = np.ones(400, bool)
    ring = (np.arange(9, 12)[:, None] * 20 + np.arange(9, 12)[None, :]).ravel()
    mask[ring[ring != 210]] = False                     # vertex 210 keeps no whole face
    observed = np.zeros(400, bool)
    observed[::7] = True
    observed &= mask
    observed[210] = True
    with pytest.warns(UserWarning, match="1 of them observed, their values unused"):
        res = predict_surface((V, F), values, observed, mask=mask, fill=np.nan)
    assert not res.mask[210] and np.isnan(res.mean[210]) and not res.observed[210]
    assert res.n_observed == int(observed.sum()) - 1


def test_predict_surface_on_a_surface_image_fits_each_part_alone():
    from nilearn.surface import InMemoryMesh, PolyMesh, SurfaceImage

    V, F = _flat_mesh()
    values = np.sin(V[:, 0] / 10.0) + 0.01 * np.random.default_rng(0).standard_normal(400)
    mesh = PolyMesh(left=InMemoryMesh(V, F), right=InMemoryMesh(V + 100.0, F))
    image = SurfaceImage(mesh=mesh, data={"left": values, "right": -values})
    res = predict_surface(None, image, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    assert isinstance(res.mean, SurfaceImage) and set(res.parts) == {"left", "right"}
    assert res.n_observed == sum(int(r.observed.sum()) for r in res.parts.values()) == 240
    for part, sign in (("left", 1.0), ("right", -1.0)):
        alone = res.parts[part]
        np.testing.assert_array_equal(np.asarray(res.mean.data.parts[part]), alone.mean)
        np.testing.assert_array_equal(res.observed[part], alone.observed)
        held = ~alone.observed
        assert np.sqrt(np.mean((alone.mean[held] - sign * values[held]) ** 2)) < 0.1
    assert res.regressor is res.parts["left"].regressor


def test_surface_command_writes_gifti(tmp_path):
    nib = pytest.importorskip("nibabel")
    V, F = _flat_mesh()
    mesh = nib.gifti.GiftiImage(darrays=[
        nib.gifti.GiftiDataArray(V.astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
        nib.gifti.GiftiDataArray(F.astype(np.int32), intent="NIFTI_INTENT_TRIANGLE")])
    nib.save(mesh, tmp_path / "flat.surf.gii")

    def surface(values, name, out):
        """``flgp surface`` of the flat mesh and ``values`` (None: no such file)."""
        if values is not None:
            nib.save(nib.gifti.GiftiImage(darrays=[nib.gifti.GiftiDataArray(values)]),
                     tmp_path / name)
        return subprocess.run([sys.executable, "-m", "flgp.cli", "surface",
                               str(tmp_path / "flat.surf.gii"), str(tmp_path / name),
                               "--observed-fraction", "0.3", "--out", str(tmp_path / out)],
                              capture_output=True, text=True)

    values = np.sin(V[:, 0] / 10.0).astype(np.float32)
    run = surface(values, "map.func.gii", "pred")
    assert run.returncode == 0, run.stderr
    assert "log evidence of the candidates" in run.stdout
    assert "outside the region" not in run.stderr          # every vertex has a value
    mean = nib.load(tmp_path / "pred_mean.func.gii").darrays[0].data
    assert mean.shape == (400,) and np.sqrt(np.mean((mean - values) ** 2)) < 0.1
    bad = surface(None, "nope.gii", "x")
    assert bad.returncode == 2 and "no such file" in bad.stderr
    assert "Traceback" not in bad.stderr
    # a vertex without a finite value is outside the region: written as --fill, said so
    values[7] = np.nan
    holed = surface(values, "holed.func.gii", "h")
    assert holed.returncode == 0, holed.stderr
    assert "note: 1 vertices outside the region" in holed.stderr
    assert nib.load(tmp_path / "h_sd.func.gii").darrays[0].data[7] == 0.0


def test_predict_surface_on_fsaverage5_thickness():
    datasets = pytest.importorskip("nilearn.datasets")
    mesh = datasets.load_fsaverage("fsaverage5")["pial"].parts["left"]
    img = datasets.load_fsaverage_data("fsaverage5", mesh_type="pial", data_type="thickness")
    y = np.asarray(img.data.parts["left"], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # 4 stray vertices of the mask
        res = predict_surface(mesh, y, 0.1, mask=y > 0, random_state=0)
    held = res.mask & ~res.observed
    tmse = np.sort((res.mean[held] - y[held]) ** 2)
    assert np.mean(tmse[:int(0.99 * tmse.size)]) < 0.06      # the RBF GP alone: 0.060


def test_cross_validated_amplitude_scales_the_intervals_not_the_mean(monkeypatch):
    """The cross-validated scale multiplies the posterior variances, the noise and the
    outputscale alike (their ratio, the mean and the evidence's optimum stay those of the
    search, the evidence at the reported values moves by its closed form); a fixed noise
    leaves it at 1."""
    import flgp.models.graph_matern as GM

    ijk, x, truth, y, obs = _box_map()
    g = lattice_graph(ijk)
    # at the evidence's optimum in the noise, generalised cross-validation's amplitude is
    # the evidence's (the optimum's stationarity condition), so the scale is ~1 on a graph
    # searched whole: here the cross-validated amplitude is made 1.3 times GCV's
    gcv = GM.cross_validated_amplitude
    monkeypatch.setattr(GM, "cross_validated_amplitude",
                        lambda *args, **kw: 1.3 * gcv(*args, **kw))
    reg = FLGPRegressor(GraphMaternPrior(g)).fit(x, y)
    c = reg.amplitude_cv_scale_
    monkeypatch.setattr(GM, "cross_validated_amplitude", lambda *args, **kw: None)
    plain = FLGPRegressor(GraphMaternPrior(g)).fit(x, y)
    assert plain.amplitude_cv_scale_ == 1.0 and abs(c - 1.3) < 0.02
    # two searches: equal to their run-to-run variation (the largest eigenvalue's Arnoldi
    # start; about 1e-7 relative), far below the scale's departure from 1
    np.testing.assert_allclose(reg.transduction_, plain.transduction_, rtol=1e-6)
    np.testing.assert_allclose(reg.transduction_std_ ** 2, c * plain.transduction_std_ ** 2,
                               rtol=1e-5)
    assert reg.noise_ == pytest.approx(c * plain.noise_, rel=1e-5)
    assert reg.outputscale_ == pytest.approx(c * plain.outputscale_, rel=1e-5)
    assert reg.evidence_outputscale_ == pytest.approx(plain.outputscale_, rel=1e-5)
    # the evidence at the reported values: the optimum less m/2 (log c + 1/c - 1)
    m = np.count_nonzero(~np.isnan(y))
    assert reg.matern_log_evidence_[reg.matern_order_] == pytest.approx(
        plain.log_marginal_likelihood_, rel=1e-6)
    assert reg.log_marginal_likelihood_ == pytest.approx(
        plain.log_marginal_likelihood_ - 0.5 * m * (np.log(c) + 1 / c - 1), rel=1e-6)
    lo, hi = reg.predict_interval(x[:5], 0.9)
    plo, phi = plain.predict_interval(x[:5], 0.9)
    np.testing.assert_allclose(hi - lo, np.sqrt(c) * (phi - plo), rtol=1e-5)
    # a cross-validated amplitude a hundred times the evidence's is not trusted
    monkeypatch.setattr(GM, "cross_validated_amplitude",
                        lambda z, mean, ratio, v, se: 100.0 * float(np.sum((z - mean) ** 2))
                        / max(z.size * ratio - float(np.sum(v)), 1e-300) * 1e3)
    assert FLGPRegressor(GraphMaternPrior(g)).fit(x, y).amplitude_cv_scale_ == 1.0
    monkeypatch.undo()
    fixed = FLGPRegressor(GraphMaternPrior(g), noise=4e-4).fit(x, y)
    assert fixed.amplitude_cv_scale_ == 1.0 and fixed.noise_ == pytest.approx(4e-4)
