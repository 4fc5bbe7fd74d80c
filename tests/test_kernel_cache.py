"""Numba's cache follows the kernels' source, so an edited helper never runs stale code."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import pytest

from tokensweep.kernels import cache
from tokensweep.kernels.stochastic import transformer as stochastic


def test_kernels_cache_in_a_folder_named_after_their_source():
    folder = numba.config.CACHE_DIR
    assert Path(folder).name == f"kernels-{cache.source_digest()}"
    assert stochastic._trajectory.stats.cache_path.startswith(folder)


def test_editing_any_helper_selects_a_new_cache_folder(tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(Path(cache.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.source_digest(copy)
    assert before == cache.source_digest()
    for name in ("attention.py", "lowlevel/fast_exp.py"):  # compiled into the stochastic kernel
        helper = copy / name
        helper.write_text(helper.read_text() + "\n# an edit\n")
        assert cache.source_digest(copy) != before
        before = cache.source_digest(copy)


def test_cache_sits_under_numba_cache_dir_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    original = numba.config.CACHE_DIR
    try:
        folder = cache.use_versioned_cache_dir()
        assert Path(folder).parent == tmp_path
    finally:
        numba.config.CACHE_DIR = original


KERNELS = Path(cache.__file__).parent


def _imports(path: Path) -> list[str]:
    """What `path` imports at its top level: "numpy", "numba.njit", "..cache", ".attention.f", ..."""
    names = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = "." * node.level + (node.module or "")
            names += [base + ("." if node.module else "") + alias.name for alias in node.names]
    return names


def test_vocabulary_and_the_packages_import_no_numba():
    """The pipeline reads output specs and option names without numba (specs, store templates):
    vocabulary imports nothing of numba nor of a kernel module, and no package's __init__ imports
    a kernel module either (checked on the source: numba is already loaded in this process)."""
    for path in (KERNELS / "vocabulary.py", *KERNELS.rglob("__init__.py")):
        assert not [n for n in _imports(path) if "numba" in n or n.startswith(".")], path


@pytest.mark.slow
def test_vocabulary_imports_no_numba_in_a_fresh_interpreter():
    code = ("import sys, tokensweep.kernels.vocabulary as v; "
            "assert v.SPHERE_FLOW_OUTPUTS and 'numba' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def _cached_kernel_modules() -> list[str]:
    return sorted("tokensweep.kernels." + ".".join(p.relative_to(KERNELS).with_suffix("").parts)
                  for p in KERNELS.rglob("*.py")
                  if p.name not in ("__init__.py", "cache.py") and "cache=True" in p.read_text())


def test_every_kernel_module_caches_in_the_versioned_folder():
    """Whichever kernel module is imported first, its cached functions use the versioned folder:
    each selects it itself, importing `cache` before it defines them (checked on its source: in
    this process another module may have selected it already), and every cached function of it
    sits in the versioned folder."""
    from numba.core.dispatcher import Dispatcher

    folder = numba.config.CACHE_DIR
    assert Path(folder).name == f"kernels-{cache.source_digest()}"
    modules = _cached_kernel_modules()
    assert len(modules) > 10
    for name in modules:
        path = KERNELS.joinpath(*name.split(".")[2:]).with_suffix(".py")
        assert any(n.rsplit(".", 1)[-1] == "cache" and n.startswith((".", "tokensweep.kernels."))
                   for n in _imports(path)), name
        module = importlib.import_module(name)
        cached = [f.stats.cache_path for f in vars(module).values()  # those with cache=True
                  if isinstance(f, Dispatcher) and f.py_func.__module__ == name and f.stats.cache_path]
        assert all(path.startswith(folder) for path in cached), name


def test_versioned_folder_survives_numba_rereading_its_settings(monkeypatch):
    """numba re-reads its settings from the environment at a compilation after any NUMBA_ variable
    changed (a notebook setting NUMBA_NUM_THREADS): the kernels imported after that still cache
    in the versioned folder, and a child process that inherits the environment selects the same
    folder, not one nested in it."""
    folder = numba.config.CACHE_DIR
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    numba.njit(lambda x: x + 1)(1)  # a compilation: numba re-reads its settings here
    assert numba.config.CACHE_DIR == folder
    child = subprocess.run([sys.executable, "-c", "import numba; from tokensweep.kernels import cache; "
                            "print(numba.config.CACHE_DIR)"], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == folder
