"""Build of flgp's one compiled module, ``flgp.backends._rows`` (the graph engine's row
kernels in C, bound by Cython); everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled (no C compiler), the install goes on
and flgp runs the numpy twins of the kernels (``flgp.backends.compiled.available()`` is then
False; docs/engine.md).
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:                      # a build without Cython: no compiled kernels
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("flgp.backends._rows", ["flgp/backends/_rows.pyx", "flgp/backends/rows.c"],
                   include_dirs=["flgp/backends"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": 3}, quiet=True)
    for ext in ext_modules:          # cythonize makes new Extension objects: set it on them
        ext.optional = True

setup(ext_modules=ext_modules)
