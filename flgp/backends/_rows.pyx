# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Python bindings of rows.c: typed memoryviews in, the C kernels run without the GIL.

Callers (flgp.backends.compiled) pass C-contiguous arrays of the right dtype and shape; nothing is
checked here beyond what the memoryview types enforce.
"""

from libc.stdint cimport int64_t, uint64_t

import numpy as np

cdef extern from "rows.h":
    ctypedef int64_t flgp_i64
    ctypedef struct flgp_tree:
        int p
        flgp_i64 s
        flgp_i64 n_nodes
        const double *points
        const flgp_i64 *perm
        const flgp_i64 *start
        const flgp_i64 *stop
        const flgp_i64 *left
        const flgp_i64 *right
        const flgp_i64 *dim
        const double *split
        const double *lo
        const double *hi

    flgp_i64 flgp_tree_max_nodes(flgp_i64 s, flgp_i64 leaf) nogil
    flgp_i64 flgp_tree_build(const double *U, flgp_i64 s, int p, flgp_i64 leaf,
                             double *points, flgp_i64 *perm, flgp_i64 *start, flgp_i64 *stop,
                             flgp_i64 *left, flgp_i64 *right, flgp_i64 *dim, double *split,
                             double *lo, double *hi) nogil
    void flgp_neighbour_lists(const flgp_tree *tree, int K, flgp_i64 *nbr,
                              double *nbr_d) nogil
    flgp_i64 flgp_nearest(const flgp_tree *tree, const double *X, flgp_i64 n, int r,
                          const flgp_i64 *nbr, const double *nbr_d, int K,
                          flgp_i64 *out_idx, double *out_sq) nogil
    void flgp_lae3(const double *X, flgp_i64 n, int p, const double *U, const flgp_i64 *idx,
                   double reg, double coincident, double *out) nogil
    void flgp_products(const flgp_i64 *idx, const double *values, flgp_i64 n, int r,
                       flgp_i64 s, double *deg, double *gram, double *top) nogil
    void flgp_rows_times(const flgp_i64 *idx, const double *values, flgp_i64 n, int r,
                         const double *P, flgp_i64 k, double *out) nogil
    void flgp_rows_quadratic(const flgp_i64 *idx, const double *values, flgp_i64 n, int r,
                             const double *S, flgp_i64 s, double *out) nogil
    flgp_i64 flgp_transition_rows(const double *log_kernel, const flgp_i64 *idx, flgp_i64 n,
                                  int r, const double *log_colsum, const double *log_sizes,
                                  double *out) nogil
    int flgp_column_lse(const double *log_kernel, const flgp_i64 *idx, flgp_i64 n, int r,
                        flgp_i64 s, double *col_max, double *sums) nogil
    flgp_i64 flgp_kmeanspp(const double *X, flgp_i64 n, int p, flgp_i64 k, int L,
                           const double *uniforms, flgp_i64 first, flgp_i64 *idx) nogil
    int flgp_scan_cloud(const double *X, flgp_i64 n, int p, const uint64_t *mult,
                        double *absmax, double *lo, double *hi, uint64_t *hashes) nogil


cdef class Tree:
    """A k-d tree over the rows of ``U`` with each point's ``K`` nearest points (the
    anchored search's lists). Pickles as ``(U, leaf, K)`` and is rebuilt on unpickling
    (the same tree: the build is deterministic); flgp's own objects do not pickle it at
    all (they rebuild it at first use)."""

    cdef readonly object points, perm, start, stop, left, right, dim, split, lo, hi
    cdef readonly object nbr, nbr_d, source
    cdef readonly int leaf
    cdef flgp_tree tree
    cdef int K

    def __init__(self, const double[:, ::1] U, int leaf, int K):
        self.source = np.asarray(U)
        self.leaf = leaf
        cdef flgp_i64 s = U.shape[0]
        cdef int p = U.shape[1]
        cdef flgp_i64 m = flgp_tree_max_nodes(s, leaf)
        points = np.empty((s, p))
        perm = np.empty(s, dtype=np.int64)
        start, stop, left, right, dim = (np.empty(m, dtype=np.int64) for _ in range(5))
        split = np.empty(m)
        lo, hi = np.empty((m, p)), np.empty((m, p))
        cdef double[:, ::1] pts_v = points, lo_v = lo, hi_v = hi
        cdef flgp_i64[::1] perm_v = perm, start_v = start, stop_v = stop, left_v = left
        cdef flgp_i64[::1] right_v = right, dim_v = dim
        cdef double[::1] split_v = split
        cdef flgp_i64 used
        with nogil:
            used = flgp_tree_build(&U[0, 0], s, p, leaf, &pts_v[0, 0], &perm_v[0],
                                   &start_v[0], &stop_v[0], &left_v[0], &right_v[0],
                                   &dim_v[0], &split_v[0], &lo_v[0, 0], &hi_v[0, 0])
        self._adopt(points, perm, start[:used].copy(), stop[:used].copy(),
                    left[:used].copy(), right[:used].copy(), dim[:used].copy(),
                    split[:used].copy(), lo[:used].copy(), hi[:used].copy(), None, None)
        K = min(int(K), int(s))
        if K > 0:
            nbr = np.empty((s, K), dtype=np.int64)
            nbr_d = np.empty((s, K))
            self._lists(nbr, nbr_d)
            self.nbr, self.nbr_d, self.K = nbr, nbr_d, K

    def _adopt(self, points, perm, start, stop, left, right, dim, split, lo, hi, nbr, nbr_d):
        self.points, self.perm, self.start, self.stop = points, perm, start, stop
        self.left, self.right, self.dim, self.split, self.lo, self.hi = (left, right, dim,
                                                                         split, lo, hi)
        self.nbr, self.nbr_d = nbr, nbr_d
        self.K = 0 if nbr is None else nbr.shape[1]
        cdef double[:, ::1] pts_v = points, lo_v = lo, hi_v = hi
        cdef flgp_i64[::1] perm_v = perm, start_v = start, stop_v = stop, left_v = left
        cdef flgp_i64[::1] right_v = right, dim_v = dim
        cdef double[::1] split_v = split
        self.tree.p = pts_v.shape[1]
        self.tree.s = pts_v.shape[0]
        self.tree.n_nodes = start_v.shape[0]
        self.tree.points = &pts_v[0, 0]
        self.tree.perm = &perm_v[0]
        self.tree.start = &start_v[0]
        self.tree.stop = &stop_v[0]
        self.tree.left = &left_v[0]
        self.tree.right = &right_v[0]
        self.tree.dim = &dim_v[0]
        self.tree.split = &split_v[0]
        self.tree.lo = &lo_v[0, 0]
        self.tree.hi = &hi_v[0, 0]

    def _lists(self, flgp_i64[:, ::1] nbr, double[:, ::1] nbr_d):
        cdef int K = nbr.shape[1]
        with nogil:
            flgp_neighbour_lists(&self.tree, K, &nbr[0, 0], &nbr_d[0, 0])

    def __reduce__(self):
        return (Tree, (self.source, self.leaf, self.K))

    def query(self, const double[:, ::1] X, int r, flgp_i64[:, ::1] out_idx,
              double[:, ::1] out_sq, bint lists=True):
        """Fills ``out_idx`` and ``out_sq`` (n x r); returns how many rows fell back from
        the anchored scan to the tree search."""
        cdef flgp_i64 n = X.shape[0], fallbacks = 0
        cdef int K = self.K if lists else 0
        cdef const flgp_i64[:, ::1] nbr
        cdef const double[:, ::1] nbr_d
        cdef const flgp_i64 *nbr_p = NULL
        cdef const double *nbr_dp = NULL
        if n == 0:
            return 0
        if K > 0:
            nbr = self.nbr
            nbr_d = self.nbr_d
            nbr_p = &nbr[0, 0]
            nbr_dp = &nbr_d[0, 0]
        with nogil:
            fallbacks = flgp_nearest(&self.tree, &X[0, 0], n, r, nbr_p, nbr_dp, K,
                                     &out_idx[0, 0], &out_sq[0, 0])
        return fallbacks


def lae3(const double[:, ::1] X, const double[:, ::1] U, const flgp_i64[:, ::1] idx, double reg,
         double coincident, double[:, ::1] out):
    cdef flgp_i64 n = X.shape[0]
    if n == 0:
        return
    with nogil:
        flgp_lae3(&X[0, 0], n, X.shape[1], &U[0, 0], &idx[0, 0], reg, coincident,
                  &out[0, 0])


def products(const flgp_i64[:, ::1] idx, const double[:, ::1] values, double[::1] deg,
             double[:, ::1] gram, double[::1] top):
    cdef flgp_i64 n = idx.shape[0]
    if n == 0:
        return
    with nogil:
        flgp_products(&idx[0, 0], &values[0, 0], n, idx.shape[1], gram.shape[0], &deg[0],
                      &gram[0, 0], &top[0])


def rows_times(const flgp_i64[:, ::1] idx, const double[:, ::1] values, const double[:, ::1] P,
               double[:, ::1] out):
    cdef flgp_i64 n = idx.shape[0]
    if n == 0 or P.shape[1] == 0:
        return
    with nogil:
        flgp_rows_times(&idx[0, 0], &values[0, 0], n, idx.shape[1], &P[0, 0], P.shape[1],
                        &out[0, 0])


def rows_quadratic(const flgp_i64[:, ::1] idx, const double[:, ::1] values, const double[:, ::1] S,
                   double[::1] out):
    cdef flgp_i64 n = idx.shape[0]
    if n == 0:
        return
    with nogil:
        flgp_rows_quadratic(&idx[0, 0], &values[0, 0], n, idx.shape[1], &S[0, 0],
                            S.shape[0], &out[0])


def scan_cloud(const double[:, ::1] X, const uint64_t[::1] mult, double[::1] lo, double[::1] hi,
               hashes):
    """Returns ``(finite, absmax)`` and fills ``lo``, ``hi`` (p) and ``hashes`` (n; None:
    no hashes)."""
    cdef flgp_i64 n = X.shape[0]
    cdef int finite = 1
    cdef double absmax = 0.0
    cdef uint64_t[::1] hashes_v
    cdef uint64_t *hashes_p = NULL
    if n == 0 or X.shape[1] == 0:
        return True, 0.0
    if hashes is not None:
        hashes_v = hashes
        hashes_p = &hashes_v[0]
    with nogil:
        finite = flgp_scan_cloud(&X[0, 0], n, X.shape[1], &mult[0], &absmax, &lo[0], &hi[0],
                                 hashes_p)
    return bool(finite), absmax


def kmeanspp(const double[:, ::1] X, flgp_i64 k, const double[:, ::1] uniforms, flgp_i64 first,
             flgp_i64[::1] idx):
    """Fills ``idx`` (k); returns the number of steps done (k, or fewer when every point
    became a centre; -1: out of memory)."""
    cdef flgp_i64 done
    cdef int L = uniforms.shape[1]
    cdef const double *u = &uniforms[0, 0] if uniforms.shape[0] > 0 else NULL
    with nogil:
        done = flgp_kmeanspp(&X[0, 0], X.shape[0], X.shape[1], k, L, u, first, &idx[0])
    return done


def transition_rows(const double[:, ::1] log_kernel, const flgp_i64[:, ::1] idx,
                    const double[::1] log_colsum,
                    log_sizes, double[:, ::1] out):
    """Fills ``out``; returns the number of rows with no usable entry."""
    cdef const double[::1] sizes_v
    cdef const double *sizes_p = NULL
    cdef flgp_i64 bad = 0, n = idx.shape[0]
    if n == 0:
        return 0
    if log_sizes is not None:
        sizes_v = log_sizes
        sizes_p = &sizes_v[0]
    with nogil:
        bad = flgp_transition_rows(&log_kernel[0, 0], &idx[0, 0], n, idx.shape[1],
                                   &log_colsum[0], sizes_p, &out[0, 0])
    return bad


def column_lse(const double[:, ::1] log_kernel, const flgp_i64[:, ::1] idx, double[::1] col_max,
               double[::1] sums):
    """Fills ``col_max`` and ``sums``; returns False when a value is NaN or +inf."""
    cdef int ok = 1
    cdef flgp_i64 n = idx.shape[0]
    if n == 0:
        col_max[:] = -np.inf
        sums[:] = 0.0
        return True
    with nogil:
        ok = flgp_column_lse(&log_kernel[0, 0], &idx[0, 0], n, idx.shape[1],
                             col_max.shape[0], &col_max[0], &sums[0])
    return bool(ok)
