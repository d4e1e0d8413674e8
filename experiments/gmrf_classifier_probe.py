"""Probes of the default (full-resolution) classifier's settings: what the graph Matérn
order ``ν``, the prior-to-noise ratio ``ρ``, ``κ`` and the logit spread of the scores would
buy on the small clouds of ``benchmarks/few_labels.py``, and whether anything the labels
themselves give (the least-squares evidence, leave-one-out error or likelihood) chooses
them well. The record behind notes/few_labels.md, "What was probed after".

    python experiments/gmrf_classifier_probe.py variants --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py spread --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py order --sets mnist moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py kappa --sets mnist moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py rho --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py variation --sets mnist moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py order_variation --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py spread_rule --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py joint --sets moons2 torus4 helix6 swiss5 circles6 mnist
    python experiments/gmrf_classifier_probe.py criterion --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py moderated --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py averaged --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py shrunk --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py spread_count --sets digits moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py spread_count --sets mnist --draws 3

``variants``: for each stratified draw (``few_labels_lib.stratified_draw``; 5 draws at
k = 2, 3, 5, 10) the heat kernel alone (``HeatKernelPrior()``) and the full-resolution
classifier at ``ν ∈ {1, 2}`` × ``ρ ∈ {0.3, 3}`` (every prior, the graph Matérn one's
``GraphMaternPrior(nu=ν)``; ``κ`` and the spread as in the package), with each
variant's least-squares log evidence and leave-one-out error and negative log likelihood
(the exact leave-one-out means at the fit's logit scale); then what each criterion picks.
``spread``: the default fit's scores turned into probabilities at spreads of 2-11 logits
(10 draws at k = 1, 2, 3, 5, 10): error, ECE, and the leave-one-out NLL of each spread.
``order``: the default order ``ν = 1`` against ``ν = 2`` (every prior, the graph Matérn
one's ``GraphMaternPrior(nu=ν)``) at one label a class (10 draws), with the fit's time.
``kappa``: ``κ²`` at 1e-6 / 1e-5 (the default) / 1e-4 of the graph's own
``1 / length²`` (``KAPPA_RELATIVE``), 5 draws at k = 1-10 (MNIST: 10 at k = 1).
``rho``: the ratio ``ρ`` used from two labels a class at 0.3 (the default) / 1 / 3 / 10
beside the heat kernel, 5 draws at k = 2-10. CSVs under
``experiments/results/gmrf_classifier_probe_*.csv``.

The modes before ``joint`` ran with the spread of their day (the scores' sd over the
unlabelled points at 5 logits, ``order_variation``'s "8" re-scaling that); run today they
use the package's median-gap spread. The variants are set through module constants (``RHO`` of
:mod:`flgp.precision.classification`, ``KAPPA_RELATIVE`` as
:mod:`flgp.models.graph_matern` imported it): a probe, not an API.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import few_labels_lib as L  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SPREADS = (2, 3, 4, 5, 6, 8, 11)


def _draws(name, ks, n_draws):
    X, y = L.load_set(name)[:2]
    for k in ks:
        for d in range(n_draws):
            lab = L.stratified_draw(y, k, d)
            yy = np.full(y.shape, -1)
            yy[lab] = y[lab]
            unl = np.ones(y.size, dtype=bool)
            unl[lab] = False
            yield X, y, yy, unl, k, d


def _softmax(S):
    S = S - S.max(axis=1, keepdims=True)
    P = np.exp(S)
    return P / P.sum(axis=1, keepdims=True)


def _loo(model, scale, weights=None):
    """Leave-one-out error and NLL of the labels at the logit scale ``scale``."""
    S = model.loo_means / scale
    if weights is not None:
        S = S + np.log(weights)
    P = _softmax(S)
    codes = model.codes
    return (float(np.mean(P.argmax(axis=1) != codes)),
            float(-np.mean(np.log(np.maximum(P[np.arange(codes.size), codes], 1e-12)))))


def _balanced(U, scale, class_prior):
    """The package's probabilities of scores ``U`` at ``scale``, then the class balance."""
    import flgp.precision.classification as PC

    P = PC.scores_to_probabilities(U, scale)
    return P if class_prior is None else PC.balance_to_prior(P, class_prior)[1]


def _default_fits(sets, n_draws):
    """``(name, y, unl, k, d, estimator, fit)`` of the default classifier on every draw of
    :func:`_draws` where it fits the full-resolution classifier."""
    from flgp import FLGPClassifier

    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            est = FLGPClassifier(random_state=0).fit(X, yy)
            if est.method_ == "gmrf":
                yield name, y, unl, k, d, est, est._chosen_fit
            print(name, k, d, flush=True)


def _record(rows, name, k, d, variant, P, y, unl, **extra):
    """One row of a probe: the error and ECE of probabilities ``P`` at the unlabelled
    points."""
    err, ece = _score(P, y, unl)
    rows.append(dict(set=name, k=k, draw=d, variant=variant, error=err, ece=ece, **extra))


def _finish(what, rows):
    """Write a probe's rows (``gmrf_classifier_probe_{what}.csv``) and print its table."""
    _write(what, rows)
    _table(rows, "variant")


def _score(P, y, unl):
    return float(np.mean(P[unl].argmax(axis=1) != y[unl])), float(L.ece(P[unl], y[unl]))


def _every_prior(nu):
    """Every prior, the graph Matérn one of order ``nu`` (the classifier weighs them)."""
    from flgp import GraphMaternPrior, HeatKernelPrior, RBFPrior

    return [HeatKernelPrior(), GraphMaternPrior(nu=nu), RBFPrior()]


def variants(sets, n_draws):
    import flgp.models.graph_matern as GM
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, HeatKernelPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (2, 3, 5, 10), n_draws):
            heat = FLGPClassifier(HeatKernelPrior(), random_state=0).fit(X, yy)
            err, ece = _score(heat.label_distributions_, y, unl)
            rows.append(dict(set=name, k=k, draw=d, variant="heat", error=err, ece=ece))
            for nu in (1, 2):
                for rho in (0.3, 3.0):
                    with _setting(PC, "RHO_CANDIDATES", (rho,)):
                        est = FLGPClassifier(_every_prior(nu), random_state=0).fit(X, yy)
                    fit = est._chosen_fit
                    err, ece = _score(est.label_distributions_, y, unl)
                    loo_err, loo_nll = _loo(fit.model, fit.score_scale, fit.class_weights)
                    rows.append(dict(set=name, k=k, draw=d, variant=f"nu{nu} rho{rho:g}",
                                     error=err, ece=ece, evidence=fit.model.log_evidence,
                                     loo_error=loo_err, loo_nll=loo_nll))
            print(name, k, d, flush=True)
    _write("variants", rows)
    # what each criterion picks, draw by draw
    picks = []
    for key in sorted({(r["set"], r["k"], r["draw"]) for r in rows}):
        cands = [r for r in rows if (r["set"], r["k"], r["draw"]) == key
                 and r["variant"] != "heat"]
        for crit, pick in (("evidence", max(cands, key=lambda r: r["evidence"])),
                           ("loo error", min(cands, key=lambda r: (r["loo_error"],
                                                                   -r["evidence"]))),
                           ("loo nll", min(cands, key=lambda r: r["loo_nll"])),
                           ("hindsight", min(cands, key=lambda r: r["error"]))):
            picks.append(dict(set=key[0], k=key[1], draw=key[2], criterion=crit,
                              variant=pick["variant"], error=pick["error"], ece=pick["ece"]))
    _write("variants_picks", picks)
    _table(rows + [dict(p, variant="by " + p["criterion"]) for p in picks], "variant")


def spread(sets, n_draws):
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            est = FLGPClassifier(random_state=0).fit(X, yy)
            fit = est._chosen_fit
            U = fit.scores
            sd = float(U[unl].std())
            for s in SPREADS:
                P = PC.scores_to_probabilities(U, sd / s)
                if est.class_prior_ is not None:
                    P = PC.balance_to_prior(P, est.class_prior_)[1]
                err, ece = _score(P, y, unl)
                rows.append(dict(set=name, k=k, draw=d, variant=f"spread {s}", error=err,
                                 ece=ece, loo_nll=_loo(fit.model, sd / s)[1]))
        print(name, flush=True)
    _write("spread", rows)
    _table(rows, "variant", extra="loo_nll")


def order(sets, n_draws):
    from flgp import FLGPClassifier

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1,), n_draws):
            for nu in (1, 2):
                t0 = time.perf_counter()
                est = FLGPClassifier(_every_prior(nu), random_state=0).fit(X, yy)
                seconds = time.perf_counter() - t0
                err, ece = _score(est.label_distributions_, y, unl)
                rows.append(dict(set=name, k=k, draw=d, variant=f"nu{nu}", error=err,
                                 ece=ece, seconds=seconds))
        print(name, flush=True)
    _write("order", rows)
    _table(rows, "variant", extra="seconds")


@contextlib.contextmanager
def _setting(module, name, value):
    """The module constant ``name`` set to ``value`` within the block."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def kappa(sets, n_draws):
    import flgp.models.graph_matern as GM
    from flgp import FLGPClassifier

    rows = []
    for name in sets:
        ks, draws = ((1,), 10) if name == "mnist" else ((1, 2, 3, 5, 10), n_draws)
        for X, y, yy, unl, k, d in _draws(name, ks, draws):
            for relative in (1e-6, 1e-5, 1e-4):
                with _setting(GM, "KAPPA_RELATIVE", relative):
                    est = FLGPClassifier(random_state=0).fit(X, yy)
                err, ece = _score(est.label_distributions_, y, unl)
                rows.append(dict(set=name, k=k, draw=d, variant=f"kappa2 {relative:g}",
                                 error=err, ece=ece))
        print(name, flush=True)
    _write("kappa", rows)
    _table(rows, "variant")


def rho(sets, n_draws):
    """The prior-to-noise ratio ``ρ`` from two labels a class fixed at 0.3 (the default
    until 2026-11-29) / 1 / 3 / 10, every other setting the default's, beside the heat
    kernel alone, with the least-squares evidence of each fit (k = 2, 3, 5, 10)."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, HeatKernelPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (2, 3, 5, 10), n_draws):
            for value in (0.3, 1.0, 3.0, 10.0):
                with _setting(PC, "RHO_CANDIDATES", (value,)):
                    est = FLGPClassifier(random_state=0).fit(X, yy)
                err, ece = _score(est.label_distributions_, y, unl)
                rows.append(dict(set=name, k=k, draw=d, variant=f"rho {value:g}", error=err,
                                 ece=ece, evidence=est.log_marginal_likelihood_))
            heat = FLGPClassifier(HeatKernelPrior(), random_state=0).fit(X, yy)
            err, ece = _score(heat.label_distributions_, y, unl)
            rows.append(dict(set=name, k=k, draw=d, variant="heat", error=err, ece=ece))
        print(name, flush=True)
    _write("rho", rows)
    _table(rows, "variant")


VARIATION_RHOS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


def variation(sets, n_draws):
    """``ρ`` fixed at each of ``VARIATION_RHOS`` (at every label count, k = 1 too) beside
    the heat kernel, with the graph total variation of each fit's probabilities on the
    default's graph (:func:`flgp.precision.classification.graph_total_variation`) and the
    cut share of its labelling; then what the package's rule picks among its candidates
    (:func:`~flgp.precision.classification.chosen_candidate` over ``RHO_CANDIDATES`` from two
    labels a class; ``RHO_ONE_LABEL`` = 0.01 below) and what the least variation picks
    among all eight. MNIST: 5 / 5 / 3 / 3 draws at k = 2 / 3 / 5 / 10, without the heat
    kernel."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, HeatKernelPrior

    rows = []
    for name in sets:
        ks = (2, 3, 5, 10) if name == "mnist" else (1, 2, 3, 5, 10)
        draws = {2: 5, 3: 5, 5: 3, 10: 3} if name == "mnist" else None
        for X, y, yy, unl, k, d in _draws(name, ks, n_draws):
            if draws is not None and d >= draws[k]:
                continue
            edges = None
            fits = [(f"rho {v:g}", v) for v in VARIATION_RHOS] + (
                [] if name == "mnist" else [("heat", None)])
            for variant, value in fits:
                if value is None:
                    est = FLGPClassifier(HeatKernelPrior(), random_state=0).fit(X, yy)
                else:
                    with _setting(PC, "RHO_CANDIDATES", (value,)), \
                            _setting(PC, "RHO_ONE_LABEL", value):
                        est = FLGPClassifier(random_state=0).fit(X, yy)
                    if edges is None:
                        edges = PC.graph_edges(est.graph_.stiffness)
                P = est.label_distributions_
                err, ece = _score(P, y, unl)
                rows.append(dict(set=name, k=k, draw=d, variant=variant, error=err, ece=ece,
                                 variation=PC.graph_total_variation(edges, P),
                                 cut=PC.graph_total_variation(
                                     edges, np.eye(P.shape[1])[P.argmax(1)])))
            print(name, k, d, flush=True)
    _write("variation", rows)
    picks = variation_picks(rows)
    _write("variation_picks", picks)
    _table(rows + picks, "variant")


def order_variation(sets, n_draws):
    """The order ``ν`` = 1 (the default) and 2 (every prior, the graph Matérn one's
    ``GraphMaternPrior(nu=ν)``), each at ``ρ`` = 0.3 / 3 / 30 from two labels a class (0.01
    at one) with the graph total variation of its probabilities; then what the least
    variation picks over the three ratios at each order, and over all six fits. Also each
    fit's ECE at a spread of 8 logits instead of 5 (its scores re-scaled, the class
    balance redone), the spread the order 2 would need on the helix and the Swiss roll."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, GraphMaternPrior, HeatKernelPrior, RBFPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            edges = None
            for nu in (1, 2):
                for value in ((PC.RHO_ONE_LABEL,) if k == 1 else PC.RHO_CANDIDATES):
                    with _setting(PC, "RHO_CANDIDATES", (value,)), \
                            _setting(PC, "RHO_ONE_LABEL", value):
                        est = FLGPClassifier([HeatKernelPrior(), GraphMaternPrior(nu=nu),
                                              RBFPrior()], random_state=0).fit(X, yy)
                    if edges is None:
                        edges = PC.graph_edges(est.graph_.stiffness)
                    P = est.label_distributions_
                    err, ece = _score(P, y, unl)
                    fit = est._chosen_fit
                    P8 = PC.scores_to_probabilities(fit.scores, fit.score_scale * 5.0 / 8.0)
                    if fit.class_prior is not None:
                        P8 = PC.balance_to_prior(P8, fit.class_prior)[1]
                    rows.append(dict(set=name, k=k, draw=d, variant=f"nu {nu} rho {value:g}",
                                     nu=nu, rho=value, error=err, ece=ece,
                                     ece_spread8=_score(P8, y, unl)[1],
                                     variation=PC.graph_total_variation(edges, P)))
            print(name, k, d, flush=True)
    _write("order_variation", rows)
    picks = []
    for key in sorted({(r["set"], r["k"], r["draw"]) for r in rows}):
        cell = [r for r in rows if (r["set"], r["k"], r["draw"]) == key]
        for label, pool in (("least variation, nu 1", [r for r in cell if r["nu"] == 1]),
                            ("least variation, nu 2", [r for r in cell if r["nu"] == 2]),
                            ("least variation, nu 1 or 2", cell)):
            picks.append(dict(min(pool, key=lambda r: r["variation"]), variant=label))
    _write("order_variation_picks", picks)
    _table(picks, "variant", extra="ece_spread8")


def spread_rule(sets, n_draws):
    """How the scores become probabilities, at ``ν`` = 1 and 2 (every prior, the graph
    Matérn one's ``GraphMaternPrior(nu=ν)``; ``ρ`` by the package's rule): the softmax at a
    scale set by the scores' sd over the unlabelled points (the package: 5 logits; also 3
    and 8) or by a quantile ``q`` of their top-two margins (``M`` logits at the 25 % / 50 %
    quantile), then the class balance; 3 draws a cell by default."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, GraphMaternPrior, HeatKernelPrior, RBFPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            for nu in (1, 2):
                est = FLGPClassifier([HeatKernelPrior(), GraphMaternPrior(nu=nu), RBFPrior()],
                                     random_state=0).fit(X, yy)
                fit = est._chosen_fit
                U = fit.scores
                top = np.sort(U[unl], axis=1)
                margin = top[:, -1] - top[:, -2]
                rules = [(f"sd {sp}", U[unl].std() / sp) for sp in (3, 5, 8)]
                rules += [(f"margin q{q:g} {M:g}", np.quantile(margin, q) / M)
                          for q in (0.25, 0.5) for M in (1.5, 2.0, 3.0, 4.0)]
                for rule, scale in rules:
                    _record(rows, name, k, d, f"nu {nu} {rule}",
                            _balanced(U, scale, fit.class_prior), y, unl, nu=nu)
            print(name, k, d, flush=True)
    _finish("spread_rule", rows)


JOINT_RULES = (("sd", 5.0), ("margin q0.25", 5.0), ("margin q0.5", 5.0), ("margin q0.5", 6.0),
               ("margin q0.5", 7.0), ("margin q0.5", 8.0))


def joint(sets, n_draws):
    """The order ``ν`` and the ratio ``ρ`` chosen together by the least graph total
    variation, under each of ``JOINT_RULES`` for the spread of the scores (the scores' sd
    over the unlabelled points set to 5 logits - the rule before 2026-11-29 - or a
    quantile of their top-two gaps set to ``M`` logits - the package's since: the median,
    7; each followed by the class balance): every fit ``ν ∈ {1, 2}`` (the prior's ``nu``
    fixed) x the package's ratios (0.01 at one label a class), its probabilities under
    each rule, their variation and the labels they keep, then the package's pick per rule
    (:func:`~flgp.precision.classification.chosen_candidate`). MNIST: 3 / 2 / 2 / 2 / 2
    draws at k = 1 / 2 / 3 / 5 / 10."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, GraphMaternPrior, HeatKernelPrior, RBFPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            if name == "mnist" and d >= (3 if k == 1 else 2):
                continue
            edges = None
            for nu in (1, 2):
                ratios = (PC.RHO_ONE_LABEL,) if k == 1 else PC.RHO_CANDIDATES
                for value in ratios:
                    t0 = time.perf_counter()
                    with _setting(PC, "RHO_CANDIDATES", (value,)), \
                            _setting(PC, "RHO_ONE_LABEL", value):
                        est = FLGPClassifier([HeatKernelPrior(), GraphMaternPrior(nu=nu),
                                              RBFPrior()], random_state=0).fit(X, yy)
                    seconds = time.perf_counter() - t0
                    if edges is None:
                        edges = PC.graph_edges(est.graph_.stiffness)
                    fit = est._chosen_fit
                    U = fit.scores
                    top = np.sort(U[unl], axis=1)
                    margin = top[:, -1] - top[:, -2]
                    for rule, M in JOINT_RULES:
                        scale = (U[unl].std() if rule == "sd" else
                                 np.quantile(margin, float(rule.split("q")[1]))) / M
                        P = PC.scores_to_probabilities(U, scale)
                        if fit.class_prior is not None:
                            P = PC.balance_to_prior(P, fit.class_prior)[1]
                        err, ece = _score(P, y, unl)
                        rows.append(dict(set=name, k=k, draw=d, rule=f"{rule} {M:g}", nu=nu,
                                         rho=value, error=err, ece=ece, seconds=seconds,
                                         variation=PC.graph_total_variation(edges, P),
                                         kept=PC.labels_kept(P[~unl], y[~unl])))
            print(name, k, d, flush=True)
    _write("joint", rows)
    picks = []
    for key in sorted({(r["set"], r["k"], r["draw"], r["rule"]) for r in rows}):
        cell = [r for r in rows if (r["set"], r["k"], r["draw"], r["rule"]) == key]
        for label, pool in (("nu 1", [r for r in cell if r["nu"] == 1]),
                            ("nu 1 or 2", cell)):
            # the package's choice: the least variation among the candidates that keep
            # the most labels (PC.chosen_candidate)
            chosen = PC.chosen_candidate({i: r["variation"] for i, r in enumerate(pool)},
                                         {i: r["kept"] for i, r in enumerate(pool)})
            picks.append(dict(pool[chosen], variant=f"{key[3]}, {label}"))
    _write("joint_picks", picks)
    _table(picks, "variant")


MODERATIONS = (0.0, 0.25, 1.0, 4.0)


def moderated(sets, n_draws):
    """The default fit's probabilities moderated by its latent variances (MacKay's probit
    approximation to the softmax's expectation over the latent posterior): logits
    ``(μ_c / scale) / sqrt(1 + γ π/8 v_c / scale²)`` for ``γ`` in ``MODERATIONS``, at the
    fit's scale (``fixed``) or with the median-gap spread taken again on the moderated
    scores (``respread``); each followed by the class balance. ``v_c``: the fit's node
    variances (:meth:`GraphMaternClassificationFit.node_variances`)."""
    import flgp.precision.classification as PC

    rows = []
    for name, y, unl, k, d, est, fit in _default_fits(sets, n_draws):
        U, scale = fit.scores, fit.score_scale
        t0 = time.perf_counter()
        V = fit.node_variances()
        seconds = time.perf_counter() - t0
        for gamma in MODERATIONS:
            S = (U / scale) / np.sqrt(1.0 + gamma * np.pi / 8.0 * V / scale ** 2)
            for how in (("fixed", "respread") if gamma > 0 else ("fixed",)):
                s = 1.0 if how == "fixed" else PC.score_scale(S[unl])
                _record(rows, name, k, d, f"{how} {gamma:g}",
                        _balanced(S, s, fit.class_prior), y, unl, nu=fit.nu,
                        variance_seconds=seconds)
    _finish("moderated", rows)


SHRINKS = (("variance", 0.5), ("variance", 1.0), ("variance", 2.0), ("variance", 4.0),
           ("share", 0.5), ("share", 1.0))


def shrunk(sets, n_draws):
    """The default fit's logits shrunk point by point by how little its labels tell it
    there - one factor a point for every class, so that no prediction changes, only its
    confidence: ``1 / sqrt(1 + γ u / median u)`` (``variance``; ``u`` the point's latent
    variance at unit noise) or ``r^γ`` (``share``; ``r = 1 - u / u_prior`` the share of
    the prior variance the labels explain); then the median-gap spread taken again (the
    typical point keeps its odds) and the class balance."""
    import flgp.precision.classification as PC
    from flgp.models.graph_matern import _cached_prior_variances

    rows = []
    for name, y, unl, k, d, est, fit in _default_fits(sets, n_draws):
        U, scale, model = fit.scores, fit.score_scale, fit.model
        fit.node_variances()
        prior_var = _cached_prior_variances(fit.columns)
        u = model.unit_variances(fit.columns(model.labelled), prior_var)
        share = np.clip(1.0 - u / np.maximum(model.rho * prior_var / model.scale, 1e-300),
                        0.0, 1.0)
        _record(rows, name, k, d, "package", est.label_distributions_, y, unl)
        for kind, gamma in SHRINKS:
            typical = max(float(np.median(u[unl])), 1e-300)
            f = (1.0 / np.sqrt(1.0 + gamma * u / typical) if kind == "variance"
                 else np.maximum(share, 1e-12) ** gamma)
            S = (U / scale) * f[:, None]
            _record(rows, name, k, d, f"{kind} {gamma:g}",
                    _balanced(S, PC.score_scale(S[unl]), fit.class_prior), y, unl)
    _finish("shrunk", rows)


SPREAD_COUNTS = (("gap", 7.0), ("odds", 6.0), ("odds", 7.0), ("odds", 8.0))


def _odds_scale(U, M):
    """The scale ``s`` at which the median row's log-odds of its largest softmax(U / s)
    entry against all the others together is ``M`` (bisection in ``log s``)."""
    def median_odds(s):
        S = U / s
        S = S - S.max(axis=1, keepdims=True)
        return float(np.median(-np.log(np.exp(S).sum(axis=1) - 1.0 + 1e-300)))
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if median_odds(np.exp(mid)) > M else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def spread_count(sets, n_draws):
    """The package's spread rule (``gap 7``: the median unlabelled point's gap between its
    two largest scores set to 7 logits) against one that counts the classes (``odds M``:
    the scale at which the median unlabelled point's log-odds of its likeliest class
    against all the others together is ``M`` - the same for two classes, more spread
    where many classes sit close), on the default's own fits (its picks kept); each
    followed by the class balance. ``confidence``: the mean top probability."""
    rows = []
    for name, y, unl, k, d, est, fit in _default_fits(sets, n_draws):
        for rule, M in SPREAD_COUNTS:
            P = (est.label_distributions_ if rule == "gap" else
                 _balanced(fit.scores, _odds_scale(fit.scores[unl], M), fit.class_prior))
            _record(rows, name, k, d, f"{rule} {M:g}", P, y, unl,
                    confidence=float(P[unl].max(1).mean()))
    _finish("spread_count", rows)


def averaged(sets, n_draws):
    """The candidates the default chooses among - every order ``ν ∈ {1, 2}`` x the
    package's ratios - averaged instead of picked: the package's pick
    (:func:`~flgp.precision.classification.chosen_candidate`), the mean of every
    candidate's probabilities, and the mean of those that keep the most labels (each
    candidate's probabilities as the package gives them: its spread and class balance)."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, GraphMaternPrior

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            cands, edges = [], None
            for nu in (1, 2):
                ratios = (PC.RHO_ONE_LABEL,) if k == 1 else PC.RHO_CANDIDATES
                for value in ratios:
                    with _setting(PC, "RHO_CANDIDATES", (value,)), \
                            _setting(PC, "RHO_ONE_LABEL", value):
                        est = FLGPClassifier(GraphMaternPrior(nu=nu),
                                             random_state=0).fit(X, yy)
                    if edges is None:
                        edges = PC.graph_edges(est.graph_.stiffness)
                    P = est.label_distributions_
                    cands.append((P, PC.graph_total_variation(edges, P),
                                  PC.labels_kept(P[~unl], y[~unl])))
            chosen = PC.chosen_candidate({i: c[1] for i, c in enumerate(cands)},
                                         {i: c[2] for i, c in enumerate(cands)})
            most = max(c[2] for c in cands)
            for variant, P in (("pick", cands[chosen][0]),
                               ("mean of all", np.mean([c[0] for c in cands], axis=0)),
                               ("mean of most kept", np.mean([c[0] for c in cands
                                                              if c[2] == most], axis=0))):
                _record(rows, name, k, d, variant, P, y, unl)
            print(name, k, d, flush=True)
    _finish("averaged", rows)


def _circles_draws(sizes=(50, 100), n_draws=5):
    """``benchmarks/few_labels.py --checks``' six circles of 2,400 points: random labels."""
    from flgp.datasets import make_concentric_circles
    from flgp.reproduce.circles import standardise

    for m in sizes:
        for d in range(n_draws):
            X, y = make_concentric_circles(2400, random_state=d)
            X = standardise(X)
            rng = np.random.default_rng(d)
            lab = rng.choice(y.size, m, replace=False)
            while np.unique(y[lab]).size < 2:
                lab = rng.choice(y.size, m, replace=False)
            yield X, y, lab, m, d


def criterion(sets, n_draws):
    """How the classifier chooses among its candidates ``(ν, ρ)`` (every order 1, 2 x the
    package's ratios; the package's spread): each fit alone with its graph total
    variation, the cut of its most probable labelling, its expected cut under labels
    drawn point by point independently (``Σ w (1 - p_iᵀp_j) / Σ w``) and the labelled
    points it gives their own class; then what each rule picks - the least of each
    criterion, and the package's (the least variation among the candidates that keep the
    most labels). The small clouds' stratified draws (5 a cell) and the six circles of
    2,400 points at 50 and 100 random labels (``few_labels.py --checks``' draws)."""
    import flgp.precision.classification as PC
    from flgp import FLGPClassifier, GraphMaternPrior

    def cases():
        for name in sets:
            for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
                yield name, k, d, X, y, np.flatnonzero(~unl)
        for X, y, lab, m, d in _circles_draws(n_draws=n_draws):
            yield "circles2400", m, d, X, y, lab

    rows = []
    for name, k, d, X, y, lab in cases():
        yy = np.full(y.size, -1)
        yy[lab] = y[lab]
        unl = yy < 0
        codes = np.unique(y[lab], return_inverse=True)[1]
        ratios = PC.prior_to_noise_ratios(codes, codes.max() + 1)
        edges = None
        for nu in (1, 2):
            for value in ratios:
                with _setting(PC, "RHO_CANDIDATES", (value,)), \
                        _setting(PC, "RHO_ONE_LABEL", value):
                    est = FLGPClassifier(GraphMaternPrior(nu=nu), random_state=0).fit(X, yy)
                if edges is None:
                    edges = PC.graph_edges(est.graph_.stiffness)
                r, c, w = edges
                P = est.label_distributions_
                err, ece = _score(P, y, unl)
                agree = np.einsum("ij,ij->i", P[r], P[c])
                rows.append(dict(set=name, k=k, draw=d, nu=nu, rho=value, error=err, ece=ece,
                                 variation=PC.graph_total_variation(edges, P),
                                 cut=PC.graph_total_variation(
                                     edges, np.eye(P.shape[1])[P.argmax(1)]),
                                 expected_cut=float(w @ (1.0 - agree) / w.sum()),
                                 kept=PC.labels_kept(P[lab], codes)))
        print(name, k, d, flush=True)
    _write("criterion", rows)
    picks = []
    for key in sorted({(r["set"], r["k"], r["draw"]) for r in rows}):
        cell = [r for r in rows if (r["set"], r["k"], r["draw"]) == key]
        for label, column, keep in (("least variation", "variation", False),
                                    ("least cut", "cut", False),
                                    ("least expected cut", "expected_cut", False),
                                    ("package: most labels kept, least variation",
                                     "variation", True)):
            chosen = PC.chosen_candidate({i: r[column] for i, r in enumerate(cell)},
                                         {i: r["kept"] for i, r in enumerate(cell)}
                                         if keep else None)
            picks.append(dict(cell[chosen], variant=label))
    _write("criterion_picks", picks)
    _table(picks, "variant")


def variation_picks(rows):
    """For each draw of :func:`variation`'s rows: the fit the package's rule keeps
    (:func:`~flgp.precision.classification.chosen_candidate` over ``RHO_CANDIDATES``, from two
    labels a class; ``RHO_ONE_LABEL`` below) and the one of least variation among all
    eight ratios, as rows named by the rule."""
    import flgp.precision.classification as PC

    package = [f"rho {v:g}" for v in PC.RHO_CANDIDATES]
    every = [f"rho {v:g}" for v in VARIATION_RHOS]
    picks = []
    for key in sorted({(r["set"], r["k"], r["draw"]) for r in rows}):
        cell = {r["variant"]: r for r in rows if (r["set"], r["k"], r["draw"]) == key}
        for label, pool in (("least variation (package)", package),
                            ("least variation (all eight)", every)):
            if key[1] == 1 and label.endswith("(package)"):
                pool = [f"rho {PC.RHO_ONE_LABEL:g}"]
            chosen = PC.chosen_candidate({name: cell[name]["variation"] for name in pool})
            picks.append(dict(cell[chosen], variant=label))
    return picks


def _write(what, rows):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"gmrf_classifier_probe_{what}.csv")
    keys = sorted({key for r in rows for key in r}, key=lambda c: list(rows[0]).index(c)
                  if c in rows[0] else 99)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    print("wrote", path)


def _table(rows, by, extra=None):
    """Mean error % / ECE (and ``extra``) over draws, one line per (set, k, variant)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["set"], r["k"], r[by]), []).append(r)
    for (name, k, variant), rs in groups.items():
        line = (f"{name:9s} k={k:2d} {variant:22s} error {100 * np.mean([r['error'] for r in rs]):6.2f} %"
                f"  ECE {np.mean([r['ece'] for r in rs]):.3f}")
        if extra:
            line += f"  {extra} {np.median([r[extra] for r in rs]):.3f}"
        print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("variants", "spread", "order", "kappa", "rho",
                                     "variation", "order_variation", "spread_rule",
                                     "joint", "criterion", "moderated",
                                     "averaged", "shrunk", "spread_count"))
    ap.add_argument("--sets", nargs="+", default=["moons2", "torus4", "helix6", "swiss5"],
                    choices=L.SETS + ("digits",))
    ap.add_argument("--draws", type=int, default=None,
                    help="draws per label count (variants: 5; spread, order: 10)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    n = args.draws or (5 if args.what in ("variants", "kappa", "rho", "variation",
                                          "order_variation", "joint", "criterion",
                                          "moderated", "averaged", "shrunk",
                                          "spread_count") else
                        3 if args.what == "spread_rule" else 10)
    {"variants": variants, "spread": spread, "order": order, "kappa": kappa,
     "rho": rho, "variation": variation,
     "order_variation": order_variation, "spread_rule": spread_rule,
     "joint": joint, "criterion": criterion, "moderated": moderated,
     "averaged": averaged, "shrunk": shrunk,
     "spread_count": spread_count}[args.what](args.sets, n)


if __name__ == "__main__":
    main()
