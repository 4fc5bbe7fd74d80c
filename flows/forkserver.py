"""Local workers forked from one process that has imported what they need, once.

A spawned worker imports Prefect's task engine, the pipeline and numba, and loads the sweep's
cached kernels, before its first partition: ~3 s of one core for the imports and ~1.3 s for the
kernels on a small VM, paid once per worker and while the flow's own process is importing the
same on the other cores. The standard library's forkserver does it once instead, in a process
of its own started as soon as a run knows it needs a local cluster (it also runs one tiny
partition of the sweep: `kernel_preload.py`), and each worker is then a fork of it (milliseconds).

A forked worker inherits the forkserver's environment, not its parent's at the time of the
fork. So the variables distributed's nanny exports for its workers are exported before the
forkserver starts. Of the variables changed since (the run's PREFECT_API_URL, known only once
the server answers; any other), those a module reads on import (`READ_ON_IMPORT`) may come too
late, so then workers are spawned and import for themselves, as without this module; the rest
are handed to each fork by its nanny, and those removed since are removed by the worker's
preload (`preload.dask_setup`, which also reads Prefect's settings again).

It ends with the run's process (a child of it, with the standard library's alive pipe): nothing
outlives the command, which ends it before it returns (`stop`, from `fast_exit`) rather than let
it tear its interpreter down for seconds after.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing import forkserver

from . import kernel_preload

UNSET = "TOKENSWEEP_UNSET"  # names, space-separated, that a forked worker removes (preload.py)
STREAMS = {1: "TOKENSWEEP_STDOUT", 2: "TOKENSWEEP_STDERR"}  # the run's, for a forked worker
# Variables a module reads once, as it is imported: the thread counts (numba, OpenMP and the BLAS
# read theirs on import), Python's own, Dask's, zarr's and matplotlib's configuration, the C
# library's and the locale, Prefect's logging set-up and TOKENSWEEP_HOME. A fork of the
# forkserver stands in for a fresh worker only where these agree; any other variable is read
# when it is used, so the nanny hands it over.
READ_ON_IMPORT = ("NUMBA_", "OMP_", "OPENBLAS_", "MKL_", "PYTHON", "DASK_", "ZARR_", "MPL", "LD_",
                  "MALLOC_", "LANG", "LC_", "PREFECT_LOGGING_", "TOKENSWEEP_HOME")
_environment: dict[str, str] | None = None  # os.environ when this process's forkserver started
_nanny_keys: frozenset[str] = frozenset()  # exported by distributed's nanny in every worker


def start(modules: list[str], spec: dict | None = None) -> None:
    """Start this process's forkserver now, importing `modules` and loading the kernels of the
    sweep `spec` (no-op if it runs already, or where the platform has no forkserver)."""
    global _environment, _nanny_keys
    if _environment is not None or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    nanny = _nanny_environ()
    os.environ.update(nanny)
    _nanny_keys = frozenset(nanny)
    _environment = dict(os.environ)
    variable = kernel_preload.as_variable(spec) if spec is not None else None
    if variable is not None:
        modules = [*modules, kernel_preload.__name__]
        os.environ[kernel_preload.SPEC_VARIABLE] = variable  # the forkserver's alone: removed below
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(modules))
    try:
        forkserver.ensure_running()  # returns at once: the server imports while this process goes on
    finally:
        os.environ.pop(kernel_preload.SPEC_VARIABLE, None)


def stop() -> None:
    """End this process's forkserver now, if it started one: SIGTERM, which ends it at once,
    without the interpreter's teardown (seconds, in a process that imported Prefect, the
    pipeline and the kernels); its forks, the local workers, are closed with their cluster.
    For the end of a command (`fast_exit`): the forkserver would otherwise outlive it by those
    seconds. A later local cluster in this process spawns its workers."""
    global _environment
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # the standard library's record
    if _environment is None or not pid:
        return
    _environment = None
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:  # the standard library's own stop: its pipe closed, the process reaped, its socket removed
        forkserver._forkserver._stop()
    except OSError:
        pass


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
    the variables set, changed or (UNSET) removed since the forkserver started, and where this
    process's standard streams are (STREAMS)), or ("spawn", {}) (distributed's default) without
    a forkserver or after a change to a variable read on import."""
    if _environment is None:
        return "spawn", {}
    ignored = _nanny_keys | {"__DASK_PARENT_PID"}  # the nanny's own, and distributed's per cluster
    now = {k: v for k, v in os.environ.items() if k not in ignored}
    then = {k: v for k, v in _environment.items() if k not in ignored}
    if read_on_import(now) != read_on_import(then):
        return "spawn", {}
    env = {k: v for k, v in now.items() if then.get(k) != v}
    removed = sorted(set(then) - set(now))
    if removed:
        env[UNSET] = " ".join(removed)
    return "forkserver", {**env, **_streams()}


def _streams() -> dict[str, str]:
    """This process's stdout and stderr, as paths a forked worker opens (`preload.dask_setup`):
    it inherited the forkserver's, those of the process that started it, and its logs belong to
    this run (STORE.log, or the terminal with -v). Linux's /proc reopens the same
    file, terminal or pipe."""
    paths = {key: f"/proc/{os.getpid()}/fd/{fd}" for fd, key in STREAMS.items()}
    return {key: path for key, path in paths.items() if os.path.exists(path)}


def read_on_import(env) -> dict[str, str]:
    """The variables of `env` that a module may have read on import (READ_ON_IMPORT)."""
    return {k: v for k, v in env.items() if k.startswith(READ_ON_IMPORT)}
