r"""The finite-element graph of a triangle surface mesh (e.g. FreeSurfer's fsaverage):
the matrices ``g1`` and ``c0`` of the SPDE approach (Lindgren, Rue and Lindström 2011,
Sec. 2.3 and App. A.2; R-INLA's ``inla.mesh.fem``).

* **stiffness** ``G_ij = ∫ ∇φ_i · ∇φ_j`` of the hat functions, the cotangent Laplacian::

      G_ij = -½ (cot α_ij + cot β_ij)   (i ≠ j joined by an edge),
      G_ii = -Σ_{j ≠ i} G_ij,

  ``α_ij, β_ij`` the angles opposite the edge (one term per adjacent triangle). ``G`` is
  symmetric, scale-free and PSD (``fᵀ G f = ∫ |∇f|²``) whatever the triangles. An edge
  opposite obtuse angles (``α_ij + β_ij > π``, non-Delaunay) gets ``G_ij > 0``, a
  negative weight in :attr:`PointGraph.adjacency`: the SPDE priors stay valid, but
  ``C⁻¹ G`` is then not a random-walk generator.
* **mass** ``C_ii = ∫ φ_i = ⅓ Σ_{T ∋ i} |T|`` (lumped); its sum is the mesh's area.
  ``C⁻¹ G`` approximates ``-Δ`` (Laplace-Beltrami) in ``1 / length²``.

The graph's pieces are those of the mesh's edges (:meth:`PointGraph.pieces`), whatever
the weights: an edge of weight 0 still joins its ends.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .point_graph import PointGraph

__all__ = ["mesh_graph"]

# a face whose area is below this fraction of its longest edge squared is degenerate (its
# cotangents would be ~1e12 or undefined)
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
    """The finite-element graph of a triangle mesh (see the module notes).

    Parameters
    ----------
    vertices : array-like of float, shape (n, 3)
        Finite vertex coordinates (world units, e.g. mm; nilearn: ``mesh.coordinates``).
    faces : array-like of int, shape (f, 3)
        Triangles as 0-based indices into ``vertices``, any orientation (nilearn:
        ``mesh.faces``).

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
        (f, 3) array of whole numbers indexing ``0 .. n - 1`` (1-based indices are
        spotted); if every face is degenerate; or if a vertex lies on no face (it would
        have no mass: remove it, as the message says; nilearn's ``"flat"`` fsaverage
        meshes need this for the medial wall).

    Warns
    -----
    UserWarning
        When degenerate faces (a repeated vertex, zero area, a copy of an earlier face)
        are dropped.

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

    # cot of the angle at corner c (opposite edge e_c) = (-e_a) · e_b / (2 |T|), a and b the
    # other two edges
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
