"""Shared pieces of the few-labels study (experiments/few_labels_*.py, benchmarks/few_labels.py).

Everything here is plain numpy on top of flgp's own eigenpairs and EP routines
(:func:`flgp.models.inference.ep.ep_multinomial_probit`, :func:`~flgp.models.inference.ep.ep_probit`): a GP
``f_c ~ GP(0, K)`` with ``K = Σ_l w_l v_l v_lᵀ`` in the cloud's eigenbasis, where the
spectral weights ``w`` come from one of several families (:func:`spectral_g`). Eigenpairs,
data sets and k-nearest-neighbour graphs are cached under ``cache/`` (not committed).
"""

from __future__ import annotations

import os
import time

import numpy as np


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "cache")
RESULTS = os.path.join(ROOT, "experiments", "results")
os.makedirs(CACHE, exist_ok=True)
os.makedirs(RESULTS, exist_ok=True)

# --------------------------------------------------------------------------------------
# data sets
# --------------------------------------------------------------------------------------
SETS = ("mnist", "swiss5", "circles6", "torus4", "moons2", "helix6", "spheres3", "spirals2",
        "mnist6", "mnist6s")


def load_set(name):
    """``(X, y)`` of a named data set (float64, int codes 0..C-1); cached on disk."""
    fx, fy = os.path.join(CACHE, f"{name}_X.npy"), os.path.join(CACHE, f"{name}_y.npy")
    if os.path.exists(fx):
        return np.load(fx), np.load(fy)
    from flgp.datasets import (load_mnist, make_concentric_circles, make_helix,
                               make_swiss_roll, make_torus)
    if name == "mnist":
        from sklearn.decomposition import PCA
        X, y = load_mnist()
        X = PCA(n_components=100, random_state=0).fit_transform(X).astype(np.float64)
    elif name == "swiss5":
        # 20,000 points, noise 0.5 (benchmarks/calibration.py's roll), five classes cut
        # along the roll's length at the quintiles of its parameter
        X, t = make_swiss_roll(20000, noise=0.5, random_state=0)
        y = np.digitize(t, np.quantile(t, [0.2, 0.4, 0.6, 0.8]))
    elif name == "circles6":
        # the FLGP paper's six circles (6,000 points, its standardisation), each circle a
        # class: clusters without any smooth boundary between them
        from flgp.reproduce.circles import standardise
        X, _ = make_concentric_circles(6000, random_state=0)
        X = standardise(X)
        y = np.repeat(np.arange(6), 1000)
    elif name == "torus4":
        # a 2-d manifold cut into four sectors of the long angle: class boundaries run
        # through the dense part of the cloud (no gap between classes)
        X, ang = make_torus(10000, random_state=0)
        y = np.minimum((ang[:, 0] / (np.pi / 2)).astype(int), 3)
    elif name == "moons2":
        from sklearn.datasets import make_moons
        X, y = make_moons(5000, noise=0.15, random_state=0)
    elif name == "digits":
        # scikit-learn's 1,797 handwritten digits (8 x 8 pixels; not one of SETS: a cloud
        # the probes check beyond the benchmark's)
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
    elif name == "spheres3":
        # three nested noisy spheres in R^3 (radii 1, 1.5, 2; noise 0.08; 1,500 points
        # each): classes that nest, the 10-NN graph with a few per cent of its edges
        # across spheres
        rng = np.random.default_rng(0)
        X, y = [], []
        for c, radius in enumerate((1.0, 1.5, 2.0)):
            v = rng.standard_normal((1500, 3))
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            X.append(v * radius + 0.08 * rng.standard_normal((1500, 3)))
            y.append(np.full(1500, c))
        X, y = np.concatenate(X), np.concatenate(y)
    elif name == "spirals2":
        # two interleaved spirals in the plane (2,000 points each, noise 0.45): classes
        # that touch along their whole length
        rng = np.random.default_rng(0)
        t = np.sqrt(rng.uniform(0.05, 1.0, 4000)) * 3 * np.pi
        y = np.repeat([0, 1], 2000)
        angle = t + np.pi * y
        X = np.c_[t * np.cos(angle), t * np.sin(angle)] + 0.45 * rng.standard_normal((4000, 2))
    elif name == "mnist6":
        # the confusable MNIST digits 3, 4, 5, 7, 8, 9 (41,354 images, mnist's 100 PCA
        # coordinates): image features where one label a class errs about a fifth
        X, y = load_set("mnist")
        keep = np.isin(y, (3, 4, 5, 7, 8, 9))
        X, y = X[keep], np.searchsorted((3, 4, 5, 7, 8, 9), y[keep])
    elif name == "mnist6s":
        # 200 images of each of those six digits (1,200, drawn with seed 0): too few
        # images for their graph to follow the digits' shapes - image features where one
        # label a class errs about two fifths
        X, y = load_set("mnist6")
        rng = np.random.default_rng(0)
        keep = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), 200,
                                                  replace=False) for c in range(6)]))
        X, y = X[keep], y[keep]
    elif name == "helix6":
        # a 3-turn helix (n = 6,000, noise 0.05) cut into six half-turns
        X, t = make_helix(6000, noise=0.05, random_state=0)
        y = np.minimum((t / np.pi).astype(int), 5)
    else:
        raise ValueError(name)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    np.save(fx, X)
    np.save(fy, y)
    return X, y


def stratified_draw(y, k, draw, n_classes=None):
    """``k`` labelled indices per class, seeded by ``(k, draw)``: the same draws for every
    method and every script."""
    C = int(y.max()) + 1 if n_classes is None else n_classes
    rng = np.random.default_rng(10_000 * k + draw)
    return np.concatenate([rng.choice(np.flatnonzero(y == c), k, replace=False)
                           for c in range(C)])


def random_draw(y, m, draw):
    """``m`` labelled indices at random (every class present), seeded by ``(m, draw)``:
    the same draws as benchmarks/calibration.py's ``make_draw`` for MNIST."""
    rng = np.random.default_rng(draw)
    lab = rng.choice(y.size, m, replace=False)
    while np.unique(y[lab]).size < np.unique(y).size:
        lab = rng.choice(y.size, m, replace=False)
    return lab


# --------------------------------------------------------------------------------------
# eigenpairs and kNN graphs (cached)
# --------------------------------------------------------------------------------------
def eigen(name, s=None, M=None, r=3, seed=0, spectrum="one_step", kernel="lae"):
    """``(λ, V)`` of flgp's eigenpairs of a data set (``V`` n x M, orthonormal columns);
    defaults are FLGPClassifier's (s = min(1000, n // 4), M = min(100, s - 1))."""
    from flgp.spectral.compute import default_n_eigenpairs, default_n_induced
    X, _ = load_set(name)
    n = X.shape[0]
    s = default_n_induced(n) if s is None else s
    M = default_n_eigenpairs(s) if M is None else M
    tag = f"{name}_s{s}_M{M}_r{r}_seed{seed}_{spectrum}_{kernel}"
    fl, fv = os.path.join(CACHE, f"eig_{tag}_lam.npy"), os.path.join(CACHE, f"eig_{tag}_V.npy")
    if os.path.exists(fl):
        return np.load(fl), np.load(fv, mmap_mode="r")
    from flgp.spectral import compute_eigenpairs
    ep = compute_eigenpairs(X, n_induced=s, n_eigenpairs=M, n_neighbors=r, random_state=seed,
                            spectrum=spectrum, kernel=kernel)
    lam = np.asarray(ep.eigenvalues, dtype=np.float64)
    V = np.ascontiguousarray(ep.eigenvectors, dtype=np.float64)
    V = constant_first(lam, V)
    np.save(fl, lam)
    np.save(fv, V)
    return lam, np.load(fv, mmap_mode="r")


def constant_first(lam, V):
    """Rotate the null space (eigenvalue 0: one vector per connected component) so that
    its first column is the constant vector and the others are orthogonal to it: the
    constant mode gets its own weight, the components' contrasts keep g(0)."""
    null = np.flatnonzero(lam <= ZERO)
    n = V.shape[0]
    B = np.asarray(V[:, null])
    a = B.T @ np.full(n, 1 / np.sqrt(n))
    if null.size == 1:
        if a[0] < 0:
            V = np.array(V)
            V[:, null[0]] *= -1
        return V
    # Householder reflection H with H e_1 = a / |a|
    a = a / np.linalg.norm(a)
    e = np.zeros_like(a)
    e[0] = 1.0
    v = a - e
    H = np.eye(a.size) - 2 * np.outer(v, v) / max(v @ v, 1e-300) if v @ v > 1e-24 else np.eye(a.size)
    V = np.array(V)
    V[:, null] = B @ H
    return V


def knn(name, k=10):
    """Exact ``k`` nearest neighbours (self first) of a data set: ``(ind, dist)``."""
    fi, fd = os.path.join(CACHE, f"{name}_knn{k}_ind.npy"), os.path.join(CACHE, f"{name}_knn{k}_dist.npy")
    if os.path.exists(fi):
        return np.load(fi), np.load(fd)
    from sklearn.neighbors import NearestNeighbors
    X, _ = load_set(name)
    algo = "brute" if X.shape[1] > 10 else "kd_tree"
    dist, ind = NearestNeighbors(n_neighbors=k + 1, algorithm=algo).fit(X).kneighbors(X)
    np.save(fi, ind)
    np.save(fd, dist)
    return ind, dist


def knn_weights(name, k=10):
    """graphlearning's default kNN weight matrix (self-tuning Gaussian, symmetrised) from
    the exact neighbours (graphlearning's own search needs annoy, not installed)."""
    import graphlearning as gl
    ind, dist = knn(name, k)
    return gl.weightmatrix.knn(None, k, knn_data=(ind, dist))


def knn_eigen(name, M=200, k=10):
    """Eigenpairs of the kNN graph's symmetric normalised Laplacian ``I - D^-1/2 W D^-1/2``
    (``λ`` ascending in [0, 2], ``V`` orthonormal): the kNN representation in the same
    spectral form as flgp's (for the representation study)."""
    fl, fv = os.path.join(CACHE, f"knneig_{name}_k{k}_M{M}_lam.npy"), os.path.join(CACHE, f"knneig_{name}_k{k}_M{M}_V.npy")
    if os.path.exists(fl):
        return np.load(fl), np.load(fv, mmap_mode="r")
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh
    W = knn_weights(name, k).tocsr()
    d = np.asarray(W.sum(1)).ravel()
    Dm = sp.diags(1 / np.sqrt(d))
    S = (Dm @ W @ Dm).tocsr()
    # largest eigenvalues of S + I (positive definite shift makes them the largest magnitude)
    n = S.shape[0]
    vals, vecs = eigsh(S + sp.identity(n), k=M, which="LA", tol=1e-8)
    order = np.argsort(-vals)
    lam = 1.0 - (vals[order] - 1.0)
    lam[0] = 0.0 if abs(lam[0]) < 1e-8 else lam[0]
    V = np.ascontiguousarray(vecs[:, order])
    np.save(fl, lam)
    np.save(fv, V)
    return lam, np.load(fv, mmap_mode="r")


# --------------------------------------------------------------------------------------
# spectral families
# --------------------------------------------------------------------------------------
ZERO = 1e-10


def spectral_g(lam, family="heat", t=1.0, nu=None):
    """Unit-normalised spectral density ``g(λ)`` with ``g(0) = 1`` on the non-constant modes:

    * ``heat``: ``exp(-t λ)``;
    * ``matern``: ``(1 + t λ / ν)^(-ν)`` - the graph Matérn ``(2ν/κ² + λ)^(-ν)`` with
      ``t = ν κ² / 2`` and its amplitude at λ = 0 set to 1, so that ``ν → ∞`` is the heat
      kernel at the same ``t``;
    * ``green``: ``λ_2 / λ`` - the Laplacian's pseudo-inverse (Matérn ``ν = 1`` as
      ``t → ∞``, no ``t``; ``λ_2`` the smallest positive eigenvalue).

    The zero eigenvalues other than the constant mode (several connected components) get
    ``g = 1``; the constant mode (column 0, see :func:`constant_first`) gets its weight in
    :func:`weights`."""
    lam = np.asarray(lam, dtype=np.float64)
    pos = lam > ZERO
    g = np.ones_like(lam)
    if family == "heat":
        g[pos] = np.exp(-t * lam[pos])
    elif family == "matern":
        g[pos] = (1.0 + t * lam[pos] / nu) ** (-nu)
    elif family == "green":
        # pseudo-inverse, scaled so that the smallest positive eigenvalue has weight 1
        lam_ref = lam[pos].min()
        g[pos] = lam_ref / lam[pos]
    else:
        raise ValueError(family)
    return g


def weights(lam, n, family="heat", t=1.0, nu=None, amplitude=1.0, const=1.0,
            normalise=False):
    """Spectral weights ``w_l = A n g(λ_l)`` (flgp's kernel scale ``c = n``: ``K(x, x) ≈
    A Σ g``) with the constant mode's ``g`` replaced by ``const`` (1: flgp's heat kernel as
    it is; 0: no constant mode, Poisson learning's centring). ``normalise``: divide the
    non-constant weights by their sum, so that ``A`` is the mean prior variance of the
    non-constant part whatever ``t`` (and the constant mode's variance is ``const · A``)."""
    g = spectral_g(lam, family, t, nu)
    if normalise:
        # amplitude = the mean prior variance of the non-constant part over the cloud
        # (Σ_l g_l / n · n v_l² averages Σ_{l≥2} g_l): t then sets only the shape
        g[1:] /= g[1:].sum()
    g[0] = const          # the constant mode (constant_first puts it in column 0)
    return amplitude * n * g


def feature_cols(w, tiny=1e-16):
    """Columns kept: weights above ``tiny`` of the largest (as flgp's spectral_weights)."""
    return np.flatnonzero(w > tiny * w.max())


# --------------------------------------------------------------------------------------
# EP fits and predictions
# --------------------------------------------------------------------------------------
def ep_fit(V_lab, codes, C, w, tol=1e-4, init=None, max_sweeps=200):
    """EP posterior in the eigenbasis for spectral weights ``w``: multinomial probit
    (C > 2) or binary probit. Returns ``(state, keep)``; ``state.log_evidence`` is EP's
    log marginal likelihood."""
    from flgp.models.inference.ep import ep_multinomial_probit, ep_probit
    keep = feature_cols(w)
    Phi = np.ascontiguousarray(V_lab[:, keep] * np.sqrt(w[keep]))
    if C == 2:
        st = ep_probit(Phi, 2.0 * codes - 1.0, init=init, tol=tol, max_sweeps=max_sweeps)
    else:
        st = ep_multinomial_probit(Phi, codes, C, init=init, tol=tol, max_sweeps=max_sweeps)
    return st, keep


def latent_mean(V, state, keep, w, C, chunk=20000):
    """Posterior latent means at all rows of ``V`` ((n, C); binary: (n, 2) as [-f, f])."""
    D = np.sqrt(w[keep])
    mz = state.mean_z if state.mean_z.ndim == 2 else state.mean_z[:, None]
    B = D[:, None] * mz
    out = np.empty((V.shape[0], B.shape[1]))
    for a in range(0, V.shape[0], chunk):
        out[a:a + chunk] = np.asarray(V[a:a + chunk])[:, keep] @ B
    if C == 2:
        out = np.c_[-out[:, 0], out[:, 0]]
    return out


def predict_proba(V, state, keep, w, C, scale=1.0, chunk=4000):
    """Class probabilities at all rows of ``V`` (flgp's EP predictive; ``scale`` = κ)."""
    from flgp.models.inference.ep import (multinomial_predict_projected, multinomial_projection,
                                probit_latent_projected, probit_probabilities,
                                probit_projection)
    D = np.sqrt(w[keep])
    if C == 2:
        P = D[:, None] * probit_projection(state)
    else:
        P = D[:, None] * multinomial_projection(state)
    out = np.empty((V.shape[0], C))
    for a in range(0, V.shape[0], chunk):
        Z = np.asarray(V[a:a + chunk])[:, keep] @ P
        if C == 2:
            mean, var = probit_latent_projected(Z)
            p = probit_probabilities(mean, var, scale)
            out[a:a + chunk] = np.c_[1 - p, p]
        else:
            out[a:a + chunk] = multinomial_predict_projected(Z, C, keep.size, scale=scale)
    return out


# --------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------
def ece(P, y, n_bins=15):
    conf = P.max(1)
    correct = P.argmax(1) == y
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        b = (conf > lo) & (conf <= hi)
        if b.any():
            total += b.mean() * abs(correct[b].mean() - conf[b].mean())
    return float(total)


def nll(P, y):
    return float(-np.mean(np.log(np.clip(P[np.arange(y.size), y], 1e-15, 1.0))))


def unlabelled_mask(n, lab):
    u = np.ones(n, dtype=bool)
    u[lab] = False
    return u


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *a):
        self.dt = time.perf_counter() - self.t0


# --------------------------------------------------------------------------------------
# hyperparameter rules (the candidates of the study)
# --------------------------------------------------------------------------------------
PRIOR_DROP = 2.0   # t_C: the C-th mode's weight g(λ_C) = exp(-PRIOR_DROP)


def t_range(lam):
    """flgp's diffusion-time range ``[0.1 / λ_M, 10 / λ_2]``."""
    pos = lam[lam > ZERO]
    return 0.1 / pos.max(), 10.0 / pos.min()


def t_center(lam, C, family="heat", nu=None, drop=PRIOR_DROP, offset=0):
    """The cloud's prior centre for ``t``: the time at which the ``C``-th eigenvalue's
    weight has fallen to ``exp(-drop)`` (``C`` classes; λ_1 = 0 counts), clipped to the
    search range; with ``C`` or more connected components ``λ_C = 0`` and the smallest
    positive eigenvalue takes its place."""
    lo, hi = t_range(lam)
    srt = np.sort(lam)
    # with C or more connected components the C modes are all null (weight 1 at any t):
    # the scale is then the first positive eigenvalue's
    lc = max(srt[min(C + offset, lam.size) - 1], srt[srt > ZERO].min())
    if family == "heat":
        t = drop / lc
    elif family == "matern":
        t = nu * (np.exp(drop / nu) - 1.0) / lc
    else:
        return np.nan
    return float(np.clip(t, lo, hi))


def loo_scale(states_weights, yl, C, class_preserving=True):
    """κ by leave-one-out over the labelled points (flgp's fit_predictive_scale); with
    ``class_preserving`` only points whose class keeps another label count (leaving out
    a class's only label removes the class: no valid held-out prediction). 1 when no
    point qualifies."""
    from flgp.models.inference.ep import fit_predictive_scale, multinomial_loo, probit_loo
    counts = np.bincount(yl, minlength=C)
    sel = counts[yl] >= 2 if class_preserving else np.ones(yl.size, bool)
    if sel.sum() == 0:
        return 1.0
    terms, ws = [], []
    for st, w in states_weights:
        if C == 2:
            a, b = probit_loo(st)
            terms.append((a[sel], b[sel]))
        else:
            a, S = multinomial_loo(st, yl)
            terms.append((a[sel], S[sel]))
        ws.append(w)
    ws = np.asarray(ws) / np.sum(ws)
    return fit_predictive_scale(terms, ws)


def fit_rule(lam, V, lab, y, C, *, families=(("heat", None),), consts=(0.0,),
             amplitudes=(1.0,), prior_sd=1.0, mode="map", calibration="loo_cp",
             n_grid=16, refine=True, prior_drop=PRIOR_DROP, mass=0.99, return_search=False,
             fixed_kappa=None, n_cloud=None, extra_kappas=(), extra_rows=None,
             normalise=False, prior_offset=0):
    """Fit one hyperparameter rule and return ``(P, info)``: probabilities at every row
    of ``V`` and the chosen hyperparameters.

    Every (family, γ, A) gets the evidence on a ``n_grid`` log grid of ``t`` over flgp's
    range; the log posterior adds a log-normal prior on ``t`` around :func:`t_center`
    with sd ``prior_sd`` in ``log t`` (None: flat in log t, flgp's default) and a flat
    prior over the discrete choices. ``mode="map"``: the best point (refined by
    parabolic steps in log t); ``"bma"``: the class probabilities averaged over the grid
    points holding ``mass`` of the posterior. ``n_cloud``: the cloud's size (the kernel
    scale) when ``V`` holds only some of its rows."""
    from flgp.models.search import parabolic_refine
    n = V.shape[0] if n_cloud is None else n_cloud
    Vl = np.asarray(V[lab])
    yl = y[lab]
    lo, hi = t_range(lam)
    grid = np.exp(np.linspace(np.log(lo), np.log(hi), n_grid))
    t0 = time.perf_counter()
    cands = []   # (log posterior, family, nu, const, A, t, state, keep, w)
    for fam, nu in families:
        tc = t_center(lam, C, fam, nu, prior_drop, prior_offset)
        ts = [np.nan] if fam == "green" else grid

        def lp_t(t):
            if prior_sd is None or fam == "green":
                return 0.0
            return -0.5 * ((np.log(t) - np.log(tc)) / prior_sd) ** 2

        for const in consts:
            for A in amplitudes:
                init = None
                for t in ts:
                    w = weights(lam, n, fam, t, nu, A, const, normalise)
                    try:
                        st, keep = ep_fit(Vl, yl, C, w, tol=1e-2, init=init)
                    except np.linalg.LinAlgError:
                        init = None
                        continue
                    init = st
                    cands.append([st.log_evidence + lp_t(t), fam, nu, const, A, t, st,
                                  keep, w, lp_t])
    lps = np.array([c[0] for c in cands])
    best = int(np.argmax(lps))
    if mode == "map":
        lp, fam, nu, const, A, t, st, keep, w, lp_t = cands[best]
        if refine and fam != "green":
            same = [i for i, c in enumerate(cands) if c[1:5] == [fam, nu, const, A]]
            g = np.log([cands[i][5] for i in same])
            v = -np.array([cands[i][0] for i in same])
            kk = int(np.argmin(v))
            warm = {"st": st}

            def neg(logt):
                ww = weights(lam, n, fam, np.exp(logt), nu, A, const, normalise)
                s2, _ = ep_fit(Vl, yl, C, ww, tol=1e-2, init=warm["st"])
                return -(s2.log_evidence + lp_t(np.exp(logt)))
            t = float(np.exp(parabolic_refine(neg, g, v, kk)))
        w = weights(lam, n, fam, t, nu, A, const, normalise)
        st, keep = ep_fit(Vl, yl, C, w, tol=1e-6, init=st)
        comps = [(1.0, st, keep, w, (fam, nu, const, A, t))]
    else:
        wts = np.exp(lps - lps.max())
        wts /= wts.sum()
        order = np.argsort(-wts)
        nkeep = int(np.searchsorted(np.cumsum(wts[order]), mass)) + 1
        comps = []
        for i in order[:nkeep]:
            _, fam, nu, const, A, t, st, keep, w, _ = cands[i]
            st, keep = ep_fit(Vl, yl, C, w, tol=1e-6, init=st)
            comps.append((wts[i], st, keep, w, (fam, nu, const, A, t)))
        tot = sum(c[0] for c in comps)
        comps = [(c[0] / tot,) + c[1:] for c in comps]
    if fixed_kappa is not None:
        kappa = float(fixed_kappa)
    elif calibration is None:
        kappa = 1.0
    else:
        kappa = loo_scale([(c[1], c[0]) for c in comps], yl, C,
                          class_preserving=(calibration == "loo_cp"))
    t_fit = time.perf_counter() - t0
    t1 = time.perf_counter()
    P = 0.0
    for wk, st, keep, w, _ in comps:
        P = P + wk * predict_proba(V, st, keep, w, C, scale=kappa)
    t_pred = time.perf_counter() - t1
    extra = {}
    for kap in extra_kappas:
        Pk = 0.0
        for wk, st, keep, w, _ in comps:
            Pk = Pk + wk * predict_proba(V[extra_rows], st, keep, w, C, scale=kap)
        extra[kap] = Pk
    top = comps[0][4]
    info = dict(family=top[0], nu=top[1], const=top[2], A=top[3], t=top[4], kappa=kappa,
                n_comp=len(comps), log_ev=comps[0][1].log_evidence, fit_s=t_fit,
                pred_s=t_pred, n_ep=len(cands), extra=extra)
    if return_search:
        info["search"] = [(c[0], c[1], c[2], c[3], c[4], c[5], c[6].log_evidence) for c in cands]
    return P, info
