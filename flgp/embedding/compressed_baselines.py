r"""The baselines of *Compressed Diffusion* (Gigante et al., papers/003, Sec. VI-A) and the
error measure of Fig. VI.1.

* :func:`exact_diffusion_map` - the pointwise diffusion map of the sparse Gaussian graph
  that :class:`~flgp.embedding.compressed.CompressedDiffusionMap` compresses. By Theorem 1
  (part 3) the ID-MGC operator is ``P^2``, so its exact map at time ``t`` is
  ``mu^{2t} phi`` with ``(mu, phi)`` the eigenpairs of ``P``.
* :func:`nystrom_diffusion_map` - landmark diffusion maps with the volume-weighted Nyström
  extension (Long & Ferguson, L-dMaps, ref. [5]), random or k-means landmarks.
* :func:`centroid_interpolation_diffusion_map` - diffusion map of k-means centroids,
  linearly interpolated to the points.
* :func:`embedding_sse` - SSE over diffusion components up to sign and order (Sec. VI-A).

All return ``(embedding, info)`` with ``embedding`` of shape ``(n_samples, n_components)``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh
from scipy.spatial import Delaunay, cKDTree

from .._validation import check_int, check_option, check_points, check_random_state
from ..graph.induced_points import kmeans_centres
from ..graph.knn import gaussian_knn_graph
from .compressed import _affinity
from .metrics import align_components, embedding_sse  # re-exported here for convenience

__all__ = ["exact_diffusion_map", "nystrom_diffusion_map",
           "centroid_interpolation_diffusion_map", "embedding_sse", "align_components"]


def _sign_fix(phi: np.ndarray) -> np.ndarray:
    big = np.abs(phi).argmax(axis=0)
    signs = np.sign(phi[big, np.arange(phi.shape[1])])
    signs[signs == 0] = 1.0
    return phi * signs


def exact_diffusion_map(X, n_components: int, t: int = 1, *, n_neighbors: int = 15,
                        bandwidth: float | None = None, solver: str = "shift_invert",
                        tol: float = 1e-8):
    r"""Exact diffusion map of the ID-MGC kernel on the sparse Gaussian k-NN graph.

    Top ``n_components + 1`` eigenpairs of ``A = Q^{-1/2} G Q^{-1/2}`` by Lanczos (``eigsh``,
    deterministic start). ``solver="shift_invert"`` (default) works on
    ``(A - sigma I)^{-1}``, ``sigma = 1 + 1e-3`` (one sparse LU), much faster than plain
    Lanczos (``"lanczos"``) for eigenvalues clustered just below 1; both give the same
    eigenpairs. ``phi = Q^{-1/2} psi`` has unit ``pi``-weighted norm (``pi = q / sum q``);
    coordinates ``mu_l^{2t} phi_l``, ``l = 1..n_components`` (Coifman & Lafon's map of ``P^2``).

    Returns
    -------
    embedding : ndarray (n, n_components)
    info : dict with ``eigenvalues`` (of ``P``, descending, ``n_components + 1``),
        ``bandwidth``.
    """
    X = check_points(X, min_samples=3)
    n = X.shape[0]
    k = check_int(n_components, "n_components", low=1, high=n - 2, high_name="n_samples - 2")
    t = check_int(t, "t", low=1)
    nn = min(check_int(n_neighbors, "n_neighbors", low=1), n - 1)
    G, eps, _, _ = gaussian_knn_graph(X, nn, bandwidth)
    q = np.asarray(G.sum(axis=1)).ravel()
    A = _affinity(G, q)
    check_option(solver, "solver", ("shift_invert", "lanczos"))
    v0 = np.sqrt(q / q.sum())  # the top eigenvector itself: a deterministic start
    if solver == "shift_invert":
        vals, vecs = eigsh(A.tocsc(), k=k + 1, sigma=1.0 + 1e-3, which="LM", v0=v0, tol=tol)
    else:
        vals, vecs = eigsh(A, k=k + 1, which="LA", v0=v0, tol=tol,
                           ncv=min(n, max(2 * (k + 1) + 1, 64)))
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    phi = vecs / np.sqrt(q / q.sum())[:, None]
    phi = _sign_fix(phi)
    emb = phi[:, 1:] * (np.clip(vals[1:], 0, None) ** (2 * t))
    return emb, {"eigenvalues": vals, "bandwidth": eps}


def _kmeans(X, n_clusters, random_state, how="kmeans"):
    """Landmarks ``U`` and their volumes (Voronoi cell sizes), empty cells dropped:
    k-means centres (``how="kmeans"``) or rows of ``X`` drawn uniformly (``"random"``)."""
    if how == "kmeans":
        U = kmeans_centres(X, n_clusters, random_state=random_state).points
    else:
        rng = check_random_state(random_state)
        U = X[np.sort(rng.choice(X.shape[0], size=n_clusters, replace=False))]
    labels = cKDTree(U).query(X, k=1)[1]
    sizes = np.bincount(labels, minlength=n_clusters).astype(np.float64)
    keep = sizes > 0
    if not keep.all():
        U, sizes = U[keep], sizes[keep]
    return U, sizes


def nystrom_diffusion_map(X, n_components: int, n_landmarks: int, t: int = 1, *,
                          n_neighbors: int = 15, landmarks: str = "kmeans",
                          random_state=None):
    r"""Landmark diffusion map with the volume-weighted Nyström extension (L-dMaps).

    1. Landmarks ``l_j`` with volumes ``w_j`` (points whose nearest landmark is ``l_j``):
       k-means centres (``landmarks="kmeans"``, default) or data points drawn uniformly
       (``"random"``, the classical choice). The paper does not say which it used; see
       docs/compressed_diffusion.md.
    2. Gaussian k-NN graph on the landmarks (bandwidth rule applied to the landmarks);
       transition ``P_L = D_L^{-1} G_L W``, eigenpairs from the symmetric generalised problem
       ``W G_L W phi = mu W D_L phi``.
    3. Nyström: ``phi(x) = mu^{-1} sum_j p_L(x, l_j) phi(l_j)``, ``p_L(x, l_j) = g(x, l_j) w_j
       / sum_i g(x, l_i) w_i`` over the nearest landmarks.

    Coordinates ``mu^{2t} phi`` (time ``2t`` of ``P_L``, like the MGC operator).
    """
    X = check_points(X, min_samples=3)
    rng = check_random_state(random_state)
    N = check_int(n_landmarks, "n_landmarks", low=3, high=X.shape[0], high_name="n_samples")
    k = check_int(n_components, "n_components", low=1, high=N - 2,
                  high_name="n_landmarks - 2")
    check_option(landmarks, "landmarks", ("kmeans", "random"))
    U, w = _kmeans(X, N, rng, landmarks)
    N = U.shape[0]
    kl = min(n_neighbors, N - 1)
    G_L, eps_L, nn_L, _ = gaussian_knn_graph(U, kl)
    GL = G_L.toarray()
    d = GL @ w
    vals, phi = scipy.linalg.eigh(w[:, None] * GL * w[None, :], np.diag(w * d),
                                  subset_by_index=[N - k - 1, N - 1])
    vals, phi = vals[::-1], phi[:, ::-1]
    phi = phi / np.sqrt(np.sum(w * d * phi[:, 0] ** 2))  # pi-normalisation, phi_0 = +-1
    dist, ind = nn_L.kneighbors(X, n_neighbors=kl + 1)
    W = np.exp(-(dist ** 2 - dist[:, :1] ** 2) / eps_L) * w[ind]
    W /= W.sum(axis=1, keepdims=True)
    rows = np.repeat(np.arange(X.shape[0]), kl + 1)
    Pxl = sp.csr_matrix((W.ravel(), (rows, ind.ravel())), shape=(X.shape[0], N))
    ext = np.asarray(Pxl @ phi[:, 1:]) / vals[1:]
    ext = _sign_fix(ext)
    return ext * np.clip(vals[1:], 0, None) ** (2 * t), {"eigenvalues": vals,
                                                          "landmarks": U, "volumes": w,
                                                          "bandwidth": eps_L}


def centroid_interpolation_diffusion_map(X, n_components: int, n_centroids: int, t: int = 1,
                                         *, n_neighbors: int = 15, random_state=None):
    r"""Diffusion map of k-means centroids, linearly interpolated to the points.

    The centroids are embedded as a data set of their own (:func:`exact_diffusion_map`);
    each point gets the barycentric interpolant over the centroids' Delaunay triangulation
    (nearest centroid outside the hull). Above 6 features: inverse-distance weights over the
    ``p + 1`` nearest centroids.
    """
    X = check_points(X, min_samples=3)
    rng = check_random_state(random_state)
    N = check_int(n_centroids, "n_centroids", low=3, high=X.shape[0], high_name="n_samples")
    k = check_int(n_components, "n_components", low=1, high=N - 2,
                  high_name="n_centroids - 2")
    U, _ = _kmeans(X, N, rng)
    emb_U, info = exact_diffusion_map(U, k, t, n_neighbors=min(n_neighbors, U.shape[0] - 1))
    p = X.shape[1]
    if p <= 6 and U.shape[0] > p + 1:
        tri = Delaunay(U)
        simplex = tri.find_simplex(X)
        out = np.empty((X.shape[0], k))
        inside = simplex >= 0
        T = tri.transform[simplex[inside]]
        b = np.einsum("ijk,ik->ij", T[:, :p, :], X[inside] - T[:, p, :])
        bary = np.c_[b, 1 - b.sum(axis=1)]
        out[inside] = np.einsum("ij,ijk->ik", bary, emb_U[tri.simplices[simplex[inside]]])
        if (~inside).any():
            out[~inside] = emb_U[cKDTree(U).query(X[~inside], k=1)[1]]
    else:
        dist, ind = cKDTree(U).query(X, k=min(p + 1, U.shape[0]))
        wts = 1.0 / np.maximum(dist, 1e-12)
        wts /= wts.sum(axis=1, keepdims=True)
        out = np.einsum("ij,ijk->ik", wts, emb_U[ind])
    return out, {"eigenvalues": info["eigenvalues"], "centroids": U}
