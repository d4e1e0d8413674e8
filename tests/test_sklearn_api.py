from sklearn.utils.estimator_checks import parametrize_with_checks

from flgp import FLGPClassifier, FLGPRegressor

EXPECTED_FAILURES = {
    # scikit-learn's semi-supervised convention: -1 marks an unlabelled row, so a class
    # literally named -1 (this check relabels y to {-1, 1}) cannot be used.
    "check_classifiers_classes": "-1 marks unlabelled rows (sklearn.semi_supervised "
                                 "convention)",
}


def _expected_failed_checks(estimator):
    if isinstance(estimator, FLGPClassifier):
        return EXPECTED_FAILURES
    return {}


@parametrize_with_checks([FLGPClassifier(), FLGPRegressor()],
                         expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)
