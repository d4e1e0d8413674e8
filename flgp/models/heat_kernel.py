"""The low-rank heat kernel as one of the estimators' representations
(:mod:`flgp.models.representation`): FLGP's heat kernel on the cloud's FLGP, GLGP or
Nyström eigenpairs - the regressor's fitted by its exact evidence, the classifier's by EP
or Laplace (:class:`HeatKernelClassification`, the last entry of its registry, the
fallback of its rule).

:class:`HeatKernelRegression` is the ``"flgp"`` entry of ``FLGPRegressor.REPRESENTATIONS``,
beside the graph Matérn prior and the RBF GP. It is *bounded*: before searching a
candidate eigenbasis it takes the evidence ceiling of every covariance that eigenbasis can
give (:meth:`flgp.spectral.gaussian.LowRankGaussianEvidence.ceiling`) and declines
(:class:`~flgp.models.representation.Outranked`) when that lies below the best evidence
already fitted - so ``method="auto"`` fits it after the others. Its search: the diffusion
time ``t``, the outputscale ``s²`` and the noise ``σ²`` by L-BFGS-B on their logarithms,
from the two best ``t`` of a 12-point log grid, for each number of leading eigenpairs the
evidence compares (:func:`resolution_ranks`), ``O(M³)`` an evaluation through the Woodbury
identity (:class:`~flgp.spectral.gaussian.LowRankGaussianEvidence`).

Its fit, once chosen, sets the estimator's eigenbasis state (``eigenpairs_``,
``diffusion_time_``, the posterior of the weights) and predicts through the estimator's
eigenbasis paths, which counts (``likelihood="poisson"``, the heat kernel only), dask
inputs and the labelling loop share.
"""

from __future__ import annotations

import numpy as np

from .._chunks import stage
from ..spectral.families import (diffusion_time_range, heat_log_weight_gradient,
                                 heat_log_weights)
from ..spectral.gaussian import LowRankGaussianEvidence
from ._base import CandidateFit
from .class_predictor import ClassPredictor, classes_of
from .regression_predictor import RegressionPredictor
from .representation import (ClassificationFit, ClassificationRepresentation, Outranked,
                             RegressionFit, RegressionRepresentation, screening_margin)
from .search import multistart_minimize, unit_prior_log_scale

__all__ = ["HeatKernelRegression", "HeatKernelRegressionFit", "HeatKernelClassification",
           "HeatKernelClassificationFit", "NOISE_RANGE", "default_resolution_ceiling",
           "resolution_ranks"]

# the noise variance, in units of the standardised targets (the search's range, and the
# range its evidence ceiling is taken over)
NOISE_RANGE = (1e-6, 10.0)


def default_resolution_ceiling(n_induced: int) -> int:
    """The most eigenpairs the Gaussian regressor's resolution ladder reaches:
    ``min(400, s - 1)`` (its rungs ``M/8 .. M``; docs/models.md, "Resolution")."""
    return int(max(1, min(400, n_induced - 1)))


def resolution_ranks(est, M: int) -> list:
    """The numbers of leading eigenpairs the Gaussian fit compares: ``M`` when
    ``n_eigenpairs`` is given; by default ``M/8, M/4, M/2, M`` (at least 10), the one of
    highest evidence predicting (``n_eigenpairs_``)."""
    if est.n_eigenpairs is not None or est.likelihood != "gaussian":
        return [M]
    return sorted({max(1, min(M, r)) for r in (M // 8, M // 4, M // 2, M) if r >= 10}
                  or {M})


def noise_bounds(est, standardisation) -> tuple[float, float]:
    """The noise variance's range in units of the standardised targets: ``NOISE_RANGE``,
    or the estimator's fixed ``noise`` at both ends."""
    if est.noise is None:
        return NOISE_RANGE
    fixed = standardisation.variance_of_z(est.noise)
    return fixed, fixed


class HeatKernelRegression(RegressionRepresentation):
    """The regressor's heat kernel (see the module notes)."""

    name = "flgp"
    bounded = True
    takes_dask = True

    def infeasible(self, est, shape, n_labelled):
        """A cloud with fewer induced points than each point keeps nearest ones (``s <
        n_neighbors``: two points at the defaults)."""
        s = min(est._engine_sizes(shape[0])[0], shape[0])
        if est.induced_points is None and s < est.n_neighbors:
            return (f"{shape[0]} points: the heat kernel's cross graph keeps each point's "
                    f"{est.n_neighbors} nearest induced points, and there can be only {s}")
        return None

    def fit(self, est, X, labelled, y_lab, z, standardisation, bar=-np.inf):
        offset = standardisation.log_evidence_of_y(0.0, labelled.size)    # z -> y units
        noise_range = noise_bounds(est, standardisation)
        margin = screening_margin(labelled.size)
        ceilings, coarse = [], []

        def beaten(eigenpairs, V_lab, targets):
            """Left unsearched: its ceiling below ``bar``, or (screening) the coarse stage
            of its search - one L-BFGS-B start at the largest rank - more than the
            screening margin below it."""
            if not np.isfinite(bar):
                return False
            ceiling = LowRankGaussianEvidence(V_lab, targets).ceiling(noise_range)
            ceilings.append(ceiling + offset)
            if ceiling + offset < bar:
                return True
            if not (resolution_ranks(est, eigenpairs.n_eigenpairs)[1:]
                    or est.diffusion_time is None):
                return False                    # the coarse stage would be the search
            first = fit_hyperparameters(est, eigenpairs, V_lab, targets, noise_range,
                                        n_starts=1)
            coarse.append(-first["nll_evidence"] + offset)
            return coarse[-1] < bar - margin

        def fit_gp(eigenpairs, V_lab, targets):
            return fit_gaussian(est, eigenpairs, V_lab, targets, noise_range)

        best = est._fit_candidates(est._candidates(X), labelled, z, fit_gp=fit_gp,
                                   skip=beaten)
        if best is None and coarse:
            raise Outranked(max(coarse), "screened out: its coarse search reached a log "
                            "evidence of {ceiling:.1f} (the margin: " f"{margin:.0f} nats)")
        if best is None:
            raise Outranked(max(ceilings), "its log evidence cannot exceed {ceiling:.1f} (a "
                            "ceiling over every diffusion time, amplitude, noise and "
                            "number of eigenpairs of its eigenbasis)")
        return HeatKernelRegressionFit(est._graph_method, best, labelled, z, standardisation)


class HeatKernelRegressionFit(RegressionFit):
    """The heat kernel's fit of the best candidate eigenbasis: ``(bandwidth scale,
    eigenpairs, eigenvector rows of the labelled points, CandidateFit)``."""

    def __init__(self, method, candidate, labelled, z, standardisation):
        self.method = method
        self._candidate, self._labelled, self._z = candidate, labelled, z
        self._standardisation = standardisation
        self.log_evidence = standardisation.log_evidence_of_y(
            -candidate[3].result["nll_evidence"], labelled.size)

    def adopt(self, est, X, stacklevel):
        """The estimator's eigenbasis state and its transduction; it then predicts through
        its eigenbasis paths (``_other_fit`` stays None)."""
        a, eigenpairs, V_lab, fit = self._candidate
        st = self._standardisation
        # the pieces' warning, three frames below this one (_label_pieces, _set_engine)
        est._set_engine(a, eigenpairs, self._labelled, stacklevel=stacklevel + 3)
        fit = fit.result
        est.method_ = self.method
        est.diffusion_time_ = fit["t"]
        est.outputscale_ = st.variance_of_y(fit["s2"])
        est._noise_pre = st.variance_pre(fit["noise"])            # in units of y / unit
        est.noise_ = st.variance_of_y(fit["noise"])
        # the evidence p(y | t, s^2, σ^2) in the units of y; the prior on t is not in it
        # (as in FLGPClassifier): the MAP is ``log_marginal_likelihood_ - (a0 - 1) log t``
        est.log_marginal_likelihood_ = self.log_evidence
        est.n_iter_ = fit["n_iter"]
        k = fit["rank"]
        est.n_eigenpairs_ = k
        ev = LowRankGaussianEvidence(V_lab[:, :k], self._z)
        sd_k, w_mean_k, w_cov_k = ev.posterior(
            log_weights(_Leading(eigenpairs, k), fit["t"], fit["s2"]), fit["noise"])
        M = eigenpairs.n_eigenpairs
        sd, w_mean, w_cov = np.zeros(M), np.zeros(M), np.zeros((M, M))
        sd[:k], w_mean[:k], w_cov[:k, :k] = sd_k, w_mean_k, w_cov_k   # the rest: weight 0
        est._noise_std = fit["noise"]           # noise variance in standardised units
        est._predictor = RegressionPredictor(sd, w_mean, w_cov, st.mean, st.scale,
                                             est._piece_has_label)
        est._other_fit = None
        est._transduce(eigenpairs)
        self._candidate = self._z = None        # the estimator holds the eigenbasis now

    def predict(self, X, stacklevel):
        raise RuntimeError("the heat kernel predicts through its estimator's eigenbasis "
                           "(FLGPRegressor.predict).")

    def interval_noise(self):
        raise RuntimeError("the heat kernel's noise is its estimator's noise_.")


def fit_gaussian(est, eigenpairs, V_lab, z, noise_range) -> CandidateFit:
    """The hyperparameters of one candidate eigenbasis, its resolution by evidence: the
    nested leading blocks of :func:`resolution_ranks`, the best by the posterior of
    ``t`` (evidence times ``π(t)``)."""
    fit = None
    for rank in resolution_ranks(est, eigenpairs.n_eigenpairs):
        trial = fit_hyperparameters(est, _Leading(eigenpairs, rank), V_lab[:, :rank], z,
                                    noise_range)
        trial["rank"] = rank
        if fit is None or trial["nll"] < fit["nll"]:
            fit = trial
    return CandidateFit(score=-fit["nll"], t=fit["t"], log_evidence=-fit["nll_evidence"],
                        result=fit)


def fit_hyperparameters(est, eigenpairs, V_lab, z, noise_range, n_starts: int = 2) -> dict:
    """``t``, ``s²`` and ``σ²`` of one eigenbasis by the exact evidence times
    ``π(t) ∝ t^{-a0}`` (``a0 = est.diffusion_time_prior_power``): L-BFGS-B on their
    logarithms from the two best ``t`` of a 12-point log grid over the data-driven range,
    each with the outputscale that gives the labelled points unit mean prior variance;
    fixed ``diffusion_time`` / noise held by tight bounds."""
    ev = LowRankGaussianEvidence(V_lab, z)
    lam = eigenpairs.eigenvalues
    log_scale = np.log(eigenpairs.kernel_scale)
    lo, hi = diffusion_time_range(lam)
    fixed_t = est.diffusion_time
    noise_lo, noise_hi = noise_range
    fixed_noise = None if est.noise is None else noise_lo
    # theta = (log t, log s^2, log noise); fixed entries are held by tight bounds
    bounds = [(np.log(lo), np.log(hi)), (np.log(1e-4), np.log(1e4)),
              (np.log(noise_lo), np.log(noise_hi))]
    if fixed_t is not None:
        bounds[0] = (np.log(fixed_t),) * 2
    prior = est.diffusion_time_prior_power - 1.0      # π(t) ∝ t^{1-a0} in log t

    def f_and_grad(theta):
        log_t, log_s2, log_noise = theta
        t = np.exp(log_t)
        try:
            nll, g_logd, g_noise = ev.value_and_grad(
                log_s2 + log_scale + heat_log_weights(lam, t), log_noise)
        except (np.linalg.LinAlgError, ValueError):
            return 1e30, np.zeros(3)
        nll = nll + prior * log_t
        grad = np.array([np.sum(g_logd * heat_log_weight_gradient(lam, t)) + prior,
                         np.sum(g_logd), g_noise])
        if not (np.isfinite(nll) and np.all(np.isfinite(grad))):
            return 1e30, np.zeros(3)
        return nll, grad

    noise0 = bounds[2][0] if fixed_noise is not None else np.log(0.1)

    def matched_log_s2(log_t):
        # outputscale at which the mean prior variance of the labelled points is 1
        return unit_prior_log_scale(eigenpairs, ev.V, log_t, bounds[1])

    # the best two diffusion times of a coarse log grid (scale-matched), or the fixed one
    grid = ([bounds[0][0]] if fixed_t is not None
            else np.linspace(np.log(lo), np.log(hi), 12))
    best = multistart_minimize(
        f_and_grad, [np.array([g, matched_log_s2(g), noise0]) for g in grid], bounds,
        n_starts=n_starts, max_iter=est.max_iter)
    log_t, log_s2, log_noise = best.x
    prior_term = prior * log_t
    return dict(t=float(np.exp(log_t)), s2=float(np.exp(log_s2)),
                noise=float(np.exp(log_noise)), nll=float(best.fun),
                nll_evidence=float(best.fun - prior_term), n_iter=max(1, int(best.nit)))


class _Leading:
    """The leading ``k`` eigenpairs' eigenvalues and kernel scale: what the
    hyperparameter fit reads of an :class:`~flgp.spectral.Eigenpairs`."""

    def __init__(self, eigenpairs, k: int):
        self.eigenvalues = eigenpairs.eigenvalues[:k]
        self.kernel_scale = eigenpairs.kernel_scale


def log_weights(eigenpairs, t, s2):
    """``log(s^2 c e^{-tλ})``: the prior weights of the eigenbasis in log space."""
    return np.log(s2 * eigenpairs.kernel_scale) + heat_log_weights(eigenpairs.eigenvalues, t)


# -- classification ---------------------------------------------------------------------

class HeatKernelClassification(ClassificationRepresentation):
    """The classifier's heat kernel: EP (or Laplace) on the eigenbasis, the diffusion time
    under the spectral prior, the probabilities calibrated by leave-one-out (docs/models.md;
    the search itself is :class:`flgp.models.class_search.TimeSearch`, driven by
    ``FLGPClassifier._fit_gp``). The ``fallback`` of ``FLGPClassifier.REPRESENTATIONS``:
    asked after the other entries, it takes any labels they leave."""

    name = "flgp"
    fallback = True
    takes_dask = True

    def chosen_by_auto(self, est, X, counts):
        return True

    def fit(self, est, X, labelled, codes):
        best = est._fit_candidates(est._candidates(X), labelled, codes)
        return HeatKernelClassificationFit(est._graph_method, best, labelled, codes)


class HeatKernelClassificationFit(ClassificationFit):
    """The classifier's heat-kernel fit of the best candidate eigenbasis."""

    def __init__(self, method, candidate, labelled, codes):
        self.method = method
        self._candidate, self._labelled, self._codes = candidate, labelled, codes

    def adopt(self, est, X, stacklevel):
        """The estimator's eigenbasis state (the fitted prior, the mixture over diffusion
        times, the calibration) and its transduction; it then predicts through its
        eigenbasis paths (``_other_fit`` stays None)."""
        a, eigenpairs, V_lab, fit = self._candidate
        labelled, codes = self._labelled, self._codes
        est._set_engine(a, eigenpairs, labelled, stacklevel=stacklevel + 3)
        t, amplitude, log_ev, state, mixture, n_evals, prior = fit.result
        est._V_lab = V_lab
        est._spectral_prior = prior
        est.constant_variance_ = prior.constant
        est.spectral_family_ = prior.family if prior.family != "matern" else (
            f"matern (nu={prior.nu:g})")
        est.diffusion_time_ = t
        est.amplitude_ = amplitude
        est.log_marginal_likelihood_ = log_ev
        est.n_iter_ = n_evals
        est._mixture = [(tk, wk, st, amplitude) for tk, wk, st in
                        (mixture if mixture is not None else [(t, 1.0, state)])]
        est.diffusion_time_weights_ = (None if mixture is None else
                                       np.array([[tk, wk] for tk, wk, _ in mixture]))
        est.predictive_scale_ = est._predictive_scale(codes)
        # the warnings two frames below this one
        est._warn_weak_fit(codes, t, stacklevel=stacklevel + 2)
        est._warn_degenerate_prior(prior, t, stacklevel=stacklevel + 2)
        est._predictor = ClassPredictor(
            prior, est.classes_.size, est._ep, est._one_vs_rest,
            est._mixture, est.predictive_scale_, est._prior, est._piece_has_label,
            V_lab)
        with stage("transduction"):
            proba = eigenpairs.map_chunks(est._predictor, n_columns=est.classes_.size,
                                          parallel=True, project=est._predictor.project)
        est.label_distributions_ = proba
        est.transduction_ = classes_of(proba, est.classes_)
        est._other_fit = None
        self._candidate = self._codes = None    # the estimator holds the eigenbasis now

    def predict_proba(self, X, stacklevel):
        raise RuntimeError("the heat kernel predicts through its estimator's eigenbasis "
                           "(FLGPClassifier.predict_proba).")
