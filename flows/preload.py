"""What a local Dask worker imports as it starts (`run.WORKER_PRELOAD`, distributed's preload).

The first partition on a fresh worker would otherwise wait for Prefect's task engine and the
pipeline (xarray, zarr, numba) to import, after the cluster is up; as a preload the imports
run while the flow's own process is still setting up.
"""

import prefect.task_engine  # noqa: F401

from . import sweep  # noqa: F401  (the tasks, hence the pipeline they call)
