"""Local workers forked from one process that has imported what they need, once.

A spawned worker imports Prefect's task engine, the pipeline and numba before its first
partition: ~3 s of one core on a small VM, paid once per worker and while the flow's own
process is importing the same on the other cores. The standard library's forkserver imports
them once instead, in a process of its own started as soon as a run knows it needs a local
cluster, and each worker is then a fork of it (milliseconds).

A forked worker inherits the forkserver's environment, not its parent's at the time of the
fork. So the variables distributed's nanny exports for its workers are exported before the
forkserver starts; Prefect's variables set since (the run's PREFECT_API_URL, known only once
the server answers) are handed to each fork by its nanny, and the worker reads Prefect's
settings again (`preload.dask_setup`); any other change to `os.environ` since (a test's, a
library's) could come too late for a module that read it on import, so then workers are
spawned and import for themselves, as without this module.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import forkserver

_environment: dict[str, str] | None = None  # os.environ when this process's forkserver started


def start(modules: list[str]) -> None:
    """Start this process's forkserver now, importing `modules` (no-op if it runs already, or
    where the platform has no forkserver)."""
    global _environment
    if _environment is not None or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    os.environ.update(_nanny_environ())
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(modules))
    forkserver.ensure_running()  # returns at once: the server imports while this process goes on
    _environment = dict(os.environ)


def _nanny_environ() -> dict[str, str]:
    """What distributed's nanny exports before it starts a worker (`nanny.pre-spawn-environ`:
    thread caps, malloc trimming; and one PYTHONHASHSEED for all workers), so that a fork,
    which the export comes too late for, has it from the forkserver."""
    import dask
    import distributed  # noqa: F401 (its config defaults)

    env = {k: str(v) for k, v in dask.config.get("distributed.nanny.pre-spawn-environ").items()}
    if os.environ.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # distributed's own choice (nanny.py)
    return env


def worker_start() -> tuple[str, dict[str, str]]:
    """How to start a local worker now, and what its nanny must export in it: ("forkserver",
    the PREFECT_* variables set or changed since the forkserver started), or ("spawn", {})
    (distributed's default) without a forkserver or after any other change."""
    if _environment is None:
        return "spawn", {}
    keys = (set(os.environ) | set(_environment)) - {"__DASK_PARENT_PID"}  # distributed's, per cluster
    changed = {k for k in keys if os.environ.get(k) != _environment.get(k)}
    if any(not k.startswith("PREFECT_") or k not in os.environ for k in changed):
        return "spawn", {}
    return "forkserver", {k: os.environ[k] for k in changed}
