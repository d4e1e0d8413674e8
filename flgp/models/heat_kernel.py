"""The low-rank heat kernel as one of the estimators' representations
(:mod:`flgp.models.representation`): FLGP's heat kernel on the cloud's FLGP, GLGP or
Nyström eigenpairs (candidates from :mod:`flgp.models.eigenbasis`).

* Regression (:class:`HeatKernelRegression`, ``"flgp"``): the diffusion time ``t``,
  outputscale ``s²`` and noise ``σ²`` by the exact evidence (Woodbury identity,
  :class:`~flgp.spectral.gaussian.LowRankGaussianEvidence`), for each number of leading
  eigenpairs compared (:func:`resolution_ranks`). It is *bounded*: a candidate eigenbasis
  whose evidence ceiling lies below the best evidence already fitted is declined
  (:class:`~flgp.models.representation.Outranked`), so ``method="auto"`` fits it last.
  Counts (``likelihood="poisson"``): :func:`fit_counts`.
* Classification (:class:`HeatKernelClassification`): EP or Laplace, the fallback of
  ``FLGPClassifier``'s rule.

The fits predict at numpy and dask points and give the latent posterior the labelling loop
scores with.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np

from .._chunks import map_threads, stage
from ..backends import cpu_threads
from ..spectral.families import (ZERO_EIGENVALUE, SpectralPrior, diffusion_time_range,
                                 heat_log_weight_gradient, heat_log_weights)
from ..spectral.gaussian import LowRankGaussianEvidence
from .class_predictor import ClassPredictor, classes_of, loo_rows
from .class_search import TimeSearch
from .eigenbasis import (CandidateFit, FittedEigenbasis, best_candidate,
                         candidate_eigenbases, engine_sizes)
from .inference.ep import fit_predictive_scale, multinomial_loo, probit_loo
from .inference.poisson import (check_counts, count_offset, count_population,
                                fit_count_hyperparameters, poisson_interval, rate_ceiling)
from .labelling import LatentPosterior, classifier_latent_posterior
from .regression_predictor import (CountPredictor, RegressionPredictor,
                                   warn_unrepresentable_counts)
from .representation import (ClassificationFit, ClassificationRepresentation, Outranked,
                             RegressionFit, RegressionRepresentation, screening_margin)
from .search import multistart_minimize, unit_prior_log_scale

__all__ = ["HeatKernelRegression", "HeatKernelRegressionFit", "HeatKernelCountFit",
           "HeatKernelClassification", "HeatKernelClassificationFit", "NOISE_RANGE",
           "EP_FINISH_MARGIN", "default_resolution_ceiling", "resolution_ranks",
           "regression_sizes", "fit_counts", "fit_classes"]

# the noise variance's search range (and its evidence ceiling's), standardised units
NOISE_RANGE = (1e-6, 10.0)
# counts: a posterior mean above this many times the largest labelled count (+ 1) warns
COUNT_RANGE_WARNING = 100.0


def default_resolution_ceiling(n_induced: int) -> int:
    """The most eigenpairs the Gaussian regressor's resolution ladder reaches:
    ``min(400, s - 1)`` (its rungs ``M/8 .. M``; docs/models.md, "Resolution")."""
    return int(max(1, min(400, n_induced - 1)))


def regression_sizes(prior, options, n: int) -> tuple[int, int]:
    """``(s, M)`` of the regressor's heat kernel on ``n`` points (:func:`engine_sizes`;
    ``M`` by default the resolution ceiling for Gaussian targets)."""
    s, M = engine_sizes(prior, n)
    if prior.basis.n_eigenpairs is None and options.likelihood == "gaussian" \
            and prior.method != "glgp":
        M = default_resolution_ceiling(s)
    return s, M


def resolution_ranks(prior, options, M: int) -> list:
    """The numbers of leading eigenpairs the Gaussian fit compares: by default ``M/8,
    M/4, M/2, M`` (at least 10); ``M`` alone when ``n_eigenpairs`` is given."""
    if prior.basis.n_eigenpairs is not None or options.likelihood != "gaussian":
        return [M]
    return sorted({max(1, min(M, r)) for r in (M // 8, M // 4, M // 2, M) if r >= 10}
                  or {M})


def noise_bounds(options, standardisation) -> tuple[float, float]:
    """The standardised noise variance's range: ``NOISE_RANGE``, or the fixed ``noise``."""
    if options.noise is None:
        return NOISE_RANGE
    fixed = standardisation.variance_of_z(options.noise)
    return fixed, fixed


class HeatKernelRegression(RegressionRepresentation):
    """The regressor's heat kernel (see the module notes)."""

    name = "flgp"
    bounded = True
    takes_dask = True

    def infeasible(self, prior, options, shape, n_labelled):
        """A cloud with fewer induced points than each point keeps nearest ones."""
        s = min(regression_sizes(prior, options, shape[0])[0], shape[0])
        basis = prior.basis
        if basis.induced_points is None and s < basis.n_neighbors:
            return (f"{shape[0]} points: the heat kernel's cross graph keeps each point's "
                    f"{basis.n_neighbors} nearest induced points, and there can be only {s}")
        return None

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation, bar=-np.inf):
        offset = standardisation.log_evidence_of_y(0.0, labelled.size)    # z -> y units
        noise_range = noise_bounds(options, standardisation)
        margin = screening_margin(labelled.size)
        ceilings, coarse = [], []

        def beaten(eigenpairs, V_lab, targets):
            """Skip: its ceiling, or its coarse search by more than the margin, below ``bar``."""
            if not np.isfinite(bar):
                return False
            ceiling = LowRankGaussianEvidence(V_lab, targets).ceiling(noise_range)
            ceilings.append(ceiling + offset)
            if ceiling + offset < bar:
                return True
            if not (resolution_ranks(prior, options, eigenpairs.n_eigenpairs)[1:]
                    or prior.diffusion_time is None):
                return False                    # the coarse stage would be the search
            first = fit_hyperparameters(prior, options, eigenpairs, V_lab, targets,
                                        noise_range, n_starts=1)
            coarse.append(-first["nll_evidence"] + offset)
            return coarse[-1] < bar - margin

        def fit_gp(eigenpairs, V_lab, targets):
            return fit_gaussian(prior, options, eigenpairs, V_lab, targets, noise_range)

        candidates = candidate_eigenbases(prior, options, X,
                                          regression_sizes(prior, options, X.shape[0]))
        best = best_candidate(options, candidates, labelled, z, fit_gp, skip=beaten)
        if best is None and coarse:
            raise Outranked(max(coarse), "screened out: its coarse search reached a log "
                            "evidence of {ceiling:.1f} (the margin: " f"{margin:.0f} nats)")
        if best is None:
            raise Outranked(max(ceilings), "its log evidence cannot exceed {ceiling:.1f} (a "
                            "ceiling over every diffusion time, amplitude, noise and "
                            "number of eigenpairs of its eigenbasis)")
        return HeatKernelRegressionFit(prior.method, best, labelled, z, standardisation)


class HeatKernelRegressionFit(RegressionFit):
    """The heat kernel's fit of the best candidate eigenbasis (Gaussian targets). After
    :meth:`fitted_attributes` it holds ``eigenbasis``
    (:class:`~flgp.models.eigenbasis.FittedEigenbasis`), ``predictor``
    (:class:`~flgp.models.regression_predictor.RegressionPredictor`), ``noise_z``
    (standardised) and ``noise_pre`` (in ``(y / unit)²``)."""

    counts = False
    lazy_points = True

    def __init__(self, method, candidate, labelled, z, standardisation):
        self.method = method
        self._candidate, self._labelled, self._z = candidate, labelled, z
        self._standardisation = standardisation
        self.log_evidence = standardisation.log_evidence_of_y(
            -candidate[3].result["nll_evidence"], labelled.size)

    def fitted_attributes(self, X, stacklevel):
        """The estimator's fitted attributes and its transduction."""
        a, eigenpairs, V_lab, fit = self._candidate
        st = self._standardisation
        # the pieces' warning, three frames below this one (_label_pieces, of_labels)
        self.eigenbasis = FittedEigenbasis.of_labels(a, eigenpairs, self._labelled,
                                                     stacklevel=stacklevel + 3)
        out = self.eigenbasis.fitted_attributes(self._labelled)
        fit = fit.result
        k = fit["rank"]
        out.update(method_=self.method, diffusion_time_=fit["t"],
                   outputscale_=st.variance_of_y(fit["s2"]),
                   noise_=st.variance_of_y(fit["noise"]),
                   log_marginal_likelihood_=self.log_evidence, n_iter_=fit["n_iter"],
                   n_eigenpairs_=k)
        ev = LowRankGaussianEvidence(V_lab[:, :k], self._z)
        sd_k, w_mean_k, w_cov_k = ev.posterior(
            log_weights(_Leading(eigenpairs, k), fit["t"], fit["s2"]), fit["noise"])
        M = eigenpairs.n_eigenpairs
        sd, w_mean, w_cov = np.zeros(M), np.zeros(M), np.zeros((M, M))
        sd[:k], w_mean[:k], w_cov[:k, :k] = sd_k, w_mean_k, w_cov_k   # the rest: weight 0
        self.noise_z = fit["noise"]
        self.noise_pre = st.variance_pre(fit["noise"])
        self.unit = st.unit
        self.predictor = RegressionPredictor(sd, w_mean, w_cov, st.mean, st.scale,
                                             self.eigenbasis.piece_has_label)
        out.update(self.transduce(stacklevel))
        self._candidate = self._z = None        # what predicts is kept, not the search's
        return out

    def transduce(self, stacklevel) -> dict:
        """``transduction_`` and ``transduction_std_`` of the cloud."""
        eigenpairs, predictor = self.eigenbasis.eigenpairs, self.predictor
        with stage("transduction"):
            out = eigenpairs.map_chunks(predictor, n_columns=2, parallel=True,
                                        project=predictor.project)
        if self.counts and not eigenpairs.is_dask:
            self._warn_counts(out[:, 0], lambda latent: eigenpairs.map_chunks(
                latent, n_columns=2, project=latent.project), stacklevel=stacklevel + 2)
        return dict(transduction_=out[:, 0], transduction_std_=out[:, 1])

    def predict(self, X, stacklevel):
        """``(mean, std)`` at numpy or dask points ``X`` (lazy for dask), with the
        far-point warning."""
        predictor = self.predictor
        out = self.eigenbasis.map_points(X, predictor, stacklevel=stacklevel + 1,
                                         n_columns=2, project=predictor.project)
        if not isinstance(X, np.ndarray):
            return out[:, 0], out[:, 1]
        out = out.T.copy()              # two contiguous rows: mean, sd
        mean, std = out[0], out[1]
        if self.counts:
            self._warn_counts(mean, lambda latent: self.eigenbasis.eigenpairs.map_points(
                X, latent, n_columns=2, project=latent.project), stacklevel=stacklevel + 2)
        return mean, std

    def interval_noise(self):
        return self.unit, self.noise_pre

    def latent_posterior(self) -> LatentPosterior:
        """The latent ``f`` as a Gaussian in the eigenbasis (standardised units; the
        log-rate for counts), with the precision a new label adds."""
        pr = self.predictor
        M = self.eigenbasis.eigenpairs.n_eigenpairs
        mean = np.zeros(M)
        cov = np.zeros((M, M))
        mean[:pr.k] = pr.sd * pr.w_mean
        cov[:pr.k, :pr.k] = pr.sd[:, None] * pr.w_cov * pr.sd[None, :]
        if self.counts:
            return LatentPosterior(mean, cov, offset=pr.offset, count_rate=True)
        return LatentPosterior(mean, cov, precision=1.0 / self.noise_z)

    def _warn_counts(self, mean, latent_moments, stacklevel):
        """Warn about rates beyond float64 or ``count_bound``; ``latent_moments(latent)``:
        the log-rate's mean and sd, computed only then."""
        large = ~(np.asarray(mean) <= self.count_bound)
        if not large.any():
            return
        sd = latent_moments(CountPredictor.latent_of(self.predictor))[:, 1]
        if not np.isfinite(mean).all():
            warn_unrepresentable_counts(mean, float(sd[~np.isfinite(mean)].max()),
                                        stacklevel=stacklevel + 1)
            return
        warnings.warn(f"{int(large.sum())} point(s) have a posterior mean count above "
                      f"{COUNT_RANGE_WARNING:.0f} times the largest labelled count (up to "
                      f"{float(np.max(mean)):.3g}): E[exp f] = exp(m + v/2) is carried by "
                      f"the log-rate's wide posterior there (its sd up to "
                      f"{float(sd[large].max()):.3g}), not by counts the labels show. The "
                      f"labels say little of the rate at those points: predict_interval "
                      f"gives the count's quantiles, and labels near them narrow it.",
                      UserWarning, stacklevel=stacklevel + 1)

class HeatKernelCountFit(HeatKernelRegressionFit):
    """The heat kernel's fit of counts (``likelihood="poisson"``, Laplace in weight
    space): it predicts the rate, and the count's intervals (:meth:`count_interval`)."""

    counts = True

    def __init__(self, method, candidate, labelled, y_lab, offset):
        self.method = method
        self._candidate, self._labelled = candidate, labelled
        self._y_lab, self._offset = y_lab, offset
        self.log_evidence = -candidate[3].result["nll_evidence"]

    def fitted_attributes(self, X, stacklevel):
        a, eigenpairs, V_lab, fit = self._candidate
        self.eigenbasis = FittedEigenbasis.of_labels(a, eigenpairs, self._labelled,
                                                     stacklevel=stacklevel + 3)
        out = self.eigenbasis.fitted_attributes(self._labelled)
        fit = fit.result
        offset = self._offset
        out.update(method_=self.method, diffusion_time_=fit["t"], outputscale_=fit["s2"],
                   noise_=None, offset_=offset, log_marginal_likelihood_=self.log_evidence,
                   n_iter_=fit["n_iter"])
        M = eigenpairs.n_eigenpairs
        kept, state = fit["kept"], fit["state"]
        sd = np.zeros(M)
        sd[kept] = np.sqrt(fit["weights"][kept])
        w_mean = np.zeros(M)
        w_mean[kept] = state.u
        w_cov = np.zeros((M, M))
        w_cov[np.ix_(kept, kept)] = state.covariance()
        self.noise_z = self.noise_pre = None
        self.unit = 1.0
        out["overdispersion_"] = fit["nugget"]
        # an unlabelled piece predicts the labelled counts' population (CountPredictor)
        population = count_population(V_lab[:, kept] * sd[kept], state)
        self.predictor = CountPredictor(sd, w_mean, w_cov, offset,
                                        self.eigenbasis.piece_has_label, fit["nugget"],
                                        population=population,
                                        ceiling=rate_ceiling(self._y_lab))
        self.count_bound = COUNT_RANGE_WARNING * (float(np.max(self._y_lab)) + 1.0)
        out.update(self.transduce(stacklevel))
        self._candidate = self._y_lab = None
        return out

    def interval_noise(self):
        raise RuntimeError("a count has no separate noise variance (count_interval).")

    def count_interval(self, X, coverage, stacklevel):
        """Equal-tailed ``coverage`` intervals of a new count at the numpy points ``X``:
        the quantiles of the Poisson–log-normal mixture over the latent's posterior."""
        latent = CountPredictor.latent_of(self.predictor)
        out = self.eigenbasis.map_points(X, latent, stacklevel=stacklevel + 1, n_columns=2,
                                         project=latent.project)
        return poisson_interval(out[:, 0], out[:, 1], coverage,
                                ceiling=getattr(self.predictor, "ceiling", None))


def fit_counts(prior, options, X, labelled, y_lab) -> HeatKernelCountFit:
    """The heat kernel's fit of the counts ``y_lab``: the candidate eigenbasis of best
    Laplace evidence times the prior on ``t``."""
    y_lab = check_counts(y_lab, labelled)
    offset = count_offset(y_lab)

    def fit_gp(eigenpairs, V_lab, targets):
        y, b = targets
        fit = fit_count_hyperparameters(
            eigenpairs, V_lab, y, b, diffusion_time=prior.diffusion_time,
            prior_power=prior.diffusion_time_prior_power, max_iter=options.max_iter,
            nugget=options.overdispersion)
        return CandidateFit(score=-fit["nll"], t=fit["t"], log_evidence=-fit["nll_evidence"],
                            result=fit)

    candidates = candidate_eigenbases(prior, options, X,
                                      regression_sizes(prior, options, X.shape[0]))
    best = best_candidate(options, candidates, labelled, (y_lab, offset), fit_gp)
    return HeatKernelCountFit(prior.method, best, labelled, y_lab, offset)


def fit_gaussian(prior, options, eigenpairs, V_lab, z, noise_range) -> CandidateFit:
    """One candidate's best hyperparameters over :func:`resolution_ranks`."""
    fit = None
    for rank in resolution_ranks(prior, options, eigenpairs.n_eigenpairs):
        trial = fit_hyperparameters(prior, options, _Leading(eigenpairs, rank),
                                    V_lab[:, :rank], z, noise_range)
        trial["rank"] = rank
        if fit is None or trial["nll"] < fit["nll"]:
            fit = trial
    return CandidateFit(score=-fit["nll"], t=fit["t"], log_evidence=-fit["nll_evidence"],
                        result=fit)


def fit_hyperparameters(prior, options, eigenpairs, V_lab, z, noise_range,
                        n_starts: int = 2) -> dict:
    """``t``, ``s²`` and ``σ²`` by the exact evidence times ``π(t) ∝ t^{-a0}``: L-BFGS-B
    on their logarithms from the ``n_starts`` best ``t`` of a 12-point log grid, each with
    the outputscale giving the labelled points unit mean prior variance."""
    ev = LowRankGaussianEvidence(V_lab, z)
    lam = eigenpairs.eigenvalues
    log_scale = np.log(eigenpairs.kernel_scale)
    lo, hi = diffusion_time_range(lam)
    fixed_t = prior.diffusion_time
    noise_lo, noise_hi = noise_range
    fixed_noise = None if options.noise is None else noise_lo
    # theta = (log t, log s^2, log noise); fixed entries are held by tight bounds
    bounds = [(np.log(lo), np.log(hi)), (np.log(1e-4), np.log(1e4)),
              (np.log(noise_lo), np.log(noise_hi))]
    if fixed_t is not None:
        bounds[0] = (np.log(fixed_t),) * 2
    power = prior.diffusion_time_prior_power - 1.0      # π(t) ∝ t^{1-a0} in log t

    def f_and_grad(theta):
        log_t, log_s2, log_noise = theta
        t = np.exp(log_t)
        try:
            nll, g_logd, g_noise = ev.value_and_grad(
                log_s2 + log_scale + heat_log_weights(lam, t), log_noise)
        except (np.linalg.LinAlgError, ValueError):
            return 1e30, np.zeros(3)
        nll = nll + power * log_t
        grad = np.array([np.sum(g_logd * heat_log_weight_gradient(lam, t)) + power,
                         np.sum(g_logd), g_noise])
        if not (np.isfinite(nll) and np.all(np.isfinite(grad))):
            return 1e30, np.zeros(3)
        return nll, grad

    noise0 = bounds[2][0] if fixed_noise is not None else np.log(0.1)

    def matched_log_s2(log_t):
        return unit_prior_log_scale(eigenpairs, ev.V, log_t, bounds[1])

    grid = ([bounds[0][0]] if fixed_t is not None
            else np.linspace(np.log(lo), np.log(hi), 12))
    best = multistart_minimize(
        f_and_grad, [np.array([g, matched_log_s2(g), noise0]) for g in grid], bounds,
        n_starts=n_starts, max_iter=options.max_iter)
    log_t, log_s2, log_noise = best.x
    prior_term = power * log_t
    return dict(t=float(np.exp(log_t)), s2=float(np.exp(log_s2)),
                noise=float(np.exp(log_noise)), nll=float(best.fun),
                nll_evidence=float(best.fun - prior_term), n_iter=max(1, int(best.nit)))


class _Leading:
    """The leading ``k`` eigenvalues and the kernel scale of an eigenbasis."""

    def __init__(self, eigenpairs, k: int):
        self.eigenvalues = eigenpairs.eigenvalues[:k]
        self.kernel_scale = eigenpairs.kernel_scale


def log_weights(eigenpairs, t, s2):
    """``log(s^2 c e^{-tλ})``: the prior weights of the eigenbasis in log space."""
    return np.log(s2 * eigenpairs.kernel_scale) + heat_log_weights(eigenpairs.eigenvalues, t)


# -- classification ---------------------------------------------------------------------

class HeatKernelClassification(ClassificationRepresentation):
    """The classifier's heat kernel: EP (or Laplace) on the eigenbasis, the diffusion time
    under the spectral prior (:func:`fit_classes`), probabilities calibrated by
    leave-one-out (docs/models.md). The ``fallback`` of ``FLGPClassifier.REPRESENTATIONS``."""

    name = "flgp"
    fallback = True
    takes_dask = True

    def chosen_by_auto(self, prior, options, X, counts):
        return True

    def fit(self, prior, options, X, labelled, codes, classes):
        candidates = candidate_eigenbases(prior, options, X, engine_sizes(prior, X.shape[0]))
        best = best_candidate(options, candidates, labelled, codes,
                              lambda eigenpairs, V_lab, c: fit_classes(
                                  prior, options, eigenpairs, V_lab, c, classes.size))
        return HeatKernelClassificationFit(prior, options, best, labelled, codes, classes)


class HeatKernelClassificationFit(ClassificationFit):
    """The classifier's heat-kernel fit of the best candidate eigenbasis. After
    :meth:`fitted_attributes` it holds ``eigenbasis``, ``spectral_prior``, ``V_lab``, the
    ``mixture`` over diffusion times (``(t, weight, state, amplitude)`` each) and the
    ``predictor`` (:class:`~flgp.models.class_predictor.ClassPredictor`)."""

    lazy_points = True

    def __init__(self, prior, options, candidate, labelled, codes, classes):
        self.method, self.classes, self.n_classes = prior.method, classes, classes.size
        self._candidate, self._labelled, self._codes = candidate, labelled, codes
        self._fixed_time = prior.diffusion_time
        self.expectation_propagation = options.expectation_propagation
        self.one_vs_rest = options.one_vs_rest
        self._calibrated = (options.expectation_propagation
                            and options.calibration is not None)

    def fitted_attributes(self, X, stacklevel):
        """The estimator's fitted attributes and its transduction."""
        a, eigenpairs, V_lab, fit = self._candidate
        labelled, codes = self._labelled, self._codes
        # the pieces' warning, three frames below this one (_label_pieces, of_labels)
        self.eigenbasis = FittedEigenbasis.of_labels(a, eigenpairs, labelled,
                                                     stacklevel=stacklevel + 3)
        out = self.eigenbasis.fitted_attributes(labelled)
        t, amplitude, log_ev, state, mixture, n_evals, prior = fit.result
        self.V_lab = V_lab
        self.spectral_prior = prior
        out.update(constant_variance_=prior.constant,
                   spectral_family_=prior.family if prior.family != "matern" else (
                       f"matern (nu={prior.nu:g})"),
                   diffusion_time_=t, amplitude_=amplitude, log_marginal_likelihood_=log_ev,
                   n_iter_=n_evals)
        self.mixture = [(tk, wk, st, amplitude) for tk, wk, st in
                        (mixture if mixture is not None else [(t, 1.0, state)])]
        out["diffusion_time_weights_"] = (None if mixture is None else
                                          np.array([[tk, wk] for tk, wk, _ in mixture]))
        scale = predictive_scale(self.mixture, codes, self.n_classes, self._calibrated,
                                 self.one_vs_rest)
        out["predictive_scale_"] = scale
        # the warnings two frames below this one
        warn_weak_fit(codes, self.n_classes, t, self._fixed_time, eigenpairs.eigenvalues,
                      stacklevel=stacklevel + 2)
        warn_degenerate_prior(prior, t, stacklevel=stacklevel + 2)
        self.predictor = ClassPredictor(
            prior, self.n_classes, self.expectation_propagation, self.one_vs_rest,
            self.mixture, scale, np.bincount(codes, minlength=self.n_classes) / codes.size,
            self.eigenbasis.piece_has_label, V_lab)
        with stage("transduction"):
            proba = eigenpairs.map_chunks(self.predictor, n_columns=self.n_classes,
                                          parallel=True, project=self.predictor.project)
        out["label_distributions_"] = proba
        out["transduction_"] = classes_of(proba, self.classes)
        self._candidate = self._codes = None    # what predicts is kept, not the search's
        return out

    def predict_proba(self, X, stacklevel):
        """Class probabilities at numpy or dask points ``X`` (lazy for dask), with the
        far-point warning."""
        return self.eigenbasis.map_points(X, self.predictor, stacklevel=stacklevel + 1,
                                          n_columns=self.n_classes,
                                          project=self.predictor.project)

    def predict_latent(self, X, stacklevel):
        """``(mean, var)`` of the latents at ``X`` (one column for two classes)."""
        width = 1 if self.n_classes == 2 else self.n_classes
        out = self.eigenbasis.map_points(X, self.predictor.latent, stacklevel=stacklevel + 1,
                                         n_columns=2 * width,
                                         project=self.predictor.project_exact)
        return out[:, :width], out[:, width:]

    def latent_posterior(self) -> LatentPosterior:
        """The latent functions as a Gaussian in the eigenbasis at the MAP diffusion time
        (:meth:`FLGPClassifier.latent_posterior`)."""
        t, _, state, amplitude = self.mixture[0]
        prior = self.spectral_prior
        post = classifier_latent_posterior(prior, prior.rotate(self.V_lab), t, state,
                                           amplitude, n_classes=self.n_classes,
                                           expectation_propagation=self.expectation_propagation,
                                           one_vs_rest=self.one_vs_rest)
        if prior.rotation is not None:         # back from the rotated basis: β = R β'
            R = prior.rotation
            post = type(post)(R @ post.mean, R[None] @ post.cov @ R.T[None],
                              precision=post.precision, offset=post.offset,
                              count_rate=post.count_rate)
        return post

# compared priors trailing the best search evidence by more than this many nats skip the
# final tight EP run (the search evidence is within ~0.01 nat of the converged one)
EP_FINISH_MARGIN = 1.0


def spectral_families(prior) -> list:
    """``(family, nu)`` of the priors the fit compares (``"auto"``: heat, Matérn ``ν = 1,
    2``, pseudo-inverse)."""
    if prior.spectral_family == "auto":
        return [("heat", prior.matern_nu), ("matern", 1.0), ("matern", 2.0),
                ("green", prior.matern_nu)]
    return [(prior.spectral_family, prior.matern_nu)]


def fit_classes(prior, options, eigenpairs, V_lab, codes, n_classes) -> CandidateFit:
    """``t`` and the amplitude on one candidate's eigenpairs, for the spectral family and
    constant-mode variance of highest evidence (one-vs-rest: one value per class, the
    evidence summed, the state a list). With EP, priors trailing by more than
    ``EP_FINISH_MARGIN`` nats are not refined."""
    constants = ((0.0, 1.0) if prior.constant_variance is None
                 else (float(prior.constant_variance),))
    searches = []
    for (family, nu), constant in itertools.product(spectral_families(prior), constants):
        spectral = SpectralPrior.of(eigenpairs, family, nu, constant)
        searches.append((spectral, TimeSearch(prior, options, spectral, V_lab, n_classes)))
    binary = n_classes == 2
    # the compared priors' searches are independent: one thread each
    threads = cpu_threads()
    if options.expectation_propagation and not options.one_vs_rest:
        found = map_threads(lambda job: job[1].search_ep(codes, binary), searches, threads)
        top = max(f["search_evidence"] for f in found)
        keep = [i for i, f in enumerate(found)
                if f["search_evidence"] >= top - EP_FINISH_MARGIN]
        results = dict(zip(keep, map_threads(
            lambda i: searches[i][1].finish_ep(found[i]), keep, threads)))
    elif not options.one_vs_rest:
        results = dict(enumerate(map_threads(
            lambda job: job[1].fit(codes, binary), searches, threads)))
    else:
        def one_vs_rest(job):
            fits = [job[1].fit((codes == c).astype(np.int64), True) for c in range(n_classes)]
            return (np.array([f[0] for f in fits]), np.array([f[1] for f in fits]),
                    float(sum(f[2] for f in fits)), [f[3] for f in fits], None)
        results = dict(enumerate(map_threads(one_vs_rest, searches, threads)))
    best = None
    for i, (spectral, search) in enumerate(searches):
        if i not in results:
            continue
        t, amplitude, log_ev, state, mixture = results[i]
        if best is None or log_ev > best.score:
            best = CandidateFit(score=log_ev, t=t, log_evidence=log_ev,
                                result=(t, amplitude, log_ev, state, mixture,
                                        search.n_evals, spectral))
    return best


def predictive_scale(mixture, codes, n_classes, calibrated, one_vs_rest):
    """``κ`` by leave-one-out (:func:`flgp.models.inference.ep.fit_predictive_scale`) over
    the ``mixture`` (one per class for ``one_vs_rest``); 1 unless ``calibrated``. Only
    points whose class has another label are left out."""
    if not calibrated:
        return 1.0
    counts = np.bincount(codes, minlength=n_classes)
    keep = counts[codes] >= 2
    if not keep.any():
        return 1.0 if not one_vs_rest else np.ones(n_classes)
    if one_vs_rest:
        states = mixture[0][2]
        return np.array([fit_predictive_scale([loo_rows(probit_loo(st), keep)])
                         for st in states])
    weights = [c[1] for c in mixture]
    if n_classes == 2:
        terms = [loo_rows(probit_loo(c[2]), keep) for c in mixture]
    else:
        terms = [loo_rows(multinomial_loo(c[2], codes), keep) for c in mixture]
    return fit_predictive_scale(terms, weights)


def warn_weak_fit(codes, n_classes, t, fixed_time, eigenvalues, stacklevel: int = 4) -> None:
    """Warn when the labels cannot decide the prior: every class has a single label, or
    the MAP diffusion time ``t`` sits at an end of its range (unless ``fixed_time``)."""
    counts = np.bincount(codes, minlength=n_classes)
    if counts.max() == 1:
        warnings.warn("every class has a single label: the diffusion time rests on the "
                      "prior (diffusion_time_prior) and the probabilities cannot be "
                      "calibrated from the labels, so they are under-confident. A "
                      "second label per class lets the fit check both; "
                      "the full-resolution classifier (GraphMaternPrior(), the default) sets its "
                      "probabilities from the cloud instead (docs/few_labels.md).",
                      UserWarning,
                      stacklevel=stacklevel)
    if fixed_time is not None:
        return
    lo, hi = diffusion_time_range(eigenvalues)
    ts = np.atleast_1d(t)
    at_end = (np.log(ts) < np.log(lo) + 0.05) | (np.log(ts) > np.log(hi) - 0.05)
    if at_end.any():
        warnings.warn(f"the diffusion time t={float(ts[at_end][0]):.3g} sits at an end of "
                      f"its range [{lo:.3g}, {hi:.3g}]: the evidence keeps pushing it "
                      f"beyond what the eigenpairs resolve, so the predictions are "
                      f"close to the prior's there. More labels, or a fixed "
                      f"diffusion_time, settle it.", UserWarning, stacklevel=stacklevel)


def warn_degenerate_prior(prior, t, stacklevel: int = 4) -> None:
    """Warn when at the fitted ``t`` every mode of non-zero eigenvalue has weight 0: the
    prior cannot tell the points of a piece of the graph apart."""
    lam = prior.eigenvalues
    kept = np.zeros(lam.size, dtype=bool)
    for tk in np.atleast_1d(t):
        kept |= prior.weights(float(tk)) != 0
    if np.any(kept & (lam > ZERO_EIGENVALUE)):
        return
    sizes = f"{lam.size} eigenpair(s)"
    what = ("no mode of the eigenbasis: the latent is 0 everywhere and every class gets "
            "probability 1/n_classes" if not kept.any() else
            "only the constant mode of each piece of the graph (eigenvalue 0): "
            "every point of a piece gets the same prediction")
    warnings.warn(f"the fitted prior (diffusion time {float(np.max(t)):.3g}, {sizes}) "
                  f"keeps {what}. The labels cannot say more through it; use more "
                  f"eigenpairs and induced points (n_eigenpairs, n_induced), or a shorter "
                  f"diffusion_time.", UserWarning, stacklevel=stacklevel)
