r"""Diffusion maps (Gilbert and O'Neill, Algorithm 3; Coifman and Lafon).

``y_i = (mu_1^t phi_1(i), ..., mu_k^t phi_k(i))``: the top ``k`` non-trivial eigenvectors
of the normalised affinity, scaled by their eigenvalues to the power ``t``, the top
eigenvector dropped. Then ``|y_i - y_j|`` approximates the diffusion distance
``|a^{(t)}_i - a^{(t)}_j|`` (eq. 26), exactly so when ``k`` covers the spectrum.
"""

from __future__ import annotations

import numpy as np

from sklearn.base import _fit_context
from sklearn.utils._param_validation import StrOptions

from ._base import _HeatEmbedding

__all__ = ["DiffusionMap"]

COORDINATES = ("symmetric", "markov")


class DiffusionMap(_HeatEmbedding):
    r"""Diffusion-map embedding, dense (Algorithm 3) or from FLGP eigenpairs (linear in n).

    Parameters
    ----------
    n_components : int, default=2
        ``k``, the embedding dimension.
    method : {"auto", "dense", "flgp"}, default="auto"
        "dense": Gilbert and O'Neill's Algorithms 1-3 on the full ``n x n`` affinity
        (``O(n^2)`` memory, ``O(n^3)`` time; for n up to ~10,000). "flgp": the FLGP
        engine's eigenpairs (SE cross kernel, k-means induced points; ``mu = 1 - λ``),
        linear in ``n``. "auto": "dense" for at most 700 points (where the exact
        algorithm takes at most 0.1 s for this transformer and for :class:`GPEmbedding`;
        ``benchmarks/embedding.py``, docs/embedding.md) or when a dense-only option
        (``normalization="symmetric"``, ``alpha``) is set, "flgp" otherwise. The method used
        is ``method_``.
    epsilon : float, optional
        ``epsilon`` in ``exp(-|x - y|^2 / epsilon)``. Default: the mean squared distance of
        each point to its 10 nearest neighbours (dense;
        :func:`flgp.graph.affinity.default_epsilon`), or the FLGP rule (mean squared
        distance to the ``n_neighbors`` nearest induced points).
    t : float or "auto", default="auto"
        Diffusion steps: the power of the operator, ``A^t`` (the models' ``diffusion_time`` is
        the heat kernel's continuous time instead). "auto" picks the smallest integer
        ``t`` at which the left-out components carry at most 10% of the diffusion
        variance (:func:`flgp.embedding.auto_diffusion_steps`); the same rule as
        :class:`GPEmbedding`, whose sketch of ``A^t`` approximates the same distance.
    normalization : {"symmetric", "bistochastic"}, optional
        Dense: Algorithm 1 (default) or Algorithm 2. FLGP's operator is bistochastic by
        construction (default and only choice for ``method="flgp"``).
    alpha : float, optional
        Dense only: density normalisation ``K / (q_i q_j)^alpha`` before the final step;
        default 1 for "symmetric" (Algorithm 1), 0 for "bistochastic" (Algorithm 2).
    coordinates : {"symmetric", "markov"}, default="symmetric"
        "symmetric": eigenvectors ``phi`` of the symmetric operator (Algorithm 3).
        "markov": right eigenvectors of the Markov matrix, ``psi = phi / sqrt(pi)``
        (García-Heredia et al., eq. 19), whose distances are the diffusion distance of
        their eq. (11). The two coincide up to ``sqrt(n)`` for a bistochastic operator.
    tol, max_iter : float, int
        Algorithm 2's tolerance ``delta`` and iteration cap (an error if not converged).
    n_induced, n_neighbors, n_eigenpairs : int, optional
        FLGP: ``M`` eigenpairs computed (default ``max(3 (k + 1), 30)``, at most
        ``s - 1``), ``s`` induced points (default ``10 M``, at most ``n // 4`` and 1000, at
        least 10) and ``r`` (3). Dense: ``n_eigenpairs`` computed (default ``k + 1``, or
        up to ``max(3 (k + 1), 30)`` for ``t="auto"``).
    disconnected : {"warn", "raise"}, default="warn"
        What to do when the graph falls apart into pieces (points whose kernel weights to
        the rest are all below ``1e-9 / n``; :func:`flgp.graph.kernel_pieces`; FLGP: the
        engine's components). "warn": a ``UserWarning`` with the number and sizes of the
        pieces, and the embedding of the block-diagonal operator — each piece on its own
        eigenpairs, the first ``n_pieces - 1`` coordinates (eigenvalue 1) telling the
        pieces apart (constant on each piece in the Markov coordinates; docs/embedding.md).
        A new point joins the piece of its nearest fitted point (FLGP: of the induced point
        it moves to with the largest probability). "raise": a ``ValueError``.
    backend : {"auto", "torch", "keops"}, default="auto"
        :mod:`flgp.backends`. FLGP: who does the distance work. Dense: "keops" never
        stores the ``n x n`` affinity (KeOps kernel products; Lanczos for the
        eigenpairs; memory ``O(n k)``, for GPUs); "torch" stores it.
    random_state : int, Generator or None
        FLGP's k-means seeding.
    induced_points : array-like of shape (n_induced, n_features), optional
        FLGP: use these induced points instead of k-means centres (the cluster-size
        normalisation still counts each one's nearest points).

    Attributes
    ----------
    embedding_ : ndarray (n_samples, n_components)
    eigenvalues_ : ndarray
        ``mu_0 = 1 >= mu_1 >= ...`` of the operator (all computed ones).
    t_ : float
        The diffusion steps used.
    epsilon_ : float
        The kernel scale used.
    n_iter_ : int
        Iterations of Algorithm 2 (1 for Algorithm 1 and FLGP).
    method_ : str
        "dense" or "flgp".
    n_pieces_ : int
        Connected pieces of the graph (1 when connected).
    piece_labels_ : ndarray (n_samples,)
        Piece of each fitted point (numbered in order of their first point).

    Notes
    -----
    ``transform`` embeds new points through the Nyström extension
    ``phi_l(x) = a(x) . phi_l / mu_l`` (dense) or the FLGP out-of-sample map; a fitted point
    gets back its own row of ``embedding_``.

    With ``method="flgp"`` the coordinates are computed in blocks of rows from the engine's
    eigenvector map (no ``n x n_eigenpairs`` array). ``X`` may be a dask or zarr array
    (``pip install 'flgp[dask]'``; ``method`` "auto" or "flgp"): ``fit_transform``,
    ``embedding_``, ``piece_labels_`` and ``transform`` of a dask array are then lazy dask
    arrays, computed by the Dask engine on the active scheduler.

    Examples
    --------
    >>> from flgp.datasets import make_swiss_roll
    >>> from flgp.embedding import DiffusionMap
    >>> X, t = make_swiss_roll(500, random_state=0)
    >>> dm = DiffusionMap(n_components=2).fit(X)     # dense: at most 700 points
    >>> dm.method_, dm.embedding_.shape
    ('dense', (500, 2))
    >>> print(dm.eigenvalues_[:3].round(3))
    [1.    0.992 0.986]
    >>> dm.transform(X[:3] + 0.01).shape             # new points: Nyström extension
    (3, 2)
    """

    def __init__(self, n_components=2, *, method="auto", epsilon=None, t="auto",
                 normalization=None, alpha=None, coordinates="symmetric", tol=1e-8,
                 max_iter=1000, n_induced=None, n_neighbors=3, n_eigenpairs=None,
                 disconnected="warn", backend="auto", random_state=None,
                 induced_points=None):
        self.n_components = n_components
        self.method = method
        self.epsilon = epsilon
        self.t = t
        self.normalization = normalization
        self.alpha = alpha
        self.coordinates = coordinates
        self.tol = tol
        self.max_iter = max_iter
        self.n_induced = n_induced
        self.n_neighbors = n_neighbors
        self.n_eigenpairs = n_eigenpairs
        self.disconnected = disconnected
        self.backend = backend
        self.random_state = random_state
        self.induced_points = induced_points

    def _coordinate_map(self):
        spec = self._eigenbasis
        aff = spec.affinity
        uniform = aff is None or aff.normalization == "bistochastic"
        return _DiffusionCoordinates(
            spec.mu[1:self.n_components + 1] ** self.t_, self.coordinates == "markov",
            1.0 / spec.n_samples if uniform else None,
            None if uniform else self._log_total_degree)

    _parameter_constraints: dict = {
        **_HeatEmbedding._parameter_constraints,
        "coordinates": [StrOptions(set(COORDINATES))],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Fit on ``X`` and return its diffusion coordinates ``(n_samples,
        n_components)`` (a lazy dask array for a dask ``X``)."""
        X, k, spec = self._fit_eigenbasis(X)
        if spec.affinity is not None:
            self._log_total_degree = float(np.log(np.sum(spec.affinity.degrees)))
        coords = self._coordinate_map()
        if spec.blockwise:
            self.embedding_ = spec.map_phi(coords, n_columns=k, parallel=True)
        else:
            log_degree = (np.log(spec.affinity.degrees) if spec.affinity is not None
                          else None)
            self.embedding_ = coords(spec.phi, log_degree)
        return self.embedding_

    def transform(self, X):
        X = self._check_transform_X(X)
        return self._eigenbasis.map_new(X, self._coordinate_map(), self.n_components)


class _DiffusionCoordinates:
    """``phi[:, 1:k+1] mu^t`` (symmetric) or divided by ``sqrt(pi)`` (Markov), with ``pi``
    uniform (``1 / n``; bistochastic and FLGP) or ``exp(log_degree - log_total)``. Small
    and picklable: the Dask engine runs it inside its tasks."""

    def __init__(self, weights, markov: bool, uniform_pi, log_total_degree):
        self.weights = weights
        self.markov = markov
        self.uniform_pi = uniform_pi
        self.log_total_degree = log_total_degree

    def __call__(self, phi, log_degree):
        k = self.weights.shape[0]
        Y = phi[:, 1:k + 1] * self.weights[None, :]
        if self.markov:
            if self.uniform_pi is not None:
                pi = np.full(phi.shape[0], self.uniform_pi)
            else:
                pi = np.exp(log_degree - self.log_total_degree)
            Y = Y / np.sqrt(pi)[:, None]
        return Y
