r"""GPyTorch likelihoods for the classifiers' observation models, for users' own scripts.

* Two classes: the probit ``P(y = 1 | f) = Φ(f)`` is GPyTorch's own
  :class:`gpytorch.likelihoods.BernoulliLikelihood` - what :class:`~flgp.FLGPClassifier`
  fits with EP.
* More classes: :class:`MultinomialProbitLikelihood`,
  ``P(y = c | f) = P(argmax_k(f_k + ε_k) = c)`` with ``ε ~ N(0, I)``, the model of
  ``FLGPClassifier``'s nested EP, for a batch of ``C`` latent GPs (e.g. an
  ``ApproximateGP`` with ``batch_shape=torch.Size([C])`` and a heat kernel with one
  diffusion time per class; ``experiments/classify_in_gpytorch.py``).
"""

from __future__ import annotations

import numpy as np
import torch
from gpytorch.likelihoods import Likelihood

__all__ = ["MultinomialProbitLikelihood", "multinomial_probit_probabilities"]


def multinomial_probit_probabilities(f: torch.Tensor, n_nodes: int = 32) -> torch.Tensor:
    r"""``P(argmax_k(f_k + ε_k) = c)`` for latent values ``f`` (``... x C``).

    With ``g = f + ε``, class ``c`` wins when ``g_c`` exceeds every other ``g_j``:

    .. math:: P(c) = \int N(u; 0, 1) \prod_{j \ne c} \Phi(u + f_c - f_j)\, du,

    computed by ``n_nodes``-point Gauss-Hermite quadrature in ``u`` (differentiable in
    ``f``) and renormalised to sum to one over the classes."""
    x, w = np.polynomial.hermite.hermgauss(int(n_nodes))
    u = torch.as_tensor(np.sqrt(2.0) * x, dtype=f.dtype, device=f.device)
    logw = torch.as_tensor(np.log(w / np.sqrt(np.pi)), dtype=f.dtype, device=f.device)
    diff = f.unsqueeze(-1) - f.unsqueeze(-2)                     # f_c - f_j, (..., C, C)
    z = diff.unsqueeze(-1) + u                                   # (..., C, C, Q)
    log_cdf = torch.special.log_ndtr(z)
    C = f.shape[-1]
    eye = torch.eye(C, dtype=torch.bool, device=f.device).unsqueeze(-1)
    log_cdf = log_cdf.masked_fill(eye, 0.0)                      # j == c contributes 1
    log_p = torch.logsumexp(log_cdf.sum(-2) + logw, dim=-1)       # (..., C)
    return torch.softmax(log_p, dim=-1)                          # renormalised


class MultinomialProbitLikelihood(Likelihood):
    r"""The multinomial probit ``P(y = c | f) = P(argmax_k(f_k + ε_k) = c)``,
    ``ε ~ N(0, I)``, for ``C`` latent functions.

    ``forward(function_samples)`` takes ``... x n x C`` latent values (a batch of ``C`` GPs
    through ``IndependentMultitaskVariationalStrategy``, say) and returns a
    ``torch.distributions.Categorical``; GPyTorch's variational ELBO and predictive
    averages then sample the latents as for its ``SoftmaxLikelihood`` (without mixing
    weights: one latent function per class).

    Parameters
    ----------
    num_classes : int
    n_nodes : int, default=32
        Gauss-Hermite nodes of :func:`multinomial_probit_probabilities`.
    """

    def __init__(self, num_classes: int, n_nodes: int = 32):
        super().__init__()
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be at least 2; got {num_classes!r}.")
        self.num_classes = int(num_classes)
        self.n_nodes = int(n_nodes)

    def forward(self, function_samples: torch.Tensor, *args, **kwargs):
        if function_samples.shape[-1] != self.num_classes:
            raise ValueError(f"function samples must end in num_classes = "
                             f"{self.num_classes} latent values; got shape "
                             f"{tuple(function_samples.shape)}.")
        probs = multinomial_probit_probabilities(function_samples, self.n_nodes)
        return torch.distributions.Categorical(probs=probs)
