"""Numba's cache follows the kernels' source, so an edited helper never runs stale code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numba

from tokensweep.kernels import cache, stochastic


def test_kernels_cache_in_a_folder_named_after_their_source():
    folder = numba.config.CACHE_DIR
    assert Path(folder).name == f"kernels-{cache.source_digest()}"
    assert stochastic._trajectory.stats.cache_path.startswith(folder)


def test_editing_any_helper_selects_a_new_cache_folder(tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(Path(cache.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.source_digest(copy)
    assert before == cache.source_digest()
    helper = copy / "attention.py"  # called by, and compiled into, the stochastic kernel
    helper.write_text(helper.read_text() + "\n# an edit\n")
    assert cache.source_digest(copy) != before


def test_cache_sits_under_numba_cache_dir_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    original = numba.config.CACHE_DIR
    try:
        folder = cache.use_versioned_cache_dir()
        assert Path(folder).parent == tmp_path
    finally:
        numba.config.CACHE_DIR = original


def test_vocabulary_imports_no_numba():
    """The pipeline reads output specs and option names without numba (specs, store templates)."""
    code = ("import sys, tokensweep.kernels.vocabulary as v; "
            "assert v.SPHERE_FLOW_OUTPUTS and 'numba' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_kernel_module_caches_in_the_versioned_folder():
    """Whichever kernel module is imported first, its cached functions use the versioned folder:
    each selects it itself (`from . import cache`), the package __init__ imports nothing."""
    code = """if True:
        import importlib, sys
        from numba.core.dispatcher import Dispatcher
        m = importlib.import_module("tokensweep.kernels." + sys.argv[1])
        from tokensweep.kernels import cache
        folder = cache.use_versioned_cache_dir()
        jitted = [f for f in vars(m).values()
                  if isinstance(f, Dispatcher) and f.py_func.__module__ == m.__name__]
        assert jitted and all(f.stats.cache_path.startswith(folder) for f in jitted)
    """
    for module in ("attention", "ensembles", "euclidean_flow", "hybrid", "outcomes", "sphere_drift",
                   "sphere_flow", "stochastic"):
        subprocess.run([sys.executable, "-c", code, module], check=True)
