"""Reproductions of the papers' experiments, shared by ``experiments/`` scripts and the
``flgp`` command line. Each module runs one study and returns a tidy table."""
