"""The concentric-circles study of He et al. (FLGP paper, Tables 1-2, Figure 4).

Six circles (radii 0.5, ..., 1.0, ``n / 6`` uniform points each, classes alternating);
``m`` random labels; error on the unlabelled points. As in the authors' scripts,
coordinates are standardised and divided by ``sqrt(p)``. FLGP uses the paper's ``s = 600``,
``r = 3``, ``M = 100``; other hyperparameters by (approximate) marginal likelihood.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..datasets import make_concentric_circles
from ..models import FLGPClassifier
from ..models.priors import Eigenbasis, HeatKernelPrior, RBFPrior
from ..spectral.families import heat_weights

__all__ = ["TABLE1_METHODS", "PAPER_ERROR", "PAPER_TIME", "make_method", "run_circles",
           "summarise", "format_table", "plot_covariances", "standardise"]

TABLE1_METHODS = ["RBF GP", "KSVM", "GLGP", "Nystrom-GLGP", "SRFLGP", "SKFLGP", "LRFLGP", "LKFLGP"]
SCENARIOS = [(2400, 50), (2400, 100), (4800, 50), (4800, 100), (12000, 50), (12000, 100)]

# paper Table 1: mean (sd) error in %, "<0.1" entered as 0.1
PAPER_ERROR = {
    "RBF GP": [(47.3, 2.3), (44.2, 2.4), (46.1, 3.0), (44.8, 2.4), (46.8, 2.1), (45.3, 2.0)],
    "KSVM": [(46.8, 3.1), (44.7, 2.5), (46.7, 2.4), (45.0, 3.1), (47.1, 2.5), (46.4, 1.3)],
    "GLGP": [(46.1, 8.3), (17.6, 2.9), (46.8, 6.9), (17.6, 3.4), (47.7, 5.7), (17.1, 3.8)],
    "Nystrom-GLGP": [(44.7, 8.6), (16.7, 3.6), (44.6, 8.7), (16.2, 3.8), (41.3, 9.6),
                     (17.3, 3.4)],
    "SRFLGP": [(19.6, 5.3), (12.3, 2.6), (16.5, 4.2), (12.0, 3.5), (17.8, 4.7), (9.7, 3.9)],
    "SKFLGP": [(3.1, 3.4), (0.7, 1.6), (0.1, 0.1), (0.1, 0.2), (0.1, 0.1), (0.1, 0.1)],
    "LRFLGP": [(27.4, 5.4), (17.3, 3.2), (26.9, 4.8), (18.1, 3.5), (27.0, 4.4), (19.5, 3.5)],
    "LKFLGP": [(7.0, 4.2), (3.9, 2.5), (3.3, 2.9), (1.5, 1.4), (1.1, 2.6), (0.3, 0.7)],
}
# paper Table 2: seconds on a 6-core desktop
PAPER_TIME = {
    "RBF GP": [0.1, 0.11, 0.19, 0.2, 0.48, 0.52],
    "KSVM": [0.03, 0.01, 0.02, 0.03, 0.04, 0.06],
    "GLGP": [1.4, 1.55, 9.21, 9.33, 59.74, 59.72],
    "Nystrom-GLGP": [1.58, 1.74, 3.99, 4.12, 7.38, 7.54],
    "SRFLGP": [1.92, 2.09, 1.36, 1.58, 1.59, 1.81],
    "SKFLGP": [5.57, 5.98, 2.29, 2.59, 1.98, 2.34],
    "LRFLGP": [0.12, 0.17, 0.16, 0.21, 0.27, 0.33],
    "LKFLGP": [0.14, 0.2, 0.18, 0.24, 0.33, 0.4],
}


def standardise(X: np.ndarray) -> np.ndarray:
    """The authors' preprocessing: standardise each coordinate, divide by sqrt(p)."""
    X = (X - X.mean(0)) / X.std(0)
    return X / np.sqrt(X.shape[1])


class _KSVM:
    """RBF support vector machine, C and gamma by cross-validation on the labelled points."""

    def __init__(self, random_state=0):
        self.random_state = random_state

    def fit(self, X, y):
        from sklearn.model_selection import GridSearchCV, StratifiedKFold
        from sklearn.svm import SVC

        lab = y != -1
        Xl, yl = X[lab], y[lab]
        folds = int(max(2, min(5, np.bincount(yl).min())))
        grid = {"C": np.logspace(-2, 3, 6), "gamma": np.logspace(-2, 3, 6)}
        cv = StratifiedKFold(folds, shuffle=True, random_state=self.random_state)
        self.search_ = GridSearchCV(SVC(kernel="rbf"), grid, cv=cv).fit(Xl, yl)
        self.transduction_ = self.search_.predict(X)
        return self


# the induced points of the FLGP and Nyström rows (the paper's s)
N_INDUCED = 600


def make_method(name: str, *, n_induced=N_INDUCED, n_neighbors=3, n_eigenpairs=100,
                random_state=0, glgp_bandwidth_grid=(1.0,)):
    """The estimator behind each row of Table 1.

    GLGP keeps its default bandwidth rule (``glgp_bandwidth_grid=(1.0,)``) unless told
    otherwise: each grid value costs a dense ``n x n`` eigendecomposition. Other methods
    select the bandwidth by marginal likelihood over the estimators' default grid.
    """
    heat = dict(n_neighbors=n_neighbors, n_eigenpairs=n_eigenpairs)
    if name == "RBF GP":
        return FLGPClassifier(RBFPrior(), random_state=random_state)
    if name == "KSVM":
        return _KSVM(random_state)
    if name == "GLGP":
        return FLGPClassifier(HeatKernelPrior(Eigenbasis(
            "glgp", bandwidth_grid=glgp_bandwidth_grid, **heat)), random_state=random_state)
    if name == "Nystrom-GLGP":
        return FLGPClassifier(HeatKernelPrior(Eigenbasis("nystrom", n_induced=n_induced, **heat)),
                              random_state=random_state)
    kernel = {"S": "se", "L": "lae"}[name[0]]
    subsample = {"R": "random", "K": "kmeans"}[name[1]]
    return FLGPClassifier(HeatKernelPrior(Eigenbasis(
        "flgp", kernel=kernel, subsample=subsample, n_induced=n_induced, **heat)),
        random_state=random_state)


def run_circles(scenarios=SCENARIOS, methods=TABLE1_METHODS, repetitions=20, *, glgp_max_n=4800,
                seed=0, progress=True, keep_models=False, **method_kw):
    """Run every method on every scenario; one row per (scenario, method, repetition).

    GLGP is skipped where ``n > glgp_max_n`` (its dense ``n x n`` graph is slow and large).

    Returns the runs as a DataFrame; with ``keep_models=True`` also a dict
    ``{(n, m): (X, {method: fitted estimator})}`` from the first repetition, for figures.
    """
    rows = []
    models = {}
    jobs = [(n, m, rep) for (n, m) in scenarios for rep in range(repetitions)]
    bar = tqdm(jobs, disable=not progress, desc="circles", unit="fit")
    for n, m, rep in bar:
        rs = seed + rep
        X, y = make_concentric_circles(n, random_state=rs)
        X = standardise(X)
        rng = np.random.default_rng(rs)
        lab = rng.choice(n, m, replace=False)
        if np.unique(y[lab]).size < 2:  # a draw with one class only: redraw
            lab = np.r_[lab[:-2], np.flatnonzero(y == 0)[:1], np.flatnonzero(y == 1)[:1]]
        yy = np.full(n, -1)
        yy[lab] = y[lab]
        unl = yy == -1
        for name in methods:
            if name == "GLGP" and n > glgp_max_n:
                continue
            bar.set_postfix_str(f"n={n} m={m} {name}")
            est = make_method(name, random_state=rs, **method_kw)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, yy)
            elapsed = time.perf_counter() - t0
            err = float(np.mean(est.transduction_[unl] != y[unl]) * 100)
            rows.append(dict(n=n, m=m, method=name, repetition=rep, error=err,
                             seconds=elapsed))
            if keep_models and rep == 0:
                models.setdefault((n, m), (X, {}))[1][name] = est
    df = pd.DataFrame(rows)
    return (df, models) if keep_models else df


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd of error and median time per (n, m, method), with the paper's numbers."""
    g = df.groupby(["n", "m", "method"], sort=False)
    out = g.agg(error_mean=("error", "mean"), error_sd=("error", "std"),
                seconds_median=("seconds", "median"), repetitions=("error", "size"))
    out = out.reset_index()
    idx = {sc: k for k, sc in enumerate(SCENARIOS)}
    pe, ps, pt = [], [], []
    for _, r in out.iterrows():
        k = idx.get((r.n, r.m))
        pe.append(PAPER_ERROR[r.method][k][0] if k is not None else np.nan)
        ps.append(PAPER_ERROR[r.method][k][1] if k is not None else np.nan)
        pt.append(PAPER_TIME[r.method][k] if k is not None else np.nan)
    out["paper_error_mean"], out["paper_error_sd"], out["paper_seconds"] = pe, ps, pt
    out["error_sd"] = out["error_sd"].fillna(0.0)
    return out


def format_table(summary: pd.DataFrame) -> str:
    """Ours next to the paper's: ``error mean (sd) | paper`` and times."""
    lines = []
    for (n, m), block in summary.groupby(["n", "m"], sort=False):
        lines.append(f"\nn = {n}, m = {m}  (error % on unlabelled points; time per fit)")
        lines.append(f"{'method':<14} {'ours':>14} {'paper':>14} {'ours s':>8} "
                     f"{'paper s':>8}  reps")
        for _, r in block.iterrows():
            ours = f"{r.error_mean:5.1f} ({r.error_sd:4.1f})"
            paper = (f"{r.paper_error_mean:5.1f} ({r.paper_error_sd:4.1f})"
                     if np.isfinite(r.paper_error_mean) else "-")
            lines.append(f"{r.method:<14} {ours:>14} {paper:>14} {r.seconds_median:8.2f} "
                         f"{r.paper_seconds:8.2f}  {r.repetitions}")
    return "\n".join(lines)


def plot_covariances(path, X: np.ndarray, models: dict):
    """Figure 4: prior covariance of every point to one reference point, scaled to [0, 1],
    one panel per fitted method (KSVM has no covariance and is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = {k: v for k, v in models.items() if k != "KSVM"}
    radius = np.linalg.norm(X, axis=1)
    # reference: the point of the third circle from inside closest to the positive x axis
    third = np.quantile(radius, 2.5 / 6)
    ref = int(np.argmin(np.abs(radius - third) + 10 * (X[:, 0] < 0) + np.abs(X[:, 1])))
    fig, axes = plt.subplots(1, len(models), figsize=(2.8 * len(models), 3.2))
    for ax, (name, est) in zip(np.atleast_1d(axes), models.items()):
        cov = (_rbf_covariance_to(est.rbf_, X, ref) if est.method == "rbf" else
               _heat_covariance_to(est.eigenpairs_, est.diffusion_time_, ref))
        cov = (cov - cov.min()) / (np.ptp(cov) or 1.0)
        ax.scatter(X[:, 0], X[:, 1], c=cov, s=2, cmap="viridis")
        ax.scatter(X[ref, 0], X[ref, 1], c="red", s=40, marker="x")
        ax.set_title(name, fontsize=10)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Prior covariance to the reference point (red x), scaled to [0, 1]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rbf_covariance_to(r, X, ref):
    """The fitted RBF GP ``r``'s prior covariance of every row of ``X`` with row ``ref``."""
    Z = (X - r.mu_) / r.sd_
    d2 = ((Z - Z[ref]) ** 2).sum(1)
    return r.outputscale_ * np.exp(-d2 / (2 * r.lengthscale_ ** 2))


def _heat_covariance_to(eigenpairs, t, ref):
    """The heat kernel's prior covariance at time ``t`` of every row with row ``ref``."""
    V = eigenpairs.eigenvectors
    w = eigenpairs.kernel_scale * heat_weights(eigenpairs.eigenvalues, t)
    return (V * w) @ V[ref]
