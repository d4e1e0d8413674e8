"""Group maps of many subjects' maps on one mask, and contrasts of two groups: the population
mean map under the two-level model of :mod:`flgp.precision.group`, with its posterior and
excursion sets. Images in give NIfTI images out; arrays ``(n_nodes, n_subjects)`` give arrays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..datasets.fmri import Voxels, copy_spatial_codes, region_of
from ..graph.lattice import lattice_graph
from ..graph.point_graph import PointGraph
from ..precision.excursion import ExcursionSet, PosteriorDraws, excursion_function
from ..precision.gaussian import SEARCH_MAX_NODES
from ..precision.group import (GroupParameters, GroupPosterior, contrast_draws, fit_group)
from ..precision.matern import MATERN_ORDERS
from .image import maps_of, region_voxels

__all__ = ["GroupMap", "GroupContrast", "group_map", "group_contrast"]


def _as_output(values, voxels, reference, fill, description):
    """``values`` as an image on the maps' grid (as they are for arrays)."""
    if voxels is None:
        return values
    out = copy_spatial_codes(voxels.to_nifti(values, fill=float(fill)), reference)
    out.header["descrip"] = description
    return out


@dataclass
class _Posterior:
    """Shared by group maps and contrasts: excursion sets and images."""

    def to_image(self, values, fill: float = 0.0):
        """``values`` (one a node) as a NIfTI image on the maps' grid, ``fill`` outside the
        mask (as they are for arrays). ValueError unless one entry a node."""
        values = np.asarray(values)
        if values.shape[:1] != (self.graph.n_nodes,):
            raise ValueError(f"values must hold one entry a node ({self.graph.n_nodes}); "
                             f"got shape {values.shape}.")
        if self.voxels is None:
            return values
        return copy_spatial_codes(self.voxels.to_nifti(values.astype(np.float64),
                                                       fill=float(fill)), self._reference)

    def excursion_set(self, u, alpha=0.05, *, side: str = ">", n_samples: int = 1000,
                      n_sd: float = 2.0, random_state=0) -> ExcursionSet:
        """The largest set of nodes where the map exceeds ``u`` (``side=">"``; is below it for
        ``"<"``) jointly with posterior probability ``>= 1 - alpha``, from ``n_samples`` joint
        draws (:mod:`flgp.precision.excursion`); :meth:`to_image` maps its ``mask``."""
        draws = self.draws(n_samples, random_state=random_state)
        sd = self._sd_nodes
        return excursion_function(draws.mean, draws, u, side, sd=sd,
                                  n_sd=n_sd).set_at(alpha)


@dataclass
class GroupMap(_Posterior):
    """What :func:`group_map` returns.

    Attributes
    ----------
    mean, std : ndarray (n_nodes,) or nibabel.Nifti1Image
        Posterior mean and standard deviation of the group map ``g``.
    parameters : flgp.precision.group.GroupParameters
        Fitted hyperparameters, in the units of the graph (mm for images) and maps.
    log_likelihood : float
        ``log p(y_1, ..., y_S)`` at the fit.
    n_subjects : int
    posterior : flgp.precision.group.GroupPosterior
    graph : flgp.graph.PointGraph
        For images, the mask's voxel lattice.
    voxels : flgp.datasets.Voxels or None
        For images, the mask's voxels in the nodes' order.
    seconds : float
        Wall time of the fit.
    record : dict
        The record of :func:`flgp.precision.group.fit_group`.
    """

    mean: object
    std: object
    parameters: GroupParameters
    log_likelihood: float
    n_subjects: int
    posterior: GroupPosterior
    graph: PointGraph
    voxels: Voxels | None
    seconds: float
    record: dict = field(default_factory=dict)
    _reference: object = field(default=None, repr=False)
    _sd_nodes: np.ndarray = field(default=None, repr=False)

    @property
    def hyperparameters(self) -> dict:
        """Fitted hyperparameters by name, ``kappa`` (1 / length) for ``κ²``."""
        p = self.parameters
        return dict(nu_group=p.nu_group, kappa_group=float(np.sqrt(p.kappa2_group)),
                    amplitude_group=p.amplitude_group, level=p.level,
                    nu_subject=p.nu_subject, kappa_subject=float(np.sqrt(p.kappa2_subject)),
                    amplitude_subject=p.amplitude_subject, noise=p.noise)

    def draws(self, n_samples: int = 1000, *, random_state=0) -> PosteriorDraws:
        """Joint posterior draws of ``g`` at every node."""
        return self.posterior.draws(n_samples, random_state=random_state)


@dataclass
class GroupContrast(_Posterior):
    """What :func:`group_contrast` returns: the posterior of ``g_a - g_b``.

    Attributes
    ----------
    mean, std : ndarray (n_nodes,) or nibabel.Nifti1Image
        Posterior mean and standard deviation of ``g_a - g_b`` (independent groups).
    group_a, group_b : GroupMap
    graph : flgp.graph.PointGraph
    voxels : flgp.datasets.Voxels or None
    """

    mean: object
    std: object
    group_a: GroupMap
    group_b: GroupMap
    graph: PointGraph
    voxels: Voxels | None
    _reference: object = field(default=None, repr=False)
    _sd_nodes: np.ndarray = field(default=None, repr=False)

    def draws(self, n_samples: int = 1000, *, random_state=0) -> PosteriorDraws:
        """Joint posterior draws of ``g_a - g_b`` (differences of independent draws)."""
        return contrast_draws(self.group_a.posterior, self.group_b.posterior, n_samples,
                              random_state=random_state)


def _nodes_of(maps, mask, graph, name):
    """``(values (n, S), graph, voxels, reference image)`` of an array on ``graph`` or of
    images (``voxels`` and the reference None for arrays)."""
    if isinstance(maps, np.ndarray):
        if maps.ndim != 2:
            raise ValueError(f"{name} must be an array (n_nodes, n_subjects) on a graph, or "
                             f"images (a 4-d NIfTI image or a list of 3-d ones); got an "
                             f"array of shape {maps.shape}.")
        if mask is not None:
            raise ValueError(f"{name} is an array: give its graph (graph=...), not a mask "
                             f"(a mask selects the voxels of images).")
        if not isinstance(graph, PointGraph):
            raise ValueError(f"{name} is an array (n_nodes, n_subjects): give the graph its "
                             f"rows are the nodes of (graph=flgp.graph.lattice_graph(ijk), "
                             f"say); got graph={graph!r:.60}.")
        values = np.asarray(maps, dtype=np.float64)
        if values.shape[0] != graph.n_nodes:
            raise ValueError(f"{name} must be an array (n_nodes, n_subjects) with one row a "
                             f"node of the graph ({graph.n_nodes} nodes); got shape "
                             f"{values.shape}.")
        return values, graph, None, None
    img, data = maps_of(maps)
    return _voxels_of(img, data, mask, graph)


def _voxels_of(img, data, mask, graph):
    """:func:`_nodes_of` of images read: ``data`` ``(X, Y, Z, S)`` on ``img``'s grid."""
    shape = data.shape[:3]
    ijk = region_voxels(data, mask, img)
    values = data[tuple(ijk.T)]
    voxels = Voxels(coords=ijk @ img.affine[:3, :3].T + img.affine[:3, 3],
                    values=values[:, 0], ijk=ijk, affine=img.affine, shape=shape)
    if graph is None:
        graph = lattice_graph(ijk, img.affine)
    elif not isinstance(graph, PointGraph) or graph.n_nodes != ijk.shape[0]:
        raise ValueError(f"graph must be a PointGraph of the mask's {ijk.shape[0]} voxels "
                         f"(in the order of np.argwhere(mask)); got "
                         f"{getattr(graph, 'n_nodes', graph)!r:.60} nodes.")
    return values, graph, voxels, img


def _check_finite(values, voxels, name):
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        where = (f"voxel {tuple(int(v) for v in voxels.ijk[row])}" if voxels is not None
                 else f"node {int(row)}")
        raise ValueError(f"{name}: subject {int(col)} has {int(bad[:, col].sum())} NaN or "
                         f"infinite value(s) inside the mask (the first at {where}); every "
                         f"subject must be observed at every voxel of the mask: drop them "
                         f"from the mask or replace them.")
    if values.shape[1] < 2:
        raise ValueError(f"{name} holds {values.shape[1]} subject map; a group map needs at "
                         f"least 2 (their spread measures the subjects' deviations).")


def _fit(values, graph, voxels, reference, fill, nus, subject_nus, search_max_nodes,
         random_state, name) -> GroupMap:
    _check_finite(values, voxels, name)
    start = time.perf_counter()
    posterior, record = fit_group(graph, values, nus=nus, subject_nus=subject_nus,
                                  search_max_nodes=search_max_nodes)
    sd = posterior.marginal_sd(random_state)
    seconds = time.perf_counter() - start
    return GroupMap(
        mean=_as_output(posterior.mean, voxels, reference, fill,
                        b"flgp: posterior mean of the group map"),
        std=_as_output(sd, voxels, reference, fill, b"flgp: posterior sd of the group map"),
        parameters=posterior.parameters, log_likelihood=record["log_likelihood"],
        n_subjects=values.shape[1], posterior=posterior, graph=graph, voxels=voxels,
        seconds=seconds, record=record, _reference=reference, _sd_nodes=sd)


def group_map(maps, mask=None, *, graph=None, nus=MATERN_ORDERS, subject_nus=None,
              fill: float = 0.0, search_max_nodes: int = SEARCH_MAX_NODES,
              random_state=0) -> GroupMap:
    """The population mean map of several subjects' maps on one mask, with its posterior,
    under the two-level graph Matérn model ``y_s = g + d_s + ε_s`` of
    :mod:`flgp.precision.group`, fitted by maximum likelihood (subjects' part from
    ``y_s - ȳ``, then the group's from ``ȳ``).

    Parameters
    ----------
    maps : nibabel image or path, list of them, or array-like (n_nodes, n_subjects)
        A 4-d image (one volume a subject) or a list of 3-d images on one grid; or an
        array, one row a node of ``graph``. At least 2 subjects, finite in the mask.
    mask : nibabel image, path or boolean array, optional
        For images only: the mask on the maps' grid; default the voxels finite and non-zero
        in every map.
    graph : flgp.graph.PointGraph, optional
        Required for arrays; for images default the mask's voxel lattice (mm).
    nus : sequence of int, default=MATERN_ORDERS
        Orders searched for the group map's prior.
    subject_nus : sequence of int, optional
        Orders searched for the deviations' prior (default ``nus``).
    fill : float, default=0.0
        Images' value outside the mask.
    search_max_nodes : int, default=SEARCH_MAX_NODES
        Masks of more than twice this many voxels search on a ball of this many.
    random_state : int, default=0
        Seeds the Monte Carlo posterior sd (beyond ``EXACT_SD_MAX_NODES`` nodes).

    Returns
    -------
    GroupMap

    Raises
    ------
    ValueError
        Fewer than 2 subjects, maps on different grids, non-finite values inside the mask,
        a mask off the grid or empty, an array without its graph (or of another size), or
        a mask with an array.

    Warns
    -----
    UserWarning
        Where the subjects' deviations differ in mean square by more than a factor
        ``NOISE_SPREAD_WARNING``.

    Examples
    --------
    >>> import numpy as np, flgp
    >>> from flgp.graph import lattice_graph
    >>> ijk = np.argwhere(np.ones((6, 6, 2), bool))
    >>> rng = np.random.default_rng(0)
    >>> g = np.exp(-((ijk[:, :2] - 2.5) ** 2).sum(1) / 4)
    >>> maps = g[:, None] + 0.3 * rng.standard_normal((72, 8))
    >>> result = flgp.group_map(maps, graph=lattice_graph(ijk))
    >>> result.mean.shape, result.n_subjects
    ((72,), 8)
    >>> found = result.excursion_set(0.2, alpha=0.05, n_samples=2000)
    >>> bool(found.n_nodes_in_set == 0 or found.joint_lower >= 0.95)
    True
    """
    values, graph, voxels, reference = _nodes_of(maps, mask, graph, "maps")
    return _fit(values, graph, voxels, reference, fill, nus, subject_nus, search_max_nodes,
                random_state, "maps")


def group_contrast(maps_a, maps_b, mask=None, *, graph=None, nus=MATERN_ORDERS,
                   subject_nus=None, fill: float = 0.0,
                   search_max_nodes: int = SEARCH_MAX_NODES,
                   random_state=0) -> GroupContrast:
    """The contrast ``g_a - g_b`` of two independent groups' maps, each fitted by
    :func:`group_map`: mean ``m_a - m_b``, variance ``v_a + v_b``.

    Parameters
    ----------
    maps_a, maps_b : as ``maps`` of :func:`group_map`
        The two groups' maps on one grid or graph (numbers of subjects may differ).
    mask, graph, nus, subject_nus, fill, search_max_nodes, random_state
        As in :func:`group_map`; the default mask covers both groups.

    Returns
    -------
    GroupContrast

    Raises
    ------
    ValueError
        As :func:`group_map`, and groups on different grids or graphs.
    """
    arrays = [isinstance(maps, np.ndarray) for maps in (maps_a, maps_b)]
    if arrays[0] != arrays[1]:
        raise ValueError(f"maps_{'a' if arrays[0] else 'b'} is an array and the other group "
                         f"is not; give both groups as arrays (n_nodes, n_subjects) on one "
                         f"graph, or both as images on one grid.")
    if arrays[0]:
        values_a, graph, voxels, reference = _nodes_of(maps_a, mask, graph, "maps_a")
        values_b = _nodes_of(maps_b, mask, graph, "maps_b")[0]
    else:
        img_a, data_a = maps_of(maps_a)
        img_b, data_b = maps_of(maps_b)
        if data_a.shape[:3] != data_b.shape[:3] or not np.allclose(img_a.affine,
                                                                   img_b.affine):
            what = (f"shapes {data_a.shape[:3]} and {data_b.shape[:3]}"
                    if data_a.shape[:3] != data_b.shape[:3] else "different affines")
            raise ValueError(f"the two groups' maps are not on one grid ({what}); resample "
                             f"them onto one grid first (nilearn.image.resample_to_img).")
        if mask is None:
            mask = np.all(region_of(data_a), axis=3) & np.all(region_of(data_b), axis=3)
        values_a, graph, voxels, reference = _voxels_of(img_a, data_a, mask, graph)
        values_b = data_b[tuple(voxels.ijk.T)]
    group_a = _fit(values_a, graph, voxels, reference, fill, nus, subject_nus,
                   search_max_nodes, random_state, "maps_a")
    group_b = _fit(values_b, graph, voxels, reference, fill, nus, subject_nus,
                   search_max_nodes, random_state, "maps_b")
    mean = group_a.posterior.mean - group_b.posterior.mean
    sd = np.sqrt(group_a._sd_nodes ** 2 + group_b._sd_nodes ** 2)
    return GroupContrast(
        mean=_as_output(mean, voxels, reference, fill,
                        b"flgp: posterior mean of the group contrast"),
        std=_as_output(sd, voxels, reference, fill,
                       b"flgp: posterior sd of the group contrast"),
        group_a=group_a, group_b=group_b, graph=graph, voxels=voxels,
        _reference=reference, _sd_nodes=sd)
