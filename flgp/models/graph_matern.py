"""The estimators' full-resolution representation (``method="graph_matern"``,
:mod:`flgp.models.representation`): the graph Matérn prior on a point graph - the one
given (``graph=``) or a k-nearest-neighbour graph of the cloud.

* Regression (:class:`GraphMaternRegression`): the prior on the cloud's k-NN graph,
  fitted by its exact evidence (:func:`flgp.precision.gaussian.fit_matern`), predicting at
  new points by the nodes' posterior (:class:`flgp.precision.NodePosterior`);
  docs/full_resolution.md.
* Classification (:class:`GraphMaternClassification`): class scores from the prior in
  its small-amplitude limit on the cloud's self-tuning k-NN graph, probabilities at a
  spread set from the cloud, re-weighted to the class-size prior
  (:mod:`flgp.precision.classification`); docs/few_labels.md.
"""

from __future__ import annotations

import warnings
from itertools import product

import numpy as np

from .._chunks import is_lazy, stage
from .._config import physical_memory
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
# this many points - where its hyperparameters are searched on the whole graph; a 20,000-
# point curve costs 3 s against 1 s for the low-rank fit, 100,000 points 35 s and 2.4 GB -
# and this many features
GRAPH_MATERN_MAX_NODES = 32_000
KNN_GRAPH_MATERN_MAX_DIM = 16
# neighbours of the default k-NN point graphs (graphlearning's and Poisson learning's
# default)
GRAPH_MATERN_NEIGHBOURS = 10
# the classifier's method="auto" takes the full-resolution classifier where its fit is
# predicted (classifier_cost) to take at most this many seconds and this share of the
# machine's memory; the low-rank heat kernel beyond (a million points: ~1 s)
GRAPH_MATERN_CLASSIFIER_SECONDS = 25.0
GRAPH_MATERN_CLASSIFIER_MEMORY_SHARE = 0.5
# classifier_cost's constants, measured on a 2-core machine (noisy 3-d curves of 10^5 and
# 10^6 points, MNIST's 70,000 x 100): seconds a point of the 10-NN graph's search (k-d
# tree up to 16 coordinates; buckets beyond, per coordinate), of the multigrid set-up,
# of one conjugate-gradient iteration, and of a candidate's probabilities, balance and
# variation per class; the iterations of a solve (low-dimensional clouds have long-range
# priors: 8-24 a solve, 15 on average; MNIST 4-5); bytes a point and a point and class
KNN_SECONDS_TREE, KNN_SECONDS_BUCKET_PER_COORDINATE = 6.5e-6, 0.4e-6
MULTIGRID_SETUP_SECONDS, ITERATION_SECONDS = 5e-6, 0.16e-6
CANDIDATE_SECONDS_PER_CLASS = 0.6e-6
SOLVE_ITERATIONS_TREE, SOLVE_ITERATIONS_BUCKET = 15, 6
BYTES_PER_POINT, BYTES_PER_POINT_AND_CLASS = 2000, 80
# draws of the Rao-Blackwellised variance estimator (relative standard error ~5-10 %)
GRAPH_MATERN_VARIANCE_SAMPLES = 64
# the classifier's prior solves by a CHOLMOD factor (exact) where that is cheap - graphs
# on points of at most two coordinates (up to FACTOR_MAX_NODES nodes), or three up to
# this many nodes - else by AMG-preconditioned conjugate gradients. A factor's cost grows
# with the cloud's own dimension: on curves and surfaces (the six circles, a Swiss roll,
# a torus, a helix) it was 5-20x faster than AMG, whose iterations rise there (24 a solve
# on the circles against 4 on MNIST); on a solid 3-d cloud 0.76 against 1.15 s at 20,000
# points and 5.6 against 4.1 s at 70,000 (50 columns each); beyond three coordinates the
# factor fills in (five: 6.6 against 1.1 s at 20,000)
CLASSIFIER_FACTOR_3D_NODES = 50_000
# The classifier's two forms of one model (flgp.precision.classification): the labelled
# block, one prior solve a label and order ("columns"; kept, so that a refit with more
# labels solves for the new ones only; its scale exact), or the posterior precision,
# C - 1 solves a ratio ("precision"; flgp.precision.centred_posterior; its scale
# estimated to 5 %), which is taken where it costs at most 1 / PRECISION_ADVANTAGE of the
# labelled block's solves (a form that changes the numbers slightly is not worth a few
# solves). A
# numeric factorisation of the posterior precision counts as this many solves (measured
# on a Swiss roll, a torus and a solid ball of 10,000-50,000 points: 14-72 for order 1,
# 37-250 for order 2)
FACTORISATION_SOLVES = {1: 40, 2: 200}
PRECISION_ADVANTAGE = 2.0
# where the prior solves by conjugate gradients, order 2 has no posterior-precision form
# (its fourth-order system has no preconditioner that converges in few iterations): its
# block needs order 1's columns, a solve a label; it is weighed while that is at most
# this many times the (weighed) solves of order 1's cheaper form - MNIST with 200 labels
# (200 + 27 solves against 2 x (27 + 16 / 3)) keeps it, and the order it chose there, a
# curve with 100 labels and two classes (100 + 3 against 2 x (3 + 16 / 3)) does not
ORDER_TWO_COST_RATIO = 4.0
# the cross-validated amplitude's factor on the evidence's is used within this range only
# (measured on brain maps, surfaces and fields: 0.82-1.05); beyond it - residuals that
# vanish, say - the two disagree too far for either to be trusted over the other, and
# the evidence's amplitude is kept
CV_SCALE_RANGE = (0.1, 10.0)


def classifier_cost(n_points: int, n_features: int, counts, graph_given: bool = False):
    """``(seconds, bytes)``: the full-resolution classifier's fit predicted from the
    cloud's size, its number of coordinates and the label ``counts`` a class, by the
    measured constants above - the 10-NN graph's search (none for a given graph), the
    multigrid set-up, the solves of the cheaper form (:func:`solve_plan`: the labelled
    block, a solve a label and order, or the posterior precision, ``C - 1`` a ratio and
    the scale's few, at order 1) at ``SOLVE_ITERATIONS_*`` iterations each, and each
    candidate's probabilities; memory the graph and its hierarchy, each candidate's
    ``n x C`` arrays and the columns of the labelled block where that form is cheaper.
    On a factored graph (few coordinates and nodes: ``classifier_solver``) the same
    numbers overstate the cost, which is small there."""
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
    # solve_plan's count (the scale's solves at SCALE_TOL take about a third of a solve's
    # iterations, below)
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
    """The probabilities a point the labels say nothing of gets: the class prior, or equal
    shares without one."""
    if class_prior is None:
        return np.full(n_classes, 1.0 / n_classes)
    return np.asarray(class_prior, dtype=np.float64)


def _pieces_without_labels(graph, labelled):
    """``(piece of each node, piece sizes, whether each piece holds a labelled node)`` of a
    graph in pieces of which some hold no labelled node, else None."""
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
            return (f"{n} points > GRAPH_MATERN_MAX_NODES = {GRAPH_MATERN_MAX_NODES} for a k-NN graph; "
                    f"pass graph= to use one")
        return None

    def sole_reason(self, prior, options):
        """A given graph beyond a factor's reach (:func:`~flgp.precision.gaussian
        .factors`): there is no whole-graph evidence to compare, and a map on that many
        nodes is finer than 100-400 eigenpairs resolve."""
        if prior.graph is None or factors(prior.graph.n_nodes):
            return None
        return (f"the graph has {prior.graph.n_nodes} nodes, beyond a factor's reach "
                f"(FACTOR_MAX_NODES = {FACTOR_MAX_NODES}, or half the machine's memory): "
                f"the graph Matérn prior's evidence is that of a ball, not comparable; it "
                f"predicts")

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation):
        """The graph Matérn fit on the prior's ``graph`` when given (checked against
        ``X``), else on the k-nearest-neighbour graph of ``X``
        (:func:`flgp.graph.knn_point_graph`), over the orders ``nu`` (None: all of
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
        seed = options.random_state if isinstance(options.random_state, int) else 0
        out = GraphMaternRegressionFit(
            graph, fit, reg, standardisation,
            standardisation.log_evidence_of_y(fit.log_evidence, m),
            {nu: standardisation.log_evidence_of_y(f.log_evidence, m)
             for nu, f in by_order.items()},
            seed, labelled)
        # the targets the amplitude is cross-validated on (a fixed noise fixes it)
        out.targets = None if options.noise is not None else (np.asarray(labelled), z)
        return out


class GraphMaternRegressionFit(RegressionFit):
    """A fitted graph Matérn prior: the search's result (``fit``: order, ``κ²``, amplitude,
    noise, posterior mean) and its regression (``regression``: the factor of the posterior
    precision, for the variances) until its fitted attributes are taken; then the nodes'
    posterior (``node_posterior``), which is all it predicts with, and the order ``nu``
    and the labelled rows ``labelled`` its suggestions condition on."""

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
        """The graph, order, ``κ``, hyperparameters in the units of ``X``, ``y`` and the
        graph, the nodes' posterior (variances by Rao-Blackwellised Monte Carlo beyond a
        few thousand nodes, with their standard errors) and the transduction. The
        reported amplitude and noise are those the variances use - the evidence's times
        the cross-validated scale ``c`` - and ``log_marginal_likelihood_`` the evidence
        at them: ``log N(z | 0, c A S) = log N(z | 0, A S) - m/2 (log c + 1/c - 1)`` for
        the profiled ``A`` (``zᵀS⁻¹z = m A``); the evidence's own optimum stays in
        ``matern_log_evidence_`` (and ``log_evidence_``, what ``method="auto"`` compares)
        with its amplitude ``evidence_outputscale_``."""
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
        # κ², the noise-to-amplitude ratio and a unit amplitude's variance in units of y²,
        # on the graph in its own units (seed maps, suggestions)
        self.kappa2, self.ratio = float(fit.kappa2), float(fit.ratio)
        self.variance_unit = st.variance_of_y(scale * fit.amplitude)
        self._noise_pre = st.variance_pre(scale * fit.noise)
        out["noise_"] = st.variance_of_y(scale * fit.noise)
        out["transduction_std_error_"] = (st.scale * 0.5 * se
                                          / np.sqrt(np.maximum(var, 1e-300)))
        mean = st.mean + st.scale * fit.mean
        sd = st.scale * np.sqrt(np.maximum(var, 0.0))
        self.node_posterior = NodePosterior(graph.points, mean, sd, graph.spacing)
        # what predicts is the nodes' posterior: the factor (not picklable) and the
        # search's result go
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
        """The factor from the evidence's amplitude to the cross-validated one
        (:func:`flgp.precision.gaussian.cross_validated_amplitude`; docs/images.md,
        "Intervals"): 1 with a fixed noise, outside ``CV_SCALE_RANGE``, or where the
        variances' Monte Carlo error leaves it undetermined - the same rule on a factored
        graph and on one solved by conjugate gradients (its perturbation variances' sum
        over the observed nodes has its own standard error)."""
        if self.targets is None:
            return 1.0
        sum_se = getattr(self.regression, "observed_sum_se", None)
        if sum_se is None:
            return 1.0
        observed, z = self.targets
        A = float(fit.amplitude)
        cv = cross_validated_amplitude(z, fit.mean[observed], fit.ratio, var[observed] / A,
                                       sum_se)
        if cv is None or not CV_SCALE_RANGE[0] <= cv / A <= CV_SCALE_RANGE[1]:
            return 1.0
        return cv / A

    def predict(self, X, stacklevel):
        """The nodes' posterior at the nearest nodes of ``X`` (a warning for points beyond
        three times two graph spacings of every node)."""
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
        """``n`` rows of ``index`` (unlabelled nodes) to label next by ``"std"``, the
        largest posterior sd (``uncertainty``: the fitted ``transduction_std_``) first, a
        batch spread greedily: after each pick the posterior is conditioned on an exact
        value there (one solve with the factor of the posterior precision for its
        covariance column) and every candidate's sd
        multiplied by the share of its variance the batch leaves (as the classifier's
        batches). On graphs not factored (:func:`~flgp.precision.gaussian.factors`) the
        ``n`` largest sds, not spread."""
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
        ``GRAPH_MATERN_CLASSIFIER_MEMORY_SHARE`` of the machine's memory: the full-resolution
        classifier (docs/few_labels.md, "One classifier")."""
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
        """``(graph, {order ν: store of prior columns})``: the graph (``graph=`` checked
        against ``X``, else the self-tuning k-NN graph of ``X``) and, for each order to fit
        (the prior's ``nu``, else ``ORDER_CANDIDATES`` - order 1 alone on a graph whose
        mass varies, or whose prior solves by conjugate gradients in a warm-started
        classifier), the store of the
        centred graph Matérn prior's covariance columns, each order's columns raised from
        the one below by one solve (:class:`~flgp.precision.classification
        .LabelledColumns`) - from the warm-start cache (``options.cache.graph_matern``) when ``X``,
        the seed of its graph and the prior are the previous fit's."""
        key = None
        seed = options.random_state if isinstance(options.random_state, int) else 0
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
            # prior, or a fresh fit by conjugate gradients (MNIST's one-label fit 3.0
            # against 2.6 s). A warm-started classifier refits after each batch of new
            # labels (the labelling loop), each refit paying every order's CG solves for
            # every new label: there it keeps order 1 (MNIST's loop 9.7 s against 18.9 s
            # weighing both orders, graphlearning's 12.5 s; docs/few_labels.md)
            orders = (tuple(ORDER_CANDIDATES)
                      if uniform and (solver == "cholesky" or not options.warm_start)
                      else (1,))
        chain = _column_stores(graph, max(orders))
        stores = {nu: chain[nu - 1] for nu in orders}
        if key is not None:
            options.cache.graph_matern = (key, graph, stores)
        return graph, stores

    def fit(self, prior, options, X, labelled, codes, classes):
        """The least-squares GP classifier under the centred graph Matérn prior on
        ``graph`` or the cloud's self-tuning k-NN graph
        (:class:`flgp.precision.classification.LeastSquaresClassification`): the posterior
        mean of the class latents from the prior's columns at the labels (one sparse solve
        a label an order), probabilities at a spread set from the cloud, re-weighted to the
        class-size prior; of the candidate orders and ratios, among those that give the
        most labelled points their own class, the one whose probabilities vary least
        across the graph's edges."""
        C, observed = classes.size, labelled
        graph, stores = self._engine(prior, options, X)
        # pieces of the graph that hold no label get the prior (latent mean 0, the class
        # prior's probabilities); the spread and the classes' sizes are the other nodes'
        pieces = _pieces_without_labels(graph, labelled)
        informed = None if pieces is None else pieces[2][pieces[0]]
        # the class shares from the labels that are a random sample: not those of rows
        # the estimator suggested (the labelling loop picks boundaries, not shares)
        sampled = ~np.isin(labelled, options.suggested)
        class_prior = (None if options.class_prior is None else
                       class_size_prior(codes[sampled], C, options.class_prior))
        ratios = prior_to_noise_ratios(codes, C)
        # classes named in class_prior that no label has (FLGPClassifier only admits them
        # with a mapping of shares)
        named_only = np.bincount(codes, minlength=C) == 0
        # a point labelled with several classes (copies of one row): every copy observes
        # every class it was given, so that its probabilities are shared between them and
        # no candidate gains by setting the copies apart
        labelled, codes, clear = _shared_labels(graph.points, labelled, codes)
        plan = solve_plan(stores, labelled, C, ratios)
        edges = graph_edges(graph.stiffness) if len(plan) * len(ratios) > 1 else None
        best, variations, kept = None, {}, {}
        with stage("scores"):
            for nu, form in plan.items():
                for rho, model in _models(stores[nu], form, labelled, codes, C, ratios):
                    # the previous candidate's class weights start the balance (a weight
                    # that underflowed to 0 starts at the smallest positive one)
                    scored = (nu, model, *_node_probabilities(
                        model, labelled, informed, class_prior, C,
                        start=None if best is None else np.maximum(best[4], 1e-300),
                        named_only=named_only))
                    if edges is not None:
                        variations[(nu, rho)] = graph_total_variation(edges, scored[5])
                        # the labels of a point given several classes cannot all be
                        # kept whatever the candidate: left out of the count
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
    """``{order: "columns" | "precision"}``: how each order of ``stores`` (their
    :class:`~flgp.precision.classification.LabelledColumns`) is fitted for these labels,
    in the forms of fewest solves, the precision form's counted ``PRECISION_ADVANTAGE``
    times (``FACTORISATION_SOLVES``, ``ORDER_TWO_COST_RATIO``):
    the labelled block costs a solve for each label whose column is not held, at every
    order below the one fitted (order ``ν``'s block is ``W₁ᵀ C W_{ν-1}``), and order
    ``ν >= 2`` a solve a labelled class but one and ratio for its mean
    (:func:`~flgp.precision.classification.raised_models`); the
    posterior precision ``C - 1`` solves a ratio, plus a numeric factorisation a ratio
    where the prior is factored, plus a third of ``ν`` solves (at ``SCALE_TOL``) for each
    of up to ``2 * SCALE_BLOCK`` labelled nodes whose prior variance is not known yet
    (its scale). Where the prior
    solves by conjugate gradients, order 2 has the labelled block only (order 1's columns)
    and is left out where that costs more than ``ORDER_TWO_COST_RATIO`` times order 1's
    cheaper form; on
    a graph whose mass varies, the precision form is not used there (it needs ``P`` and
    ``Q`` to commute)."""
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
    # conjugate gradients: order 2 only where it costs at most ORDER_TWO_COST_RATIO times
    # order 1 alone
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
        # the labels in the store's order: its columns then without a copy (the model
        # does not depend on the labels' order)
        nodes, node_codes = store.in_held_order(labelled, codes)
        W = store(nodes)
        for rho in ratios:
            yield rho, LeastSquaresClassification(W, nodes, node_codes, C, rho)
        return
    scale = labelled_prior_scale(store, labelled)[0]
    for rho in ratios:
        yield rho, PrecisionLeastSquares(store.prior, labelled, codes, C, rho, scale)


def _shared_labels(points, labelled, codes):
    """``(labelled, codes, clear)`` with every row of a group of labelled rows at the same
    coordinates given every class of the group (one observation a row and class), and
    whether each observation's point has one class only; unchanged (all clear) when no
    such group has two classes."""
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
    """The stores of the classifier's centred graph Matérn prior columns on ``graph`` for
    the orders 1 to ``top``, each raised from the one below (``KAPPA_RELATIVE``, solved by
    :func:`classifier_solver` to ``SOLVE_TOL``)."""
    prior = SparsePrecisionPrior(graph, nu=1, kappa2=classifier_kappa2(graph), centred=True,
                                 solver=classifier_solver(graph), tol=SOLVE_TOL)
    chain = [LabelledColumns(prior)]
    for nu in range(2, int(top) + 1):
        chain.append(LabelledColumns(prior.with_order(nu), lower=chain[-1]))
    return chain


def _node_probabilities(model, labelled, informed, class_prior, C, start=None,
                        named_only=None):
    """``(scores U, score scale, class weights, probabilities P)`` of the nodes under a
    least-squares model: the softmax of its posterior mean at the scale
    :func:`~flgp.precision.classification.score_scale` sets from the unlabelled nodes that
    a label reaches (``informed``: None for all), re-weighted to ``class_prior`` (its
    weights searched from ``start``); nodes of pieces without a label get latent mean 0
    and the prior's probabilities. Classes no label has (``named_only``) get weight 0
    here: the labelled classes are balanced to their own shares of the prior, and
    :func:`_with_prior_beyond_reach` gives the others their share where labels do not
    reach."""
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
    """How firmly the labels decide each node: the gap between its two most probable
    labelled classes (``P``: the labelled classes' probabilities, 0 for the others) - 1
    at a node they give to one class, 0 where two of them tie or where none says
    anything."""
    top = np.sort(P, axis=1)[:, -2:]
    return np.clip(top[:, 1] - top[:, 0], 0.0, 1.0)


def _with_prior_beyond_reach(P, reach, class_prior) -> np.ndarray:
    """``r P + (1 - r) π`` row by row: the labels' probabilities where they reach
    (``reach`` r, :func:`_label_reach`), the class prior ``π`` where they do not - the
    only place where a class no label has gets probability."""
    r = np.asarray(reach)[:, None]
    return r * P + (1.0 - r) * _prior_probabilities(class_prior, P.shape[1])[None, :]


class GraphMaternClassificationFit(ClassificationFit):
    """A fitted full-resolution classifier: the graph, the nodes' latent means ``U`` (the
    class scores), their scale and the classes' weights (and the probabilities of the
    nodes); until pickled also the least-squares model and the store of prior columns,
    for the latent variances and the labelling loop; the ``classes`` and the ``labelled``
    rows."""

    method = "graph_matern"

    def __init__(self, graph, nu, scores, score_scale, class_prior, class_weights,
                 probabilities, model=None, columns=None, pieces=None, variations=None,
                 plan=None, reach=None, classes=None, labelled=None):
        self.graph, self.nu, self.scores, self.score_scale = graph, nu, scores, score_scale
        self.class_prior, self.class_weights = class_prior, class_weights
        self.probabilities = probabilities
        # the least-squares model, its store of prior columns and the latent variances:
        # None after a pickle until first use (_restored)
        self.model, self.columns, self._variances = model, columns, None
        # the graph's pieces when some hold no label (_pieces_without_labels), else None;
        # each candidate (order, ratio)'s graph total variation of the probabilities, when
        # the fit chose among several
        self.pieces, self.variations = pieces, variations
        # {order: "columns" | "precision"}: the form each order was fitted in (solve_plan)
        self.plan = plan
        # how far the labels decide each node (_label_reach) where class_prior names
        # classes no label has, else None
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
        """``(indices, weights)`` of each point's ``min(GRAPH_MATERN_NEIGHBOURS, n)`` nearest nodes
        (the graph's own weights ``exp(-4 d² / d_k²)``: the value a new node joined by those
        edges takes at the harmonic solution; at a node, that node alone), with a warning
        for points far from every node."""
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
        """New points: each latent mean the weighted mean of its nearest nodes'
        (:meth:`_neighbours`), then the fitted scale and class weights."""
        idx, w = self._neighbours(X, stacklevel + 1)
        U = np.einsum("ij,ijc->ic", w, self.scores[idx])
        P = scores_to_probabilities(U, self.score_scale, self.class_weights)
        if self.reach is not None:
            P = _with_prior_beyond_reach(P, np.einsum("ij,ij->i", w, self.reach[idx]),
                                         self.class_prior)
        if self.pieces is not None:
            # the nodes of pieces without a label hold the prior: a new point takes it in
            # the share of its neighbours' weight that lies there
            labels, _, has = self.pieces
            share = np.einsum("ij,ij->i", w, has[labels[idx]])[:, None]
            P = share * P + (1.0 - share) * _prior_probabilities(self.class_prior, P.shape[1])
        return P

    def _restored(self) -> bool:
        """Whether the least-squares model and its store of prior columns are at hand: a
        pickled fit keeps neither (the prior's solver does not pickle) but what rebuilds
        them - the labels, the ratio and the form (with its scale) - and they are rebuilt
        at first use (the prior's columns or posterior solved again: the same model - bit
        for bit by AMG, whose columns are solved one by one; to rounding with a
        factor)."""
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
        unit variances (the labelled block's with the prior's marginal variances, or the
        posterior precision's, both by Rao-Blackwellised Monte Carlo: relative standard
        error up to ~35 %) times each class's noise; computed once."""
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
        """Latent means and variances ``(n, C)`` at new points (nearest nodes' weighted
        means of both)."""
        idx, w = self._neighbours(X, stacklevel + 1)
        mean = np.einsum("ij,ijc->ic", w, self.scores[idx])
        var = np.einsum("ij,ijc->ic", w, self.node_variances()[idx])
        return mean, var

    def suggest(self, index, n, strategy, uncertainty):
        """``n`` rows of ``index`` (unlabelled nodes) to label next: the most uncertain by
        ``strategy`` - ``"margin"``, the smallest gap between the two largest class
        scores (the latent means; :func:`~flgp.models.labelling.score_margin_uncertainty`),
        or ``"entropy"`` and ``"least_confident"`` of ``uncertainty`` (the fitted
        ``label_distributions_``) - weighted
        by the graph distance to the nearest label, each pick counting as a label for the
        next (:func:`~flgp.models.labelling.spread_by_graph_distance`)."""
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
