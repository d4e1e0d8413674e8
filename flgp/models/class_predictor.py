"""The classifier's predictions from a fitted posterior: class probabilities of eigenvector
rows (EP probit or multinomial probit, Laplace logistic or softmax; averaged over the
diffusion times of the mixture), the latent moments, and the leave-one-out terms of the
calibration (:class:`flgp.FLGPClassifier`)."""

from __future__ import annotations

import numpy as np

from ..spectral.families import SpectralPrior
from ..spectral.prior import LowRankPrior
from .inference.ep import (multinomial_predict_projected, multinomial_projection,
                           probit_latent_projected, probit_probabilities, probit_projection)
from .inference.laplace import (binary_predict_low_rank, binary_predict_low_rank_many,
                                probit_logistic, softmax_predict, softmax_probabilities)

__all__ = ["ClassPredictor", "classes_of", "loo_rows", "prior_gram"]


def loo_rows(loo, keep):
    """The leave-one-out terms of the labelled points ``keep``."""
    return tuple(np.asarray(part)[keep] for part in loo)


def _argmax_classes(proba, classes):
    return classes[np.argmax(proba, axis=1)]


def classes_of(proba, classes):
    """The most probable class of each row (lazily for a dask array)."""
    if not isinstance(proba, np.ndarray):
        return proba.map_blocks(_argmax_classes, classes, drop_axis=1, dtype=classes.dtype,
                                meta=np.empty(0, dtype=classes.dtype))
    return _argmax_classes(proba, classes)


def prior_gram(prior, t, V1, V2):
    """``V1 K V2ᵀ`` of the prior at ``t`` (``V1``, ``V2`` rows of the rotated basis): the
    low-rank prior's covariance (:meth:`flgp.spectral.LowRankPrior.gram`)."""
    return LowRankPrior(prior.weights(t)).gram(V1, V2)


class ClassPredictor:
    """Class probabilities and latent moments of a fitted classifier from eigenvector rows
    (:meth:`Eigenpairs.map_chunks` / :meth:`~Eigenpairs.map_points` call it on blocks of
    rows). It holds no ``n``-sized array, so it is small and picklable for Dask tasks.

    With EP a prediction is linear in the row ``v`` before a sum of squares, so the
    predictor declares ``project`` (the latent means' columns and the variance factors')
    and is called with the rows of ``V`` times each, which FLGP computes from the
    ``r``-sparse transition rows in ``O(r k)`` a point. Laplace predictors (``project``
    None) get ``V``.

    ``predictor(Z, pieces) -> (b, n_classes)`` probabilities; rows in a piece without
    labels get the labels' class frequencies (the prior prediction).
    """

    def __init__(self, spectral_prior: SpectralPrior, n_classes: int, ep: bool,
                 one_vs_rest: bool, mixture, scale, prior, piece_has_label, V_lab):
        self.spectral_prior = spectral_prior
        self.n_classes = int(n_classes)
        self.ep = ep
        self.one_vs_rest = one_vs_rest
        self.mixture = mixture
        self.scale = scale
        self.prior = prior
        self.piece_has_label = piece_has_label
        self.V_lab = None if self.ep else spectral_prior.rotate(V_lab)
        self._project, self._columns = (self._projection() if self.ep else (None, None))
        self._project_single = (None if self._project is None else
                                self._project[1].astype(np.float32))

    def _posteriors(self):
        """``(t, amplitude, state)`` of every EP posterior the predictions use: one per
        class (one-vs-rest) or per diffusion time of the mixture."""
        if self.one_vs_rest:
            (t, A, states), = [(c[0], c[3], c[2]) for c in self.mixture]
            return list(zip(t, A, states))
        return [(c[0], c[3], c[2]) for c in self.mixture]

    def _projection(self):
        """``(means, factors)``: the latent means' columns and the variance factors', with
        each posterior's columns in both. The probabilities read the factors in float32
        (:attr:`project`; squares summed in float64: probabilities move by ~1e-8), the
        latent moments in float64 (:attr:`project_exact`)."""
        means, factors, columns, at_m, at_f = [], [], [], 0, 0
        multinomial = self.n_classes > 2 and not self.one_vs_rest
        for t, A, state in self._posteriors():
            D = self.spectral_prior.feature_matrix(t, A)
            block = D @ (multinomial_projection(state) if multinomial
                         else probit_projection(state))
            k = self.n_classes if multinomial else 1
            means.append(block[:, :k])
            factors.append(block[:, k:])
            columns.append((at_m, at_m + k, at_f, at_f + block.shape[1] - k, D.shape[1]))
            at_m, at_f = at_m + k, at_f + block.shape[1] - k
        return (np.ascontiguousarray(np.hstack(means)),
                np.ascontiguousarray(np.hstack(factors))), columns

    @property
    def project(self):
        """What the probabilities read: the variance factors in float32."""
        if self._project is None:
            return None
        return self._project[0], self._project_single

    @property
    def project_exact(self):
        """What the latent moments read (:meth:`latent`): everything in float64."""
        return self._project

    def __call__(self, Z, pieces=None):
        return self.predict(Z, pieces, moments=False)[0]

    def latent(self, Z, pieces=None):
        """Latent means and variances side by side, ``(b, 2)`` or ``(b, 2 C)``."""
        _, mean, var = self.predict(Z, None, moments=True)
        b = (Z[0] if isinstance(Z, tuple) else Z).shape[0]
        return np.concatenate([np.reshape(mean, (b, -1)), np.reshape(var, (b, -1))], axis=1)

    def _one(self, Z, j, t, state, moments=True, scale=1.0):
        """Class probabilities (or the binary ``P(class 1)``), latent means and variances of
        posterior ``j`` (one diffusion time, or one class of one-vs-rest); the moments are
        None when not asked for (multi-class EP computes them only then). ``Z``: the rows
        of ``V · project`` (EP) or ``V`` (Laplace)."""
        if self.ep:
            a, b, af, bf, dim = self._columns[j]
            means, factors = Z[0][:, a:b], Z[1][:, af:bf]
            if self.n_classes == 2 or self.one_vs_rest:
                mean, var = probit_latent_projected(means, factors)
                return probit_probabilities(mean, var, scale), mean, var
            out = multinomial_predict_projected(means, self.n_classes, dim,
                                                moments=moments, scale=scale, factors=factors)
            return out if moments else (out, None, None)
        V, Vl = self.spectral_prior.rotate(Z), self.V_lab
        if self.n_classes == 2 or self.one_vs_rest:
            mean, var = binary_predict_low_rank(state, Vl, self.spectral_prior.weights(t), V)
            return probit_logistic(mean, var), mean, var
        prior = LowRankPrior(self.spectral_prior.weights(t))
        K_cross, k_diag = prior.gram(Vl, V), prior.variances_of(V)
        mean, var = softmax_predict(state, K_cross, k_diag)
        return softmax_probabilities(mean, var, random_state=0), mean, var

    def predict(self, Z, pieces, moments=True):
        """Class probabilities and latent moments, averaged over the mixture of diffusion
        times. Latent moments are those of the mixture (None for ``moments=False`` where
        they cost extra: multi-class EP)."""
        if self.one_vs_rest:
            posteriors = self._posteriors()
            scales = np.broadcast_to(self.scale, (len(posteriors),))
            out = [self._one(Z, j, t, st, scale=k)
                   for j, ((t, _, st), k) in enumerate(zip(posteriors, scales))]
            proba = np.stack([o[0] for o in out], 1)
            proba /= proba.sum(axis=1, keepdims=True)
            mean = np.stack([o[1] for o in out], 1)
            var = np.stack([o[2] for o in out], 1)
        elif self.n_classes == 2 and not self.ep and len(self.mixture) > 1:
            # Laplace, binary: one stacked product serves every diffusion time
            weights = np.array([c[1] for c in self.mixture])
            W = self.spectral_prior.weights(np.array([c[0] for c in self.mixture]))
            means, variances = binary_predict_low_rank_many(
                [c[2] for c in self.mixture], self.V_lab, W, self.spectral_prior.rotate(Z))
            proba = probit_logistic(means, variances) @ weights
            mean = means @ weights
            var = np.maximum((variances + means * means) @ weights - mean * mean, 0.0)
        else:
            proba = mean = second = 0.0
            for j, (t, w, st, _) in enumerate(self.mixture):
                p, mu, v = self._one(Z, j, t, st, moments, self.scale)
                proba = proba + w * p
                if mu is not None:
                    mean = mean + w * mu
                    second = second + w * (v + mu * mu)
            var = np.maximum(second - mean * mean, 0.0) if mu is not None else None
        if self.n_classes == 2:
            proba = np.c_[1 - proba, proba]
        if pieces is not None and self.piece_has_label is not None:
            prior = ~self.piece_has_label[pieces]
            if prior.any():
                proba[prior] = self.prior
        return proba, mean, var
