r"""FLGP eigenpairs (He et al., Algorithm 1 step 5) from a :class:`~flgp.graph.CrossGraph`.

With ``B = A Λ^{-1/2}`` (``n x s``, ``r`` entries per row), ``G = B^T B = W Σ^2 W^T``
(``O(n r^2 + s^3)``) gives the singular values ``σ`` and left singular vectors
``V = B W Σ^{-1}``, the eigenvectors of ``L = I - A Λ^{-1} A^T``.

Two spectra (``spectrum=``):

* ``"two_step"`` - ``λ = 1 - σ^2``, the eigenvalues of ``L`` as written in the paper;
* ``"one_step"`` (default) - ``λ = 1 - σ``, the eigenvalues of ``I - (A Λ^{-1} A^T)^{1/2}``
  (the one-step walk, as GLGP's ``L = I - A``; the authors' package default).

Out of sample, ``v(x) = a(x) Λ^{-1/2} W Σ^{-1}`` (:class:`FLGPExtension`); the cloud's
eigenvectors are the same map of its transition rows (:class:`GraphVectorRows`).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .._chunks import count, row_bytes, stage
from .._config import working_memory_bytes
from .._validation import check_int, check_option
from ..backends import compiled
from ..graph.pieces import connected_pieces
from .eigenpairs import Eigenpairs, RowSquaredNorm, deterministic_sign_flip, symmetric_eigh

__all__ = ["flgp_eigenpairs", "FLGPExtension", "FLGPRowMap", "GraphVectorRows", "SPECTRA"]

SPECTRA = ("one_step", "two_step")

# singular values below this (relative to sigma_1 = 1) carry no usable eigenvector
_SIGMA_FLOOR = 1e-8


class FLGPRowMap:
    """Eigenvector rows ``v = a P`` of transition rows ``a``, ``P = Λ^{-1/2} W Σ^{-1}``
    (``s x M``), and a row's piece (its most probable induced point's). Picklable."""

    def __init__(self, projection, induced_pieces: np.ndarray):
        self.projection = projection
        self.induced_pieces = induced_pieces

    @property
    def width(self) -> int:
        """Columns of the rows :meth:`vectors` returns (summed over a tuple)."""
        parts = self.projection if isinstance(self.projection, tuple) else (self.projection,)
        return int(sum(P.shape[1] for P in parts))

    def vectors(self, idx: np.ndarray, values: np.ndarray):
        """``A_b P`` (``(b, M)``) of ``b`` transition rows; tuple-wise for a tuple."""
        b, r = idx.shape
        count("eigenvector row flops", 2 * b * r * self.width)
        parts = self.projection if isinstance(self.projection, tuple) else (self.projection,)
        if compiled.enabled() and all(P.dtype == np.float64 for P in parts):
            # compiled kernel: float64 only (float32 keeps scipy's float32 product)
            if not isinstance(self.projection, tuple):
                return compiled.rows_times(idx, values, self.projection)
            return tuple(P.of_rows(idx, values) if isinstance(P, _SquaredNorm)
                         else compiled.rows_times(idx, values, P) for P in self.projection)
        s = self.induced_pieces.shape[0]
        A = sp.csr_matrix((values.ravel(), idx.ravel(), np.arange(0, b * r + 1, r)),
                          shape=(b, s))
        if not isinstance(self.projection, tuple):
            return np.asarray(A @ self.projection)
        single = A.astype(np.float32) if any(P.dtype == np.float32
                                             for P in self.projection) else None
        return tuple(P.of_transition(A, idx, values) if isinstance(P, _SquaredNorm)
                     else np.asarray((single if P.dtype == np.float32 else A) @ P)
                     for P in self.projection)

    def pieces(self, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        top = idx[np.arange(idx.shape[0]), values.argmax(axis=1)]
        return self.induced_pieces[top]

    def projected(self, project, tables: bool = True) -> "FLGPRowMap":
        """The map to ``v L = a (P L)`` for an ``M x k`` ``L``. In a tuple each ``P L`` keeps
        ``L``'s dtype, and a :class:`~flgp.spectral.eigenpairs.RowSquaredNorm` ``F`` becomes
        the ``s x s`` table ``(P F)(P F)ᵀ`` (with ``tables``, within working memory) or the
        rows ``P F``."""
        if isinstance(project, tuple):
            return FLGPRowMap(tuple(self._project_one(L, tables) for L in project),
                              self.induced_pieces)
        return FLGPRowMap(np.ascontiguousarray(self.projection @ project),
                          self.induced_pieces)

    def _project_one(self, L, tables):
        if isinstance(L, RowSquaredNorm):
            rows = np.ascontiguousarray(self.projection @ L.factor)
            s = rows.shape[0]
            if tables and 8 * s * s <= working_memory_bytes() and L.factor.shape[1] > 8:
                return _SquaredNormTable(rows @ rows.T)
            return _SquaredNormRows(rows)
        return np.ascontiguousarray(self.projection @ L, dtype=L.dtype)


class _SquaredNorm:
    """A :class:`~flgp.spectral.eigenpairs.RowSquaredNorm` on the induced points: ``|a P F|²``
    per transition row ``a``."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.shape = (array.shape[0], 1)
        self.dtype = np.dtype(np.float64)


class _SquaredNormTable(_SquaredNorm):
    """``|a R|² = a S aᵀ`` from the table ``S = R Rᵀ``, ``R = P F``."""

    def of_transition(self, A, idx, values):
        S = self.array[idx[:, :, None], idx[:, None, :]]               # (b, r, r)
        return np.einsum("bj,bjl,bl->b", values, S, values)

    def of_rows(self, idx, values):
        """:meth:`of_transition` by the compiled kernel (no sparse matrix)."""
        return compiled.rows_quadratic(idx, values, self.array)


class _SquaredNormRows(_SquaredNorm):
    """``|a R|²`` from the rows ``R = P F`` (``s x k``)."""

    def of_transition(self, A, idx, values):
        G = np.asarray(A @ self.array)
        return np.einsum("ij,ij->i", G, G)

    def of_rows(self, idx, values):
        """:meth:`of_transition` by the compiled kernel (no sparse matrix)."""
        G = compiled.rows_times(idx, values, self.array)
        return np.einsum("ij,ij->i", G, G)


class GraphVectorRows:
    """An FLGP fit's eigenvector rows: the cloud's transition rows
    (:meth:`flgp.graph.CrossGraph.row_source`) through an :class:`FLGPRowMap`."""

    tracks_pieces = True

    def __init__(self, graph, row_map: FLGPRowMap):
        self.graph = graph
        self.row_map = row_map
        self.source = graph.row_source()

    @property
    def is_dask(self) -> bool:
        return self.graph.is_dask

    @property
    def n_samples(self) -> int:
        return self.graph.n_samples

    def _rows(self, index):
        return self.source.at(self.graph.blocks, index)

    def vectors(self, index):
        return self.row_map.vectors(*self._rows(index))

    def pieces(self, index):
        return self.row_map.pieces(*self._rows(index))

    def projected(self, project: np.ndarray) -> "GraphVectorRows":
        """The rows of ``V L`` (see :meth:`FLGPRowMap.projected`)."""
        return GraphVectorRows(self.graph, self.row_map.projected(project,
                                                             tables=not self.is_dask))

    def _bytes_per_row(self, width: int) -> int:
        p = self.graph.induced.points.shape[1] if self.is_dask else 0
        r = self.graph.n_neighbors if self.is_dask else 3
        return row_bytes(p, r, width)

    def map(self, func, *, n_columns=None, dtype=np.float64, chunk_size=None,
            parallel=False):
        """``func(vectors, pieces)`` over blocks of rows (numpy, or lazy dask)."""
        width = self.row_map.width
        if chunk_size is None and self.is_dask:
            chunk_size = self.graph.chunk_size
        return self.graph.blocks.map(_RowsThrough(self.source, self.row_map, func),
                                     bytes_per_row=self._bytes_per_row(width),
                                     chunk_size=chunk_size, n_columns=n_columns, dtype=dtype,
                                     parallel=parallel)

    def reduce(self, func, shape, *, chunk_size=None, parallel=False) -> np.ndarray:
        """:meth:`Eigenpairs.reduce_chunks`."""
        shape = tuple(int(v) for v in np.atleast_1d(shape))
        width = self.row_map.width
        if chunk_size is None and self.is_dask:
            chunk_size = self.graph.chunk_size
        term = _SumThrough(self.source, self.row_map, func, shape)
        return self.graph.blocks.reduce(term, layout=[("total", shape)],
                                        bytes_per_row=self._bytes_per_row(width),
                                        chunk_size=chunk_size,
                                        threads=None if parallel else 1)["total"]

    def all_vectors(self):
        return self.map(_vectors_only, n_columns=self.row_map.projection.shape[1],
                        chunk_size=self.graph.chunk_size)

    def all_pieces(self):
        return self.map(_pieces_only, dtype=np.int64, chunk_size=self.graph.chunk_size)


class _RowsThrough:
    """``func(vectors, pieces)`` of a block's transition rows (picklable)."""

    def __init__(self, source, row_map: FLGPRowMap, func):
        self.source, self.row_map, self.func = source, row_map, func

    def __call__(self, Xb, a, b):
        with stage("map/eigenvector rows"):
            idx, values = self.source(Xb, a, b)
            V, comp = self.row_map.vectors(idx, values), self.row_map.pieces(idx, values)
        with stage("map/function"):
            return self.func(V, comp)


class _SumThrough(_RowsThrough):
    """``{"total": func(vectors, pieces, start)}`` of a block (a partial)."""

    def __init__(self, source, row_map, func, shape):
        super().__init__(source, row_map, func)
        self.shape = shape

    def __call__(self, Xb, a, b):
        idx, values = self.source(Xb, a, b)
        term = self.func(self.row_map.vectors(idx, values),
                         self.row_map.pieces(idx, values), a)
        return {"total": np.asarray(term, dtype=np.float64).reshape(self.shape)}


def _vectors_only(V, comp):
    return V


def _pieces_only(V, comp):
    return comp


class FLGPExtension:
    """``v(x) = a(x) P`` for new points (:class:`FLGPRowMap`)."""

    def __init__(self, graph, projection: np.ndarray, induced_pieces: np.ndarray):
        self.graph = graph
        self.projection = projection
        self.induced_pieces = induced_pieces

    @property
    def row_map(self) -> FLGPRowMap:
        return FLGPRowMap(self.projection, self.induced_pieces)

    def __call__(self, X_new) -> np.ndarray:
        return self.with_pieces(X_new)[0]

    def with_pieces(self, X_new, return_nearest: bool = False, restrict: bool = False,
                        row_map: FLGPRowMap | None = None):
        """Eigenvector values and pieces of new points (``return_nearest``: also squared
        distances to the nearest induced point). ``row_map``: another map, e.g.
        :meth:`FLGPRowMap.projected`. ``restrict``: each row cut to its own piece's induced
        points and renormalised (cloud points unchanged)."""
        idx, values, sq = self.graph.transition_rows(X_new, return_sq=True)
        return rows_to_vectors(self.row_map if row_map is None else row_map, idx, values, sq,
                               return_nearest, restrict)

    def map_points(self, X_new, func, *, n_columns=None, dtype=np.float64, chunk_size=None,
                   restrict: bool = False, project=None):
        """``func(vectors, pieces)`` over a dask array of new points, lazily."""
        from .._chunks.dask_blocks import DaskBlocks, as_dask_points

        X_new = as_dask_points(X_new)
        p = self.graph.induced.points.shape[1]
        if X_new.shape[1] != p:
            raise ValueError(f"X has {X_new.shape[1]} features but the graph was built on "
                             f"{p}.")
        row_map = self.row_map if project is None else self.row_map.projected(project,
                                                                              tables=False)
        width = row_map.width
        return DaskBlocks(X_new).map(
            _NewPointRows(self.graph.step(), row_map, func, restrict),
            bytes_per_row=row_bytes(p, self.graph.n_neighbors, width),
            chunk_size=chunk_size, n_columns=n_columns, dtype=dtype)


class _NewPointRows:
    """``func(vectors, pieces)`` of a block of new points (picklable)."""

    def __init__(self, step, row_map: FLGPRowMap, func, restrict: bool):
        self.step, self.row_map, self.func, self.restrict = step, row_map, func, restrict

    def __call__(self, Xb, a, b):
        idx, values, sq = self.step.transition_rows(Xb, workers=1)
        V, comp = rows_to_vectors(self.row_map, idx, values, sq, False, self.restrict)
        return self.func(V, comp)


def rows_to_vectors(row_map: FLGPRowMap, idx, values, sq, return_nearest=False,
                    restrict=False):
    """:meth:`FLGPExtension.with_pieces` from transition rows already computed."""
    comp = row_map.pieces(idx, values)
    if restrict:
        values = np.where(row_map.induced_pieces[idx] == comp[:, None], values, 0.0)
        values = values / values.sum(axis=1, keepdims=True)
    vectors = row_map.vectors(idx, values)
    return (vectors, comp, sq[:, 0]) if return_nearest else (vectors, comp)


def _pieces(gram: np.ndarray, used: np.ndarray) -> tuple[int, np.ndarray]:
    """``(count, labels)`` of the Gram pattern's pieces (-1: unused induced point)."""
    pieces = connected_pieces(gram, active=used)
    return pieces.n_pieces, pieces.labels


def flgp_eigenpairs(graph, n_eigenpairs: int, *, spectrum: str = "one_step") -> Eigenpairs:
    """Top ``M`` eigenpairs of the FLGP graph Laplacian.

    Parameters
    ----------
    graph : CrossGraph or DaskCrossGraph
        From :func:`flgp.graph.build_cross_graph`.
    n_eigenpairs : int
        ``M <= s``.
    spectrum : {"one_step", "two_step"}, default="one_step"
        ``λ = 1 - σ`` or ``λ = 1 - σ^2`` (see the module notes).

    Returns
    -------
    Eigenpairs
        ``n x M`` orthonormal eigenvectors (kept as a map), the first constant
        (``λ_1 = 0``); signs make each column of ``W``'s largest entry positive.

    Raises
    ------
    ValueError
        ``n_eigenpairs`` not in ``[1, s]``, or an unknown ``spectrum``.
    TypeError
        ``n_eigenpairs`` not an integer.

    Warns
    -----
    UserWarning
        Several connected pieces (each with ``λ = 0``), or fewer than ``M`` usable
        singular values (fewer pairs are returned).
    """
    check_option(spectrum, "spectrum", SPECTRA)
    s = graph.n_induced
    M = check_int(n_eigenpairs, "n_eigenpairs", low=1, high=s, high_name="n_induced",
                  fix="The FLGP Laplacian has at most n_induced eigenpairs; lower n_eigenpairs "
                      "or use more induced points.")
    products = graph.cross_products()
    degrees = products["degrees"]
    used = degrees > 0
    inv_sqrt = np.zeros(s)
    inv_sqrt[used] = 1.0 / np.sqrt(degrees[used])
    # G = Λ^{-1/2} AᵀA Λ^{-1/2} = BᵀB with B = A Λ^{-1/2}
    gram = inv_sqrt[:, None] * products["gram"] * inv_sqrt[None, :]
    gram = 0.5 * (gram + gram.T)
    n_used = int(used.sum())
    n_comp, induced_comp = _pieces(gram, used)
    if n_comp > 1:
        warnings.warn(f"the graph falls apart into {n_comp} pieces (connected components); "
                      f"each contributes an eigenvalue 0 and the heat kernel does not connect "
                      f"points in different pieces. Increase n_neighbors or the bandwidth if "
                      f"that is not intended.", UserWarning, stacklevel=2)
    M_eff = min(M, n_used)
    with stage("eigenpairs"):
        evals, W = symmetric_eigh(gram, n_top=M_eff)
    evals, W = evals[::-1][:M_eff], W[:, ::-1][:, :M_eff]
    sigma2 = np.clip(evals, 0.0, 1.0)
    sigma = np.sqrt(sigma2)
    keep = sigma > _SIGMA_FLOOR
    if keep.sum() < M:
        warnings.warn(f"only {int(keep.sum())} of the requested {M} eigenpairs are usable "
                      f"(the rest have singular value ~0: {s - n_used} induced points are "
                      f"unused); returning {int(keep.sum())}. Lower n_eigenpairs.",
                      UserWarning, stacklevel=2)
        sigma, sigma2, W = sigma[keep], sigma2[keep], W[:, keep]
    # signs fixed on W, which V = B W Σ^{-1} inherits (cloud and new points)
    W = W * (deterministic_sign_flip(W) / sigma)[None, :]
    projection = inv_sqrt[:, None] * W
    lam = 1.0 - sigma if spectrum == "one_step" else 1.0 - sigma2
    lam = np.clip(lam, 0.0, 1.0)
    # points per piece, counted in the products pass
    sizes = np.bincount(induced_comp[used], weights=products["argmax"][used],
                        minlength=n_comp).round().astype(np.int64)
    row_map = FLGPRowMap(projection, induced_comp)
    vector_rows = GraphVectorRows(graph, row_map)
    return Eigenpairs(eigenvalues=lam, kernel_scale=float(graph.n_samples),
                      extension=FLGPExtension(graph, projection, induced_comp),
                      method="flgp", n_pieces=n_comp, singular_values=sigma,
                      vector_rows=vector_rows, piece_sizes=sizes)
