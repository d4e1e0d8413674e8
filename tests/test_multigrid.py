"""Classical AMG with sparsified coarse operators (flgp.precision.multigrid): the lumped
sparsification against its definition, the solves against a direct solve, the fallback
to Galerkin coarse operators, the complexity it saves on a k-NN graph."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from flgp.graph.knn import self_tuning_knn_graph
from flgp.precision import multigrid
from flgp.precision.multigrid import ClassicalMultigrid, sparsify_lumped


def _stiffness(n=1500, p=20, kappa2=1e-3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    g = self_tuning_knn_graph(X, 10)
    return (g.stiffness + kappa2 * sp.diags(g.mass)).tocsr()


def test_sparsify_lumped_against_its_definition():
    """Dropped: off-diagonal entries below `drop` times both rows' largest off-diagonal
    magnitude; each added to its row's diagonal (row sums kept, pattern symmetric)."""
    rng = np.random.default_rng(1)
    n = 60
    A = sp.random(n, n, density=0.2, random_state=2, data_rvs=lambda k: -rng.random(k))
    A = A + A.T
    A = A + sp.diags(np.asarray(-A.sum(1)).ravel() + 0.1)          # an M-matrix
    A = A.tolil()
    A[3, 7] = A[7, 3] = 0.02                                      # a positive pair too
    A = A.tocsr()
    out = sparsify_lumped(A, 0.3).toarray()
    D = A.toarray()
    off = D - np.diag(np.diag(D))
    largest = np.abs(off).max(1)
    kept = (np.abs(off) >= 0.3 * largest[:, None]) | (np.abs(off) >= 0.3 * largest[None, :])
    kept &= off != 0
    want = np.where(kept, off, 0.0)
    want += np.diag(np.diag(D) + np.where(~kept, off, 0.0).sum(1))
    np.testing.assert_allclose(out, want, atol=1e-14)
    np.testing.assert_allclose(out.sum(1), D.sum(1), atol=1e-12)
    np.testing.assert_array_equal(out != 0, (out != 0).T)
    assert (out != 0).sum() < (D != 0).sum()


@pytest.mark.parametrize("tol", [1e-10, 1e-3])
def test_multigrid_solves_against_a_direct_solve(tol):
    """A⁻¹B to the CG tolerance (float64 V-cycles at 1e-10, float32 ones at 1e-3): the
    relative error is of the order of the tolerance times A's conditioning on the
    residual, checked against spsolve."""
    A = _stiffness()
    rng = np.random.default_rng(0)
    B = rng.standard_normal((A.shape[0], 3))
    mg = ClassicalMultigrid(A, tol=tol)
    assert mg.dtype == (np.float32 if tol >= multigrid.FLOAT32_TOL else np.float64)
    X = mg.solve(B)
    exact = spla.spsolve(A.tocsc(), B)
    rel_residual = np.linalg.norm(A @ X - B, axis=0) / np.linalg.norm(B, axis=0)
    assert np.all(rel_residual <= tol * 1.0001)
    if tol < 1e-6:
        np.testing.assert_allclose(X, exact, rtol=1e-6, atol=1e-6 * np.abs(exact).max())
    assert mg.solve(B[:, 0]).shape == (A.shape[0],)


def test_sparsified_hierarchy_is_cheaper_on_a_knn_graph():
    """On a k-NN graph in 20 dimensions the Galerkin coarse operators fill in; the
    sparsified hierarchy holds fewer entries (operator complexity) and still converges."""
    A = _stiffness(3000)
    sparse = ClassicalMultigrid(A, tol=1e-8)
    galerkin = ClassicalMultigrid(A, tol=1e-8, drop=0.0)
    assert sparse.operator_complexity < galerkin.operator_complexity
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    np.testing.assert_allclose(sparse.solve(b), galerkin.solve(b), rtol=1e-5,
                               atol=1e-5 * np.abs(galerkin.solve(b)).max())


def test_indefinite_preconditioner_falls_back_to_galerkin(monkeypatch):
    """Should a sparsified coarse operator make the V-cycle indefinite, CG stops at a
    negative curvature and the solver rebuilds with Galerkin coarse operators: the answer
    is still the solve's (here the sparsified hierarchy is replaced by one of -A)."""
    A = _stiffness(800)
    real = multigrid._hierarchy
    built = []

    def hierarchy(M, drop):
        built.append(drop)
        return real(-M if drop > 0 else M, drop)

    monkeypatch.setattr(multigrid, "_hierarchy", hierarchy)
    mg = ClassicalMultigrid(A, tol=1e-10)
    b = np.random.default_rng(4).standard_normal(A.shape[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = mg.solve(b)
    assert not any("Indefinite" in str(w.message) for w in caught)   # handled, not shown
    assert built == [multigrid.COARSE_DROP, 0.0] and mg.drop == 0.0
    np.testing.assert_allclose(x, spla.spsolve(A.tocsc(), b), rtol=1e-6)


def test_columns_on_threads_equal_each_column_alone(monkeypatch):
    """Several columns are solved at once on threads: each equals its solve alone, bit
    for bit; an indefinite cycle met on the threads falls back to Galerkin for those
    columns (each then within the direct solve's tolerance), its warning not shown."""
    import torch

    A = _stiffness(800)
    B = np.random.default_rng(5).standard_normal((A.shape[0], 5))
    mg = ClassicalMultigrid(A, tol=1e-8)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        together = mg.solve(B)
        # up to 2 threads (cpu_threads): the columns were solved two at a time
        alone = np.column_stack([mg.solve(B[:, c]) for c in range(B.shape[1])])
        assert np.array_equal(together, alone)
        real = multigrid._hierarchy
        monkeypatch.setattr(multigrid, "_hierarchy",
                            lambda M, drop: real(-M if drop > 0 else M, drop))
        indefinite = ClassicalMultigrid(A, tol=1e-10)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            X = indefinite.solve(B)
    finally:
        torch.set_num_threads(threads)
    assert not any("Indefinite" in str(w.message) for w in caught)
    assert indefinite.drop == 0.0
    np.testing.assert_allclose(X, spla.spsolve(A.tocsc(), B), rtol=1e-6)


def test_bad_inputs_are_named():
    A = _stiffness(300)
    with pytest.raises(ValueError, match="square"):
        ClassicalMultigrid(A[:, :-1])
    with pytest.raises(ValueError, match="NaN or infinite"):
        bad = A.copy()
        bad.data[0] = np.nan
        ClassicalMultigrid(bad)
    with pytest.raises(ValueError, match="tol must be"):
        ClassicalMultigrid(A, tol=0.0)
    with pytest.raises(ValueError, match=r"drop must be a share in \[0, 1\)"):
        sparsify_lumped(A, 1.5)
    with pytest.raises(ValueError, match="one row per row of A"):
        ClassicalMultigrid(A).solve(np.ones(299))


def test_a_hierarchy_with_a_diagonal_added():
    """with_diagonal: every level's operator is the original plus the Galerkin product of
    the added diagonal (R_k ... D ... P_k), the solves are those of A + diag(d) (against
    a sparse direct solve) and converge in at most 1.5 times a new hierarchy's iterations,
    fewer than the original hierarchy needs for A + diag(d); the centred solve of a centred right-hand side stays centred and solves
    P (A + D) P x = b there."""
    import pyamg
    import scipy.sparse.linalg as spla

    from flgp.graph.knn import self_tuning_knn_graph
    from flgp.precision.matern import shifted_stiffness
    from flgp.precision.multigrid import ClassicalMultigrid

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 6))
    g = self_tuning_knn_graph(X, 10)
    S = shifted_stiffness(g, 1e-4).tocsr()
    d = np.zeros(S.shape[0])
    d[rng.choice(S.shape[0], 60, replace=False)] = 5.0
    base = ClassicalMultigrid(S, tol=1e-10, drop=0.0)
    new = base.with_diagonal(d)
    D = sp.diags(d.astype(np.float32)).tocsr()
    for old, lvl in zip(base.hierarchy.levels, new.hierarchy.levels):
        np.testing.assert_allclose((lvl.A - old.A).toarray(), D.toarray(), atol=1e-5)
        if hasattr(old, "P"):
            D = (old.R @ D @ old.P).tocsr()
    b = rng.standard_normal(S.shape[0])
    exact = spla.spsolve((S + sp.diags(d)).tocsc(), b)
    np.testing.assert_allclose(new.solve(b), exact, rtol=1e-7, atol=1e-7 * np.abs(exact).max())

    def iterations(solver):
        res = []
        pyamg.krylov.cg(solver.A, b, tol=1e-8, M=solver._preconditioner(), residuals=res)
        return len(res)
    fresh = ClassicalMultigrid(S + sp.diags(d), tol=1e-10, drop=0.0)
    stale = ClassicalMultigrid(S, tol=1e-10, drop=0.0)
    stale.A = new.A                                    # A + D with the hierarchy of A
    assert iterations(new) <= 1.5 * iterations(fresh)
    assert iterations(new) < iterations(stale)
    c = b - b.mean()
    x = new.solve(c, centred=True)
    assert abs(x.mean()) < 1e-12 * np.abs(x).max()
    r = (S + sp.diags(d)) @ x
    np.testing.assert_allclose(r - r.mean(), c, atol=1e-8 * np.abs(c).max())
    with pytest.raises(ValueError, match="one finite non-negative value a row"):
        base.with_diagonal(-d)
