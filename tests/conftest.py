import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture
def rng():
    """One seeded generator per test."""
    torch.manual_seed(0)
    return np.random.default_rng(0)


def noisy_circle(n, rng, noise=0.01):
    th = rng.uniform(0, 2 * np.pi, n)
    return np.c_[np.cos(th), np.sin(th)] + noise * rng.standard_normal((n, 2))


def assert_allclose_up_to_sign(A, B, atol):
    """Columns of A equal those of B up to a sign each."""
    signs = np.sign(np.sum(A * B, axis=0))
    signs[signs == 0] = 1
    np.testing.assert_allclose(A * signs, B, atol=atol)
