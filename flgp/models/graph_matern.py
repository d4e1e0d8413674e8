"""The estimators' full-resolution representation (``method="graph_matern"``,
:mod:`flgp.models.representation`): the graph Matérn prior on the given graph (``graph=``)
or a k-nearest-neighbour graph of the cloud.

* Regression (:class:`GraphMaternRegression`): fitted by its exact evidence
  (:func:`flgp.precision.gaussian.fit_matern`), predicting by the nodes' posterior
  (:class:`flgp.precision.NodePosterior`); docs/full_resolution.md.
* Classification (:class:`GraphMaternClassification`): class scores from the prior's
  small-amplitude limit, probabilities re-weighted to the class-size prior
  (:mod:`flgp.precision.classification`); docs/few_labels.md.
"""

from __future__ import annotations

import warnings
from itertools import product

import numpy as np

from .._chunks import is_lazy, stage
from .._config import physical_memory
from .._validation import integer_seed
from ..backends import cpu_threads, limit_blas_threads
from ..graph import Pieces
from ..graph.knn import NeighborIndex, knn_point_graph, self_tuning_knn_graph
from ..precision.classification import (KAPPA_RELATIVE, ORDER_CANDIDATES, RHO_CANDIDATES,
                                        SCALE_BLOCK,
                                        SOLVE_TOL, LabelledColumns,
                                        LeastSquaresClassification, PrecisionLeastSquares,
                                        balance_to_prior, class_size_prior,
                                        chosen_candidate, graph_edges,
                                        graph_total_variation, labelled_prior_scale,
                                        labels_kept, prior_to_noise_ratios, raised_models,
                                        score_scale, scores_to_probabilities)
from ..precision.prior import SparsePrecisionPrior
from ..precision.gaussian import (FACTOR_MAX_NODES, MaternRegression,
                                  cross_validated_amplitude, exhaust, factors,
                                  fit_matern_steps)
from ..precision.matern import MATERN_ORDERS
from ..precision.posterior import NodePosterior
from .eigenbasis import FAR_FACTOR
from .labelling import (graph_edge_lengths, score_margin_uncertainty,
                        spread_by_graph_distance, uncertainty_scores)
from .representation import (ClassificationFit, ClassificationRepresentation, Infeasible,
                             RegressionFit, RegressionRepresentation, Screened)

__all__ = ["GraphMaternRegression", "GraphMaternRegressionFit", "GraphMaternClassification",
           "GraphMaternClassificationFit", "GRAPH_MATERN_MAX_NODES", "KNN_GRAPH_MATERN_MAX_DIM",
           "GRAPH_MATERN_CLASSIFIER_SECONDS", "CLASSIFIER_FACTOR_3D_NODES", "classifier_solver",
           "classifier_cost", "solve_plan"]

# method="auto" weighs the graph Matérn prior on the k-NN graph of X (no graph= given) up to
# this many points (its hyperparameters are searched on the whole graph) and features
GRAPH_MATERN_MAX_NODES = 32_000
KNN_GRAPH_MATERN_MAX_DIM = 16
# neighbours of the default k-NN point graphs (graphlearning's and Poisson learning's)
GRAPH_MATERN_NEIGHBOURS = 10
# the classifier's method="auto" takes the full-resolution classifier where classifier_cost
# predicts at most this many seconds and this share of the machine's memory
GRAPH_MATERN_CLASSIFIER_SECONDS = 25.0
GRAPH_MATERN_CLASSIFIER_MEMORY_SHARE = 0.5
# classifier_cost's constants (measured on a 2-core machine): seconds a point of the 10-NN
# graph's search (k-d tree up to 16 coordinates; buckets beyond, per coordinate), of the
# multigrid set-up, of one conjugate-gradient iteration and of a candidate's probabilities
# per class; iterations a solve (low-dimensional clouds need more); bytes a point and a
# point and class
KNN_SECONDS_TREE, KNN_SECONDS_BUCKET_PER_COORDINATE = 6.5e-6, 0.4e-6
MULTIGRID_SETUP_SECONDS, ITERATION_SECONDS = 5e-6, 0.16e-6
CANDIDATE_SECONDS_PER_CLASS = 0.6e-6
SOLVE_ITERATIONS_TREE, SOLVE_ITERATIONS_BUCKET = 15, 6
BYTES_PER_POINT, BYTES_PER_POINT_AND_CLASS = 2000, 80
# draws of the Rao-Blackwellised variance estimator (relative standard error ~5-10 %)
GRAPH_MATERN_VARIANCE_SAMPLES = 64
# the classifier's prior solves by a CHOLMOD factor (exact) where that is cheap - points of
# at most two coordinates (up to FACTOR_MAX_NODES nodes), or three up to this many nodes -
# else by AMG-preconditioned conjugate gradients (a factor fills in with the cloud's
# dimension; AMG needs more iterations on curves and surfaces)
CLASSIFIER_FACTOR_3D_NODES = 50_000
# The classifier's two forms of one model (flgp.precision.classification): the labelled
# block ("columns": a prior solve a label and order, kept so that a refit solves for new
# labels only; exact scale) or the posterior precision ("precision": C - 1 solves a ratio,
# flgp.precision.centred_posterior; scale estimated to 5 %), taken where it costs at most
# 1 / PRECISION_ADVANTAGE of the columns' solves. A numeric factorisation of the posterior
# precision counts as this many solves (measured on 10,000-50,000-point clouds)
FACTORISATION_SOLVES = {1: 40, 2: 200}
PRECISION_ADVANTAGE = 2.0
# with conjugate gradients order 2 has no posterior-precision form (no preconditioner for
# its fourth-order system converges fast): its block needs order 1's columns, a solve a
# label, and it is weighed while that costs at most this many times order 1's cheaper form
ORDER_TWO_COST_RATIO = 4.0
# the cross-validated amplitude's factor on the evidence's is used within this range only
# (typically 0.8-1.05); beyond it the two disagree too far and the evidence's is kept
CV_SCALE_RANGE = (0.1, 10.0)


def classifier_cost(n_points: int, n_features: int, counts, graph_given: bool = False):
    """``(seconds, bytes)`` the full-resolution classifier's fit is predicted to take from
    the cloud's shape and the label ``counts`` a class (graph search, multigrid set-up,
    :func:`solve_plan`'s solves at order 1, candidates' probabilities; overstated on a
    factored graph). Raises ValueError for an empty cloud or fewer than two classes."""
    n, p = int(n_points), int(n_features)
    counts = np.asarray(counts, dtype=np.int64).ravel()
    if n < 1 or p < 1:
        raise ValueError(f"classifier_cost needs a cloud of at least one point and one "
                         f"coordinate; got n_points={n_points!r}, n_features={n_features!r}.")
    if counts.size < 2 or np.any(counts < 0) or counts.sum() < 1:
        raise ValueError(f"counts must give the labels of each of at least two classes "
                         f"(non-negative, some positive), e.g. np.bincount(codes); got "
                         f"{counts.tolist()!r}.")
    m, C = int(counts.sum()), int(counts.size)
    ratios = 1 if counts.min() <= 1 else len(RHO_CANDIDATES)
    tree = p <= KNN_GRAPH_MATERN_MAX_DIM
    seconds = 0.0 if graph_given else n * (
        KNN_SECONDS_TREE if tree else KNN_SECONDS_BUCKET_PER_COORDINATE * p)
    seconds += MULTIGRID_SETUP_SECONDS * n
    # solve_plan's count (the scale's solves at SCALE_TOL take about a third of a solve)
    counted = PRECISION_ADVANTAGE * (ratios * (C - 1) + 2 * SCALE_BLOCK / 3.0)
    raised = m + ratios * (C - 1)           # order 1's columns, order 2's means
    both = raised if raised <= ORDER_TWO_COST_RATIO * min(m, counted) else None
    # columns are solved several at once on threads (a ratio's C - 1 together)
    threads = max(1, cpu_threads())
    if both is not None or m <= counted:
        rounds = np.ceil((both if both is not None else m) / threads)
    else:
        rounds = ratios * np.ceil((C - 1) / threads) + 2 * SCALE_BLOCK / 3.0 / threads
    iterations = SOLVE_ITERATIONS_TREE if tree else SOLVE_ITERATIONS_BUCKET
    seconds += rounds * iterations * ITERATION_SECONDS * n
    candidates = ratios * (2 if both is not None else 1)
    seconds += candidates * CANDIDATE_SECONDS_PER_CLASS * n * C
    stored = m if both is not None or m <= counted else 0
    memory = n * (BYTES_PER_POINT + BYTES_PER_POINT_AND_CLASS * C + 8 * stored)
    return float(seconds), float(memory)


def classifier_solver(graph) -> str:
    """``"cholesky"`` or ``"amg"``: how the classifier's prior solves on ``graph``
    (``CLASSIFIER_FACTOR_3D_NODES``'s note)."""
    points = getattr(graph, "points", None)
    if points is None or np.ndim(points) != 2:
        return "amg"
    n, p = graph.n_nodes, np.shape(points)[1]
    if (p <= 2 and n <= FACTOR_MAX_NODES) or (p == 3 and n <= CLASSIFIER_FACTOR_3D_NODES):
        return "cholesky"
    return "amg"


def _prior_probabilities(class_prior, n_classes: int) -> np.ndarray:
    """The class prior, or equal shares without one."""
    if class_prior is None:
        return np.full(n_classes, 1.0 / n_classes)
    return np.asarray(class_prior, dtype=np.float64)


def _pieces_without_labels(graph, labelled):
    """``(piece of each node, piece sizes, whether each piece holds a labelled node)``, or
    None when every piece holds one."""
    n_pieces, labels = graph.pieces()
    if n_pieces == 1:
        return None
    has = np.zeros(n_pieces, dtype=bool)
    has[labels[labelled]] = True
    if has.all():
        return None
    return labels, np.bincount(labels, minlength=n_pieces), has


class GraphMaternRegression(RegressionRepresentation):
    """The graph Matérn prior on the point graph (see the module notes)."""

    name = "graph_matern"

    def infeasible(self, prior, options, shape, n_labelled):
        """A k-NN graph in more than 16 dimensions (its factor fills in) or of more than
        ``GRAPH_MATERN_MAX_NODES`` points; never when a graph is given."""
        if prior.graph is not None:
            return None
        n, p = shape
        if n < 3:
            return f"{n} points: a k-NN graph needs at least 3"
        if p > KNN_GRAPH_MATERN_MAX_DIM:
            return (f"{p} features > {KNN_GRAPH_MATERN_MAX_DIM}: a k-NN graph in high dimension "
                    f"has no sparse Cholesky factor worth its fill; pass graph= to use one")
        if n > GRAPH_MATERN_MAX_NODES:
            return (f"{n} points > GRAPH_MATERN_MAX_NODES = {GRAPH_MATERN_MAX_NODES} for a "
                    f"k-NN graph; pass graph= to use one")
        return None

    def sole_reason(self, prior, options):
        """A given graph beyond a factor's reach (:func:`~flgp.precision.gaussian
        .factors`): it has no whole-graph evidence to compare."""
        if prior.graph is None or factors(prior.graph.n_nodes):
            return None
        return (f"the graph has {prior.graph.n_nodes} nodes, beyond a factor's reach "
                f"(FACTOR_MAX_NODES = {FACTOR_MAX_NODES}, or half the machine's memory): "
                f"the graph Matérn prior's evidence is that of a ball, not comparable; it "
                f"predicts")

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation):
        """The fit on the prior's ``graph`` (checked against ``X``), else on
        :func:`flgp.graph.knn_point_graph` of ``X``, over the orders ``nu`` (None: all of
        ``MATERN_ORDERS``)."""
        with stage("graph_matern"):
            return exhaust(self._steps(prior, options, X, labelled, z, standardisation,
                                       screen=False))

    def screen(self, prior, options, X, labelled, y_lab, z, standardisation):
        """:meth:`fit` paused after the first order's starting grid where the search runs
        on the whole graph (:func:`flgp.precision.gaussian.fit_matern_steps`)."""
        m = labelled.size
        return Screened.of_steps(
            self._steps(prior, options, X, labelled, z, standardisation, screen=True),
            lambda value: standardisation.log_evidence_of_y(value, m), lambda fit: fit)

    def _steps(self, prior, options, X, labelled, z, standardisation, screen):
        """The fit as a generator (:func:`flgp.precision.gaussian.fit_matern_steps`) that
        returns the :class:`GraphMaternRegressionFit`."""
        if prior.graph is not None:
            graph = prior.graph.check_rows(X)
        else:
            try:
                graph = knn_point_graph(X, min(GRAPH_MATERN_NEIGHBOURS, X.shape[0] - 1))
            except ValueError as exc:
                raise Infeasible(f"the graph Matérn prior's k-NN graph of X: {exc}") from exc
        nus = MATERN_ORDERS if prior.nu is None else (int(prior.nu),)
        noise = (None if options.noise is None
                 else standardisation.variance_of_z(options.noise))
        fit, reg, by_order = yield from fit_matern_steps(
            graph, labelled, z, nus=nus, noise=noise, verbose=options.verbose, screen=screen)
        m = labelled.size
        seed = integer_seed(options.random_state)
        out = GraphMaternRegressionFit(
            graph, fit, reg, standardisation,
            standardisation.log_evidence_of_y(fit.log_evidence, m),
            {nu: standardisation.log_evidence_of_y(f.log_evidence, m)
             for nu, f in by_order.items()},
            seed, labelled)
        # the targets the amplitude is cross-validated on (a fixed noise fixes it)
        out.targets = None if options.noise is not None else (np.asarray(labelled), z)
        return out


def cross_validated_scale(regression, z, mean_observed, ratio, amplitude,
                          variance_observed) -> float:
    """The factor from the evidence's amplitude to the cross-validated one
    (:func:`flgp.precision.gaussian.cross_validated_amplitude`, of the standardised targets
    ``z`` at the observed nodes; docs/images.md, "Intervals"), after ``regression``'s
    variances: their observed sum at unit amplitude is the regression's (exact where its
    Monte Carlo error would leave the denominator imprecise), else ``variance_observed``'s
    (the variances at the observed nodes at ``amplitude``). 1 where the regression gives no
    standard error, outside ``CV_SCALE_RANGE``, or where the Monte Carlo error leaves it
    undetermined."""
    sum_se = getattr(regression, "observed_sum_se", None)
    if sum_se is None:
        return 1.0
    total = getattr(regression, "observed_sum", None)
    if total is None:
        total = float(np.sum(variance_observed)) / amplitude
    cv = cross_validated_amplitude(z, mean_observed, ratio, total, sum_se)
    if cv is None or not CV_SCALE_RANGE[0] <= cv / amplitude <= CV_SCALE_RANGE[1]:
        return 1.0
    return cv / amplitude


class GraphMaternRegressionFit(RegressionFit):
    """A fitted graph Matérn prior: the search's result (``fit``) and ``regression`` until
    its fitted attributes are taken, then the nodes' posterior (``node_posterior``) it
    predicts with; ``nu`` and ``labelled`` for suggestions."""

    method = "graph_matern"
    # (observed nodes, standardised targets) for the cross-validated amplitude, or None
    targets = None

    def __init__(self, graph, fit, regression, standardisation, log_evidence, by_order,
                 random_state, labelled):
        self.graph, self.fit, self.regression = graph, fit, regression
        self.standardisation = standardisation
        self.log_evidence, self.by_order = log_evidence, by_order
        self.random_state = random_state
        self.labelled, self.nu = np.asarray(labelled), fit.nu
        self.node_posterior = None

    def fitted_attributes(self, X, stacklevel):
        """The graph, order, ``κ``, hyperparameters, the nodes' posterior and the
        transduction. Amplitude and noise are the evidence's times the cross-validated
        scale ``c``, ``log_marginal_likelihood_`` the evidence there,
        ``log N(z | 0, A S) - m/2 (log c + 1/c - 1)``; the evidence's own optimum stays in
        ``matern_log_evidence_``, ``log_evidence_`` and ``evidence_outputscale_``."""
        fit, st = self.fit, self.standardisation
        graph = self.graph
        out = dict(method_="graph_matern", graph_=graph, matern_order_=fit.nu,
                   matern_kappa_=fit.kappa, matern_log_evidence_=self.by_order,
                   n_iter_=self.regression.n_evaluations)
        with stage("graph Matérn variances"):
            var, se = self.regression.variances(fit, n_samples=GRAPH_MATERN_VARIANCE_SAMPLES,
                                                random_state=self.random_state)
        scale = self._cross_validated_scale(fit, var, se)
        var, se = scale * var, scale * se
        m = self.labelled.size
        out["log_marginal_likelihood_"] = self.log_evidence - 0.5 * m * (
            np.log(scale) + 1.0 / scale - 1.0)
        out["amplitude_cv_scale_"] = scale
        # the amplitude of A Q_ν(κ)⁻¹ with Q_ν built on the graph as given (its units)
        evidence_outputscale = st.variance_of_y(float(fit.amplitude_in_graph_units))
        out["evidence_outputscale_"] = evidence_outputscale
        out["outputscale_"] = scale * evidence_outputscale
        # κ², noise-to-amplitude ratio, a unit amplitude's variance in y² (graph's own units)
        self.kappa2, self.ratio = float(fit.kappa2), float(fit.ratio)
        self.variance_unit = st.variance_of_y(scale * fit.amplitude)
        self._noise_pre = st.variance_pre(scale * fit.noise)
        out["noise_"] = st.variance_of_y(scale * fit.noise)
        out["transduction_std_error_"] = (st.scale * 0.5 * se
                                          / np.sqrt(np.maximum(var, 1e-300)))
        mean = st.mean + st.scale * fit.mean
        sd = st.scale * np.sqrt(np.maximum(var, 0.0))
        self.node_posterior = NodePosterior(graph.points, mean, sd, graph.spacing)
        # only the nodes' posterior predicts: the factor (not picklable) goes
        self.fit = self.regression = None
        out["transduction_"], out["transduction_std_"] = mean, sd
        unlabelled = _pieces_without_labels(graph, self.labelled)
        if unlabelled is not None:
            _, sizes, has = unlabelled
            warnings.warn(f"the graph falls apart into {has.size} pieces; "
                          f"{int(sizes[~has].sum())} point(s) lie in "
                          f"{int((~has).sum())} piece(s) without an observed target and "
                          f"get the prior (the mean of the targets, a wide sd). Observe "
                          f"a point there, or connect the graph.", UserWarning,
                          stacklevel=stacklevel + 1)
        return out

    def _cross_validated_scale(self, fit, var, se) -> float:
        """:func:`cross_validated_scale` of this fit: 1 with a fixed noise."""
        if self.targets is None:
            return 1.0
        observed, z = self.targets
        return cross_validated_scale(self.regression, z, fit.mean[observed], fit.ratio,
                                     float(fit.amplitude), var[observed])

    def predict(self, X, stacklevel):
        """The posterior of the nearest nodes of ``X``, warning for points far from all."""
        post = self.node_posterior
        mean, std = post.at(X)
        d2 = post.nearest_sq_distances(X)
        reach = FAR_FACTOR * 2.0 * post.spacing
        far = d2 > reach * reach
        if far.any():
            warnings.warn(f"{int(far.sum())} of {X.shape[0]} new point(s) lie farther than "
                          f"{reach:.3g} (three times two graph spacings) from every node of "
                          f"the fitted graph, up to {np.sqrt(d2.max()):.3g}: their "
                          f"predictions are the nearest nodes' (extrapolations).",
                          UserWarning, stacklevel=stacklevel + 1)
        return mean, std

    def interval_noise(self):
        return self.standardisation.unit, self._noise_pre

    def suggest(self, index, n, strategy, uncertainty):
        """``n`` rows of ``index`` (unlabelled nodes) to label next by ``"std"``: largest
        posterior sd (``uncertainty``) first, the batch spread greedily by conditioning on
        each pick; unspread on graphs not factored. Raises ValueError for another
        ``strategy``."""
        if strategy != "std":
            raise ValueError(f"the graph Matérn regressor suggests by 'std' (its default) "
                             f"or 'random'; 'variance_reduction' needs every candidate's "
                             f"covariance with the cloud, a sparse solve each; got "
                             f"{strategy!r}.")
        base = np.asarray(uncertainty, dtype=np.float64)[index]
        if n == 1 or not factors(self.graph.n_nodes):
            return index[np.argsort(-base, kind="stable")[:n]]
        observed = np.asarray(self.labelled, dtype=np.int64)
        regression = MaternRegression(self.graph.in_own_units(), observed,
                                    np.zeros(observed.size), int(self.nu))
        v0 = np.maximum(base ** 2, 1e-300)
        picks, cov = [], np.zeros((index.size, 0))
        score = base.copy()
        with limit_blas_threads(1):
            for _ in range(int(n)):
                p = int(np.argmax(score))
                picks.append(p)
                column = regression.unit_posterior_columns(self.kappa2, self.ratio,
                                                           [index[p]])[index, 0]
                cov = np.column_stack([cov, self.variance_unit * column])
                sel = np.array(picks)
                B = cov[sel] + 1e-9 * max(float(np.max(np.diag(cov[sel]))), 1e-300) \
                    * np.eye(sel.size)
                explained = np.einsum("ij,ji->i", cov, np.linalg.solve(B, cov.T))
                score = base * np.sqrt(np.clip(1.0 - explained / v0, 0.0, 1.0))
                score[sel] = -np.inf
        return index[np.array(picks, dtype=np.int64)]


# -- classification --------------------------------------------------------------------------

class GraphMaternClassification(ClassificationRepresentation):
    """The full-resolution classifier (see the module notes)."""

    name = "graph_matern"

    def chosen_by_auto(self, prior, options, X, counts):
        """A numpy cloud (or a given graph) without given induced points whose fit
        :func:`classifier_cost` predicts within ``GRAPH_MATERN_CLASSIFIER_SECONDS`` and
        ``GRAPH_MATERN_CLASSIFIER_MEMORY_SHARE`` of the memory (docs/few_labels.md)."""
        if is_lazy(X) or options.induced_points_given:
            return False
        seconds, memory = classifier_cost(X.shape[0], X.shape[1], counts,
                                          graph_given=prior.graph is not None)
        return bool(seconds <= GRAPH_MATERN_CLASSIFIER_SECONDS
                    and memory <= GRAPH_MATERN_CLASSIFIER_MEMORY_SHARE * physical_memory())

    def declined_by_auto(self, prior, options, X, counts):
        if is_lazy(X):
            return ("a dask (or zarr) cloud: the full-resolution classifier solves on the "
                    "whole graph in memory; the heat kernel's engine runs on dask blocks")
        if options.induced_points_given:
            return "induced_points given: they are the heat kernel's engine's"
        seconds, memory = classifier_cost(X.shape[0], X.shape[1], counts,
                                          graph_given=prior.graph is not None)
        return (f"its fit is predicted to take {seconds:.0f} s and {memory / 2**30:.1f} GB "
                f"here (classifier_cost), beyond GRAPH_MATERN_CLASSIFIER_SECONDS = "
                f"{GRAPH_MATERN_CLASSIFIER_SECONDS:.0f} s or half of the machine's "
                f"{physical_memory() / 2**30:.0f} GB: the low-rank heat kernel instead "
                f"(pass GraphMaternPrior() alone to fit it anyway)")

    def _engine(self, prior, options, X):
        """``(graph, {order ν: LabelledColumns})``: ``graph=`` checked against ``X``, else
        the self-tuning k-NN graph of ``X``, and the centred prior's column stores of the
        orders to fit (the prior's ``nu``, else ``ORDER_CANDIDATES``), from
        ``options.cache.graph_matern`` when the previous fit's. Raises ValueError for
        ``nu > 1`` on a graph whose mass varies."""
        key = None
        seed = integer_seed(options.random_state)
        if options.warm_start or options.keep_graph:
            # the cloud's fingerprint from the start of this fit (one read of X a fit)
            key = ((None if options.cloud_key is None else (options.cloud_key, seed)),
                   id(prior.graph), prior.nu)
            cached = options.cache.graph_matern
            if cached is not None and cached[0] == key and isinstance(cached[2], dict) \
                    and all(store.prior is not None for store in cached[2].values()):
                return cached[1], cached[2]
        if prior.graph is not None:
            graph = prior.graph.check_rows(X)
        else:
            with stage("graph"):
                graph = self_tuning_knn_graph(X, min(GRAPH_MATERN_NEIGHBOURS, X.shape[0] - 1),
                                              random_state=seed)
        uniform = not np.ptp(graph.mass) > 0
        solver = classifier_solver(graph)
        if prior.nu is not None:
            nu = int(prior.nu)
            if nu > 1 and not uniform:
                raise ValueError(f"matern_order={nu} needs a graph of uniform mass (a "
                                 f"lattice, or a k-NN graph such as flgp.graph"
                                 f".self_tuning_knn_graph): the prior has no constant mode "
                                 f"only there. This graph's masses vary (a {graph.kind} "
                                 f"graph); use matern_order=1 or None (the default).")
            orders = (nu,)
        else:
            # the order is chosen where its second solve a label is cheap: a factored
            # prior, or a fresh fit by conjugate gradients; a warm-started classifier (the
            # labelling loop) would pay every order's solves at each refit: order 1 only
            orders = (tuple(ORDER_CANDIDATES)
                      if uniform and (solver == "cholesky" or not options.warm_start)
                      else (1,))
        chain = _column_stores(graph, max(orders))
        stores = {nu: chain[nu - 1] for nu in orders}
        if key is not None:
            options.cache.graph_matern = (key, graph, stores)
        return graph, stores

    def fit(self, prior, options, X, labelled, codes, classes):
        """The least-squares GP classifier under the centred prior
        (:class:`flgp.precision.classification.LeastSquaresClassification`), choosing among
        the candidate orders and ratios that keep the most labels the one whose
        probabilities vary least across the graph's edges."""
        C, observed = classes.size, labelled
        graph, stores = self._engine(prior, options, X)
        # pieces of the graph that hold no label get the prior
        pieces = _pieces_without_labels(graph, labelled)
        informed = None if pieces is None else pieces[2][pieces[0]]
        # class shares from randomly sampled labels only, not from suggested rows
        sampled = ~np.isin(labelled, options.suggested)
        class_prior = (None if options.class_prior is None else
                       class_size_prior(codes[sampled], C, options.class_prior))
        ratios = prior_to_noise_ratios(codes, C)
        # classes named in class_prior that no label has
        named_only = np.bincount(codes, minlength=C) == 0
        # a point labelled with several classes (copies of one row): every copy observes
        # every class, so that no candidate gains by setting the copies apart
        labelled, codes, clear = _shared_labels(graph.points, labelled, codes)
        plan = solve_plan(stores, labelled, C, ratios)
        edges = graph_edges(graph.stiffness) if len(plan) * len(ratios) > 1 else None
        best, variations, kept = None, {}, {}
        with stage("scores"):
            for nu, form in plan.items():
                for rho, model in _models(stores[nu], form, labelled, codes, C, ratios):
                    # the previous candidate's class weights start the balance
                    scored = (nu, model, *_node_probabilities(
                        model, labelled, informed, class_prior, C,
                        start=None if best is None else np.maximum(best[4], 1e-300),
                        named_only=named_only))
                    if edges is not None:
                        variations[(nu, rho)] = graph_total_variation(edges, scored[5])
                        # a point given several classes cannot keep all: not counted
                        kept[(nu, rho)] = labels_kept(scored[5][labelled[clear]],
                                                      codes[clear])
                        if best is not None and \
                                chosen_candidate(variations, kept) != (nu, rho):
                            continue
                    best = scored
        nu, model, U, scale, class_weights, P = best
        reach = None
        if named_only.any():
            # the classes no label has: their share where the labels do not reach
            reach = _label_reach(P)
            if informed is not None:
                reach[~informed] = 0.0
            P = _with_prior_beyond_reach(P, reach, class_prior)
        return GraphMaternClassificationFit(graph, nu, U, scale, class_prior,
                                            class_weights, P, model, stores[nu], pieces,
                                            variations or None, plan, reach, classes,
                                            observed)


def solve_plan(stores, labelled, n_classes, ratios) -> dict:
    """``{order: "columns" | "precision"}``: the form of fewest solves in which each order
    of ``stores`` (:class:`~flgp.precision.classification.LabelledColumns`) is fitted for
    these labels, the precision form's solves counted ``PRECISION_ADVANTAGE`` times
    (``FACTORISATION_SOLVES``). The labelled block costs a solve per label not held at each
    order below (order ``ν``'s block is ``W₁ᵀ C W_{ν-1}``), the posterior precision
    ``C - 1`` a ratio. With conjugate gradients order 2 is dropped beyond
    ``ORDER_TWO_COST_RATIO`` times order 1's cost; a graph whose mass varies has no
    precision form (``P`` and ``Q`` must commute)."""
    C, n_ratios = int(n_classes), len(ratios)
    nodes = np.unique(labelled)
    orders = sorted(stores)
    first = stores[orders[0]].prior
    factored = first.solver == "cholesky"

    def chain(store):                      # the store and those it raises from
        return [store] + ([] if store.lower is None else chain(store.lower))

    new = {}
    for nu in orders:
        for level in chain(stores[nu]):
            new[level.prior.nu] = int(np.sum([not level.holds(v) for v in nodes]))

    def precision(nu):                   # the scale's solves at SCALE_TOL: a third each
        unknown = sum(int(v) not in stores[nu].diagonal for v in nodes[:2 * SCALE_BLOCK])
        factor = FACTORISATION_SOLVES.get(nu, 100 * nu) if factored else 0
        return n_ratios * (C - 1 + factor) + nu * unknown / 3.0

    def cost(plan):                      # the precision form's solves weighed double
        levels, raised = set(), 0
        for nu, form in plan.items():
            if form == "columns":
                # order nu's block from orders 1 and nu - 1, its mean a solve a class
                levels.update(range(1, max(nu, 2)))
                raised += 0 if nu == 1 else n_ratios * (C - 1)
        return sum(new[j] for j in levels) + raised + PRECISION_ADVANTAGE * sum(
            precision(nu) for nu, form in plan.items() if form == "precision")

    allowed = {nu: (("columns", "precision") if factored or (nu == 1 and first._uniform_mass)
                    else ("columns",)) for nu in orders}
    plans = [dict(zip(orders, forms)) for forms in product(*(allowed[nu] for nu in orders))]
    best = min(plans, key=cost)
    if factored or 2 not in stores or 1 not in stores:
        return best
    # conjugate gradients: order 2 within ORDER_TWO_COST_RATIO times order 1 alone
    alone = min(({1: form} for form in allowed[1]), key=cost)
    if cost(best) <= ORDER_TWO_COST_RATIO * max(cost(alone), 1):
        return best
    return alone


def _models(store, form, labelled, codes, C, ratios):
    """``(ratio, model)`` for each ratio: the least-squares classifier of one order in the
    form ``form`` (:func:`solve_plan`) from the store of that order's prior."""
    if form == "columns" and store.lower is not None:
        # a higher order from the lower orders' columns: a solve a class, not a label
        yield from zip(ratios, raised_models(store, labelled, codes, C, ratios))
        return
    if form == "columns":
        store(labelled)
        # the labels in the store's order: its columns without a copy
        nodes, node_codes = store.in_held_order(labelled, codes)
        W = store(nodes)
        for rho in ratios:
            yield rho, LeastSquaresClassification(W, nodes, node_codes, C, rho)
        return
    scale = labelled_prior_scale(store, labelled)[0]
    for rho in ratios:
        yield rho, PrecisionLeastSquares(store.prior, labelled, codes, C, rho, scale)


def _shared_labels(points, labelled, codes):
    """``(labelled, codes, clear)`` with every labelled row at the same coordinates given
    every class of its group (one observation a row and class), and whether each
    observation's point has one class only; unchanged when no group has two classes."""
    everything = np.ones(labelled.size, dtype=bool)
    if labelled.size < 2 or points is None:
        return labelled, codes, everything
    _, group = np.unique(np.ascontiguousarray(points[labelled]), axis=0,
                         return_inverse=True)
    group = np.asarray(group).ravel()
    pairs = np.unique(np.c_[group, codes], axis=0)
    if pairs.shape[0] == np.unique(group).size:      # one class a group: nothing shared
        return labelled, codes, everything
    rows, classes, clear = [], [], []
    for g in np.unique(group):
        members = labelled[group == g]
        given = pairs[pairs[:, 0] == g, 1]
        rows.append(np.repeat(members, given.size))
        classes.append(np.tile(given, members.size))
        clear.append(np.full(members.size * given.size, given.size == 1))
    return np.concatenate(rows), np.concatenate(classes), np.concatenate(clear)


def classifier_kappa2(graph) -> float:
    """The classifier's ``κ²``: ``KAPPA_RELATIVE`` of the graph's own ``1 / length²`` (a
    nearly intrinsic prior, Poisson learning's ``κ = 0``), in the graph's units."""
    return KAPPA_RELATIVE / graph.own_units()[0] ** 2


def _column_stores(graph, top: int) -> list:
    """The classifier's prior column stores on ``graph`` for the orders 1 to ``top``, each
    raised from the one below."""
    prior = SparsePrecisionPrior(graph, nu=1, kappa2=classifier_kappa2(graph), centred=True,
                                 solver=classifier_solver(graph), tol=SOLVE_TOL)
    chain = [LabelledColumns(prior)]
    for nu in range(2, int(top) + 1):
        chain.append(LabelledColumns(prior.with_order(nu), lower=chain[-1]))
    return chain


def _node_probabilities(model, labelled, informed, class_prior, C, start=None,
                        named_only=None):
    """``(scores U, score scale, class weights, probabilities P)`` of the nodes: the
    softmax of the model's posterior mean at the scale of the ``informed`` unlabelled nodes
    (None: all), re-weighted to ``class_prior`` from ``start``; uninformed nodes get the
    prior, ``named_only`` classes weight 0 (:func:`_with_prior_beyond_reach`)."""
    U = model.mean
    unl = np.ones(U.shape[0], dtype=bool) if informed is None else informed.copy()
    unl[labelled] = False
    scale = score_scale(U[unl] if unl.any() else U)
    lab = (np.ones(C, dtype=bool) if named_only is None or not np.any(named_only)
           else ~np.asarray(named_only))
    P = np.zeros((U.shape[0], C))
    P[:, lab] = scores_to_probabilities(U[:, lab], scale)
    rows = slice(None) if informed is None else informed
    class_weights = np.zeros(C)
    if class_prior is not None:
        shares = np.asarray(class_prior)[lab]
        class_weights[lab], balanced = balance_to_prior(
            P[rows][:, lab], shares / shares.sum(),
            start=None if start is None else np.asarray(start)[lab])
        P[np.ix_(np.arange(P.shape[0])[rows], np.flatnonzero(lab))] = balanced
    else:
        class_weights[lab] = 1.0
    if informed is not None:
        U[~informed] = 0.0
        P[~informed] = _prior_probabilities(class_prior, C)
    return U, scale, class_weights, P


def _label_reach(P) -> np.ndarray:
    """How firmly the labels decide each node: the gap in ``[0, 1]`` between its two most
    probable labelled classes (``P``: 0 for the classes no label has)."""
    top = np.sort(P, axis=1)[:, -2:]
    return np.clip(top[:, 1] - top[:, 0], 0.0, 1.0)


def _with_prior_beyond_reach(P, reach, class_prior) -> np.ndarray:
    """``r P + (1 - r) π`` row by row, ``r`` the ``reach`` (:func:`_label_reach`) and ``π``
    the class prior: where a class no label has gets probability."""
    r = np.asarray(reach)[:, None]
    return r * P + (1.0 - r) * _prior_probabilities(class_prior, P.shape[1])[None, :]


class GraphMaternClassificationFit(ClassificationFit):
    """A fitted full-resolution classifier: the graph, the nodes' latent means (class
    scores), their scale, the class weights and probabilities, the ``classes`` and the
    ``labelled`` rows; until pickled also the least-squares model and its prior columns."""

    method = "graph_matern"

    def __init__(self, graph, nu, scores, score_scale, class_prior, class_weights,
                 probabilities, model=None, columns=None, pieces=None, variations=None,
                 plan=None, reach=None, classes=None, labelled=None):
        self.graph, self.nu, self.scores, self.score_scale = graph, nu, scores, score_scale
        self.class_prior, self.class_weights = class_prior, class_weights
        self.probabilities = probabilities
        # None after a pickle until first use (_restored)
        self.model, self.columns, self._variances = model, columns, None
        # _pieces_without_labels or None; {(order, ratio): graph total variation} or None
        self.pieces, self.variations = pieces, variations
        self.plan = plan                    # {order: "columns" | "precision"} (solve_plan)
        # _label_reach where class_prior names classes no label has, else None
        self.reach = reach
        self.classes, self.labelled = classes, labelled
        self._node_index = self._lengths = None

    @property
    def kappa(self) -> float:
        """The prior's ``κ`` in the graph's units (:func:`classifier_kappa2`)."""
        return float(np.sqrt(classifier_kappa2(self.graph)))

    def fitted_attributes(self, X, stacklevel):
        graph, P = self.graph, self.probabilities
        out = dict(class_prior_=self.class_prior, class_weights_=self.class_weights,
                   graph_=graph, matern_order_=self.nu, eigenpairs_=None, n_iter_=1,
                   log_marginal_likelihood_=(None if self.model is None
                                             else self.model.log_evidence),
                   prior_to_noise_ratio_=None if self.model is None else self.model.rho,
                   probability_variation_=self.variations, label_distributions_=P,
                   transduction_=self.classes[np.argmax(P, axis=1)])
        self.probabilities = None           # the estimator holds them now
        if self.pieces is not None:
            labels, sizes, has = self.pieces
            empty = np.sort(sizes[~has])[::-1]
            listed = ", ".join(str(int(v)) for v in empty[:8]) + (
                f", ... ({empty.size - 8} more)" if empty.size > 8 else "")
            warnings.warn(f"the graph falls apart into "
                          f"{Pieces(labels, sizes).describe()}; {empty.size} of them "
                          f"hold no label (sizes {listed}): their points get the prior "
                          f"(latent mean 0, the class prior's probabilities). Label a "
                          f"point in each, or give a graph with more neighbours: "
                          f"FLGPClassifier(GraphMaternPrior(graph=flgp.graph"
                          f".self_tuning_knn_graph(X, k))).",
                          UserWarning, stacklevel=stacklevel + 1)
        return out

    def _neighbours(self, X, stacklevel):
        """``(indices, weights)`` of each point's ``min(GRAPH_MATERN_NEIGHBOURS, n)`` nearest
        nodes (the graph's weights ``exp(-4 d² / d_k²)``, a harmonic extension; a node
        itself alone), warning for points far from every node."""
        g = self.graph
        k = int(min(GRAPH_MATERN_NEIGHBOURS, g.n_nodes))
        if self._node_index is None:
            self._node_index = NeighborIndex(g.points)
        dist, idx = self._node_index.kneighbors(X, k)
        sq = dist ** 2
        scale = np.maximum(sq[:, -1:], 1e-300)
        w = np.exp(-4.0 * sq / scale)
        exact = np.all(np.asarray(X) == g.points[idx[:, 0]], axis=1)  # a node: its own row
        w[exact] = 0.0
        w[exact, 0] = 1.0
        w /= w.sum(axis=1, keepdims=True)
        far = sq[:, 0] > (FAR_FACTOR * 2.0 * g.spacing) ** 2
        if far.any():
            warnings.warn(f"{int(far.sum())} of {X.shape[0]} new point(s) lie far from every "
                          f"node of the fitted graph; their predictions are the nearest "
                          f"nodes' (extrapolations).", UserWarning, stacklevel=stacklevel + 1)
        return idx, w

    def predict_proba(self, X, stacklevel):
        """Probabilities of the nearest nodes' weighted latent means (:meth:`_neighbours`)."""
        idx, w = self._neighbours(X, stacklevel + 1)
        U = np.einsum("ij,ijc->ic", w, self.scores[idx])
        P = scores_to_probabilities(U, self.score_scale, self.class_weights)
        if self.reach is not None:
            P = _with_prior_beyond_reach(P, np.einsum("ij,ij->i", w, self.reach[idx]),
                                         self.class_prior)
        if self.pieces is not None:
            # the prior in the share of the neighbours' weight on pieces without a label
            labels, _, has = self.pieces
            share = np.einsum("ij,ij->i", w, has[labels[idx]])[:, None]
            P = share * P + (1.0 - share) * _prior_probabilities(self.class_prior, P.shape[1])
        return P

    def _restored(self) -> bool:
        """Whether the least-squares model and its prior columns are at hand, rebuilding
        them after a pickle (which keeps only the labels, ratio, form and scale) at first
        use: the same model, to rounding."""
        if self.model is not None and self.columns is not None \
                and self.columns.prior is not None:
            return True
        rebuild = getattr(self, "_model_arguments", None)
        if rebuild is None:                     # no model to rebuild
            return False
        nodes, codes, n_classes, rho, scale = rebuild
        self.columns = _column_stores(self.graph, self.nu)[-1]
        if scale is not None:                                     # the precision form
            self.model = PrecisionLeastSquares(self.columns.prior, nodes, codes, n_classes,
                                               rho, scale)
        else:
            (_, self.model), = _models(self.columns, "columns", nodes, codes, n_classes,
                                       (rho,))
        return True

    def node_variances(self) -> np.ndarray:
        """The class latents' posterior variances at every node ``(n, C)``: the model's
        unit variances (Rao-Blackwellised Monte Carlo, relative standard error up to
        ~35 %) times each class's noise; computed once. Raises ValueError without a
        model to rebuild."""
        if self._variances is None:
            if not self._restored():
                raise ValueError("the latent variances of a full-resolution classifier need "
                                 "its least-squares model, which this fit does not hold; "
                                 "fit it again.")
            with stage("latent variances"):
                unit = self.model.node_unit_variances(self.columns)
            self._variances = unit[:, None] * self.model.noise[None, :]
        return self._variances

    def predict_latent(self, X, stacklevel):
        """Latent means and variances ``(n, C)``: the nearest nodes' weighted means."""
        idx, w = self._neighbours(X, stacklevel + 1)
        mean = np.einsum("ij,ijc->ic", w, self.scores[idx])
        var = np.einsum("ij,ijc->ic", w, self.node_variances()[idx])
        return mean, var

    def suggest(self, index, n, strategy, uncertainty):
        """``n`` rows of ``index`` to label next: the most uncertain by ``strategy``
        (``"margin"`` of the latent means, else of ``uncertainty``), weighted by graph
        distance to the nearest label or pick
        (:func:`~flgp.models.labelling.spread_by_graph_distance`)."""
        if strategy == "margin":
            base = score_margin_uncertainty(np.asarray(self.scores)[index])
        else:
            base = uncertainty_scores(np.asarray(uncertainty)[index], strategy)
        base = np.where(np.isfinite(base), base, 0.0)
        if self._lengths is None:
            self._lengths = graph_edge_lengths(self.graph.stiffness)
        return spread_by_graph_distance(self._lengths, self.labelled, index, base, n)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_node_index"] = state["_lengths"] = None       # rebuilt at first use
        model = state.get("model")
        if model is not None:                    # what rebuilds the model (_restored)
            state["_model_arguments"] = (
                model.labelled, model.codes, model.n_classes, model.rho,
                model.scale if isinstance(model, PrecisionLeastSquares) else None)
        state["columns"] = state["model"] = state["_variances"] = None
        return state
