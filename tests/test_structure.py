"""The package's import structure where the layer counter cannot see it: imports inside
functions, which can hide an import cycle (a module half-initialised when the other one
asks for a name of it)."""

import ast
import pathlib
import subprocess
import sys

import flgp

ROOT = pathlib.Path(flgp.__file__).parent
# what may be imported inside a function: the Dask driver (dask is an optional extra); the
# command line (cli.py, skipped) imports its subcommands when they run, to start fast
LAZY_ALLOWED = "dask_blocks"


def _function_level_imports(path):
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0 and id(node) not in top:
            yield node.lineno, node.module or ""


def test_flgp_modules_are_imported_at_module_level():
    found = []
    for path in ROOT.rglob("*.py"):
        if path.name == "cli.py":
            continue
        for line, module in _function_level_imports(path):
            if not module.endswith(LAZY_ALLOWED):
                found.append(f"{path.relative_to(ROOT)}:{line}: from .{module}")
    assert not found, "function-level imports of flgp modules:\n" + "\n".join(found)


def test_bottom_layer_imports_first_in_a_fresh_interpreter():
    """Each module of the bottom layer (the input checks, the settings, the drivers, the
    backends: what every other layer imports) can be the first one imported - no cycle
    through a package's ``__init__`` that depends on import order. (One interpreter a
    module: about 2 s each, for torch; the layers above import these at module level.)"""
    names = sorted("flgp." + ".".join(p.relative_to(ROOT).with_suffix("").parts)
                   for p in ROOT.rglob("*.py")
                   if p.name != "__init__.py" and p.name != "dask_blocks.py"
                   and (p.parent == ROOT and p.name.startswith("_")
                        or p.parent.name in ("_chunks", "backends")))
    code = ("import importlib, subprocess, sys\n"
            "bad = []\n"
            f"for name in {names!r}:\n"
            "    r = subprocess.run([sys.executable, '-c', 'import ' + name],\n"
            "                       capture_output=True, text=True)\n"
            "    if r.returncode:\n"
            "        bad.append(name + ': ' + r.stderr.strip().splitlines()[-1])\n"
            "print('\\n'.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr
