"""The :class:`Eigenpairs` type shared by FLGP, GLGP and Nyström-GLGP."""

from __future__ import annotations


import numpy as np
import torch

from .._chunks import InMemoryBlocks, default_chunk_size, is_dask_array, row_bytes, row_ranges
from ..backends import limit_blas_threads

__all__ = ["Eigenpairs", "DenseVectorRows", "RowSquaredNorm", "deterministic_sign_flip",
           "symmetric_eigh"]


class Eigenpairs:
    r"""Graph-Laplacian eigenpairs of a point cloud with an out-of-sample map.

    The heat kernel on the cloud is

    .. math:: C_t = c \sum_{l \le M} e^{-t \lambda_l} v_l v_l^\top

    with ``c = kernel_scale`` (``n`` for FLGP and GLGP, ``s`` for Nyström-GLGP).

    FLGP keeps the eigenvectors as a *map* (sparse transition rows times an ``s x M``
    projection) read by :meth:`eigenvector_rows`, :meth:`map_chunks`, :meth:`map_points` or
    :attr:`eigenvectors` (all ``n x M``, cached).

    Attributes
    ----------
    eigenvalues : ndarray (M,)
        ``λ_l`` ascending, in ``[0, 1]``.
    kernel_scale : float
    extension : callable
        ``extension(X_new) -> ndarray (n_new, M)``; a cloud point gets its own row.
    method : str
        "flgp", "glgp" or "nystrom".
    n_pieces : int
        Connected pieces of the graph (1 when connected).
    singular_values : ndarray (M,) or None
        FLGP's ``σ_l`` of ``A Λ^{-1/2}``.
    piece_sizes : ndarray (n_pieces,) or None
        Points of the cloud in each connected piece (None when not tracked).
    """

    def __init__(self, eigenvalues, eigenvectors=None, kernel_scale=1.0, extension=None,
                 method: str = "flgp", n_pieces: int = 1, singular_values=None,
                 piece_labels=None, *, vector_rows=None, piece_sizes=None):
        if (eigenvectors is None) == (vector_rows is None):
            raise TypeError("Eigenpairs needs exactly one of eigenvectors (an n x M array) "
                            "and vector_rows (a map to the eigenvector rows).")
        if vector_rows is None:
            vector_rows = DenseVectorRows(np.asarray(eigenvectors), piece_labels)
        elif piece_labels is not None:
            raise TypeError("piece_labels come from the vector_rows map when it is "
                            "given.")
        self.eigenvalues = eigenvalues
        self.kernel_scale = kernel_scale
        self.extension = extension
        self.method = method
        self.n_pieces = int(n_pieces)
        self.singular_values = singular_values
        self.vector_rows = vector_rows
        if (piece_sizes is None and vector_rows.tracks_pieces
                and not vector_rows.is_dask):
            piece_sizes = np.bincount(vector_rows.all_pieces(), minlength=self.n_pieces)
        self.piece_sizes = piece_sizes
        self._vectors_cache = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_vectors_cache"] = None    # n x M: recomputed from the map if asked for
        return state

    @property
    def is_dask(self) -> bool:
        """Whether the eigenvectors live on a dask array (a Dask fit)."""
        return self.vector_rows.is_dask

    @property
    def n_samples(self) -> int:
        return self.vector_rows.n_samples

    @property
    def n_eigenpairs(self) -> int:
        return self.eigenvalues.shape[0]

    @property
    def eigenvectors(self):
        """All ``n x M`` eigenvector values (cached; lazy dask for a Dask fit)."""
        if self.vector_rows.is_dask:
            return self.vector_rows.all_vectors()
        if self._vectors_cache is None:
            self._vectors_cache = self.vector_rows.all_vectors()
        return self._vectors_cache

    @property
    def piece_labels(self):
        """Connected piece of each cloud point (``(n,)`` ints; None: not tracked)."""
        return self.vector_rows.all_pieces() if self.vector_rows.tracks_pieces else None

    def eigenvector_rows(self, index) -> np.ndarray:
        """Rows ``index`` (integers, a boolean mask or a slice) of :attr:`eigenvectors`;
        ValueError / IndexError for a malformed or out-of-range index."""
        return self.vector_rows.vectors(_as_index(index, self.n_samples))

    def piece_rows(self, index):
        """Connected piece of the cloud points ``index`` (None: not tracked)."""
        if not self.vector_rows.tracks_pieces:
            return None
        return self.vector_rows.pieces(_as_index(index, self.n_samples))

    def iter_chunks(self, chunk_size: int | None = None):
        """Yield ``(start, stop, vectors, pieces)`` over blocks of the cloud's rows;
        TypeError for a Dask fit (use :meth:`map_chunks`)."""
        if self.vector_rows.is_dask:
            raise TypeError("these eigenpairs come from a dask array: use map_chunks(func), "
                            "which returns a lazy dask array, instead of iterating.")
        chunk = default_chunk_size(row_bytes(0, 3, self.n_eigenpairs), chunk_size)
        for a, b in row_ranges(self.n_samples, chunk):
            yield a, b, self.vector_rows.vectors(slice(a, b)), self.piece_rows(slice(a, b))

    def map_chunks(self, func, *, n_columns: int | None = None, dtype=np.float64,
                   chunk_size: int | None = None, parallel: bool = False, project=None):
        """``func(vectors, pieces)`` over blocks of the cloud's rows, joined.

        ``func`` gets a block's ``(b, M)`` rows and pieces (``(b,)`` ints or None) and
        returns ``(b,)`` or ``(b, n_columns)``. Returns numpy (``parallel``: threads, so
        ``func`` must be thread-safe) or, for a Dask fit, a lazy dask array of ``n_columns``
        and ``dtype`` (``func`` must pickle).

        ``project``: an ``(M, k)`` matrix ``L``; ``func`` gets the rows of ``V L`` (FLGP:
        ``O(r k)`` a row). A tuple gives a tuple of blocks, each in its matrix's dtype; a
        :class:`RowSquaredNorm` item gives the column ``|v F|²``.
        """
        rows = self.vector_rows if project is None else self.vector_rows.projected(
            _check_project(project, self.n_eigenpairs))
        return rows.map(func, n_columns=n_columns, dtype=dtype, chunk_size=chunk_size,
                         parallel=parallel)

    def reduce_chunks(self, func, shape, *, chunk_size: int | None = None,
                      parallel: bool = False) -> np.ndarray:
        """``Σ func(vectors, pieces, start)`` over blocks of rows (``start``: the block's
        first row), each term of ``shape``; numpy also for a Dask fit."""
        return self.vector_rows.reduce(func, shape, chunk_size=chunk_size, parallel=parallel)

    def column_sums(self) -> np.ndarray:
        """``Vᵀ 1`` (``(M,)``); FLGP reads it off the graph as ``Λ P``, with no pass."""
        graph = getattr(self.extension, "graph", None)
        projection = getattr(self.extension, "projection", None)
        if graph is not None and projection is not None and hasattr(graph, "degrees"):
            return np.asarray(graph.degrees @ projection, dtype=np.float64)
        return self.reduce_chunks(lambda V, comp, start: V.sum(axis=0),
                                  (self.n_eigenpairs,))

    def extend(self, X_new) -> np.ndarray:
        """``(n_new, M)`` eigenvector values at new points, at once (blocks:
        :meth:`map_points`)."""
        return self.extension(X_new)

    def extend_with_pieces(self, X_new, return_nearest: bool = False,
                               restrict: bool = False):
        """Eigenvector values and connected pieces (or None) of new points;
        ``return_nearest``: also squared distances to the nearest induced point (FLGP;
        else None); ``restrict``: see :meth:`flgp.spectral.flgp.FLGPExtension.with_pieces`."""
        fn = getattr(self.extension, "with_pieces", None)
        if fn is None or not self.vector_rows.tracks_pieces:
            V = self.extension(X_new)
            return (V, None, None) if return_nearest else (V, None)
        if restrict:
            return fn(X_new, return_nearest=return_nearest, restrict=True)
        return fn(X_new, return_nearest=return_nearest)

    def _extend(self, X_new, restrict, project, row_map):
        """``(V or V L, pieces, nearest squared distances)`` of new points."""
        if project is None:
            return self.extend_with_pieces(X_new, return_nearest=True, restrict=restrict)
        fn = getattr(self.extension, "with_pieces", None)
        if fn is None or not self.vector_rows.tracks_pieces:
            V = self.extend_with_pieces(X_new, return_nearest=True, restrict=restrict)
            return (_apply_project(V[0], project),) + tuple(V[1:])
        return fn(X_new, return_nearest=True, restrict=restrict, row_map=row_map)

    def map_points(self, X_new, func, *, n_columns: int | None = None, dtype=np.float64,
                   chunk_size: int | None = None, return_nearest: bool = False,
                   restrict: bool = False, project=None):
        """:meth:`map_chunks` for new points: validated ``(n_new, p)`` float64, or a dask
        array (FLGP only, else ValueError; lazy result, no distances). ``return_nearest``,
        ``restrict``: as in :meth:`extend_with_pieces`."""
        if is_dask_array(X_new):
            map_lazy = getattr(self.extension, "map_points", None)
            if map_lazy is None:
                raise ValueError(f"dask arrays of new points need FLGP eigenpairs; these are "
                                 f"{self.method!r}. Compute the points first (X.compute()) or "
                                 f"fit with method='flgp'.")
            out = map_lazy(X_new, func, n_columns=n_columns, dtype=dtype,
                           chunk_size=chunk_size, restrict=restrict,
                           project=None if project is None
                           else _check_project(project, self.n_eigenpairs))
            return (out, None) if return_nearest else out
        n = X_new.shape[0]
        if project is not None:
            project = _check_project(project, self.n_eigenpairs)
        width = self.n_eigenpairs if project is None else _project_width(project)
        nearest = np.empty(n) if return_nearest else None
        found = [True]
        row_map = getattr(self.extension, "row_map", None)
        if row_map is not None and project is not None:
            row_map = row_map.projected(project)          # once, not per block

        def block(Xb, a, b):
            V, comp, sq = self._extend(Xb, restrict, project, row_map)
            if return_nearest:
                if sq is None:
                    found[0] = False
                else:
                    nearest[a:b] = sq
            return func(V, comp)

        out = InMemoryBlocks(X_new).map(block, chunk_size=chunk_size,
                                        bytes_per_row=row_bytes(X_new.shape[1], 3, width))
        if return_nearest:
            return out, (nearest if found[0] else None)
        return out

    def __repr__(self) -> str:
        return (f"Eigenpairs(method={self.method!r}, n_samples={self.n_samples}, "
                f"n_eigenpairs={self.n_eigenpairs}, n_pieces={self.n_pieces})")


class RowSquaredNorm:
    """A ``project`` item (:meth:`Eigenpairs.map_chunks`) giving the column ``|v F|²`` for
    an ``(M, k)`` factor ``F`` (e.g. a posterior variance); ValueError unless ``F`` is 2-d
    and finite."""

    def __init__(self, factor: np.ndarray):
        self.factor = np.ascontiguousarray(factor, dtype=np.float64)
        if self.factor.ndim != 2:
            raise ValueError(f"RowSquaredNorm needs an (n_eigenpairs, k) factor; got shape "
                             f"{self.factor.shape}.")
        if not np.isfinite(self.factor).all():
            raise ValueError("RowSquaredNorm's factor holds NaN or infinity; pass a finite "
                             "matrix.")

    @property
    def shape(self) -> tuple:
        return (self.factor.shape[0], 1)

    def of_rows(self, V: np.ndarray) -> np.ndarray:
        """``|v F|²`` of the rows ``V`` (``(b,)``)."""
        G = V @ self.factor
        return np.einsum("ij,ij->i", G, G)


def _check_project(project, M: int):
    """Check an ``(M, k)`` matrix (float32 kept, else float64), a :class:`RowSquaredNorm`
    or a tuple of them."""
    if isinstance(project, tuple):
        return tuple(_check_project(L, M) for L in project)
    if isinstance(project, RowSquaredNorm):
        if project.factor.shape[0] != M:
            raise ValueError(f"a RowSquaredNorm factor must have n_eigenpairs = {M} rows; "
                             f"got {project.factor.shape[0]}.")
        return project
    project = np.asarray(project)
    project = project.astype(project.dtype if project.dtype == np.float32 else np.float64,
                             copy=False)
    if project.ndim != 2 or project.shape[0] != M:
        raise ValueError(f"project must be an (n_eigenpairs, k) = ({M}, k) matrix; got shape "
                         f"{project.shape}.")
    return project


def _project_width(project) -> int:
    return int(sum(L.shape[1] for L in project)) if isinstance(project, tuple) \
        else int(project.shape[1])


def _apply_project(V: np.ndarray, project):
    """``V L`` in ``L``'s dtype (formed in float64), tuple-wise; squared norms for a
    :class:`RowSquaredNorm`."""
    if isinstance(project, tuple):
        return tuple(_apply_project(V, L) for L in project)
    if isinstance(project, RowSquaredNorm):
        return project.of_rows(V)
    if project.dtype == np.float32:
        return (V @ project.astype(np.float64)).astype(np.float32)
    return V @ project


def _as_index(index, n: int):
    if isinstance(index, slice):
        return index
    index = np.asarray(index)
    if index.dtype == bool:
        if index.shape != (n,):
            raise ValueError(f"a boolean index must have one entry per cloud point ({n}); "
                             f"got shape {index.shape}.")
        return np.flatnonzero(index)
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise ValueError(f"index must be a 1-d array of integer row indices, a boolean mask "
                         f"or a slice; got {index.dtype} of shape {index.shape}.")
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"row index out of range for a cloud of {n} points.")
    return index.astype(np.int64)


class DenseVectorRows:
    """Eigenvector rows stored as an ``n x M`` array (GLGP, Nyström-GLGP)."""

    is_dask = False

    def __init__(self, vectors: np.ndarray, pieces=None):
        self._vectors = vectors
        self._pieces = pieces

    @property
    def n_samples(self) -> int:
        return self._vectors.shape[0]

    @property
    def tracks_pieces(self) -> bool:
        return self._pieces is not None

    def vectors(self, index):
        return self._vectors[index]

    def pieces(self, index):
        return self._pieces[index]

    def all_vectors(self):
        return self._vectors

    def all_pieces(self):
        return self._pieces

    def projected(self, project: np.ndarray) -> "DenseVectorRows":
        """The rows of ``V L``, computed block by block where they are read."""
        return _ProjectedDenseRows(self._vectors, project, self._pieces)

    def _width(self) -> int:
        return self._vectors.shape[1]

    def map(self, func, *, n_columns=None, dtype=np.float64, chunk_size=None,
            parallel=False):
        """``func(vectors, pieces)`` over blocks of rows, stacked."""
        def block(Xb, a, b):
            comp = None if self._pieces is None else self._pieces[a:b]
            return func(self.vectors(slice(a, b)), comp)

        return InMemoryBlocks(n_samples=self.n_samples).map(
            block, bytes_per_row=row_bytes(0, 3, self._width()), chunk_size=chunk_size,
            parallel=parallel)

    def reduce(self, func, shape, *, chunk_size=None, parallel=False) -> np.ndarray:
        """``Σ func(vectors, pieces, start)`` over blocks of rows."""
        shape = tuple(int(v) for v in np.atleast_1d(shape))

        def block(Xb, a, b):
            comp = None if self._pieces is None else self._pieces[a:b]
            return {"total": np.asarray(func(self.vectors(slice(a, b)), comp, a),
                                        dtype=np.float64).reshape(shape)}

        return InMemoryBlocks(n_samples=self.n_samples).reduce(
            block, bytes_per_row=row_bytes(0, 3, self._width()), chunk_size=chunk_size,
            threads=None if parallel else 1)["total"]


class _ProjectedDenseRows(DenseVectorRows):
    def __init__(self, vectors, project, pieces):
        super().__init__(vectors, pieces)
        self._project = project

    def vectors(self, index):
        return _apply_project(self._vectors[index], self._project)

    def _width(self) -> int:
        return _project_width(self._project)

    def all_vectors(self):
        return _apply_project(self._vectors, self._project)


def deterministic_sign_flip(vectors: np.ndarray) -> np.ndarray:
    """Signs (+1/-1) that make each column's largest-magnitude entry positive."""
    rows = np.argmax(np.abs(vectors), axis=0)
    signs = np.sign(vectors[rows, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return signs


# up to this size a dense eigh runs on one thread (see symmetric_eigh)
_SINGLE_THREAD_EIGH_MAX = 1024


def symmetric_eigh(A: np.ndarray, n_top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a dense symmetric matrix, eigenvalues ascending (float64): all
    (``torch.linalg.eigh``), or the ``n_top`` largest when at most half (LAPACK ``syevr``).
    Up to ``_SINGLE_THREAD_EIGH_MAX`` rows it runs on one thread: the tridiagonal
    reduction's per-column synchronisation costs more than threads gain there."""
    A = np.ascontiguousarray(A, dtype=np.float64)
    s = A.shape[0]
    threads = torch.get_num_threads()
    single = s <= _SINGLE_THREAD_EIGH_MAX and threads > 1
    if n_top is not None and 0 < int(n_top) <= s // 2:
        import scipy.linalg

        with limit_blas_threads(1 if single else threads):
            return scipy.linalg.eigh(A, subset_by_index=[s - int(n_top), s - 1],
                                     driver="evr", check_finite=False)
    if single:
        torch.set_num_threads(1)
    try:
        w, V = torch.linalg.eigh(torch.from_numpy(A))
    finally:
        if single:
            torch.set_num_threads(threads)
    return w.numpy(), V.numpy()
