"""Built-in data: manifold generators and loaders of data shipped in installed packages
(no download, ever)."""

from .manifolds import (make_circle_with_outliers, make_concentric_circles, make_helix,
                        make_klein_bottle, make_s_curve, make_sphere, make_spiral,
                        make_stretched_torus, make_swiss_roll, make_torus)
from .cortex import CorticalSurface, load_conte69_thickness
from .fmri import Voxels, load_voxels, voxels_to_nifti
from .mnist import load_mnist

__all__ = ["make_circle_with_outliers", "make_concentric_circles", "make_helix",
           "make_klein_bottle", "make_s_curve", "make_sphere", "make_spiral",
           "make_stretched_torus", "make_swiss_roll", "make_torus", "load_mnist",
           "Voxels", "load_voxels", "voxels_to_nifti", "CorticalSurface",
           "load_conte69_thickness"]
