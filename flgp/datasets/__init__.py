"""Built-in data: manifold generators (no download, ever)."""

from .manifolds import (make_circle_with_outliers, make_concentric_circles, make_helix,
                        make_klein_bottle, make_s_curve, make_sphere, make_spiral,
                        make_stretched_torus, make_swiss_roll, make_torus)

__all__ = ["make_circle_with_outliers", "make_concentric_circles", "make_helix",
           "make_klein_bottle", "make_s_curve", "make_sphere", "make_spiral",
           "make_stretched_torus", "make_swiss_roll", "make_torus"]
