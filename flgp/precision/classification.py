r"""Classification at full resolution: the graph Matérn GP classifier in its
small-amplitude limit, least-squares classification under the same prior, and a prior on
the classes' sizes (user guide: docs/few_labels.md).

**The latent.** Each class latent ``f_c ~ GP(0, A G_ν)`` on the nodes of a graph, with the
graph Matérn covariance ``G_ν = P (L + κ²I)^{-ν} P`` (``L = D - W``; ``P = I - 11ᵀ/n``
removes the constant mode, the GP form of Poisson learning's centring) and a multinomial
probit or softmax likelihood. As ``A → 0`` the posterior mean of ``f_c`` is, to first order
in ``A``, ``A γ G_ν b_c`` with ``b_c = Σ_l (1[y_l = c] - 1/C) e_l`` the likelihood's
gradient at ``f = 0`` (up to a constant ``γ``): the labels as centred sources. For
``ν = 1`` and ``κ → 0`` that is Poisson learning's solution (Calder et al. 2020); it needs
``C`` sparse solves whatever the number of labels (:func:`green_scores`).

**The amplitude from the cloud.** With one label a class neither the evidence nor
leave-one-out can set ``A``; :func:`score_scale` scales the scores so that the median over
the unlabelled points of the gap between their two largest scores is ``MARGIN_LOGITS``
logits (odds ``e⁷ ≈ 1100`` between a typical point's two likeliest classes).

**Class sizes** (:func:`class_size_prior`, :func:`balance_to_prior`). Without them a class
whose one label sits near a boundary is swallowed by its neighbours'. The probabilities are
re-weighted by one factor a class so that their average over the cloud equals the prior
shares ``π`` (the fixed point of Saerens, Latinne and Decaestecker's 2002 prior adjustment,
by Newton's method on its convex dual). ``π`` is balanced unless the label counts' Bayes
factor of "equal classes" against "unknown shares" is below one, then the smoothed label
frequencies; or the user's.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from .centred_posterior import CentredPosterior
from .prior import AMG_VARIANCE_SAMPLES, LARGE_VARIANCE_SAMPLES, SparsePrecisionPrior

__all__ = ["green_scores", "scores_to_probabilities", "score_scale", "class_size_prior",
           "balanced_log_odds", "balance_to_prior", "MARGIN_LOGITS", "KAPPA_RELATIVE",
           "LabelledColumns", "LeastSquaresClassification", "prior_to_noise_ratios",
           "chosen_candidate", "labels_kept", "graph_edges", "graph_total_variation",
           "RHO_ONE_LABEL", "RHO_CANDIDATES", "ORDER_CANDIDATES", "PrecisionLeastSquares",
           "labelled_prior_scale", "SCALE_BLOCK", "SCALE_RELATIVE_ERROR", "raised_models"]

# median top-two gap of the scaled scores, in logits (module notes; 7: best of 6-8 over six
# clouds, docs/few_labels.md)
MARGIN_LOGITS = 7.0
# κ² relative to the graph's own 1 / length²: a nearly intrinsic prior (Poisson learning's
# κ = 0)
KAPPA_RELATIVE = 1e-5
# relative residual of the conjugate-gradient solves (graphlearning's default)
SOLVE_TOL = 1e-3


def green_scores(graph, labelled, codes, n_classes, *, nu: int = 1, kappa2=None,
                 tol: float = SOLVE_TOL):
    """``U = G_ν B`` (``n x C``): the class scores of every node (module notes), with ``G_ν``
    the centred graph Matérn prior (:class:`~flgp.precision.prior.SparsePrecisionPrior`,
    AMG-CG solves). ``labelled``: distinct node indices, ``codes``: their classes."""
    C = int(n_classes)
    labelled = np.asarray(labelled, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    sources = np.zeros((labelled.size, C))
    sources[np.arange(labelled.size), codes] = 1.0
    sources -= sources.mean(axis=0)
    if kappa2 is None:
        # relative to the graph's own 1 / length²: the same prior in any units
        kappa2 = KAPPA_RELATIVE / graph.own_units()[0] ** 2
    prior = SparsePrecisionPrior(graph, nu=nu, kappa2=kappa2, centred=True, solver="amg",
                                 tol=tol)
    # every row of the sources, hence of U, sums to 0: the last column is minus the others'
    U = prior.cross_covariance(labelled, weights=sources[:, :-1])
    return np.column_stack([U, -U.sum(axis=1)])


def score_scale(U) -> float:
    """The scale turning scores ``U`` (``n x C``, unlabelled points) into logits (module
    notes): the median top-two gap over ``MARGIN_LOGITS``; the mean gap where more than half
    of the rows tie, 1 where all do. ValueError for a bad shape or non-finite scores."""
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2 or U.shape[0] == 0 or U.shape[1] < 2:
        raise ValueError(f"U must be an (n_points, n_classes) array of scores with "
                         f"n_points >= 1 and n_classes >= 2; got shape {U.shape}.")
    if not np.all(np.isfinite(U)):
        raise ValueError("U holds NaN or infinite scores; give finite ones.")
    top = np.partition(U, U.shape[1] - 2, axis=1)[:, -2:]
    gap = np.abs(top[:, 1] - top[:, 0])
    typical = float(np.median(gap))
    if typical <= 0.0:
        typical = float(gap.mean())
    return typical / MARGIN_LOGITS if typical > 0.0 else 1.0


def scores_to_probabilities(U, scale, weights=None):
    """``p_c ∝ w_c exp(U_c / scale)`` row by row (``scale``: :func:`score_scale`)."""
    Z = np.asarray(U, dtype=np.float64) / float(scale)
    Z -= Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    if weights is not None:
        P *= weights
    P /= P.sum(axis=1, keepdims=True)
    return P


def balanced_log_odds(counts) -> float:
    """Log Bayes factor of "equal classes" against "unknown shares" (uniform Dirichlet) for
    label counts: ``-m log C - [log Γ(C) + Σ_c log n_c! - log Γ(m + C)]``."""
    from scipy.special import gammaln

    n = np.asarray(counts, dtype=np.float64)
    C, m = n.size, float(n.sum())
    return float(-m * np.log(C) - (gammaln(C) + gammaln(n + 1.0).sum() - gammaln(m + C)))


def class_size_prior(codes, n_classes, prior="auto"):
    """The classes' prior shares ``π``: ``"auto"`` - balanced unless
    :func:`balanced_log_odds` is below 0, then the label counts plus one, normalised;
    ``"balanced"``; ``"labels"`` - those smoothed frequencies; or the user's shares.
    ValueError for an unknown string or shares not positive and finite."""
    C = int(n_classes)
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=C).astype(float)
    if isinstance(prior, str):
        if prior == "balanced" or (prior == "auto" and balanced_log_odds(counts) >= 0.0):
            return np.full(C, 1.0 / C)
        if prior in ("auto", "labels"):
            return (counts + 1.0) / (counts.sum() + C)
        raise ValueError(f"class_prior must be 'auto', 'balanced', 'labels', None or "
                         f"{C} shares; got {prior!r}.")
    try:
        pi = np.asarray(prior, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        pi = np.full(0, np.nan)                 # not numbers: the message below
    if pi.shape != (C,) or not np.all(np.isfinite(pi)) or np.any(pi <= 0):
        raise ValueError(f"class_prior must hold {C} positive finite shares (one a class, "
                         f"in the order of classes_); got {prior!r}. (A class no label has "
                         f"is named by a mapping {{class: share}}.)")
    return pi / pi.sum()


# the class balance's Newton steps move each class's log-weight by at most this much
MAX_LOGIT_STEP = 20.0


def balance_to_prior(P, prior, max_iter: int = 100, tol: float = 1e-9, start=None):
    """``(weights, P')``: one factor a class such that the rows of ``P' ∝ P w`` average to
    ``prior`` (module notes); ``start``: initial weights. ``w = e^θ`` minimises the convex
    ``F(θ) = mean_i log Σ_c P_ic e^{θ_c} - πᵀθ`` by Newton's method (Hessian
    ``mean_i (diag q_i - q_i q_iᵀ)``) with step halving. ValueError for a bad ``start``."""
    P = np.asarray(P, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    n, C = P.shape
    logP = np.log(np.maximum(P, 1e-300))
    if start is None:
        theta = np.zeros(C)
    else:
        start = np.asarray(start, dtype=np.float64)
        if start.shape != (C,) or not (np.all(np.isfinite(start)) and np.all(start > 0)):
            raise ValueError(f"start must hold {C} positive finite class weights (a "
                             f"previous balance's); got {start!r}.")
        theta = np.log(start)

    # sums as BLAS products with ones; each row shifted by a bound on its largest entry
    # (exact row maxima where that bound would underflow a row)
    ones_c, mean_n = np.ones(C), np.full(n, 1.0 / n)
    row_top = logP.max(axis=1)

    def state(th):
        Z = logP + th
        top = row_top + th.max()
        E = np.exp(Z - top[:, None])
        s = E @ ones_c
        if not np.all(s > 0.0):
            top = Z.max(axis=1)
            E = np.exp(Z - top[:, None])
            s = E @ ones_c
        value = float(mean_n @ (np.log(s) + top) - prior @ th)
        E /= s[:, None]
        return value, E

    value, Q = state(theta)
    # F is flat along θ + c1: 11ᵀ/C fills that direction in without changing the step
    flat = np.full((C, C), 1.0 / C)
    for _ in range(int(max_iter)):
        shares = mean_n @ Q
        grad = shares - prior
        if np.max(np.abs(grad)) < tol:
            break
        H = np.diag(shares) - (Q.T @ Q) / n + flat + 1e-12 * np.eye(C)
        step = -np.linalg.lstsq(H, grad, rcond=None)[0]
        if not float(grad @ step) < 0.0:
            step = -grad                    # not a descent direction (rounding): gradient
        # a nearly singular H (nearly certain classes) gives huge steps: cap them
        longest = float(np.max(np.abs(step)))
        if longest > MAX_LOGIT_STEP:
            step *= MAX_LOGIT_STEP / longest
        size = 1.0
        while size > 1e-8:
            new_value, new_Q = state(theta + size * step)
            if new_value <= value - 1e-4 * size * float(-grad @ step):
                break
            size *= 0.5
        else:
            break                           # no step decreases F: at its minimum to rounding
        theta, value, Q = theta + size * step, new_value, new_Q
    w = np.exp(theta - theta.max())
    return w, Q


# -- the least-squares GP classifier -------------------------------------------------------

# prior-to-noise ratio ρ of the least-squares classifier: near Poisson learning's limit while
# a class has one label, else chosen among the candidates (chosen_candidate;
# docs/few_labels.md, "Choosing ρ by the cloud")
RHO_ONE_LABEL = 0.01
RHO_CANDIDATES = (0.3, 3.0, 30.0)
# orders ν chosen among likewise where the graph's mass is uniform, except in a warm-started
# classifier solving by conjugate gradients (docs/few_labels.md, "The order and the spread")
ORDER_CANDIDATES = (1, 2)


def prior_to_noise_ratios(codes, n_classes) -> tuple:
    """``(RHO_ONE_LABEL,)`` while some class holds at most one label, else ``RHO_CANDIDATES``."""
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=int(n_classes))
    return (RHO_ONE_LABEL,) if counts.min() <= 1 else tuple(RHO_CANDIDATES)


def chosen_candidate(values: dict, kept=None):
    """The candidate of least value in ``values = {candidate: value}`` (first on ties), e.g.
    each ``(ν, ρ)``'s :func:`graph_total_variation`. ``kept``: ``{candidate: labels kept}``
    (:func:`labels_kept`) - then only among those keeping the most. ValueError for no
    candidates or a candidate missing from ``kept``."""
    if not values:
        raise ValueError("chosen_candidate needs at least one candidate and its value, "
                         "{candidate: value}; got none.")
    pool = list(values)
    if kept is not None:
        missing = [c for c in pool if c not in kept]
        if missing:
            raise ValueError(f"kept must give every candidate's count of kept labels; "
                             f"missing {missing!r}.")
        most = max(kept[c] for c in pool)
        pool = [c for c in pool if kept[c] == most]
    return min(pool, key=values.get)


def labels_kept(P_labelled, codes) -> int:
    """How many labelled points ``P_labelled`` (one row each, one column a class) give their
    own class (``codes``) as the most probable. ValueError for a bad shape."""
    P = np.asarray(P_labelled, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.int64)
    if P.ndim != 2 or P.shape[0] != codes.size:
        raise ValueError(f"P_labelled must have one row a labelled point ({codes.size}); "
                         f"got shape {P.shape}.")
    return int(np.sum(P.argmax(axis=1) == codes))


def graph_edges(stiffness):
    """``(rows, columns, weights)`` of a graph's edges, each once (``i < j``), from its
    stiffness ``G = D - W`` (:attr:`flgp.graph.PointGraph.stiffness`). ValueError unless
    square."""
    import scipy.sparse as sp

    G = sp.csr_matrix(stiffness)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"graph_edges takes a square stiffness matrix G = D - W (a graph's "
                         f"``stiffness``); got shape {G.shape}.")
    upper = sp.triu(G, k=1).tocoo()
    keep = upper.data < 0
    return upper.row[keep], upper.col[keep], -upper.data[keep]


def graph_total_variation(edges, P, chunk: int = 1 << 14) -> float:
    """Graph total variation ``Σ w_ij ½|p_i - p_j|₁ / Σ w_ij`` of the rows of ``P`` over
    ``edges`` (:func:`graph_edges`): the expected share of edge weight cut by a labelling
    drawn from ``P``, in ``[0, 1]`` (0 without edges). ValueError for malformed input."""
    try:
        rows, cols, weights = (np.asarray(a) for a in edges)
    except (TypeError, ValueError):
        raise ValueError("edges must be (rows, columns, weights), as graph_edges returns "
                         "them.") from None
    if not (rows.ndim == cols.ndim == weights.ndim == 1
            and rows.size == cols.size == weights.size):
        raise ValueError(f"edges must be three 1-d arrays of one length (rows, columns, "
                         f"weights), as graph_edges returns them; got shapes {rows.shape}, "
                         f"{cols.shape}, {weights.shape}.")
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or not np.all(np.isfinite(P)):
        raise ValueError(f"P must be a finite (n_nodes, n_classes) array of probabilities; "
                         f"got shape {P.shape}" + ("" if P.ndim != 2 else " with NaN or "
                                                   "inf") + ".")
    if rows.size and max(int(rows.max()), int(cols.max())) >= P.shape[0]:
        raise ValueError(f"the edges name node {max(int(rows.max()), int(cols.max()))} but P "
                         f"has {P.shape[0]} rows: give one row of P per node of the graph.")
    if not (np.all(np.isfinite(weights)) and np.all(weights >= 0)):
        raise ValueError("the edges' weights must be finite and non-negative.")
    total = float(weights.sum())
    if total <= 0.0:
        return 0.0
    ones = np.ones(P.shape[1])
    cut = 0.0
    for start in range(0, rows.size, chunk):
        stop = start + chunk
        diff = P[rows[start:stop]]
        diff -= P[cols[start:stop]]
        np.abs(diff, out=diff)
        cut += 0.5 * float(weights[start:stop] @ (diff @ ones))
    return cut / total


class LabelledColumns:
    """Store of the prior covariance's columns ``K[:, nodes]`` at labelled nodes, one solve a
    column, so that a later fit with more labels solves for the new columns only.
    ``lower``: the store of the prior one order lower, whose columns are then raised by one
    solve each (:meth:`SparsePrecisionPrior.raise_order`).
    """

    def __init__(self, prior, lower=None):
        if lower is not None and (lower.prior.nu != prior.nu - 1
                                  or lower.prior.graph is not prior.graph):
            raise ValueError(f"lower must hold the same graph's prior one order lower (nu "
                             f"= {prior.nu - 1}); got nu = {lower.prior.nu}.")
        self.prior, self.lower = prior, lower
        self.nodes = np.zeros(0, dtype=np.int64)
        # grows with spare room (a labelling loop adds one column a pick)
        self._store = np.zeros((prior.n_points, 0))
        # the prior variances K_ll known at nodes (labelled_prior_scale)
        self.diagonal = {}

    @property
    def _columns(self) -> np.ndarray:
        return self._store[:, :self.nodes.size]

    def holds(self, node) -> bool:
        """Whether ``K[:, node]`` is held (no solve when asked for)."""
        return bool(np.isin(int(node), self.nodes))

    def _solved(self, new) -> np.ndarray:
        """``K[:, new]`` by solves."""
        if self.lower is None:
            return self.prior.cross_covariance(new)
        amplitude = self.prior.amplitude / self.lower.prior.amplitude
        return amplitude * self.prior.raise_order(self.lower(new))

    def __call__(self, nodes) -> np.ndarray:
        """``K[:, nodes]`` (columns computed where missing)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        new = np.setdiff1d(nodes, self.nodes)
        if new.size:
            held = self.nodes.size
            if held + new.size > self._store.shape[1]:
                room = held + new.size + int(np.clip(held, 16, 128))
                store = np.empty((self._store.shape[0], room))
                store[:, :held] = self._store[:, :held]
                self._store = store
            self._store[:, held:held + new.size] = self._solved(new)
            self.nodes = np.concatenate([self.nodes, new])
        if nodes.size == self.nodes.size and np.array_equal(nodes, self.nodes):
            return self._columns               # all held, in their order: a view, no copy
        where = {int(v): i for i, v in enumerate(self.nodes)}
        return self._store[:, [where[int(v)] for v in nodes]]

    def in_held_order(self, nodes, values):
        """``(nodes, values)`` in the store's order when it holds exactly these nodes (so that
        ``self(nodes)`` is a view), else unchanged."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if nodes.size != self.nodes.size or not np.array_equal(np.sort(nodes),
                                                               np.sort(self.nodes)):
            return nodes, values
        order = np.argsort(nodes, kind="stable")[np.argsort(np.argsort(self.nodes))]
        return nodes[order], np.asarray(values)[order]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["prior"] = None                   # the AMG solver: rebuilt by the next fit
        state["lower"] = None
        state["_store"] = self._columns.copy()  # the held columns only
        return state


class LeastSquaresClassification:
    r"""GP regression of the centred one-hot labels (least-squares classification,
    Rasmussen & Williams 2006, Sec. 6.5) under the centred graph Matérn prior.

    Each class latent ``f_c ~ N(0, A K)`` (``K`` the prior of ``W = K[:, labelled]``),
    targets ``t_ic = 1[y_i = c] - m_c/m`` with Gaussian noise ``σ_c²``; ``ρ = A s / σ²``
    with ``s`` the mean prior variance at the labelled nodes. With ``K̃ = K / s`` and
    ``S = ρ K̃_ll + I``:

    * posterior mean ``μ = ρ K̃_nl S⁻¹ T`` - as ``ρ → 0``, ``ρ K̃_nl T``: the labels as
      centred sources, Poisson learning's solution (Calder et al. 2020) for ``ν = 1``;
      larger ``ρ`` trusts the labels more (kriging as ``ρ → ∞``);
    * its variance ``σ_c² (ρ k̃_xx - ρ² w̃_xᵀ S⁻¹ w̃_x)``, ``σ_c² = T_cᵀ S⁻¹ T_c / m`` (profiled);
    * the log evidence ``Σ_c log N(T_c | 0, σ_c² S)``.

    ``block``: ``K_ll`` itself when ``W`` is None (:func:`raised_models`); the caller then
    gives the mean to :meth:`with_mean`.
    """

    def __init__(self, W, labelled, codes, n_classes, rho, block=None):
        self.labelled = np.asarray(labelled, dtype=np.int64)
        self.codes = np.asarray(codes, dtype=np.int64)
        self.n_classes = C = int(n_classes)
        self.rho = float(rho)
        m = self.labelled.size
        K_ll = (0.5 * (W[self.labelled] + W[self.labelled].T) if block is None
                else np.asarray(block, dtype=np.float64))
        self.scale = float(np.mean(np.diag(K_ll))) or 1.0
        T = np.eye(C)[self.codes]
        self.targets = T - T.mean(axis=0)
        S = self.rho * K_ll / self.scale + np.eye(m)
        self._chol = scipy.linalg.cho_factor(S, lower=True)
        self.alpha = scipy.linalg.cho_solve(self._chol, self.targets)
        self.mean = None if W is None else (self.rho / self.scale) * (W @ self.alpha)
        quad = np.einsum("ic,ic->c", self.targets, self.alpha)
        # a class without labels: the labelled classes' mean noise, no term in the evidence
        has = np.bincount(self.codes, minlength=C) > 0
        noise = np.maximum(quad, 1e-300) / m
        noise[~has] = noise[has].mean()
        self.noise = noise
        log_det = 2.0 * float(np.log(np.diag(self._chol[0])).sum())
        self.log_evidence = float(np.sum(-0.5 * m * (np.log(2 * np.pi * noise[has]) + 1.0))
                                  - 0.5 * int(has.sum()) * log_det)

    def with_mean(self, product) -> "LeastSquaresClassification":
        """This model with its mean ``(ρ / s) product``, ``product = K[:, labelled] α``."""
        self.mean = (self.rho / self.scale) * np.asarray(product, dtype=np.float64)
        return self

    def node_unit_variances(self, columns) -> np.ndarray:
        """:meth:`unit_variances` at every node from the model's :class:`LabelledColumns`
        (which keeps the prior's marginal variances)."""
        if getattr(columns, "prior_variances", None) is None:
            columns.prior_variances = columns.prior.marginal_variances()
        return self.unit_variances(columns(self.labelled), columns.prior_variances)

    def unit_variances(self, W_rows, prior_variances) -> np.ndarray:
        """``ρ k̃_xx - ρ² w̃_xᵀ S⁻¹ w̃_x`` at rows with ``W_rows = K[rows, labelled]`` and
        prior variances ``k_xx`` (multiply by ``noise[c]`` for class ``c``)."""
        Wt = np.asarray(W_rows) / self.scale
        V = scipy.linalg.solve_triangular(self._chol[0], Wt.T, lower=True)
        explained = np.einsum("ij,ij->j", V, V)
        return np.maximum(self.rho * np.asarray(prior_variances) / self.scale
                          - self.rho ** 2 * explained, 0.0)


def labelled_classes(codes, n_classes):
    """``(solved, last)``: the labelled classes but the last, whose means are solved for, and
    the last, whose mean is minus their sum; unlabelled classes have mean 0."""
    has = np.flatnonzero(np.bincount(codes, minlength=int(n_classes)) > 0)
    return has[:-1], has[-1]


def all_classes(solved_means, solved, last, n_classes) -> np.ndarray:
    """``(n, C)`` means from those of the ``solved`` classes (:func:`labelled_classes`)."""
    out = np.zeros((solved_means.shape[0], int(n_classes)))
    out[:, solved] = solved_means
    out[:, last] = -solved_means.sum(axis=1)
    return out


def raised_models(columns, labelled, codes, n_classes, ratios) -> list:
    """:class:`LeastSquaresClassification` of order ``ν >= 2`` for each ratio from lower
    orders' columns: ``K_ν = K_1 C K_{ν-1}`` (centred priors, uniform mass), so the block is
    ``W₁ᵀ C W_{ν-1}`` and the mean ``K_1 (C W_{ν-1} α)`` one order-1 solve a class.
    ``columns``: the order-``ν`` store; labels come in the lower store's order."""
    lower = columns.lower
    base = lower
    while base.lower is not None:
        base = base.lower
    lower(labelled)
    base(labelled)
    nodes, node_codes = lower.in_held_order(labelled, codes)
    W_low, W_one = lower(nodes), base(nodes)
    mass = columns.prior._mass
    block = W_one.T @ (mass[:, None] * W_low)
    block = 0.5 * (block + block.T)
    C = int(n_classes)
    models = [LeastSquaresClassification(None, nodes, node_codes, C, rho, block=block)
              for rho in ratios]
    solved, last = labelled_classes(node_codes, C)
    weights = np.column_stack([model.alpha[:, solved] for model in models])
    image = base.prior.apply_inverse(mass[:, None] * (W_low @ weights))
    for k, model in enumerate(models):
        part = image[:, k * solved.size:(k + 1) * solved.size]
        model.with_mean(all_classes(part, solved, last, C))
    return models


# labelled_prior_scale: SCALE_BLOCK nodes at a time to a relative standard error
# SCALE_RELATIVE_ERROR; solves to SCALE_TOL (a diagonal entry within ~1 %)
SCALE_BLOCK = 8
SCALE_RELATIVE_ERROR = 0.05
SCALE_TOL = 0.1


def labelled_prior_scale(columns, labelled, random_state=0) -> tuple:
    """``(s, standard error, nodes used)``: the mean prior variance at the labelled nodes
    (one term an observation), from exact variances at random labelled nodes, ``SCALE_BLOCK``
    at a time, until the relative standard error is below ``SCALE_RELATIVE_ERROR``.
    ``columns``: a :class:`LabelledColumns` (its ``diagonal`` keeps the variances).
    ValueError for no or out-of-range nodes."""
    labelled = np.asarray(labelled, dtype=np.int64).ravel()
    n = columns.prior.n_points
    if labelled.size == 0 or labelled.min() < 0 or labelled.max() >= n:
        raise ValueError(f"labelled must hold at least one node index in [0, {n}); got "
                         f"{labelled.size} index(es).")
    nodes, counts = np.unique(labelled, return_counts=True)
    order = np.random.default_rng(random_state).permutation(nodes.size)
    known = columns.diagonal
    taken = 0
    while True:
        stop = min(nodes.size, taken + SCALE_BLOCK)
        block = nodes[order[taken:stop]]
        todo = np.array([v for v in block if int(v) not in known], dtype=np.int64)
        if todo.size:
            K = columns.prior.cross_covariance(todo, tol=SCALE_TOL)
            known.update(zip(todo.tolist(), K[todo, np.arange(todo.size)].tolist()))
        taken = stop
        picked = order[:taken]
        values = np.array([known[int(v)] for v in nodes[picked]])
        w = counts[picked].astype(np.float64)
        scale = float(w @ values / w.sum())
        if taken == nodes.size:
            return scale, 0.0, taken
        spread = float(np.std(values, ddof=1)) if taken > 1 else np.inf
        error = spread / np.sqrt(taken) * np.sqrt(1.0 - taken / nodes.size)
        if error <= SCALE_RELATIVE_ERROR * abs(scale):
            return scale, error, taken


class PrecisionLeastSquares:
    r""":class:`LeastSquaresClassification`'s model through the sparse posterior precision
    (:class:`~flgp.precision.centred_posterior.CentredPosterior`), noise precision
    ``c = ρ / s`` (``s``: :func:`labelled_prior_scale`): ``C - 1`` solves for any number of
    labels.

    * posterior mean ``c P Q̂⁻¹ Hᵀ T``;
    * residuals ``S⁻¹ T = T - μ_l`` (``S = ρ K̃_ll + I``), hence the profiled noise
      ``σ_c² = T_cᵀ S⁻¹ T_c / m`` without the labelled block;
    * log evidence with ``log|S| = log|Q̂| - log|Q_ν|`` from the factors (None where the
      prior solves by conjugate gradients);
    * latent variances ``c diag(P Q̂⁻¹ P)`` by Rao-Blackwellised Monte Carlo and posterior
      covariance columns by one solve each.
    """

    def __init__(self, prior, labelled, codes, n_classes, rho, scale):
        self.labelled = np.asarray(labelled, dtype=np.int64)
        self.codes = np.asarray(codes, dtype=np.int64)
        self.n_classes = C = int(n_classes)
        self.rho, self.scale = float(rho), float(scale)
        m = self.labelled.size
        n = prior.n_points
        T = np.eye(C)[self.codes]
        self.targets = T - T.mean(axis=0)
        c = self.rho / self.scale
        self.posterior = CentredPosterior(prior, np.bincount(self.labelled, minlength=n)
                                          .astype(np.float64), c)
        solved, last = labelled_classes(self.codes, C)
        B = np.zeros((n, solved.size))
        np.add.at(B, self.labelled, self.targets[:, solved])
        self.mean = all_classes(c * self.posterior.solve(B), solved, last, C)
        has = np.bincount(self.codes, minlength=C) > 0
        self.alpha = self.targets - self.mean[self.labelled]
        quad = np.einsum("ic,ic->c", self.targets, self.alpha)
        noise = np.maximum(quad, 1e-300) / m
        noise[~has] = noise[has].mean()
        self.noise = noise
        log_det = self.posterior.log_det_ratio()
        self.log_evidence = (None if log_det is None else float(
            np.sum(-0.5 * m * (np.log(2 * np.pi * noise[has]) + 1.0))
            - 0.5 * int(has.sum()) * log_det))

    def node_unit_variances(self, columns=None, n_samples=None) -> np.ndarray:
        """``c diag(P Q̂⁻¹ P)`` at every node (times ``noise[c]`` for class ``c``) from
        ``n_samples`` Rao-Blackwellised draws (default: the prior's)."""
        if n_samples is None:
            n_samples = (LARGE_VARIANCE_SAMPLES if self.posterior.factored
                         else AMG_VARIANCE_SAMPLES)
        var, _ = self.posterior.variances(n_samples, random_state=0)
        return self.posterior.c * np.maximum(var, 0.0)
