"""GPyTorch adapter: a spectral prior of a point cloud (heat, graph Matérn, pseudo-inverse)
as a ``gpytorch.kernels.Kernel``."""

from __future__ import annotations

import numpy as np
import torch
from gpytorch.constraints import Positive
from gpytorch.kernels import Kernel
from linear_operator.operators import LowRankRootLinearOperator, MatmulLinearOperator

from ..spectral import Eigenpairs
from ..spectral.families import (FAMILIES, default_diffusion_time, family_log_weights,
                                 heat_features)

__all__ = ["SpectralKernel", "output_dtype"]


def output_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype rule of flgp's kernels: a floating input keeps its dtype; integer or
    boolean coordinates are promoted to torch's default floating dtype (as ``x * 1.0``
    would be), so that the kernel's values are never truncated to integers."""
    return x.dtype if (x.is_floating_point() or x.is_complex()) else torch.get_default_dtype()


class SpectralKernel(Kernel):
    r"""A spectral kernel of a point cloud from precomputed
    :class:`~flgp.spectral.Eigenpairs`: the prior of a spectral family.

    .. math:: k(x, x') = c \sum_{l \le M} w(\lambda_l)\, v_l(x)\, v_l(x')

    with the family's weights ``w`` (:func:`flgp.spectral.families.family_log_weights`):
    ``"heat"`` ``e^{-tλ}``, ``"matern"`` ``(1 + tλ/ν)^{-ν}``, ``"green"`` ``λ_2/λ`` (no
    time scale: no hyperparameter). Inputs are coordinates (``... x N x p``). A point of
    the cloud maps to its own eigenvector row; any other point goes through the
    out-of-sample map, so a model trained with this kernel predicts anywhere. The
    covariance is returned as a low-rank linear operator with root
    ``φ(x) = sqrt(c) v(x) diag(√w)`` (rank ``M``), so GPyTorch's Woodbury paths solve with
    it in ``O(N M^2 + M^3)``.

    Parameters
    ----------
    eigenpairs : Eigenpairs
        From :func:`flgp.spectral.compute_eigenpairs` (or the FLGP/GLGP/Nyström solvers).
    family : {"heat", "matern", "green"}, default="heat"
    nu : float, default=2.0
        ``ν`` of the Matérn family.
    diffusion_time_prior : gpytorch.priors.Prior, optional
    diffusion_time_constraint : gpytorch.constraints.Interval, default=Positive(exp/log)
        The default optimises ``log t`` (``t = exp(raw)``): sensible time scales span
        orders of magnitude, and a softplus transform would make Adam crawl at large ``t``.
    diffusion_time : float, optional
        Initial ``t``; default :func:`flgp.spectral.default_diffusion_time`.

    Notes
    -----
    There is no outputscale: wrap in ``gpytorch.kernels.ScaleKernel`` for one.
    Eigenvector values of inputs are cached for the last four distinct inputs, matched by
    value (a training loop evaluates the same inputs every iteration; comparing values
    costs ``O(N p)`` against the ``O(N s p)`` of the out-of-sample map). Integer inputs
    are promoted to torch's default float dtype (:func:`output_dtype`).
    """

    has_lengthscale = False

    def __init__(self, eigenpairs: Eigenpairs, family: str = "heat", nu: float = 2.0,
                 diffusion_time_prior=None, diffusion_time_constraint=None,
                 diffusion_time: float | None = None, **kwargs):
        super().__init__(**kwargs)
        if family not in FAMILIES:
            raise ValueError(f"unknown spectral family {family!r}; choose one of "
                             f"{list(FAMILIES)}.")
        if not (np.isfinite(nu) and nu > 0):
            raise ValueError(f"nu must be a finite positive number; got {nu!r}.")
        self.family = family
        self.nu = float(nu)
        self.eigenpairs = eigenpairs
        self.kernel_scale = float(eigenpairs.kernel_scale)
        self.register_buffer("eigenvalues", torch.as_tensor(eigenpairs.eigenvalues,
                                                            dtype=torch.float64).clone())
        self.register_buffer("eigenvectors", torch.as_tensor(eigenpairs.eigenvectors,
                                                             dtype=torch.float64).clone())
        if family == "green":                # no time scale: nothing to learn
            if diffusion_time is not None or diffusion_time_prior is not None:
                raise ValueError("the 'green' family (the Laplacian's pseudo-inverse) has no "
                                 "diffusion time; leave diffusion_time and its prior unset.")
        else:
            self.register_parameter("raw_diffusion_time",
                                    torch.nn.Parameter(torch.zeros(*self.batch_shape, 1, 1)))
            if diffusion_time_constraint is None:
                # optimise log t: t spans orders of magnitude (1/λ_M .. 1/λ_2)
                diffusion_time_constraint = Positive(transform=torch.exp,
                                                     inv_transform=torch.log)
            self.register_constraint("raw_diffusion_time", diffusion_time_constraint)
            if diffusion_time_prior is not None:
                self.register_prior("diffusion_time_prior", diffusion_time_prior,
                                    lambda m: m.diffusion_time,
                                    lambda m, v: m._set_diffusion_time(v))
            if diffusion_time is None:
                diffusion_time = default_diffusion_time(eigenpairs.eigenvalues)
            self.diffusion_time = diffusion_time
        self._cache: list = []

    @property
    def diffusion_time(self) -> torch.Tensor:
        """The diffusion time ``t``, shape ``*batch_shape x 1 x 1``; settable (a float or a
        tensor), stored as ``raw_diffusion_time`` through its constraint."""
        return self.raw_diffusion_time_constraint.transform(self.raw_diffusion_time)

    @diffusion_time.setter
    def diffusion_time(self, value) -> None:
        self._set_diffusion_time(value)

    def _set_diffusion_time(self, value) -> None:
        # through float64 whatever the kernel's dtype (a Python float would pass through
        # float32 and lose digits, 1e300 become inf); the raw value is cast only after the
        # inverse transform (log 1e300 fits any float)
        raw = self.raw_diffusion_time
        value = torch.as_tensor(value, dtype=torch.float64, device=raw.device)
        if not bool(torch.isfinite(value).all()) or bool((value <= 0).any()):
            raise ValueError(f"diffusion_time must be finite and positive; got "
                             f"{value.detach().cpu().numpy()!r}.")
        self.initialize(raw_diffusion_time=self.raw_diffusion_time_constraint.inverse_transform(
            value).to(raw))

    # -- eigenvector values at coordinates ---------------------------------------------
    def eigenvector_values(self, x: torch.Tensor) -> torch.Tensor:
        """``v(x)`` for inputs ``... x N x p``, shape ``... x N x M``, in the kernel's
        dtype for ``x`` (:func:`output_dtype`)."""
        # keyed on the values themselves: a tensor's address is reused once it is freed, and
        # writes through a numpy view do not bump its version counter
        xd = x.detach()
        if xd.dim() < 2:
            raise ValueError(f"inputs must be ... x n x p tensors (one row a point, p "
                             f"features); got shape {tuple(xd.shape)}: for n points of one "
                             f"feature use x[:, None].")
        for cached_x, v in self._cache:
            if (cached_x.shape == xd.shape and cached_x.dtype == xd.dtype
                    and cached_x.device == xd.device and torch.equal(cached_x, xd)):
                return v
        flat = xd.reshape(-1, x.shape[-1]).cpu().numpy().astype(np.float64)
        vals = self.eigenpairs.extend(flat)
        out = torch.as_tensor(vals, dtype=output_dtype(x), device=x.device)
        out = out.reshape(*x.shape[:-1], vals.shape[-1])
        self._cache = [(xd.clone(), out)] + self._cache[:3]
        return out

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Root ``φ(x)`` of the covariance, ``... x N x M``."""
        v = self.eigenvector_values(x)
        lam = self.eigenvalues.to(v)
        if self.family == "heat":
            t = self.diffusion_time.to(v)  # (*batch, 1, 1)
            return heat_features(v, lam, t.squeeze(-1), self.kernel_scale)
        t = 1.0 if self.family == "green" else self.diffusion_time.to(v).squeeze(-1)
        half = (0.5 * family_log_weights(lam, t, self.family, self.nu)).exp()
        phi = v * (float(self.kernel_scale) ** 0.5) * half.unsqueeze(-2)
        if self.batch_shape and phi.dim() < len(self.batch_shape) + 2:
            # no batched hyperparameter carried the batch (the pseudo-inverse has none):
            # every member shares the features of an unbatched input
            phi = phi.expand(*self.batch_shape, *phi.shape[-2:])
        return phi

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, **params):
        """Covariance ``... x N x M`` of inputs ``x1`` (``... x N x p``) and ``x2``
        (``... x M x p``), or its diagonal ``... x N`` with ``diag=True``: a low-rank linear
        operator, ``φ(x1) φ(x1)ᵀ`` when ``x1`` and ``x2`` are the same points."""
        phi1 = self.features(x1)
        same = x1.shape == x2.shape and (x1 is x2 or torch.equal(x1, x2))
        if diag:
            if same:
                return (phi1 * phi1).sum(-1)
            return (phi1 * self.features(x2)).sum(-1)
        if same:
            return LowRankRootLinearOperator(phi1)
        return MatmulLinearOperator(phi1, self.features(x2).transpose(-1, -2))

    # -- batches: the eigenpairs are shared by every batch member, never indexed ----------
    _SHARED_BUFFERS = ("eigenvalues", "eigenvectors")
    _SHARED_ATTRIBUTES = ("eigenpairs", "_cache")

    def _without_shared(self, make):
        """Run ``make()`` (GPyTorch's ``__getitem__`` / ``expand_batch``, which deep-copy
        the kernel and index or expand every parameter *and buffer* as if it had batch
        dimensions) with the eigenpairs detached, then give the new kernel the same,
        uncopied eigenpairs: only the diffusion time is batched."""
        buffers = {k: self._buffers.pop(k) for k in self._SHARED_BUFFERS}
        attributes = {k: self.__dict__.pop(k) for k in self._SHARED_ATTRIBUTES}
        try:
            new = make()
        finally:
            self._buffers.update(buffers)
            self.__dict__.update(attributes)
        for k, v in buffers.items():
            new.register_buffer(k, v)
        new.__dict__["eigenpairs"] = attributes["eigenpairs"]
        new.__dict__["_cache"] = []
        return new

    def __getitem__(self, index):
        if len(self.batch_shape) == 0:
            return self
        return self._without_shared(lambda: super(SpectralKernel, self).__getitem__(index))

    def expand_batch(self, *sizes):
        return self._without_shared(lambda: super(SpectralKernel, self).expand_batch(*sizes))

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state["_cache"] = []
        return state
