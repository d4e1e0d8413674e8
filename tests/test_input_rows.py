"""Issue 42's bad-input rows: unreadable surface and NIfTI files (the documented ValueError
and the command line's one-line error), the location of predict_image's and
predict_surface's warnings, a lattice of far-apart voxels, and NaN rows in the k-NN graph
builders."""

import base64
import re
import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest

from flgp import FLGPRegressor, GraphMaternPrior, predict_image, predict_surface
from flgp.cli import main
from flgp.graph import bucket_knn, knn_point_graph, lattice_graph, mesh_graph
from flgp.graph import lattice as lattice_module
from flgp.graph import self_tuning_knn_graph
from flgp.graph.knn import gaussian_knn_graph

nib = pytest.importorskip("nibabel")
pytest.importorskip("nilearn")


def _flat_mesh(k=10, size=50.0, shift=0.0):
    g = np.linspace(0, 1, k)
    xx, yy = np.meshgrid(g, g)
    V = np.c_[xx.ravel() * size + shift, yy.ravel() * size, np.zeros(k * k)]
    idx = np.arange(k * k).reshape(k, k)
    a, b, c, d = (idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(),
                  idx[1:, 1:].ravel())
    return V, np.r_[np.c_[a, b, c], np.c_[b, d, c]]


def _gz_array(x, **kw):
    return nib.gifti.GiftiDataArray(x, encoding="GIFTI_ENCODING_B64GZ", **kw)


def _save_mesh(path, V, F):
    nib.save(nib.gifti.GiftiImage(darrays=[
        _gz_array(V.astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
        _gz_array(F.astype(np.int32), intent="NIFTI_INTENT_TRIANGLE")]), path)


def _save_values(path, values):
    nib.save(nib.gifti.GiftiImage(darrays=[_gz_array(np.asarray(values, np.float32))]),
             path)


def _damage_deflate(text: str) -> str:
    """The GIfTI text with bytes of its first compressed data array flipped."""
    m = re.search(r"<Data>(.*?)</Data>", text, re.S)
    blob = bytearray(base64.b64decode(m.group(1)))
    for i in range(10, 40):
        blob[i] ^= 0x5A
    with pytest.raises(zlib.error):                   # the stream really is damaged
        zlib.decompress(bytes(blob))
    return text[:m.start(1)] + base64.b64encode(bytes(blob)).decode() + text[m.end(1):]


@pytest.fixture
def gifti_files(tmp_path):
    """A good mesh and map, and truncated, empty and deflate-damaged copies of each."""
    V, F = _flat_mesh()
    _save_mesh(tmp_path / "flat.surf.gii", V, F)
    values = np.sin(V[:, 0] / 10.0)
    _save_values(tmp_path / "map.func.gii", values)
    for stem, ext in (("flat", "surf.gii"), ("map", "func.gii")):
        raw = (tmp_path / f"{stem}.{ext}").read_bytes()
        (tmp_path / f"truncated.{ext}").write_bytes(raw[:len(raw) // 2])
        (tmp_path / f"empty.{ext}").write_bytes(b"")
        (tmp_path / f"deflate.{ext}").write_text(_damage_deflate(raw.decode()))
    return tmp_path, V, F, values


# nibabel's own error for each damaged file: the cause the ValueError is chained to
_CAUSES = {"truncated": "ExpatError", "empty": "ImageFileError", "deflate": "error"}


# -- row 1: predict_surface on an unreadable file -------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "empty", "deflate"])
def test_unreadable_mesh_is_a_value_error_naming_the_file(gifti_files, damage):
    d, V, F, values = gifti_files
    path = d / f"{damage}.surf.gii"
    with pytest.raises(ValueError, match=rf"could not read {re.escape(str(path))} .*; "
                                         rf"check that the file is complete") as info:
        predict_surface(str(path), values, 0.3)
    assert type(info.value.__cause__).__name__ == _CAUSES[damage]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("damage", ["truncated", "empty", "deflate"])
def test_unreadable_map_is_a_value_error_naming_the_file(gifti_files, damage):
    d, V, F, values = gifti_files
    path = d / f"{damage}.func.gii"
    with pytest.raises(ValueError, match=rf"could not read {re.escape(str(path))} ") as info:
        predict_surface(str(d / "flat.surf.gii"), str(path), 0.3)
    assert type(info.value.__cause__).__name__ == _CAUSES[damage]
    if damage == "deflate":
        assert isinstance(info.value.__cause__, zlib.error)
        assert "zlib.error" in str(info.value)


def test_truncated_freesurfer_files_are_named(tmp_path):
    V, F = _flat_mesh()
    nib.freesurfer.write_geometry(str(tmp_path / "lh.pial"), V, F)
    nib.freesurfer.write_morph_data(str(tmp_path / "lh.thickness"), np.sin(V[:, 0] / 10))
    short = tmp_path / "short"
    short.mkdir()
    for name in ("lh.pial", "lh.thickness"):
        raw = (tmp_path / name).read_bytes()
        (short / name).write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError, match=rf"could not read {re.escape(str(short))}.lh.pial"):
        predict_surface(str(short / "lh.pial"), np.zeros(len(V)), 0.3)
    # a short morph file reads as a shorter vector: the shape error names the file
    with pytest.raises(ValueError, match=r"one value per vertex \(100\).*read from "
                                         + re.escape(str(short / "lh.thickness"))):
        predict_surface(str(tmp_path / "lh.pial"), str(short / "lh.thickness"), 0.3)


def test_keyboard_interrupt_while_reading_is_not_swallowed(gifti_files, monkeypatch):
    from nilearn import surface

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(surface, "load_surf_mesh", interrupted)
    d, V, F, values = gifti_files
    with pytest.raises(KeyboardInterrupt):
        predict_surface(str(d / "flat.surf.gii"), values, 0.3)


# -- row 2: the command line on unreadable files ---------------------------------------------

def test_surface_command_on_a_truncated_mesh_prints_one_line(gifti_files):
    d, _, _, _ = gifti_files
    run = subprocess.run([sys.executable, "-m", "flgp.cli", "surface",
                          str(d / "truncated.surf.gii"), str(d / "map.func.gii"),
                          "--observed-fraction", "0.3", "--out", str(d / "x")],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    ours = [line for line in run.stderr.splitlines() if line.startswith("flgp surface:")]
    assert len(ours) == 1 and ours[0].startswith("flgp surface: error: could not read ")
    assert "truncated.surf.gii" in ours[0]
    assert not (d / "x_mean.func.gii").exists()


@pytest.mark.parametrize("damage", ["empty", "deflate"])
@pytest.mark.parametrize("which", ["MESH", "DATA"])
def test_surface_command_on_damaged_files_exits_2(gifti_files, capsys, damage, which):
    d, _, _, _ = gifti_files
    mesh = d / (f"{damage}.surf.gii" if which == "MESH" else "flat.surf.gii")
    data = d / (f"{damage}.func.gii" if which == "DATA" else "map.func.gii")
    rc = main(["surface", str(mesh), str(data), "--observed-fraction", "0.3",
               "--out", str(d / "x")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("flgp surface: error: could not read ")
    assert len(err.strip().splitlines()) == 1
    assert f"{damage}." in err


@pytest.fixture
def nifti_files(tmp_path):
    i, j, k = np.indices((8, 8, 4))
    data = (np.sin(i / 3.0) + np.cos(j / 4.0) + 1.5).astype(np.float32)
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0]))
    img.to_filename(tmp_path / "map.nii.gz")
    img.to_filename(tmp_path / "map.nii")
    gz = (tmp_path / "map.nii.gz").read_bytes()
    raw = (tmp_path / "map.nii").read_bytes()
    (tmp_path / "truncated.nii.gz").write_bytes(gz[:len(gz) // 2])
    (tmp_path / "truncated.nii").write_bytes(raw[:len(raw) // 2])   # header whole
    return tmp_path


@pytest.mark.parametrize("name", ["truncated.nii.gz", "truncated.nii"])
def test_nifti_command_on_a_truncated_image_prints_one_line(nifti_files, capsys, name):
    """nibabel's message for a short uncompressed image holds a line break: the error
    still takes one line."""
    rc = main(["nifti", str(nifti_files / name), "--observed-fraction", "0.3",
               "--out", str(nifti_files / "x"), "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("flgp nifti: error: MAP ") and name in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_predict_image_reads_a_lazy_truncated_image_inside_its_checks(nifti_files):
    """nibabel reads an image's data on first access: a truncated file loaded by the user
    fails inside predict_image, which names it."""
    img = nib.load(nifti_files / "truncated.nii")        # the header reads fine
    with pytest.raises(ValueError, match=r"truncated\.nii.*cannot be read") as info:
        predict_image(img, None, 0.3)
    assert info.value.__cause__ is not None


# -- row 3: the warnings point at the user's call ---------------------------------------------

def _falls_apart(record):
    hits = [w for w in record if "falls apart" in str(w.message)]
    assert hits, [str(w.message) for w in record]
    return hits


def test_predict_image_warning_points_at_the_caller():
    i, j, k = np.indices((12, 6, 4))
    data = (np.sin(i / 3.0) + np.cos(j / 4.0) + 1.5).astype(np.float32)
    img = nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0]))
    region = (i < 5) | (i > 6)                        # two slabs, 2 voxels apart
    observed = region & (i < 4)                       # targets in one slab only
    with pytest.warns(UserWarning, match="falls apart into 2 pieces") as record:
        predict_image(img, region, observed, regressor=FLGPRegressor(GraphMaternPrior()))
    assert all(w.filename == __file__ for w in _falls_apart(record))


def _two_patches():
    V1, F1 = _flat_mesh(8)
    V2, F2 = _flat_mesh(8, shift=200.0)
    return np.r_[V1, V2], np.r_[F1, F2 + len(V1)]


def test_predict_surface_warnings_point_at_the_caller():
    V, F = _two_patches()
    values = np.sin(V[:, 0] / 10.0)
    observed = np.zeros(len(V), bool)
    observed[:20] = True                              # the first patch only
    with pytest.warns(UserWarning, match="falls apart into 2 pieces") as record:
        predict_surface((V, F), values, observed, regressor=FLGPRegressor(GraphMaternPrior()))
    assert all(w.filename == __file__ for w in _falls_apart(record))
    # the region's own warning (a spur vertex on no face of the region) too
    V, F = _flat_mesh(10)
    mask = V[:, 0] < 30.0
    mask[-1] = True                                   # a corner far across the cut
    with pytest.warns(UserWarning, match="lie on no face") as record:
        predict_surface((V, F), np.sin(V[:, 0] / 10.0), 0.3, mask=mask)
    stray = [w for w in record if "lie on no face" in str(w.message)]
    assert stray and all(w.filename == __file__ for w in stray)


def test_predict_surface_warnings_keep_the_users_filters():
    V, F = _two_patches()
    observed = np.zeros(len(V), bool)
    observed[:20] = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="falls apart"):
            predict_surface((V, F), np.sin(V[:, 0] / 10.0), observed,
                            regressor=FLGPRegressor(GraphMaternPrior()))


def test_surface_command_prints_a_warning_as_one_line(tmp_path, capsys):
    V, F = _two_patches()
    _save_mesh(tmp_path / "two.surf.gii", V, F)
    _save_values(tmp_path / "map.func.gii", np.sin(V[:, 0] / 10.0))
    observed = np.zeros(len(V))
    observed[:20] = 1.0
    _save_values(tmp_path / "obs.func.gii", observed)
    rc = main(["surface", str(tmp_path / "two.surf.gii"), str(tmp_path / "map.func.gii"),
               "--observed", str(tmp_path / "obs.func.gii"), "--method", "graph_matern",
               "--out", str(tmp_path / "pred")])
    assert rc == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "falls apart" in line]
    assert len(lines) == 1
    assert lines[0].startswith("flgp surface: warning: the graph falls apart into 2 pieces")


# -- row 4: a lattice of far-apart voxels -----------------------------------------------------

def test_lattice_of_two_far_voxels_is_two_pieces():
    g = lattice_graph([[0, 0, 0], [10 ** 6] * 3])
    assert g.n_nodes == 2
    n_pieces, labels = g.pieces()
    assert n_pieces == 2 and labels[0] != labels[1]
    assert abs(g.stiffness).sum() == 0
    np.testing.assert_array_equal(g.points, [[0, 0, 0], [10 ** 6] * 3])


def test_lattice_beyond_int64_keys_is_a_clear_error():
    with pytest.raises(ValueError, match=r"more than 2\*\*62 cells.*voxel indices"):
        lattice_graph([[0, 0, 0], [2 ** 21] * 3])
    with pytest.raises(ValueError, match=r"2\*\*62"):
        lattice_graph([[-(2 ** 62), 0, 0], [2 ** 62, 0, 0]])


class _SearchSpy:
    """numpy for the lattice module, counting its calls of ``searchsorted``."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def searchsorted(self, *args, **kwargs):
        self.calls += 1
        return np.searchsorted(*args, **kwargs)


@pytest.mark.parametrize("connectivity", [6, 18, 26])
def test_lattice_sparse_lookup_matches_the_dense_index(monkeypatch, connectivity):
    rng = np.random.default_rng(3)
    ijk = np.argwhere(rng.random((9, 7, 6)) < 0.6) + np.array([5, -3, 11])
    affine = np.array([[2.0, 0.1, 0, -40], [0, 2.5, 0, 10], [0, 0.2, 3.0, 7],
                       [0, 0, 0, 1]])
    spy = _SearchSpy()
    monkeypatch.setattr(lattice_module, "np", spy)
    dense = lattice_graph(ijk, affine, connectivity=connectivity)
    assert spy.calls == 0                             # a small box: the dense index
    monkeypatch.setattr(lattice_module, "_DENSE_CELLS_PER_VOXEL", 0)
    monkeypatch.setattr(lattice_module, "_DENSE_EXTRA_CELLS", -1)
    sparse = lattice_graph(ijk, affine, connectivity=connectivity)
    assert spy.calls > 0                              # forced through the sorted keys
    assert dense.stiffness.nnz > 0
    assert (dense.stiffness != sparse.stiffness).nnz == 0
    np.testing.assert_array_equal(dense.mass, sparse.mass)
    np.testing.assert_array_equal(dense.points, sparse.points)
    assert dense.pieces()[0] == sparse.pieces()[0]


# -- row 5: NaN rows in the k-NN graph builders -----------------------------------------------

def _cloud(p, bad_rows, seed=0):
    X = np.random.default_rng(seed).random((300, p))
    for r in bad_rows:
        X[r, r % p] = np.nan if r % 2 else np.inf
    return X


@pytest.mark.parametrize("build,p", [
    (lambda X: self_tuning_knn_graph(X, 10), 40),
    (lambda X: bucket_knn(X, 10), 40),
    (lambda X: self_tuning_knn_graph(X, 10), 3),
    (lambda X: knn_point_graph(X, 10), 3),
    (lambda X: gaussian_knn_graph(X, 10), 3),
    (lambda X: gaussian_knn_graph(X, 10), 40),
], ids=["self_tuning_40", "bucket_40", "self_tuning_3", "knn_point_3", "gaussian_3",
        "gaussian_40"])
def test_knn_builders_name_non_finite_rows(build, p):
    with pytest.raises(ValueError, match=r"NaN or infinity in 1 row\(s\) \(first at row 7\)"
                                         r"; remove or impute those rows"):
        build(_cloud(p, [7]))
    with pytest.raises(ValueError, match=r"in 3 row\(s\) \(first at row 12\)"):
        build(_cloud(p, [40, 12, 299]))


def test_knn_builders_still_build_finite_clouds():
    X = _cloud(40, [])
    g = self_tuning_knn_graph(X, 10)
    assert np.isfinite(g.stiffness.data).all() and g.n_nodes == 300
    ind, sq = bucket_knn(X, 10)
    assert ind.shape == (300, 10) and np.isfinite(sq).all()
    assert np.isfinite(knn_point_graph(X[:, :3], 10).stiffness.data).all()


def test_mesh_graph_names_non_finite_vertices():
    V, F = _flat_mesh()
    V[[5, 2], 1] = [np.nan, np.inf]
    with pytest.raises(ValueError, match=r"2 vertices hold NaN or inf \(first: vertex 2\)"
                                         r"\. Remove or repair them"):
        mesh_graph(V, F)
