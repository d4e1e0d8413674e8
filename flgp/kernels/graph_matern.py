r"""GPyTorch adapter: the full-resolution graph Matérn prior of a
:class:`~flgp.graph.PointGraph` as a kernel whose covariances are sparse-solve operators
(user guide: docs/models.md, "The graph Matérn prior in your own GPyTorch model").

The prior is ``f ~ N(0, A Q⁻¹)``, ``Q_ν(κ) = K (C⁻¹K)^{ν-1}``, ``K = κ²C + G``
(:mod:`flgp.precision.matern`). A kernel matrix is a :class:`GraphMaternCovariance`
``a P_X Q⁻¹ P_Yᵀ`` (``P`` selects nodes); its products are ``ν`` CHOLMOD solves with ``K``.

**GPyTorch hooks** (gpytorch 1.15, linear_operator 0.6). ``GaussianLikelihood``'s added
noise turns the covariance into a :class:`GraphMaternNoisyCovariance` ``S = a P Q⁻¹ Pᵀ + D``,
whose ``inv_quad_logdet``, ``solve`` and ``logdet`` use ``Q̃ = Q + a Pᵀ D⁻¹ P`` (Woodbury
and the determinant lemma):

.. math::

    \log|S| = \sum_i \log d_i + \log|\tilde Q| - \log|Q|, \qquad
    r^\top S^{-1} r = r^\top D^{-1} r - a\, b^\top \tilde Q^{-1} b,\quad b = P^\top D^{-1} r.

``ScaleKernel``'s outputscale is folded into ``a``. :class:`GraphMaternPredictionStrategy`
gives ``ExactGP`` the posterior mean ``a P_* Q̃⁻¹ Pᵀ D⁻¹ (y - m)`` and covariance
``a P_* Q̃⁻¹ P_*ᵀ`` (an operator).

**Gradients** (``torch.autograd.Function``\ s). With ``u = Q̃⁻¹ b``, ``α = S⁻¹ r`` and
``Q' = ∂Q/∂κ² = ν C (C⁻¹K)^{ν-1}``: ``∂(rᵀS⁻¹r)/∂(a, κ², d_i) = (-uᵀQu, a uᵀQ'u, -α_i²)``;
``∂log|S|/∂d_i = 1/d_i - a (Q̃⁻¹)_{o_i o_i}/d_i²``, ``∂/∂a = Σ_i (Q̃⁻¹)_{o_i o_i}/d_i``,
``∂/∂κ² = tr(Q̃⁻¹Q') - tr(Q⁻¹Q') = -a Σ_u w_u (Q⁻¹e_u)ᵀ Q' (Q̃⁻¹e_u)``: exact
(unit-vector solves) while (observed nodes) x (nodes) is at most ``EXACT_TRACE_WORK``;
beyond, ``tr(Q⁻¹Q') = ν d log|K| / dκ²`` by finite difference (``FD_STEP``), and
``diag(Q̃⁻¹)``, ``tr(Q̃⁻¹Q')`` by Rao-Blackwellised Monte Carlo over ``n_probes`` draws
(Sidén et al. 2018; standard errors in :attr:`GraphMaternKernel.trace_diagnostics`), seeded
by ``random_state`` and the hyperparameters' values.

Non-Gaussian likelihoods (``ApproximateGP``, inducing points at nodes,
``learn_inducing_locations=False``) get exact inducing and cross blocks and batch variances.
CHOLMOD runs on the CPU in float64; results return on the inputs' device and dtype
(``solver``: CG on a GPU).
"""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from gpytorch import settings
from gpytorch.constraints import Positive
from gpytorch.kernels import Kernel
from gpytorch.models.exact_prediction_strategies import DefaultPredictionStrategy
from linear_operator.operators import DiagLinearOperator, LinearOperator, ZeroLinearOperator

from ..precision.cholesky import PatternCholesky
from ..precision.gaussian import (SOLVE_BLOCK, diagonal_of_inverse, entries_of_inverse,
                                  rao_blackwell_variances, rbmc_variances)
from ..precision.matern import MaternFactors, MaternFamily, apply_matern_inverse, check_order
from ..precision.prior import EXACT_VARIANCE_ROWS
from .spectral_kernel import output_dtype

__all__ = ["CGNotConvergedError", "GraphMaternKernel", "GraphMaternCovariance",
           "GraphMaternNoisyCovariance", "GraphMaternPosteriorCovariance",
           "GraphMaternPredictionStrategy", "EXACT_TRACE_WORK", "TRACE_ESTIMATORS"]

# the gradient's traces are exact while (distinct observed nodes) x (nodes) <= this
EXACT_TRACE_WORK = 2_000_000
TRACE_ESTIMATORS = ("auto", "exact", "stochastic")
INPUT_KINDS = ("coordinates", "index")
NORMALIZATIONS = ("fixed", "variance", "none")
# relative step of the finite difference of log|K| in κ²
FD_STEP = 1e-6
SOLVERS = ("auto", "cholesky", "cg")
# solver="cg": each column's relative residual target, and the iteration limit (_Engine._cg)
CG_RTOL = 1e-12
CG_MAX_ITER_PER_NODE = 10
CG_MIN_ITER = 1000
# most entries of prior columns a diagonal's forward pass keeps for its backward (256 MB)
KEPT_COLUMN_ENTRIES = 1 << 25


# -- the numerical core: numpy and CHOLMOD, no torch ---------------------------------------

class _Observations:
    """Nodes ``rows`` (repeats allowed) observed with noise variances ``d``:
    ``W = PᵀD⁻¹P = Σ_u w_u e_u e_uᵀ`` and ``b = PᵀD⁻¹r``."""

    def __init__(self, rows: np.ndarray, d: np.ndarray, n: int):
        self.rows = np.asarray(rows, dtype=np.int64)
        self.d = np.asarray(d, dtype=np.float64)
        self.n = n
        self.nodes, self.inverse = np.unique(self.rows, return_inverse=True)
        self.w = np.bincount(self.inverse, weights=1.0 / self.d, minlength=self.nodes.size)
        self.w2 = np.bincount(self.inverse, weights=self.d ** -2.0, minlength=self.nodes.size)
        h = hashlib.blake2b(self.rows.tobytes(), digest_size=16)
        h.update(self.d.tobytes())
        self.digest = h.hexdigest()

    def gather(self, R: np.ndarray) -> np.ndarray:
        """``Pᵀ D⁻¹ R``: ``(m, k)`` to ``(n, k)``."""
        B = np.zeros((self.n, R.shape[1]))
        np.add.at(B, self.rows, R / self.d[:, None])
        return B


def _check_hyperparameters(kappa2: float, scale: float, d=None) -> None:
    if not (math.isfinite(kappa2) and kappa2 > 0):
        raise ValueError(f"GraphMaternKernel: kappa2 must be finite and > 0; got {kappa2!r} "
                         f"(in the graph's own units). A non-finite value during training "
                         f"means the optimiser diverged: lower its learning rate.")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"GraphMaternKernel: the amplitude (outputscale / normalisation) "
                         f"must be finite and > 0; got {scale!r}.")
    if d is not None and not (np.all(np.isfinite(d)) and np.all(d > 0)):
        bad = d[~(np.isfinite(d) & (d > 0))][0]
        raise ValueError(f"GraphMaternKernel: the noise variances must be finite and > 0; "
                         f"got {bad!r} (a likelihood noise that diverged or is 0).")


class CGNotConvergedError(RuntimeError):
    """Conjugate gradients (``solver="cg"``) did not reach ``CG_RTOL``."""


def _pcg(A: torch.Tensor, inv_diag: torch.Tensor, B: torch.Tensor,
         rtol: float, maxiter: int) -> tuple[torch.Tensor, int]:
    """``(A⁻¹B, iterations)`` by Jacobi-preconditioned CG on all columns at once (``A``
    sparse SPD, ``B`` dense, one device); :class:`CGNotConvergedError` after ``maxiter``."""
    X = torch.zeros_like(B)
    R = B.clone()
    Z = inv_diag[:, None] * R
    P = Z.clone()
    rz = (R * Z).sum(0)
    target = rtol * torch.linalg.vector_norm(B, dim=0)
    for iteration in range(maxiter):
        if bool((torch.linalg.vector_norm(R, dim=0) <= target).all()):
            return X, iteration
        AP = A @ P
        pAp = (P * AP).sum(0)
        alpha = torch.where(pAp > 0, rz / torch.where(pAp > 0, pAp, 1.0), 0.0)
        X += alpha * P
        R -= alpha * AP
        Z = inv_diag[:, None] * R
        rz_new = (R * Z).sum(0)
        beta = torch.where(rz > 0, rz_new / torch.where(rz > 0, rz, 1.0), 0.0)
        P = Z + beta * P
        rz = rz_new
    worst = float((torch.linalg.vector_norm(R, dim=0)
                   / torch.clamp(torch.linalg.vector_norm(B, dim=0), min=1e-300)).max())
    raise CGNotConvergedError(
        f"conjugate gradients reached a relative residual of {worst:.2g} in {maxiter} "
        f"iterations, not {rtol:g}: the matrix is too ill-conditioned for them at these "
        f"hyperparameters. Use GraphMaternKernel(..., solver='cholesky') (the factor, on "
        f"the CPU).")


class _Engine:
    """The graph in its own units, its :class:`~flgp.precision.matern.MaternFactors`, node
    look-up, CG solves, ``Q'`` and the traces; a cache shared by a kernel's copies."""

    def __init__(self, graph, nu: int, n_reference: int, trace_estimator: str,
                 n_probes: int, random_state: int, n_variance_samples: int = 64):
        self.length, self.mass_unit = graph.own_units()
        self.graph = graph.in_units(self.length, self.mass_unit)
        self.points = np.asarray(graph.points, dtype=np.float64)
        self.tolerance = float(graph.ROW_TOLERANCE * graph.spacing)
        self.nu, self.n = nu, graph.n_nodes
        self.factors = MaternFactors(self.graph, nu)
        self.mass = self.factors.mass
        n_reference = int(min(n_reference, self.n))
        self.reference = np.unique(((np.arange(n_reference) + 0.5) * self.n
                                    / n_reference).astype(np.int64))
        self.trace_estimator, self.n_probes = trace_estimator, int(n_probes)
        self.random_state = int(random_state)
        self.n_variance_samples = int(n_variance_samples)
        self.last_trace = None
        self._reset()

    def _reset(self):
        self._tree, self._reference, self._matrices, self._fixed = None, None, {}, None
        self._torch = {}

    # set by the kernel (configure) before use
    solver = "cholesky"
    device = torch.device("cpu")
    last_cg_iterations = None

    def configure(self, solver: str, device) -> None:
        """Solve by the factor (``"cholesky"``) or by CG on ``device`` (``"cg"``)."""
        self.solver, self.device = solver, torch.device(device)

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in ("_tree", "_reference", "_matrices", "_fixed", "_torch"):
            state.pop(k)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    # -- node look-up ----------------------------------------------------------------
    def nodes_of(self, x: np.ndarray, kind: str) -> np.ndarray:
        """Node indices of the rows of ``x`` (``(N, p)``), or a ``ValueError``."""
        if not np.all(np.isfinite(x)):
            raise ValueError("GraphMaternKernel: inputs hold NaN or inf; they must be nodes "
                             "of the graph.")
        if kind == "index":
            if x.shape[1] != 1:
                raise ValueError(f"GraphMaternKernel(inputs='index') takes node indices as a "
                                 f"float tensor of shape (..., N, 1); got {x.shape[1]} "
                                 f"columns.")
            idx = x[:, 0]
            bad = (idx != np.round(idx)) | (idx < 0) | (idx >= self.n)
            if np.any(bad):
                raise ValueError(f"GraphMaternKernel(inputs='index'): {idx[bad][0]!r} is not "
                                 f"a node index (integers 0 .. {self.n - 1}); nodes are the "
                                 f"graph's only inputs.")
            return idx.astype(np.int64)
        p = self.points.shape[1]
        if x.shape[1] != p:
            raise ValueError(f"GraphMaternKernel: inputs have {x.shape[1]} coordinates but "
                             f"the graph's nodes have {p}; pass node coordinates (rows of "
                             f"graph.points) or build the kernel with inputs='index'.")
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self.points)
        dist, idx = self._tree.query(x, k=1)
        far = dist > self.tolerance
        if np.any(far):
            i = int(np.flatnonzero(far)[0])
            raise ValueError(
                f"GraphMaternKernel: input row {i} at {np.round(x[i], 6).tolist()} is not a "
                f"node of the graph: the nearest node ({int(idx[i])}) lies {dist[i]:.3g} away "
                f"(tolerance {self.tolerance:.3g}, a thousandth of the graph's spacing). The "
                f"prior lives on the nodes only: add the point to the graph, or pass nodes.")
        return np.asarray(idx, dtype=np.int64)

    # -- factors and solves ------------------------------------------------------------
    def family(self, order: int) -> MaternFamily:
        return self.factors.family(order)

    def dlogdet_K(self, k2: float) -> float:
        """``tr(K⁻¹C) = d log|K| / dκ²`` by a one-sided finite difference (own factor)."""
        h = FD_STEP * k2
        up = self.factors.factor("stiffness_step", 1, k2 + h,
                                 lambda: self.family(1).values(k2 + h)).logdet()
        return (up - self.factors.logdet_stiffness(k2)) / h

    def solve_Q(self, k2: float, B: np.ndarray) -> np.ndarray:
        """``Q⁻¹B = (K⁻¹C)^{ν-1} K⁻¹ B``: ``ν`` solves with ``K``."""
        if self.solver == "cg":
            K, inv_diag = self._on_device("K", k2, lambda: self.family(1).matrix(k2))
            mass = torch.as_tensor(self.mass, device=self.device)
            return apply_matern_inverse(lambda X: self._cg(K, inv_diag, X, to_numpy=False),
                                        mass, self.nu, B).cpu().numpy()
        return self.factors.solve_prior(k2, B)

    def solve_posterior(self, k2: float, c: float, obs: _Observations,
                        B: np.ndarray) -> np.ndarray:
        """``Q̃⁻¹B``, ``Q̃ = Q + c W``."""
        if self.solver == "cg":
            A, inv_diag = self._on_device("Qt", (k2, c, obs.digest),
                                          lambda: self.posterior_matrix(k2, c, obs))
            return self._cg(A, inv_diag, B)
        return self.posterior_factor(k2, c, obs).solve(B)

    def _on_device(self, name: str, key, build):
        """``(A, 1 / diag A)`` as torch CSR float64 on the device (last one per ``name``)."""
        held = self._torch.get(name)
        if held is None or held[0] != key or held[1].device != self.device:
            A = sp.csr_matrix(build())
            A.sort_indices()
            with warnings.catch_warnings():
                # torch's "sparse CSR support is in beta" warning
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
                T = torch.sparse_csr_tensor(
                    torch.as_tensor(A.indptr, dtype=torch.int64),
                    torch.as_tensor(A.indices, dtype=torch.int64),
                    torch.as_tensor(A.data, dtype=torch.float64), size=A.shape,
                    check_invariants=False).to(self.device)   # scipy's sorted CSR
            inv_diag = torch.as_tensor(1.0 / A.diagonal(), device=self.device)
            held = self._torch[name] = (key, T, inv_diag)
        return held[1], held[2]

    def _cg(self, A, inv_diag, B, to_numpy: bool = True):
        """``A⁻¹B`` by :func:`_pcg` on the device."""
        B = torch.as_tensor(B, dtype=torch.float64).to(self.device)
        if B.ndim == 1:
            return self._cg(A, inv_diag, B[:, None], to_numpy)[:, 0]
        maxiter = max(CG_MIN_ITER, CG_MAX_ITER_PER_NODE * self.n)
        X, self.last_cg_iterations = _pcg(A, inv_diag, B, CG_RTOL, maxiter)
        return X.cpu().numpy() if to_numpy else X

    def Q(self, k2: float) -> sp.csr_matrix:
        """``Q_ν(κ)`` (the last one kept)."""
        if self._matrices.get("Q", (None,))[0] != k2:
            self._matrices["Q"] = (k2, self.family(self.nu).matrix(k2).tocsr())
        return self._matrices["Q"][1]

    def dQ(self, k2: float) -> sp.csr_matrix:
        """``Q' = ∂Q/∂κ² = ν Q_{ν-1}(κ)`` (``C`` for ``ν = 1``; the last one kept)."""
        if self._matrices.get("dQ", (None,))[0] != k2:
            if self.nu == 1:
                dQ = sp.diags(self.mass).tocsr()
            else:
                dQ = (self.nu * self.family(self.nu - 1).matrix(k2)).tocsr()
            self._matrices["dQ"] = (k2, dQ)
        return self._matrices["dQ"][1]

    def posterior_factor(self, k2: float, c: float, obs: _Observations) -> PatternCholesky:
        """The factor of ``Q̃ = Q + c W``."""
        return self.factors.posterior_factor(k2, obs.nodes, c * obs.w, (k2, c, obs.digest))

    def posterior_matrix(self, k2: float, c: float, obs: _Observations) -> sp.csr_matrix:
        return self.factors.posterior_precision(k2, obs.nodes, c * obs.w,
                                                (k2, c, obs.digest)).tocsr()

    def seed(self, *values) -> np.random.Generator:
        """A generator seeded by ``random_state`` and ``values`` (hyperparameters, digests)."""
        words = [self.random_state]
        for v in values:
            if isinstance(v, str):
                words += [int(v[i:i + 8], 16) for i in range(0, min(len(v), 16), 8)]
            else:
                words += np.frombuffer(np.float64(v).tobytes(), dtype=np.uint32).tolist()
        return np.random.default_rng(np.random.SeedSequence(words))

    # -- entries, traces, variances ------------------------------------------------------
    def prior_entries(self, k2: float, a: np.ndarray, b: np.ndarray,
                      keep: bool = False):
        """``(Q⁻¹)[a_i, b_i]`` by unit-vector solves; with ``keep``, also ``(cols, Q⁻¹ E_cols)``
        for :meth:`prior_entries_grad` (None beyond ``KEPT_COLUMN_ENTRIES``)."""
        solve = lambda B: self.solve_Q(k2, B)  # noqa: E731
        if not keep:
            return entries_of_inverse(solve, self.n, a, b)
        if self.n * np.unique(b).size > KEPT_COLUMN_ENTRIES:
            return entries_of_inverse(solve, self.n, a, b), None
        return entries_of_inverse(solve, self.n, a, b, keep_columns=True)

    def prior_entries_grad(self, k2: float, a: np.ndarray, b: np.ndarray,
                           g: np.ndarray, columns=None) -> float:
        """``Σ_i g_i ∂(Q⁻¹)[a_i, b_i]/∂κ² = -Σ_i g_i (Q⁻¹e_{a_i})ᵀ Q' (Q⁻¹e_{b_i})``;
        ``columns`` (from :meth:`prior_entries`) spare a diagonal's solves."""
        dQ = self.dQ(k2)
        if columns is not None and np.array_equal(a, b):
            cols, Z = columns
            order = np.argsort(cols)
            weights = np.bincount(order[np.searchsorted(cols, a, sorter=order)], weights=g,
                                  minlength=cols.size)
            return -float(np.sum(weights * np.einsum("ij,ij->j", Z, dQ @ Z)))
        total = 0.0
        for s in range(0, a.size, SOLVE_BLOCK):
            aa, bb, gg = a[s:s + SOLVE_BLOCK], b[s:s + SOLVE_BLOCK], g[s:s + SOLVE_BLOCK]
            cols = np.arange(aa.size)
            Eb = np.zeros((self.n, aa.size))
            Eb[bb, cols] = 1.0
            Zb = self.solve_Q(k2, Eb)
            if np.array_equal(aa, bb):
                Za = Zb
            else:
                Ea = np.zeros((self.n, aa.size))
                Ea[aa, cols] = 1.0
                Za = self.solve_Q(k2, Ea)
            total -= float(np.sum(gg * np.einsum("ij,ij->j", Za, dQ @ Zb)))
        return total

    def fixed_variance(self) -> float:
        """``v̄(κ_h)``, ``κ_h = 1/(10 h)``: the constant of ``normalize="fixed"``."""
        if self._fixed is None:
            k2 = 1.0 / (10.0 * float(self.graph.spacing)) ** 2
            Z = self.reference_columns(k2)
            self._fixed = float(np.mean(Z[self.reference, np.arange(self.reference.size)]))
        return self._fixed

    def reference_columns(self, k2: float) -> np.ndarray:
        """``Q⁻¹ E_ref`` (the reference nodes' columns) for the last ``κ²``."""
        if self._reference is None or self._reference[0] != k2:
            E = np.zeros((self.n, self.reference.size))
            E[self.reference, np.arange(self.reference.size)] = 1.0
            self._reference = (k2, self.solve_Q(k2, E))
        return self._reference[1]

    def traces(self, k2: float, c: float, obs: _Observations, estimator: str):
        """``(diag(Q̃⁻¹)[obs.nodes], tr(Q̃⁻¹Q') - tr(Q⁻¹Q'), diagnostics)`` (module notes)."""
        exact = estimator == "exact" or (estimator == "auto"
                                         and obs.nodes.size * self.n <= EXACT_TRACE_WORK)
        nodes, w = obs.nodes, obs.w
        dQ = self.dQ(k2)
        if exact:
            diag = np.empty(nodes.size)
            cross = np.empty(nodes.size)
            for s in range(0, nodes.size, SOLVE_BLOCK):
                block = nodes[s:s + SOLVE_BLOCK]
                cols = np.arange(block.size)
                E = np.zeros((self.n, block.size))
                E[block, cols] = 1.0
                Zt = self.posterior_factor(k2, c, obs).solve(E)
                Z = self.solve_Q(k2, E)
                diag[s:s + block.size] = Zt[block, cols]
                cross[s:s + block.size] = np.einsum("ij,ij->j", Zt, dQ @ Z)
            delta = -c * float(np.sum(w * cross))
            info = dict(estimator="exact", n_probes=0, delta=delta, delta_se=0.0,
                        weighted_diagonal=float(np.sum(w * diag)), weighted_diagonal_se=0.0,
                        noise_diagonal=float(np.sum(obs.w2 * diag)), noise_diagonal_se=0.0)
            return diag, delta, info
        k = self.n_probes
        rng = self.seed(k2, c, obs.digest)
        X = self.posterior_factor(k2, c, obs).sample(k, rng)
        Qt = self.posterior_matrix(k2, c, obs)
        p = Qt.diagonal()
        M = X - (Qt @ X) / p[:, None]                  # E[x_i | x_-i]
        q = dQ.diagonal()
        off = (dQ - sp.diags(q)).tocsr()
        per_probe = (np.einsum("ij,ij->j", M, q[:, None] * M)
                     + np.einsum("ij,ij->j", M, off @ X))
        t1 = float(np.sum(q / p) + per_probe.mean())
        t2 = self.nu * self.dlogdet_K(k2)
        delta = t1 - t2
        Mo = M[nodes]
        diag = 1.0 / p[nodes] + np.mean(Mo * Mo, axis=1)
        wd = np.einsum("i,ij->j", w, Mo * Mo)
        nd = np.einsum("i,ij->j", obs.w2, Mo * Mo)
        info = dict(estimator="stochastic", n_probes=k, delta=delta,
                    delta_se=float(per_probe.std(ddof=1) / np.sqrt(k)),
                    weighted_diagonal=float(np.sum(w * diag)),
                    weighted_diagonal_se=float(wd.std(ddof=1) / np.sqrt(k)),
                    noise_diagonal=float(np.sum(obs.w2 * diag)),
                    noise_diagonal_se=float(nd.std(ddof=1) / np.sqrt(k)))
        return diag, delta, info

    def posterior_variances(self, k2: float, c: float, obs: _Observations,
                            nodes: np.ndarray) -> np.ndarray:
        """``diag(Q̃⁻¹)`` at distinct ``nodes``: exact up to ``EXACT_VARIANCE_ROWS``, else RBMC."""
        chol = self.posterior_factor(k2, c, obs)
        if nodes.size <= EXACT_VARIANCE_ROWS:
            return diagonal_of_inverse(chol.solve, self.n, nodes)
        return rbmc_variances(self.posterior_matrix(k2, c, obs), chol, self.n_variance_samples,
                              self.seed(k2, c, obs.digest, 1.0))[0][nodes]

    def prior_variances(self, k2: float, nodes: np.ndarray) -> np.ndarray:
        """``diag(Q⁻¹)`` at ``nodes`` by Rao-Blackwellised Monte Carlo."""
        X = self.factors.prior_draws(k2, self.n_variance_samples, self.seed(k2, 2.0))
        return rao_blackwell_variances(self.Q(k2), X)[0][nodes]


# -- torch: autograd functions over the core -----------------------------------------------

def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def _out(a, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64)).to(dtype=like.dtype,
                                                                 device=like.device)


class _PriorEntries(torch.autograd.Function):
    """``(Q⁻¹)[a_i, b_i]`` (exact) with its derivative in ``κ²``."""

    @staticmethod
    def forward(ctx, kappa2, engine, a, b):
        k2 = float(kappa2.detach())
        _check_hyperparameters(k2, 1.0)
        ctx.engine, ctx.a, ctx.b, ctx.k2 = engine, a, b, k2
        # a diagonal's columns are kept for the backward pass: one solve a node, not two
        keep = ctx.needs_input_grad[0] and np.array_equal(a, b)
        values, ctx.columns = (engine.prior_entries(k2, a, b, keep=True) if keep
                               else (engine.prior_entries(k2, a, b), None))
        return _out(values, kappa2)

    @staticmethod
    def backward(ctx, g):
        grad = None
        if ctx.needs_input_grad[0]:
            grad = ctx.engine.prior_entries_grad(ctx.k2, ctx.a, ctx.b, _np(g),
                                                 columns=ctx.columns)
            grad = torch.tensor(grad, dtype=g.dtype, device=g.device)
        return grad, None, None, None


class _ReferenceVariance(torch.autograd.Function):
    """``v̄(κ)``: the mean of ``diag(Q⁻¹)`` over the reference nodes (exact), with its
    derivative in ``κ²``."""

    @staticmethod
    def forward(ctx, kappa2, engine):
        k2 = float(kappa2.detach())
        _check_hyperparameters(k2, 1.0)
        Z = engine.reference_columns(k2)
        ref = engine.reference
        ctx.engine, ctx.k2, ctx.Z = engine, k2, Z
        return _out(np.mean(Z[ref, np.arange(ref.size)]), kappa2)

    @staticmethod
    def backward(ctx, g):
        Z = ctx.Z
        val = -float(np.mean(np.einsum("ij,ij->j", Z, ctx.engine.dQ(ctx.k2) @ Z)))
        return torch.tensor(val * float(g), dtype=g.dtype, device=g.device), None


class _NoGradient(torch.autograd.Function):
    """A value without gradient (Monte Carlo estimate, predictive covariance): backward
    raises instead of returning zeros."""

    @staticmethod
    def forward(ctx, value, what, *params):
        ctx.what = what
        return value.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(f"GraphMaternKernel: {ctx.what} carry no gradient. Differentiate "
                           f"the marginal log likelihood or the predictive mean instead.")


def _no_gradient(value: torch.Tensor, what: str, *params) -> torch.Tensor:
    params = [p for p in params if torch.is_tensor(p) and p.requires_grad]
    if not params or not torch.is_grad_enabled():
        return value
    return _NoGradient.apply(value, what, *params)


class _CovarianceMatmul(torch.autograd.Function):
    """``a P_r Q⁻¹ P_cᵀ V`` for ``V`` of shape ``(N_c, k)``."""

    @staticmethod
    def forward(ctx, kappa2, scale, rhs, engine, rows, cols):
        k2, c = float(kappa2.detach()), float(scale.detach())
        _check_hyperparameters(k2, c)
        ctx.engine, ctx.rows, ctx.cols, ctx.k2, ctx.c = engine, rows, cols, k2, c
        V = _np(rhs)
        ctx.V = V
        B = np.zeros((engine.n, V.shape[1]))
        np.add.at(B, cols, V)
        X = engine.solve_Q(k2, B)
        ctx.X = X if (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]) else None
        return _out(c * X[rows], rhs if rhs.is_floating_point() else kappa2)

    @staticmethod
    def backward(ctx, g):
        engine, k2, c = ctx.engine, ctx.k2, ctx.c
        G = _np(g)
        B = np.zeros((engine.n, G.shape[1]))
        np.add.at(B, ctx.rows, G)
        Y = engine.solve_Q(k2, B)                       # Q⁻¹ P_rᵀ G
        grad_k2 = grad_c = grad_rhs = None
        if ctx.needs_input_grad[2]:
            grad_rhs = _out(c * Y[ctx.cols], g)
        if ctx.needs_input_grad[1]:
            grad_c = torch.tensor(float(np.sum(G * ctx.X[ctx.rows])), dtype=g.dtype,
                                  device=g.device)
        if ctx.needs_input_grad[0]:
            val = -c * float(np.sum(Y * (engine.dQ(k2) @ ctx.X)))
            grad_k2 = torch.tensor(val, dtype=g.dtype, device=g.device)
        return grad_k2, grad_c, grad_rhs, None, None, None


class _InvQuadLogdet(torch.autograd.Function):
    """``(rᵀS⁻¹r per column, log|S|)``, ``S = a P Q⁻¹ Pᵀ + D`` (module notes)."""

    @staticmethod
    def forward(ctx, kappa2, scale, noise, rhs, engine, rows, want_logdet):
        k2, c, d = float(kappa2.detach()), float(scale.detach()), _np(noise)
        _check_hyperparameters(k2, c, d)
        obs = _Observations(rows, d, engine.n)
        ctx.engine, ctx.obs, ctx.k2, ctx.c = engine, obs, k2, c
        chol = engine.posterior_factor(k2, c, obs)
        if rhs is not None:
            R = _np(rhs)
            B = obs.gather(R)
            U = chol.solve(B)                            # u = Q̃⁻¹ b
            alpha = (R - c * U[obs.rows]) / d[:, None]  # S⁻¹ r
            quad = np.einsum("ij,ij->j", R, alpha)
            ctx.U, ctx.alpha = U, alpha
        else:
            quad = np.zeros(0)
        logdet = 0.0
        if want_logdet:
            logdet = float(np.sum(np.log(d))) + chol.logdet() - engine.factors.logdet_prior(k2)
        return _out(quad, kappa2), _out(logdet, kappa2)

    @staticmethod
    def backward(ctx, g_quad, g_logdet):
        engine, obs, k2, c = ctx.engine, ctx.obs, ctx.k2, ctx.c
        d = obs.d
        grad_k2, grad_c = 0.0, 0.0
        grad_d = np.zeros_like(d)
        grad_rhs = None
        if g_quad is not None and g_quad.numel() and hasattr(ctx, "U"):
            gq = _np(g_quad)
            U, alpha = ctx.U, ctx.alpha
            if ctx.needs_input_grad[3]:
                grad_rhs = _out(2.0 * alpha * gq[None, :], g_quad)
            grad_d -= (alpha * alpha) @ gq
            if ctx.needs_input_grad[1]:
                grad_c -= float(np.sum(gq * np.einsum("ij,ij->j", U,
                                                      engine.Q(k2) @ U)))
            if ctx.needs_input_grad[0]:
                grad_k2 += c * float(np.sum(gq * np.einsum("ij,ij->j", U,
                                                           engine.dQ(k2) @ U)))
        gl = float(g_logdet) if g_logdet is not None else 0.0
        if gl != 0.0 and any(ctx.needs_input_grad[:3]):
            diag, delta, info = engine.traces(k2, c, obs, engine.trace_estimator)
            engine.last_trace = dict(info, kappa2=k2, scale=c)
            dn = diag[obs.inverse]
            grad_d += gl * (1.0 / d - c * dn / (d * d))
            grad_c += gl * float(np.sum(obs.w * diag))
            grad_k2 += gl * delta
        like = g_logdet if g_logdet is not None else g_quad
        t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
        return (t(grad_k2) if ctx.needs_input_grad[0] else None,
                t(grad_c) if ctx.needs_input_grad[1] else None,
                _out(grad_d, like) if ctx.needs_input_grad[2] else None,
                grad_rhs, None, None, None)


class _NoisySolve(torch.autograd.Function):
    """``S⁻¹R = D⁻¹(R - a P Q̃⁻¹ Pᵀ D⁻¹ R)`` (module notes)."""

    @staticmethod
    def forward(ctx, kappa2, scale, noise, rhs, engine, rows):
        k2, c, d = float(kappa2.detach()), float(scale.detach()), _np(noise)
        _check_hyperparameters(k2, c, d)
        obs = _Observations(rows, d, engine.n)
        R = _np(rhs)
        U = engine.solve_posterior(k2, c, obs, obs.gather(R))
        X = (R - c * U[obs.rows]) / d[:, None]
        ctx.engine, ctx.obs, ctx.k2, ctx.c, ctx.U, ctx.X = engine, obs, k2, c, U, X
        return _out(X, rhs)

    @staticmethod
    def backward(ctx, g):
        engine, obs, k2, c, U, X = ctx.engine, ctx.obs, ctx.k2, ctx.c, ctx.U, ctx.X
        G = _np(g)
        V = engine.solve_posterior(k2, c, obs, obs.gather(G))
        beta = (G - c * V[obs.rows]) / obs.d[:, None]           # S⁻¹ G
        t = lambda v: torch.tensor(v, dtype=g.dtype, device=g.device)  # noqa: E731
        grad_k2 = t(c * float(np.sum(V * (engine.dQ(k2) @ U)))) if ctx.needs_input_grad[0] \
            else None
        grad_c = t(-float(np.sum(V * (engine.Q(k2) @ U)))) if ctx.needs_input_grad[1] \
            else None
        grad_d = _out(-np.sum(beta * X, axis=1), g) if ctx.needs_input_grad[2] else None
        grad_rhs = _out(beta, g) if ctx.needs_input_grad[3] else None
        return grad_k2, grad_c, grad_d, grad_rhs, None, None


class _PosteriorMean(torch.autograd.Function):
    """The posterior mean ``a P_* Q̃⁻¹ Pᵀ D⁻¹ r`` at the test nodes (module notes)."""

    @staticmethod
    def forward(ctx, kappa2, scale, noise, resid, engine, rows, test_rows):
        k2, c, d = float(kappa2.detach()), float(scale.detach()), _np(noise)
        _check_hyperparameters(k2, c, d)
        obs = _Observations(rows, d, engine.n)
        R = _np(resid)
        U = engine.solve_posterior(k2, c, obs, obs.gather(R))
        ctx.engine, ctx.obs, ctx.k2, ctx.c, ctx.U, ctx.R = engine, obs, k2, c, U, R
        ctx.test_rows = test_rows
        return _out(c * U[test_rows], resid)

    @staticmethod
    def backward(ctx, g):
        engine, obs, k2, c, U, R = ctx.engine, ctx.obs, ctx.k2, ctx.c, ctx.U, ctx.R
        G = _np(g)
        B = np.zeros((engine.n, G.shape[1]))
        np.add.at(B, ctx.test_rows, G)
        V = engine.solve_posterior(k2, c, obs, B)               # Q̃⁻¹ P_*ᵀ G
        t = lambda v: torch.tensor(v, dtype=g.dtype, device=g.device)  # noqa: E731
        grad_k2 = t(-c * float(np.sum(V * (engine.dQ(k2) @ U)))) if ctx.needs_input_grad[0] \
            else None
        grad_c = t(float(np.sum(V * (engine.Q(k2) @ U)))) if ctx.needs_input_grad[1] else None
        grad_d = None
        if ctx.needs_input_grad[2]:
            mu = c * U[obs.rows]
            grad_d = _out(-(c / obs.d ** 2) * np.sum((R - mu) * V[obs.rows], axis=1), g)
        grad_r = _out(c * V[obs.rows] / obs.d[:, None], g) if ctx.needs_input_grad[3] \
            else None
        return grad_k2, grad_c, grad_d, grad_r, None, None, None


# -- linear operators -----------------------------------------------------------------------

def _members(batch: torch.Size):
    """Every index of a batch shape (``[()]`` for no batch)."""
    return list(np.ndindex(*batch)) if len(batch) else [()]


def _rows_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.int64)


def _stack(values: list, batch: torch.Size) -> torch.Tensor:
    out = torch.stack(values)
    return out.reshape(tuple(batch) + tuple(out.shape[1:]))


class _GraphOperator(LinearOperator):
    """Base of the operators: tensor arguments (hyperparameters, integer node indices) with
    a common batch, and the engine as a keyword."""

    def to(self, *args, **kwargs):
        # keep node indices integer (LinearOperator.to casts every tensor)
        new = self.__class__(*[a.to(*args, **kwargs) if a.is_floating_point()
                               else a.to(device=_device(args, kwargs, a))
                               for a in self._args], **self._kwargs)
        return new

    def _expand_batch(self, batch_shape):
        batch_shape = torch.Size(batch_shape)
        return self.__class__(*[a.expand(*batch_shape, *a.shape[len(self.batch_shape):])
                                for a in self._args], **self._kwargs)

    @property
    def engine(self) -> _Engine:
        return self._kwargs["engine"]


def _device(args, kwargs, a):
    dev = kwargs.get("device")
    for x in args:
        if isinstance(x, (torch.device, str)):
            dev = x
        elif torch.is_tensor(x):
            dev = x.device
    return dev if dev is not None else a.device


class GraphMaternCovariance(_GraphOperator):
    """``a P_r Q⁻¹ P_cᵀ``: the graph Matérn covariance (``*batch x N_r x N_c``) between the
    nodes ``rows`` and ``cols``, never formed; products are sparse solves.

    Parameters
    ----------
    kappa2 : Tensor (``*batch``)
        ``κ²`` in the graph's own units.
    scale : Tensor (``*batch``)
        ``a``: the amplitude in the graph's own units (outputscale over the normalisation).
    rows, cols : LongTensor (``*batch x N_r``), (``*batch x N_c``)
        Node indices.
    engine : _Engine
    """

    def __init__(self, kappa2, scale, rows, cols, *, engine):
        super().__init__(kappa2, scale, rows, cols, engine=engine)
        self.kappa2, self.scale, self.rows, self.cols = kappa2, scale, rows, cols

    def _size(self):
        return torch.Size([*self.kappa2.shape, self.rows.shape[-1], self.cols.shape[-1]])

    def _transpose_nonbatch(self):
        return GraphMaternCovariance(self.kappa2, self.scale, self.cols, self.rows,
                                     engine=self.engine)

    def _matmul(self, rhs):
        batch = torch.broadcast_shapes(self.batch_shape, rhs.shape[:-2])
        op = self if batch == self.batch_shape else self._expand_batch(batch)
        rhs = rhs.expand(*batch, *rhs.shape[-2:])
        out = [_CovarianceMatmul.apply(op.kappa2[i], op.scale[i], rhs[i], self.engine,
                                       _rows_np(op.rows[i]), _rows_np(op.cols[i]))
               for i in _members(batch)]
        return _stack(out, batch)

    def _diagonal(self):
        out = []
        for i in _members(self.batch_shape):
            a, b = _rows_np(self.rows[i]), _rows_np(self.cols[i])
            out.append(self.scale[i] * _prior_entries(self.kappa2[i], self.engine, a, b))
        return _stack(out, self.batch_shape)

    def _mul_constant(self, other):
        other = torch.as_tensor(other, dtype=self.scale.dtype, device=self.scale.device)
        scale = self.scale * other
        op = self._expand_batch(scale.shape) if scale.shape != self.batch_shape else self
        return GraphMaternCovariance(op.kappa2, scale, op.rows, op.cols, engine=self.engine)

    def mul(self, other):
        # ScaleKernel's outputscale (*batch x 1 x 1) folds into the amplitude, even with a
        # wider batch (LinearOperator.mul would go dense)
        if torch.is_tensor(other) and other.dim() >= 2 and other.shape[-2:] == (1, 1):
            c = other.reshape(other.shape[:-2])
            batch = torch.broadcast_shapes(self.batch_shape, c.shape)
            op = self if batch == self.batch_shape else self._expand_batch(batch)
            return op._mul_constant(c.expand(batch))
        if isinstance(other, (int, float)) or (torch.is_tensor(other) and other.numel() == 1):
            return self._mul_constant(torch.as_tensor(other).reshape(()))
        return super().mul(other)

    def __add__(self, other):
        if isinstance(other, DiagLinearOperator) and self.rows.shape == self.cols.shape \
                and torch.equal(self.rows, self.cols):
            d = other._diagonal()
            batch = torch.broadcast_shapes(self.batch_shape, d.shape[:-1])
            op = self if batch == self.batch_shape else self._expand_batch(batch)
            return GraphMaternNoisyCovariance(op.kappa2, op.scale,
                                              d.expand(*batch, d.shape[-1]).to(self.scale),
                                              op.rows, engine=self.engine)
        return super().__add__(other)


def _prior_entries(kappa2: torch.Tensor, engine: _Engine, a: np.ndarray,
                   b: np.ndarray) -> torch.Tensor:
    """``(Q⁻¹)[a_i, b_i]``, exact with a gradient; a diagonal of more than
    ``EXACT_VARIANCE_ROWS`` nodes by Rao-Blackwellised Monte Carlo, without one."""
    if np.array_equal(a, b) and np.unique(a).size > EXACT_VARIANCE_ROWS:
        k2 = float(kappa2.detach())
        _check_hyperparameters(k2, 1.0)
        value = _out(engine.prior_variances(k2, a), kappa2)
        return _no_gradient(value, "prior variances of more than EXACT_VARIANCE_ROWS nodes "
                                   "(a Monte Carlo estimate)", kappa2)
    return _PriorEntries.apply(kappa2, engine, a, b)


class GraphMaternNoisyCovariance(_GraphOperator):
    """``S = a P Q⁻¹ Pᵀ + D`` (``*batch x m x m``): the covariance of observed nodes plus
    diagonal noise; exact ``inv_quad_logdet``, ``solve`` and ``logdet`` (module notes)."""

    def __init__(self, kappa2, scale, noise, rows, *, engine):
        super().__init__(kappa2, scale, noise, rows, engine=engine)
        self.kappa2, self.scale, self.noise, self.rows = kappa2, scale, noise, rows

    def _size(self):
        m = self.rows.shape[-1]
        return torch.Size([*self.kappa2.shape, m, m])

    def _transpose_nonbatch(self):
        return self

    def covariance(self) -> GraphMaternCovariance:
        """``a P Q⁻¹ Pᵀ``, the noise-free part."""
        return GraphMaternCovariance(self.kappa2, self.scale, self.rows, self.rows,
                                     engine=self.engine)

    def _matmul(self, rhs):
        return self.covariance()._matmul(rhs) + self.noise.unsqueeze(-1) * rhs

    def _diagonal(self):
        return self.covariance()._diagonal() + self.noise

    def _mul_constant(self, other):
        other = torch.as_tensor(other, dtype=self.scale.dtype, device=self.scale.device)
        scale = self.scale * other
        op = self._expand_batch(scale.shape) if scale.shape != self.batch_shape else self
        return GraphMaternNoisyCovariance(op.kappa2, scale, op.noise * other.unsqueeze(-1),
                                          op.rows, engine=self.engine)

    def add_diagonal(self, diag):
        diag = torch.as_tensor(diag, dtype=self.noise.dtype, device=self.noise.device)
        noise = self.noise + diag
        batch = noise.shape[:-1]
        op = self._expand_batch(batch) if batch != self.batch_shape else self
        return GraphMaternNoisyCovariance(op.kappa2, op.scale, noise, op.rows,
                                          engine=self.engine)

    def __add__(self, other):
        if isinstance(other, DiagLinearOperator):
            return self.add_diagonal(other._diagonal())
        return super().__add__(other)

    def inv_quad_logdet(self, inv_quad_rhs=None, logdet=False, reduce_inv_quad=True):
        if inv_quad_rhs is None and not logdet:
            raise RuntimeError("Either `inv_quad_rhs` or `logdet` must be specified.")
        batch = self.batch_shape
        rhs = None
        if inv_quad_rhs is not None:
            rhs = inv_quad_rhs.unsqueeze(-1) if inv_quad_rhs.dim() == 1 else inv_quad_rhs
            batch = torch.broadcast_shapes(batch, rhs.shape[:-2])
            rhs = rhs.expand(*batch, *rhs.shape[-2:])
        op = self if batch == self.batch_shape else self._expand_batch(batch)
        quads, logdets = [], []
        for i in _members(batch):
            q, ld = _InvQuadLogdet.apply(op.kappa2[i], op.scale[i], op.noise[i],
                                         None if rhs is None else rhs[i], self.engine,
                                         _rows_np(op.rows[i]), bool(logdet))
            quads.append(q)
            logdets.append(ld)
        inv_quad = None
        if rhs is not None:
            inv_quad = _stack(quads, batch)
            if reduce_inv_quad:
                inv_quad = inv_quad.sum(-1)
        else:
            inv_quad = torch.zeros(batch, dtype=self.dtype, device=self.device)
        ld = _stack(logdets, batch) if logdet else torch.zeros(
            (), dtype=self.dtype, device=self.device)
        return inv_quad, ld

    def inv_quad(self, inv_quad_rhs, reduce_inv_quad=True):
        return self.inv_quad_logdet(inv_quad_rhs, False, reduce_inv_quad)[0]

    def logdet(self):
        return self.inv_quad_logdet(None, True)[1]

    def solve(self, right_tensor, left_tensor=None):
        vector = right_tensor.dim() == 1
        rhs = right_tensor.unsqueeze(-1) if vector else right_tensor
        batch = torch.broadcast_shapes(self.batch_shape, rhs.shape[:-2])
        op = self if batch == self.batch_shape else self._expand_batch(batch)
        rhs = rhs.expand(*batch, *rhs.shape[-2:])
        out = _stack([_NoisySolve.apply(op.kappa2[i], op.scale[i], op.noise[i], rhs[i],
                                        self.engine, _rows_np(op.rows[i]))
                      for i in _members(batch)], batch)
        if vector:
            out = out.squeeze(-1)
        return out if left_tensor is None else left_tensor @ out

    def _solve(self, rhs, preconditioner=None, num_tridiag=0):
        if num_tridiag:
            return super()._solve(rhs, preconditioner, num_tridiag)
        return self.solve(rhs)


class GraphMaternPosteriorCovariance(_GraphOperator):
    """``a P_r Q̃⁻¹ P_cᵀ``, ``Q̃ = Q + a PᵀD⁻¹P`` (``train_rows`` observed with ``noise``):
    the posterior covariance of ``f`` between test nodes, without gradient. Its diagonal is
    exact up to ``EXACT_VARIANCE_ROWS`` distinct nodes, Rao-Blackwellised Monte Carlo beyond."""

    def __init__(self, kappa2, scale, noise, train_rows, rows, cols, *, engine):
        super().__init__(kappa2, scale, noise, train_rows, rows, cols, engine=engine)
        self.kappa2, self.scale, self.noise = kappa2, scale, noise
        self.train_rows, self.rows, self.cols = train_rows, rows, cols

    def _size(self):
        return torch.Size([*self.kappa2.shape, self.rows.shape[-1], self.cols.shape[-1]])

    def _transpose_nonbatch(self):
        return GraphMaternPosteriorCovariance(self.kappa2, self.scale, self.noise,
                                              self.train_rows, self.cols, self.rows,
                                              engine=self.engine)

    def _member(self, i):
        k2, c, d = float(self.kappa2[i].detach()), float(self.scale[i].detach()), \
            _np(self.noise[i])
        _check_hyperparameters(k2, c, d)
        return k2, c, _Observations(_rows_np(self.train_rows[i]), d, self.engine.n)

    def _matmul(self, rhs):
        batch = torch.broadcast_shapes(self.batch_shape, rhs.shape[:-2])
        op = self if batch == self.batch_shape else self._expand_batch(batch)
        rhs = rhs.expand(*batch, *rhs.shape[-2:])
        out = []
        for i in _members(batch):
            k2, c, obs = op._member(i)
            V = _np(rhs[i])
            B = np.zeros((self.engine.n, V.shape[1]))
            np.add.at(B, _rows_np(op.cols[i]), V)
            X = self.engine.solve_posterior(k2, c, obs, B)
            out.append(_out(c * X[_rows_np(op.rows[i])], rhs))
        value = _stack(out, batch)
        return _no_gradient(value, "predictive covariances", rhs, self.kappa2, self.scale,
                            self.noise)

    def _diagonal(self):
        out = []
        for i in _members(self.batch_shape):
            k2, c, obs = self._member(i)
            a, b = _rows_np(self.rows[i]), _rows_np(self.cols[i])
            if np.array_equal(a, b):
                nodes, inverse = np.unique(a, return_inverse=True)
                var = self.engine.posterior_variances(k2, c, obs, nodes)[inverse]
            else:
                var = entries_of_inverse(self.engine.posterior_factor(k2, c, obs).solve,
                                         self.engine.n, a, b)
            out.append(_out(c * var, self.scale))
        value = _stack(out, self.batch_shape)
        return _no_gradient(value, "predictive variances", self.kappa2, self.scale, self.noise)

    def _bilinear_derivative(self, left_vecs, right_vecs):
        if any(a.requires_grad for a in self._args if torch.is_tensor(a)):
            raise RuntimeError("GraphMaternKernel: predictive covariances carry no gradient. "
                               "Differentiate the marginal log likelihood or the predictive "
                               "mean instead.")
        return tuple(None for _ in self._args)


# -- the prediction strategy -----------------------------------------------------------------

class GraphMaternPredictionStrategy(DefaultPredictionStrategy):
    """``ExactGP``'s predictions through the sparse posterior precision (module notes); other
    models (sums of kernels, masked observations) fall back to GPyTorch's
    :class:`~gpytorch.models.exact_prediction_strategies.DefaultPredictionStrategy`."""

    def _sparse_parts(self, test_test_covar, test_train_covar):
        if settings.observation_nan_policy.value() != "ignore":
            return None
        noisy = self.lik_train_train_covar
        if hasattr(noisy, "evaluate_kernel"):
            noisy = noisy.evaluate_kernel()
        if not (isinstance(noisy, GraphMaternNoisyCovariance)
                and isinstance(test_train_covar, GraphMaternCovariance)
                and isinstance(test_test_covar, GraphMaternCovariance)
                and test_train_covar.engine is noisy.engine
                and test_test_covar.engine is noisy.engine):
            return None
        try:
            batch = torch.broadcast_shapes(noisy.batch_shape, test_train_covar.batch_shape,
                                           test_test_covar.batch_shape)
        except RuntimeError:
            return None
        a = noisy._expand_batch(batch) if noisy.batch_shape != batch else noisy
        b = test_train_covar._expand_batch(batch) \
            if test_train_covar.batch_shape != batch else test_train_covar
        # allclose, not equal: test inputs of another dtype give other dtypes
        same = all(torch.allclose(u.detach().double(), v.detach().double(), rtol=1e-6, atol=0)
                   for u, v in ((a.kappa2, b.kappa2), (a.scale, b.scale))) \
            and torch.equal(a.rows, b.cols)
        return (a, batch) if same else None

    def exact_prediction(self, test_mean, test_test_covar, test_train_covar):
        parts = self._sparse_parts(test_test_covar, test_train_covar)
        if parts is None:
            return super().exact_prediction(test_mean, test_test_covar, test_train_covar)
        noisy, batch = parts
        tt = test_test_covar._expand_batch(batch) if test_test_covar.batch_shape != batch \
            else test_test_covar
        tr = test_train_covar._expand_batch(batch) if test_train_covar.batch_shape != batch \
            else test_train_covar
        resid = self.train_labels - self.train_prior_dist.mean
        # label batches wider than the operators' (fantasies) become columns of one solve
        extra = resid.shape[:resid.dim() - 1 - len(batch)] if resid.dim() - 1 > len(batch) \
            else torch.Size()
        resid = resid.expand(*extra, *batch, resid.shape[-1])
        cols = resid.reshape(-1, *batch, resid.shape[-1]).movedim(0, -1)   # *batch x m x k
        means = []
        for i in _members(batch):
            mu = _PosteriorMean.apply(noisy.kappa2[i], noisy.scale[i], noisy.noise[i],
                                      cols[i], noisy.engine, _rows_np(noisy.rows[i]),
                                      _rows_np(tr.rows[i]))
            means.append(mu)
        mean = _stack(means, batch)                                     # *batch x t x k
        mean = mean.movedim(-1, 0).reshape(*extra, *batch, mean.shape[-2])
        mean = mean + test_mean
        if settings.skip_posterior_variances.on():
            return mean, ZeroLinearOperator(*tt.size(), dtype=tt.dtype, device=tt.device)
        covar = GraphMaternPosteriorCovariance(noisy.kappa2, noisy.scale, noisy.noise,
                                               noisy.rows, tt.rows, tt.cols,
                                               engine=noisy.engine)
        return mean, covar

    def get_fantasy_strategy(self, inputs, targets, full_inputs, full_targets, full_output,
                             **kwargs):
        """This class on the full data (fantasies included): nothing is cached to update."""
        fant_likelihood = self.likelihood.get_fantasy_likelihood(**kwargs)
        return self.__class__(train_inputs=full_inputs, train_prior_dist=full_output,
                              train_labels=full_targets, likelihood=fant_likelihood)


# -- the kernel -----------------------------------------------------------------------------

class GraphMaternKernel(Kernel):
    r"""The graph Matérn prior of a :class:`~flgp.graph.PointGraph` at full resolution, as a
    GPyTorch kernel on the graph's nodes.

    .. math::

        k(x_i, x_j) = \frac{[Q_\nu(\kappa)^{-1}]_{ij}}{\bar v}, \qquad
        Q_\nu(\kappa) = K (C^{-1}K)^{\nu-1},\; K = \kappa^2 C + G,

    with ``v̄`` a normalisation (``normalize``): by default the mean prior variance
    ``[Q⁻¹]_rr`` over ``n_reference`` nodes at ``κ_h = 1/(10h)`` (``h`` the graph's spacing),
    so the outputscale is the amplitude dense data identify (``σ² κ^{2ν-d}``, Zhang 2004).
    Covariances are sparse-solve operators (:mod:`flgp.kernels.graph_matern`). Wrap the
    kernel in ``gpytorch.kernels.ScaleKernel`` for an outputscale; each ``batch_shape``
    member (e.g. several maps on one graph) has its own ``κ²`` and factor.

    Parameters
    ----------
    graph : PointGraph
        A lattice, mesh or k-NN graph (:func:`flgp.graph.lattice_graph`,
        :func:`flgp.graph.mesh_graph`, :func:`flgp.graph.knn_point_graph`).
    nu : int, default=2
        The Matérn order ``ν >= 1`` (fill and factorisation cost grow with it).
    inputs : {"coordinates", "index"}, default="coordinates"
        Inputs are node coordinates (``... x N x p``, rows of ``graph.points``, matched to a
        thousandth of the spacing) or node indices as a float tensor ``... x N x 1``;
        anything else is a ``ValueError``.
    kappa2 : float, optional
        Initial ``κ²`` in the units of ``graph.points``; default ``(10 h)^{-2}``.
    kappa2_prior : gpytorch.priors.Prior, optional
    kappa2_constraint : gpytorch.constraints.Interval, default=Positive(exp/log)
        The default optimises ``log κ²``.
    normalize : {"fixed", "variance", "none"}, default="fixed"
        ``"fixed"``: ``v̄ = v̄(κ_h)`` (see above); ``"variance"``: ``v̄ = v̄(κ)``, the
        outputscale is the prior variance at every ``κ`` (but correlated with ``κ``);
        ``"none"``: ``Q_ν(κ)⁻¹`` in the graph's units. In float32 an amplitude or prior
        variance out of range is a ``ValueError``.
    n_reference : int, default=2
        Reference nodes of the normalisation (:attr:`reference_nodes`), ``ν`` solves each,
        once (``"fixed"``) or every step (``"variance"``). Prior variances vary between
        nodes, so the normalised variance is 1 only to within tens of per cent.
    trace_estimator : {"auto", "exact", "stochastic"}, default="auto"
        The log-determinant's gradient: exact while (observed nodes) x (nodes) is at most
        ``EXACT_TRACE_WORK``, else estimated (module notes).
    n_probes : int, default=4
        Draws of the stochastic estimator (>= 2).
    n_variance_samples : int, default=64
        Draws for the Rao-Blackwellised variances of more than ``EXACT_VARIANCE_ROWS`` nodes
        (relative standard error at most ``sqrt(2 / n_variance_samples)``,
        :func:`flgp.precision.gaussian.rbmc_variances`).
    random_state : int, default=0
        Seeds the probes (with the hyperparameters' values) and the Monte Carlo variances.
    solver : {"auto", "cholesky", "cg"}, default="auto"
        How the solves ``Q⁻¹B`` and ``Q̃⁻¹B`` run: ``"cholesky"``, CHOLMOD on the CPU;
        ``"cg"``, Jacobi-preconditioned conjugate gradients on the hyperparameters' device
        (:class:`CGNotConvergedError` if they miss ``CG_RTOL``); ``"auto"``, ``"cg"`` on
        CUDA, else ``"cholesky"``. Log-determinants, trace estimates and Monte Carlo
        variances always use the CPU factors.

    Attributes
    ----------
    kappa2 : Tensor (``*batch_shape x 1 x 1``)
        ``κ²`` in the units of ``graph.points``; settable.
    trace_diagnostics : dict or None
        The last backward pass's traces: estimator, probes, value and standard error of
        ``Δ = ∂log|K_XX + D|/∂κ²`` (graph's own units) and of ``Σ_u w_u (Q̃⁻¹)_uu``.

    Examples
    --------
    >>> import numpy as np, torch, gpytorch
    >>> from flgp.graph import lattice_graph
    >>> from flgp.kernels import GraphMaternKernel
    >>> g = lattice_graph(np.argwhere(np.ones((12, 10, 1), bool)))
    >>> k = gpytorch.kernels.ScaleKernel(GraphMaternKernel(g, nu=2))
    >>> x = torch.as_tensor(g.points[:30])
    >>> k(x).shape
    torch.Size([30, 30])
    >>> idx = GraphMaternKernel(g, inputs="index")
    >>> idx(torch.arange(5.0)[:, None]).to_dense().shape
    torch.Size([5, 5])
    """

    has_lengthscale = False

    def __init__(self, graph, nu: int = 2, *, inputs: str = "coordinates",
                 kappa2: float | None = None, kappa2_prior=None, kappa2_constraint=None,
                 normalize: str = "fixed", n_reference: int = 2,
                 trace_estimator: str = "auto", n_probes: int = 4,
                 n_variance_samples: int = 64, random_state: int = 0,
                 solver: str = "auto", **kwargs):
        super().__init__(**kwargs)
        for attr in ("stiffness", "mass", "points", "own_units", "in_units"):
            if not hasattr(graph, attr):
                raise TypeError(f"GraphMaternKernel needs a flgp.graph.PointGraph (a lattice, "
                                f"mesh or k-NN graph); got {type(graph).__name__}.")
        if hasattr(graph, "check"):
            graph.check()
        nu = check_order(nu)
        if inputs not in INPUT_KINDS:
            raise ValueError(f"inputs must be one of {INPUT_KINDS}; got {inputs!r}.")
        if trace_estimator not in TRACE_ESTIMATORS:
            raise ValueError(f"trace_estimator must be one of {TRACE_ESTIMATORS}; got "
                             f"{trace_estimator!r}.")
        if isinstance(n_probes, bool) or int(n_probes) != n_probes or n_probes < 2:
            raise ValueError(f"n_probes must be an integer >= 2 (the standard error needs "
                             f"two draws); got {n_probes!r}.")
        if isinstance(n_reference, bool) or int(n_reference) != n_reference or n_reference < 1:
            raise ValueError(f"n_reference must be an integer >= 1; got {n_reference!r}.")
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}; got {normalize!r}.")
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}; got {solver!r}.")
        self.nu, self.inputs, self.normalize, self.solver = nu, inputs, normalize, solver
        if isinstance(n_variance_samples, bool) or int(n_variance_samples) != \
                n_variance_samples or n_variance_samples < 2:
            raise ValueError(f"n_variance_samples must be an integer >= 2; got "
                             f"{n_variance_samples!r}.")
        self._engine = _Engine(graph, nu, int(n_reference), trace_estimator, int(n_probes),
                               random_state, int(n_variance_samples))
        length, mass = self._engine.length, self._engine.mass_unit
        self._length2 = length * length
        # Q_user⁻¹ = (length^{2ν} / mass) Q_own⁻¹
        with np.errstate(over="ignore", under="ignore"):
            self._unit_factor = float(np.exp(2 * nu * np.log(length) - np.log(mass)))
        if normalize == "none" and not (np.isfinite(self._unit_factor)
                                        and self._unit_factor > 0):
            raise ValueError(f"the graph's units make Q⁻¹ overflow ({length=}, {mass=}); use "
                             f"normalize='fixed' or rescale the points.")
        self.register_parameter("raw_kappa2",
                                torch.nn.Parameter(torch.zeros(*self.batch_shape, 1, 1)))
        if kappa2_constraint is None:
            kappa2_constraint = Positive(transform=torch.exp, inv_transform=torch.log)
        self.register_constraint("raw_kappa2", kappa2_constraint)
        if kappa2_prior is not None:
            self.register_prior("kappa2_prior", kappa2_prior, lambda m: m.kappa2,
                                lambda m, v: m._set_kappa2(v))
        if kappa2 is None:
            kappa2 = 1.0 / (10.0 * float(graph.spacing)) ** 2
        self.kappa2 = kappa2
        self._lookup: list = []

    # -- the hyperparameter ------------------------------------------------------------
    @property
    def kappa2(self) -> torch.Tensor:
        """``κ²`` (``*batch_shape x 1 x 1``) in the units of ``graph.points``."""
        return self.raw_kappa2_constraint.transform(self.raw_kappa2)

    @kappa2.setter
    def kappa2(self, value) -> None:
        self._set_kappa2(value)

    def _set_kappa2(self, value) -> None:
        raw = self.raw_kappa2
        value = torch.as_tensor(value, dtype=torch.float64, device=raw.device)
        if not bool(torch.isfinite(value).all()) or bool((value <= 0).any()):
            raise ValueError(f"kappa2 must be finite and positive; got "
                             f"{value.detach().cpu().numpy()!r}.")
        self.initialize(raw_kappa2=self.raw_kappa2_constraint.inverse_transform(value).to(raw))

    @property
    def graph(self):
        """The graph in its own units (what the factors are built on)."""
        return self._engine.graph

    @property
    def trace_diagnostics(self):
        return self._engine.last_trace

    @property
    def reference_nodes(self) -> np.ndarray:
        """The nodes ``r`` of ``v̄(κ) = mean_r [Q⁻¹]_rr``: ``floor((i + ½) n / n_reference)``."""
        return self._engine.reference.copy()

    # -- inputs to nodes ----------------------------------------------------------------
    def nodes(self, x: torch.Tensor) -> torch.Tensor:
        """Node indices (``... x N``, int64, on ``x``'s device) of inputs ``... x N x p``."""
        xd = x.detach()
        for cached_x, idx in self._lookup:
            if (cached_x.shape == xd.shape and cached_x.dtype == xd.dtype
                    and cached_x.device == xd.device and torch.equal(cached_x, xd)):
                return idx
        flat = xd.reshape(-1, x.shape[-1]).cpu().numpy().astype(np.float64)
        idx = torch.as_tensor(self._engine.nodes_of(flat, self.inputs), device=x.device)
        idx = idx.reshape(x.shape[:-1])
        self._lookup = [(xd.clone(), idx)] + self._lookup[:3]
        return idx

    def own_hyperparameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(κ²_own, a)`` (``*batch_shape``): the kernel is ``a Q_ν(κ²_own)⁻¹`` on
        :attr:`graph`. ``ScaleKernel(kernel)`` with outputscale ``s`` and noise ``σ²`` is
        :class:`flgp.precision.MaternRegression` on :attr:`graph` at ``κ²_own``,
        ``r = σ² / (s a)`` and amplitude ``s a``."""
        return self._own(self.raw_kappa2.dtype)

    def _own(self, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`own_hyperparameters` in ``dtype`` (``a = 1 / v̄`` or the unit factor)."""
        k2 = self.kappa2.to(dtype).squeeze(-1).squeeze(-1) * self._length2
        self._check_range(k2, dtype)
        if self.normalize == "none":
            return k2, torch.full_like(k2, self._unit_factor)
        if self.normalize == "fixed":
            return k2, torch.full_like(k2, 1.0 / self._engine.fixed_variance())
        scales = [1.0 / _ReferenceVariance.apply(k2[i], self._engine)
                  for i in _members(k2.shape)]
        return k2, _stack(scales, k2.shape)

    def _check_range(self, k2, dtype) -> None:
        """A ``ValueError`` where ``dtype`` cannot hold the amplitude or prior variance."""
        if dtype == torch.float64:
            return
        info = torch.finfo(dtype)
        engine = self._engine
        for value in k2.detach().reshape(-1).tolist():
            if self.normalize == "fixed":
                amplitude, variance = 1.0 / engine.fixed_variance(), 1.0
            else:
                columns = engine.reference_columns(float(value))
                v = float(np.mean(columns[engine.reference, np.arange(engine.reference.size)]))
                amplitude, variance = ((self._unit_factor, self._unit_factor * v)
                                       if self.normalize == "none" else (1.0 / v, 1.0))
            for what, x in (("amplitude", amplitude), ("prior variance", variance)):
                if not info.tiny * 1e6 < x < info.max / 1e6:
                    raise ValueError(
                        f"GraphMaternKernel(nu={self.nu}, normalize={self.normalize!r}): its "
                        f"{what} at kappa2={value / self._length2:.3g} is {x:.3g}, outside "
                        f"what {dtype} holds; compute in float64 (model.double() and "
                        f"float64 inputs)"
                        + ("" if self.normalize != "none" else
                           ", use normalize='fixed', or rescale the points") + ".")

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, **params):
        """A :class:`GraphMaternCovariance` ``... x N x M``, or its diagonal with ``diag``."""
        if params.get("last_dim_is_batch"):
            raise ValueError("GraphMaternKernel does not take last_dim_is_batch: its inputs "
                             "are graph nodes, not independent dimensions.")
        dtype = torch.promote_types(output_dtype(x1), self.raw_kappa2.dtype)
        device = self.raw_kappa2.device
        self._engine.configure("cg" if self.solver == "cg" or (
            self.solver == "auto" and device.type == "cuda") else "cholesky", device)
        r1 = self.nodes(x1)
        r2 = r1 if (x2 is x1 or (x2.shape == x1.shape and torch.equal(x1, x2))) \
            else self.nodes(x2)
        k2, scale = self._own(dtype)
        batch = torch.broadcast_shapes(k2.shape, r1.shape[:-1], r2.shape[:-1])
        k2, scale = k2.expand(batch), scale.expand(batch)
        r1 = r1.expand(*batch, r1.shape[-1])
        r2 = r2.expand(*batch, r2.shape[-1])
        if diag:
            out = [scale[i] * _prior_entries(k2[i], self._engine, _rows_np(r1[i]),
                                             _rows_np(r2[i])) for i in _members(batch)]
            return _stack(out, batch).to(device=x1.device)
        return GraphMaternCovariance(k2, scale, r1, r2, engine=self._engine)

    def prediction_strategy(self, train_inputs, train_prior_dist, train_labels, likelihood):
        return GraphMaternPredictionStrategy(train_inputs, train_prior_dist, train_labels,
                                             likelihood)

    def num_outputs_per_input(self, x1, x2):
        return 1

    def __getstate__(self):
        state = dict(super().__getstate__())
        state["_lookup"] = []
        return state
