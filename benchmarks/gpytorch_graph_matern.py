"""flgp's full-resolution graph Matérn prior in a plain GPyTorch loop (issue 44): the
whole-brain motor map, against flgp's own evidence search.

Data: nilearn's ``load_sample_motor_activation_image`` (45,448 voxels: the finite,
non-zero ones), the voxel lattice ``lattice_graph(ijk, img.affine)``, 30 % of the voxels
observed (``np.random.default_rng(seed)``), the targets centred on their observed mean.

* **GPyTorch**: ``ExactGP`` with ``ZeroMean``, ``ScaleKernel(GraphMaternKernel(graph,
  nu))`` and ``GaussianLikelihood`` (noise floor lowered to 1e-8: the map is nearly
  noise-free), ``ExactMarginalLogLikelihood``, ``--steps`` Adam steps at ``--lr``, held
  for the first half and decayed geometrically to ``--lr-final`` over the second.
  Start: the kernel's default ``κ²`` (a range of ten voxels), outputscale ``var(y)``,
  noise ``var(y) / 100``. Reported: wall time of the steps (and of building the model),
  the process's peak resident memory after them, and the exact log evidence at the final
  hyperparameters (one more forward pass).
* **flgp**: :func:`flgp.precision.gaussian.fit_gmrf` on the same data (``nus=(nu,)``), which
  searches ``(κ², r)`` on the graph in its own units for z-scored targets ``z = y / s``;
  its evidence is turned into the evidence of ``y`` by the standardisation's Jacobian,
  ``log p(y) = log p(z) - m log s``. The GPyTorch model evaluated at that optimum checks
  the mapping (the same number to ~1e-8 relative).
* **Predictions**: the GPyTorch posterior mean at every unobserved voxel against
  :meth:`flgp.precision.GMRFRegression.posterior_mean` at the GPyTorch model's final
  hyperparameters (``kernel.own_hyperparameters()``).

Issue 44's targets: the steps in at most 60 s on 2 cores and 2 GB, the final log evidence
within 2 nats of the search's optimum, the predictions within 1e-6 of the regressor's::

    python benchmarks/gpytorch_graph_matern.py --json gpytorch_graph_matern.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

# run as a script, this folder comes first on sys.path, and its profile.py shadows the
# standard library's profile module (which torch.optim imports through cProfile)
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def motor_map(seed: int, fraction: float = 0.3):
    """``(graph, observed voxel indices, the map's values)``."""
    import nibabel as nib
    from nilearn.datasets import load_sample_motor_activation_image

    from flgp.graph import lattice_graph

    img = nib.load(load_sample_motor_activation_image())
    data = img.get_fdata()
    mask = np.isfinite(data) & (data != 0)
    ijk = np.argwhere(mask)
    y = data[mask]
    graph = lattice_graph(ijk, img.affine)
    rng = np.random.default_rng(seed)
    obs = np.sort(rng.choice(y.size, int(round(fraction * y.size)), replace=False))
    return graph, obs, y


def run(seed: int = 0, nu: int = 2, steps: int = 50, lr: float = 0.3,
        lr_final: float = 0.01, verbose: bool = True) -> dict:
    import gpytorch
    import torch

    from flgp.kernels import GraphMaternKernel
    from flgp.precision import GMRFRegression, fit_gmrf

    torch.set_num_threads(2)
    graph, obs, y = motor_map(seed)
    m = obs.size
    centre = float(y[obs].mean())
    x = torch.as_tensor(graph.points[obs], dtype=torch.float64)
    yc = torch.as_tensor(y[obs] - centre, dtype=torch.float64)
    var = float(yc.var())

    class GP(gpytorch.models.ExactGP):
        def __init__(self, x, y, likelihood):
            super().__init__(x, y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(GraphMaternKernel(graph, nu=nu))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    start = time.perf_counter()
    likelihood = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(1e-8))
    model = GP(x, yc, likelihood).double()
    model.covar_module.outputscale = torch.tensor(var, dtype=torch.float64)
    likelihood.noise = torch.tensor(var / 100.0, dtype=torch.float64)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    build_seconds = time.perf_counter() - start

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    hold = steps // 2
    gamma = (lr_final / lr) ** (1.0 / max(steps - hold, 1))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: 1.0 if t < hold else gamma ** (t - hold + 1))
    model.train()
    likelihood.train()
    trace, errors = [], []
    kernel = model.covar_module.base_kernel
    load = os.getloadavg()[0]
    start, cpu = time.perf_counter(), time.process_time()
    for step in range(steps):
        optimizer.zero_grad()
        loss = -mll(model(x), yc)
        loss.backward()
        optimizer.step()
        schedule.step()
        trace.append(-loss.item() * m)
        t = kernel.trace_diagnostics
        # standard errors of ∂ log|K_XX + σ²I| / ∂ log θ (nats) for θ = κ², amplitude, noise
        errors.append((t["kappa2"] * t["delta_se"], t["scale"] * t["weighted_diagonal_se"],
                       t["scale"] * likelihood.noise.item() * t["noise_diagonal_se"],
                       abs(t["kappa2"] * t["delta"]),
                       t["weighted_diagonal_se"] / t["weighted_diagonal"],
                       t["noise_diagonal_se"] / t["noise_diagonal"]))
        if verbose and (step % 10 == 0 or step == steps - 1):
            k = model.covar_module.base_kernel
            print(f"  step {step:2d}: log evidence {trace[-1]:.2f}, kappa2 "
                  f"{k.kappa2.item():.3g}, outputscale "
                  f"{model.covar_module.outputscale.item():.3g}, noise "
                  f"{likelihood.noise.item():.3g}", flush=True)
    step_seconds = time.perf_counter() - start
    step_cpu = time.process_time() - cpu
    load = max(load, os.getloadavg()[0])
    with torch.no_grad():
        final = mll(model(x), yc).item() * m
    peak = _peak_gb()
    errors = np.array(errors)

    # flgp's own search on the z-scored targets, and its evidence in y's units
    s = float(np.std(y[obs]))
    z = (y[obs] - centre) / s
    start = time.perf_counter()
    fit, _, _ = fit_gmrf(graph, obs, z, nus=(nu,))
    search_seconds = time.perf_counter() - start
    search_evidence = fit.log_evidence - m * np.log(s)

    # the GPyTorch model at the search's optimum: the same evidence (the mapping's check)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        kernel.kappa2 = fit.kappa ** 2
        _, scale = kernel.own_hyperparameters()
        model.covar_module.outputscale = torch.tensor(fit.amplitude * s * s / scale.item(),
                                                      dtype=torch.float64)
        likelihood.noise = torch.tensor(fit.noise * s * s, dtype=torch.float64)
        at_search = mll(model(x), yc).item() * m
    model.load_state_dict(state)

    # predictions at the unobserved voxels against the regressor at the same point
    model.eval()
    likelihood.eval()
    test = np.setdiff1d(np.arange(graph.n_nodes), obs)
    start = time.perf_counter()
    with torch.no_grad():
        mean = model(torch.as_tensor(graph.points[test], dtype=torch.float64)).mean.numpy()
    predict_seconds = time.perf_counter() - start
    with torch.no_grad():
        kappa2_own, scale = kernel.own_hyperparameters()
        amplitude = model.covar_module.outputscale.item() * scale.item()
        ratio = likelihood.noise.item() / amplitude
    reg = GMRFRegression(kernel.graph, obs, yc.numpy(), nu)
    reference = reg.posterior_mean(kappa2_own.item(), ratio)[test]
    gap = float(np.max(np.abs(mean - reference)))

    out = dict(workload="motor map, GPyTorch ExactGP + GraphMaternKernel",
               n=int(graph.n_nodes), m=int(m), nu=nu, steps=steps, lr=lr, lr_final=lr_final,
               build_seconds=build_seconds, step_seconds=step_seconds,
               seconds_per_step=step_seconds / steps, peak_gb=peak,
               final_log_evidence=final, search_log_evidence=float(search_evidence),
               evidence_gap=float(search_evidence - final),
               gpytorch_at_search_optimum=at_search,
               search_seconds=search_seconds, predict_seconds=predict_seconds,
               prediction_max_abs_difference=gap,
               prediction_relative_difference=gap / float(np.std(y)),
               kappa2=kernel.kappa2.item(), search_kappa2=fit.kappa ** 2,
               outputscale=model.covar_module.outputscale.item(),
               noise=likelihood.noise.item(), search_noise=fit.noise * s * s,
               step_cpu_seconds=step_cpu, load_average=load,
               estimator=kernel.trace_diagnostics["estimator"],
               n_probes=kernel.trace_diagnostics["n_probes"],
               max_se_log_kappa2=float(errors[:, 0].max()),
               max_se_log_amplitude=float(errors[:, 1].max()),
               max_se_log_noise=float(errors[:, 2].max()),
               median_abs_logdet_gradient_log_kappa2=float(np.median(errors[:, 3])),
               max_relative_se_amplitude=float(errors[:, 4].max()),
               max_relative_se_noise=float(errors[:, 5].max()),
               evidence_trace=trace)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nu", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--lr-final", type=float, default=0.01)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    r = run(args.seed, args.nu, args.steps, args.lr, args.lr_final)
    print(f"motor map n={r['n']} m={r['m']} nu={r['nu']}: {r['steps']} Adam steps in "
          f"{r['step_seconds']:.1f} s ({r['seconds_per_step']:.2f} s a step, "
          f"{r['step_cpu_seconds']:.1f} s of CPU, load average up to "
          f"{r['load_average']:.1f}; model built in {r['build_seconds']:.2f} s), peak "
          f"{r['peak_gb']:.2f} GB")
    print(f"  gradient of log|K + s2 I| ({r['estimator']}, {r['n_probes']} probes): standard "
          f"errors per unit of log kappa2 / amplitude / noise at most "
          f"{r['max_se_log_kappa2']:.3f} / {r['max_se_log_amplitude']:.3f} / "
          f"{r['max_se_log_noise']:.3f} nats (median |value| in log kappa2 "
          f"{r['median_abs_logdet_gradient_log_kappa2']:.1f}; relative errors of the "
          f"amplitude and noise terms at most {r['max_relative_se_amplitude']:.1e} / "
          f"{r['max_relative_se_noise']:.1e})")
    print(f"  final exact log evidence {r['final_log_evidence']:.2f}; fit_gmrf's optimum "
          f"{r['search_log_evidence']:.2f} ({r['search_seconds']:.1f} s; GPyTorch at that "
          f"point: {r['gpytorch_at_search_optimum']:.2f}); gap "
          f"{r['evidence_gap']:.2f} nats")
    print(f"  predictions at {r['n'] - r['m']} voxels in {r['predict_seconds']:.2f} s: max "
          f"|GPyTorch - GMRFRegression| = {r['prediction_max_abs_difference']:.2e} "
          f"({r['prediction_relative_difference']:.1e} of sd(y))")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(r, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
