"""Voxels of a NIfTI statistical map as a point cloud, and predictions back to NIfTI.

He et al. (FLGP, Sec. 5.3) regress activation intensities on the voxels of an fMRI
activation region (``|statistic| > 1.96``) in MNI millimetre coordinates.
:func:`load_voxels` turns a map (and optional mask) into ``(coordinates in mm, values)``;
:meth:`Voxels.to_nifti` writes values back on the map's grid. Needs nibabel
(``pip install "flgp[fmri]"``), imported only when used.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

import numpy as np

from .._validation import check_positive

__all__ = ["Voxels", "load_voxels", "voxels_to_nifti"]

FMRI_INSTALL = 'pip install "flgp[fmri]"  (or: pip install nibabel)'


def _nibabel():
    try:
        import nibabel
    except ImportError as exc:
        raise ImportError(f"NIfTI input and output need nibabel, the 'fmri' extra of flgp; "
                          f"install it with `{FMRI_INSTALL}`.") from exc
    return nibabel


# what nibabel raises on a damaged file: truncated gzip (EOFError), corrupt bytes
# (zlib.error, gzip.BadGzipFile), a refused header (ImageFileError, a ValueError), OSError
_READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)


def _unreadable(name, source, exc) -> ValueError:
    return ValueError(f"{name} {source!r} cannot be read as a NIfTI image "
                      f"({type(exc).__name__}: {exc}); check that the file is complete "
                      f"and not damaged (e.g. gzip -t for a .nii.gz).")


def as_nifti(img, name):
    nib = _nibabel()
    if isinstance(img, (str, os.PathLike)):
        path = os.fspath(img)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name} {path!r}: no such file.")
        try:
            return nib.load(path)
        except _READ_ERRORS + (nib.filebasedimages.ImageFileError,) as exc:
            raise _unreadable(name, path, exc) from exc
    if hasattr(img, "affine") and hasattr(img, "get_fdata"):
        return img
    raise TypeError(f"{name} must be a NIfTI image (nibabel) or a path to one; got "
                    f"{type(img).__name__}.")


def volume_of(img, name):
    """``(image, data)`` of a NIfTI image or path, ``data`` a 3-d float64 array (a one-volume 4-d
    image is squeezed). An unreadable file raises a ``ValueError`` naming it."""
    img = as_nifti(img, name)
    try:
        data = np.asarray(img.get_fdata(dtype=np.float64))
    except _READ_ERRORS + (_nibabel().filebasedimages.ImageFileError,) as exc:
        source = img.get_filename() if hasattr(img, "get_filename") else None
        raise _unreadable(name, source or "(in memory)", exc) from exc
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise ValueError(f"{name} must be a 3-d map; got shape {data.shape}. Select one "
                         f"volume first (e.g. nibabel's img.slicer[..., k] or "
                         f"nilearn.image.index_img(img, k)).")
    return img, data


def volumes_of(img, name):
    """``(image, data)`` of a NIfTI image or path holding one or more maps on one grid: ``data``
    of shape ``(X, Y, Z, maps)``. An unreadable file raises a ``ValueError`` naming it."""
    img = as_nifti(img, name)
    if len(img.shape) == 3 or (len(img.shape) == 4 and img.shape[3] == 1):
        img, data = volume_of(img, name)
        return img, data[..., None]
    if len(img.shape) != 4:
        raise ValueError(f"{name} must be a 3-d map or a 4-d image of maps (one volume a "
                         f"subject or contrast); got shape {img.shape}.")
    try:
        data = np.asarray(img.get_fdata(dtype=np.float64))
    except _READ_ERRORS + (_nibabel().filebasedimages.ImageFileError,) as exc:
        source = img.get_filename() if hasattr(img, "get_filename") else None
        raise _unreadable(name, source or "(in memory)", exc) from exc
    return img, data


def region_of(values):
    """Voxels that a mask marks as inside: finite and non-zero."""
    return np.isfinite(values) & (values != 0)


@dataclass
class Voxels:
    """Voxels selected from a 3-d image.

    Attributes
    ----------
    coords : ndarray (n, 3)
        Voxel centres in world (mm) coordinates: ``affine @ [i, j, k, 1]``.
    values : ndarray (n,)
        The map's values at those voxels.
    ijk : ndarray (n, 3) of int
        Voxel indices into the image grid.
    affine : ndarray (4, 4)
    shape : tuple of 3 ints
        Grid of the source image.
    """

    coords: np.ndarray
    values: np.ndarray
    ijk: np.ndarray
    affine: np.ndarray
    shape: tuple

    def __len__(self) -> int:
        return self.coords.shape[0]

    def to_nifti(self, values, *, fill: float = 0.0):
        """A ``Nifti1Image`` on the source grid holding ``values`` (one per voxel, or
        ``(n, k)`` for a 4-d image of ``k`` volumes) and ``fill`` elsewhere."""
        return voxels_to_nifti(values, self.ijk, self.affine, self.shape, fill=fill)


def load_voxels(stat_img, mask_img=None, *, threshold: float | None = None,
                two_sided: bool = True) -> Voxels:
    """Voxels of a statistical map as a point cloud: coordinates in mm and values.

    Parameters
    ----------
    stat_img : NIfTI image or path
        A 3-d map (a 4-d image with one volume is accepted).
    mask_img : NIfTI image, path or boolean array, optional
        Voxels to consider (non-zero = inside). An image on another grid is resampled to
        the map's grid by nearest neighbour. Default: every voxel where the map is finite
        and non-zero.
    threshold : float, optional
        Keep only voxels with ``|value| > threshold`` (``value > threshold`` when
        ``two_sided=False``): He et al.'s activation region is ``threshold=1.96``.
    two_sided : bool, default=True

    Returns
    -------
    Voxels
        ``coords`` (n, 3) in mm, ``values`` (n,), ``ijk``, ``affine``, ``shape``; voxels in
        C order of the grid.
    """
    nib = _nibabel()
    img, data = volume_of(stat_img, "stat_img")
    if mask_img is None:
        inside = region_of(data)
    else:
        inside = _mask_array(mask_img, img, nib) & np.isfinite(data)
    if threshold is not None:
        thr = check_positive(threshold, "threshold")
        with np.errstate(invalid="ignore"):
            inside &= (np.abs(data) > thr) if two_sided else (data > thr)
    ijk = np.argwhere(inside)
    if ijk.shape[0] == 0:
        raise ValueError("no voxel is selected: the mask is empty or no value passes the "
                         "threshold; check the mask and lower the threshold.")
    affine = np.asarray(img.affine, dtype=np.float64)
    coords = ijk @ affine[:3, :3].T + affine[:3, 3]
    return Voxels(coords=coords, values=data[inside], ijk=ijk.astype(np.int64),
                  affine=affine, shape=tuple(int(s) for s in data.shape))


def _mask_array(mask_img, img, nib):
    if isinstance(mask_img, np.ndarray):
        if mask_img.shape != img.shape[:3]:
            raise ValueError(f"mask array has shape {mask_img.shape}; the map's grid is "
                             f"{img.shape[:3]}.")
        return mask_img.astype(bool)
    mask = as_nifti(mask_img, "mask_img")
    values = volume_of(mask, "mask_img")[1]
    if mask.shape[:3] != img.shape[:3] or not np.allclose(mask.affine, img.affine):
        values = nearest_voxel_values(values, mask.affine, img.shape[:3], img.affine)
    return region_of(values)


def nearest_voxel_values(values, affine, shape, target_affine):
    """``values`` (3-d, on the grid ``affine``) at the voxel centres of the grid ``(shape,
    target_affine)`` by nearest neighbour (0 outside). Source coordinates are rounded to 1e-6
    voxel first, so grids shifted by whole voxels map exactly whatever the affines' rounding."""
    to_source = np.linalg.solve(affine, target_affine)
    ijk = np.indices(tuple(shape), dtype=np.float64).reshape(3, -1)
    c = to_source[:3, :3] @ ijk + to_source[:3, 3:4]
    nearest = np.floor(np.round(c, 6) + 0.5).astype(np.int64)
    inside = np.all((nearest >= 0) & (nearest < np.asarray(values.shape[:3])[:, None]), 0)
    out = np.zeros(int(np.prod(shape)), dtype=values.dtype)
    out[inside] = values[tuple(nearest[:, inside])]
    return out.reshape(tuple(shape))


def voxels_to_nifti(values, ijk, affine, shape, *, fill: float = 0.0):
    """Place ``values`` at voxel indices ``ijk`` of a grid ``shape`` with ``affine``.

    ``values`` is ``(n,)`` for a 3-d image or ``(n, k)`` for a 4-d one (e.g. predictive mean
    and sd). Returns a float32 ``nibabel.Nifti1Image``.
    """
    nib = _nibabel()
    values = np.asarray(values, dtype=np.float64)
    ijk = np.asarray(ijk)
    if ijk.ndim != 2 or ijk.shape[1] != 3:
        raise ValueError(f"ijk must have shape (n, 3); got {ijk.shape}.")
    if values.shape[0] != ijk.shape[0] or values.ndim not in (1, 2):
        raise ValueError(f"values must have one entry (or row) per voxel: got shape "
                         f"{values.shape} for {ijk.shape[0]} voxels.")
    if not np.isfinite(values).all():
        raise ValueError("values contain NaN or infinity; a NIfTI map of predictions must "
                         "be finite (set missing voxels with fill=).")
    shape = tuple(int(s) for s in shape)
    if np.any(ijk < 0) or np.any(ijk >= np.asarray(shape)[None, :3]):
        raise ValueError(f"ijk holds indices outside the grid {shape}.")
    out_shape = shape[:3] + (() if values.ndim == 1 else (values.shape[1],))
    out = np.full(out_shape, fill, dtype=np.float32)
    out[ijk[:, 0], ijk[:, 1], ijk[:, 2]] = values
    return nib.Nifti1Image(out, np.asarray(affine, dtype=np.float64))


def copy_spatial_codes(out, src):
    """Give ``out`` (a new image on ``src``'s grid) ``src``'s sform/qform codes and units, as
    nilearn's ``new_img_like`` does (MNI space stays MNI)."""
    nib = _nibabel()
    hdr = getattr(src, "header", None)
    if not isinstance(hdr, nib.Nifti1Header):
        return out
    sform, qform = int(hdr["sform_code"]), int(hdr["qform_code"])
    if sform or qform:              # ``out.affine`` is ``src.affine``: its best affine
        out.set_sform(out.affine if sform else None, code=sform)
        out.set_qform(hdr.get_qform() if qform else None, code=qform)
    out.header.set_xyzt_units(*hdr.get_xyzt_units())
    return out
