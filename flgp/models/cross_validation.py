"""The classifier's choice between its full-resolution fit and the heat kernel's, by
cross-validation over the labels.

The least-squares graph Matérn classifier (``"graph_matern"``, the default rule's) is sharp
and right where the classes are clusters of the graph but as sharp where they overlap; the
heat kernel's probit classifier (``"flgp"``) is better calibrated where the class
probability varies smoothly (docs/calibration.md). Once each class has ``CV_MIN_LABELS``
labels, ``K = min(CV_FOLDS, fewest labels a class)`` stratified folds of the labelled rows
(shuffled with ``random_state``) are predicted by both fits of the other folds' labels
(graph, prior columns and eigenpairs computed once). The heat kernel is taken where it is
better on both: more held-out labels right, and a mean held-out log-likelihood
(probabilities floored at ``PROBABILITY_FLOOR``) higher by more than ``SIGNIFICANCE``
standard errors of the paired differences, so that one confidently wrong label cannot
decide. Labels chosen by ``suggest_labels`` are no random sample: with any of them, the
rule's fit stands.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
from sklearn.model_selection import StratifiedKFold

from .._validation import integer_seed
from .eigenbasis import shared_candidates
from .representation import WarmStartCache

__all__ = ["CV_FOLDS", "CV_MIN_LABELS", "cross_validates", "cross_validated_fit",
           "cross_validated_scores", "takes_heat_kernel"]

# folds at most, and the fewest labels a class for a cross-validated choice
CV_FOLDS = 5
CV_MIN_LABELS = 3
# the floor of a held-out label's probability in its log-likelihood
PROBABILITY_FLOOR = 1e-6
# standard errors by which the heat kernel's held-out log-likelihood must lead
SIGNIFICANCE = 2.0


def cross_validates(options, X, labelled, codes, n_classes) -> bool:
    """Whether the labels admit the cross-validated choice: a numpy cloud, at least
    ``CV_MIN_LABELS`` labels a class, none of them chosen by ``suggest_labels``."""
    counts = np.bincount(codes, minlength=n_classes)
    return (isinstance(X, np.ndarray) and counts.min() >= CV_MIN_LABELS
            and not np.isin(labelled, np.asarray(options.suggested, dtype=np.int64)).any())


def cross_validated_fit(fits, options, X, labelled, codes, classes):
    """``(name, fit, scores)``: the fit on every label of the one of ``fits = {"graph_matern":
    (representation, prior), "flgp": (...)}`` that :func:`takes_heat_kernel` picks from
    their :func:`cross_validated_scores` (``scores`` a string saying why, and the
    full-resolution fit, where a fold could not be fitted). The cloud's graph, prior columns
    and eigenpairs are computed once for the folds and the final fit (kept in the
    estimator's cache with ``warm_start``)."""
    local = replace(options, keep_graph=True,
                    cache=options.cache if options.warm_start else WarmStartCache())
    with shared_candidates({}):
        # the rule's fit first, as without cross-validation (the folds' columns, once
        # held, would change which orders it weighs); the folds reuse its graph
        rep, prior = fits["graph_matern"]
        fit = rep.fit(prior, local, X, labelled, codes, classes)
        try:
            scores = cross_validated_scores(fits, local, X, labelled, codes, classes)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            # a fold the heat kernel cannot fit (fewer labels, a cloud its graph does not
            # serve) leaves the rule's fit standing, and says why
            return "graph_matern", fit, f"{type(exc).__name__}: {exc}"
        if not takes_heat_kernel(scores):
            return "graph_matern", fit, scores
        rep, prior = fits["flgp"]
        return "flgp", rep.fit(prior, local, X, labelled, codes, classes), scores


def cross_validated_scores(fits, options, X, labelled, codes, classes) -> dict:
    """``{name: (held-out accuracy, held-out log-likelihood of each label)}`` of each
    ``fits[name] = (representation, prior)`` over stratified folds of the labels (module
    notes)."""
    counts = np.bincount(codes, minlength=classes.size)
    k = int(min(CV_FOLDS, counts.min()))
    seed = integer_seed(options.random_state)
    folds = StratifiedKFold(k, shuffle=True, random_state=seed).split(labelled, codes)
    right = {name: 0 for name in fits}
    loglik = {name: np.zeros(labelled.size) for name in fits}
    with warnings.catch_warnings():
        # the folds' own warnings (weak fits of fewer labels) are not the user's fit's
        warnings.simplefilter("ignore")
        for train, test in folds:
            for name, (rep, prior) in fits.items():
                fit = rep.fit(prior, options, X, labelled[train], codes[train], classes)
                P = np.asarray(fit.fitted_attributes(X, stacklevel=2)
                               ["label_distributions_"])[labelled[test]]
                right[name] += int(np.sum(P.argmax(axis=1) == codes[test]))
                p = P[np.arange(test.size), codes[test]]
                loglik[name][test] = np.log(np.maximum(p, PROBABILITY_FLOOR))
    m = labelled.size
    return {name: (right[name] / m, loglik[name]) for name in fits}


def takes_heat_kernel(scores: dict) -> bool:
    """Whether the heat kernel (``"flgp"``) beats the full-resolution fit (``"graph_matern"``):
    more held-out labels right, and a held-out log-likelihood higher by more than
    ``SIGNIFICANCE`` standard errors of the labels' paired differences
    (:func:`cross_validated_scores`)."""
    (acc_g, ll_g), (acc_h, ll_h) = scores["graph_matern"], scores["flgp"]
    d = np.asarray(ll_h) - np.asarray(ll_g)
    se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else np.inf
    return acc_h > acc_g and d.mean() > SIGNIFICANCE * se
