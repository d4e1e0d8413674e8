"""The exact RBF GP regressor's fit (``RBFGPRegressor``: profiled evidence, grid then
L-BFGS-B, one Cholesky per evaluation) against the GPyTorch fit it replaced.

Data: ``m`` points drawn uniformly in the box [-1, 1]^3, targets a smooth function
(``sin(3 x) cos(2 y) + z^2``) plus Gaussian noise of sd 0.1; the sizes are those of the
motor map's labels (2,091 and 4,182 of 7,407 voxels) and a small one. For each size and
implementation: the median wall time of ``--repeats`` fresh fits, the evidence
evaluations (GPyTorch: closure calls, each a Cholesky and its backward pass; its L-BFGS
iterations in brackets), the maximised log evidence (higher is better: both maximise the
same marginal likelihood) and the RMSE against the noise-free function at 2,000 new points.

    python benchmarks/rbf.py [--sizes 500,2091,4182] [--repeats 3] [--old-repeats 1]
                             [--no-old] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")
# benchmarks/profile.py would shadow the standard library's profile module, which torch's
# L-BFGS imports (through cProfile) on first use
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np  # noqa: E402

from flgp.models.baselines import RBFGPRegressor, _sqdist, _standardise  # noqa: E402


def smooth(X):
    return np.sin(3.0 * X[:, 0]) * np.cos(2.0 * X[:, 1]) + X[:, 2] ** 2


def cloud(m, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (m, 3))
    return X, smooth(X) + noise * rng.normal(size=m)


# -- the GPyTorch fit as it was (flgp.models.baselines before the numpy fit) ---------------

def _fit_gpytorch(X, y, max_iter=100):
    """The former ``RBFGPRegressor.fit``: GPyTorch ``ExactGP`` (constant mean,
    ``ScaleKernel(RBFKernel)``, Gaussian likelihood) on standardised inputs and targets,
    L-BFGS (strong Wolfe) on the exact marginal likelihood, exact up to 20,000 labels, a
    warm start from 500 labels above 1,000. Returns ``(log evidence in units of y,
    closure calls, L-BFGS iterations, predict)``."""
    import gpytorch
    import torch

    class ExactRBF(gpytorch.models.ExactGP):
        def __init__(self, x, t, lik):
            super().__init__(x, t, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    def hyper(model):
        return (float(model.covar_module.base_kernel.lengthscale.detach()),
                float(model.covar_module.outputscale.detach()),
                float(model.likelihood.noise.detach()),
                float(model.mean_module.constant.detach()))

    calls = [0]

    def optimise(Z, yt, start):
        ell, scale, noise, constant = start
        lik = gpytorch.likelihoods.GaussianLikelihood().double()
        model = ExactRBF(Z, yt, lik).double()
        model.covar_module.base_kernel.lengthscale = ell
        model.covar_module.outputscale = scale
        lik.noise = noise
        model.mean_module.constant.data.fill_(constant)
        model.train()
        lik.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
        opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=int(max_iter),
                                line_search_fn="strong_wolfe", tolerance_grad=1e-6,
                                tolerance_change=1e-9)

        def closure():
            calls[0] += 1
            opt.zero_grad()
            loss = -mll(model(Z), yt)
            loss.backward()
            return loss

        with gpytorch.settings.max_cholesky_size(20_000), warnings.catch_warnings():
            warnings.filterwarnings("ignore",
                                    category=gpytorch.utils.warnings.NumericalWarning)
            opt.step(closure)
        model.n_iter_ = int(opt.state[opt._params[0]].get("n_iter", 0))
        return model, lik, mll

    mu, sd = _standardise(X)
    mean_y, scale_y = float(y.mean()), float(y.std()) or 1.0
    Z = torch.as_tensor((X - mu) / sd, dtype=torch.float64)
    yt = torch.as_tensor((y - mean_y) / scale_y, dtype=torch.float64)
    sub = Z.numpy()[:2000]
    d2 = _sqdist(sub, sub)
    med = float(np.sqrt(np.median(d2[np.triu_indices_from(d2, 1)]) / 2.0)) or 1.0
    start = (0.5 * med, float(yt.var()), 0.1 * float(yt.var()) + 1e-4, float(yt.mean()))
    if len(yt) > 1000:
        pick = np.sort(np.random.default_rng(0).choice(len(yt), 500, replace=False))
        start = hyper(optimise(Z[pick], yt[pick], start)[0])
    model, lik, mll = optimise(Z, yt, start)
    with gpytorch.settings.max_cholesky_size(20_000), torch.no_grad():
        lml = float(mll(model(Z), yt)) * len(yt) - len(yt) * np.log(scale_y)
    model.eval()
    lik.eval()

    def predict(X_new):
        with gpytorch.settings.max_cholesky_size(20_000), torch.no_grad():
            Zn = torch.as_tensor((X_new - mu) / sd, dtype=torch.float64)
            return mean_y + scale_y * model(Zn).mean.numpy()

    return lml, calls[0], model.n_iter_, predict


def time_new(X, y, X_test, f_test, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        reg = RBFGPRegressor().fit(X, y)
        times.append(time.perf_counter() - start)
    rmse = float(np.sqrt(np.mean((reg.predict(X_test, return_std=False) - f_test) ** 2)))
    return {"implementation": "numpy", "seconds": float(np.median(times)), "times": times,
            "evaluations": reg.n_iter_, "iterations": None,
            "log_evidence": float(reg.log_marginal_likelihood_), "rmse": rmse,
            "lengthscale": reg.lengthscale_, "noise": reg.noise_,
            "outputscale": reg.outputscale_}


def time_old(X, y, X_test, f_test, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        lml, calls, iters, predict = _fit_gpytorch(X, y)
        times.append(time.perf_counter() - start)
    rmse = float(np.sqrt(np.mean((predict(X_test) - f_test) ** 2)))
    return {"implementation": "gpytorch", "seconds": float(np.median(times)), "times": times,
            "evaluations": calls, "iterations": iters, "log_evidence": lml, "rmse": rmse}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="500,2091,4182")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--old-repeats", type=int, default=1,
                    help="fresh GPyTorch fits per size (minutes each at 4,182)")
    ap.add_argument("--no-old", action="store_true", help="skip the GPyTorch fit")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    X_test = np.random.default_rng(99).uniform(-1.0, 1.0, (2000, 3))
    f_test = smooth(X_test)
    rows = []
    print(f"{'m':>6} {'impl':>9} {'seconds':>9} {'evals':>10} {'log evidence':>14} "
          f"{'rmse':>7}")
    for m in (int(s) for s in args.sizes.split(",")):
        X, y = cloud(m)
        runs = [time_new(X, y, X_test, f_test, args.repeats)]
        if not args.no_old and args.old_repeats > 0:
            runs.append(time_old(X, y, X_test, f_test, args.old_repeats))
        for row in runs:
            row["m"] = m
            evals = str(row["evaluations"]) + (f" ({row['iterations']})"
                                               if row["iterations"] is not None else "")
            print(f"{m:>6} {row['implementation']:>9} {row['seconds']:>9.2f} {evals:>10} "
                  f"{row['log_evidence']:>14.3f} {row['rmse']:>7.4f}", flush=True)
            rows.append(row)
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                "repeats": args.repeats, "old_repeats": args.old_repeats}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
