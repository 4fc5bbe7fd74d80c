"""What a local Dask worker imports as it starts (`run.WORKER_PRELOAD`, distributed's preload).

The first partition on a fresh worker would otherwise wait for Prefect's task engine and the
pipeline (xarray, zarr, numba) to import, after the cluster is up; as a preload the imports
run while the flow's own process is still setting up. A forkserver imports this module once
for all local workers (`forkserver.py`).
"""

import prefect.task_engine  # noqa: F401
from prefect.context import refresh_global_settings_context

from . import sweep  # noqa: F401  (the tasks, hence the pipeline they call)


def dask_setup(worker) -> None:
    """Read Prefect's settings again, now that the nanny has exported the worker's environment:
    a fork imported Prefect in the forkserver, which may have started before the run knew its
    Prefect API (PREFECT_API_URL)."""
    refresh_global_settings_context()
