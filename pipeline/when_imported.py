"""Run code once a module has been imported, without importing it (a post-import hook).

`import tokensweep` registers the ``ds.tokensweep`` accessor on xarray; importing xarray for that
(and pandas with it) would cost every `tokensweep` command ~0.6 s, `tokensweep --help` included.
The accessor is registered the moment xarray is imported
instead, by whoever imports it; at once where it already is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


def when_imported(name: str, then: Callable[[], None]) -> None:
    """Call `then()` right after the top-level module `name` is first imported (now if it is)."""
    if name in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _Hook(name, then))


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)  # once; and the finders below find the module itself
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.then()

        spec.loader.exec_module = exec_module
        return spec
