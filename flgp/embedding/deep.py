"""Deep Diffusion Maps (García-Heredia, Alaíz and Fernández, papers/004;
docs/deep_diffusion_maps.md).

A network ``f_θ : R^D -> R^d`` is trained on cost (38), whose minimiser is the diffusion
map (eq. 19) of the training sample up to an orthogonal transform (Theorem 4.1). With the
Gaussian kernel (5) ``exp(-|x_i - x_j|^2 / (2 σ^2))``, ``W = D_K^{-α} K D_K^{-α}`` (6-8),
``π_i ∝ d_i(W)`` (10) and ``A = D_W^{-1/2} W D_W^{-1/2}`` (12), the cost is::

    J(θ) = Σ_i Σ_j ( √(π_i π_j) f_iᵀ f_j − [ (A^{2t})_ij − √(π_i π_j) ] )^2 .

The target is formed as ``T = (A − √π √πᵀ)^{2t} = A^{2t} − √π √πᵀ``, which avoids
cancellation when ``λ_2^{2t}`` is small.
"""

from __future__ import annotations

import copy
import numbers
import time
import warnings

import numpy as np
from scipy.spatial.distance import pdist
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_cloud, check_int, check_points, check_random_state
from ..graph.affinity import affinity, build_piecewise_affinity, check_dense_affinity_size
from ..graph.pieces import kernel_pieces
from ._base import DISCONNECTED, POSITIVE, _user_stacklevel

__all__ = ["DeepDiffusionMap", "deep_diffusion_cost"]

# above this many pairs the distance quantile comes from a random sample of pairs
_MAX_EXACT_PAIRS = 20_000_000
_N_SAMPLED_PAIRS = 5_000_000


# -- diffusion quantities of the training sample (float64) ---------------------------

def _distance_quantile(X: np.ndarray, quantile: float, rng: np.random.Generator) -> float:
    """σ: the ``quantile`` of the pairwise distances of ``X`` (Sec. 5.1.3), from a sample of
    pairs above ``_MAX_EXACT_PAIRS``."""
    n = X.shape[0]
    if n * (n - 1) // 2 <= _MAX_EXACT_PAIRS:
        d = pdist(X)
    else:
        i = rng.integers(0, n, _N_SAMPLED_PAIRS)
        j = rng.integers(0, n - 1, _N_SAMPLED_PAIRS)
        j = j + (j >= i)                       # uniform over j != i
        d = np.sqrt(np.sum((X[i] - X[j]) ** 2, axis=1))
    return float(np.quantile(d, quantile))


def diffusion_quantities(X: np.ndarray, sigma: float, alpha: float, t: int, pieces=None):
    """Stationary distribution π (eq. 10) and cost (38)'s target ``T = A^{2t} − √π√πᵀ``.

    ``pieces``: the kernel graph's pieces, if already found. When the graph falls apart,
    ``A`` is block-diagonal, each piece normalised on its own, and ``T`` keeps every
    eigenvalue 1 but that of ``√π``.

    Returns
    -------
    pi : ndarray of shape (n_samples,)
    T : ndarray of shape (n_samples, n_samples), symmetric
    n_components_graph : int
        Number of connected pieces of the kernel graph (1 when connected).
    """
    epsilon = 2.0 * sigma ** 2
    if pieces is None:
        pieces = kernel_pieces(X, epsilon, backend="torch")
    if pieces.n_pieces == 1:
        # eqs. (5)-(12): the shared dense affinity with epsilon = 2 sigma^2
        check_dense_affinity_size(X.shape[0])
        aff = affinity(X, epsilon=epsilon, normalization="symmetric", alpha=alpha)
        A = aff.matrix                                           # eq. (12)
    else:
        aff = build_piecewise_affinity(X, pieces, epsilon=epsilon, normalization="symmetric",
                                       alpha=alpha)
        A = np.zeros((X.shape[0], X.shape[0]))
        for idx, part in zip(aff.index, aff.parts):
            A[np.ix_(idx, idx)] = part.matrix
    pi = aff.degrees / aff.degrees.sum()                         # eq. (10)
    u = np.sqrt(pi)
    B = A - np.outer(u, u)                                       # deflate λ_1 = 1
    B = 0.5 * (B + B.T)
    T = np.linalg.matrix_power(B, 2 * t)                         # = A^{2t} − √π√πᵀ
    T = 0.5 * (T + T.T)
    return pi, T, pieces.n_pieces


def deep_diffusion_cost(embedding, pi, T):
    r"""Cost (38) for outputs ``f_i`` (rows of ``embedding``), ``pi`` and ``T`` as from
    :func:`diffusion_quantities`.

    .. math:: J = \sum_{i,j} \big(\sqrt{\pi_i\pi_j}\, f_i^\top f_j
              - [(A^{2t})_{ij} - \sqrt{\pi_i\pi_j}]\big)^2
    """
    F = np.asarray(embedding, dtype=np.float64)
    s = np.sqrt(np.asarray(pi, dtype=np.float64))
    G = (s[:, None] * F) @ (s[:, None] * F).T
    return float(np.sum((G - np.asarray(T, dtype=np.float64)) ** 2))


def _batch_loss(F, s, Tn):
    """Mini-batch cost (38) (torch): mean of ``(s_i s_j f_iᵀ f_j − Tn_ij)^2``, ``s = √(n π)``,
    ``Tn = n T`` (terms O(1))."""
    G = (s[:, None] * F) @ (s[:, None] * F).T
    return ((G - Tn) ** 2).mean()


# -- networks ---------------------------------------------------------------------------

def _dense_network(n_features: int, n_components: int, hidden_layer_sizes):
    """Dense network of Sec. 5.1.2: ReLU layers of ``hidden_layer_sizes``, linear output."""
    import torch.nn as nn

    layers, width = [], n_features
    for h in hidden_layer_sizes:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, n_components))
    return nn.Sequential(*layers)


def conv_network(n_components: int, image_shape=(28, 28), *, dropout: float = 0.0):
    """Convolutional network of Sec. 5.1.2 (MNIST), for ``DeepDiffusionMap(network=...)``:
    three blocks of two 3×3 ReLU convolutions (16 / 32 / 64 filters), 2×2 max pooling and
    dropout, a dense ReLU layer of ``16 n_components`` units, a linear output. Input: flat rows
    of ``prod(image_shape)`` pixels.
    """
    import torch.nn as nn

    h, w = (int(v) for v in image_shape)
    layers, c_in = [nn.Unflatten(1, (1, h, w))], 1
    for c in (16, 32, 64):
        layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(),
                   nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                   nn.MaxPool2d(2), nn.Dropout(dropout)]
        c_in = c
        h, w = h // 2, w // 2
    layers += [nn.Flatten(), nn.Linear(c_in * h * w, 16 * n_components), nn.ReLU(),
               nn.Linear(16 * n_components, n_components)]
    return nn.Sequential(*layers)


# -- estimator --------------------------------------------------------------------------

class DeepDiffusionMap(TransformerMixin, BaseEstimator):
    r"""A network trained on cost (38) to output the diffusion map
    ``Ψ^{(t)}(x_k) = (λ_l^t φ_{l,k} / √π_k)_{l=2..d+1}`` (eq. 19) up to an orthogonal
    transform, inside and outside the training sample (eq. 39; module notes). By default a
    dense ReLU network trained with Adam and early stopping on 10 % held-out points.

    Parameters
    ----------
    n_components : int, default=2
        Embedding dimension ``d``.
    quantile : float, default=5e-3
        σ of the kernel is this quantile of the pairwise distances (Sec. 5.1.3).
    sigma : float or None, default=None
        Kernel width σ; overrides ``quantile``.
    alpha : float, default=1.0
        Density normalisation exponent α of eq. (6) (1 removes the sampling density).
    t : int, default=1
        Diffusion steps.
    network : torch.nn.Module, callable or None, default=None
        ``None``: the dense network of Sec. 5.1.2 with ``hidden_layer_sizes``. A module:
        trained on a deep copy. A callable: ``network(n_features, n_components) -> Module``,
        built under ``random_state``. Maps ``(batch, n_features)`` to
        ``(batch, n_components)`` in its parameters' dtype (images: :func:`conv_network`).
    hidden_layer_sizes : tuple of int, default=(128, 64, 32)
        ReLU layer widths of the default network.
    standardize : bool, default=True
        Feed the network z-scored features (the kernel uses the raw ``X``).
    batch_size, learning_rate, max_epochs : int, float, int, default=512, 1e-2, 5000
        Adam mini-batch training (Sec. 5.1.3); a batch above the training split is full batch.
    patience : int or None, default=500
        Stop after this many epochs without a relative ``tol`` improvement of the validation
        cost, keeping the best weights. ``None``: train ``max_epochs``.
    tol : float, default=1e-4
        Relative improvement that counts as progress.
    validation_fraction : float, default=0.1
        Points held out for early stopping (their block of ``A^{2t}``, built on all points).
        0: no early stopping, the last weights are kept.
    disconnected : {"warn", "raise"}, default="warn"
        When the kernel graph falls apart (:func:`flgp.graph.kernel_pieces`). "warn": a
        ``UserWarning`` and training on the pieces' block-diagonal operator, whose first
        ``n_pieces - 1`` coordinates tell pieces apart. "raise": a ``ValueError``.
    device : str or None, default=None
        Torch device (``None``: CPU).
    progress : bool, default=True
        tqdm bar over epochs (silent when not on a terminal).
    random_state : int, numpy Generator or None, default=None
        Seeds the split, initialisation and batch order (identical fits on CPU).

    Attributes
    ----------
    network_ : torch.nn.Module
        The trained network (eval mode).
    sigma_ : float
    stationary_distribution_ : ndarray of shape (n_samples,)
        π (eq. 10).
    embedding_ : ndarray of shape (n_samples, n_components)
        ``f_θ(X)`` of the training points.
    history_ : dict
        Per-epoch ``"loss"`` and ``"val_loss"`` (empty without validation), scaled as ``J``.
    n_epochs_, best_epoch_ : int
        Epochs run; the (1-based) epoch whose weights were kept.
    training_time_ : float
        Seconds in the training loop.
    n_features_in_ : int

    Notes
    -----
    O(n^2) memory and time per fit for ``A^{2t}``; each epoch costs ``O(n b)`` plus the
    network. Compare with the diffusion map by distances (MRE, eq. 40) or after Procrustes.

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.embedding.deep import DeepDiffusionMap
    >>> th = np.random.default_rng(0).uniform(0, 2 * np.pi, 200)
    >>> X = np.c_[np.cos(th), np.sin(th), 0.1 * th]
    >>> ddm = DeepDiffusionMap(2, quantile=0.05, t=1, max_epochs=50, progress=False,
    ...                        random_state=0).fit(X)
    >>> ddm.transform(X[:5]).shape
    (5, 2)
    """

    def __init__(self, n_components=2, *, quantile=5e-3, sigma=None, alpha=1.0, t=1,
                 network=None, hidden_layer_sizes=(128, 64, 32), standardize=True,
                 batch_size=512, learning_rate=1e-2, max_epochs=5000, patience=500,
                 tol=1e-4, validation_fraction=0.1, disconnected="warn", device=None,
                 progress=True, random_state=None):
        self.n_components = n_components
        self.quantile = quantile
        self.sigma = sigma
        self.alpha = alpha
        self.t = t
        self.network = network
        self.hidden_layer_sizes = hidden_layer_sizes
        self.standardize = standardize
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_epochs = max_epochs
        self.patience = patience
        self.tol = tol
        self.validation_fraction = validation_fraction
        self.disconnected = disconnected
        self.device = device
        self.progress = progress
        self.random_state = random_state

    # -- validation ---------------------------------------------------------------------

    _parameter_constraints: dict = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "quantile": [Interval(numbers.Real, 0, 1, closed="right")],
        "sigma": [POSITIVE, None],
        "alpha": [Interval(numbers.Real, None, None, closed="neither")],
        "t": [Interval(numbers.Integral, 1, None, closed="left")],
        "network": [None, callable],
        "hidden_layer_sizes": ["array-like", Interval(numbers.Integral, 1, None, closed="left")],
        "standardize": ["boolean"],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [POSITIVE],
        "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
        "patience": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "tol": [Interval(numbers.Real, 0, 1, closed="left")],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="left")],
        "disconnected": [StrOptions(set(DISCONNECTED))],
        "device": "no_validation",
        "progress": ["boolean"],
        "random_state": ["random_state", np.random.Generator],
    }

    def _check_params(self, n: int):
        """Checks the constraints cannot express; returns ``n_components``."""
        for name in ("sigma", "alpha", "learning_rate"):
            value = getattr(self, name)
            if value is not None and not np.isfinite(value):
                raise ValueError(f"{name} must be finite; got {value!r}.")
        d = check_int(self.n_components, "n_components", low=1, high=n - 1,
                      high_name="n_samples - 1",
                      fix="The diffusion map of n points has at most n - 1 non-trivial "
                          "coordinates; lower n_components or pass more points.")
        if self.network is None:
            sizes = self.hidden_layer_sizes
            if isinstance(sizes, numbers.Integral):
                sizes = (sizes,)
            try:
                sizes = tuple(sizes)
            except TypeError:
                raise TypeError(f"hidden_layer_sizes must be a tuple of positive integers; "
                                f"got {self.hidden_layer_sizes!r}.") from None
            for h in sizes:
                check_int(h, "each entry of hidden_layer_sizes", low=1)
        return d

    def _make_network(self, n_features: int, d: int):
        import torch.nn as nn

        if self.network is None:
            sizes = self.hidden_layer_sizes
            sizes = (sizes,) if isinstance(sizes, numbers.Integral) else tuple(sizes)
            return _dense_network(n_features, d, sizes)
        if isinstance(self.network, nn.Module):
            return copy.deepcopy(self.network)
        if callable(self.network):
            net = self.network(n_features, d)
            if not isinstance(net, nn.Module):
                raise TypeError(f"network(n_features, n_components) must return a "
                                f"torch.nn.Module; got {type(net).__name__}.")
            return net
        raise TypeError(f"network must be None, a torch.nn.Module or a callable "
                        f"(n_features, n_components) -> Module; got {self.network!r}.")

    # -- fit ----------------------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Train the network on cost (38) of ``X``; returns ``self``."""
        import torch
        from tqdm.auto import tqdm

        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2,
                          ensure_all_finite=False)
        X = check_cloud(X, min_samples=3)        # once: NaN, scale, duplicates
        n, p = X.shape
        d = self._check_params(n)
        t = int(self.t)
        rng = check_random_state(self.random_state)

        sigma = (float(self.sigma) if self.sigma is not None
                 else _distance_quantile(X, float(self.quantile), rng))
        if not sigma > 0.0:
            raise ValueError(f"sigma is 0: the {self.quantile} quantile of the pairwise "
                             f"distances is zero because of duplicate points. Remove "
                             f"duplicates, raise quantile or pass sigma.")
        pieces = kernel_pieces(X, 2.0 * sigma ** 2, backend="torch")
        if pieces.n_pieces > 1:
            if self.disconnected == "raise":
                raise ValueError(
                    f"the kernel graph (sigma={sigma:.4g}) falls apart into "
                    f"{pieces.describe()} (kernel entries between them underflow, or nearly "
                    f"so); its diffusion map, the minimiser of cost (38), then spends "
                    f"coordinates on telling the pieces apart and is not unique where "
                    f"it keeps fewer than n_pieces - 1 of them. Raise quantile or sigma, or "
                    f"embed each piece separately (disconnected='warn' trains on the "
                    f"pieces' block-diagonal operator).")
            warnings.warn(
                f"the kernel graph (sigma={sigma:.4g}) falls apart into "
                f"{pieces.describe()}: the network is trained on the block-diagonal "
                f"operator of the pieces, whose diffusion map spends its first "
                f"{min(d, pieces.n_pieces - 1)} coordinate(s) (eigenvalue 1) on telling "
                f"the pieces apart. Raise quantile or sigma to connect them, or pass "
                f"disconnected='raise' to make this an error.", UserWarning,
                stacklevel=_user_stacklevel())
        pi, T, _ = diffusion_quantities(X, sigma, float(self.alpha), t, pieces=pieces)
        self.n_pieces_ = pieces.n_pieces
        self.piece_labels_ = pieces.labels

        n_val = int(round(float(self.validation_fraction) * n))
        if float(self.validation_fraction) > 0 and n_val < 2:
            n_val = 2 if n >= 4 else 0
        perm = rng.permutation(n)
        val_idx, train_idx = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        seed = int(rng.integers(0, 2**31 - 1))

        if self.standardize:
            mean = X[train_idx].mean(axis=0)
            scale = X[train_idx].std(axis=0)
            scale[scale <= 1e-12 * max(1.0, float(np.abs(X).max()))] = 1.0
        else:
            mean, scale = np.zeros(p), np.ones(p)

        device = torch.device("cpu" if self.device is None else self.device)
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = self._make_network(p, d).to(device)
            params = [q for q in net.parameters() if q.requires_grad]
            if not params:
                raise ValueError("network has no trainable parameters.")
            dtype = params[0].dtype
            if not dtype.is_floating_point:
                raise TypeError(f"network parameters must be floating point; got {dtype}.")
            Xt = torch.as_tensor((X - mean) / scale, dtype=dtype, device=device)
            s = torch.as_tensor(np.sqrt(n * pi), dtype=dtype, device=device)
            Tn = torch.as_tensor(n * T, dtype=dtype, device=device)
            tr = torch.as_tensor(train_idx, device=device)
            va = torch.as_tensor(val_idx, device=device)
            T_val = Tn.index_select(0, va).index_select(1, va)
            gen = torch.Generator().manual_seed(seed)

            with torch.no_grad():
                out = net.eval()(Xt[:2])
            if out.ndim != 2 or out.shape[1] != d:
                raise ValueError(f"network output has shape {tuple(out.shape)} for 2 inputs; "
                                 f"expected (2, {d}) = (batch, n_components).")

            opt = torch.optim.Adam(params, lr=float(self.learning_rate))
            bs = int(self.batch_size)
            history = {"loss": [], "val_loss": []}
            best, best_epoch, best_state, wait = np.inf, 0, None, 0
            bar = tqdm(range(int(self.max_epochs)), disable=None if self.progress else True,
                       desc="DeepDiffusionMap", unit="epoch", leave=False)
            epoch = 0
            for epoch in bar:
                net.train()
                order = tr[torch.randperm(len(tr), generator=gen).to(device)]
                total, count = 0.0, 0
                for b in order.split(bs):
                    loss = _batch_loss(net(Xt[b]), s[b],
                                       Tn.index_select(0, b).index_select(1, b))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(b)
                    count += len(b)
                train_loss = total / count
                if not np.isfinite(train_loss):
                    raise ValueError(f"Training diverged: the cost became {train_loss} at "
                                     f"epoch {epoch + 1}. Lower learning_rate or check X.")
                history["loss"].append(train_loss)
                monitor = train_loss
                if n_val:
                    net.eval()
                    with torch.no_grad():
                        monitor = float(_batch_loss(net(Xt[va]), s[va], T_val))
                    history["val_loss"].append(monitor)
                if monitor < best * (1.0 - float(self.tol)) or best_state is None:
                    best, best_epoch, wait = monitor, epoch + 1, 0
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                else:
                    wait += 1
                if epoch % 25 == 0:
                    bar.set_postfix(loss=f"{train_loss:.3g}", best=f"{best:.3g}")
                if n_val and self.patience is not None and wait >= int(self.patience):
                    break
            bar.close()
            if n_val:
                net.load_state_dict(best_state)
            else:
                best_epoch = epoch + 1
            net.eval()

        self.training_time_ = time.perf_counter() - t0
        self.network_ = net
        self.sigma_ = sigma
        self.stationary_distribution_ = pi
        self.history_ = history
        self.n_epochs_ = epoch + 1
        self.best_epoch_ = best_epoch
        self._input_mean = mean
        self._input_scale = scale
        self._dtype = dtype
        self._device = device
        self.embedding_ = self._forward(X)
        return self

    # -- transform ----------------------------------------------------------------------

    def _forward(self, X: np.ndarray, chunk: int = 8192) -> np.ndarray:
        import torch

        Z = (X - self._input_mean) / self._input_scale
        out = []
        with torch.no_grad():
            for i in range(0, Z.shape[0], chunk):
                z = torch.as_tensor(Z[i:i + chunk], dtype=self._dtype, device=self._device)
                out.append(self.network_(z).double().cpu().numpy())
        Y = np.concatenate(out, axis=0)
        if not np.isfinite(Y).all():
            raise ValueError("The network produced NaN or infinite outputs; the input is "
                             "probably far outside the training range.")
        return Y

    def transform(self, X):
        """Embed points with the trained network, ``f_θ(x) ≈ Ψ^{(t)}(x)`` (eq. 39)."""
        check_is_fitted(self, "network_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        X = check_points(X, min_samples=1)
        return self._forward(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = self.device not in (None, "cpu")
        return tags
