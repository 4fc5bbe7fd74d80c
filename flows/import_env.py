"""Environment variables that a module reads once, as it is imported.

A process that imported tokensweep under one environment can stand in for a fresh one under
another only where these agree: the warm process that runs commands (`warm_cli.py`) and the
forkserver local workers are forked from (`forkserver.py`). They are the thread counts (numba,
OpenMP and the BLAS read theirs on import), Python's own, Dask's, zarr's and matplotlib's
configuration, the C library's and the locale, Prefect's logging set-up and TOKENSWEEP_HOME.
Any other variable is read when it is used, so it can be handed over to the stand-in.
"""

from __future__ import annotations

PREFIXES = ("NUMBA_", "OMP_", "OPENBLAS_", "MKL_", "PYTHON", "DASK_", "ZARR_", "MPL", "LD_",
            "MALLOC_", "LANG", "LC_", "PREFECT_LOGGING_", "TOKENSWEEP_HOME")


def read_on_import(env) -> dict[str, str]:
    """The variables of `env` that a module may have read on import."""
    return {k: v for k, v in env.items() if k.startswith(PREFIXES)}
