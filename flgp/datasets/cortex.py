"""Cortical thickness on the fs_LR-32k (Conte69) surfaces, from the brainspace package.

Reads brainspace's HCP group-average thickness map (one value per vertex, left hemisphere
then right, NaN on the medial wall), the Conte69 midthickness surfaces (MNI mm) and their
cortex masks: a folded 2-d manifold in 3-d where Euclidean distance across a sulcus lies.
Files are located through the distribution's file list (:mod:`importlib.metadata`) and
read with numpy and nibabel, without importing brainspace (which pulls in VTK).
``pip install brainspace nibabel``.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

import numpy as np

from .fmri import _nibabel

__all__ = ["CorticalSurface", "load_conte69_thickness"]

BRAINSPACE_INSTALL = "pip install brainspace nibabel"
_FILES = {"thickness": "brainspace/datasets/matrices/main_group/conte69_32k_thickness.csv",
          "lh": "brainspace/datasets/surfaces/conte69_32k_lh.gii",
          "rh": "brainspace/datasets/surfaces/conte69_32k_rh.gii",
          "lh_mask": "brainspace/datasets/surfaces/conte69_32k_lh_mask.csv",
          "rh_mask": "brainspace/datasets/surfaces/conte69_32k_rh_mask.csv"}


@dataclass
class CorticalSurface:
    """Vertices of a cortical surface and a map on them.

    Attributes
    ----------
    vertices : ndarray (n, 3)
        Vertex coordinates (mm).
    values : ndarray (n,)
        The map (cortical thickness, mm).
    hemisphere : ndarray (n,) of str
        ``"lh"`` or ``"rh"``.
    vertex_index : ndarray (n,) of int
        Index of each vertex in its hemisphere's full 32,492-vertex mesh.
    faces : dict
        Per hemisphere, the mesh triangles ``(f, 3)`` in full-mesh vertex indices.
    """

    vertices: np.ndarray
    values: np.ndarray
    hemisphere: np.ndarray
    vertex_index: np.ndarray
    faces: dict


def _brainspace_files():
    try:
        dist = importlib.metadata.distribution("brainspace")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"the cortical-thickness data ship with brainspace, which is not "
                          f"installed; install it with `{BRAINSPACE_INSTALL}`. Nothing is "
                          f"downloaded.") from None
    found = {str(f).replace("\\", "/"): f for f in dist.files or ()}
    paths = {}
    for key, rel in _FILES.items():
        if rel not in found or not dist.locate_file(found[rel]).exists():
            raise ImportError(f"brainspace is installed but lacks {rel}; reinstall it with "
                              f"`{BRAINSPACE_INSTALL}`.")
        paths[key] = dist.locate_file(found[rel])
    return paths


def load_conte69_thickness(*, hemispheres=("lh", "rh"), cortex_only: bool = True):
    """HCP group-average cortical thickness on the Conte69 fs_LR-32k midthickness surface.

    Parameters
    ----------
    hemispheres : sequence of {"lh", "rh"}, default=("lh", "rh")
    cortex_only : bool, default=True
        Drop the medial wall (brainspace's cortex mask; the thickness is NaN there).

    Returns
    -------
    CorticalSurface
        ``vertices`` (n, 3) in mm, ``values`` (n,) thickness in mm, hemisphere labels,
        full-mesh vertex indices and triangles.
    """
    hemispheres = tuple(hemispheres)
    if not hemispheres or any(h not in ("lh", "rh") for h in hemispheres):
        raise ValueError(f"hemispheres must be a non-empty subset of ('lh', 'rh'); got "
                         f"{hemispheres!r}.")
    nib = _nibabel()
    paths = _brainspace_files()
    thickness = np.loadtxt(paths["thickness"], dtype=np.float64)
    verts, vals, hemi, index, faces = [], [], [], [], {}
    offset = 0
    for h in ("lh", "rh"):
        surf = nib.load(str(paths[h]))
        xyz = np.asarray(surf.agg_data("NIFTI_INTENT_POINTSET"), dtype=np.float64)
        tri = np.asarray(surf.agg_data("NIFTI_INTENT_TRIANGLE"), dtype=np.int64)
        nv = xyz.shape[0]
        t = thickness[offset:offset + nv]
        offset += nv
        if h not in hemispheres:
            continue
        keep = np.isfinite(t)
        if cortex_only:
            keep &= np.loadtxt(paths[f"{h}_mask"]) != 0
        idx = np.flatnonzero(keep)
        verts.append(xyz[idx])
        vals.append(t[idx])
        hemi.append(np.full(idx.size, h))
        index.append(idx)
        faces[h] = tri
    if offset != thickness.size:
        raise ValueError(f"brainspace's thickness map has {thickness.size} values; the two "
                         f"surfaces have {offset} vertices. Reinstall brainspace.")
    return CorticalSurface(vertices=np.vstack(verts), values=np.concatenate(vals),
                           hemisphere=np.concatenate(hemi), vertex_index=np.concatenate(index),
                           faces=faces)
