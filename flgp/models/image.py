"""Regression on a 3-d image: predict the unobserved voxels of a region, with uncertainty.

:func:`predict_image`: the region's voxel centres (world coordinates, mm) are the point
cloud, the observed voxels' values the targets, and :class:`~flgp.FLGPRegressor` predicts
the rest. NIfTI in and out, nothing resampled; needs nibabel (the ``fmri`` extra);
docs/images.md.
"""

from __future__ import annotations

import numbers
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from .._validation import integer_seed
from ..datasets.fmri import (Voxels, as_nifti, copy_spatial_codes, load_voxels, region_of,
                             volume_of, volumes_of)
from ..graph.lattice import lattice_graph
from ..precision import gaussian
from ..precision.gaussian import (fit_matern, precomputed_fits,
                                  precomputed_key)
from ..precision.maps import fit_matern_maps
from ..precision.matern import MATERN_ORDERS
from .eigenbasis import shared_candidates
from .graph_matern import GRAPH_MATERN_VARIANCE_SAMPLES, cross_validated_scale
from .priors import with_graph
from .regressor import FLGPRegressor
from .representation import Standardisation

__all__ = ["ImagePrediction", "predict_image"]

# fits expected to need more (GB) are announced before they start (with progress)
LARGE_FIT_GB = 2.0


def fit_memory_estimate(n_voxels: int) -> float:
    """Rule-of-thumb peak memory (GB) of the default graph Matérn fit of ``n_voxels``,
    factored or by conjugate gradients (:func:`~flgp.precision.gaussian.fit_memory_gb`).
    ValueError unless ``n_voxels`` is a whole number >= 0."""
    if isinstance(n_voxels, bool) or not isinstance(n_voxels, (int, np.integer)) \
            or n_voxels < 0:
        raise ValueError(f"n_voxels must be a whole number of voxels >= 0; got "
                         f"{n_voxels!r}.")
    n = int(n_voxels)
    return gaussian.fit_memory_gb(n, gaussian.factors(n))


def _available_memory_gb():
    """``MemAvailable`` of ``/proc/meminfo`` in GB, or None where there is none."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024 ** 2
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_memory(n_voxels: int, reg, progress) -> None:
    """Announce a large graph Matérn fit (with ``progress``); ValueError where its memory
    estimate exceeds the memory available."""
    if reg.method not in ("auto", "graph_matern"):
        return
    need = fit_memory_estimate(n_voxels)
    if need < LARGE_FIT_GB:
        return
    available = _available_memory_gb()
    if available is not None and need > available:
        raise ValueError(f"fitting {n_voxels} voxels needs about {need:.1f} GB of memory "
                         f"and {available:.1f} GB are available: fit a smaller region (a "
                         f"grey-matter mask), a coarser grid (nilearn.image.resample_img "
                         f"of the map and the mask), or free memory.")
    if progress:
        have = "" if available is None else f" of the {available:.1f} GB available"
        print(f"flgp: fitting {n_voxels} voxels, expected to need about {need:.1f} GB"
              f"{have}", file=sys.stderr, flush=True)


RESAMPLE_HINT = ('resample it onto the image\'s grid first, e.g. '
                 '`nilearn.image.resample_to_img({name}, image, interpolation="nearest")`')


@dataclass
class ImagePrediction:
    """What :func:`predict_image` returns.

    Attributes
    ----------
    mean : nibabel.Nifti1Image
        Posterior mean on the input's grid (float32), smoothed at observed voxels too;
        ``fill`` outside the region.
    sd : nibabel.Nifti1Image
        Predictive sd of the latent map (of a new observation with
        ``include_noise=True``); ``fill`` outside.
    regressor : FLGPRegressor
        The fitted clone of the regressor passed; it predicts at other points (mm).
    voxels : flgp.datasets.Voxels
        The region: ``coords`` (n, 3) in mm, ``values``, ``ijk``, ``affine``, ``shape``;
        ``voxels.to_nifti(v)`` puts per-voxel values back on the grid.
    observed : ndarray of shape (n,), dtype bool
        Which region voxels were observed, in the order of ``voxels``.
    seconds : float
        Wall time of the fit (of all of them, for several maps).
    maps : list of dict
        Several maps: a row a map with ``method``, ``order``, ``kappa`` (1/mm), ``noise``,
        ``outputscale`` (for ``"graph_matern"``, of ``A Q_ν(κ)⁻¹`` on the lattice in mm),
        ``log_evidence`` and ``seconds``; ``regressor`` is then the list of fitted
        regressors (None with ``hyperparameters="shared"``). Empty for one map.
    """

    mean: object
    sd: object
    regressor: FLGPRegressor | None
    voxels: Voxels
    observed: np.ndarray
    seconds: float = field(default=0.0)
    maps: list = field(default_factory=list)

    @property
    def n_observed(self) -> int:
        """Number of observed voxels."""
        return int(self.observed.sum())


def fresh_regressor(regressor) -> FLGPRegressor:
    """An unfitted clone of ``regressor`` (None: ``FLGPRegressor()``); TypeError otherwise."""
    if regressor is None:
        return FLGPRegressor()
    if not isinstance(regressor, FLGPRegressor):
        raise TypeError(f"regressor must be an flgp.FLGPRegressor (configured, e.g. "
                        f"FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=1000)))); got "
                        f"{type(regressor).__name__}.")
    return clone(regressor)


# a warning raised in flgp's own folder is about the user's call
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reissue_warnings(caught, stacklevel: int) -> None:
    """Reissue ``caught`` warnings (the user's filters apply again): those from flgp's own
    code ``stacklevel`` frames up from the caller, as ``warnings.warn`` counts, any other
    where it was raised."""
    for w in caught:
        if os.path.abspath(w.filename).startswith(_PACKAGE_DIR + os.sep):
            warnings.warn(w.message, w.category, stacklevel=stacklevel + 1)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                   source=w.source)


def predict_image(image, mask, observed, *, regressor=None, random_state=0, fill=0.0,
                  include_noise=False, progress=False,
                  hyperparameters="own", n_jobs=None) -> ImagePrediction:
    """Predict the unobserved voxels of a region of a 3-d image, with uncertainty.

    The region's voxel centres (mm, ``affine @ [i, j, k, 1]``) are the point cloud, the
    observed voxels' values the targets; an :class:`~flgp.FLGPRegressor`'s predictive mean
    and sd at every region voxel come back as NIfTI images on the input's grid.

    Parameters
    ----------
    image : nibabel image or path, or a list of them
        A 3-d image (or a 4-d image of one volume); NaN or infinite voxels only outside the
        region. Several maps on one grid (a 4-d image or a list of 3-d images) are fitted
        on one region and set of observed voxels and come back as 4-d images, a row a map
        in ``maps``.
    mask : nibabel image, path, boolean array or None
        The region: the mask's non-zero (finite) voxels, on the image's grid. ``None``:
        every voxel where the image is finite and non-zero.
    observed : nibabel image, path, boolean array, or float
        A mask of observed voxels inside the region, on the image's grid, or a fraction in
        (0, 1) of the region's voxels drawn with ``random_state``. At least 2 voxels.
    regressor : FLGPRegressor, optional
        A configured regressor, cloned (the instance passed stays unfitted). Default:
        ``FLGPRegressor()``.
    random_state : int, numpy Generator or None, default=0
        Seeds the draw of a fraction of observed voxels (not the regressor's fit).
    fill : float, default=0.0
        Value of both output images outside the region (NaN is allowed).
    include_noise : bool, default=False
        ``True``: the sd of a new observation, ``sqrt(sd² + noise_)``, instead of that of
        the latent map (Gaussian likelihood only).
    progress : bool, default=False
        Show a tqdm bar over the stages (over the maps for several) on a terminal's stderr.
    hyperparameters : {"own", "shared"}, default="own"
        Several maps: ``"own"``, each map its own fit (large regions share the graph Matérn
        searches' work: :mod:`flgp.precision.maps`), or ``"shared"``, the fast path for
        similar maps: one graph Matérn prior on the region's lattice whose order, ``κ`` and
        noise-to-signal ratio maximise the maps' summed evidence (each map its own
        cross-validated amplitude), one factorisation serving every map. ``"shared"``
        needs a Gaussian regressor offering the graph Matérn prior with the noise fitted;
        its ``matern_order`` and ``random_state`` apply.
    n_jobs : int or None, default=None
        Several maps with their own hyperparameters: how many ``loky`` processes fit them.
        ``None``: as many as the cores, maps and available memory allow
        (:func:`fit_memory_estimate`); ``1``: in this process; ``-1``: every core.

    Returns
    -------
    ImagePrediction
        ``mean`` and ``sd`` (float32, the input's shape, affine and sform/qform codes), the
        fitted ``regressor``, the region's ``voxels`` and ``observed``.

    Raises
    ------
    ValueError
        A mask on another grid, an empty region, NaN or infinite values inside it, fewer
        than 2 observed voxels, observed voxels outside the region, a fraction outside
        (0, 1), maps on different grids, a graph Matérn fit expected to need more memory
        than is available (:func:`fit_memory_estimate`; before the fit starts).
    TypeError
        An input of the wrong kind, or a ``regressor`` that is not an ``FLGPRegressor``.

    Warns
    -----
    UserWarning
        The regressor's warnings, pointing at the call of ``predict_image``.

    Notes
    -----
    Nothing is resampled: a mask on another grid (shape, or affine beyond
    ``numpy.allclose``) is an error; resample it by nearest neighbour, e.g.
    ``nilearn.image.resample_to_img(mask, image, interpolation="nearest")``.

    Examples
    --------
    A smooth map on a 12 x 12 x 6 grid of 2 mm voxels, an ellipsoidal region, a quarter of
    its voxels observed:

    >>> import nibabel as nib
    >>> import numpy as np
    >>> from flgp import (Eigenbasis, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
    ...                   RBFPrior, predict_image)
    >>> i, j, k = np.indices((12, 12, 6))
    >>> data = np.sin(i / 3.0) + np.cos(j / 4.0) + 0.2 * k
    >>> affine = np.diag([2.0, 2.0, 2.0, 1.0])
    >>> image = nib.Nifti1Image(data.astype(np.float32), affine)
    >>> region = (i - 5.5) ** 2 + (j - 5.5) ** 2 + 4 * (k - 2.5) ** 2 < 36
    >>> res = predict_image(image, region, 0.25,
    ...     regressor=FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=100, n_eigenpairs=50)),
    ...                              GraphMaternPrior(), RBFPrior()]))
    >>> res.mean.shape, res.sd.shape, np.allclose(res.mean.affine, affine)
    ((12, 12, 6), (12, 12, 6), True)
    >>> len(res.voxels), res.n_observed
    (464, 116)
    >>> mean = res.mean.get_fdata()
    >>> held_out = region.copy()
    >>> held_out[tuple(res.voxels.ijk[res.observed].T)] = False
    >>> rmse = np.sqrt(np.mean((mean[held_out] - data[held_out]) ** 2))
    >>> bool(rmse < 0.3 * data[region].std())
    True
    >>> float(mean[~region].max()), bool(res.sd.get_fdata()[region].min() > 0)
    (0.0, True)
    """
    if not isinstance(include_noise, (bool, np.bool_)):
        raise TypeError(f"include_noise must be True or False; got {include_noise!r}.")
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a number (NaN allowed); got {fill!r}.")
    reg = fresh_regressor(regressor)
    check_n_jobs(n_jobs)
    if include_noise and reg.likelihood != "gaussian":
        raise ValueError("include_noise=True adds the Gaussian noise variance; with "
                         f"likelihood={reg.likelihood!r} there is none (leave it False).")
    if hyperparameters not in ("own", "shared"):
        raise ValueError(f"hyperparameters must be 'own' (each map its own fit) or "
                         f"'shared' (one prior, the pooled evidence); got "
                         f"{hyperparameters!r}.")
    if hyperparameters == "shared" and (reg.likelihood != "gaussian" or reg.noise is not None
                                        or reg.method not in ("auto", "graph_matern")
                                        or not reg._offers("graph_matern")):
        raise ValueError("hyperparameters='shared' fits one graph Matérn prior with the "
                         "Gaussian likelihood and the noise searched; this regressor "
                         f"(likelihood={reg.likelihood!r}, noise={reg.noise!r}, prior "
                         f"{reg.prior!r}) does not offer it. Use hyperparameters='own', or a "
                         "regressor with the graph Matérn prior and no fixed noise.")
    caught = []
    try:
        # the user's filters apply inside; what passes is reissued from their call
        with warnings.catch_warnings(record=True) as caught:
            img, maps = maps_of(image)
            if maps.shape[3] == 1:
                if hyperparameters != "own":
                    raise ValueError("hyperparameters='shared' pools several maps; one map "
                                     "was given (a 3-d image).")
                return _predict_image((img, maps[..., 0]), mask, observed, reg,
                                      random_state, fill, include_noise, progress)
            return _predict_maps(img, maps, mask, observed, reg, random_state, fill,
                                 include_noise, progress, hyperparameters, n_jobs)
    finally:
        reissue_warnings(caught, stacklevel=2)


def maps_of(image):
    """``(reference image, data (X, Y, Z, maps))`` of a 3-d or 4-d image or path, or of a
    list of 3-d images on one grid."""
    if isinstance(image, (list, tuple)):
        if not image:
            raise ValueError("image is an empty list; give at least one map.")
        first, data = volume_of(image[0], "image[0]")
        out = [data]
        for k, other in enumerate(image[1:], start=1):
            oimg, odata = volume_of(other, f"image[{k}]")
            if odata.shape != data.shape or not np.allclose(oimg.affine, first.affine):
                what = (f"shape {odata.shape} instead of {data.shape}"
                        if odata.shape != data.shape else "another affine")
                raise ValueError(f"image[{k}] is not on image[0]'s grid ({what}); every map "
                                 f"must share one grid: " + RESAMPLE_HINT.format(
                                     name=f"image[{k}]") + ".")
            out.append(odata)
        return first, np.stack(out, axis=3)
    return volumes_of(image, "image")


def region_voxels(maps, mask, img) -> np.ndarray:
    """``(n, 3)`` indices of the region's voxels (``mask=None``: finite and non-zero in
    every map); ValueError for an empty region."""
    region = (np.all(region_of(maps), axis=3) if mask is None else
              grid_mask(mask, img, maps.shape[:3], "mask"))
    if not region.any():
        raise ValueError("the region is empty: no voxel is inside the mask"
                         + (" and finite and non-zero in every map" if mask is None else "")
                         + "; check the mask (is it on these images?).")
    return np.argwhere(region)


def _predict_maps(img, maps, mask, observed, reg, random_state, fill, include_noise,
                  progress, hyperparameters, n_jobs) -> ImagePrediction:
    """:func:`predict_image` of several maps (``maps``: ``(X, Y, Z, k)``)."""
    from tqdm.auto import tqdm

    shape, k = maps.shape[:3], maps.shape[3]
    ijk = region_voxels(maps, mask, img)
    region = np.zeros(shape, bool)
    region[tuple(ijk.T)] = True
    values = maps[tuple(ijk.T)]                                   # (n, k)
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(f"map {col} has {int(bad[:, col].sum())} NaN or infinite voxel(s) "
                         f"inside the region (the first at voxel "
                         f"{tuple(int(v) for v in ijk[row])}); drop them from the mask or "
                         f"replace them.")
    voxels = Voxels(coords=ijk @ img.affine[:3, :3].T + img.affine[:3, 3],
                    values=values[:, 0], ijk=ijk, affine=img.affine, shape=shape)
    obs = _observed(observed, img, shape, region, random_state)
    flat = np.ptp(values[obs], axis=0) == 0
    if flat.any():
        raise ValueError(f"map {int(np.flatnonzero(flat)[0])} takes one value at every "
                         f"observed voxel: it has no variance to fit. Leave it out.")
    graph = lattice_graph(ijk, img.affine) if reg.graph is None else reg.graph
    _check_memory(len(ijk), reg, progress)
    start = time.perf_counter()
    if hyperparameters == "shared":
        mean, sd, rows = _shared_fit(graph, values, obs, include_noise, reg)
        regressors = None
    else:
        mean, sd = np.empty_like(values), np.empty_like(values)
        rows, regressors = [None] * k, [None] * k
        workers = map_workers(n_jobs, k, len(ijk), reg)
        shared = (_shared_searches(reg, graph, values, obs, workers, progress)
                  if shares_searches(reg, graph, k) else [None] * k)
        targets = (np.where(obs, values[:, j], np.nan) for j in range(k))
        if workers == 1:
            store = {}                      # this call's maps share the eigenpairs
            done = (_fit_map(j, reg, graph, voxels.coords, y, precomputed=shared[j],
                             candidates=store) for j, y in enumerate(targets))
        else:
            from joblib import Parallel, delayed

            done = Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")(
                delayed(_fit_map)(j, reg, graph, voxels.coords, y, record=True,
                                  precomputed=shared[j])
                for j, y in enumerate(targets))
        for j, fit, seconds, records in tqdm(done, total=k, desc="maps", unit="map",
                                             disable=None if progress else True,
                                             leave=False):
            for message, category, filename, lineno in records:
                warnings.warn_explicit(message, category, filename, lineno)
            mean[:, j] = np.asarray(fit.transduction_, dtype=np.float64)
            sd_j = np.asarray(fit.transduction_std_, dtype=np.float64)
            sd[:, j] = np.sqrt(sd_j ** 2 + fit.noise_) if include_noise else sd_j
            rows[j] = _map_row(j, fit, seconds)
            regressors[j] = fit
    seconds = time.perf_counter() - start
    out = [copy_spatial_codes(voxels.to_nifti(v, fill=float(fill)), img) for v in (mean, sd)]
    out[0].header["descrip"] = b"flgp: posterior means of the maps"
    out[1].header["descrip"] = (b"flgp: predictive sd of a new observation" if include_noise
                                else b"flgp: posterior sd of the maps (no noise)")
    return ImagePrediction(mean=out[0], sd=out[1], regressor=regressors, voxels=voxels,
                           observed=obs, seconds=seconds, maps=rows)


def map_workers(n_jobs, n_maps: int, n_voxels: int, reg) -> int:
    """How many processes fit the maps of :func:`predict_image` (its ``n_jobs``), >= 1."""
    if check_n_jobs(n_jobs) is not None:
        cores = n_jobs if n_jobs > 0 else _cores()
        return max(1, min(int(cores), n_maps))
    workers = min(_cores(), n_maps)
    available = _available_memory_gb()
    if available is not None and reg.method in ("auto", "graph_matern"):
        workers = min(workers, int(available // max(fit_memory_estimate(n_voxels), 0.1)))
    return max(1, workers)


def check_n_jobs(n_jobs):
    """``n_jobs`` if it is None, -1 or a positive whole number; else a ``ValueError``."""
    if n_jobs is not None and (isinstance(n_jobs, bool)
                               or not isinstance(n_jobs, (int, np.integer))
                               or n_jobs == 0 or n_jobs < -1):
        raise ValueError(f"n_jobs must be a positive number of processes, -1 (every core) "
                         f"or None (as many as the cores and memory allow); got "
                         f"{n_jobs!r}.")
    return n_jobs


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                         # not on Linux
        return os.cpu_count() or 1


def shares_searches(reg, graph, n_maps: int) -> bool:
    """Whether the maps' graph Matérn fits share the whole graph's work
    (:func:`flgp.precision.maps.fit_matern_maps`): several maps, a Gaussian regressor
    fitting the noise, and a factored graph of more than ``2 * SEARCH_MAX_NODES`` nodes."""
    return (n_maps > 1 and reg.likelihood == "gaussian" and reg.noise is None
            and reg.method in ("auto", "graph_matern") and reg._offers("graph_matern")
            and 2 * gaussian.SEARCH_MAX_NODES < graph.n_nodes
            and gaussian.factors(graph.n_nodes))


def _shared_searches(reg, graph, values, obs, workers, progress) -> list:
    """A ``{precomputed_key: fit}`` a map for its fit (None where it searches alone)."""
    from tqdm.auto import tqdm

    observed = np.flatnonzero(obs)
    Z = np.column_stack([Standardisation.of_targets(values[observed, j])
                         .standardise(values[observed, j]) for j in range(values.shape[1])])
    nus = MATERN_ORDERS if reg.matern_order is None else (int(reg.matern_order),)
    stages = iter(("searching the maps on a ball", "the whole graph at the maps' points",
                   "variances at the other winning points"))

    def run(fn, tasks):
        desc = next(stages)
        if workers == 1 or len(tasks) < 2:
            return [fn(*args) for args in tqdm(tasks, desc=desc, disable=None if progress
                                               else True, leave=False)]
        from joblib import Parallel, delayed

        return list(tqdm(Parallel(n_jobs=workers, backend="loky", return_as="generator")(
            delayed(fn)(*args) for args in tasks), total=len(tasks), desc=desc,
            disable=None if progress else True, leave=False))

    seed = integer_seed(reg.random_state)
    fits = fit_matern_maps(graph, observed, Z, nus, n_samples=GRAPH_MATERN_VARIANCE_SAMPLES,
                         random_state=seed, search_max_nodes=gaussian.SEARCH_MAX_NODES,
                         run=run, n_groups=workers)
    return [None if fit is None else {precomputed_key(graph, observed, Z[:, j], nus): fit}
            for j, fit in enumerate(fits)]


# the region's heat-kernel eigenpair candidates, shared by the maps this process fits
_CANDIDATES = {}


def _fit_map(j, reg, graph, coords, y, record=False, precomputed=None, candidates=None):
    """One map's fit: ``(j, fitted clone of reg, seconds, warnings)``; the warnings are
    recorded (a worker process) when ``record``, else issued. ``candidates``: the
    eigenpair store (:func:`flgp.models.eigenbasis.shared_candidates`; default this
    process's)."""
    with warnings.catch_warnings(record=record) as caught, \
            precomputed_fits(precomputed or {}), \
            shared_candidates(_CANDIDATES if candidates is None else candidates):
        if record:
            warnings.simplefilter("always")
        start = time.perf_counter()
        fit = clone(reg)
        fit.set_params(prior=with_graph(fit.prior, graph))
        fit.fit(coords, y)
        seconds = time.perf_counter() - start
    records = [(w.message, w.category, w.filename, w.lineno) for w in caught or ()]
    return j, fit, seconds, records


def _map_row(j, reg, seconds) -> dict:
    """One row of :attr:`ImagePrediction.maps` from a fitted regressor."""
    full_resolution = reg.method_ == "graph_matern"
    return dict(map=j, method=reg.method_,
                order=getattr(reg, "matern_order_", None) if full_resolution else None,
                kappa=getattr(reg, "matern_kappa_", None) if full_resolution else None,
                noise=float(reg.noise_), outputscale=float(reg.outputscale_),
                log_evidence=float(reg.log_marginal_likelihood_), seconds=float(seconds))


def _shared_fit(graph, values, obs, include_noise, reg):
    """``hyperparameters="shared"``: the maps' means and sds ``(n, k)`` and the table's
    rows, each map standardised by its observed values' mean and sd."""
    observed = np.flatnonzero(obs)
    y = values[observed]
    centre, scale = y.mean(axis=0), y.std(axis=0)
    z = (y - centre) / scale
    nus = MATERN_ORDERS if reg.matern_order is None else (int(reg.matern_order),)
    best, regression, _ = fit_matern(graph, observed, z, nus)
    seed = integer_seed(reg.random_state)
    var, _ = regression.variances(best, n_samples=GRAPH_MATERN_VARIANCE_SAMPLES,
                                  random_state=seed)
    # each map's amplitude cross-validated, as a map fitted alone
    amplitude = np.broadcast_to(best.amplitude, z.shape[1])
    cv = np.array([cross_validated_scale(regression, z[:, j], best.mean[observed, j],
                                         best.ratio, float(amplitude[j]), var[observed, j])
                   for j in range(z.shape[1])])
    var = var * cv
    mean = centre + scale * best.mean
    noise = cv * best.amplitude * best.ratio                      # (k,) standardised
    sd = scale * np.sqrt(np.maximum(var + (noise if include_noise else 0.0), 0.0))
    m = observed.size
    outputscale = cv * best.amplitude_in_graph_units * scale ** 2  # the graph's units
    rows = [dict(map=j, method="graph_matern", order=best.nu, kappa=best.kappa,
                 noise=float(noise[j] * scale[j] ** 2),
                 outputscale=float(outputscale[j]),
                 log_evidence=None, seconds=None) for j in range(values.shape[1])]
    rows.append(dict(map="all", method="graph_matern", order=best.nu, kappa=best.kappa,
                     log_evidence=float(best.log_evidence - m * np.log(scale).sum())))
    return mean, sd, rows


def _predict_image(image, mask, observed, reg, random_state, fill, include_noise,
                   progress) -> ImagePrediction:
    """:func:`predict_image` of one map, past the checks, ``reg`` the fresh regressor."""
    from tqdm.auto import tqdm

    stages = ["reading images", f"fitting FLGPRegressor (prior {reg.method!r})",
              "writing images"]
    bar = tqdm(total=len(stages), desc=stages[0], unit="stage", disable=None if progress
               else True, leave=False)
    try:
        img, data = image                       # read once, by predict_image
        region = (region_of(data) if mask is None else
                  grid_mask(mask, img, data.shape, "mask"))
        n = int(region.sum())
        if n == 0:
            raise ValueError("the region is empty: the mask has no non-zero voxel"
                             + (" where the image is finite and non-zero" if mask is None
                                else "") + "; check the mask (is it on this image?).")
        bad = region & ~np.isfinite(data)
        if bad.any():
            first = tuple(int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"the image has {int(bad.sum())} NaN or infinite voxel(s) "
                             f"inside the region (the first at voxel {first}); drop them "
                             f"from the mask (e.g. mask & np.isfinite(data)) or replace "
                             f"them (e.g. nilearn.image.math_img('np.nan_to_num(img)', "
                             f"img=image)).")
        voxels = load_voxels(img, region)      # coordinates (mm), values, C order
        obs = _observed(observed, img, data.shape, region, random_state)
        if reg.graph is None and reg._offers("graph_matern"):
            # the region's lattice (face neighbours, mm weights)
            reg.set_params(prior=with_graph(reg.prior,
                                            lattice_graph(voxels.ijk, img.affine)))
        _check_memory(n, reg, progress)
        bar.update()
        bar.set_description(stages[1])
        y = np.where(obs, voxels.values, np.nan)
        start = time.perf_counter()
        reg.fit(voxels.coords, y)
        seconds = time.perf_counter() - start
        bar.update()
        bar.set_description(stages[2])
        mean = np.asarray(reg.transduction_, dtype=np.float64)
        sd = np.asarray(reg.transduction_std_, dtype=np.float64)
        if include_noise:
            sd = np.sqrt(sd ** 2 + reg.noise_)
        out = [copy_spatial_codes(voxels.to_nifti(v, fill=float(fill)), img)
               for v in (mean, sd)]
        out[0].header["descrip"] = b"flgp: posterior mean of the map"
        out[1].header["descrip"] = (b"flgp: predictive sd of a new observation" if include_noise
                                    else b"flgp: posterior sd of the map (no noise)")
        bar.update()
    finally:
        bar.close()
    return ImagePrediction(mean=out[0], sd=out[1], regressor=reg, voxels=voxels,
                           observed=obs, seconds=seconds)


def grid_mask(mask, img, shape, name):
    """Boolean array of a mask (array, image or path) on ``img``'s grid; ValueError for
    another grid, TypeError for another kind."""
    if isinstance(mask, np.ndarray):
        if mask.shape != shape:
            raise ValueError(f"{name} array has shape {mask.shape}; the image's grid is "
                             f"{shape}. Give an array of the image's shape, or a NIfTI "
                             f"mask on its grid.")
        if mask.dtype == bool:
            return mask.copy()
        if not np.issubdtype(mask.dtype, np.number):
            raise TypeError(f"{name} array must be boolean or numeric; got dtype "
                            f"{mask.dtype}.")
        return region_of(mask.astype(np.float64))
    try:
        mimg = as_nifti(mask, name)
    except TypeError:
        raise TypeError(f"{name} must be a NIfTI image, a path to one or a boolean array "
                        f"of the image's shape; got {type(mask).__name__}.") from None
    if mimg.shape[:3] != shape or not np.allclose(mimg.affine, img.affine):
        what = (f"shape {mimg.shape[:3]} instead of {shape}" if mimg.shape[:3] != shape
                else "the same shape but another affine")
        raise ValueError(f"{name} is not on the image's grid ({what}); nothing is "
                         f"resampled silently: " + RESAMPLE_HINT.format(name=name) + ".")
    return region_of(volume_of(mimg, name)[1])


def _observed(observed, img, shape, region, random_state):
    """Boolean array over the region's voxels (C order) of the observed ones."""
    n = int(region.sum())
    if isinstance(observed, numbers.Real) and not isinstance(observed, (bool, np.bool_)):
        frac = float(observed)
        if not 0.0 < frac < 1.0:
            raise ValueError(f"a fraction of observed voxels must lie strictly between 0 "
                             f"and 1; got {observed!r}. Pass a mask to observe given "
                             f"voxels.")
        m = int(round(frac * n))
        if m < 2:
            raise ValueError(f"observed={frac:g} of the region's {n} voxels gives {m} "
                             f"observed voxel(s); at least 2 are needed: raise the "
                             f"fraction or enlarge the region.")
        obs = np.zeros(n, dtype=bool)
        obs[np.random.default_rng(random_state).choice(n, size=m, replace=False)] = True
        return obs
    if observed is None or isinstance(observed, (bool, np.bool_)):
        raise TypeError(f"observed must be a mask (NIfTI image, path or boolean array) or "
                        f"a fraction in (0, 1); got {observed!r}.")
    obs_grid = grid_mask(observed, img, shape, "observed")
    outside = obs_grid & ~region
    if outside.any():
        first = tuple(int(v) for v in np.argwhere(outside)[0])
        raise ValueError(f"{int(outside.sum())} observed voxel(s) lie outside the region "
                         f"(the first at voxel {first}); observe voxels of the region "
                         f"only, e.g. observed & region "
                         f"(nilearn.masking.intersect_masks([observed, region], "
                         f"threshold=1)).")
    m = int(obs_grid.sum())
    if m == 0:
        raise ValueError("no observed voxel: the observed mask has no non-zero voxel; mark "
                         "at least 2 voxels of the region as observed.")
    if m < 2:
        raise ValueError("only 1 observed voxel; at least 2 are needed to fit the "
                         "regressor: mark more voxels of the region as observed.")
    return obs_grid[region]
