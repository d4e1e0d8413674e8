"""Every fitted attribute the estimators' docstrings name exists after a fit by each
representation, unless its description says when it is set (a ``method_`` condition, the
heat kernel's, ``method="auto"``'s, counts only)."""

import inspect
import re
import warnings

import numpy as np
import pytest

from flgp import (Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior,
                  RBFPrior)

CONDITIONS = ("method_ ==", 'method="graph_matern"', 'method="auto"', "where the heat kernel was "
              "fitted", "the heat kernel's only", "Counts only")


def documented(cls):
    """``[(names, description)]`` of the class docstring's Attributes section."""
    doc = inspect.getdoc(cls)
    section = doc.split("Attributes\n----------\n", 1)[1]
    section = re.split(r"\n[A-Z][a-z]+\n-+\n", section)[0]
    out = []
    for line in section.splitlines():
        if line and not line.startswith(" "):
            names = [n.strip() for n in line.split(" : ")[0].rstrip(" :").split(",")]
            out.append(([n for n in names if n], []))
        elif out:
            out[-1][1].append(line.strip())
    return [(names, " ".join(desc)) for names, desc in out]


def _unconditional(cls):
    return [name for names, desc in documented(cls) for name in names
            if not any(c in desc for c in CONDITIONS)]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, 400)
    radius = 1 + 0.5 * (t > np.pi)
    X = np.c_[np.cos(t), np.sin(t)] * radius[:, None] + 0.02 * rng.standard_normal((400, 2))
    return X, t, rng


@pytest.mark.parametrize("prior", [HeatKernelPrior(Eigenbasis(n_induced=80)), GraphMaternPrior(),
                                   RBFPrior()])
def test_classifier_attributes(prior):
    X, t, rng = _data()
    yy = np.full(400, -1)
    lab = rng.choice(400, 20, replace=False)
    yy[lab] = (t[lab] > np.pi).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FLGPClassifier(prior).fit(X, yy)
    missing = [name for name in _unconditional(FLGPClassifier) if not hasattr(clf, name)]
    assert missing == [], f"{clf.method_}: documented, not set: {missing}"


@pytest.mark.parametrize("prior", [HeatKernelPrior(Eigenbasis(n_induced=80)), GraphMaternPrior(),
                                   RBFPrior(), "counts"])
def test_regressor_attributes(prior):
    X, t, rng = _data(1)
    y = np.full(400, np.nan)
    lab = rng.choice(400, 40, replace=False)
    if prior == "counts":
        y[lab] = rng.poisson(5 + 3 * np.sin(t[lab]))
        est = FLGPRegressor(HeatKernelPrior(Eigenbasis(n_induced=80)), likelihood="poisson")
    else:
        y[lab] = np.sin(2 * t[lab]) + 0.05 * rng.standard_normal(40)
        est = FLGPRegressor(prior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    missing = [name for name in _unconditional(FLGPRegressor) if not hasattr(est, name)]
    assert missing == [], f"{est.method_}: documented, not set: {missing}"


def test_the_conditions_are_read():
    """(The parser sees the sections: conditional attributes are left out, the rest kept.)"""
    names = _unconditional(FLGPRegressor)
    assert "method_" in names and "transduction_" in names
    assert "amplitude_cv_scale_" not in names and "overdispersion_" not in names
    assert "label_distributions_" in _unconditional(FLGPClassifier)
