"""The lattice graph of a voxel mask: each voxel joined to its 6, 18 or 26 grid neighbours
inside the mask, read off the image grid.

The graph Laplacian is the finite-difference ``-Δ`` in world units: with 6 neighbours a
neighbour at distance ``h`` weighs ``1 / h²`` (the 7-point stencil); with 18 or 26, an
offset of world vector ``E`` weighs ``c / |E|²``, ``c`` such that ``½ Σ_e w_e E Eᵀ`` has
trace 3 (the identity on a cubic grid). Mass 1 per voxel.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.sparse as sp

from .point_graph import PointGraph

__all__ = ["lattice_graph", "CONNECTIVITIES"]

CONNECTIVITIES = (6, 18, 26)

# Neighbours are read off a dense index of the voxels' bounding box while it holds at most
# 8 cells a voxel plus 2**20; a sparser set is looked up in the voxels' sorted keys
# (O(n log n) whatever the box). Keys are int64: a box above 2**62 cells is an error.
_DENSE_CELLS_PER_VOXEL = 8
_DENSE_EXTRA_CELLS = 2 ** 20
_MAX_CELLS = 2 ** 62


def _offsets(connectivity: int) -> np.ndarray:
    """Half of the stencil's offsets (one of each ``±e`` pair)."""
    out = []
    for e in itertools.product((-1, 0, 1), repeat=3):
        k = sum(abs(v) for v in e)
        if k == 0 or e < (0, 0, 0):
            continue
        if k == 1 or (k == 2 and connectivity >= 18) or (k == 3 and connectivity == 26):
            out.append(e)
    return np.array(out, dtype=np.int64)


def lattice_graph(ijk, affine=None, *, connectivity: int = 6) -> PointGraph:
    """The lattice graph of the voxels ``ijk`` (see the module notes).

    Parameters
    ----------
    ijk : array-like of int, shape (n, 3)
        Voxel indices, distinct (e.g. ``np.argwhere(mask)``).
    affine : ndarray (4, 4), optional
        Voxel-to-world transform (NIfTI's): the points are ``affine @ [i, j, k, 1]`` and
        the weights use its voxel sizes. Default: the identity (unit voxels).
    connectivity : {6, 18, 26}, default=6
        Face, face + edge, or face + edge + corner neighbours.

    Returns
    -------
    PointGraph
        ``kind="lattice"``, mass 1 per voxel, ``spacing`` the smallest voxel size. Voxels
        with no neighbour in ``ijk`` are pieces of their own (:meth:`PointGraph.pieces`).

    Raises
    ------
    ValueError
        A malformed ``ijk`` or ``affine``, a voxel given twice, or a bounding box of more
        than ``2**62`` cells.

    Examples
    --------
    >>> import numpy as np
    >>> g = lattice_graph(np.argwhere(np.ones((3, 3, 3), bool)))
    >>> g.n_nodes, int(g.adjacency.nnz // 2)
    (27, 54)
    """
    ijk = np.asarray(ijk)
    if ijk.ndim != 2 or ijk.shape[1] != 3 or ijk.shape[0] < 1:
        raise ValueError(f"ijk must have shape (n, 3) with n >= 1; got {ijk.shape}.")
    if not np.issubdtype(ijk.dtype, np.integer):
        if not np.all(np.isfinite(ijk)) or not np.all(ijk == np.round(ijk)):
            raise ValueError("ijk must hold whole voxel indices.")
        ijk = ijk.astype(np.int64)
    ijk = ijk.astype(np.int64)
    if connectivity not in CONNECTIVITIES:
        raise ValueError(f"connectivity must be one of {CONNECTIVITIES}; got "
                         f"{connectivity!r}.")
    affine = np.eye(4) if affine is None else np.asarray(affine, dtype=np.float64)
    if affine.shape != (4, 4) or not np.all(np.isfinite(affine)):
        raise ValueError(f"affine must be a finite 4 x 4 matrix; got shape {affine.shape}.")
    M = affine[:3, :3]
    if abs(np.linalg.det(M)) < 1e-12 * max(np.abs(M).max(), 1e-300) ** 3:
        raise ValueError("the affine's 3 x 3 part is singular: voxels have no volume.")
    n = ijk.shape[0]
    lo = ijk.min(axis=0)
    # the box's sides in Python integers: far-apart indices overflow int64 differences
    shape = tuple(int(h) - int(l) + 1 for h, l in zip(ijk.max(axis=0), lo))
    cells = math.prod(shape)
    if cells > _MAX_CELLS:
        raise ValueError(f"the voxels' bounding box is {' x '.join(map(str, shape))} voxels, "
                         f"more than 2**62 cells: their indices cannot be keyed as int64. "
                         f"Check that ijk holds voxel indices (e.g. np.argwhere(mask)), not "
                         f"coordinates.")
    local = ijk - lo
    flat = np.ravel_multi_index(local.T, shape)
    order = np.argsort(flat, kind="stable")
    keys = flat[order]                                  # sorted, for the duplicates too
    if np.any(keys[1:] == keys[:-1]):
        raise ValueError("ijk holds a voxel more than once.")
    if cells <= _DENSE_CELLS_PER_VOXEL * n + _DENSE_EXTRA_CELLS:
        index = np.full(cells, -1, dtype=np.int64)
        index[flat] = np.arange(n)

        def node_of(key):
            return index[key]
    else:
        def node_of(key):
            pos = np.minimum(np.searchsorted(keys, key), n - 1)
            return np.where(keys[pos] == key, order[pos], -1)
    offsets = _offsets(connectivity)
    world = offsets @ M.T                                   # (k, 3) world offsets
    sq = np.einsum("ij,ij->i", world, world)
    weights = 1.0 / sq
    if connectivity != 6:
        # ½ Σ over the full stencil (both signs) of w E Eᵀ = Σ over the half stencil
        S = (world * weights[:, None]).T @ world
        weights = weights * 3.0 / np.trace(S)
    rows, cols, vals = [], [], []
    for e, w in zip(offsets, weights):
        nb = local + e
        ok = np.all((nb >= 0) & (nb < np.asarray(shape)), axis=1)
        j = np.full(n, -1, dtype=np.int64)
        j[ok] = node_of(np.ravel_multi_index(nb[ok].T, shape))
        keep = j >= 0
        rows.append(np.flatnonzero(keep))
        cols.append(j[keep])
        vals.append(np.full(int(keep.sum()), w))
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    W = sp.coo_matrix((np.r_[v, v], (np.r_[r, c], np.r_[c, r])), shape=(n, n)).tocsr()
    degree = np.asarray(W.sum(axis=1)).ravel()
    G = (sp.diags(degree) - W).tocsr()
    points = ijk @ M.T + affine[:3, 3]
    spacing = float(np.sqrt((M * M).sum(axis=0)).min())
    return PointGraph(stiffness=G, mass=np.ones(n), points=points, kind="lattice",
                      spacing=spacing)
