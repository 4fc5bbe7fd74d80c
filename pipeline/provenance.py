"""Where a cube comes from: the software versions and the code version recorded in its attributes.

Kept apart from the store's layout so that the store module stays about one thing."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("tokensweep", "numpy", "numba", "xarray", "zarr", "dask", "prefect"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def code_version() -> str:
    """`git describe` of the source tree when it is a checkout, else the package version."""
    import subprocess

    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=here,
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"tokensweep {software_versions()['tokensweep']} (not a git checkout)"
