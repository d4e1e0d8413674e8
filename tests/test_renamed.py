"""Names changed on 2026-11-27 (one word, one meaning; docs/architecture.md, "Vocabulary"):
the old public names still work for one release, with a FutureWarning, and objects
pickled under the old attribute names still load."""

import pickle

import numpy as np
import pytest

import flgp
from flgp.graph.lattice import lattice_graph
from flgp.spectral.eigenpairs import DenseVectorRows, Eigenpairs


@pytest.fixture(scope="module")
def two_piece_eigenpairs():
    V = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 3)))[0]
    return Eigenpairs(np.array([0.0, 0.0, 0.5]), V, n_pieces=2,
                      piece_labels=np.array([0, 0, 0, 1, 1, 1]))


def test_eigenpairs_component_names_are_the_pieces(two_piece_eigenpairs):
    ep = two_piece_eigenpairs
    assert ep.n_pieces == 2
    np.testing.assert_array_equal(ep.piece_sizes, [3, 3])
    with pytest.warns(FutureWarning, match="n_pieces"):
        assert ep.n_components == 2
    with pytest.warns(FutureWarning, match="piece_sizes"):
        np.testing.assert_array_equal(ep.component_sizes, ep.piece_sizes)
    with pytest.warns(FutureWarning, match="piece_labels"):
        np.testing.assert_array_equal(ep.component_labels, ep.piece_labels)
    with pytest.warns(FutureWarning, match="piece_rows"):
        np.testing.assert_array_equal(ep.component_rows([0, 4]), [0, 1])


def test_eigenpairs_old_keywords(two_piece_eigenpairs):
    ref = two_piece_eigenpairs
    with pytest.warns(FutureWarning, match="n_pieces"):
        ep = Eigenpairs(ref.eigenvalues, ref.eigenvectors, n_components=2,
                        component_labels=ref.piece_labels)
    assert ep.n_pieces == 2
    np.testing.assert_array_equal(ep.piece_sizes, ref.piece_sizes)
    with pytest.raises(TypeError, match="unexpected keyword"):
        Eigenpairs(ref.eigenvalues, ref.eigenvectors, n_component=2)


def test_objects_pickled_under_the_old_names_load(two_piece_eigenpairs):
    ep = two_piece_eigenpairs
    state = dict(ep.__dict__)
    state["n_components"] = state.pop("n_pieces")
    state["component_sizes"] = state.pop("piece_sizes")
    rows = DenseVectorRows.__new__(DenseVectorRows)
    rows.__setstate__({"_vectors": ep.eigenvectors, "_components": ep.piece_labels})
    state["vector_rows"] = rows
    old = Eigenpairs.__new__(Eigenpairs)
    old.__setstate__(state)
    assert old.n_pieces == 2 and old.piece_rows([5])[0] == 1
    np.testing.assert_array_equal(old.piece_sizes, [3, 3])


def test_a_fitted_estimator_pickled_under_the_old_names_loads():
    X, y = flgp.datasets.make_concentric_circles(300, random_state=0)
    semi = np.where(np.arange(300) % 10 == 0, y, -1)
    clf = flgp.FLGPClassifier(method="flgp", n_induced=60).fit(X, semi)
    # the layout of the time: the estimator held the heat kernel's eigenbasis itself
    state = dict(clf.__getstate__())
    fit = state.pop("_chosen_fit")
    state.update(_other_fit=None, _component_has_label=fit.eigenbasis.piece_has_label,
                 _reach=fit.eigenbasis.reach, _mixture=fit.mixture, _V_lab=fit.V_lab,
                 _spectral_prior=fit.spectral_prior)
    predictor = fit.predictor.__dict__.copy()
    predictor["spectrum"] = predictor.pop("spectral_prior")
    predictor["component_has_label"] = predictor.pop("piece_has_label")
    state["_predictor"] = type(fit.predictor).__new__(type(fit.predictor))
    state["_predictor"].__setstate__(predictor)
    old = flgp.FLGPClassifier.__new__(flgp.FLGPClassifier)
    old.__setstate__(state)
    np.testing.assert_array_equal(old.predict_proba(X[:20]), clf.predict_proba(X[:20]))
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict_proba(X[:20]), clf.predict_proba(X[:20]))


def test_point_graph_components_is_pieces():
    g = lattice_graph(np.argwhere(np.ones((3, 3, 1), bool)))
    with pytest.warns(FutureWarning, match="pieces"):
        n, labels = g.components()
    assert n == g.pieces()[0] == 1


def test_old_module_and_function_names():
    import importlib

    old = importlib.import_module("flgp.graph.components")
    with pytest.warns(FutureWarning, match="flgp.graph.pieces"):
        assert old.connected_pieces is flgp.graph.connected_pieces
    with pytest.warns(FutureWarning, match="Eigenvalues"):
        from flgp.spectral.families import Spectrum
    assert Spectrum is flgp.spectral.families.Eigenvalues
    with pytest.warns(FutureWarning, match="auto_diffusion_steps"):
        from flgp.embedding import auto_diffusion_time
    assert auto_diffusion_time is flgp.embedding.auto_diffusion_steps
    with pytest.raises(AttributeError):
        flgp.embedding.no_such_name


def test_a_fit_pickled_when_the_in_memory_driver_lived_in_blocks_loads():
    """The in-memory driver moved from flgp._chunks.blocks to flgp._chunks.drivers on
    2026-11-27 (fourth session); a fitted model's graph holds one. A pickle naming the old
    place (protocol 2 writes module and class as text) still loads and predicts."""
    X, y = flgp.datasets.make_concentric_circles(300, random_state=0)
    semi = np.where(np.arange(300) % 10 == 0, y, -1)
    clf = flgp.FLGPClassifier(method="flgp", n_induced=60).fit(X, semi)
    data = pickle.dumps(clf, protocol=2)
    new_place = b"flgp._chunks.drivers\nInMemoryBlocks\n"
    assert new_place in data                      # the fit does hold the driver
    old = pickle.loads(data.replace(new_place, b"flgp._chunks.blocks\nInMemoryBlocks\n"))
    np.testing.assert_array_equal(old.predict_proba(X[:20]), clf.predict_proba(X[:20]))
