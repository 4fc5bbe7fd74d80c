"""What a local Dask worker imports as it starts (`run.WORKER_PRELOAD`, distributed's preload).

The first partition on a fresh worker would otherwise wait for Prefect's task engine and the
pipeline (xarray, zarr, numba) to import, after the cluster is up; as a preload the imports
run while the flow's own process is still setting up. A forkserver imports this module once
for all local workers (`forkserver.py`).
"""

import logging
import os

import prefect.task_engine  # noqa: F401
from prefect.context import refresh_global_settings_context

from . import sweep  # noqa: F401  (the tasks, hence the pipeline they call)
from .forkserver import STREAMS, UNSET
from .gpus import GPU_COUNT_ENV

# Its lines come before dask_setup, so a fork would write them to the forkserver's streams
logging.getLogger("distributed.preloading").setLevel(logging.WARNING)


def dask_setup(worker) -> None:
    """In a worker forked from a forkserver (`forkserver.worker_start`), now that the nanny has
    exported the run's environment: write to the run's streams rather than the forkserver's,
    remove what the run's environment no longer has, and read Prefect's settings again (the
    forkserver may have started before the run knew its Prefect API, PREFECT_API_URL)."""
    for fd, key in STREAMS.items():
        _reopen(os.environ.pop(key, None), fd)
    for key in os.environ.pop(UNSET, "").split():
        os.environ.pop(key, None)
    refresh_global_settings_context()
    use_one_gpu(worker.name)


def use_one_gpu(name) -> None:
    """Where the worker processes of a local cluster or of a batch job share out several GPUs
    (GPU_COUNT_ENV), let this one see one of them, before anything in its process starts CUDA:
    the i-th by its name (a local worker's is i; `dask worker --nworkers N --name JOB` names
    its processes JOB-0 .. JOB-(N-1)) among the CUDA_VISIBLE_DEVICES the job was given."""
    gpus = int(os.environ.get(GPU_COUNT_ENV) or 0)
    index = str(name).rsplit("-", 1)[-1]
    if gpus < 2 or not index.isdigit():
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(gpus)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ids[int(index) % len(ids)]


def _reopen(path: str | None, fd: int) -> None:
    """Make `fd` write to `path` (appending: a log file keeps what it has), where it opens."""
    if path is None:
        return
    try:
        opened = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:  # a socket, or the run is gone: keep the forkserver's
        return
    os.dup2(opened, fd)
    os.close(opened)
