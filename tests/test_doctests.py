"""Every docstring example of the package runs, as `pytest --doctest-modules` would run it.

Collected from the installed package (`tokensweep.*`, walked with pkgutil), so the examples run
against the code users import; `np` and `xr` are in every example's namespace, as in xarray's.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pytest
import xarray as xr

import tokensweep

MODULES = sorted(info.name for info in pkgutil.walk_packages(tokensweep.__path__, "tokensweep."))


def test_the_package_is_walked():
    assert {"tokensweep.pipeline.spec", "tokensweep.pipeline.models.hybrid",
            "tokensweep.kernels.vocabulary"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"np": np, "xr": xr}, optionflags=doctest.ELLIPSIS,
                             report=True, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (see above)"
