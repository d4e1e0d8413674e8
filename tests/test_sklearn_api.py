"""scikit-learn's estimator checks: the estimators and all four transformers at their
default parameters, plus the parameter sets that exercise the other code paths."""

import pytest
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from flgp import FLGPClassifier, FLGPRegressor
from flgp.embedding import (CompressedDiffusionMap, DeepDiffusionMap, DiffusionMap,
                            GPEmbedding)

ESTIMATORS = [FLGPClassifier(), FLGPRegressor()]

TRANSFORMERS = [
    # defaults: the checks' clustered data falls apart into pieces at the default scales,
    # which the transformers embed (with a warning) instead of refusing
    DiffusionMap(),
    GPEmbedding(),
    CompressedDiffusionMap(),
    DeepDiffusionMap(),
    # the FLGP eigenpairs (method="auto" picks them above 1000 points)
    DiffusionMap(method="flgp", random_state=0),
    GPEmbedding(method="flgp", sketch="rademacher", random_state=0),
    # a wide kernel that keeps the checks' blobs in one piece
    DiffusionMap(2, t=2, epsilon=50.0),
    GPEmbedding(2, t=2, epsilon=50.0, random_state=0),
    CompressedDiffusionMap(n_components=2, n_partitions=5, n_neighbors=60, bandwidth=50.0,
                           random_state=0),
    CompressedDiffusionMap(n_components=2, n_partitions=5, n_neighbors=60, bandwidth=50.0,
                           centroids="kmeans", random_state=0),
    DeepDiffusionMap(quantile=0.2, max_epochs=3, batch_size=16, progress=False,
                     random_state=0),
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The checks fit on tens of points: DeepDiffusionMap's tiny network trains ~10x faster
    on one thread than on two busy ones (as in test_deep_diffusion.py)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@parametrize_with_checks(ESTIMATORS + TRANSFORMERS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
