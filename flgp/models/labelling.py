r"""The labelling loop: which unlabelled rows of a fitted cloud to label next.

Every heat-kernel estimator's latent function is ``f_k(x) = b_k + v(x)ᵀ β_k`` with ``v(x)``
the eigenvector row of ``x`` (``M`` numbers) and ``β_k`` Gaussian in the eigenbasis after
the fit: mean ``μ_k``, covariance ``Σ_k`` (``M × M``), one ``k`` per latent function (one
for regression and binary classes, one per class otherwise; :class:`LatentPosterior`).
Everything a suggestion needs is then ``M``-dimensional:

* the latent variance at a point, ``q_k(x) = v(x)ᵀ Σ_k v(x)``;
* a weighted total variance over the cloud, ``Σ_i ω_ik q_k(x_i) = tr(Σ_k G_k)`` with
  ``G_k = Σ_i ω_ik v(x_i) v(x_i)ᵀ``. Regression: ``ω = 1`` (``G`` the identity for FLGP's
  orthonormal eigenvectors); classes: :func:`probability_weights`, so that the total is
  the variance of the predicted probabilities to first order;
* a new label at ``x`` with (approximate) noise precision ``d_k`` (``1/σ²``; the fitted
  sites' mean precision for classes; ``E[e^f]`` for a Poisson count) turns ``Σ_k`` into
  ``Σ_k - β a aᵀ`` with ``a = Σ_k v(x)`` and ``β = d_k / (1 + d_k q_k(x))``, lowering the
  total by ``d_k aᵀ G_k a / (1 + d_k q_k(x))``.

Strategies (:func:`suggest_labels`):

``"variance_reduction"``
    The expected reduction of the (weighted) total predictive variance over the cloud,
    ``Σ_k d_k v(x)ᵀ Σ_k G_k Σ_k v(x) / (1 + d_k q_k(x))`` (exact for Gaussian noise,
    where the posterior covariance does not depend on the value of the label).
``"entropy"``, ``"margin"``, ``"least_confident"`` (classes), ``"std"`` (regression)
    Predictive uncertainty at the point (:func:`uncertainty_scores`) or its predictive
    standard deviation.
``"random"``
    Uniformly among the unlabelled rows (seeded by ``random_state``).

A batch is chosen greedily: after each pick the posterior is conditioned on a label there
(the rank-one update above) and the other candidates are rescored - for the uncertainty
strategies, multiplied by the share of latent standard deviation the batch leaves,
``√(Σ_k q_k / Σ_k q_k⁰)``, so that a batch spreads over the cloud
(:func:`greedy_variance_reduction`, :func:`greedy_uncertainty`; no ``n × M`` array).

At full resolution (the graph Matérn classifier) candidates are weighted by their graph
distance to the nearest label instead (:func:`spread_by_graph_distance`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra
from scipy.special import ndtri

from .._validation import check_int
from ..spectral.families import spectral_weights
from .search import single_threaded_blas

__all__ = ["LatentPosterior", "suggest_labels", "classifier_latent_posterior",
           "probit_ep_posterior", "multinomial_ep_posterior", "laplace_binary_posterior",
           "laplace_softmax_posterior", "uncertainty_scores", "eigenvector_gram",
           "probability_weights", "weighted_grams", "greedy_variance_reduction",
           "greedy_uncertainty", "graph_edge_lengths", "spread_by_graph_distance",
           "CLASSIFIER_STRATEGIES", "REGRESSOR_STRATEGIES"]

CLASSIFIER_STRATEGIES = ("entropy", "margin", "least_confident", "variance_reduction",
                         "random")
REGRESSOR_STRATEGIES = ("std", "variance_reduction", "random")
_ALIASES = {"uncertainty": {"classifier": "entropy", "regressor": "std"}}
_MIN_POOL = 1024
_POOL_PER_PICK = 32


@dataclass
class LatentPosterior:
    """Gaussian posterior of ``K`` latent functions in the eigenbasis:
    ``f_k(x) = offset_k + v(x)ᵀ β_k``, ``β_k ~ N(mean[:, k], cov[k])``. ``precision``
    (``(K,)``): the noise precision a new label adds, required unless ``count_rate`` (a
    Poisson count: its expected rate ``exp(offset + m(x) + q(x) / 2)``)."""

    mean: np.ndarray
    cov: np.ndarray
    precision: np.ndarray | None = None
    offset: np.ndarray | None = None
    count_rate: bool = False

    def __post_init__(self):
        self.mean = np.asarray(self.mean, dtype=np.float64)
        if self.mean.ndim == 1:
            self.mean = self.mean[:, None]
        self.cov = np.asarray(self.cov, dtype=np.float64)
        if self.cov.ndim == 2:
            self.cov = self.cov[None]
        K = self.mean.shape[1]
        if self.offset is None:
            self.offset = np.zeros(K)
        self.offset = np.broadcast_to(np.asarray(self.offset, dtype=np.float64), (K,)).copy()
        if not self.count_rate:
            if self.precision is None:
                raise ValueError("LatentPosterior needs the precision a label adds to each "
                                 "latent function (or count_rate=True for counts).")
            self.precision = np.broadcast_to(
                np.asarray(self.precision, dtype=np.float64), (K,)).copy()
        # trailing eigenvectors of weight exactly 0 add nothing
        used = np.flatnonzero(np.any(self.cov != 0, axis=(0, 1)) | np.any(self.mean != 0, 1))
        self.n_active = int(used[-1]) + 1 if used.size else 1

    @property
    def n_latent(self) -> int:
        return self.mean.shape[1]

    def info(self, mean_latent: np.ndarray, var_latent: np.ndarray) -> np.ndarray:
        """Noise precision ``(b, K)`` of a new label at latent means / variances ``(b, K)``."""
        if self.count_rate:
            return np.exp(np.minimum(self.offset + mean_latent + 0.5 * var_latent, 700.0))
        return np.broadcast_to(self.precision, mean_latent.shape)


# -- posteriors of the classifier's inference states, in the eigenbasis -------------------
def _embed(S: np.ndarray, mean: np.ndarray, scale: np.ndarray, kept: np.ndarray, M: int):
    """Eigenbasis mean and covariance of weights ``z`` over the kept columns, ``β = scale ∘
    z``."""
    cov = np.zeros((M, M))
    cov[np.ix_(kept, kept)] = scale[:, None] * S * scale[None, :]
    mu = np.zeros(M)
    mu[kept] = scale * mean
    return mu, cov


def _kept_scale(w: np.ndarray, amplitude: float = 1.0):
    kept = np.flatnonzero(w != 0)
    return kept, np.sqrt(amplitude * w[kept])


def probit_ep_posterior(state, w: np.ndarray, amplitude: float = 1.0):
    """Eigenbasis mean ``(M,)``, covariance ``(M, M)`` and mean site precision of a binary
    probit EP state (:func:`flgp.models.inference.ep.ep_probit`) whose features were
    ``√A · V · diag(√w)`` over the columns where ``w != 0``."""
    kept, scale = _kept_scale(np.asarray(w, dtype=np.float64), amplitude)
    d = state.chol.shape[0]
    if d != kept.size:
        raise ValueError(f"the EP state has {d} weights but w keeps {kept.size} columns; "
                         f"pass the spectral weights of the state's diffusion time.")
    Linv = scipy.linalg.solve_triangular(state.chol, np.eye(d), lower=True)
    mu, cov = _embed(Linv.T @ Linv, state.mean_z, scale, kept, w.size)
    return mu, cov, float(np.mean(state.tau))


def multinomial_ep_posterior(state, w: np.ndarray, amplitude: float = 1.0):
    """Per-class eigenbasis means ``(M, C)``, marginal covariances ``(C, M, M)`` (no
    between-class terms) and mean site precisions ``d_ic - d_ic² / s_i`` ``(C,)`` of a
    nested-EP state (:func:`flgp.models.inference.ep.ep_multinomial_probit`)."""
    kept, scale = _kept_scale(np.asarray(w, dtype=np.float64), amplitude)
    Phi = state.phi
    m, d = Phi.shape
    if d != kept.size:
        raise ValueError(f"the EP state has {d} weights but w keeps {kept.size} columns; "
                         f"pass the spectral weights of the state's diffusion time.")
    C = state.n_classes
    M = w.size
    means = np.zeros((M, C))
    covs = np.zeros((C, M, M))
    # outer-site precisions: d_iy = 1, d_ij the inner sites, s_i = Σ_c d_ic
    dd = np.ones((m, C))
    dd[np.arange(m)[:, None], state.others] = state.tau
    s = dd.sum(1)
    site = dd - dd * dd / s[:, None]
    for c in range(C):
        Linv = scipy.linalg.solve_triangular(state.chol_p[c], np.eye(d), lower=True)
        P_inv = Linv.T @ Linv
        R = scipy.linalg.solve_triangular(state.chol_m, state.r[:, c, None] * (Phi @ P_inv),
                                          lower=True)
        means[:, c], covs[c] = _embed(P_inv + R.T @ R, state.mean_z[:, c], scale, kept, M)
    return means, covs, site.mean(0)


def laplace_binary_posterior(state, V_lab: np.ndarray, w: np.ndarray):
    """Eigenbasis mean, covariance ``diag(w) - Rᵀ R`` (``R = L⁻¹ W^{1/2} V_lab diag(w)``)
    and mean ``W`` of a binary Laplace state for the kernel ``V_lab diag(w) V_labᵀ``."""
    w = np.asarray(w, dtype=np.float64)
    Vw = V_lab * w
    R = scipy.linalg.solve_triangular(state.chol, state.sqrt_w[:, None] * Vw, lower=True)
    cov = np.diag(w) - R.T @ R
    return Vw.T @ state.grad, 0.5 * (cov + cov.T), float(np.mean(state.sqrt_w ** 2))


def laplace_softmax_posterior(state, V_lab: np.ndarray, w: np.ndarray):
    """Per-class eigenbasis means ``(M, C)``, covariances ``(C, M, M)`` and mean
    ``π_c (1 - π_c)`` of a softmax Laplace state (R&W Algorithm 3.4's ``Q_c``)."""
    w = np.asarray(w, dtype=np.float64)
    Vw = V_lab * w
    C = state.Y.shape[1]
    M = w.size
    means = Vw.T @ (state.Y - state.pi)
    covs = np.empty((C, M, M))
    for c in range(C):
        Ec = state.E[c]
        Qc = Ec - Ec @ scipy.linalg.cho_solve((state.chol_sum_e, True), Ec)
        cov = np.diag(w) - Vw.T @ (0.5 * (Qc + Qc.T)) @ Vw
        covs[c] = 0.5 * (cov + cov.T)
    return means, covs, np.mean(state.pi * (1 - state.pi), axis=0)


def classifier_latent_posterior(eigenpairs, V_lab: np.ndarray, t, state, amplitude, *,
                                n_classes: int, expectation_propagation: bool = True,
                                one_vs_rest: bool = False) -> LatentPosterior:
    """The :class:`LatentPosterior` of a classifier's EP (or Laplace) state at diffusion
    time ``t`` (one-vs-rest: one ``t``, ``amplitude``, ``state`` per class). ``eigenpairs``:
    the eigenpairs or a :class:`~flgp.spectral.families.SpectralPrior`; ``V_lab``: the
    labelled points' eigenvector rows in that basis."""

    C = int(n_classes)
    if one_vs_rest and C > 2:
        parts = [_binary_posterior(expectation_propagation, st, V_lab,
                                   _weights(eigenpairs, tc), ac)
                 for tc, ac, st in zip(np.atleast_1d(t), np.broadcast_to(amplitude, (C,)),
                                       state)]
        return LatentPosterior(np.stack([p[0] for p in parts], 1),
                               np.stack([p[1] for p in parts]),
                               np.array([p[2] for p in parts]))
    w = _weights(eigenpairs, t)
    if C == 2:
        return LatentPosterior(*_binary_posterior(expectation_propagation, state, V_lab, w,
                                                  amplitude))
    if expectation_propagation:
        return LatentPosterior(*multinomial_ep_posterior(state, w, amplitude))
    return LatentPosterior(*laplace_softmax_posterior(state, V_lab, w))


def _weights(prior, t):
    """Prior weights at ``t`` of a spectral prior, or of the heat kernel on eigenpairs."""
    if hasattr(prior, "weights"):
        return prior.weights(t)

    return spectral_weights(prior, t)


def _binary_posterior(ep_inference, state, V_lab, w, amplitude):
    if ep_inference:
        return probit_ep_posterior(state, w, amplitude)
    return laplace_binary_posterior(state, V_lab, w)


# -- scores -------------------------------------------------------------------------------
def uncertainty_scores(proba: np.ndarray, kind: str) -> np.ndarray:
    """Predictive uncertainty of class probabilities ``(n, C)``, larger = less certain:
    ``"entropy"`` ``-Σ p log p``; ``"margin"`` ``1 - (p_(1) - p_(2))``;
    ``"least_confident"`` ``1 - p_(1)``."""
    P = np.clip(np.asarray(proba, dtype=np.float64), 0.0, 1.0)
    if kind == "entropy":
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.sum(np.where(P > 0, P * np.log(P), 0.0), axis=1)
    top = -np.partition(-P, 1, axis=1)[:, :2]
    if kind == "margin":
        return 1.0 - (top[:, 0] - top[:, 1])
    if kind == "least_confident":
        return 1.0 - top[:, 0]
    raise ValueError(f"unknown uncertainty score {kind!r}.")


def score_margin_uncertainty(scores: np.ndarray) -> np.ndarray:
    """``1 - g / max g`` with ``g`` the gap between each row's two largest class scores
    ``(n, C)`` (posterior means, not probabilities; Miller & Calder 2023): larger = less
    certain, 1 where the scores tie."""
    U = np.asarray(scores, dtype=np.float64)
    top = -np.partition(-U, 1, axis=1)[:, :2]
    gap = top[:, 0] - top[:, 1]
    largest = float(np.max(gap)) if gap.size else 0.0
    if not largest > 0.0:
        return np.ones(U.shape[0])
    return 1.0 - gap / largest


def graph_edge_lengths(stiffness) -> sp.csr_matrix:
    """Each edge's length ``-log(w_ij / max w)`` (at least ``10⁻³`` of the mean) from a
    graph's stiffness ``D - W``. ValueError unless a square sparse matrix."""
    if not sp.issparse(stiffness) or stiffness.ndim != 2 \
            or stiffness.shape[0] != stiffness.shape[1]:
        raise ValueError(f"stiffness must be a square scipy.sparse matrix (a PointGraph's "
                         f"stiffness); got {type(stiffness).__name__} of shape "
                         f"{np.shape(stiffness)}.")
    W = -sp.csr_matrix(stiffness, copy=True)
    W.setdiag(0.0)
    W.eliminate_zeros()
    W.data = np.maximum(W.data, 1e-300)
    length = -np.log(W.data / W.data.max())
    mean = float(length.mean()) if length.size else 0.0
    W.data = np.maximum(length, 1e-3 * mean if mean > 0 else 1.0)
    return W


def spread_by_graph_distance(lengths, labelled, index, base, n) -> np.ndarray:
    """``n`` rows of ``index`` chosen greedily by ``base`` (larger = less certain) times
    ``d / max d``, ``d`` the graph distance (:func:`graph_edge_lengths`) to the nearest
    label or earlier pick (greedy k-centre, Sener & Savarese 2018). ValueError for a
    ``base`` not finite one a row, or ``n`` out of range."""
    index = np.asarray(index, dtype=np.int64)
    sources = np.asarray(labelled, dtype=np.int64)
    score_base = np.asarray(base, dtype=np.float64)
    n = int(n)
    if score_base.shape != index.shape or not np.all(np.isfinite(score_base)):
        raise ValueError(f"base must hold one finite uncertainty a row of index "
                         f"({index.size}); got shape {score_base.shape}.")
    if not 1 <= n <= index.size:
        raise ValueError(f"n must be between 1 and the {index.size} candidate rows; got {n}.")
    d = (dijkstra(lengths, indices=sources, min_only=True)[index] if sources.size
         else np.full(index.size, np.inf))
    picks = []
    for _ in range(n):
        reached = np.isfinite(d)
        far = float(d[reached].max()) if reached.any() else 0.0
        dist = np.where(reached, d, 2.0 * far if far > 0 else 1.0)
        score = score_base * dist / max(float(dist.max()), 1e-300)
        score[picks] = -np.inf
        p = int(np.argmax(score))
        picks.append(p)
        if len(picks) < n:
            limit = far if reached.all() and far > 0 else np.inf
            d = np.minimum(d, dijkstra(lengths, indices=int(index[p]), limit=limit)[index])
    return index[np.asarray(picks, dtype=np.int64)]


_GRAMS = weakref.WeakKeyDictionary()


def eigenvector_gram(eigenpairs) -> np.ndarray | None:
    """``G = Σ_i v(x_i) v(x_i)ᵀ`` over the cloud, or None when it is the identity to 1e-8;
    cached per eigenpairs object."""
    try:
        return _GRAMS[eigenpairs]
    except (KeyError, TypeError):
        pass
    M = eigenpairs.n_eigenpairs
    G = _sum_over_cloud(eigenpairs, lambda V, start: V.T @ V, (M, M))
    G = 0.5 * (G + G.T)
    out = None if np.abs(G - np.eye(M)).max() < 1e-8 else G
    try:
        _GRAMS[eigenpairs] = out
    except TypeError:
        pass
    return out


def probability_weights(proba: np.ndarray, var_latent: np.ndarray) -> np.ndarray:
    """``ω = φ(Φ⁻¹(p))² / (1 + v)``: the squared slope of ``p = Φ(μ / √(1 + v))`` in
    ``μ``, so that ``ω · Var f`` is the probability's variance to first order."""
    z = ndtri(np.clip(proba, 1e-12, 1.0 - 1e-12))
    return np.exp(-z * z) / (2.0 * np.pi) / (1.0 + var_latent)


def _latent_probabilities(proba: np.ndarray, K: int) -> np.ndarray:
    """The probability each latent drives: class 1 for one binary latent, else class ``k``."""
    proba = np.asarray(proba, dtype=np.float64)
    return proba[:, 1:2] if K == 1 and proba.shape[1] == 2 else proba


# products over the cloud run in float32 above this many multiply-adds (~1e-6 relative)
_FLOAT32_WORK = 1e9
# weights below this (of at most 1/(2π)) leave a row out of a class's Gram matrix
_NEGLIGIBLE_WEIGHT = 1e-12


def _work_dtype(eigenpairs, post):
    work = eigenpairs.n_samples * post.n_latent * post.n_active ** 2
    return np.float32 if work > _FLOAT32_WORK else np.float64


def _sum_over_cloud(eigenpairs, block, shape):
    """``Σ block(V, start)`` over blocks of the cloud's eigenvector rows, in parallel."""
    return eigenpairs.reduce_chunks(lambda V, comp, start: block(V, start), shape, parallel=True)


def weighted_grams(eigenpairs, post: "LatentPosterior", proba) -> np.ndarray:
    """``G_k = Σ_i ω_ik v(x_i) v(x_i)ᵀ`` (``(K, M', M')``, active columns) with the
    :func:`probability_weights` of the cloud's class probabilities ``proba``."""
    k, K = post.n_active, post.n_latent
    M = eigenpairs.n_eigenpairs
    factors = [_factor(S) for S in post.cov[:, :k, :k]]
    q = np.asarray(eigenpairs.map_chunks(_SquaredNorms(0, [k] * K), n_columns=K, parallel=True,
                                 project=_padded(np.hstack(factors), M)), dtype=np.float64)
    om = probability_weights(_latent_probabilities(proba, K), q)
    dtype = _work_dtype(eigenpairs, post)

    def block(V, start):
        V = V[:, :k]
        w = om[start:start + V.shape[0]]
        out = np.empty((K, k, k))
        for j in range(K):
            sel = w[:, j] > _NEGLIGIBLE_WEIGHT
            Vs = V[sel].astype(dtype)
            out[j] = (Vs * w[sel, j:j + 1].astype(dtype)).T @ Vs
        return out

    G = _sum_over_cloud(eigenpairs, block, (K, k, k))
    return 0.5 * (G + np.swapaxes(G, 1, 2))


def _factor(S: np.ndarray) -> np.ndarray:
    """``L`` with ``L Lᵀ = S`` for a positive semi-definite ``S`` (negative eigenvalues 0)."""
    e, U = np.linalg.eigh(0.5 * (S + S.T))
    return U * np.sqrt(np.clip(e, 0.0, None))


def _padded(A: np.ndarray, M: int) -> np.ndarray:
    """``A`` (rows: the leading eigenvectors) with zero rows down to ``M``."""
    out = np.zeros((M, A.shape[1]))
    out[:A.shape[0]] = A
    return out


class _SquaredNorms:
    """Rows -> their first ``n_plain`` columns, then the squared norm of each following
    group of ``widths`` columns."""

    def __init__(self, n_plain, widths):
        self.n_plain = int(n_plain)
        self.edges = np.cumsum([self.n_plain] + list(widths))

    def __call__(self, Z, pieces=None):
        out = np.empty((Z.shape[0], self.n_plain + self.edges.size - 1))
        out[:, :self.n_plain] = Z[:, :self.n_plain]
        for j, (a, b) in enumerate(zip(self.edges[:-1], self.edges[1:])):
            out[:, self.n_plain + j] = np.einsum("ij,ij->i", Z[:, a:b], Z[:, a:b])
        return out


def _identity(Z, pieces=None):
    return Z


def greedy_variance_reduction(eigenpairs, post: LatentPosterior, index: np.ndarray, n: int,
                              grams=None) -> np.ndarray:
    """``n`` rows of ``index`` (candidate rows) by greedy expected variance reduction,
    best first. ``q_k = |L_kᵀ v|²`` and ``r_k = |C_kᵀ v|²`` (``L_k L_kᵀ = Σ_k``,
    ``C_k = Σ_k G_k^{1/2}``) come from one pass over the cloud, each pick's rank-one update
    from one more. ``grams``: the per-latent ``G_k`` (None: the identity)."""
    K, k = post.n_latent, post.n_active
    M = eigenpairs.n_eigenpairs
    covs = post.cov[:, :k, :k].copy()
    L = [_factor(S) for S in covs]
    C = [S @ (np.eye(k) if grams is None else _factor(grams[j])) for j, S in enumerate(covs)]
    project = _padded(np.hstack([post.mean[:k]] + L + C), M)
    first = np.asarray(eigenpairs.map_chunks(_SquaredNorms(K, [k] * (2 * K)), n_columns=3 * K,
                                     parallel=True, project=project), dtype=np.float64)
    first = first[index]
    mean, q, r = first[:, :K], first[:, K:2 * K], first[:, 2 * K:]
    d = np.array(post.info(mean, q), dtype=np.float64)
    free = np.ones(index.size, dtype=bool)
    chosen = []
    while True:
        score = np.sum(d * r / (1.0 + d * q), axis=1)
        score[~free] = -np.inf
        best = int(np.argmax(score))                    # ties: the lower row first
        chosen.append(int(index[best]))
        free[best] = False
        if len(chosen) == n:
            return np.asarray(chosen, dtype=np.int64)
        v = eigenpairs.eigenvector_rows(index[best:best + 1])[0, :k]
        A = np.empty((k, 2 * K))
        beta = np.empty(K)
        c = np.empty(K)
        for j in range(K):
            a = covs[j] @ v
            Ga = a if grams is None else grams[j] @ a
            beta[j] = d[best, j] / (1.0 + d[best, j] * max(float(v @ a), 0.0))
            A[:, j], A[:, K + j], c[j] = a, covs[j] @ Ga, a @ Ga
            covs[j] -= beta[j] * np.outer(a, a)
        uw = np.asarray(eigenpairs.map_chunks(_identity, n_columns=2 * K, parallel=True,
                                      project=_padded(A, M)), dtype=np.float64)[index]
        u, w = uw[:, :K], uw[:, K:]
        r = np.maximum(r - 2.0 * beta * u * w + beta * beta * u * u * c, 0.0)
        q = np.maximum(q - beta * u * u, 0.0)


def _moments(V, covs):
    """Per latent ``q = v Σ vᵀ`` at rows ``V`` (float64): ``(b, K)``."""
    return np.maximum(np.stack([np.einsum("ij,ij->i", V @ S, V) for S in covs], axis=1), 0.0)


class _Pool:
    """Candidates with their eigenvector rows and each latent's variance before and after
    conditioning on the picks."""

    def __init__(self, eigenpairs, post, base):
        self.eigenpairs, self.base = eigenpairs, base
        k = post.n_active
        self.k = k
        self.cov0 = post.cov[:, :k, :k].copy()      # before any pick
        self.cov = self.cov0.copy()                  # conditioned on the picks so far
        self.post = post
        self.mean = post.mean[:k]
        self.rows = np.empty(0, dtype=np.int64)      # positions into the candidate list
        self.V = np.empty((0, k))
        self.q = self.q0 = self.d = np.empty((0, post.n_latent))

    def add(self, positions, index):
        V = self.eigenpairs.eigenvector_rows(index[positions])[:, :self.k]
        q0 = _moments(V, self.cov0)
        d = np.asarray(self.post.info(V @ self.mean, q0), dtype=np.float64)
        self.rows = np.r_[self.rows, positions]
        self.V = np.vstack([self.V, V])
        self.q0 = np.vstack([self.q0, q0])
        self.q = np.vstack([self.q, _moments(V, self.cov)])
        self.d = np.vstack([self.d, d])

    def scores(self):
        q0 = self.q0.sum(1)
        frac = np.where(q0 > 0, self.q.sum(1) / np.where(q0 > 0, q0, 1.0), 1.0)
        return self.base[self.rows] * np.sqrt(np.clip(frac, 0.0, 1.0))

    def condition(self, p):
        """Condition every latent on a label at pool entry ``p`` (rank-one updates)."""
        v = self.V[p]
        for j in range(self.cov.shape[0]):
            S = self.cov[j]
            a = S @ v
            beta = self.d[p, j] / (1.0 + self.d[p, j] * max(float(v @ a), 0.0))
            self.q[:, j] = np.maximum(self.q[:, j] - beta * (self.V @ a) ** 2, 0.0)
            S -= beta * np.outer(a, a)

    def drop(self, p):
        keep = np.ones(self.rows.size, dtype=bool)
        keep[p] = False
        for name in ("rows", "V", "q0", "q", "d"):
            setattr(self, name, getattr(self, name)[keep])


def greedy_uncertainty(eigenpairs, post: LatentPosterior, index: np.ndarray, base: np.ndarray,
                       n: int) -> np.ndarray:
    """``n`` rows of ``index`` by greedy penalised uncertainty, best first: ``base`` times
    the share of latent sd the picks leave. A pool of the best ``base`` scores holds the
    eigenvector rows, grown when its best falls below the best outside (still exact)."""
    order = np.argsort(-base, kind="stable")           # ties: the lower row first
    pool = _Pool(eigenpairs, post, base)
    size = min(order.size, max(_MIN_POOL, _POOL_PER_PICK * n))
    pool.add(np.sort(order[:size]), index)
    taken = size
    chosen = []
    while len(chosen) < n:
        s = pool.scores()
        bound = base[order[taken]] if taken < order.size else -np.inf
        best = int(np.argmax(s)) if s.size else -1
        if best < 0 or s[best] < bound:
            more = order[taken:taken + size]           # let the next candidates in
            taken += more.size
            pool.add(np.sort(more), index)
            continue
        chosen.append(int(index[pool.rows[best]]))
        if len(chosen) < n:
            pool.condition(best)
        pool.drop(best)
    return np.asarray(chosen, dtype=np.int64)


# -- the entry point the estimators call ----------------------------------------------------
def suggest_labels(fit, n, strategy, seed, *, name, classifier, method, labelled,
                   uncertainty):
    """Rows of a fitted estimator's cloud to label next (see the module docstring).
    ``fit``: the representation's fit (the heat kernel's holds the eigenbasis, another
    may have ``suggest``); ``labelled``: ``labelled_indices_``; ``uncertainty``:
    ``label_distributions_`` or ``transduction_std_``; ``seed`` seeds ``"random"``. Raises
    ValueError for an unknown or unsupported strategy, or ``n`` beyond the unlabelled rows."""
    kind = "classifier" if classifier else "regressor"
    strategies = CLASSIFIER_STRATEGIES if kind == "classifier" else REGRESSOR_STRATEGIES
    if not isinstance(strategy, str) or (strategy not in strategies
                                         and strategy not in _ALIASES):
        raise ValueError(f"unknown strategy {strategy!r} for {name}.suggest_labels; choose "
                         f"one of {', '.join(map(repr, strategies))} (or 'uncertainty', "
                         f"the same as {_ALIASES['uncertainty'][kind]!r}).")
    strategy = _ALIASES.get(strategy, {}).get(kind, strategy)
    n = check_int(n, "n", low=1)
    eigenbasis = getattr(fit, "eigenbasis", None)
    other = None if eigenbasis is not None else fit
    eigenpairs = None if eigenbasis is None else eigenbasis.eigenpairs
    n_rows = (eigenpairs.n_samples if eigenpairs is not None else np.shape(uncertainty)[0])
    rows = labelled
    labelled = np.zeros(n_rows, dtype=bool)
    labelled[np.asarray(rows)] = True
    index = np.flatnonzero(~labelled)
    if index.size == 0:
        raise ValueError(f"{name} was fitted without unlabelled rows (all {n_rows} rows of "
                         f"X are labelled), so there is nothing to suggest. Pass the points "
                         f"still to be labelled in X with "
                         f"{'-1' if kind == 'classifier' else 'NaN'} as their target (or "
                         f"as X_unlabeled), then fit again.")
    if n > index.size:
        raise ValueError(f"asked for n={n} suggestions, but only {index.size} unlabelled "
                         f"row(s) remain; ask for at most {index.size}.")
    if strategy == "random":               # whatever the prior
        return np.asarray(_generator(seed, labelled.sum()).choice(index, size=n,
                                                                   replace=False),
                          dtype=np.int64)
    if other is not None and not hasattr(other, "suggest"):
        raise ValueError(f"strategy={strategy!r} needs the heat-kernel posterior over the "
                         f"cloud; {name}(method_={method!r}) has none. "
                         f"strategy='random' works with every prior; for {strategy!r} fit "
                         f"with the heat kernel, {name}(HeatKernelPrior()).")
    if other is not None and strategy == "variance_reduction":
        offered = ("'margin' (its default), 'entropy', 'least_confident' or 'random'"
                   if kind == "classifier" else "'std' (its default) or 'random'")
        raise ValueError(f"strategy='variance_reduction' needs every candidate's covariance "
                         f"with the cloud, one sparse solve each at full resolution; "
                         f"method_={method!r} suggests by {offered}.")
    if other is not None:
        return np.asarray(other.suggest(index, n, strategy, uncertainty), dtype=np.int64)
    # the M x M algebra on one BLAS thread (the passes over the cloud have their own)
    with single_threaded_blas():
        return _suggest(eigenpairs, index, n, strategy, kind, fit.latent_posterior(),
                        uncertainty)


def _suggest(eigenpairs, index, n, strategy, kind, latent, uncertainty):
    if strategy == "variance_reduction":
        if kind == "classifier":
            grams = weighted_grams(eigenpairs, latent, np.asarray(uncertainty))
        else:
            G = eigenvector_gram(eigenpairs)
            grams = None if G is None else G[None, :latent.n_active, :latent.n_active]
        return greedy_variance_reduction(eigenpairs, latent, index, n, grams)
    values = np.asarray(uncertainty, dtype=np.float64)
    if kind == "classifier":
        base = uncertainty_scores(values[index], strategy)
    else:
        base = values[index]
    base = np.where(np.isfinite(base), base, 0.0)
    return greedy_uncertainty(eigenpairs, latent, index, base, n)


def _generator(seed, n_labelled: int) -> np.random.Generator:
    """The generator of ``"random"``: an integer seed is combined with the number of
    labelled rows (new draws each round of a loop with one seed)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        seed = int(seed.randint(0, 2**31 - 1))
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), int(n_labelled)])
