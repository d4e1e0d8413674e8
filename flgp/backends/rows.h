/* flgp's compiled row kernels (see rows.c and _rows.pyx). Plain C99, no Python API: every
 * function works on caller-owned arrays and runs without the interpreter lock. */
#ifndef FLGP_ROWS_H
#define FLGP_ROWS_H

#include <stdint.h>

typedef int64_t flgp_i64;

/* A k-d tree over s points in p dimensions, stored as flat arrays (built by
 * flgp_tree_build into caller-owned storage of flgp_tree_max_nodes(s, leaf) nodes). */
typedef struct {
    int p;
    flgp_i64 s;
    flgp_i64 n_nodes;
    const double *points;   /* (s, p) in tree order */
    const flgp_i64 *perm;   /* tree order -> original row */
    const flgp_i64 *start;  /* (nodes,) first row of the node, in tree order */
    const flgp_i64 *stop;
    const flgp_i64 *left;   /* child nodes; -1 at a leaf */
    const flgp_i64 *right;
    const flgp_i64 *dim;    /* splitting dimension */
    const double *split;    /* x[dim] >= split goes right */
    const double *lo;       /* (nodes, p) bounding box of the node's points */
    const double *hi;
} flgp_tree;

flgp_i64 flgp_tree_max_nodes(flgp_i64 s, flgp_i64 leaf);

/* Builds the tree of U (s x p, row-major) with at most `leaf` points a leaf (more only where
 * points coincide). Writes points, perm, ..., hi (each sized for flgp_tree_max_nodes) and
 * returns the number of nodes used. */
flgp_i64 flgp_tree_build(const double *U, flgp_i64 s, int p, flgp_i64 leaf, double *points,
                         flgp_i64 *perm, flgp_i64 *start, flgp_i64 *stop, flgp_i64 *left,
                         flgp_i64 *right, flgp_i64 *dim, double *split, double *lo,
                         double *hi);

/* nbr (s x K), nbr_d (s x K): each tree point's K nearest tree points (positions in tree
 * order, itself first) and their distances (not squared), for flgp_nearest. */
void flgp_neighbour_lists(const flgp_tree *tree, int K, flgp_i64 *nbr, double *nbr_d);

/* The r nearest rows of the tree's points for each of n rows of X (n x p): indices (original
 * rows) and squared distances, nearest first, ties broken by the smaller index. With lists
 * (K >= 1): nbr (s x K) holds each point's K nearest points (itself first) and nbr_d their
 * distances (not squared); a query then scans the list of an anchor found by one descent of
 * the tree and stops once the list's distances certify the answer, falling back to the exact
 * tree search when the list runs out. Returns the number of rows that fell back. */
flgp_i64 flgp_nearest(const flgp_tree *tree, const double *X, flgp_i64 n, int r,
                      const flgp_i64 *nbr, const double *nbr_d, int K, flgp_i64 *out_idx,
                      double *out_sq);

/* Local anchor embedding weights for r = 3 anchors (see flgp.graph.cross_kernel.lae_weights):
 * min |x - sum w_k u_k|^2 on the simplex, the local Gram regularised by gamma tr(G) I with
 * gamma = max(reg, coincident) for rows that sit on their nearest anchor. */
void flgp_lae3(const double *X, flgp_i64 n, int p, const double *U, const flgp_i64 *idx,
               double reg, double coincident, double *out);

/* Sums over rows of a sparse matrix with r entries a row (idx, values; n x r): the column
 * sums deg (s), the Gram matrix gram (s x s, dense, added to) and the number of rows whose
 * largest entry is in each column, top (s). */
void flgp_products(const flgp_i64 *idx, const double *values, flgp_i64 n, int r, flgp_i64 s,
                   double *deg, double *gram, double *top);

/* out (n x k) = A P for the sparse rows (idx, values; n x r) of A and a dense P (s x k),
 * row-major, float64. */
void flgp_rows_times(const flgp_i64 *idx, const double *values, flgp_i64 n, int r,
                     const double *P, flgp_i64 k, double *out);

/* out (n) = a S a^T for each sparse row a (idx, values; n x r) and a dense S (s x s). */
void flgp_rows_quadratic(const flgp_i64 *idx, const double *values, flgp_i64 n, int r,
                         const double *S, flgp_i64 s, double *out);

/* Rows of the transition A from the log kernel (see flgp.graph.transition.transition_rows):
 * softmax of log K - log c_j (+ log n_j) over each row's r entries, an entry whose column sum
 * is 0 left out. Returns how many rows have no usable entry (their values are NaN). */
flgp_i64 flgp_transition_rows(const double *log_kernel, const flgp_i64 *idx, flgp_i64 n, int r,
                              const double *log_colsum, const double *log_sizes, double *out);

/* Column sums of K over a block as (max, sum exp(. - max)) pairs (s each; see
 * flgp.graph.transition.column_lse). Returns 0 when a log kernel value is NaN or +inf. */
int flgp_column_lse(const double *log_kernel, const flgp_i64 *idx, flgp_i64 n, int r,
                    flgp_i64 s, double *col_max, double *sums);

/* Greedy k-means++ seeding of k centres among the n rows of X (see
 * flgp.graph.induced_points._kmeanspp): step j draws L candidates by the uniforms
 * uniforms[(j - 1) L : j L] against the cumulative squared distances and keeps the one that
 * lowers their sum most. idx (k) gets the rows; returns k, or the step at which every point
 * was a centre already (idx holds the steps before it), or -1 when memory ran out. */
flgp_i64 flgp_kmeanspp(const double *X, flgp_i64 n, int p, flgp_i64 k, int L,
                       const double *uniforms, flgp_i64 first, flgp_i64 *idx);

/* One read of a cloud (n x p, row-major): whether every value is finite, the largest |x|,
 * the column minima and maxima (p each), and a hash of each row's bits (see
 * flgp._validation.count_distinct_rows: sum_d bits(x_d + 0.0) * mult_d mod 2^64; skipped
 * when hashes is NULL). */
int flgp_scan_cloud(const double *X, flgp_i64 n, int p, const uint64_t *mult, double *absmax,
                    double *lo, double *hi, uint64_t *hashes);

#endif
