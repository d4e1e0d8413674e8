"""The classifier's hyperparameter search on one candidate's eigenpairs: the diffusion time
``t`` (and, with EP, the prior amplitude ``A``) by the evidence, Laplace or EP, with the
spectral prior on ``t`` (:class:`flgp.FLGPClassifier`; docs/models.md)."""

from __future__ import annotations

import numpy as np

from ..spectral.families import SpectralPrior, diffusion_time_range, spectral_time_prior
from .search import diffusion_time_mixture, parabolic_refine, search_log_scalar
from .class_predictor import prior_gram
from .inference.ep import ep_multinomial_probit, ep_probit
from .inference.laplace import LogisticLikelihood, laplace_binary, laplace_softmax

__all__ = ["TimeSearch", "AMPLITUDE_GRID"]

_T_GRID = 12  # log-spaced diffusion times searched (and averaged over)
# prior amplitudes A tried by the EP classifier: with probit noise of variance 1 and
# C_t(x, x) about 1-10, from noisy (A = 1) to nearly deterministic labels (A = 1000)
AMPLITUDE_GRID = (1.0, 10.0, 100.0, 1000.0)
_A_START = 100.0
# EP convergence (largest relative change of a site parameter): looser while searching
# the hyperparameters, tight for the posteriors that predict
_EP_SEARCH_TOL = 1e-2
_EP_TOL = 1e-7


class TimeSearch:
    """The diffusion time (and the amplitude, EP) of one candidate's eigenpairs, by the
    approximate marginal likelihood times the prior on ``t``, under the heat kernel
    ``heat`` (its spectral prior ``prior``) with the fit's ``options``; ``n_evals`` counts
    the posteriors computed."""

    def __init__(self, heat, options, prior: SpectralPrior, V_lab, n_classes: int):
        self.heat, self.options = heat, options
        self.spectral_prior = prior
        self.V_lab = V_lab                       # EP's features rotate it themselves
        self.V_rot = prior.rotate(V_lab)         # Laplace's kernel blocks read V R
        self.n_classes = n_classes
        self.n_evals = 0
        self.time_prior = (spectral_time_prior(prior.eigenvalues, self.n_classes)
                           if heat.diffusion_time_prior == "spectral" else None)
        # one posterior a diffusion time: averaged over the grid's where asked
        self.averaged = options.average_diffusion_time and not options.one_vs_rest

    def _log_prior_t(self, log_t):
        # π(t) ∝ t^{-a0} is ∝ t^{1-a0} in log t; the spectral prior is normal in log t
        out = -(self.heat.diffusion_time_prior_power - 1.0) * log_t
        if self.time_prior is not None:
            centre, sd = self.time_prior
            out = out - 0.5 * ((log_t - centre) / sd) ** 2
        return out

    def fit(self, codes, binary):
        """``(t, amplitude, log evidence, state, mixture)``."""
        if self.options.expectation_propagation:
            return self.finish_ep(self.search_ep(codes, binary))
        return self._fit_laplace(codes, binary)

    # -- Laplace (logistic / softmax) ----------------------------------------------------
    def _laplace(self, K, codes, a0=None, binary=True):
        if binary:
            return laplace_binary(K, 2.0 * codes - 1.0, LogisticLikelihood, a0=a0,
                                  max_iter=self.options.max_iter)
        Y = np.eye(self.n_classes)[codes]
        return laplace_softmax(K, Y, a0=a0, max_iter=self.options.max_iter)

    def _fit_laplace(self, codes, binary):
        Vm = self.V_rot
        if self.heat.diffusion_time is not None:
            self.n_evals += 1
            t = float(self.heat.diffusion_time)
            state = self._laplace(prior_gram(self.spectral_prior, t, Vm, Vm), codes, binary=binary)
            return t, 1.0, state.log_evidence, state, None
        lo, hi = diffusion_time_range(self.spectral_prior.eigenvalues)
        warm = {}
        trace = []

        def neg(log_t):
            # Newton warm-started from the mode at the previous diffusion time
            self.n_evals += 1
            st = self._laplace(prior_gram(self.spectral_prior, np.exp(log_t), Vm, Vm), codes,
                               warm.get("a"), binary=binary)
            warm["a"] = st.a
            val = -st.log_evidence - self._log_prior_t(log_t)
            trace.append((float(np.exp(log_t)), val, st))
            return val

        t, val = search_log_scalar(neg, lo, hi, n_grid=_T_GRID,
                                   maxiter=self.options.max_iter)
        state = self._laplace(prior_gram(self.spectral_prior, t, Vm, Vm), codes, binary=binary)
        mixture = None
        if self.averaged:
            mixture = diffusion_time_mixture(trace[:_T_GRID], t, state)
        return t, 1.0, state.log_evidence, state, mixture

    # -- expectation propagation (probit / multinomial probit) ---------------------------
    def _ep_state(self, codes, binary, t, amplitude, init=None, tol=_EP_TOL):
        self.n_evals += 1
        Phi = self.spectral_prior.features(self.V_lab, t, amplitude)
        if binary:
            return ep_probit(Phi, 2.0 * codes - 1.0, init=init, tol=tol,
                             max_sweeps=self.options.max_iter)
        return ep_multinomial_probit(Phi, codes, self.n_classes, init=init, tol=tol,
                                     max_sweeps=self.options.max_iter)

    def search_ep(self, codes, binary) -> dict:
        """``t`` and the amplitude ``A`` by the EP marginal likelihood: a 12-point log grid
        over ``t`` at ``A = 100``, the amplitude grid at the best ``t`` (the ``t`` grid again
        if another ``A`` wins), then two parabolic steps in ``log t``
        (:func:`flgp.models.search.parabolic_refine`: EP runs are too dear for Brent). Each
        run starts from the previous sites at a looser tolerance than the final posterior.
        Returns what :meth:`finish_ep` needs, ``search_evidence`` the log evidence at the
        chosen ``t`` (the final result when ``t`` is fixed)."""
        fixed_t = self.heat.diffusion_time
        fixed_a = self.heat.amplitude
        warm = {}
        best_seen = {}          # amplitude -> (value, state) of its best evaluation

        def run(t, amplitude, tol=_EP_SEARCH_TOL):
            st = self._ep_state(codes, binary, t, amplitude, warm.get("state"), tol)
            warm["state"] = st
            return st

        def neg(log_t, amplitude, trace=None):
            st = run(np.exp(log_t), amplitude)
            val = -st.log_evidence - self._log_prior_t(log_t)
            if trace is not None:
                trace.append((float(np.exp(log_t)), val, st))
            if np.isfinite(val) and (amplitude not in best_seen
                                     or val < best_seen[amplitude][0]):
                best_seen[amplitude] = (val, st)
            return val

        def grid_t(amplitude):
            trace = []
            for g in np.linspace(np.log(lo), np.log(hi), _T_GRID):
                neg(g, amplitude, trace)
            return trace

        if fixed_t is not None:
            t = float(fixed_t)
            if fixed_a is not None:
                st = run(t, float(fixed_a), _EP_TOL)
                done = (t, float(fixed_a), st.log_evidence, st, None)
            else:
                amps = [(a, run(t, a, _EP_TOL)) for a in AMPLITUDE_GRID]
                amplitude, st = max(amps, key=lambda p: p[1].log_evidence)
                done = (t, amplitude, st.log_evidence, st, None)
            return dict(done=done, search_evidence=done[2])
        lo, hi = diffusion_time_range(self.spectral_prior.eigenvalues)
        amplitude = _A_START if fixed_a is None else float(fixed_a)
        trace = grid_t(amplitude)
        if fixed_a is None:
            k = int(np.argmin([v for _, v, _ in trace]))
            t_best = trace[k][0]
            warm["state"] = trace[k][2]
            best = (trace[k][1], amplitude)
            for a in AMPLITUDE_GRID:
                if a != amplitude:
                    val = neg(np.log(t_best), a)
                    if val < best[0]:
                        best = (val, a)
            if best[1] != amplitude:
                amplitude = best[1]
                trace = grid_t(amplitude)
        vals = np.array([v for _, v, _ in trace])
        vals = np.where(np.isfinite(vals), vals, np.inf)
        k = int(np.argmin(vals))
        warm["state"] = trace[k][2]
        t = np.exp(parabolic_refine(lambda g: neg(g, amplitude),
                                    np.log([tr[0] for tr in trace]), vals, k))
        seen = best_seen.get(amplitude)
        return dict(done=None, codes=codes, binary=binary, t=t, amplitude=amplitude,
                    init=trace[k][2], trace=trace,
                    search_evidence=seen[1].log_evidence if seen else -np.inf)

    def finish_ep(self, found: dict):
        """The posterior at the searched ``t`` and amplitude to full precision (from the
        best grid value's sites) and, when averaging over ``t``, the mixture:
        ``(t, amplitude, log evidence, state, mixture)``."""
        if found["done"] is not None:
            return found["done"]
        codes, binary, t, amplitude = (found["codes"], found["binary"], found["t"],
                                       found["amplitude"])
        state = self._ep_state(codes, binary, t, amplitude, found["init"], _EP_TOL)
        mixture = None
        if self.averaged:
            mixture = diffusion_time_mixture(found["trace"], t, state)
            # the kept grid values' posteriors to full precision
            mixture = [(tk, wk, st if tk == t else self._ep_state(
                codes, binary, tk, amplitude, st, _EP_TOL)) for tk, wk, st in mixture]
        return t, amplitude, state.log_evidence, state, mixture
