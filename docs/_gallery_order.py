"""Reading order of the gallery (``examples/``), for sphinx-gallery's
``within_subsection_order``; an example not listed here comes last, by file name."""

ORDER = [
    "plot_semi_supervised_circles.py",
    "plot_mnist.py",
    "plot_regression_uncertainty.py",
    "plot_brain_map.py",
    "plot_brain_excursion.py",
    "plot_group_map.py",
    "plot_surface_thickness.py",
    "plot_gpytorch_heat_kernel.py",
    "plot_gpytorch_graph_matern.py",
    "plot_diffusion_map_vs_spectral_embedding.py",
    "plot_large_data.py",
]


class ExampleOrder:
    """Sort key: position in :data:`ORDER`, then the file name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        name = str(filename).replace("\\", "/").rsplit("/", 1)[-1]
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)
