"""predict_image and `flgp nifti`: regression on the voxels of a NIfTI image, on small
synthetic images whose truth is known."""

import re

import numpy as np
import pytest

from flgp import (Eigenbasis, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior,
                  predict_image)
from flgp.cli import main
from flgp.models import ImagePrediction

nib = pytest.importorskip("nibabel")

SHAPE = (12, 11, 8)
# 2.5 mm voxels, a shear and an offset: world coordinates are not the indices
AFFINE = np.array([[-2.5, 0.3, 0.0, 40.0], [0.0, 2.5, 0.2, -30.0], [0.1, 0.0, 2.5, -10.0],
                   [0.0, 0.0, 0.0, 1.0]])


SMALL_HEAT = dict(eigenbasis=Eigenbasis(n_induced=120, n_eigenpairs=60))


def small_regressor(**kw):
    """Every representation weighed by evidence, a small heat kernel among them."""
    return FLGPRegressor([HeatKernelPrior(**SMALL_HEAT), GraphMaternPrior(), RBFPrior()], **kw)


def truth(xyz):
    """A smooth map of world coordinates (mm)."""
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    return 2.0 * np.sin(x / 7.0) + np.cos(y / 9.0) + z / 10.0


def world(ijk):
    return ijk @ AFFINE[:3, :3].T + AFFINE[:3, 3]


def synthetic(sform_code=4):
    """(image, region, data): the truth on the grid, an ellipsoid region (~400 voxels), NaN
    in a corner outside the region; sform code 4 (MNI)."""
    ijk = np.indices(SHAPE).transpose(1, 2, 3, 0).astype(float)
    data = truth(world(ijk))
    centre = (np.asarray(SHAPE) - 1) / 2.0
    region = (((ijk - centre) / (np.asarray(SHAPE) / 2.0)) ** 2).sum(-1) < 0.8
    data[0, 0, 0] = np.nan                     # outside the region: allowed
    assert not region[0, 0, 0]
    img = nib.Nifti1Image(data.astype(np.float32), AFFINE)
    img.header.set_sform(AFFINE, code=sform_code)
    img.header.set_xyzt_units("mm", "sec")
    return img, region, data


def every_third(region):
    """Observed: every third voxel of the region in C order."""
    obs = np.zeros(SHAPE, dtype=bool)
    idx = np.argwhere(region)[::3]
    obs[tuple(idx.T)] = True
    return obs


def mask_img(array, affine=AFFINE):
    return nib.Nifti1Image(array.astype(np.uint8), affine)


# -- the function -------------------------------------------------------------------------
def test_outputs_on_the_input_grid_values_in_region_fill_outside():
    img, region, data = synthetic()
    obs = every_third(region)
    res = predict_image(img, region, obs, regressor=small_regressor(), fill=-5.0)
    assert isinstance(res, ImagePrediction)
    n = int(region.sum())
    assert len(res.voxels) == n and res.n_observed == int(obs.sum())
    np.testing.assert_array_equal(res.voxels.ijk, np.argwhere(region))
    np.testing.assert_allclose(res.voxels.coords, world(res.voxels.ijk))
    np.testing.assert_allclose(res.voxels.values, data[region], rtol=1e-6)
    np.testing.assert_array_equal(res.observed, obs[region])
    for out, expect in ((res.mean, res.regressor.transduction_),
                        (res.sd, res.regressor.transduction_std_)):
        assert out.shape == SHAPE and out.get_data_dtype() == np.float32
        np.testing.assert_allclose(out.affine, AFFINE)
        assert int(out.header["sform_code"]) == 4             # MNI stays MNI
        assert out.header.get_xyzt_units() == ("mm", "sec")
        values = out.get_fdata()
        np.testing.assert_allclose(values[region], expect, rtol=1e-5, atol=1e-6)
        assert np.all(values[~region] == -5.0)
    # NaN as the fill
    nan = predict_image(img, region, obs, regressor=small_regressor(), fill=np.nan)
    assert np.isnan(nan.mean.get_fdata()[~region]).all()
    np.testing.assert_allclose(nan.mean.get_fdata()[region], res.mean.get_fdata()[region])


def test_inputs_as_paths_4d_and_arrays_agree(tmp_path):
    img, region, data = synthetic()
    obs = every_third(region)
    # the reference reads the map from a file too: a file holds the affine in float32, and
    # the fit (k-means on a regular grid) can tell such differences apart
    img.to_filename(tmp_path / "map3d.nii.gz")
    img = nib.load(tmp_path / "map3d.nii.gz")
    ref = predict_image(img, region, obs, regressor=small_regressor())
    four_d = nib.Nifti1Image(np.asarray(img.dataobj)[..., None], img.affine)
    four_d.to_filename(tmp_path / "map.nii.gz")
    mask_img(region, img.affine).to_filename(tmp_path / "region.nii.gz")
    nib.Nifti1Image(obs.astype(np.float32)[..., None], img.affine).to_filename(
        tmp_path / "obs.nii.gz")
    res = predict_image(tmp_path / "map.nii.gz", str(tmp_path / "region.nii.gz"),
                        tmp_path / "obs.nii.gz", regressor=small_regressor())
    np.testing.assert_array_equal(res.observed, ref.observed)
    np.testing.assert_allclose(res.mean.get_fdata(), ref.mean.get_fdata(), rtol=1e-6)
    np.testing.assert_allclose(res.sd.get_fdata(), ref.sd.get_fdata(), rtol=1e-6)
    # a numeric (not boolean) mask array: non-zero is inside
    num = predict_image(img, region * 3.0, obs.astype(np.int8), regressor=small_regressor())
    np.testing.assert_allclose(num.mean.get_fdata(), ref.mean.get_fdata(), rtol=1e-6)


def test_predictions_near_the_truth_and_sd_grows_away_from_observed_voxels():
    img, region, data = synthetic()
    ijk = np.argwhere(region)
    xyz = world(ijk)
    # observed: every other voxel of the half of the region with the larger x (world, mm)
    near_half = xyz[:, 0] > np.median(xyz[:, 0])
    chosen = np.flatnonzero(near_half)[::2]
    obs = np.zeros(SHAPE, dtype=bool)
    obs[tuple(ijk[chosen].T)] = True
    res = predict_image(img, region, obs, regressor=small_regressor())
    mean = res.mean.get_fdata()[region]
    sd = res.sd.get_fdata()[region]
    f = data[region]
    unobserved = ~res.observed
    assert np.all(sd > 0)
    # predictions at unobserved voxels of the observed half are close to the truth: far
    # better than predicting the observed mean
    inside = unobserved & near_half
    rmse = np.sqrt(np.mean((mean[inside] - f[inside]) ** 2))
    baseline = np.sqrt(np.mean((f[res.observed].mean() - f[inside]) ** 2))
    assert rmse < 0.35 * baseline, (rmse, baseline)        # measured: 0.25
    # the sd grows with the distance to the nearest observed voxel
    d = np.sqrt(((xyz[:, None, :] - xyz[res.observed][None]) ** 2).sum(-1)).min(1)
    close, far = unobserved & (d < 3.0), unobserved & (d > 7.0)
    assert close.sum() > 20 and far.sum() > 20
    assert np.median(sd[far]) > 2.0 * np.median(sd[close])
    assert np.median(sd[res.observed]) < np.median(sd[close])
    order = np.argsort(np.argsort(d[unobserved]))
    rank_corr = np.corrcoef(order, np.argsort(np.argsort(sd[unobserved])))[0, 1]
    assert rank_corr > 0.6                                   # measured: 0.89
    # the sd of a new observation covers the truth there (measured: 97% within 2 sd)
    new_sd = predict_image(img, region, obs, regressor=small_regressor(),
                           include_noise=True).sd.get_fdata()[region]
    assert np.mean(np.abs(mean[inside] - f[inside]) < 2 * new_sd[inside]) > 0.85


def test_include_noise_adds_the_fitted_noise_variance():
    img, region, _ = synthetic()
    obs = every_third(region)
    latent = predict_image(img, region, obs, regressor=small_regressor())
    new = predict_image(img, region, obs, regressor=small_regressor(), include_noise=True)
    noise = new.regressor.noise_
    assert noise > 0
    np.testing.assert_allclose(new.sd.get_fdata()[region] ** 2,
                               latent.sd.get_fdata()[region] ** 2 + noise, rtol=1e-5)
    np.testing.assert_allclose(new.mean.get_fdata(), latent.mean.get_fdata())
    assert np.all(new.sd.get_fdata()[~region] == 0.0)


def test_default_regressor_and_a_passed_one_is_cloned():
    img, region, _ = synthetic()
    res = predict_image(img, region, 0.3)
    params = res.regressor.get_params(deep=False)
    # the defaults, with the region's voxel lattice as the full-resolution prior's graph
    heat, matern, rbf = params.pop("prior")
    graph = matern.graph
    assert graph.kind == "lattice" and graph.n_nodes == int(region.sum())
    assert matern.get_params(deep=False) == dict(GraphMaternPrior().get_params(), graph=graph)
    assert heat.get_params() == HeatKernelPrior().get_params() and isinstance(rbf, RBFPrior)
    expected = FLGPRegressor().get_params()
    expected.pop("prior")
    assert params == expected
    mine = FLGPRegressor(RBFPrior(), max_iter=5)
    out = predict_image(img, region, 0.3, regressor=mine)
    assert out.regressor is not mine and out.regressor.method == "rbf"
    assert not hasattr(mine, "transduction_")                  # left unfitted
    assert hasattr(out.regressor, "rbf_")
    np.testing.assert_array_equal(out.observed, res.observed)  # same draw, same seed


def test_fraction_draw_is_seeded_and_sized():
    img, region, _ = synthetic()
    n = int(region.sum())
    a = predict_image(img, region, 0.28, regressor=small_regressor(), random_state=3)
    b = predict_image(img, region, 0.28, regressor=small_regressor(), random_state=3)
    c = predict_image(img, region, 0.28, regressor=small_regressor(), random_state=4)
    assert a.n_observed == round(0.28 * n)
    np.testing.assert_array_equal(a.observed, b.observed)
    assert not np.array_equal(a.observed, c.observed)
    expect = np.zeros(n, dtype=bool)
    expect[np.random.default_rng(3).choice(n, round(0.28 * n), replace=False)] = True
    np.testing.assert_array_equal(a.observed, expect)    # documented: default_rng(seed)


def test_mask_none_is_every_finite_nonzero_voxel():
    img, region, data = synthetic()
    masked = np.where(region, data, 0.0)
    masked[0, 0, 0] = np.nan                                  # NaN outside: fine
    res = predict_image(nib.Nifti1Image(masked.astype(np.float32), AFFINE), None, 0.3,
                        regressor=small_regressor())
    np.testing.assert_array_equal(res.voxels.ijk, np.argwhere(region & (masked != 0)))


def test_progress_bar_is_silent_without_a_terminal(capsys):
    img, region, _ = synthetic()
    predict_image(img, region, 0.3, regressor=small_regressor(), progress=True)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


# -- errors that say what to change --------------------------------------------------------
def _shifted():
    a = AFFINE.copy()
    a[:3, 3] += 1.0
    return a


def _errors():
    img, region, data = synthetic()
    obs = every_third(region)
    nan_in = data.copy()
    nan_in[tuple(np.argwhere(region)[5])] = np.nan
    inf_in = data.copy()
    inf_in[tuple(np.argwhere(region)[7])] = -np.inf
    one = np.zeros(SHAPE, dtype=bool)
    one[tuple(np.argwhere(region)[0])] = True
    outside = obs.copy()
    outside[0, 0, 1] = True
    assert not region[0, 0, 1]
    big = np.zeros(SHAPE[:2] + (9,), dtype=bool)
    big[:, :, :8] = region
    return [
        ("mask_shape", (img, mask_img(big), obs), ValueError,
         r"mask is not on the image's grid \(shape .*resample_to_img\(mask, image, "
         r"interpolation=\"nearest\"\)"),
        ("mask_affine", (img, mask_img(region, _shifted()), obs), ValueError,
         r"mask is not on the image's grid \(the same shape but another affine"
         r".*resample_to_img"),
        ("observed_affine", (img, region, mask_img(obs, _shifted())), ValueError,
         r"observed is not on the image's grid.*resample_to_img\(observed"),
        ("mask_array_shape", (img, big, obs), ValueError, r"mask array has shape"),
        ("empty_region", (img, np.zeros(SHAPE, bool), 0.5), ValueError, "region is empty"),
        ("nan_in_region", (nib.Nifti1Image(nan_in.astype(np.float32), AFFINE), region, obs),
         ValueError, r"1 NaN or infinite voxel\(s\) inside the region.*mask & np.isfinite"),
        ("inf_in_region", (nib.Nifti1Image(inf_in.astype(np.float32), AFFINE), region, obs),
         ValueError, r"NaN or infinite voxel"),
        ("no_observed", (img, region, np.zeros(SHAPE, bool)), ValueError,
         "no observed voxel"),
        ("one_observed", (img, region, one), ValueError,
         "only 1 observed voxel.*at least 2"),
        ("tiny_fraction", (img, region, 0.001), ValueError, "at least 2 are needed"),
        ("fraction_zero", (img, region, 0.0), ValueError, "strictly between 0 and 1"),
        ("fraction_one", (img, region, 1), ValueError, "strictly between 0 and 1"),
        ("fraction_big", (img, region, 1.5), ValueError, "strictly between 0 and 1"),
        ("observed_outside", (img, region, outside), ValueError,
         r"1 observed voxel\(s\) lie outside the region.*observed & region"),
        ("five_dims", (nib.Nifti1Image(np.ones(SHAPE + (3, 2), np.float32), AFFINE),
                       region, obs), ValueError, r"image must be a 3-d map or a 4-d"),
        ("constant_maps", (nib.Nifti1Image(np.ones(SHAPE + (3,), np.float32), AFFINE),
                           region, obs), ValueError, "map 0 takes one value"),
        ("image_array", (data, region, obs), TypeError, "NIfTI image"),
        ("mask_list", (img, [1, 2], obs), TypeError, "mask must be a NIfTI image"),
        ("observed_bool", (img, region, True), TypeError, "fraction in"),
        ("observed_none", (img, region, None), TypeError, "fraction in"),
    ]


@pytest.mark.parametrize("case", _errors(), ids=lambda c: c[0])
def test_errors_say_what_to_change(case):
    _, args, err, match = case
    with pytest.raises(err, match=match):
        predict_image(*args, regressor=small_regressor())


def test_errors_of_options_and_files(tmp_path):
    img, region, _ = synthetic()
    with pytest.raises(TypeError, match="regressor must be an flgp.FLGPRegressor"):
        predict_image(img, region, 0.3, regressor=object())
    with pytest.raises(ValueError, match="include_noise=True.*poisson"):
        predict_image(img, region, 0.3, regressor=FLGPRegressor(likelihood="poisson"),
                      include_noise=True)
    with pytest.raises(TypeError, match="include_noise"):
        predict_image(img, region, 0.3, include_noise="yes")
    with pytest.raises(TypeError, match="fill"):
        predict_image(img, region, 0.3, fill="0")
    with pytest.raises(FileNotFoundError):
        predict_image(tmp_path / "missing.nii.gz", region, 0.3)


# -- the command ---------------------------------------------------------------------------
@pytest.fixture
def files(tmp_path):
    img, region, data = synthetic()
    img.to_filename(tmp_path / "map.nii.gz")
    mask_img(region).to_filename(tmp_path / "region.nii.gz")
    mask_img(every_third(region)).to_filename(tmp_path / "obs.nii.gz")
    return tmp_path, region, data


def test_cli_writes_mean_and_sd_on_the_map_grid(files, capsys):
    d, region, data = files
    rc = main(["nifti", str(d / "map.nii.gz"), "--mask", str(d / "region.nii.gz"),
               "--observed", str(d / "obs.nii.gz"), "--out", str(d / "out" / "pred"),
               "--n-induced", "120", "--n-eigenpairs", "60", "--quiet"])
    assert rc == 0
    out = capsys.readouterr()
    n, m = int(region.sum()), int(every_third(region).sum())
    assert f"region {n} voxels, observed {m}" in out.out and "wrote" in out.out
    assert "Traceback" not in out.err
    mean = nib.load(d / "out" / "pred_mean.nii.gz")
    sd = nib.load(d / "out" / "pred_sd.nii.gz")
    ref = predict_image(d / "map.nii.gz", region, every_third(region),
                        regressor=small_regressor())
    for img, expect in ((mean, ref.mean), (sd, ref.sd)):
        assert img.shape == SHAPE
        np.testing.assert_allclose(img.affine, AFFINE, atol=1e-6)
        assert int(img.header["sform_code"]) == 4
        np.testing.assert_allclose(img.get_fdata(), expect.get_fdata(), rtol=1e-5,
                                   atol=1e-6)
        assert np.all(img.get_fdata()[~region] == 0.0)
    err = mean.get_fdata()[region] - data[region]
    assert np.sqrt(np.mean(err ** 2)) < 0.25 * data[region].std()
    assert np.all(sd.get_fdata()[region] > 0)


def test_cli_observed_fraction_seed_and_fill(files, capsys):
    d, region, _ = files
    rc = main(["nifti", str(d / "map.nii.gz"), "--mask", str(d / "region.nii.gz"),
               "--observed-fraction", "0.3", "--seed", "2", "--fill", "nan",
               "--include-noise", "--out", str(d / "frac"), "--n-induced", "120",
               "--n-eigenpairs", "60", "--quiet"])
    assert rc == 0
    n = int(region.sum())
    assert f"observed {round(0.3 * n)} " in capsys.readouterr().out
    ref = predict_image(d / "map.nii.gz", region, 0.3, random_state=2, include_noise=True,
                        regressor=small_regressor(random_state=2))
    got = nib.load(d / "frac_sd.nii.gz").get_fdata()
    assert np.isnan(got[~region]).all()
    np.testing.assert_allclose(got[region], ref.sd.get_fdata()[region], rtol=1e-5)


def _bad_inputs(d, region, data):
    shifted = d / "shifted.nii.gz"
    mask_img(region, _shifted()).to_filename(shifted)
    empty = d / "empty.nii.gz"
    mask_img(np.zeros(SHAPE, bool)).to_filename(empty)
    nan_map = d / "nan_map.nii.gz"
    bad = data.copy()
    bad[tuple(np.argwhere(region)[3])] = np.nan
    nib.Nifti1Image(bad.astype(np.float32), AFFINE).to_filename(nan_map)
    not_nifti = d / "notes.nii.gz"
    not_nifti.write_text("not an image")
    truncated = d / "truncated.nii.gz"
    whole = (d / "map.nii.gz").read_bytes()
    truncated.write_bytes(whole[:len(whole) // 2])
    return {
        "grid": (["--mask", str(shifted), "--observed-fraction", "0.3"], "resample_to_img"),
        "empty": (["--mask", str(empty), "--observed-fraction", "0.3"], "region is empty"),
        "nan": (["--mask", str(d / "region.nii.gz"), "--observed-fraction", "0.3"],
                "NaN or infinite", nan_map),
        "missing_mask": (["--mask", str(d / "nope.nii.gz"), "--observed-fraction", "0.3"],
                         "--mask .*nope.nii.gz.*no such file"),
        "missing_map": (["--observed-fraction", "0.3"], "MAP .*absent.nii.gz.*no such file",
                        d / "absent.nii.gz"),
        "fraction": (["--mask", str(d / "region.nii.gz"), "--observed-fraction", "1.2"],
                     "strictly between 0 and 1"),
        "not_nifti": (["--observed-fraction", "0.3"],
                      "MAP .*notes.nii.gz.* cannot be read as a NIfTI image", not_nifti),
        "truncated": (["--mask", str(d / "region.nii.gz"), "--observed-fraction", "0.3"],
                      "MAP .*truncated.nii.gz.* cannot be read as a NIfTI image.*ended",
                      truncated),
    }


@pytest.mark.parametrize("case", ["grid", "empty", "nan", "missing_mask", "missing_map",
                                  "fraction", "not_nifti", "truncated"])
def test_cli_errors_exit_2_without_traceback(files, capsys, case):
    d, region, data = files
    spec = _bad_inputs(d, region, data)[case]
    args, match = spec[0], spec[1]
    map_path = spec[2] if len(spec) > 2 else d / "map.nii.gz"
    rc = main(["nifti", str(map_path), *args, "--out", str(d / "x"), "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("flgp nifti: error: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert re.search(match, err), err
    assert not (d / "x_mean.nii.gz").exists()


def test_cli_requires_one_kind_of_observed(files, capsys):
    d, _, _ = files
    with pytest.raises(SystemExit) as exc:       # argparse: exit status 2 and a usage line
        main(["nifti", str(d / "map.nii.gz"), "--out", str(d / "x")])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["nifti", str(d / "map.nii.gz"), "--observed", str(d / "obs.nii.gz"),
              "--observed-fraction", "0.3", "--out", str(d / "x")])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# -- several maps on one mask (issue 45) --------------------------------------------------

def _maps(k=3, seed=0):
    """k smooth maps of different length-scales on the synthetic grid (4-d) and the
    region."""
    img, region, _ = synthetic()
    ijk = np.indices(SHAPE).transpose(1, 2, 3, 0).astype(float)
    xyz = world(ijk)
    rng = np.random.default_rng(seed)
    out = np.stack([np.sin(xyz[..., 0] / s) + np.cos(xyz[..., 1] / (s + 3.0))
                    + 0.01 * rng.standard_normal(SHAPE) for s in (5.0, 8.0, 12.0)[:k]],
                   axis=3)
    return nib.Nifti1Image(out.astype(np.float32), AFFINE), region, out


def test_a_4d_image_is_each_maps_own_fit():
    """hyperparameters='own': the 4-d result is, map by map, predict_image of that map
    alone; the table holds each fit's values; a list of 3-d images gives the same."""
    img4, region, data = _maps()
    reg = FLGPRegressor(GraphMaternPrior())
    res = predict_image(img4, region, 0.3, regressor=reg)
    assert res.mean.shape == res.sd.shape == SHAPE + (3,)
    assert [row["map"] for row in res.maps] == [0, 1, 2] and len(res.regressor) == 3
    for j in range(3):
        one = predict_image(nib.Nifti1Image(data[..., j].astype(np.float32), AFFINE), region,
                            0.3, regressor=reg)
        np.testing.assert_allclose(res.mean.get_fdata()[..., j], one.mean.get_fdata(),
                                   atol=1e-5)
        assert res.maps[j]["log_evidence"] == pytest.approx(
            one.regressor.log_marginal_likelihood_, abs=1e-6)
        np.testing.assert_array_equal(res.observed, one.observed)
    listed = predict_image([nib.Nifti1Image(data[..., j].astype(np.float32), AFFINE)
                            for j in range(3)], region, 0.3, regressor=reg)
    np.testing.assert_allclose(listed.mean.get_fdata(), res.mean.get_fdata(), atol=1e-6)


def test_maps_fitted_in_processes_equal_one_after_another():
    """n_jobs=2 (two loky processes) gives what n_jobs=1 gives, map by map; a regressor's
    warning raised in a worker still reaches the caller of predict_image; n_jobs is
    checked."""
    from flgp.models.image import map_workers

    img4, region, data = _maps()
    reg = FLGPRegressor(GraphMaternPrior())
    # a region in two pieces, the second without an observed voxel: the fit warns
    split = region.copy()
    split[:, 5, :] = False
    observed = split & (np.indices(SHAPE)[1] < 5) & (np.arange(split.size).reshape(SHAPE)
                                                     % 3 == 0)
    one = predict_image(img4, split, observed, regressor=reg, n_jobs=1)
    with pytest.warns(UserWarning, match="piece") as caught:
        two = predict_image(img4, split, observed, regressor=reg, n_jobs=2)
    assert any(w.filename == __file__ for w in caught)    # pointing at this call
    np.testing.assert_array_equal(two.mean.get_fdata(), one.mean.get_fdata())
    np.testing.assert_array_equal(two.sd.get_fdata(), one.sd.get_fdata())
    for a, b in zip(one.maps, two.maps):
        assert {k: v for k, v in a.items() if k != "seconds"} == \
            {k: v for k, v in b.items() if k != "seconds"}
    assert map_workers(None, 3, 500, reg) <= 3 and map_workers(5, 3, 500, reg) == 3
    assert map_workers(1, 3, 500, reg) == 1
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="n_jobs must be"):
            predict_image(img4, region, 0.3, regressor=reg, n_jobs=bad)
        with pytest.raises(ValueError, match="n_jobs must be"):     # one map: checked too
            predict_image(img4.slicer[..., 0], region, 0.3, regressor=reg, n_jobs=bad)


def test_shared_hyperparameters_are_the_pooled_evidence():
    """hyperparameters='shared': one order, κ and noise-to-signal ratio for every map at
    the maximum of the summed evidence (each map its own amplitude, cross-validated); each
    map's mean is the single-map posterior at those hyperparameters; the pooled evidence is
    the sum of the single-map evidences there."""
    from flgp.graph import lattice_graph
    from flgp.precision import MaternRegression, matern_precision

    img4, region, data = _maps()
    res = predict_image(img4, region, 0.3, hyperparameters="shared")
    rows = res.maps
    assert {r["order"] for r in rows} == {rows[0]["order"]} and rows[-1]["map"] == "all"
    # a fixed order is honoured
    fixed = 1 if rows[0]["order"] != 1 else 2
    held = predict_image(img4, region, 0.3, hyperparameters="shared",
                         regressor=FLGPRegressor(GraphMaternPrior(nu=fixed)))
    assert {r["order"] for r in held.maps} == {fixed}
    vox = res.voxels
    obs = np.flatnonzero(res.observed)
    g = lattice_graph(vox.ijk, AFFINE).in_own_units()
    values = data[tuple(vox.ijk.T)]
    y = values[obs]
    z = (y - y.mean(0)) / y.std(0)
    length, mass = lattice_graph(vox.ijk, AFFINE).own_units()
    kappa2 = (rows[0]["kappa"] * length) ** 2
    reg_all = MaternRegression(g, obs, z, rows[0]["order"])
    noise_z = np.array([r["noise"] for r in rows[:-1]]) / y.std(0) ** 2
    # the rows' amplitudes are of Q_ν on the lattice in mm: in its own units, x ℓ^{2ν} / μ
    amp_z = (np.array([r["outputscale"] for r in rows[:-1]]) / y.std(0) ** 2
             * length ** (2 * rows[0]["order"]) / mass)
    ratio = float(noise_z[0] / amp_z[0])
    pooled = reg_all.evaluate(kappa2, ratio)
    singles = [MaternRegression(g, obs, z[:, j], rows[0]["order"]).evaluate(kappa2, ratio)
               for j in range(3)]
    assert pooled.log_evidence == pytest.approx(sum(f.log_evidence for f in singles),
                                                abs=1e-6)
    # each map's amplitude is cross-validated (generalised cross-validation at the shared
    # hyperparameters, as a map fitted alone; here from the dense posterior)
    Q = matern_precision(g, kappa2, rows[0]["order"]).toarray()
    Q[obs, obs] += 1.0 / ratio
    v = np.diag(np.linalg.inv(Q))[obs]
    scales = []
    for j in range(3):
        mean = y[:, j].mean() + y[:, j].std() * singles[j].mean
        np.testing.assert_allclose(res.mean.get_fdata()[tuple(vox.ijk.T)][:, j], mean,
                                   atol=1e-4)
        gcv = np.sum((z[:, j] - singles[j].mean[obs]) ** 2) / (obs.size * ratio - v.sum())
        assert amp_z[j] == pytest.approx(gcv, rel=0.02)
        scales.append(gcv / singles[j].amplitude)
    assert max(abs(np.log(scales))) > 0.05         # the check can tell the two apart


def test_several_maps_bad_input():
    img4, region, data = _maps(2)
    other = nib.Nifti1Image(data[..., 0].astype(np.float32), AFFINE * 2.0)
    with pytest.raises(ValueError, match=r"image\[1\] is not on image\[0\]'s grid"):
        predict_image([nib.Nifti1Image(data[..., 0].astype(np.float32), AFFINE), other],
                      region, 0.3)
    flat = data.copy()
    flat[..., 1] = 3.0
    with pytest.raises(ValueError, match="map 1 takes one value"):
        predict_image(nib.Nifti1Image(flat.astype(np.float32), AFFINE), region, 0.3)
    holed = data.copy()
    holed[tuple(np.argwhere(region)[5])] = (0.0, np.nan)
    with pytest.raises(ValueError, match="map 1 has 1 NaN"):
        predict_image(nib.Nifti1Image(holed.astype(np.float32), AFFINE), region, 0.3)
    with pytest.raises(ValueError, match="pools several maps"):
        predict_image(nib.Nifti1Image(data[..., 0].astype(np.float32), AFFINE), region, 0.3,
                      hyperparameters="shared")
    with pytest.raises(ValueError, match="'own'"):
        predict_image(img4, region, 0.3, hyperparameters="pooled")
    # the shared fit is the graph Matérn prior's, its noise searched: other regressors are
    # refused, not silently replaced
    for other in (FLGPRegressor(HeatKernelPrior()), FLGPRegressor(noise=0.01),
                  FLGPRegressor(likelihood="poisson")):
        with pytest.raises(ValueError, match="hyperparameters='shared' fits one graph"):
            predict_image(img4, region, 0.3, regressor=other, hyperparameters="shared")


def test_cli_writes_4d_outputs(tmp_path, capsys):
    img4, region, _ = _maps(2)
    path = tmp_path / "maps.nii.gz"
    nib.save(img4, path)
    code = main(["nifti", str(path), "--observed-fraction", "0.3", "--out",
                 str(tmp_path / "o"), "--quiet", "--method", "graph_matern",
                 "--shared-hyperparameters"])
    assert code == 0
    out = capsys.readouterr().out
    assert "2 maps in" in out and "map all" in out
    assert nib.load(tmp_path / "o_mean.nii.gz").shape == SHAPE + (2,)
    # each map its own fit, in two processes, as predict_image gives it
    code = main(["nifti", str(path), "--observed-fraction", "0.3", "--out",
                 str(tmp_path / "p"), "--quiet", "--method", "graph_matern", "--n-jobs", "2"])
    assert code == 0
    ref = predict_image(img4, None, 0.3, regressor=FLGPRegressor(GraphMaternPrior()),
                        n_jobs=1)
    np.testing.assert_allclose(nib.load(tmp_path / "p_mean.nii.gz").get_fdata(),
                               ref.mean.get_fdata(), atol=1e-5)
    assert main(["nifti", str(path), "--observed-fraction", "0.3", "--out",
                 str(tmp_path / "q"), "--quiet", "--n-jobs", "0"]) == 2
    assert "n_jobs must be" in capsys.readouterr().err


# -- seed-correlation maps (issue 45) -----------------------------------------------------

def test_seed_correlations_equal_the_dense_prior_and_posterior():
    """The prior's and the posterior's correlations between seeds and every voxel equal
    the dense inverse's (this region has under EXACT_VARIANCE_ROWS voxels: exact), and an
    atlas gives each region's voxel of largest |value|."""
    from flgp.models import atlas_seeds, seed_correlation
    from flgp.precision import matern_precision

    img, region, data = synthetic()
    res = predict_image(img, region, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    fit = res.regressor
    graph = fit.graph_
    length, _ = graph.own_units()
    own = graph.in_own_units()
    Q = matern_precision(own, (fit.matern_kappa_ * length) ** 2, fit.matern_order_).toarray()
    seeds = np.array([0, 17, 101])
    out = seed_correlation(res, seeds)
    K = np.linalg.inv(Q)
    ref = K[:, seeds] / np.sqrt(np.outer(np.diag(K), np.diag(K)[seeds]))
    np.testing.assert_allclose(out.correlation, ref.T, atol=1e-8)
    np.testing.assert_allclose(np.diag(out.matrix), 1.0, atol=1e-12)
    post = seed_correlation(res, seeds, posterior=True)
    obs = np.flatnonzero(res.observed)
    Qt = matern_precision(graph, fit.matern_kappa_ ** 2, fit.matern_order_).toarray()
    Qt[obs, obs] += fit.outputscale_ / fit.noise_       # both in the units of the graph
    Kt = np.linalg.inv(Qt)
    ref = Kt[:, seeds] / np.sqrt(np.outer(np.diag(Kt), np.diag(Kt)[seeds]))
    np.testing.assert_allclose(post.correlation, ref.T, atol=1e-8)
    assert post.to_nifti(res.voxels).shape == SHAPE + (3,)
    # an atlas: two labelled halves of the region
    atlas = np.zeros(SHAPE)
    ijk = res.voxels.ijk
    atlas[tuple(ijk.T)] = np.where(ijk[:, 0] < SHAPE[0] // 2, 1, 2)
    atlas_img = nib.Nifti1Image(atlas.astype(np.int16), AFFINE)
    labels, picks = atlas_seeds(atlas_img, fit.transduction_, res.voxels)
    assert list(labels) == [1, 2]
    for lab, row in zip(labels, picks):
        inside = np.flatnonzero(atlas[tuple(ijk.T)] == lab)
        assert row == inside[np.argmax(np.abs(fit.transduction_[inside]))]
    by_atlas = seed_correlation(res, atlas=atlas_img)
    np.testing.assert_array_equal(by_atlas.seeds, picks)
    with pytest.raises(ValueError, match="outside the region"):
        seed_correlation(res, np.array([[0, 0, 0]]))
    for bad in ([1.5], [np.nan], ["a"]):        # (before, 1.5 was truncated to row 1)
        with pytest.raises(ValueError, match="whole row numbers"):
            seed_correlation(res, bad)
    np.testing.assert_array_equal(seed_correlation(res, [17.0]).seeds, [17])
    with pytest.raises(ValueError, match="not on the image's grid"):
        seed_correlation(res, atlas=nib.Nifti1Image(atlas.astype(np.int16), AFFINE * 2))


def test_degenerate_atlases_and_volumes():
    """Atlases and 4-d images a user will give that hold little: an atlas with no region
    in the mask (all zero, NaN, or labels only outside it) and a 4-d atlas are refused
    with what to change; one region, or a region of one voxel, gives a 1 x 1 matrix of
    ones (a documented result); a 4-d image with an empty (all-zero) volume is refused
    naming the volume, as a constant or NaN one is."""
    from flgp.models import seed_correlation

    img, region, data = synthetic()
    res = predict_image(img, region, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    ijk = res.voxels.ijk
    empty = np.zeros(SHAPE)
    nan = np.full(SHAPE, np.nan)
    outside = empty.copy()
    outside[0, 0, 0] = 5
    for atlas in (empty, nan, outside):
        with pytest.raises(ValueError, match="no atlas region covers a voxel"):
            seed_correlation(res, atlas=nib.Nifti1Image(atlas.astype(np.float32), AFFINE))
    one = empty.copy()
    one[tuple(ijk.T)] = 4
    single = empty.copy()
    single[tuple(ijk[:1].T)] = 9
    for atlas, label in ((one, 4), (single, 9)):
        out = seed_correlation(res, atlas=nib.Nifti1Image(atlas.astype(np.int16), AFFINE))
        np.testing.assert_array_equal(out.labels, [label])
        np.testing.assert_allclose(out.matrix, [[1.0]], atol=1e-12)
    with pytest.raises(ValueError, match="atlas must be a 3-d map"):
        seed_correlation(res, atlas=nib.Nifti1Image(np.stack([one, one], -1)
                                                    .astype(np.int16), AFFINE))
    filled = np.nan_to_num(data)
    maps = np.stack([filled, np.zeros_like(filled), filled * 2.0], -1)
    with pytest.raises(ValueError, match="map 1 takes one value"):
        predict_image(nib.Nifti1Image(maps.astype(np.float32), AFFINE), region, 0.3)


def test_seed_correlations_on_a_large_region_by_multigrid(monkeypatch):
    """Beyond FACTOR_MAX_NODES voxels the prior's columns come from AMG-preconditioned CG
    (relative residual LARGE_SOLVE_TOL): the correlations equal the factored path's to
    that accuracy (the region is small enough for exact variances on both paths)."""
    from flgp.models import seed_correlation
    from flgp.models import seeds as seeds_module

    img, region, _ = synthetic()
    res = predict_image(img, region, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    picks = np.array([0, 17, 101])
    factored = seed_correlation(res, picks)
    monkeypatch.setattr(seeds_module, "FACTOR_MAX_NODES", 10)
    by_cg = seed_correlation(res, picks)
    np.testing.assert_allclose(by_cg.correlation, factored.correlation, atol=1e-4)
    np.testing.assert_allclose(np.diag(by_cg.matrix), 1.0, atol=1e-12)


def test_seed_correlations_with_estimated_variances_stay_correlations(monkeypatch):
    """With the variances estimated (more voxels than EXACT_VARIANCE_ROWS; here the
    threshold lowered) a seed's own correlation is exactly 1 and none leaves [-1, 1],
    and the rest stay within the estimator's error of the exact ones."""
    from flgp.models import seed_correlation
    from flgp.precision import prior as prior_module

    img, region, _ = synthetic()
    res = predict_image(img, region, 0.3, regressor=FLGPRegressor(GraphMaternPrior()))
    picks = np.array([0, 17, 101])
    exact = seed_correlation(res, picks)
    monkeypatch.setattr(prior_module, "EXACT_VARIANCE_ROWS", 10)
    est = seed_correlation(res, picks)
    np.testing.assert_array_equal(np.diag(est.matrix), 1.0)
    assert np.abs(est.correlation).max() <= 1.0
    # the estimator's error: a variance's relative standard error is up to sqrt(2/64) =
    # 18 % (all of it in the sampled conditional mean, as for this long-range prior), a
    # correlation's about half of it; the draws are shared, so the errors are correlated
    rel = np.abs(est.correlation / exact.correlation - 1.0)
    assert np.median(rel) < 0.18 and rel.max() < 0.5


def test_cli_seed_maps_from_an_atlas(files, capsys):
    """--seeds-atlas: the seed maps (4-d, one volume a region), the regions' matrix as CSV
    (headed by the labels) and a plot, equal to seed_correlation on the same fit; a
    missing atlas file is one error line and exit 2."""
    from flgp.models import seed_correlation

    d, region, _ = files
    atlas = np.zeros(SHAPE, np.int16)
    ijk = np.argwhere(region)
    atlas[tuple(ijk.T)] = 1 + (ijk[:, 0] >= SHAPE[0] // 2) + 2 * (ijk[:, 1] >= SHAPE[1] // 2)
    nib.Nifti1Image(atlas, AFFINE).to_filename(d / "atlas.nii.gz")
    args = ["nifti", str(d / "map.nii.gz"), "--mask", str(d / "region.nii.gz"),
            "--observed", str(d / "obs.nii.gz"), "--method", "graph_matern", "--quiet",
            "--out", str(d / "s"), "--seeds-atlas", str(d / "atlas.nii.gz")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "4 atlas regions: seed maps of the fitted prior" in out
    ref = seed_correlation(predict_image(d / "map.nii.gz", region, d / "obs.nii.gz",
                                         regressor=FLGPRegressor(GraphMaternPrior())),
                           atlas=d / "atlas.nii.gz")
    with open(d / "s_seed_matrix.csv") as fh:
        assert fh.readline().strip() == "1,2,3,4"
    np.testing.assert_allclose(np.loadtxt(d / "s_seed_matrix.csv", delimiter=",",
                                          skiprows=1), ref.matrix, atol=1e-6)
    maps = nib.load(d / "s_seeds.nii.gz").get_fdata()
    assert maps.shape == SHAPE + (4,)
    np.testing.assert_allclose(maps[tuple(ijk.T)], ref.correlation.T, atol=1e-6)
    assert (d / "s_seed_matrix.png").stat().st_size > 1000
    assert main(args[:-1] + [str(d / "no_atlas.nii.gz")]) == 2
    assert "flgp nifti: error: --seeds-atlas" in capsys.readouterr().err


def test_memory_estimate_matches_the_measured_peaks(monkeypatch):
    """The rule of thumb against the peaks it was read from (docs/images.md), within 10 %,
    and increasing in the region's size on either path; on a machine whose memory would
    not hold the factored fit the path (and the estimate) is conjugate gradients' -
    never a factored estimate above half the memory - and the regressor's fit takes
    that path."""
    from flgp.graph import lattice_graph
    from flgp.models.image import fit_memory_estimate
    from flgp.precision import gaussian

    monkeypatch.setattr(gaussian, "physical_memory", lambda: 64 * 2.0 ** 30)
    for n, gb in [(45_448, 1.8), (69_765, 4.7), (235_375, 1.0), (1_000_000, 2.6),
                  (1_524_955, 3.96), (1_882_989, 4.73)]:
        assert fit_memory_estimate(n) == pytest.approx(gb, rel=0.1)
    sizes = np.r_[np.linspace(1000, 100_000, 20), np.linspace(100_001, 3e6, 20)].astype(int)
    below = [fit_memory_estimate(n) for n in sizes[:20]]
    above = [fit_memory_estimate(n) for n in sizes[20:]]
    assert np.all(np.diff(below) > 0) and np.all(np.diff(above) > 0)
    assert gaussian.factors(100_000) and not gaussian.factors(100_001)
    # an 8 GB machine: factored while the fit needs at most 4 GB (~ 66,000 voxels)
    monkeypatch.setattr(gaussian, "physical_memory", lambda: 8 * 2.0 ** 30)
    estimates = np.array([fit_memory_estimate(int(n)) for n in sizes])
    assert estimates.max() <= max(4.0, gaussian.fit_memory_gb(int(sizes[-1]), False))
    assert gaussian.factors(60_000) and not gaussian.factors(70_000)
    assert fit_memory_estimate(70_000) == pytest.approx(gaussian.fit_memory_gb(70_000, False))
    # the path follows the rule: a small lattice on a machine "too small" to factor it
    calls = []
    real = gaussian._fit_iterative
    monkeypatch.setattr(gaussian, "_fit_iterative",
                        lambda *a, **k: calls.append(a[0].n_nodes) or real(*a, **k))
    monkeypatch.setattr(gaussian, "physical_memory", lambda: 1e3)
    ijk = np.argwhere(np.ones((12, 12, 6), bool))
    z = np.sin(ijk[:, 0] / 3.0) + np.cos(ijk[:, 1] / 4.0)
    obs = np.arange(0, ijk.shape[0], 3)
    fit, _, _ = gaussian.fit_matern(lattice_graph(ijk), obs, z[obs], search_max_nodes=200)
    assert calls == [ijk.shape[0]] and np.isfinite(fit.log_evidence)


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_it_starts(monkeypatch, capsys):
    """A region whose fit would need more memory than is available: a ValueError saying
    how much, before any fit (the regressor is left unfitted); a large one that fits is
    announced on stderr with progress."""
    from flgp.models import image as image_module

    img, region, _ = synthetic()
    monkeypatch.setattr(image_module, "LARGE_FIT_GB", 0.0)
    monkeypatch.setattr(image_module, "_available_memory_gb", lambda: 1e-9)
    reg = FLGPRegressor(GraphMaternPrior())
    with pytest.raises(ValueError, match=r"needs about .* GB of memory and 0.0 GB are "
                                         r"available: fit a smaller region"):
        predict_image(img, region, 0.3, regressor=reg)
    with pytest.raises(ValueError, match="GB of memory"):
        predict_image([img, img], region, 0.3, regressor=reg)
    monkeypatch.setattr(image_module, "_available_memory_gb", lambda: 64.0)
    res = predict_image(img, region, 0.3, regressor=reg, progress=True)
    assert f"fitting {int(region.sum())} voxels, expected to need about" in \
        capsys.readouterr().err
    assert res.regressor.method_ == "graph_matern"
    # the heat kernel alone: no graph Matérn fit to estimate, nothing refused
    monkeypatch.setattr(image_module, "_available_memory_gb", lambda: 1e-9)
    predict_image(img, region, 0.3, regressor=FLGPRegressor(HeatKernelPrior(**SMALL_HEAT)))


def test_memory_estimate_and_variance_draws_refuse_bad_counts():
    from flgp.graph.lattice import lattice_graph
    from flgp.models.image import fit_memory_estimate
    from flgp.precision import SparsePrecisionPrior

    for bad in (-1, 2.5, True, "many"):
        with pytest.raises(ValueError, match="whole number of voxels"):
            fit_memory_estimate(bad)
    prior = SparsePrecisionPrior(lattice_graph(np.argwhere(np.ones((4, 4, 4), bool))), nu=1)
    for bad in (1, 0, 3.0, True):
        with pytest.raises(ValueError, match="n_samples must be a whole number"):
            prior.marginal_variances(n_samples=bad)
