/* flgp's compiled row kernels: each is the twin of a numpy function that the tests compare
 * it with (flgp.backends.compiled says which). Plain C99 on caller-owned arrays; nothing here
 * allocates more than a few small buffers or touches the Python API. */
#include "rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef flgp_i64 i64;

/* the kernels below are written once for any p and r; the common shapes get copies with
   both constant (always inlined into a small dispatcher) */
#if defined(__GNUC__) || defined(__clang__)
#define FLGP_INLINE static inline __attribute__((always_inline))
#else
#define FLGP_INLINE static inline
#endif

/* ---------------------------------------------------------------- the k-d tree */

i64 flgp_tree_max_nodes(i64 s, i64 leaf) {
    (void)leaf;
    return 2 * (s > 0 ? s : 1);
}

/* Reorders perm[a:b] so that the element of rank k by coordinate d is at a + k, those
 * before it are <= it and those after >= it (Hoare's selection). */
static void select_rank(const double *U, int p, i64 *perm, i64 a, i64 b, i64 k, int d) {
    i64 lo = a, hi = b - 1, target = a + k;
    while (hi > lo) {
        double pivot = U[perm[lo + (hi - lo) / 2] * p + d];
        i64 i = lo, j = hi;
        while (i <= j) {
            while (U[perm[i] * p + d] < pivot) i++;
            while (U[perm[j] * p + d] > pivot) j--;
            if (i <= j) {
                i64 t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
                i++;
                j--;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            break;
    }
}

i64 flgp_tree_build(const double *U, i64 s, int p, i64 leaf, double *points, i64 *perm,
                    i64 *start, i64 *stop, i64 *left, i64 *right, i64 *dim, double *split,
                    double *lo, double *hi) {
    i64 n_nodes = 1, top = 0;
    i64 stack[256];
    if (leaf < 1) leaf = 1;
    for (i64 i = 0; i < s; i++) perm[i] = i;
    start[0] = 0;
    stop[0] = s;
    stack[top++] = 0;
    while (top > 0) {
        i64 node = stack[--top];
        i64 a = start[node], b = stop[node];
        double *nlo = lo + node * p, *nhi = hi + node * p;
        for (int d = 0; d < p; d++) {
            nlo[d] = INFINITY;
            nhi[d] = -INFINITY;
        }
        for (i64 i = a; i < b; i++) {
            const double *u = U + perm[i] * p;
            for (int d = 0; d < p; d++) {
                if (u[d] < nlo[d]) nlo[d] = u[d];
                if (u[d] > nhi[d]) nhi[d] = u[d];
            }
        }
        left[node] = right[node] = -1;
        dim[node] = 0;
        split[node] = 0.0;
        int best = 0;
        double spread = -1.0;
        for (int d = 0; d < p; d++) {
            if (nhi[d] - nlo[d] > spread) {
                spread = nhi[d] - nlo[d];
                best = d;
            }
        }
        /* a leaf: few points, all points equal, or no room left on the stack */
        if (b - a <= leaf || !(spread > 0.0) || top + 2 > 256) continue;
        i64 mid = (b - a) / 2;
        select_rank(U, p, perm, a, b, mid, best);
        i64 l = n_nodes++, r = n_nodes++;
        dim[node] = best;
        split[node] = U[perm[a + mid] * p + best];
        left[node] = l;
        right[node] = r;
        start[l] = a;
        stop[l] = a + mid;
        start[r] = a + mid;
        stop[r] = b;
        stack[top++] = r;
        stack[top++] = l;
    }
    for (i64 i = 0; i < s; i++) memcpy(points + i * p, U + perm[i] * p, sizeof(double) * p);
    return n_nodes;
}

/* ---------------------------------------------------------------- nearest points */

FLGP_INLINE double sq_dist(const double *x, const double *u, int p) {
    double acc = 0.0;
    for (int d = 0; d < p; d++) {
        double t = x[d] - u[d];
        acc += t * t;
    }
    return acc;
}

/* The best r so far, ascending by (distance, index); insert one candidate. */
FLGP_INLINE void insert_best(double dist, i64 k, int r, double *bd, i64 *bi) {
    if (dist < bd[r - 1] || (dist == bd[r - 1] && k < bi[r - 1])) {
        int m = r - 1;
        while (m > 0 && (dist < bd[m - 1] || (dist == bd[m - 1] && k < bi[m - 1]))) {
            bd[m] = bd[m - 1];
            bi[m] = bi[m - 1];
            m--;
        }
        bd[m] = dist;
        bi[m] = k;
    }
}

FLGP_INLINE double box_sq(const double *x, const double *lo, const double *hi, int p) {
    double acc = 0.0;
    for (int d = 0; d < p; d++) {
        double below = lo[d] - x[d], above = x[d] - hi[d];
        double g = below > 0.0 ? below : (above > 0.0 ? above : 0.0);
        acc += g * g;
    }
    return acc;
}

/* Exact search: depth first, nearer child first, a subtree skipped when its box lies
 * farther than the r-th best (ties kept: a box at exactly that distance is searched). */
FLGP_INLINE void tree_search(const flgp_tree *t, const double *x, int r, int p, double *bd,
                             i64 *bi) {
    i64 st_node[160];
    double st_lb[160];
    int top = 1;
    for (int k = 0; k < r; k++) {
        bd[k] = INFINITY;
        bi[k] = -1;
    }
    st_node[0] = 0;
    st_lb[0] = 0.0;
    while (top > 0) {
        top--;
        i64 node = st_node[top];
        double lb = st_lb[top];
        if (lb > bd[r - 1]) continue;
        if (t->left[node] < 0) {
            for (i64 j = t->start[node]; j < t->stop[node]; j++)
                insert_best(sq_dist(x, t->points + j * p, p), t->perm[j], r, bd, bi);
            continue;
        }
        i64 near, far;
        if (x[t->dim[node]] >= t->split[node]) {
            near = t->right[node];
            far = t->left[node];
        } else {
            near = t->left[node];
            far = t->right[node];
        }
        double lb_far = box_sq(x, t->lo + far * p, t->hi + far * p, p);
        if (lb_far <= bd[r - 1] && top < 159) {
            st_node[top] = far;
            st_lb[top++] = lb_far;
        }
        st_node[top] = near;
        st_lb[top++] = lb;
    }
}

/* Anchored scan: one descent to a leaf, its nearest point j as the anchor (distance delta),
 * then j's list in order of D = |u_j - u_k|. Every later entry and every point off the
 * list has D' >= D, so |x - u_k| >= D' - delta >= D - delta: once D - delta exceeds the
 * r-th best distance (with a margin for rounding) nothing left can enter. Returns 0 when the
 * list ran out first (the caller then searches the tree). */
FLGP_INLINE int anchored_scan(const flgp_tree *t, const double *x, int r, int p,
                                const i64 *nbr, const double *nbr_d, int K, double *bd,
                                i64 *bi) {
    i64 node = 0;
    while (t->left[node] >= 0)
        node = x[t->dim[node]] >= t->split[node] ? t->right[node] : t->left[node];
    double best_leaf = INFINITY;
    i64 anchor = t->start[node];
    for (i64 j = t->start[node]; j < t->stop[node]; j++) {
        double dist = sq_dist(x, t->points + j * p, p);
        if (dist < best_leaf) {
            best_leaf = dist;
            anchor = j;
        }
    }
    double delta = sqrt(best_leaf), root_r = INFINITY;
    for (int k = 0; k < r; k++) {
        bd[k] = INFINITY;
        bi[k] = -1;
    }
    const i64 *list = nbr + anchor * K;
    const double *dlist = nbr_d + anchor * K;
    for (int q = 0; q < K; q++) {
        double D = dlist[q], lim = D - delta;
        if (lim > root_r + 1e-12 * (D + delta + root_r)) return 1;
        i64 pos = list[q];
        double dist = sq_dist(x, t->points + pos * p, p);
        double worst = bd[r - 1];
        insert_best(dist, t->perm[pos], r, bd, bi);
        if (bd[r - 1] != worst) root_r = sqrt(bd[r - 1]);
    }
    return K >= t->s;   /* the list held every point */
}

#define FLGP_PROBE_ROWS 256

FLGP_INLINE i64 nearest_rows(const flgp_tree *t, const double *X, i64 n, int r, int p,
                        const i64 *nbr, const double *nbr_d, int K, i64 *out_idx,
                        double *out_sq) {
    i64 fallbacks = 0;
    int anchored = K > 0;
    for (i64 i = 0; i < n; i++) {
        const double *x = X + i * p;
        double *bd = out_sq + i * r;
        i64 *bi = out_idx + i * r;
        if (!anchored || !anchored_scan(t, x, r, p, nbr, nbr_d, K, bd, bi)) {
            tree_search(t, x, r, p, bd, bi);
            fallbacks += anchored;
        }
        /* lists that run out for most rows (a cloud of high intrinsic dimension): search
           the tree directly from here on (the same answer either way) */
        if (anchored && i + 1 == FLGP_PROBE_ROWS && 2 * fallbacks > FLGP_PROBE_ROWS)
            anchored = 0;
    }
    return fallbacks;
}

i64 flgp_nearest(const flgp_tree *t, const double *X, i64 n, int r, const i64 *nbr,
                 const double *nbr_d, int K, i64 *out_idx, double *out_sq) {
    /* the common shapes get their own copy of the loop, with p and r constant */
    int p = t->p;
    if (p == 2 && r == 3) return nearest_rows(t, X, n, 3, 2, nbr, nbr_d, K, out_idx, out_sq);
    if (p == 3 && r == 3) return nearest_rows(t, X, n, 3, 3, nbr, nbr_d, K, out_idx, out_sq);
    if (p == 2 && r == 1) return nearest_rows(t, X, n, 1, 2, nbr, nbr_d, K, out_idx, out_sq);
    if (p == 3 && r == 1) return nearest_rows(t, X, n, 1, 3, nbr, nbr_d, K, out_idx, out_sq);
    return nearest_rows(t, X, n, r, p, nbr, nbr_d, K, out_idx, out_sq);
}

void flgp_neighbour_lists(const flgp_tree *t, int K, i64 *nbr, double *nbr_d) {
    int p = t->p;
    i64 s = t->s;
    i64 *where = (i64 *)malloc(sizeof(i64) * (size_t)(s > 0 ? s : 1));
    if (where == NULL) return;
    for (i64 j = 0; j < s; j++) where[t->perm[j]] = j;
    for (i64 j = 0; j < s; j++) {
        double *bd = nbr_d + j * K;
        i64 *bi = nbr + j * K;
        tree_search(t, t->points + j * p, K, p, bd, bi);
        for (int q = 0; q < K; q++) {
            bi[q] = where[bi[q]];
            bd[q] = sqrt(bd[q]);
        }
    }
    free(where);
}

/* ---------------------------------------------------------------- LAE weights, r = 3 */

/* flgp.graph.cross_kernel._enumerate_faces_3's rule: a candidate replaces the best when its
   objective is lower by more than 1e-15 of its size */
FLGP_INLINE int improves(double val, double best) {
    double a = fabs(val) > 1.0 ? fabs(val) : 1.0;
    return val < best - 1e-15 * a;
}

/* w^T G w for a 3 x 3 G, summed row by row and left to right
   (flgp.graph.cross_kernel._objective's order) */
FLGP_INLINE double objective3(const double G[3][3], const double w[3]) {
    double val = w[0] * G[0][0] * w[0];
    val = val + w[0] * G[0][1] * w[1];
    val = val + w[0] * G[0][2] * w[2];
    val = val + w[1] * G[1][0] * w[0];
    val = val + w[1] * G[1][1] * w[1];
    val = val + w[1] * G[1][2] * w[2];
    val = val + w[2] * G[2][0] * w[0];
    val = val + w[2] * G[2][1] * w[1];
    val = val + w[2] * G[2][2] * w[2];
    return val;
}

/* min w^T G w on the simplex for one 3 x 3 Gram matrix (row-major, regularised already),
   as flgp.graph.cross_kernel._simplex_qp_exact: the full support first, taken when all its
   weights exceed 1e-6 and G w is constant there (the minimiser's condition), else every
   support as in _enumerate_faces_3, each judged by its true objective */
static void simplex3(const double *Graw, double *w) {
    double scale = (Graw[0] + Graw[4] + Graw[8]) / 3.0;
    if (scale < 1e-300) scale = 1e-300;
    double G[3][3];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) G[i][j] = Graw[3 * i + j] / scale;
    /* the triangle: last = 2, rest = (0, 1) */
    double g_aa = G[2][2], g0 = G[0][2], g1 = G[1][2];
    double a = G[0][0] - g0 - g0 + g_aa;
    double b = G[0][1] - g0 - g1 + g_aa;
    double d = G[1][1] - g1 - g1 + g_aa;
    double tiny = 1e-12 * (a + d > 1e-300 ? a + d : 1e-300);
    double det = a * d - b * b;
    int ok = det > tiny * tiny;
    if (!ok) det = 1.0;
    double e0 = g0 - g_aa, e1 = g1 - g_aa;
    double z0 = -(d * e0 - b * e1) / det;
    double z1 = -(a * e1 - b * e0) / det;
    double w2 = 1.0 - (z0 + z1);
    const double tri[3] = {z0, z1, w2};
    if (ok && z0 > 1e-6 && z1 > 1e-6 && w2 > 1e-6) {
        double g[3], gmin = INFINITY, gmax = -INFINITY;
        for (int k = 0; k < 3; k++) {
            g[k] = G[k][0] * z0 + G[k][1] * z1 + G[k][2] * w2;
            gmin = g[k] < gmin ? g[k] : gmin;
            gmax = g[k] > gmax ? g[k] : gmax;
        }
        if (gmax - gmin <= 1e-9) {
            double total = (z0 + z1) + w2;
            w[0] = z0 / total;
            w[1] = z1 / total;
            w[2] = w2 / total;
            return;
        }
    }
    double best = INFINITY;
    int win = -1;
    for (int k = 0; k < 3; k++)
        if (improves(G[k][k], best)) {
            best = G[k][k];
            win = k;
        }
    static const int I[3] = {0, 0, 1}, J[3] = {1, 2, 2};
    double ez[3], ew[3];
    for (int e = 0; e < 3; e++) {
        int i = I[e], j = J[e];
        double gia = G[i][j], gjj = G[j][j];
        double h = G[i][i] - gia - gia + gjj;
        int eok = h > 1e-12 * (h > 1e-300 ? h : 1e-300);
        double g = gia - gjj;
        double z = -g / (eok ? h : 1.0);
        double wl = 1.0 - z;
        eok = eok && z >= -1e-12 && wl >= -1e-12;
        ez[e] = z;
        ew[e] = wl;
        double val = z * G[i][i] * z;
        val = val + z * G[i][j] * wl;
        val = val + wl * G[j][i] * z;
        val = val + wl * G[j][j] * wl;
        if (eok && improves(val, best)) {
            best = val;
            win = 3 + e;
        }
    }
    ok = ok && z0 >= -1e-12 && z1 >= -1e-12 && w2 >= -1e-12;
    double val = objective3(G, tri);
    if (ok && improves(val, best)) {
        best = val;
        win = 6;
    }
    w[0] = w[1] = w[2] = 0.0;
    if (win < 0) win = 0;     /* NaN Gram entries: never reached for finite input */
    if (win < 3) {
        w[win] = 1.0;
    } else if (win < 6) {
        int e = win - 3;
        double wi = ez[e] > 0.0 ? ez[e] : 0.0, wj = ew[e] > 0.0 ? ew[e] : 0.0;
        double total = wi + wj;
        w[I[e]] = wi / total;
        w[J[e]] = wj / total;
    } else {
        z0 = z0 > 0.0 ? z0 : 0.0;
        z1 = z1 > 0.0 ? z1 : 0.0;
        w2 = w2 > 0.0 ? w2 : 0.0;
        double total = (z0 + z1) + w2;
        w[0] = z0 / total;
        w[1] = z1 / total;
        w[2] = w2 / total;
    }
}

void flgp_lae3(const double *X, i64 n, int p, const double *U, const i64 *idx, double reg,
               double coincident, double *out) {
    for (i64 i = 0; i < n; i++) {
        const double *x = X + i * p;
        const double *u0 = U + idx[3 * i] * p, *u1 = U + idx[3 * i + 1] * p,
                     *u2 = U + idx[3 * i + 2] * p;
        double G00 = 0, G01 = 0, G02 = 0, G11 = 0, G12 = 0, G22 = 0;
        for (int k = 0; k < p; k++) {
            double a = u0[k] - x[k], b = u1[k] - x[k], c = u2[k] - x[k];
            G00 += a * a;
            G01 += a * b;
            G02 += a * c;
            G11 += b * b;
            G12 += b * c;
            G22 += c * c;
        }
        /* the two smallest squared distances (the diagonal) decide "sits on an anchor" */
        double s0 = G00 < G11 ? G00 : G11, s1 = G00 < G11 ? G11 : G00;
        if (G22 < s0) {
            s1 = s0;
            s0 = G22;
        } else if (G22 < s1) {
            s1 = G22;
        }
        double gamma = reg;
        if (coincident > 0.0 && s0 <= 1e-8 * s1 && coincident > gamma) gamma = coincident;
        if (gamma > 0.0) {
            double add = gamma * (G00 + G11 + G22);
            G00 += add;
            G11 += add;
            G22 += add;
        }
        const double G[9] = {G00, G01, G02, G01, G11, G12, G02, G12, G22};
        simplex3(G, out + 3 * i);
    }
}

/* ---------------------------------------------------------------- sparse rows */

void flgp_products(const i64 *idx, const double *values, i64 n, int r, i64 s, double *deg,
                   double *gram, double *top) {
    for (i64 i = 0; i < n; i++) {
        const i64 *ix = idx + i * r;
        const double *v = values + i * r;
        int arg = 0;
        for (int a = 0; a < r; a++) {
            double va = v[a];
            double *row = gram + ix[a] * s;
            deg[ix[a]] += va;
            for (int b = 0; b < r; b++) row[ix[b]] += va * v[b];
            if (va > v[arg]) arg = a;
        }
        top[ix[arg]] += 1.0;
    }
}

void flgp_rows_times(const i64 *idx, const double *values, i64 n, int r, const double *P,
                     i64 k, double *out) {
    for (i64 i = 0; i < n; i++) {
        double *o = out + i * k;
        const double *p0 = P + idx[i * r] * k;
        double v0 = values[i * r];
        for (i64 c = 0; c < k; c++) o[c] = v0 * p0[c];
        for (int a = 1; a < r; a++) {
            const double *pa = P + idx[i * r + a] * k;
            double va = values[i * r + a];
            for (i64 c = 0; c < k; c++) o[c] += va * pa[c];
        }
    }
}

void flgp_rows_quadratic(const i64 *idx, const double *values, i64 n, int r, const double *S,
                         i64 s, double *out) {
    for (i64 i = 0; i < n; i++) {
        const i64 *ix = idx + i * r;
        const double *v = values + i * r;
        double acc = 0.0;
        for (int a = 0; a < r; a++) {
            const double *row = S + ix[a] * s;
            double inner = 0.0;
            for (int b = 0; b < r; b++) inner += row[ix[b]] * v[b];
            acc += v[a] * inner;
        }
        out[i] = acc;
    }
}

/* ---------------------------------------------------------------- one read of a cloud */

int flgp_scan_cloud(const double *X, i64 n, int p, const uint64_t *mult, double *absmax,
                    double *lo, double *hi, uint64_t *hashes) {
    int finite = 1;
    double amax = 0.0;
    for (int d = 0; d < p; d++) {
        lo[d] = INFINITY;
        hi[d] = -INFINITY;
    }
    for (i64 i = 0; i < n; i++) {
        const double *x = X + i * p;
        uint64_t h = 0;
        for (int d = 0; d < p; d++) {
            double v = x[d] + 0.0;            /* -0.0 hashes as 0.0 */
            if (hashes != NULL) {
                uint64_t bits;
                memcpy(&bits, &v, sizeof bits);
                h += bits * mult[d];
            }
            finite &= isfinite(v) != 0;
            double a = fabs(v);
            amax = a > amax ? a : amax;
            lo[d] = v < lo[d] ? v : lo[d];
            hi[d] = v > hi[d] ? v : hi[d];
        }
        if (hashes != NULL) hashes[i] = h;
    }
    *absmax = amax;
    return finite;
}

/* ---------------------------------------------------------------- k-means++ seeding */

/* searchsorted(cum, v, side="left"): the first i with cum[i] >= v (n if none) */
static i64 first_at_least(const double *cum, i64 n, double v) {
    i64 lo = 0, hi = n;
    while (lo < hi) {
        i64 mid = lo + (hi - lo) / 2;
        if (cum[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

i64 flgp_kmeanspp(const double *X, i64 n, int p, i64 k, int L, const double *uniforms,
                  i64 first, i64 *idx) {
    double *x2 = (double *)malloc(sizeof(double) * (size_t)n * (size_t)(3 + L));
    i64 *cand = (i64 *)malloc(sizeof(i64) * (size_t)(L > 0 ? L : 1));
    if (x2 == NULL || cand == NULL) {
        free(x2);
        free(cand);
        return -1;
    }
    double *d2 = x2 + n, *cum = x2 + 2 * n, *D = x2 + 3 * n;
    for (i64 i = 0; i < n; i++) {
        const double *x = X + i * p;
        double acc = 0.0;
        for (int e = 0; e < p; e++) acc += x[e] * x[e];
        x2[i] = acc;
    }
    idx[0] = first;
    const double *c0 = X + first * p;
    for (i64 i = 0; i < n; i++) {
        const double *x = X + i * p;
        double dot = 0.0;
        for (int e = 0; e < p; e++) dot += x[e] * c0[e];
        double v = (x2[i] - 2.0 * dot) + x2[first];
        d2[i] = v > 0.0 ? v : 0.0;
    }
    for (i64 j = 1; j < k; j++) {
        double total = 0.0;
        for (i64 i = 0; i < n; i++) {
            total += d2[i];
            cum[i] = total;
        }
        if (!(total > 0.0)) {          /* every point is a centre already */
            free(x2);
            free(cand);
            return j;
        }
        const double *u = uniforms + (j - 1) * L;
        i64 best = 0;
        double best_sum = INFINITY;
        for (int t = 0; t < L; t++) {
            i64 c = first_at_least(cum, n, u[t] * total);
            cand[t] = c < n - 1 ? c : n - 1;
            const double *xc = X + cand[t] * p;
            double *Dt = D + t * n, sum = 0.0;
            for (i64 i = 0; i < n; i++) {
                const double *x = X + i * p;
                double dot = 0.0;
                for (int e = 0; e < p; e++) dot += xc[e] * x[e];
                double v = (-2.0 * dot + x2[i]) + x2[cand[t]];
                v = v > 0.0 ? v : 0.0;
                v = v < d2[i] ? v : d2[i];
                Dt[i] = v;
                sum += v;
            }
            if (sum < best_sum) {
                best_sum = sum;
                best = t;
            }
        }
        idx[j] = cand[best];
        memcpy(d2, D + best * n, sizeof(double) * (size_t)n);
    }
    free(x2);
    free(cand);
    return k;
}

/* ---------------------------------------------------------------- the transition */

i64 flgp_transition_rows(const double *log_kernel, const i64 *idx, i64 n, int r,
                         const double *log_colsum, const double *log_sizes, double *out) {
    i64 bad = 0;
    for (i64 i = 0; i < n; i++) {
        const double *lk = log_kernel + i * r;
        const i64 *ix = idx + i * r;
        double *w = out + i * r;
        double top = -INFINITY;
        for (int a = 0; a < r; a++) {
            double lc = log_colsum[ix[a]];
            double v = -INFINITY;
            if (isfinite(lc)) {
                v = lk[a] - lc;
                if (log_sizes != NULL) v = v + log_sizes[ix[a]];
            }
            w[a] = v;
            top = v > top ? v : top;
        }
        if (!isfinite(top)) {
            bad++;
            for (int a = 0; a < r; a++) w[a] = NAN;
            continue;
        }
        double total = 0.0;
        for (int a = 0; a < r; a++) {
            w[a] = exp(w[a] - top);
            total += w[a];
        }
        for (int a = 0; a < r; a++) w[a] = w[a] / total;
    }
    return bad;
}

int flgp_column_lse(const double *log_kernel, const i64 *idx, i64 n, int r, i64 s,
                    double *col_max, double *sums) {
    i64 m = n * (i64)r;
    for (i64 j = 0; j < s; j++) {
        col_max[j] = -INFINITY;
        sums[j] = 0.0;
    }
    for (i64 e = 0; e < m; e++) {
        double v = log_kernel[e];
        if (isnan(v) || v == INFINITY) return 0;
        if (v > col_max[idx[e]]) col_max[idx[e]] = v;
    }
    for (i64 e = 0; e < m; e++) {
        double top = col_max[idx[e]];
        sums[idx[e]] += exp(log_kernel[e] - (isfinite(top) ? top : 0.0));
    }
    return 1;
}
