"""Predict the unobserved vertices of a per-vertex surface map, with uncertainty.

The surface twin of :func:`flgp.predict_image`: the mesh's vertices are the point cloud and
its finite-element graph (:func:`flgp.graph.mesh.mesh_graph`) carries the full-resolution
prior. Meshes and maps are arrays, nilearn objects or files nilearn reads (GIfTI,
FreeSurfer); the last two need the ``fmri`` extra.
"""

from __future__ import annotations

import numbers
import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..graph.mesh import mesh_graph
from .image import fresh_regressor, reissue_warnings
from .priors import with_graph
from .regressor import FLGPRegressor

__all__ = ["SurfacePrediction", "predict_surface", "load_mesh", "load_surface_values",
           "write_gifti"]


@dataclass
class SurfacePrediction:
    """What :func:`predict_surface` returns. For a ``SurfaceImage`` input, ``mean`` and
    ``sd`` are ``SurfaceImage`` and ``observed``, ``mask`` and ``parts`` dicts by part.

    Attributes
    ----------
    mean : ndarray (n_vertices,) or SurfaceImage
        Posterior mean of the map at every vertex (``fill`` outside the mask).
    sd : ndarray (n_vertices,) or SurfaceImage
        Posterior sd of the latent map, or of a new observation (``include_noise=True``).
    regressor : FLGPRegressor
        The fitted regressor (a ``SurfaceImage``'s first part's).
    observed, mask : ndarray (n_vertices,) of bool, or dict of them by part
        The observed vertices; the vertices of the fitted region.
    sd_kind : str
        ``"latent"`` or ``"new observation"``.
    seconds : float
        Wall time of the fit (all parts).
    parts : dict or None
        Each part's own prediction; None for one mesh.
    """

    mean: np.ndarray
    sd: np.ndarray
    regressor: FLGPRegressor
    observed: np.ndarray
    mask: np.ndarray
    sd_kind: str
    seconds: float = field(default=0.0)
    parts: dict | None = field(default=None)

    @property
    def n_observed(self) -> int:
        """The number of observed vertices (all parts)."""
        if isinstance(self.observed, dict):
            return int(sum(np.sum(o) for o in self.observed.values()))
        return int(self.observed.sum())


def _nilearn_surface():
    try:
        from nilearn import surface
    except ImportError as exc:
        raise ImportError("surface files and nilearn meshes need nilearn, the 'fmri' extra "
                          "of flgp: pip install \"flgp[fmri]\"") from exc
    return surface


def _read_surface_file(path, name: str, reader: str, what: str):
    """``nilearn.surface.<reader>(path)``; FileNotFoundError or ValueError naming ``name``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{name} {path!r}: no such file.")
    surface = _nilearn_surface()          # a missing extra stays an ImportError
    return _guarded_read(lambda: getattr(surface, reader)(path), path, name, what)


def _guarded_read(read, path: str, name: str, what: str):
    """``read()``, any failure but MemoryError/ImportError raised as a chained ValueError."""
    try:
        return read()
    except Exception as exc:    # noqa: BLE001 - see below; KeyboardInterrupt passes
        # a damaged file fails wherever nibabel's parser gives up (expat, zlib, struct, ...)
        if isinstance(exc, (MemoryError, ImportError)):
            raise
        kind = type(exc).__name__
        if kind == "error":                 # zlib.error, struct.error: name the module
            kind = f"{type(exc).__module__}.error"
        why = " ".join(f"{kind}: {exc}".split())
        raise ValueError(f"could not read {path} ({name}, {what}): {why}; check that the "
                         f"file is complete and undamaged (write or download it again) "
                         f"and that it is a GIfTI (.gii) or FreeSurfer file.") from exc


def load_mesh(mesh):
    """``(vertices (n, 3) float64, faces (f, 3))`` of an array pair, a nilearn mesh or a
    mesh file (GIfTI ``.surf.gii``, FreeSurfer ``lh.pial``); TypeError for anything else."""
    if isinstance(mesh, (str, os.PathLike)):
        mesh = _read_surface_file(mesh, "mesh", "load_surf_mesh", "a surface mesh")
    source = getattr(mesh, "file_path", None)
    if source is not None:
        # nilearn's FileMesh reads its file again at each access of coordinates or faces
        mesh = _guarded_read(lambda: (mesh.coordinates, mesh.faces), os.fspath(source),
                             "mesh", "a surface mesh")
    if hasattr(mesh, "coordinates") and hasattr(mesh, "faces"):
        return (np.asarray(mesh.coordinates, dtype=np.float64),
                np.asarray(mesh.faces))
    if isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        return np.asarray(mesh[0], dtype=np.float64), np.asarray(mesh[1])
    raise TypeError(f"mesh must be (vertices, faces), a nilearn mesh or a path to a "
                    f"surface file; got {type(mesh).__name__}.")


def load_surface_values(values, n_vertices: int, name: str = "values") -> np.ndarray:
    """A per-vertex map as a float64 vector from an array or a file (GIfTI ``.func.gii``,
    FreeSurfer ``lh.thickness``); ValueError unless one value per vertex, TypeError if not
    numeric."""
    path = None
    if isinstance(values, (str, os.PathLike)):
        path = os.fspath(values)
        values = _read_surface_file(path, name, "load_surf_data", "per-vertex data")
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric per-vertex data; got "
                        f"{type(values).__name__}.") from exc
    if v.ndim == 2 and 1 in v.shape:
        v = v.ravel()
    if v.shape != (n_vertices,):
        # a truncated FreeSurfer file reads as a shorter vector: say which file
        source = "" if path is None else (f" (read from {path}: is the file complete, and "
                                          f"made for this mesh?)")
        raise ValueError(f"{name} must hold one value per vertex ({n_vertices}); got shape "
                         f"{v.shape}{source}.")
    return v


def predict_surface(mesh, values, observed, *, mask=None, regressor=None, random_state=0,
                    fill=0.0, include_noise=False):
    """Predict the unobserved vertices of a per-vertex map on a surface mesh.

    Parameters
    ----------
    mesh : (vertices, faces), nilearn mesh, or path
        The surface (e.g. ``"lh.pial.gii"``); coordinates in mm.
    values : array (n_vertices,), path, or nilearn ``SurfaceImage``
        The map. A ``SurfaceImage`` brings its own mesh (pass ``mesh=None``); each part
        (hemisphere) is fitted on its own and ``mean`` and ``sd`` are ``SurfaceImage``.
    observed : boolean array (n_vertices,) or float
        The observed vertices, or a fraction in (0, 1) of the region's vertices drawn
        with ``random_state``.
    mask : boolean array (n_vertices,), optional
        The region to fit (default: every vertex with a finite value), meshed by the faces
        with all three corners inside; vertices outside get ``fill``.
    regressor : FLGPRegressor, optional
        Configured regressor (cloned); default ``FLGPRegressor()``, whose ``"auto"``
        weighs the mesh's graph Matérn prior, the heat kernel and the RBF GP by evidence.
    random_state, fill, include_noise :
        As in :func:`flgp.predict_image`.

    Returns
    -------
    SurfacePrediction

    Raises
    ------
    FileNotFoundError
        A path that names no file.
    TypeError
        A mesh or values of the wrong kind, ``include_noise`` not a bool, ``fill`` not a
        number.
    ValueError
        An unreadable file; values not one per vertex; non-finite values in the region;
        a fraction outside (0, 1); fewer than 2 observed or 3 region vertices;
        ``include_noise`` with a non-Gaussian likelihood.

    Warns
    -----
    UserWarning
        Region vertices on no face of the region (left out); the regressor's warnings,
        reissued at the caller.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.models.surface import predict_surface
    >>> g = np.linspace(0, 1, 20)
    >>> xx, yy = np.meshgrid(g, g)
    >>> vertices = np.c_[xx.ravel(), yy.ravel(), np.zeros(400)] * 50.0
    >>> idx = np.arange(400).reshape(20, 20)
    >>> a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), \\
    ...     idx[1:, 1:].ravel()
    >>> faces = np.r_[np.c_[a, b, c], np.c_[b, d, c]]
    >>> values = np.sin(vertices[:, 0] / 10.0)
    >>> res = predict_surface((vertices, faces), values, 0.3)
    >>> res.mean.shape, res.n_observed, res.sd_kind
    ((400,), 120, 'latent')
    """
    if not isinstance(include_noise, (bool, np.bool_)):
        raise TypeError(f"include_noise must be True or False; got {include_noise!r}.")
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a number (NaN allowed); got {fill!r}.")
    if include_noise and fresh_regressor(regressor).likelihood != "gaussian":
        raise ValueError("include_noise=True adds the Gaussian noise variance; with "
                         f"likelihood={regressor.likelihood!r} there is none (leave it "
                         f"False).")
    caught = []
    try:
        # the user's filters apply inside; what passes is reissued at their call
        with warnings.catch_warnings(record=True) as caught:
            if (hasattr(values, "mesh") and hasattr(values, "data")
                    and hasattr(values.data, "parts")):
                return _predict_surface_image(values, observed, mask, regressor,
                                              random_state, fill, include_noise)
            return _predict_surface(mesh, values, observed, mask, regressor, random_state,
                                    fill, include_noise)
    finally:
        reissue_warnings(caught, stacklevel=2)


def _predict_surface(mesh, values, observed, mask, regressor, random_state, fill,
                     include_noise) -> SurfacePrediction:
    """:func:`predict_surface` of one mesh (``fill`` and ``include_noise`` checked)."""
    V, F = load_mesh(mesh)
    y = load_surface_values(values, V.shape[0])
    reg = fresh_regressor(regressor)
    region = np.isfinite(y) if mask is None else _vertex_mask(mask, V.shape[0])
    bad = region & ~np.isfinite(y)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} vertices of the region have NaN or infinite "
                         f"values (the first is vertex {int(np.flatnonzero(bad)[0])}); "
                         f"leave them out of the mask.")
    # the region's mesh: faces with all three corners inside; vertices on none are left out
    inside = region[F].all(axis=1)
    on_face = np.zeros(V.shape[0], dtype=bool)
    on_face[F[inside].ravel()] = True
    stray = region & ~on_face
    if stray.any():
        unused = ""
        if not isinstance(observed, numbers.Real) or isinstance(observed, (bool, np.bool_)):
            given = _vertex_mask(observed, V.shape[0])
            if (given & stray).any():
                unused = (f"; {int((given & stray).sum())} of them observed, their values "
                          f"unused")
                observed = given & ~stray
        warnings.warn(f"{int(stray.sum())} vertices of the region lie on no face whose "
                      f"corners are all in the region (the first is vertex "
                      f"{int(np.flatnonzero(stray)[0])}); they are left out and get the "
                      f"fill value{unused}.", UserWarning, stacklevel=2)
        region = region & on_face
    keep = np.flatnonzero(region)
    if keep.size < 3:
        raise ValueError(f"the region holds {keep.size} vertices on its faces; at least 3 "
                         f"are needed.")
    new_index = np.full(V.shape[0], -1, dtype=np.int64)
    new_index[keep] = np.arange(keep.size)
    sub_faces = new_index[F[inside]]
    graph = mesh_graph(V[keep], sub_faces)
    obs = _observed_vertices(observed, region, random_state)
    target = np.where(obs[keep], y[keep], np.nan)
    reg.set_params(prior=with_graph(reg.prior, graph))
    start = time.perf_counter()
    reg.fit(V[keep], target)
    seconds = time.perf_counter() - start
    mean = np.full(V.shape[0], float(fill))
    sd = np.full(V.shape[0], float(fill))
    mean[keep] = np.asarray(reg.transduction_, dtype=np.float64)
    s = np.asarray(reg.transduction_std_, dtype=np.float64)
    sd[keep] = np.sqrt(s ** 2 + reg.noise_) if include_noise else s
    return SurfacePrediction(mean=mean, sd=sd, regressor=reg, observed=obs, mask=region,
                             sd_kind="new observation" if include_noise else "latent",
                             seconds=seconds)


def _vertex_mask(mask, n):
    m = np.asarray(mask)
    if m.shape != (n,):
        raise ValueError(f"mask must hold one entry per vertex ({n}); got shape {m.shape}.")
    return m.astype(bool) if m.dtype == bool else (np.nan_to_num(m.astype(float)) != 0)


def _observed_vertices(observed, region, random_state):
    n = region.size
    if isinstance(observed, numbers.Real) and not isinstance(observed, (bool, np.bool_)):
        frac = float(observed)
        if not 0.0 < frac < 1.0:
            raise ValueError(f"a fraction of observed vertices must lie strictly between "
                             f"0 and 1; got {observed!r}.")
        idx = np.flatnonzero(region)
        m = int(round(frac * idx.size))
        if m < 2:
            raise ValueError(f"observed={frac:g} of {idx.size} vertices gives {m}; at least "
                             f"2 are needed.")
        obs = np.zeros(n, dtype=bool)
        obs[np.random.default_rng(random_state).choice(idx, size=m, replace=False)] = True
        return obs
    obs = _vertex_mask(observed, n)
    if (obs & ~region).any():
        raise ValueError(f"{int((obs & ~region).sum())} observed vertices lie outside the "
                         f"region (NaN values or outside the mask).")
    if obs.sum() < 2:
        raise ValueError("at least 2 observed vertices are needed.")
    return obs


def _predict_surface_image(image, observed, mask, regressor, random_state, fill,
                           include_noise):
    from nilearn.surface import SurfaceImage

    parts = list(image.data.parts)
    results = {}
    for k, part in enumerate(parts):
        obs = observed[part] if isinstance(observed, dict) else observed
        msk = mask[part] if isinstance(mask, dict) else mask
        results[part] = _predict_surface(image.mesh.parts[part],
                                         np.asarray(image.data.parts[part]), obs, msk,
                                         regressor,
                                         None if random_state is None
                                         else np.random.default_rng(random_state).integers(
                                             2 ** 31) + k,
                                         fill, include_noise)
    mean = SurfaceImage(mesh=image.mesh, data={p: r.mean for p, r in results.items()})
    sd = SurfaceImage(mesh=image.mesh, data={p: r.sd for p, r in results.items()})
    first = results[parts[0]]
    return SurfacePrediction(mean=mean, sd=sd, regressor=first.regressor,
                             observed={p: r.observed for p, r in results.items()},
                             mask={p: r.mask for p, r in results.items()},
                             sd_kind=first.sd_kind,
                             seconds=sum(r.seconds for r in results.values()),
                             parts=results)


def write_gifti(values, path, *, description: str = "") -> None:
    """Write a per-vertex map as a GIfTI data file (one float32 data array, with
    ``description`` in its metadata)."""
    import nibabel as nib

    v = np.asarray(values, dtype=np.float32)
    meta = nib.gifti.GiftiMetaData({"Description": description}) if description else None
    arr = nib.gifti.GiftiDataArray(v, intent="NIFTI_INTENT_NONE", datatype="float32",
                                   meta=meta)
    nib.save(nib.gifti.GiftiImage(darrays=[arr]), os.fspath(path))
