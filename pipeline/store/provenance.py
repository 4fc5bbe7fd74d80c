"""Where a cube comes from: the software versions and the code version recorded in its attributes.

The code version is the installed distribution's own: setuptools-scm computes it from the
tokensweep repository when the package is built (``0.1.dev42+g1866f97``, with ``.dYYYYMMDD`` for a
tree with uncommitted changes) and writes it into ``tokensweep/_version.py``. Nothing is asked of
git at run time: a venv inside a user's own paper repository must not record that repository.

Kept apart from the store's layout so that the store module stays about one thing."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("tokensweep", "numpy", "numba", "xarray", "zarr", "dask", "prefect"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _baked():
    try:
        from ... import _version
    except ImportError:  # a source tree that was never built or installed
        return None
    return _version


def installed_version() -> str:
    """tokensweep's version as built (``tokensweep.__version__``)."""
    baked = _baked()
    if baked is not None:
        return baked.version
    try:
        return version("tokensweep")
    except PackageNotFoundError:
        return "0.0.0"


def code_version() -> str:
    """The version baked in at build time, with its commit when the version does not show it."""
    baked, text = _baked(), installed_version()
    commit = (getattr(baked, "commit_id", None) or "").removeprefix("g")
    return f"{text} (commit {commit})" if commit and commit not in text else text
