"""Whether a model's numba kernels are in the cache yet: `run` and `plan` say "compiling
kernels" before a first run of each model, not only while the whole cache is empty.

numba caches each compiled function in an index file (``module.function-line.pyXY.nbi``) in a
folder named after the folder of its source (`numba.core.caching`), under the versioned cache
folder of this kernel source (`kernels/cache.py`). A model's kernels are the kernel modules or
packages its plug-in imports (``from ...kernels.stochastic import ...``); they are cached once
any of their functions has an index file there. A plug-in whose kernels cannot be told (one
from another package) counts as cached once the cache holds anything.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
from pathlib import Path


def kernels_cold(model_name: str) -> bool:
    """True when none of the model's kernels is in numba's cache: its first run compiles them."""
    import numba

    from ...kernels import cache  # noqa: F401 (selects the versioned folder, once)

    sources = kernel_sources(model_name)
    if not sources and _builtin(model_name):
        return False  # a built-in plug-in without numba kernels (network: torch runs it)
    folder = Path(numba.config.CACHE_DIR)
    if not folder.is_dir():
        return True
    if not sources:  # another package's plug-in: its kernels cannot be told apart
        return not any(folder.iterdir())
    return not any(_cached(folder, source) for source in sources)


def kernel_sources(model_name: str) -> list[Path]:
    """The kernel modules (files) and packages (folders) the model's plug-in imports."""
    from ...pipeline.models import get_model

    kernels = Path(importlib.import_module("tokensweep.kernels").__file__).parent
    plugin = importlib.import_module(type(get_model(model_name)).__module__)
    if not plugin.__name__.startswith("tokensweep.") or not plugin.__file__:
        return []
    found = []
    for node in ast.walk(ast.parse(Path(plugin.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level and \
                (node.module or "").startswith("kernels."):
            path = kernels.joinpath(*node.module.split(".")[1:])
            for candidate in (path, path.with_suffix(".py")):
                if candidate.exists() and candidate not in found:
                    found.append(candidate)
    return found


def _builtin(model_name: str) -> bool:
    from ...pipeline.models import get_model

    return type(get_model(model_name)).__module__.startswith("tokensweep.")


def _cached(folder: Path, source: Path) -> bool:
    """Whether numba's cache `folder` holds an index file of a function defined in `source`."""
    directory = source if source.is_dir() else source.parent
    sub = folder / f"{directory.name}_{hashlib.sha1(str(directory.absolute()).encode()).hexdigest()}"
    pattern = "*.nbi" if source.is_dir() else f"{source.stem}.*.nbi"
    return sub.is_dir() and any(sub.glob(pattern))
