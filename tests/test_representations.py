"""The estimators' representations of the prior behind one interface
(flgp.models.representation): the registry is all an estimator needs of one - a third is a
new class and a registry entry. The toy thirds here have closed forms: for regression,
white noise around the targets' mean; for classification, the labelled class shares
everywhere."""

import pickle

import numpy as np
import pytest
from scipy.stats import norm

from flgp import Eigenbasis, FLGPClassifier, FLGPRegressor, GraphMaternPrior, HeatKernelPrior, RBFPrior
from flgp.models.priors import Prior
from flgp.datasets import make_concentric_circles, make_spiral
from flgp.models.baselines import (RBFClassification, RBFClassificationFit, RBFRegression,
                                   RBFRegressionFit)
from flgp.models.graph_matern import (GRAPH_MATERN_CLASSIFIER_SECONDS, GraphMaternClassification,
                                      GraphMaternClassificationFit, GraphMaternRegression,
                                      GraphMaternRegressionFit)
from flgp.models.heat_kernel import HeatKernelClassificationFit, HeatKernelRegressionFit
from flgp.models.representation import (ClassificationFit, ClassificationRepresentation,
                                        RegressionFit, RegressionRepresentation, Screened,
                                        screening_margin)


class WhiteNoise(RegressionRepresentation):
    """y_i = μ + ε_i, ε_i ~ N(0, σ²) independent: no latent function at all (f = 0), with
    μ and σ² at their maximum-likelihood values (the targets' mean and variance)."""

    name = "white"

    def infeasible(self, prior, options, shape, n_labelled):
        return None

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation):
        m = labelled.size
        # z has mean 0 and variance 1: log N(z | 0, I)
        log_z = -0.5 * m * np.log(2 * np.pi) - 0.5 * float(z @ z)
        return WhiteNoiseFit(standardisation, standardisation.log_evidence_of_y(log_z, m))


class WhiteNoiseFit(RegressionFit):
    method = "white"

    def __init__(self, standardisation, log_evidence):
        self.standardisation, self.log_evidence = standardisation, log_evidence

    def fitted_attributes(self, X, stacklevel):
        st = self.standardisation
        mean, std = self.predict(X, stacklevel + 1)
        return dict(method_="white", outputscale_=0.0, noise_=st.scale ** 2,
                    log_marginal_likelihood_=self.log_evidence, n_iter_=0,
                    transduction_=mean, transduction_std_=std)

    def predict(self, X, stacklevel):
        n = X.shape[0]
        return np.full(n, self.standardisation.mean), np.zeros(n)

    def interval_noise(self):
        st = self.standardisation
        return st.unit, st.scale_pre ** 2


class WhitePrior(Prior):
    """Its prior object: no settings, the registry's name."""

    method = "white"


class WithWhiteNoise(FLGPRegressor):
    """The registry entry: the estimator's representations plus the new one."""

    REPRESENTATIONS = {**FLGPRegressor.REPRESENTATIONS, "white": WhiteNoise()}


def _spiral(n=600, frac=0.15, seed=0):
    X, y, f = make_spiral(n, noise=0.3, random_state=seed)
    rng = np.random.default_rng(seed)
    return X, np.where(rng.random(n) < frac, y, np.nan), f


# the one prior object of each representation the tests ask for by name
_PRIOR_OF = {"graph_matern": GraphMaternPrior, "rbf": RBFPrior}


def test_registry_holds_the_three_representations_in_auto_order():
    from flgp.models.heat_kernel import HeatKernelRegression

    reps = FLGPRegressor.REPRESENTATIONS
    assert list(reps) == ["graph_matern", "rbf", "flgp"]
    assert isinstance(reps["graph_matern"], GraphMaternRegression)
    assert isinstance(reps["rbf"], RBFRegression)
    assert isinstance(reps["flgp"], HeatKernelRegression)
    assert all(name == rep.name for name, rep in reps.items())
    # the heat kernel alone is bounded (fitted after the others, given their best)
    assert [rep.bounded for rep in reps.values()] == [False, False, True]
    # the heat kernel's method option is its three
    with pytest.raises(ValueError, match="method"):
        FLGPRegressor(HeatKernelPrior(Eigenbasis("white"))).fit(*_spiral()[:2])


def test_a_third_representation_fits_predicts_and_is_weighed_by_auto():
    X, y, _ = _spiral()
    obs = ~np.isnan(y)
    reg = WithWhiteNoise(WhitePrior()).fit(X, y)
    y_obs = y[obs]
    # closed form: the targets' own Gaussian at their mean and (population) variance
    expected = norm.logpdf(y_obs, y_obs.mean(), y_obs.std()).sum()
    assert reg.method_ == "white"
    assert reg.log_marginal_likelihood_ == pytest.approx(expected, rel=1e-12)
    mean, std = reg.predict(X[:5], return_std=True)
    assert np.allclose(mean, y_obs.mean()) and np.all(std == 0)
    lo, hi = reg.predict_interval(X[:5], coverage=0.9)
    half = norm.ppf(0.95) * y_obs.std()
    assert np.allclose(hi - lo, 2 * half, rtol=1e-12)
    assert np.allclose((hi + lo) / 2, y_obs.mean())
    with pytest.raises(ValueError, match="eigenbasis"):
        reg.latent_posterior()

    auto = WithWhiteNoise([HeatKernelPrior(Eigenbasis(n_induced=120)), GraphMaternPrior(), RBFPrior(),
                           WhitePrior()]).fit(X, y)
    # the registry's representations in its order, then the heat kernel (weighed, or left
    # out when its evidence ceiling lies below the best of them)
    assert list(auto.log_evidence_)[:3] == ["graph_matern", "rbf", "white"]
    assert list(auto.log_evidence_)[3:] == ["flgp"] or "flgp" in auto.skipped_methods_
    assert auto.log_evidence_["white"] == pytest.approx(expected, rel=1e-12)
    assert auto.method_ == max(auto.log_evidence_, key=auto.log_evidence_.get)
    # a spiral's targets follow the curve: white noise explains them worst
    assert auto.log_evidence_["white"] < min(v for k, v in auto.log_evidence_.items()
                                             if k != "white")
    # and the plain estimator's weighing is unchanged by the subclass's registry
    plain = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=120)), GraphMaternPrior(),
                           RBFPrior()]).fit(X, y)
    assert {k: plain.log_evidence_[k] for k in plain.log_evidence_} == pytest.approx(
        {k: auto.log_evidence_[k] for k in plain.log_evidence_}, rel=1e-10)


@pytest.mark.parametrize("method, fit_type", [("graph_matern", GraphMaternRegressionFit), ("rbf", RBFRegressionFit)])
def test_registered_fits_predict_as_their_own_models(method, fit_type):
    X, y, _ = _spiral(400)
    reg = FLGPRegressor(_PRIOR_OF[method]()).fit(X, y)
    assert isinstance(reg._chosen_fit, fit_type) and reg.method_ == method
    mean, std = reg.predict(X, return_std=True)
    # at the cloud's own rows, the transduction
    # (the nodes' interpolation weighs the node itself by 1 - 1e-12 or so)
    for got, want in ((mean, reg.transduction_), (std, reg.transduction_std_)):
        assert np.allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
    if method == "rbf":
        # the fitted RBF GP predicts the same numbers itself
        m2, s2 = reg.rbf_.predict(X)
        assert np.array_equal(mean, m2) and np.array_equal(std, s2)
    # a pickled and restored estimator predicts the same
    back = pickle.loads(pickle.dumps(reg))
    assert np.array_equal(back.predict(X[:20]), reg.predict(X[:20]))
    # a refit with the heat kernel forgets the other representation
    reg.set_params(prior=HeatKernelPrior(Eigenbasis(n_induced=100))).fit(X, y)
    assert isinstance(reg._chosen_fit, HeatKernelRegressionFit)
    assert reg.latent_posterior() is not None


def test_another_representation_refuses_a_dask_cloud_at_predict():
    da = pytest.importorskip("dask.array")
    X, y, _ = _spiral(400)
    for method in ("graph_matern", "rbf"):
        reg = FLGPRegressor(_PRIOR_OF[method]()).fit(X, y)
        with pytest.raises(ValueError, match="numpy arrays only"):
            reg.predict(da.from_array(X, chunks=100))
    # "auto" weighs the heat kernel too; when the graph Matérn prior wins (a noisy spiral:
    # the evidence prefers it), the loser's eigenbasis is not adopted and a dask X is
    # refused, not mapped through it
    X, y, _ = _spiral(600)
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=120)), GraphMaternPrior(),
                         RBFPrior()]).fit(X, y)
    assert reg.method_ == "graph_matern" and not hasattr(reg, "eigenpairs_")
    with pytest.raises(ValueError, match="numpy arrays only"):
        reg.predict(da.from_array(X, chunks=100))


# -- classification ---------------------------------------------------------------------------

class ClassShares(ClassificationRepresentation):
    """Every point gets the labelled classes' shares; "auto" takes it when every class has
    at least 50 labels (a rule of its own, to see that "auto" asks the registry)."""

    name = "shares"

    def chosen_by_auto(self, prior, options, X, counts):
        return bool(counts.min() >= 50)

    def fit(self, prior, options, X, labelled, codes, classes):
        return ClassSharesFit(np.bincount(codes, minlength=classes.size) / codes.size,
                              classes)


class ClassSharesFit(ClassificationFit):
    method = "shares"

    def __init__(self, shares, classes):
        self.shares, self.classes = shares, classes

    def fitted_attributes(self, X, stacklevel):
        proba = self.predict_proba(X, stacklevel + 1)
        return dict(n_iter_=0, log_marginal_likelihood_=None, label_distributions_=proba,
                    transduction_=self.classes[np.argmax(proba, axis=1)])

    def predict_proba(self, X, stacklevel):
        return np.tile(self.shares, (X.shape[0], 1))


class SharesPrior(Prior):
    method = "shares"


class WithClassShares(FLGPClassifier):
    REPRESENTATIONS = {**FLGPClassifier.REPRESENTATIONS, "shares": ClassShares()}


def _all_and_shares(**heat):
    return [HeatKernelPrior(Eigenbasis(**heat)), GraphMaternPrior(), RBFPrior(), SharesPrior()]


def _circles(n=500, n_labels=None, seed=0):
    X, y = make_concentric_circles(n, random_state=seed)
    semi = np.full(n, -1)
    rng = np.random.default_rng(seed)
    for c in (0, 1):
        rows = np.flatnonzero(y == c)
        semi[rng.choice(rows, n_labels[c], replace=False)] = c
    return X, y, semi


def test_classifier_registry_and_auto_rule():
    from flgp.models.heat_kernel import HeatKernelClassification

    reps = FLGPClassifier.REPRESENTATIONS
    assert list(reps) == ["graph_matern", "rbf", "flgp"]
    assert isinstance(reps["graph_matern"], GraphMaternClassification)
    assert isinstance(reps["rbf"], RBFClassification)
    assert isinstance(reps["flgp"], HeatKernelClassification)
    # the heat kernel alone is the fallback (asked last, takes any labels)
    assert [rep.fallback for rep in reps.values()] == [False, False, True]
    # "auto" (the default): the full-resolution classifier for a numpy cloud whose fit is
    # predicted within GRAPH_MATERN_CLASSIFIER_SECONDS and half the memory; the heat kernel with
    # given induced points or beyond
    assert FLGPClassifier().method == "auto"
    for counts in ((1, 10), (3, 10), (30, 30)):
        X, _, semi = _circles(n_labels=counts)
        assert FLGPClassifier([HeatKernelPrior(Eigenbasis(n_induced=100)), GraphMaternPrior(),
                               RBFPrior()]).fit(X, semi).method_ == "graph_matern"
    X, _, semi = _circles(n_labels=(3, 10))
    assert FLGPClassifier([HeatKernelPrior(Eigenbasis(induced_points=X[::20])), GraphMaternPrior(),
                           RBFPrior()]).fit(X, semi).method_ == "flgp"
    rep = FLGPClassifier.REPRESENTATIONS["graph_matern"]
    prior, options = GraphMaternPrior(), FLGPClassifier()._fit_options()
    counts = np.array([150, 150])
    assert rep.chosen_by_auto(prior, options, np.broadcast_to(0.0, (100_000, 3)), counts)
    assert not rep.chosen_by_auto(prior, options, np.broadcast_to(0.0, (10_000_000, 3)),
                                  counts)
    why = rep.declined_by_auto(prior, options, np.broadcast_to(0.0, (10_000_000, 3)), counts)
    assert "predicted to take" in why and f"{GRAPH_MATERN_CLASSIFIER_SECONDS:.0f} s" in why


def test_a_third_classifier_representation_fits_predicts_and_is_asked_by_auto():
    X, y, semi = _circles(n_labels=(60, 90))
    clf = WithClassShares(SharesPrior()).fit(X, semi)
    assert clf.method_ == "shares"
    np.testing.assert_allclose(clf.predict_proba(X[:4]), [[0.4, 0.6]] * 4, rtol=1e-15)
    assert np.all(clf.predict(X[:4]) == 1)
    for refused in (clf.latent_posterior, lambda: clf.predict_latent(X[:3]),
                    lambda: clf.suggest_labels(2)):
        with pytest.raises(ValueError, match="heat-kernel"):
            refused()
    # "auto" asks the registry in order: the full-resolution classifier, first, takes a
    # numpy cloud; with given induced points it declines, and with 60 and 90 labels the
    # shares' rule takes it
    assert WithClassShares(_all_and_shares(n_induced=100)).fit(X, semi).method_ == "graph_matern"
    assert WithClassShares(_all_and_shares(induced_points=X[::10])).fit(
        X, semi).method_ == "shares"
    X, _, semi = _circles(n_labels=(2, 90))
    assert WithClassShares(_all_and_shares(induced_points=X[::10])).fit(
        X, semi).method_ == "flgp"


@pytest.mark.parametrize("method, fit_type", [("graph_matern", GraphMaternClassificationFit),
                                              ("rbf", RBFClassificationFit)])
def test_classifier_fits_predict_and_pickle_as_their_own_models(method, fit_type):
    X, y, semi = _circles(n_labels=(5, 5))
    clf = FLGPClassifier(_PRIOR_OF[method]()).fit(X, semi)
    assert isinstance(clf._chosen_fit, fit_type) and clf.method_ == method
    # at the cloud's own rows, the transduction's probabilities
    np.testing.assert_allclose(clf.predict_proba(X), clf.label_distributions_, rtol=1e-12,
                               atol=1e-15)
    back = pickle.loads(pickle.dumps(clf))
    assert np.array_equal(back.predict_proba(X[:30] * 1.01), clf.predict_proba(X[:30] * 1.01))
    # a refit with the heat kernel forgets it
    clf.set_params(prior=HeatKernelPrior(Eigenbasis(n_induced=100))).fit(X, semi)
    assert isinstance(clf._chosen_fit, HeatKernelClassificationFit)
    assert clf.predict_latent(X[:3])[0].shape == (3,)


def test_a_representation_auto_must_take_alone(monkeypatch):
    """A given graph beyond a factor's reach: "auto" takes the graph Matérn prior without
    weighing the others (their evidence is not comparable), and says so for each."""
    from flgp.graph import lattice_graph
    from flgp.models import graph_matern

    ijk = np.argwhere(np.ones((8, 8, 4), bool))
    x = ijk.astype(float)
    y = np.where(np.arange(len(x)) % 4 == 0, np.sin(x[:, 0] / 2.0), np.nan)
    monkeypatch.setattr(graph_matern, "factors", lambda n: n <= len(x) - 1)
    reg = FLGPRegressor([HeatKernelPrior(), GraphMaternPrior(graph=lattice_graph(ijk)),
                         RBFPrior()]).fit(x, y)
    assert reg.method_ == "graph_matern" and reg.log_evidence_ == {}
    assert list(reg.skipped_methods_) == ["rbf", "flgp"]           # the registry's order
    assert all(f"{len(x)} nodes, beyond a factor's reach" in why
               for why in reg.skipped_methods_.values())
    # the same fit as asked for by name
    named = FLGPRegressor(GraphMaternPrior(graph=lattice_graph(ijk))).fit(x, y)
    assert np.array_equal(reg.transduction_, named.transduction_)
    # at the limit itself, "auto" weighs all three (here the graph Matérn prior's starting
    # grid lies far below the RBF GP's evidence: screened out, not taken alone)
    monkeypatch.setattr(graph_matern, "factors", lambda n: n <= len(x))
    reg = FLGPRegressor([HeatKernelPrior(Eigenbasis(n_induced=60)),
                         GraphMaternPrior(graph=lattice_graph(ijk)), RBFPrior()]).fit(x, y)
    assert set(reg.log_evidence_) | set(reg.skipped_methods_) == {"flgp", "graph_matern", "rbf"}
    assert "rbf" in reg.log_evidence_
    assert "graph_matern" in reg.log_evidence_ or reg.skipped_methods_["graph_matern"].startswith("screened")


def test_prediction_warnings_point_at_the_users_call():
    """predict and predict_interval warn about far points at the line that called them,
    whichever representation predicts."""
    import warnings

    X, y, _ = _spiral(400)
    for method in ("graph_matern", "flgp"):
        prior = GraphMaternPrior() if method == "graph_matern" else HeatKernelPrior(Eigenbasis(n_induced=80))
        reg = FLGPRegressor(prior).fit(X, y)
        far = X[:3] + 100.0
        for call in (lambda: reg.predict(far), lambda: reg.predict_interval(far)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call()
            far_warnings = [w for w in caught if "far" in str(w.message)]
            assert far_warnings, method
            assert all(w.filename == __file__ for w in far_warnings), (
                method, [(w.filename, w.lineno) for w in far_warnings])


def test_standardisation_round_trip_and_bad_input():
    from flgp.models.representation import Standardisation

    y = np.array([3.0, 5.0, 10.0, -2.0])
    unit = 4.0
    st = Standardisation(y.mean(), y.std(), unit)
    z = st.standardise(y)
    np.testing.assert_allclose([z.mean(), z.std()], [0.0, 1.0], atol=1e-15)
    # a variance of z is y.std()^2 times it in units of y^2, (y.std()/unit)^2 in (y/unit)^2
    assert st.variance_of_y(0.5) == pytest.approx(0.5 * y.var(), rel=1e-14)
    assert st.variance_pre(0.5) == pytest.approx(0.5 * y.var() / unit ** 2, rel=1e-14)
    # log p(y) = log p(z) - m log(sd of y): the Jacobian of y -> z
    assert st.log_evidence_of_y(norm.logpdf(z).sum(), y.size) == pytest.approx(
        norm.logpdf(y, y.mean(), y.std()).sum(), rel=1e-13)
    for bad in ((np.nan, 1.0, 1.0), (0.0, 0.0, 1.0), (0.0, 1.0, -2.0), (0.0, np.inf, 1.0)):
        with pytest.raises(ValueError, match="finite positive scale and unit"):
            Standardisation(*bad)


# -- screening: a search left unfinished when its coarse stage trails far behind ------------

class StagedFit(WhiteNoiseFit):
    def __init__(self, name, standardisation, log_evidence):
        super().__init__(standardisation, log_evidence)
        self.method = name

    def fitted_attributes(self, X, stacklevel):
        return {**super().fitted_attributes(X, stacklevel), "method_": self.method}


class Staged(RegressionRepresentation):
    """A stand-in whose search has a coarse stage of evidence ``coarse`` (``tight`` once
    tightened; ``loose``: not to be judged before) and ends at ``final`` (``coarse=None``:
    no coarse stage); ``log`` records the searches tightened and finished."""

    def __init__(self, name, coarse, final, log, tight=None, loose=False):
        self.name, self.coarse, self.final, self.log = name, coarse, final, log
        self.tight, self.loose = tight, loose

    def infeasible(self, prior, options, shape, n_labelled):
        return None

    def fit(self, prior, options, X, labelled, y_lab, z, standardisation):
        self.log.append(self.name)
        return StagedFit(self.name, standardisation, self.final)

    def screen(self, prior, options, X, labelled, y_lab, z, standardisation):
        if self.coarse is None:
            return super().screen(prior, options, X, labelled, y_lab, z, standardisation)

        def tighten():
            self.log.append(f"tighten {self.name}")
            return self.tight

        return Screened(self.coarse, lambda: self.fit(prior, options, X, labelled, y_lab, z,
                                                      standardisation),
                        tighten=None if self.tight is None else tighten, loose=self.loose)


def test_auto_leaves_a_search_unfinished_when_its_coarse_stage_trails_by_the_margin():
    """The best coarse stage is finished first; another whose coarse evidence, tightened,
    lies more than max(100, 0.1 m) nats below the best evidence fitted is not finished
    (even one that would have won: the rule bets on its measured gains), nor one whose
    untightened coarse evidence lies more than twice that below unless it is loose (a
    loose one below the best coarse evidence is tightened before the order is set); one
    within the margin is finished, and a fit without a coarse stage is always weighed."""
    X, y, _ = _spiral()
    m = int(np.sum(~np.isnan(y)))
    margin = screening_margin(m)
    assert margin == max(100.0, 0.1 * m) and screening_margin(5000) == 500.0
    with pytest.raises(ValueError, match="number of labels"):
        screening_margin(-1)
    log = []
    reps = {"a": Staged("a", 0.0, 10.0, log),
            "b": Staged("b", 10.0 - margin - 1.0, 500.0, log),      # beyond the margin
            "c": Staged("c", 10.0 - margin + 1.0, 5.0, log),        # within it
            "d": Staged("d", None, -1000.0, log),                   # no coarse stage
            # within two margins: tightened, still beyond one - left unfinished
            "g": Staged("g", 10.0 - margin - 1.0, 600.0, log, tight=10.0 - margin - 0.5),
            # beyond two margins: left unfinished untightened (its tightening never runs)
            "e": Staged("e", 10.0 - 2 * margin - 1.0, 700.0, log, tight=10.0),
            # the same but loose: tightened, within the margin - finished
            "f": Staged("f", 10.0 - 2 * margin - 1.0, 7.0, log, tight=10.0 - margin + 1.0,
                        loose=True)}
    priors = [type(f"{k}Prior", (Prior,), {"method": k})() for k in reps]
    Reg = type("StagedRegressor", (FLGPRegressor,), {"REPRESENTATIONS": reps})
    reg = Reg(priors).fit(X, y)
    # d whole at once; f, loose and below the best coarse evidence, tightened before the
    # order is set; then by (tightened) coarse evidence: a, c, f, (b, g), e
    assert log == ["d", "tighten f", "a", "c", "f", "tighten g"]
    assert list(reg.log_evidence_) == ["a", "c", "d", "f"]          # the registry's order
    assert reg.log_evidence_ == {"a": 10.0, "c": 5.0, "d": -1000.0, "f": 7.0}
    assert set(reg.skipped_methods_) == {"b", "e", "g"}
    why = reg.skipped_methods_["b"]
    assert why.startswith("screened out") and f"{10.0 - margin - 1.0:.1f}" in why
    assert f"{margin:.0f} nats below 'a''s 10.0" in why
    assert f"{10.0 - margin - 0.5:.1f}" in reg.skipped_methods_["g"]      # tightened
    assert reg.method_ == "a"
    # offered alone, nothing is screened
    log.clear()
    alone = Reg(priors[1]).fit(X, y)
    assert alone.method_ == "b" and log == ["b"]


@pytest.mark.parametrize("name", ["graph_matern", "rbf"])
def test_a_screened_fit_finishes_as_the_whole_fit(name):
    """screen() then finish() is fit(): the same search, paused after its coarse stage,
    whose evidence is an independent computation's - the graph Matérn prior's best over
    its starting grid, the RBF GP's best grid point (a fit with no refinement)."""
    from flgp.graph import lattice_graph
    from flgp.models.baselines import RBFGPRegressor
    from flgp.models.representation import Standardisation
    from flgp.precision.gaussian import start_grid

    ijk = np.argwhere(np.ones((10, 10, 4), bool))
    x = ijk.astype(float)
    rng = np.random.default_rng(1)
    truth = np.sin(x[:, 0] / 2.5) + 0.5 * np.cos(x[:, 1] / 3.0)
    labelled = np.sort(rng.choice(len(x), 120, replace=False))
    y_lab = truth[labelled] + 0.05 * rng.standard_normal(labelled.size)
    standard = Standardisation.of_targets(y_lab)
    z = standard.standardise(y_lab)
    prior = GraphMaternPrior(lattice_graph(ijk)) if name == "graph_matern" else RBFPrior()
    options = FLGPRegressor(prior)._fit_options()
    rep = FLGPRegressor.REPRESENTATIONS[name]
    whole = rep.fit(prior, options, x, labelled, y_lab, z, standard)
    paused = rep.screen(prior, options, x, labelled, y_lab, z, standard)
    assert not paused.final
    done = paused.finish()
    # the same search: equal at the searches' tolerances (0.1 nats; a fifth of a unit in
    # log kappa^2 and log r, a relative 1e-3 in the RBF GP's length-scale and noise)
    assert done.log_evidence == pytest.approx(whole.log_evidence, abs=0.1)
    assert paused.log_evidence <= done.log_evidence + 0.1
    m = labelled.size
    if name == "graph_matern":
        from flgp.precision import MATERN_ORDERS, MaternRegression
        graph = lattice_graph(ijk)
        graph = graph.in_units(*graph.own_units())
        nu = MATERN_ORDERS[0]                                # the first order searched
        reg = MaternRegression(graph, labelled, z, nu)
        grid = [reg.evaluate(float(np.exp(u)), float(np.exp(v)) *
                             reg.prior_variance(float(np.exp(u)))).log_evidence
                for u, v in start_grid(graph, nu)]
        assert paused.log_evidence == pytest.approx(standard.log_evidence_of_y(max(grid), m),
                                                    abs=1e-6)
        # tightened: the search run on through its first order's coarse stage, the same
        # search when finished
        again = rep.screen(prior, options, x, labelled, y_lab, z, standard)
        coarse = again.log_evidence
        assert coarse <= again.tighten() <= done.log_evidence + 0.1
        assert again.finish().log_evidence == pytest.approx(whole.log_evidence, abs=0.1)
        assert abs(np.log(done.fit.kappa2 / whole.fit.kappa2)) <= 0.2
        assert abs(np.log(done.fit.ratio / whole.fit.ratio)) <= 0.2
    else:
        # the best of the grid's points at its last noise ratio (a fit with no
        # refinement on that part of the grid); tightened, that point polished: at or
        # above it and at or below the whole search's end
        class LargestRatio(RBFGPRegressor):
            RATIO_GRID = RBFGPRegressor.RATIO_GRID[-1:]

        part_only = LargestRatio(max_iter=0).fit(x[labelled], y_lab)
        assert paused.log_evidence == pytest.approx(part_only.log_marginal_likelihood_,
                                                    abs=1e-6)
        grid_only = RBFGPRegressor(max_iter=0).fit(x[labelled], y_lab)
        assert paused.log_evidence <= grid_only.log_marginal_likelihood_ + 1e-9
        again = rep.screen(prior, options, x, labelled, y_lab, z, standard)
        coarse = again.log_evidence
        assert coarse <= again.tighten() <= done.log_evidence + 0.1
        tightened = again.finish()
        # finished, with or without the polish, the search goes on from the whole grid's
        # best point: the unscreened fit's numbers
        for finished in (done, tightened):
            assert finished.log_evidence == pytest.approx(whole.log_evidence, rel=1e-12)
            assert finished.rbf.lengthscale_ == pytest.approx(whole.rbf.lengthscale_,
                                                              rel=1e-10)
            assert finished.rbf.noise_ == pytest.approx(whole.rbf.noise_, rel=1e-10)


def test_the_heat_kernel_is_screened_by_its_coarse_stage_below_its_ceiling():
    """A bar within the heat kernel's evidence ceiling: its search stops after the coarse
    stage (one L-BFGS-B start at the largest rank) when that lies more than the margin
    below the bar, and is finished - as fitted alone - otherwise."""
    from flgp.models.eigenbasis import candidate_eigenbases
    from flgp.models.heat_kernel import fit_hyperparameters, noise_bounds, regression_sizes
    from flgp.models.representation import Outranked, Standardisation
    from flgp.spectral.gaussian import LowRankGaussianEvidence

    X, y, _ = _spiral(800, frac=0.3)
    labelled = np.flatnonzero(~np.isnan(y))
    y_lab = y[labelled]
    standard = Standardisation.of_targets(y_lab)
    z = standard.standardise(y_lab)
    prior = HeatKernelPrior(Eigenbasis(n_induced=150))
    options = FLGPRegressor(prior)._fit_options()
    rep = FLGPRegressor.REPRESENTATIONS["flgp"]
    whole = rep.fit(prior, options, X, labelled, y_lab, z, standard)
    sizes = regression_sizes(prior, options, X.shape[0])
    eigenpairs = next(candidate_eigenbases(prior, options, X, sizes))[1]
    V_lab = eigenpairs.eigenvector_rows(labelled)
    noise = noise_bounds(options, standard)
    m = labelled.size
    coarse = standard.log_evidence_of_y(-fit_hyperparameters(
        prior, options, eigenpairs, V_lab, z, noise, n_starts=1)["nll_evidence"], m)
    ceiling = standard.log_evidence_of_y(LowRankGaussianEvidence(V_lab, z).ceiling(noise), m)
    margin = screening_margin(m)
    assert coarse <= whole.log_evidence + 0.1 < ceiling
    bar = coarse + margin + 1.0
    assert bar < ceiling                     # the ceiling alone would not leave it out
    with pytest.raises(Outranked, match="screened out") as out:
        rep.fit(prior, options, X, labelled, y_lab, z, standard, bar=bar)
    assert out.value.ceiling == pytest.approx(coarse, abs=1e-6)
    near = rep.fit(prior, options, X, labelled, y_lab, z, standard,
                   bar=coarse + margin - 1.0)
    assert near.log_evidence == pytest.approx(whole.log_evidence, abs=0.1)


def test_the_classifier_says_what_it_chose_and_why():
    """method_, log_evidence_ (the fitted representation's evidence, the same number as
    log_marginal_likelihood_) and skipped_methods_ (why each other representation offered
    was not fitted): the default on a numpy cloud, a dask cloud and one prior alone."""
    X, _, semi = _circles(n_labels=(3, 10))
    clf = FLGPClassifier().fit(X, semi)
    assert clf.method_ == "graph_matern"
    assert clf.log_evidence_ == {"graph_matern": clf.log_marginal_likelihood_}
    assert set(clf.skipped_methods_) == {"rbf", "flgp"}
    assert "labelled points only" in clf.skipped_methods_["rbf"]
    # three labels a class and more: the heat kernel fitted too, and set aside by
    # cross-validation, with its held-out scores against the full-resolution fit's
    cv = clf.cross_validation_
    assert "set aside by cross-validation" in clf.skipped_methods_["flgp"]
    assert f"{cv['flgp']['accuracy']:.3f} against {cv['graph_matern']['accuracy']:.3f}" \
        in clf.skipped_methods_["flgp"]
    two = semi.copy()
    two[np.flatnonzero(semi == 0)[:1]] = -1              # two labels of one class
    fewer = FLGPClassifier().fit(X, two)
    assert fewer.cross_validation_ is None
    assert "took 'graph_matern' first" in fewer.skipped_methods_["flgp"]
    # one prior alone: nothing passed over
    heat = FLGPClassifier(HeatKernelPrior(Eigenbasis(n_induced=100))).fit(X, semi)
    assert heat.log_evidence_ == {"flgp": heat.log_marginal_likelihood_}
    assert heat.skipped_methods_ == {}
    # given induced points: the full-resolution classifier declines, the heat kernel fits
    given = FLGPClassifier([GraphMaternPrior(), HeatKernelPrior(Eigenbasis(induced_points=X[::20]))]).fit(
        X, semi)
    assert given.method_ == "flgp" and "induced_points" in given.skipped_methods_["graph_matern"]
    # refitting forgets the previous fit's record
    given.set_params(prior=GraphMaternPrior()).fit(X, semi)
    assert given.skipped_methods_ == {} and list(given.log_evidence_) == ["graph_matern"]


def test_the_classifier_names_why_a_dask_cloud_is_not_fitted_at_full_resolution():
    da = pytest.importorskip("dask.array")
    X, _, semi = _circles(n=600, n_labels=(4, 4))
    clf = FLGPClassifier([GraphMaternPrior(), HeatKernelPrior(Eigenbasis(n_induced=100))]).fit(
        da.from_array(X, chunks=200), semi)
    assert clf.method_ == "flgp" and "dask" in clf.skipped_methods_["graph_matern"]
    assert clf.log_evidence_ == {"flgp": clf.log_marginal_likelihood_}
