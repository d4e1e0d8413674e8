r"""The finite-element graph of a triangle surface mesh (a cortical surface such as
FreeSurfer's fsaverage, a sphere, a flat patch): the matrices of the SPDE approach
(Lindgren, Rue and Lindström 2011, Sec. 2.3 and App. A.2; R-INLA's ``inla.mesh.fem``,
whose ``g1`` and ``c0`` they are).

For a triangle ``T = (i, j, k)`` with corners ``x_i, x_j, x_k`` (world units, mm for a
brain surface), area ``|T| = ½ |(x_j - x_i) × (x_k - x_i)|`` and the cotangent of its angle
at ``k`` (the one opposite the edge ``ij``)::

    cot θ_k = (x_i - x_k) · (x_j - x_k) / (2 |T|),

* the **stiffness** ``G_ij = ∫ ∇φ_i · ∇φ_j`` of the piecewise-linear hat functions ``φ``
  is the cotangent Laplacian::

      G_ij = -½ (cot α_ij + cot β_ij)   (i ≠ j joined by an edge),
      G_ii = -Σ_{j ≠ i} G_ij,

  with ``α_ij, β_ij`` the two angles opposite the edge (a boundary edge has one term; an
  edge shared by more than two triangles, one term per triangle). ``G`` is symmetric, its
  rows sum to 0, and it is positive semi-definite whatever the triangles' shapes, since
  ``fᵀ G f = ∫ |∇f|²`` for the piecewise-linear interpolant of ``f``. Cotangent weights are
  scale-free (``G`` is dimensionless on a surface).

  **Obtuse triangles**: an angle above 90° has a negative cotangent, so an edge with
  ``α_ij + β_ij > π`` (a non-Delaunay edge; a boundary edge opposite an obtuse angle) gets
  ``G_ij > 0`` - a *negative* weight in :attr:`PointGraph.adjacency`. ``G`` stays PSD (it
  is still the FEM stiffness matrix) and the SPDE priors built from it stay valid, but
  ``C⁻¹ G`` is then not the generator of a random walk (no discrete maximum principle). A
  Delaunay mesh has no positive ``G_ij`` inside; a right angle gives a weight of exactly 0.
* the **mass** ``C̃_ii = ∫ φ_i = ⅓ Σ_{T ∋ i} |T|`` is the lumped (diagonal) mass of
  Lindgren et al. (``c0``), a third of the area of the triangles around each vertex; its
  sum is the mesh's area. ``C̃⁻¹ G`` approximates ``-Δ`` (Laplace-Beltrami) in
  ``1 / length²`` units: on a sphere of radius ``R`` its smallest eigenvalues approach
  ``l (l + 1) / R²``.

A mesh that falls apart into several pieces is allowed: the graph's pieces are those
of the mesh's edges (:meth:`PointGraph.pieces`), whatever the weights - an edge whose
cotangents cancel (weight 0) still joins its ends.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .point_graph import PointGraph

__all__ = ["mesh_graph"]

# a face whose area is below this fraction of its longest edge squared (height / longest
# edge < 2e-12) is degenerate: its cotangents would be ~1e12 or undefined
_AREA_RTOL = 1e-12


def _as_vertices(vertices) -> np.ndarray:
    try:
        V = np.asarray(vertices)
    except Exception as exc:   # ragged lists and the like
        raise ValueError(f"vertices must be an (n, 3) array of coordinates; numpy could not "
                         f"read them ({exc}).") from None
    if V.ndim == 2 and V.shape[0] == 3 and V.shape[1] != 3:
        raise ValueError(f"vertices must have shape (n, 3), one row per vertex; got "
                         f"{V.shape} - pass vertices.T.")
    if V.ndim != 2 or V.shape[1] != 3 or V.shape[0] < 3:
        raise ValueError(f"vertices must have shape (n, 3) with n >= 3 (x, y, z of each "
                         f"vertex); got {V.shape}.")
    if V.dtype == bool or not (np.issubdtype(V.dtype, np.integer)
                               or np.issubdtype(V.dtype, np.floating)):
        raise ValueError(f"vertices must hold real numbers (coordinates); got dtype "
                         f"{V.dtype}.")
    V = V.astype(np.float64)
    bad = ~np.all(np.isfinite(V), axis=1)
    if bad.any():
        raise ValueError(f"vertices must be finite; {int(bad.sum())} vertices hold NaN or "
                         f"inf (first: vertex {int(np.flatnonzero(bad)[0])}). Remove or "
                         f"repair them (and the faces using them).")
    return V


def _as_faces(faces, n: int) -> np.ndarray:
    try:
        F = np.asarray(faces)
    except Exception as exc:
        raise ValueError(f"faces must be an (f, 3) array of vertex indices; numpy could not "
                         f"read them ({exc}).") from None
    if F.ndim == 2 and F.shape[0] == 3 and F.shape[1] != 3:
        raise ValueError(f"faces must have shape (f, 3), one triangle per row; got "
                         f"{F.shape} - pass faces.T.")
    if F.ndim != 2 or F.shape[1] != 3 or F.shape[0] < 1:
        hint = (" Split each polygon into triangles first." if F.ndim == 2 and F.shape[1] > 3
                else "")
        raise ValueError(f"faces must have shape (f, 3) with f >= 1 (three vertex indices "
                         f"per triangle); got {F.shape}.{hint}")
    if F.dtype == bool or not (np.issubdtype(F.dtype, np.integer)
                               or np.issubdtype(F.dtype, np.floating)):
        raise ValueError(f"faces must hold integer vertex indices; got dtype {F.dtype}.")
    if not np.issubdtype(F.dtype, np.integer):
        if not np.all(np.isfinite(F)) or not np.all(F == np.round(F)):
            raise ValueError("faces must hold whole (integer) vertex indices; some are "
                             "fractional, NaN or inf.")
    F = F.astype(np.int64)
    out = (F < 0) | (F >= n)
    if out.any():
        rows = np.flatnonzero(out.any(axis=1))
        f0 = int(rows[0])
        hint = (" The indices look 1-based (as in MATLAB or R): pass faces - 1."
                if F.min() >= 1 and F.max() == n else "")
        raise ValueError(f"faces must index the {n} vertices (0 to {n - 1}); {rows.size} "
                         f"faces do not, the first being face {f0} = {F[f0].tolist()}."
                         f"{hint}")
    return F


def _drop_bad_faces(V: np.ndarray, F: np.ndarray):
    """Drop (with a warning) faces with a repeated vertex, zero area, or that repeat an
    earlier face; return the kept faces, their edge vectors and areas."""
    repeated = (F[:, 0] == F[:, 1]) | (F[:, 1] == F[:, 2]) | (F[:, 0] == F[:, 2])
    e0 = V[F[:, 2]] - V[F[:, 1]]           # edge opposite corner 0, etc.
    e1 = V[F[:, 0]] - V[F[:, 2]]
    e2 = V[F[:, 1]] - V[F[:, 0]]
    area = 0.5 * np.linalg.norm(np.cross(e2, -e1), axis=1)
    longest = np.maximum.reduce([np.einsum("ij,ij->i", e, e) for e in (e0, e1, e2)])
    flat = ~repeated & (area <= _AREA_RTOL * longest)
    # the same triangle twice (any order or orientation): keep the first
    S = np.sort(F, axis=1)
    order = np.lexsort((S[:, 2], S[:, 1], S[:, 0]))
    same = np.all(S[order[1:]] == S[order[:-1]], axis=1)
    twice = np.zeros(len(F), bool)
    twice[order[1:][same]] = True
    twice &= ~repeated
    bad = repeated | flat | twice
    if bad.all():
        raise ValueError(f"all {len(F)} faces are degenerate (a vertex repeated within the "
                         f"face, or zero area: three collinear or coincident corners); the "
                         f"mesh has no triangles to build a graph on. Check that vertices "
                         f"are (n, 3) coordinates and faces (f, 3) indices into them.")
    if bad.any():
        parts = [f"{int(m.sum())} {what}" for m, what in (
            (repeated, "with a vertex repeated"), (flat, "of zero area"),
            (twice & ~flat, "repeating an earlier face")) if m.any()]
        first = np.flatnonzero(bad)[:5].tolist()
        warnings.warn(f"mesh_graph: dropped {int(bad.sum())} degenerate faces of {len(F)} "
                      f"({', '.join(parts)}; first: {first}). Clean the mesh to silence "
                      f"this.", UserWarning, stacklevel=3)
        keep = ~bad
        F, e0, e1, e2, area = F[keep], e0[keep], e1[keep], e2[keep], area[keep]
    return F, (e0, e1, e2), area


def mesh_graph(vertices, faces) -> PointGraph:
    """The finite-element graph of a triangle mesh (see the module notes): cotangent
    stiffness ``G`` and lumped vertex areas ``C``.

    Parameters
    ----------
    vertices : array-like of float, shape (n, 3)
        Vertex coordinates (world units, e.g. mm), finite. nilearn:
        ``mesh.coordinates``.
    faces : array-like of int, shape (f, 3)
        Triangles as 0-based indices into ``vertices`` (any orientation). nilearn:
        ``mesh.faces``.

    Returns
    -------
    PointGraph
        ``kind="mesh"``, ``stiffness`` the cotangent Laplacian, ``mass`` a third of the area
        of the triangles around each vertex (sum = the mesh's area), ``points`` the
        vertices (float64), ``spacing`` the median edge length.

    Raises
    ------
    ValueError
        If ``vertices`` are not an (n, 3) array of finite reals; if ``faces`` are not an
        (f, 3) array of whole numbers, or index outside ``0 .. n - 1`` (the message names
        the first such face and the valid range, and spots 1-based indices); if every face
        is degenerate; or if a vertex lies on no (non-degenerate) face - an isolated
        vertex has no area, so no mass and no neighbours; remove it (the message says
        how) rather than give it an arbitrary mass.

    Warns
    -----
    UserWarning
        When degenerate faces - a vertex repeated within the face, zero area (collinear
        corners), or a copy of an earlier face - are dropped (the rest are kept).

    Notes
    -----
    Every vertex of an fsaverage pial, white, inflated or sphere mesh (medial wall
    included) lies on a face, so those build as they are; so does a mesh in several pieces.
    nilearn's ``"flat"`` fsaverage meshes leave the cut-out medial wall's vertices on no
    face (777 of fsaverage5's left ones): they raise, and build once those are removed as
    the message says. Vectorised: fsaverage5 (10,242 vertices, 20,480 faces) builds in
    about 20 ms.

    Examples
    --------
    >>> import numpy as np
    >>> V = np.array([[0., 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    >>> g = mesh_graph(V, [[0, 1, 2], [0, 2, 3]])     # a unit square, two right triangles
    >>> g.stiffness.toarray().round(12) + 0.0
    array([[ 1. , -0.5,  0. , -0.5],
           [-0.5,  1. , -0.5,  0. ],
           [ 0. , -0.5,  1. , -0.5],
           [-0.5,  0. , -0.5,  1. ]])
    >>> g.mass * 6, round(float(g.mass.sum()), 12), g.spacing
    (array([2., 1., 2., 1.]), 1.0, 1.0)
    """
    V = _as_vertices(vertices)
    n = V.shape[0]
    F = _as_faces(faces, n)
    F, (e0, e1, e2), area = _drop_bad_faces(V, F)

    used = np.zeros(n, bool)
    used[F.ravel()] = True
    if not used.all():
        lone = np.flatnonzero(~used)
        raise ValueError(
            f"{lone.size} of the {n} vertices lie on no (non-degenerate) face (first: "
            f"{lone[:5].tolist()}); such a vertex has no area, hence no mass and no "
            f"neighbours. Remove them and renumber the faces: used = np.unique(faces); "
            f"vertices, faces = vertices[used], np.searchsorted(used, faces) (and index "
            f"per-vertex data by used).")

    # cot of the angle at corner c, opposite edge e_c: (-e_a) · e_b / (2 |T|) with a, b the
    # other two edges, oriented so that both leave corner c
    two_area = 2.0 * area
    cot0 = -np.einsum("ij,ij->i", e1, e2) / two_area     # at corner 0: edge (1, 2)
    cot1 = -np.einsum("ij,ij->i", e2, e0) / two_area     # at corner 1: edge (2, 0)
    cot2 = -np.einsum("ij,ij->i", e0, e1) / two_area     # at corner 2: edge (0, 1)
    r = np.concatenate([F[:, 1], F[:, 2], F[:, 0]])
    c = np.concatenate([F[:, 2], F[:, 0], F[:, 1]])
    w = 0.5 * np.concatenate([cot0, cot1, cot2])
    W = sp.coo_matrix((np.r_[w, w], (np.r_[r, c], np.r_[c, r])), shape=(n, n)).tocsr()
    W.sum_duplicates()
    degree = np.asarray(W.sum(axis=1)).ravel()
    G = (sp.diags(degree) - W).tocsr()
    mass = np.bincount(F.ravel(), weights=np.repeat(area / 3.0, 3), minlength=n)

    # unique edges: the spacing, and the pieces (from the edges, not the weights)
    lo, hi = np.minimum(r, c), np.maximum(r, c)
    key = np.unique(lo * np.int64(n) + hi)
    ei, ej = key // n, key % n
    spacing = float(np.median(np.linalg.norm(V[ei] - V[ej], axis=1)))
    E = sp.coo_matrix((np.ones(key.size), (ei, ej)), shape=(n, n))
    pieces = connected_components(E, directed=False)
    return PointGraph(stiffness=G, mass=mass, points=V, kind="mesh", spacing=spacing,
                      _pieces=pieces)
