"""Point clouds on manifolds, with labels or targets where the papers use them.

Every generator takes ``random_state`` and returns float64 arrays; none downloads anything.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int, check_nonnegative, check_positive, check_random_state

__all__ = ["make_concentric_circles", "make_spiral", "make_swiss_roll", "make_s_curve",
           "make_helix", "make_sphere", "make_torus", "make_stretched_torus",
           "make_klein_bottle", "make_circle_with_outliers"]


def make_concentric_circles(n_samples: int = 2400, *, n_circles: int = 6,
                            radii=None, random_state=None):
    r"""Concentric circles of He et al. (FLGP, Sec. 5.1).

    ``n_circles`` circles of radii 0.5, 0.6, ..., ``n_samples / n_circles`` points on each,
    angles uniform; classes alternate by circle (innermost is class 1).

    Parameters
    ----------
    n_samples : int, default=2400
        Points in all; the first ``n_samples % n_circles`` circles get one more.
    radii : array-like of float, optional
        The circles' radii (default ``0.5, 0.6, ...``, one per circle).

    Returns
    -------
    X : ndarray (n_samples, 2)
        Circle by circle, innermost first.
    y : ndarray (n_samples,) of int, in {0, 1}

    Examples
    --------
    >>> import numpy as np
    >>> from flgp.datasets import make_concentric_circles
    >>> X, y = make_concentric_circles(600, random_state=0)
    >>> X.shape, np.bincount(y)
    ((600, 2), array([300, 300]))
    >>> print(np.hypot(X[0, 0], X[0, 1]).round(2), y[0])      # the innermost circle
    0.5 1
    """
    n_circles = check_int(n_circles, "n_circles", low=1)
    n = check_int(n_samples, "n_samples", low=n_circles)
    rng = check_random_state(random_state)
    if radii is None:
        radii = 0.5 + 0.1 * np.arange(n_circles)
    radii = np.asarray(radii, dtype=np.float64)
    counts = np.full(radii.size, n // radii.size)
    counts[: n - counts.sum()] += 1
    X, y = [], []
    for k, (r, c) in enumerate(zip(radii, counts)):
        th = rng.uniform(0, 2 * np.pi, c)
        X.append(r * np.c_[np.cos(th), np.sin(th)])
        y.append(np.full(c, 1 - k % 2))
    return np.vstack(X), np.concatenate(y).astype(np.int64)


def make_spiral(n_samples: int = 4000, *, noise: float = 0.0, random_state=None):
    r"""The spiral of He et al. (Figure 1; the authors' regression scripts).

    ``θ`` evenly spaced on ``[0, 8π]``, ``x = (θ + 4)^{0.7} (cos θ, sin θ)``,
    ``f = 3 sin(θ/10) + 3 cos(θ/2) + 4 sin(4θ/5)``, ``y = f + noise · N(0, 1)``.

    Parameters
    ----------
    noise : float, default=0.0
        Standard deviation of the noise on the targets (0.5 in the paper).

    Returns
    -------
    X : ndarray (n_samples, 2)
        In order of ``θ``, along the spiral.
    y : ndarray (n_samples,)
        Noisy targets.
    f : ndarray (n_samples,)
        Noise-free function values.

    Examples
    --------
    >>> from flgp.datasets import make_spiral
    >>> X, y, f = make_spiral(1000, noise=0.5, random_state=0)
    >>> X.shape, y.shape, f.shape
    ((1000, 2), (1000,), (1000,))
    >>> print((y - f).std().round(2))
    0.49
    """
    n = check_int(n_samples, "n_samples", low=2)
    noise = check_nonnegative(noise, "noise")
    rng = check_random_state(random_state)
    th = np.linspace(0, 8 * np.pi, n)
    X = ((th + 4) ** 0.7)[:, None] * np.c_[np.cos(th), np.sin(th)]
    f = 3 * np.sin(th / 10) + 3 * np.cos(th / 2) + 4 * np.sin(4 * th / 5)
    return X, f + noise * rng.standard_normal(n), f


def make_swiss_roll(n_samples: int = 2000, *, noise: float = 0.0, random_state=None):
    r"""Swiss roll: ``t ~ U(1.5π, 4.5π)``, ``h ~ U(0, 21)``, ``x = (t cos t, h, t sin t)``.

    Returns ``X`` (n, 3) and the roll parameter ``t`` (n,).

    Examples
    --------
    >>> from flgp.datasets import make_swiss_roll
    >>> X, t = make_swiss_roll(1000, random_state=0)
    >>> X.shape, t.shape
    ((1000, 3), (1000,))
    """
    n = check_int(n_samples, "n_samples", low=1)
    noise = check_nonnegative(noise, "noise")
    rng = check_random_state(random_state)
    t = 1.5 * np.pi * (1 + 2 * rng.uniform(size=n))
    h = 21 * rng.uniform(size=n)
    X = np.c_[t * np.cos(t), h, t * np.sin(t)] + noise * rng.standard_normal((n, 3))
    return X, t


def make_s_curve(n_samples: int = 2000, *, noise: float = 0.0, random_state=None):
    r"""S curve: ``t ~ U(-3π/2, 3π/2)``, ``x = (sin t, 2 U(0,1), sign(t)(cos t - 1))``.

    Returns ``X`` (n, 3) and ``t`` (n,).
    """
    n = check_int(n_samples, "n_samples", low=1)
    noise = check_nonnegative(noise, "noise")
    rng = check_random_state(random_state)
    t = 3 * np.pi * (rng.uniform(size=n) - 0.5)
    X = np.c_[np.sin(t), 2 * rng.uniform(size=n), np.sign(t) * (np.cos(t) - 1)]
    return X + noise * rng.standard_normal((n, 3)), t


def make_helix(n_samples: int = 2000, *, n_turns: float = 3.0, radius: float = 1.0,
               pitch: float = 1.0, noise: float = 0.0, random_state=None):
    r"""Helix: ``t ~ U(0, 2π n_turns)``, ``x = (r cos t, r sin t, pitch · t / 2π)``.

    Returns ``X`` (n, 3) and ``t`` (n,).
    """
    n = check_int(n_samples, "n_samples", low=1)
    noise = check_nonnegative(noise, "noise")
    n_turns = check_positive(n_turns, "n_turns")
    radius = check_positive(radius, "radius")
    pitch = float(pitch)
    if not np.isfinite(pitch):
        raise ValueError(f"pitch must be finite (negative for a left-handed helix, 0 for a "
                         f"circle); got {pitch!r}.")
    rng = check_random_state(random_state)
    t = rng.uniform(0, 2 * np.pi * n_turns, n)
    X = np.c_[radius * np.cos(t), radius * np.sin(t), pitch * t / (2 * np.pi)]
    return X + noise * rng.standard_normal((n, 3)), t


def make_sphere(n_samples: int = 2000, *, dim: int = 2, random_state=None):
    """Uniform points on the unit sphere ``S^dim`` in ``R^{dim+1}``. Returns ``X``."""
    n = check_int(n_samples, "n_samples", low=1)
    dim = check_int(dim, "dim", low=1)
    rng = check_random_state(random_state)
    X = rng.standard_normal((n, dim + 1))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def make_torus(n_samples: int = 2000, *, major: float = 2.0, minor: float = 1.0,
               random_state=None):
    r"""Torus in ``R^3`` with angles uniform on ``[0, 2π)^2``:
    ``x = ((R + r cos φ) cos θ, (R + r cos φ) sin θ, r sin φ)``. Returns ``X`` and the
    angles ``(θ, φ)`` as an (n, 2) array."""
    n = check_int(n_samples, "n_samples", low=1)
    major = check_positive(major, "major")
    minor = check_positive(minor, "minor")
    if not minor < major:
        raise ValueError(f"minor={minor} must be smaller than major={major}, or the tube "
                         f"crosses the axis (a self-intersecting surface).")
    rng = check_random_state(random_state)
    th, ph = rng.uniform(0, 2 * np.pi, (2, n))
    X = np.c_[(major + minor * np.cos(ph)) * np.cos(th), (major + minor * np.cos(ph)) * np.sin(th),
              minor * np.sin(ph)]
    return X, np.c_[th, ph]


def make_stretched_torus(n_samples: int = 2000, *, stretch: float = 3.5, random_state=None):
    r"""Flat torus ``S^1 × r S^1`` in ``R^4`` (Gilbert & O'Neill, Fig. 2a):
    ``x = (cos θ, sin θ, r cos φ, r sin φ)``, angles uniform. Returns ``X`` and the angles."""
    n = check_int(n_samples, "n_samples", low=1)
    stretch = check_positive(stretch, "stretch")
    rng = check_random_state(random_state)
    th, ph = rng.uniform(0, 2 * np.pi, (2, n))
    return np.c_[np.cos(th), np.sin(th), stretch * np.cos(ph), stretch * np.sin(ph)], np.c_[th, ph]


def make_klein_bottle(n_samples: int = 2000, *, a: float = 10.0, b: float = 5.0,
                      random_state=None):
    r"""Klein bottle in ``R^4`` as Gilbert & O'Neill parameterise it (Sec. 5.1, Fig. 2b):

    ``(u, v) -> ((a + b cos v) cos u, (a + b cos v) sin u, b sin v cos(u/2),
    b sin v sin(u/2))``, ``(u, v)`` uniform on ``[0, 2π)^2`` (their sampling, not the
    surface's uniform measure); defaults are theirs. Returns ``X`` (n, 4) and ``(u, v)``."""
    n = check_int(n_samples, "n_samples", low=1)
    a = check_positive(a, "a")
    b = check_positive(b, "b")
    if b >= a:
        raise ValueError(f"b={b} must be smaller than a={a}, or the tube crosses the axis.")
    rng = check_random_state(random_state)
    u, v = rng.uniform(0, 2 * np.pi, (2, n))
    w = a + b * np.cos(v)
    X = np.c_[w * np.cos(u), w * np.sin(u), b * np.sin(v) * np.cos(u / 2),
              b * np.sin(v) * np.sin(u / 2)]
    return X, np.c_[u, v]


def make_circle_with_outliers(n_samples: int = 198, *, outliers=((0.0, 3.0), (3.0, 0.0)),
                              random_state=None):
    """Uniform points on the unit circle plus fixed outliers (Gilbert & O'Neill, Sec. 5.2:
    198 points and the outliers (0, 3) and (3, 0), the defaults).

    Returns ``X`` (n + n_outliers, 2) and a boolean mask of the outliers."""
    n = check_int(n_samples, "n_samples", low=1)
    rng = check_random_state(random_state)
    th = rng.uniform(0, 2 * np.pi, n)
    out = np.asarray(outliers, dtype=np.float64).reshape(-1, 2)
    X = np.r_[np.c_[np.cos(th), np.sin(th)], out]
    return X, np.r_[np.zeros(n, dtype=bool), np.ones(out.shape[0], dtype=bool)]
