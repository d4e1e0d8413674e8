r"""The graph Matérn family of sparse precisions.

On a :class:`~flgp.graph.PointGraph` with stiffness ``G`` and lumped mass ``C``, the
integer order ``ν`` member is

.. math:: Q_\nu(\kappa) = K\,(C^{-1} K)^{\nu - 1}, \qquad K = \kappa^2 C + G,

and the prior is ``f ~ N(0, A Q⁻¹)``: the discretised SPDE ``(κ² - Δ)^{ν/2} f = W`` of
Lindgren, Rue and Lindström (2011) (their ``α`` is our ``ν``; Matérn smoothness ``ν - d/2``
in ``d`` dimensions), and with ``C = I`` the graph Matérn kernel ``(κ² + L)^{-ν}`` of
Borovitskiy et al. (2021). Its limits:

* ``ν → ∞`` with ``κ² = ν / t``: ``κ^{2ν} Q_ν⁻¹ C = (I + (t/ν) C⁻¹G)^{-ν} → e^{-t C⁻¹G}``,
  the heat kernel at diffusion time ``t``, untruncated;
* ``ν = 1``, ``κ → 0``: ``Q → G``, whose pseudo-inverse is the Green's function of the
  graph Laplacian that Poisson learning solves with (Calder et al. 2020).

``log |Q_ν| = ν log |K| - (ν - 1) log |C|`` needs only the factor of ``K``.
"""

from __future__ import annotations

import numbers
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp

from .._fingerprint import array_fingerprint
from .cholesky import PatternCholesky

__all__ = ["matern_precision", "shifted_stiffness", "MATERN_ORDERS", "MaternFamily",
           "MaternFactors", "apply_matern_inverse", "check_order"]

# the orders the estimators compare, in search order (each from the best optimum so far);
# fill and factorisation cost grow with ν (docs/full_resolution.md)
MATERN_ORDERS = (2, 3, 4, 1)


def check_order(nu) -> int:
    """``nu`` as an int if it is a whole number ``>= 1`` (``2`` or ``2.0``); else ValueError
    (fractional orders would need a rational approximation)."""
    if isinstance(nu, (bool, np.bool_)) or not isinstance(nu, (numbers.Real, np.number)):
        raise ValueError(f"nu (the Matérn order) must be a positive integer; got {nu!r}.")
    if not (np.isfinite(nu) and float(nu) == int(nu) and int(nu) >= 1):
        raise ValueError(f"nu (the Matérn order) must be a positive integer (1, 2, 3, ...); "
                         f"got {nu!r}. Fractional orders are not supported: round it.")
    return int(nu)


def _power(kappa2: float, k: int) -> float:
    """``κ^{2k}``; ValueError on float64 overflow (see
    :meth:`flgp.graph.PointGraph.in_own_units`)."""
    with np.errstate(over="ignore"):
        value = np.float64(kappa2) ** k
    if not np.isfinite(value):
        raise ValueError(f"kappa2 ** {k} = ({kappa2:.3g}) ** {k} overflows float64; express "
                         f"the graph in other units (graph.in_own_units() is unit-free) and "
                         f"kappa2 in the same.")
    return float(value)


def shifted_stiffness(graph, kappa2: float) -> sp.csc_matrix:
    """``K = κ² C + G``."""
    return (graph.stiffness + sp.diags(kappa2 * graph.mass)).tocsc()


def matern_precision(graph, kappa2: float, nu: int) -> sp.csc_matrix:
    """``Q_ν(κ) = K (C⁻¹ K)^{ν-1}`` (module notes) for ``kappa2 = κ² >= 0`` and a positive
    integer ``nu``; ValueError otherwise or where entries overflow float64.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.graph.lattice import lattice_graph
    >>> g = lattice_graph(np.argwhere(np.ones((4, 4, 1), bool)))
    >>> Q = matern_precision(g, 0.5, 2)
    >>> K = 0.5 * np.eye(16) + g.stiffness.toarray()
    >>> bool(np.allclose(Q.toarray(), K @ K))
    True
    """
    nu = check_order(nu)
    if not (np.isfinite(kappa2) and kappa2 >= 0):
        raise ValueError(f"kappa2 must be finite and >= 0; got {kappa2!r}.")
    K = shifted_stiffness(graph, kappa2)
    Q = K
    if nu > 1:
        CinvK = (sp.diags(1.0 / graph.mass) @ K).tocsc()
        for _ in range(nu - 1):
            Q = (Q @ CinvK).tocsc()
        Q = (0.5 * (Q + Q.T)).tocsc()          # symmetric to the last bit
    if not np.all(np.isfinite(Q.data)):
        raise ValueError(f"Q_nu(kappa) has entries beyond float64 at kappa2={kappa2:.3g} "
                         f"(a graph in extreme units); use graph.in_own_units().")
    return Q


class MaternFamily:
    """``Q_ν(κ)`` for every ``κ`` from ``ν + 1`` fixed matrices on one pattern: with
    ``T = C⁻¹G``, ``Q_ν(κ) = Σ_j binom(ν, j) κ^{2(ν-j)} C T^j``. Each ``κ`` costs a linear
    combination of value arrays in the lower triangle's CSC order (:attr:`indptr`,
    :attr:`indices`), which :class:`~flgp.precision.PatternCholesky` factors directly.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.graph.lattice import lattice_graph
    >>> g = lattice_graph(np.argwhere(np.ones((4, 4, 2), bool)))
    >>> fam = MaternFamily(g, 3)
    >>> bool(np.allclose(fam.matrix(0.2).toarray(), matern_precision(g, 0.2, 3).toarray()))
    True
    """

    def __init__(self, graph, nu: int):
        from math import comb

        self.nu = check_order(nu)
        n = graph.n_nodes
        C = sp.diags(graph.mass).tocsc()
        T = (sp.diags(1.0 / graph.mass) @ graph.stiffness).tocsc()
        terms = [C]
        for _ in range(self.nu):
            nxt = (terms[-1] @ T).tocsc()
            terms.append((0.5 * (nxt + nxt.T)).tocsc())
        pattern = sp.csc_matrix((n, n))
        for P in terms:
            pattern = pattern + abs(P)
        pattern = sp.tril(pattern + sp.eye(n), format="csc")
        pattern.sort_indices()
        self.n = n
        self.indptr, self.indices = pattern.indptr.copy(), pattern.indices.copy()
        self.diagonal = self.indptr[:-1].copy()     # each column's first lower entry: (j, j)
        self._terms = [_on(P, self.indptr, self.indices) for P in terms]
        self._coef = [comb(self.nu, j) for j in range(self.nu + 1)]

    @classmethod
    def of(cls, graph, nu: int) -> "MaternFamily":
        """The family of ``graph`` and ``nu`` from a cache keyed by the graph's contents
        (at most ``FAMILY_CACHE_SIZE`` families, ``FAMILY_CACHE_BYTES`` in all), so that
        many maps on one mask form the products once. Families are immutable."""
        G = sp.csr_matrix(graph.stiffness)
        key = (check_order(nu), array_fingerprint(G.indptr), array_fingerprint(G.indices),
               array_fingerprint(G.data), array_fingerprint(graph.mass))
        family = _FAMILIES.pop(key, None)
        if family is None:
            family = cls(graph, nu)
        _FAMILIES[key] = family                      # the most recently used last
        while len(_FAMILIES) > 1 and (len(_FAMILIES) > FAMILY_CACHE_SIZE or sum(
                f.nbytes for f in _FAMILIES.values()) > FAMILY_CACHE_BYTES):
            _FAMILIES.popitem(last=False)
        return family

    @property
    def nbytes(self) -> int:
        """The memory its arrays take."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.diagonal.nbytes
                   + sum(v.nbytes for v in self._terms))

    @property
    def nnz(self) -> int:
        return self.indices.size

    def values(self, kappa2: float) -> np.ndarray:
        """The lower triangle's values of ``Q_ν(κ)`` (pattern order)."""
        out = np.zeros(self.nnz)
        for j, (c, v) in enumerate(zip(self._coef, self._terms)):
            out += (c * _power(kappa2, self.nu - j)) * v
        if not np.all(np.isfinite(out)):
            raise ValueError(f"Q_nu(kappa) has entries beyond float64 at kappa2={kappa2:.3g} "
                             f"(a graph in extreme units); use graph.in_own_units().")
        return out

    def matrix(self, kappa2: float, values=None) -> sp.csc_matrix:
        """``Q_ν(κ)`` (or the symmetric matrix of given lower-triangle ``values``)."""
        v = self.values(kappa2) if values is None else values
        L = sp.csc_matrix((v, self.indices, self.indptr), shape=(self.n, self.n))
        return (L + sp.tril(L, k=-1, format="csc").T).tocsc()


def apply_matern_inverse(solve_stiffness, mass, nu: int, B):
    """``Q_ν⁻¹ B = (K⁻¹C)^{ν-1} K⁻¹ B`` by ``ν`` calls ``solve_stiffness(X) = K⁻¹X``
    (``B`` and ``mass`` arrays of any library with numpy's broadcasting)."""
    X = solve_stiffness(B)
    for _ in range(nu - 1):
        X = solve_stiffness(mass[:, None] * X)
    return X


class MaternFactors:
    """CHOLMOD factors of ``K = κ²C + G`` (solves with ``Q_ν``, ``log|Q_ν|``, prior draws)
    and of ``Q̃ = Q_ν + diag(w)`` (:meth:`posterior_factor`), each pattern analysed once and
    refactored when its values change. Pickles without the factors."""

    def __init__(self, graph, nu: int):
        self.graph, self.nu, self.n = graph, check_order(nu), graph.n_nodes
        self.mass = np.asarray(graph.mass, dtype=np.float64)
        self.log_mass = float(np.sum(np.log(self.mass)))
        self.__setstate__(dict(self.__dict__))

    def __getstate__(self):
        return {k: self.__dict__[k] for k in ("graph", "nu", "n", "mass", "log_mass")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._families, self._factors, self._keys = {}, {}, {}
        self._logdet_stiffness, self._posterior_values = {}, None

    def family(self, order: int) -> MaternFamily:
        """:class:`MaternFamily` of ``order`` on the graph (``1``: ``K`` itself)."""
        if order not in self._families:
            self._families[order] = MaternFamily.of(self.graph, order)
        return self._families[order]

    def factor(self, name: str, order: int, key, values) -> PatternCholesky:
        """The factor ``name`` on ``Q_order``'s pattern with lower-triangle ``values()``,
        refactored unless it already holds those of ``key``."""
        if name not in self._factors:
            fam = self.family(order)
            self._factors[name] = PatternCholesky.of_lower_pattern(fam.indptr, fam.indices)
        if self._keys.get(name) != key:
            self._keys[name] = None             # no factor if this one fails
            self._factors[name].factor_values(values())
            self._keys[name] = key
        return self._factors[name]

    # -- the prior -------------------------------------------------------------------
    def prior_factor(self, kappa2: float) -> PatternCholesky:
        """The factor of ``K = κ²C + G``."""
        return self.factor("stiffness", 1, kappa2, lambda: self.family(1).values(kappa2))

    def logdet_stiffness(self, kappa2: float) -> float:
        """``log|K|`` (the last 64 values kept)."""
        if kappa2 not in self._logdet_stiffness:
            if len(self._logdet_stiffness) >= 64:
                self._logdet_stiffness.clear()
            self._logdet_stiffness[kappa2] = self.prior_factor(kappa2).logdet()
        return self._logdet_stiffness[kappa2]

    def logdet_prior(self, kappa2: float) -> float:
        """``log|Q_ν| = ν log|K| - (ν-1) log|C|``."""
        return self.nu * self.logdet_stiffness(kappa2) - (self.nu - 1) * self.log_mass

    def solve_prior(self, kappa2: float, B: np.ndarray) -> np.ndarray:
        """``Q_ν⁻¹ B``: ``ν`` solves with the factor of ``K``."""
        return apply_matern_inverse(self.prior_factor(kappa2).solve, self.mass, self.nu, B)

    def prior_draws(self, kappa2: float, n_samples: int, rng) -> np.ndarray:
        """``n_samples`` columns ``x ~ N(0, Q_ν⁻¹)``: ``(K⁻¹C)^p C^{-1/2} z`` (``ν = 2p``) or
        ``(K⁻¹C)^p y``, ``y ~ N(0, K⁻¹)`` (``ν = 2p + 1``)."""
        chol = self.prior_factor(kappa2)
        if self.nu % 2:
            X = chol.sample(n_samples, rng)
        else:
            X = rng.standard_normal((self.n, n_samples)) / np.sqrt(self.mass)[:, None]
        for _ in range(self.nu // 2):
            X = chol.solve(self.mass[:, None] * X)
        return X

    # -- the posterior precisions ------------------------------------------------------
    def posterior_precision(self, kappa2: float, nodes, weights, key,
                            values_only: bool = False):
        """``Q̃ = Q_ν(κ) + diag(w)``, ``w`` the ``weights`` at distinct ``nodes``; ``key``
        names ``(κ², nodes, weights)`` (last kept); ``values_only``: lower-triangle values."""
        fam = self.family(self.nu)
        if self._posterior_values is None or self._posterior_values[0] != key:
            values = fam.values(kappa2)
            values[fam.diagonal[nodes]] += weights
            self._posterior_values = (key, values)
        values = self._posterior_values[1]
        return values if values_only else fam.matrix(kappa2, values)

    def posterior_factor(self, kappa2: float, nodes, weights, key) -> PatternCholesky:
        """The factor of ``Q̃`` (:meth:`posterior_precision`)."""
        return self.factor("posterior", self.nu, key, lambda: self.posterior_precision(
            kappa2, nodes, weights, key, values_only=True))


# MaternFamily.of's cache: the families of the last graphs and orders used
FAMILY_CACHE_SIZE = 8
FAMILY_CACHE_BYTES = 1 << 30
_FAMILIES: OrderedDict = OrderedDict()


def _on(P, indptr, indices) -> np.ndarray:
    """``P``'s lower-triangle values on the pattern ``(indptr, indices)`` (0 where absent)."""
    n = indptr.size - 1
    L = sp.tril(P, format="csc")
    L.sum_duplicates()
    cols = np.repeat(np.arange(n), np.diff(indptr))
    key = cols.astype(np.int64) * n + indices
    Lc = L.tocoo()
    pos = np.searchsorted(key, Lc.col.astype(np.int64) * n + Lc.row)
    out = np.zeros(indices.size)
    out[pos] = Lc.data
    return out
