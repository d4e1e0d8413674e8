"""The finite-element graph of a triangle mesh (flgp.graph.mesh.mesh_graph): cotangent
stiffness and lumped mass against closed forms, an element-by-element P1 assembly, linear
precision, the sphere's spectrum, and the bad inputs."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh
from scipy.spatial import ConvexHull, Delaunay

from flgp.graph.mesh import mesh_graph


# --------------------------------------------------------------------------- meshes

def grid_mesh(nx, ny, hx=1.0, hy=1.0):
    """A flat nx x ny grid (vertex (i, j) -> i * ny + j at (i hx, j hy, 0)), each cell cut
    by its diagonal from (i, j) to (i + 1, j + 1): right triangles with legs hx, hy."""
    i, j = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    V = np.c_[i.ravel() * hx, j.ravel() * hy, np.zeros(nx * ny)]
    ci, cj = np.meshgrid(np.arange(nx - 1), np.arange(ny - 1), indexing="ij")
    a = (ci * ny + cj).ravel()                       # (i, j)
    b, c, d = a + ny, a + ny + 1, a + 1              # (i+1, j), (i+1, j+1), (i, j+1)
    F = np.r_[np.c_[a, b, c], np.c_[a, c, d]]
    return V, F


def icosphere(level, radius=1.0):
    """An icosahedron's faces split ``level`` times into four, projected on a sphere."""
    p = (1 + 5 ** 0.5) / 2
    V = np.array([[-1, p, 0], [1, p, 0], [-1, -p, 0], [1, -p, 0], [0, -1, p], [0, 1, p],
                  [0, -1, -p], [0, 1, -p], [p, 0, -1], [p, 0, 1], [-p, 0, -1], [-p, 0, 1]],
                 float)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    F = ConvexHull(V).simplices
    for _ in range(level):
        V = list(V)
        mid = {}

        def midpoint(a, b):
            key = (min(a, b), max(a, b))
            if key not in mid:
                m = V[a] + V[b]
                V.append(m / np.linalg.norm(m))
                mid[key] = len(V) - 1
            return mid[key]

        new = []
        for a, b, c in F:
            ab, bc, ca = midpoint(a, b), midpoint(b, c), midpoint(c, a)
            new += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        V, F = np.array(V), np.array(new)
    return radius * V, F


def p1_assembly(V, F):
    """Stiffness and lumped mass assembled triangle by triangle from the gradients of the
    barycentric coordinates (pseudo-inverse of the edge matrix): no cotangents."""
    n = len(V)
    K = np.zeros((n, n))
    M = np.zeros(n)
    for f in F:
        X = V[f]
        D = np.c_[X[1] - X[0], X[2] - X[0]]          # 3 x 2
        area = 0.5 * np.linalg.norm(np.cross(D[:, 0], D[:, 1]))
        P = np.linalg.pinv(D)                        # rows: grad phi_1, grad phi_2
        grads = np.r_[-(P[0] + P[1])[None], P]       # 3 x 3
        K[np.ix_(f, f)] += area * grads @ grads.T
        M[f] += area / 3
    return K, M


def boundary_vertices(F):
    """Vertices on an edge that belongs to one face only."""
    E = np.sort(np.r_[F[:, [0, 1]], F[:, [1, 2]], F[:, [2, 0]]], axis=1)
    edges, counts = np.unique(E, axis=0, return_counts=True)
    return np.unique(edges[counts == 1])


def check_graph(g):
    G = g.stiffness
    assert sp.issparse(G) and G.format == "csr"
    assert abs(G - G.T).max() == 0.0
    np.testing.assert_allclose(np.asarray(G.sum(axis=1)).ravel(), 0.0,
                               atol=1e-12 * abs(G).max())
    assert np.all(g.mass > 0) and g.kind == "mesh"


# --------------------------------------------------------------------------- (1) closed form

def test_flat_right_triangle_grid_matches_the_five_point_stencil():
    """Legs hx, hy: the angle opposite an x-edge has cot = hy / hx, that opposite a y-edge
    hx / hy, and the right angle (opposite the diagonal) 0. So G = (hy/hx) T_x (x) D_y +
    (hx/hy) D_x (x) T_y with T the path Laplacian and D = diag(1/2, 1, ..., 1, 1/2) (an edge
    on the boundary has one triangle), and C = hx hy inside: C^-1 G is the 5-point
    finite-difference -Laplacian inside."""
    nx, ny, hx, hy = 7, 5, 1.5, 0.7
    V, F = grid_mesh(nx, ny, hx, hy)
    g = mesh_graph(V, F)
    check_graph(g)

    def path(m):
        T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1]).toarray()
        T[0, 0] = T[-1, -1] = 1.0
        D = np.eye(m)
        D[0, 0] = D[-1, -1] = 0.5
        return T, D

    Tx, Dx = path(nx)
    Ty, Dy = path(ny)
    G_ref = hy / hx * np.kron(Tx, Dy) + hx / hy * np.kron(Dx, Ty)
    np.testing.assert_allclose(g.stiffness.toarray(), G_ref, atol=1e-12)

    # lumped mass: a third of the triangles' areas (each hx hy / 2) around each vertex
    C = g.mass.reshape(nx, ny) / (hx * hy)
    np.testing.assert_allclose(C[1:-1, 1:-1], 1.0, rtol=1e-12)      # six triangles
    for edge in (C[1:-1, 0], C[1:-1, -1], C[0, 1:-1], C[-1, 1:-1]):
        np.testing.assert_allclose(edge, 0.5, rtol=1e-12)            # three
    np.testing.assert_allclose([C[0, 0], C[-1, -1]], 1 / 3, rtol=1e-12)  # two (diagonal)
    np.testing.assert_allclose([C[-1, 0], C[0, -1]], 1 / 6, rtol=1e-12)  # one

    # inside, C^-1 G f is the 5-point -Laplacian of f
    f = np.random.default_rng(0).standard_normal((nx, ny))
    lap = ((2 * f[1:-1, 1:-1] - f[2:, 1:-1] - f[:-2, 1:-1]) / hx ** 2
           + (2 * f[1:-1, 1:-1] - f[1:-1, 2:] - f[1:-1, :-2]) / hy ** 2)
    Lf = (g.operator() @ f.ravel()).reshape(nx, ny)
    np.testing.assert_allclose(Lf[1:-1, 1:-1], lap, rtol=1e-10, atol=1e-10)
    # median edge: 28 y-edges (0.7) < 30 x-edges (1.5) < 24 diagonals (1.66)
    assert g.spacing == pytest.approx(hx)
    assert g.pieces()[0] == 1


def test_curved_random_mesh_matches_an_element_by_element_p1_assembly(rng):
    """A Delaunay mesh of random points lifted onto z = sin x cos y (obtuse triangles,
    a curved surface, random orientations): G and C equal the stiffness and lumped mass
    assembled from the barycentric gradients of each triangle."""
    xy = rng.uniform(0, 3, (120, 2))
    F = Delaunay(xy).simplices
    flip = rng.random(len(F)) < 0.5
    F[flip] = F[flip][:, ::-1]                       # orientation must not matter
    V = np.c_[xy, np.sin(xy[:, 0]) * np.cos(xy[:, 1])]
    g = mesh_graph(V, F)
    check_graph(g)
    K, M = p1_assembly(V, F)
    np.testing.assert_allclose(g.stiffness.toarray(), K, atol=1e-10 * abs(K).max())
    np.testing.assert_allclose(g.mass, M, rtol=1e-12)
    edges = np.unique(np.sort(np.r_[F[:, :2], F[:, 1:], F[:, [2, 0]]], axis=1), axis=0)
    assert g.spacing == pytest.approx(np.median(np.linalg.norm(V[edges[:, 0]]
                                                               - V[edges[:, 1]], axis=1)))


def test_obtuse_angles_give_positive_off_diagonal_but_a_psd_stiffness():
    """A thin rhombus cut along its long diagonal: both angles opposite that diagonal are
    obtuse (about 147 degrees), so its G entry is positive; G stays PSD with one zero
    eigenvalue, and the piece stays one component."""
    V = np.array([[-1.0, 0, 0], [0, -0.3, 0], [1, 0, 0], [0, 0.3, 0]])
    g = mesh_graph(V, [[0, 1, 2], [0, 2, 3]])
    G = g.stiffness.toarray()
    # the angle at (0, ±0.3) is 2t with cot t = 0.3: cot 2t = (0.3² - 1) / (2 * 0.3)
    cot = (0.3 ** 2 - 1) / (2 * 0.3)
    assert G[0, 2] == pytest.approx(-0.5 * 2 * cot, rel=1e-12) and G[0, 2] > 0
    assert g.adjacency.toarray()[0, 2] < 0
    ev = np.linalg.eigvalsh(G)
    assert ev[0] > -1e-12 and ev[1] > 1e-3
    assert g.pieces()[0] == 1


# --------------------------------------------------------------------------- (2) linear

def test_linear_functions_are_in_the_kernel_inside_a_tilted_jittered_grid(rng):
    """Linear precision: G f = 0 at every interior vertex for f linear, on a jittered grid
    (obtuse triangles) rotated into a tilted plane of R^3 - not at the boundary."""
    V, F = grid_mesh(12, 10, 1.0, 1.3)
    inner = np.setdiff1d(np.arange(len(V)), boundary_vertices(F))
    V[inner, :2] += rng.uniform(-0.3, 0.3, (inner.size, 2))
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V = V @ R.T + [10.0, -4.0, 7.0]
    g = mesh_graph(V, F)
    check_graph(g)
    assert np.any(g.stiffness.toarray()[np.triu_indices(len(V), 1)] > 1e-3)  # obtuse
    for a in rng.standard_normal((3, 3)):
        f = V @ a + 2.5
        Gf = g.stiffness @ f
        np.testing.assert_allclose(Gf[inner], 0.0, atol=1e-10 * np.abs(f).max())
        assert np.abs(Gf[boundary_vertices(F)]).max() > 1e-2


def test_linear_functions_are_in_the_kernel_inside_a_delaunay_mesh(rng):
    xy = rng.uniform(-5, 5, (300, 2))
    F = Delaunay(xy).simplices
    V = np.c_[xy, np.zeros(len(xy))]
    g = mesh_graph(V, F)
    inner = np.setdiff1d(np.arange(len(V)), boundary_vertices(F))
    f = 3.0 * V[:, 0] - 1.7 * V[:, 1] + 4.0
    np.testing.assert_allclose((g.stiffness @ f)[inner], 0.0, atol=1e-10)
    # exact energy of linear functions: u^T G v = ∫ ∇u · ∇v = (a · b) * area
    a, b = rng.standard_normal((2, 3)) * [1, 1, 0]
    area = ConvexHull(xy).volume
    assert (V @ a) @ (g.stiffness @ (V @ b)) == pytest.approx((a @ b) * area, rel=1e-10)
    assert g.mass.sum() == pytest.approx(area, rel=1e-12)


# --------------------------------------------------------------------------- (3, 4) sphere

def sphere_spectrum(level, R, k=10):
    g = mesh_graph(*icosphere(level, R))
    lam, vec = eigsh(g.stiffness.tocsc(), k=k, M=sp.diags(g.mass).tocsc(), sigma=-1e-3 / R ** 2,
                     which="LM")
    order = np.argsort(lam)
    return g, lam[order], vec[:, order]


def test_sphere_spectrum_is_l_l_plus_1_over_r_squared():
    """Icosphere (642 vertices), R = 50: the generalised problem G v = λ C v has one zero
    eigenvalue, then 2 / R² three times (l = 1, eigenvectors spanned by x, y, z), 6 / R²
    five times (l = 2) and 12 / R² next (l = 3); a finer icosphere is closer."""
    R = 50.0
    g, lam, vec = sphere_spectrum(3, R)
    check_graph(g)
    assert abs(lam[0]) < 1e-8 / R ** 2
    np.testing.assert_allclose(lam[1:4] * R ** 2, 2.0, rtol=0.01)
    np.testing.assert_allclose(lam[4:9] * R ** 2, 6.0, rtol=0.01)
    assert lam[9] * R ** 2 == pytest.approx(12.0, rel=0.03)
    # the l = 1 eigenvectors span the coordinate functions (C-orthogonal projection)
    U, X, C = vec[:, 1:4], g.points - g.points.mean(axis=0), g.mass[:, None]
    coef = np.linalg.solve(U.T @ (C * U), U.T @ (C * X))
    assert np.linalg.norm(X - U @ coef) < 1e-3 * np.linalg.norm(X)
    assert g.pieces()[0] == 1
    _, fine, _ = sphere_spectrum(4, R)
    assert np.all(np.abs(fine[4:9] * R ** 2 - 6) < np.abs(lam[4:9] * R ** 2 - 6))


def test_total_mass_is_the_area():
    V, F = grid_mesh(9, 6, 0.5, 2.0)
    assert mesh_graph(V, F).mass.sum() == pytest.approx(8 * 0.5 * 5 * 2.0, rel=1e-12)
    R = 3.0
    V, F = icosphere(3, R)
    g = mesh_graph(V, F)
    # Heron's formula, triangle by triangle
    a, b, c = (np.linalg.norm(V[F[:, i]] - V[F[:, j]], axis=1) for i, j in
               ((0, 1), (1, 2), (2, 0)))
    s = (a + b + c) / 2
    heron = np.sqrt(s * (s - a) * (s - b) * (s - c)).sum()
    assert g.mass.sum() == pytest.approx(heron, rel=1e-10)
    # inscribed polyhedron: slightly less than the sphere
    assert 0.99 * 4 * np.pi * R ** 2 < g.mass.sum() < 4 * np.pi * R ** 2


def test_pieces_are_components():
    V1, F1 = grid_mesh(3, 3)
    V2, F2 = icosphere(1)
    V = np.r_[V1, V2 + 10.0]
    F = np.r_[F1, F2 + len(V1)]
    g = mesh_graph(V, F)
    k, labels = g.pieces()
    assert k == 2
    assert len(set(labels[:len(V1)])) == 1 and len(set(labels[len(V1):])) == 1
    assert labels[0] != labels[-1]
    assert g.stiffness[:len(V1), len(V1):].nnz == 0


# --------------------------------------------------------------------------- (5) bad inputs

SQUARE_V = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
SQUARE_F = np.array([[0, 1, 2], [0, 2, 3]])


@pytest.mark.parametrize("vertices, faces, match", [
    (SQUARE_V[:, :2], SQUARE_F, r"vertices must have shape \(n, 3\)"),
    (np.zeros((3, 5)), SQUARE_F, r"pass vertices\.T"),
    (SQUARE_V[:2], [[0, 1, 1]], r"n >= 3"),
    (np.where(np.arange(12).reshape(4, 3) == 4, np.nan, SQUARE_V), SQUARE_F,
     r"vertices must be finite; 1 vertices.*vertex 1"),
    (np.full((4, 3), "a"), SQUARE_F, r"vertices must hold real numbers"),
    (SQUARE_V.astype(bool), SQUARE_F, r"vertices must hold real numbers"),
    (SQUARE_V, [[0, 1, 2, 3]], r"faces must have shape \(f, 3\).*Split each polygon"),
    (SQUARE_V, np.zeros((0, 3), int), r"f >= 1"),
    (SQUARE_V, [[0, 1, 2.5]], r"whole \(integer\) vertex indices"),
    (SQUARE_V, [["0", "1", "2"]], r"faces must hold integer vertex indices"),
    (SQUARE_V, [[0, 1, 2], [0, 2, 4]],
     r"faces must index the 4 vertices \(0 to 3\); 1 faces do not, the first being face 1 "
     r"= \[0, 2, 4\]"),
    (SQUARE_V, [[0, -1, 2]], r"\(0 to 3\).*face 0"),
    (SQUARE_V, SQUARE_F + 1, r"1-based.*pass faces - 1"),
])
def test_bad_inputs_raise(vertices, faces, match):
    with pytest.raises(ValueError, match=match):
        mesh_graph(vertices, faces)


def test_transposed_faces_hint():
    V, F = grid_mesh(4, 4)
    with pytest.raises(ValueError, match=r"pass faces\.T"):
        mesh_graph(V, F.T)


def test_all_degenerate_faces_raise():
    V = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]])   # collinear
    with pytest.raises(ValueError, match=r"all 3 faces are degenerate"):
        mesh_graph(V, [[0, 1, 2], [1, 2, 3], [0, 0, 1]])


def test_degenerate_and_repeated_faces_are_dropped_with_a_warning():
    V = np.r_[SQUARE_V, [[2.0, 0, 0]]]               # vertex 4 collinear with 0 and 1
    F = np.r_[SQUARE_F, [[0, 0, 2], [0, 1, 4], [2, 1, 0]]]
    with pytest.warns(UserWarning, match=r"dropped 3 degenerate faces of 5 \(1 with a vertex "
                      r"repeated, 1 of zero area, 1 repeating an earlier face; first: "
                      r"\[2, 3, 4\]\)"):
        with pytest.raises(ValueError, match=r"1 of the 5 vertices lie on no"):
            mesh_graph(V, F)                          # vertex 4 was only on the flat face
    with pytest.warns(UserWarning, match=r"dropped 2 degenerate faces of 4"):
        g = mesh_graph(SQUARE_V, np.r_[SQUARE_F, [[1, 1, 3], [3, 2, 0]]])
    ref = mesh_graph(SQUARE_V, SQUARE_F)
    np.testing.assert_allclose(g.stiffness.toarray(), ref.stiffness.toarray())
    np.testing.assert_allclose(g.mass, ref.mass)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mesh_graph(SQUARE_V, SQUARE_F)                # a clean mesh warns nothing


def test_isolated_vertices_raise_with_a_fix():
    V = np.r_[SQUARE_V, [[5.0, 5, 5], [6, 6, 6]]]
    with pytest.raises(ValueError, match=r"2 of the 6 vertices lie on no \(non-degenerate\) "
                       r"face \(first: \[4, 5\]\).*np\.unique\(faces\)"):
        mesh_graph(V, SQUARE_F)
    # the suggested fix works
    used = np.unique(SQUARE_F)
    g = mesh_graph(V[used], np.searchsorted(used, SQUARE_F))
    assert g.n_nodes == 4


# --------------------------------------------------------------------------- (6) fsaverage5

def test_fsaverage5_meshes():
    pytest.importorskip("nilearn")
    from nilearn import datasets

    fs = datasets.load_fsaverage("fsaverage5")     # ships with nilearn: no download
    pial = fs["pial"].parts["left"]
    g = mesh_graph(pial.coordinates, pial.faces)
    check_graph(g)
    assert g.n_nodes == 10242 and g.stiffness.shape == (10242, 10242)
    assert g.pieces()[0] == 1
    assert np.all(g.mass > 0)
    assert 1.0 < g.spacing < 6.0                      # mm
    assert 5e4 < g.mass.sum() < 1.2e5                 # a hemisphere's pial area, mm²
    sphere = fs["sphere"].parts["left"]
    R = np.linalg.norm(sphere.coordinates, axis=1).mean()
    gs = mesh_graph(sphere.coordinates, sphere.faces)
    assert gs.mass.sum() == pytest.approx(4 * np.pi * R ** 2, rel=2e-3)
    # the flat map leaves the medial wall's vertices on no face: a clear error, and the
    # fix it suggests builds
    flat = fs["flat"].parts["left"]
    with pytest.raises(ValueError, match=r"of the 10242 vertices lie on no"):
        mesh_graph(flat.coordinates, flat.faces)
    used = np.unique(flat.faces)
    gf = mesh_graph(flat.coordinates[used], np.searchsorted(used, flat.faces))
    assert gf.n_nodes == used.size < 10242
