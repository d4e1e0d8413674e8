"""Probes of the default (full-resolution) classifier's settings: what the graph Matérn
order ``ν``, the prior-to-noise ratio ``ρ``, ``κ`` and the logit spread of the scores would
buy on the small clouds of ``benchmarks/few_labels.py``, and whether anything the labels
themselves give (the least-squares evidence, leave-one-out error or likelihood) chooses
them well. The record behind docs/few_labels.md, "What was probed after".

    python experiments/gmrf_classifier_probe.py variants --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py spread --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py order --sets mnist moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py kappa --sets mnist moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py rho --sets moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py variation --sets mnist moons2 torus4 helix6 swiss5 circles6
    python experiments/gmrf_classifier_probe.py order_variation --sets moons2 torus4 helix6 swiss5
    python experiments/gmrf_classifier_probe.py spread_rule --sets moons2 torus4 helix6 swiss5

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

The variants are set through module constants (``RHO`` of
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
                    fit = est._other_fit
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
            fit = est._other_fit
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
    (:func:`~flgp.precision.classification.chosen_ratio` over ``RHO_CANDIDATES`` from two
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
                    fit = est._other_fit
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

    def probabilities(U, scale, prior):
        P = PC.scores_to_probabilities(U, scale)
        return P if prior is None else PC.balance_to_prior(P, prior)[1]

    rows = []
    for name in sets:
        for X, y, yy, unl, k, d in _draws(name, (1, 2, 3, 5, 10), n_draws):
            for nu in (1, 2):
                est = FLGPClassifier([HeatKernelPrior(), GraphMaternPrior(nu=nu), RBFPrior()],
                                     random_state=0).fit(X, yy)
                fit = est._other_fit
                U = fit.scores
                top = np.sort(U[unl], axis=1)
                margin = top[:, -1] - top[:, -2]
                rules = [(f"sd {sp}", U[unl].std() / sp) for sp in (3, 5, 8)]
                rules += [(f"margin q{q:g} {M:g}", np.quantile(margin, q) / M)
                          for q in (0.25, 0.5) for M in (1.5, 2.0, 3.0, 4.0)]
                for rule, scale in rules:
                    err, ece = _score(probabilities(U, scale, fit.class_prior), y, unl)
                    rows.append(dict(set=name, k=k, draw=d, nu=nu, variant=f"nu {nu} {rule}",
                                     error=err, ece=ece))
            print(name, k, d, flush=True)
    _write("spread_rule", rows)
    _table(rows, "variant")


def variation_picks(rows):
    """For each draw of :func:`variation`'s rows: the fit the package's rule keeps
    (:func:`~flgp.precision.classification.chosen_ratio` over ``RHO_CANDIDATES``, from two
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
            chosen = PC.chosen_ratio({name: cell[name]["variation"] for name in pool})
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
                                     "variation", "order_variation", "spread_rule"))
    ap.add_argument("--sets", nargs="+", default=["moons2", "torus4", "helix6", "swiss5"],
                    choices=L.SETS)
    ap.add_argument("--draws", type=int, default=None,
                    help="draws per label count (variants: 5; spread, order: 10)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    n = args.draws or (5 if args.what in ("variants", "kappa", "rho", "variation",
                                          "order_variation") else
                        3 if args.what == "spread_rule" else 10)
    {"variants": variants, "spread": spread, "order": order, "kappa": kappa,
     "rho": rho, "variation": variation,
     "order_variation": order_variation, "spread_rule": spread_rule}[args.what](args.sets, n)


if __name__ == "__main__":
    main()
