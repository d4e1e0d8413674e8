"""Inference engines of the estimators, each on the labelled points' features in the
eigenbasis and knowing nothing of estimators:

* :mod:`~flgp.models.inference.ep` - expectation propagation for the probit and the
  multinomial probit (nested EP), with the leave-one-out predictive scale;
* :mod:`~flgp.models.inference.laplace` - Laplace's approximation (logistic, softmax,
  Poisson);
* :mod:`~flgp.models.inference.poisson` - the count model's hyperparameters and
  predictive intervals.

Exact Gaussian regression is the priors' own algebra: :mod:`flgp.spectral.gaussian` (low
rank, the FLGP appendix's Woodbury identities) and
:mod:`flgp.precision.gaussian` (sparse precision).
"""
