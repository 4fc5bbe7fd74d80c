"""Numba's on-disk cache, keyed by the kernels' source.

Numba invalidates a cached function only when the file that defines it changes, but the kernels
call helpers in other files (attention, outcomes, lowlevel/, ...) and numba compiles those into
the caller. An edit to a helper would then leave callers running the old code from the cache,
and a sweep would silently mix two versions of the dynamics (seen: a cube that differed from a
rerun of the same spec by 1e-7). So the cache lives in a folder named after a digest of every
kernel source, subpackages included: any edit selects a fresh folder. The folder sits under
NUMBA_CACHE_DIR when set (e.g. node-local on a cluster), else under ~/.cache/tokensweep.

Importing this module selects the folder. numba reads it when a function is decorated, so every
kernel module with @njit(cache=True) functions does `from . import cache` (`from .. import cache`
in a subpackage) before defining them (the packages' __init__ files import nothing, so that
`vocabulary` can be read without numba).
"""

import hashlib
import os
from pathlib import Path

import numba


def source_digest(folder: Path = Path(__file__).parent) -> str:
    """Digest of the paths (relative to `folder`) and contents of every module of the kernels
    package, its subpackages included."""
    h = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*.py")):
        h.update(path.relative_to(folder).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


PREFIX = "kernels-"


def use_versioned_cache_dir() -> str:
    """Point numba's cache at a folder specific to this exact kernel source; return it.

    The folder is written to NUMBA_CACHE_DIR too: numba re-reads its settings from the environment
    at the next compilation whenever any NUMBA_ variable changes (a notebook setting
    NUMBA_NUM_THREADS), and would otherwise point the kernels imported after that at the
    unversioned base. A child process inherits it and selects the folder of its own source beside
    it (a base that is itself a versioned folder stands for its parent)."""
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(Path.home(), ".cache", "tokensweep", "numba")
    if Path(base).name.startswith(PREFIX):
        base = str(Path(base).parent)
    folder = os.path.join(base, f"{PREFIX}{source_digest()}")
    os.environ["NUMBA_CACHE_DIR"] = folder
    numba.config.CACHE_DIR = folder  # read when each @njit(cache=True) is decorated
    return folder


use_versioned_cache_dir()
