import os

import numpy as np
import pandas as pd
import pytest

from flgp import datasets
from flgp.cli import main


def test_concentric_circles_geometry_and_labels():
    X, y = datasets.make_concentric_circles(2400, random_state=0)
    r = np.linalg.norm(X, axis=1)
    radii = np.round(r, 10)
    assert sorted(np.unique(radii)) == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    for k, rad in enumerate([0.5, 0.6, 0.7, 0.8, 0.9, 1.0]):
        on = np.isclose(r, rad)
        assert on.sum() == 400
        assert np.all(y[on] == (1 if k % 2 == 0 else 0))  # circles 1, 3, 5 are class 1


def test_spiral_formula():
    X, y, f = datasets.make_spiral(100, noise=0.0, random_state=0)
    th = np.linspace(0, 8 * np.pi, 100)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), (th + 4) ** 0.7)
    np.testing.assert_allclose(f, 3 * np.sin(th / 10) + 3 * np.cos(th / 2) + 4 * np.sin(0.8 * th))
    np.testing.assert_array_equal(y, f)


@pytest.mark.parametrize("name, dim", [("make_swiss_roll", 3), ("make_s_curve", 3),
                                       ("make_helix", 3), ("make_sphere", 3),
                                       ("make_torus", 3), ("make_stretched_torus", 4),
                                       ("make_klein_bottle", 4),
                                       ("make_circle_with_outliers", 2)])
def test_generators_shapes_and_seeds(name, dim):
    fn = getattr(datasets, name)
    a = fn(200, random_state=1)
    b = fn(200, random_state=1)
    Xa = a[0] if isinstance(a, tuple) else a
    Xb = b[0] if isinstance(b, tuple) else b
    assert Xa.shape[1] == dim and Xa.shape[0] >= 200
    np.testing.assert_array_equal(Xa, Xb)
    assert np.all(np.isfinite(Xa))


def test_sphere_and_stretched_torus_radii():
    X = datasets.make_sphere(300, random_state=0)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
    T, _ = datasets.make_stretched_torus(300, stretch=3.5, random_state=0)
    np.testing.assert_allclose(np.linalg.norm(T[:, :2], axis=1), 1.0)
    np.testing.assert_allclose(np.linalg.norm(T[:, 2:], axis=1), 3.5)


def test_cli_circles_writes_table(tmp_path, capsys):
    rc = main(["circles", "--n", "2400", "--m", "100", "--repetitions", "1",
               "--methods", "LKFLGP,RBF GP", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "LKFLGP" in out and "paper" in out
    table = pd.read_csv(os.path.join(tmp_path, "circles_n2400_m100.csv"))
    assert set(table.method) == {"LKFLGP", "RBF GP"}
    lk = table.set_index("method").loc["LKFLGP", "error_mean"]
    rbf = table.set_index("method").loc["RBF GP", "error_mean"]
    assert lk < 5.0 and rbf > 20.0
    assert os.path.exists(os.path.join(tmp_path, "circles_covariance_n2400.png"))


@pytest.mark.parametrize("call, err, match", [
    (lambda: datasets.make_concentric_circles(100, n_circles=0), ValueError, "n_circles"),
    (lambda: datasets.make_sphere(10, dim=-1), ValueError, "dim"),
    (lambda: datasets.make_swiss_roll(10, noise=np.nan), ValueError, "noise must be"),
    (lambda: datasets.make_spiral(10, noise=-1.0), ValueError, "noise must be"),
    (lambda: datasets.make_s_curve(10, noise="0.1"), TypeError, "noise must be"),
    (lambda: datasets.make_helix(10, noise=np.inf), ValueError, "noise must be"),
    (lambda: datasets.make_helix(10, radius=-1.0), ValueError, "radius"),
    (lambda: datasets.make_helix(10, n_turns=0), ValueError, "n_turns"),
    (lambda: datasets.make_helix(10, pitch=np.nan), ValueError, "pitch must be finite"),
    (lambda: datasets.make_torus(10, major=-1.0), ValueError, "major"),
    (lambda: datasets.make_torus(10, major=1.0, minor=5.0), ValueError,
     "minor=5.0 must be smaller than major=1.0"),
    (lambda: datasets.make_stretched_torus(10, stretch=0), ValueError, "stretch"),
])
def test_generators_reject_bad_parameters(call, err, match):
    with pytest.raises(err, match=match):
        call()


@pytest.mark.parametrize("args, message", [
    (["--methods", "bogus"], "unknown method\\(s\\) 'bogus'; choose from RBF GP"),
    (["--repetitions", "0"], "--repetitions must be at least 1"),
    (["--n", "60", "--m", "100"], "--m \\(labels\\) must be at least 4 and below --n = 60"),
    (["--m", "0"], "--m \\(labels\\) must be at least 4"),
    (["--n", "0"], "--n must be at least 12"),
    (["--n", "120", "--m", "12"], "--n must be at least 600 for Nystrom-GLGP"),
])
def test_cli_circles_names_bad_arguments(tmp_path, capsys, args, message):
    """A bad argument of `flgp circles` is one line on stderr and exit status 2 (before:
    a traceback - a KeyError for an unknown method, pandas' for zero repetitions)."""
    import re

    rc = main(["circles", "--quiet", "--no-plot", "--out", str(tmp_path), "--repetitions",
               "1"] + args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and err.startswith("flgp circles: error: ")
    assert re.search(message, err)
    assert not any(tmp_path.iterdir())
