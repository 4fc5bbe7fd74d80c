"""The task runner of a sweep with at most one partition left: the flow's own process.

One partition gains nothing from a cluster, whose start (2-3 s of worker processes importing
Prefect, the pipeline and numba's cache) would dwarf a tiny sweep. The partition runs as the
same Prefect task (retries, states and logs in the UI) in one thread of the flow's process,
with the same numbers: each trajectory's random numbers depend only on (seed, cell,
trajectory), never on where it runs.
"""

from __future__ import annotations

from prefect.task_runners import ThreadPoolTaskRunner


class InProcessTaskRunner(ThreadPoolTaskRunner):
    """Prefect's thread-pool runner with one thread. Leaving on an error (Ctrl-C) does not wait
    for the partition still running: the CLI ends the process at once (`fast_exit`), and the
    store never counts an unfinished partition as done."""

    def __init__(self, max_workers: int = 1):
        super().__init__(max_workers=max_workers)

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        super().__exit__(exc_type, exc_value, traceback)
