"""Leaving the `tokensweep` process at once, without the interpreter's teardown.

When a command is over, Python would still run its exit hooks, join every non-daemon thread
and free every module: up to a second after a sweep (Prefect, Dask, xarray loaded), and,
after Ctrl-C, as long as a partition still running in one of this process's threads
(`run.InProcessTaskRunner`). What must outlive the command is finished here first: Prefect's
queued logs and events go to its API (the two services Prefect drains at exit), logging
handlers and the standard streams are flushed. Only the CLI's entry point exits this way; the
Python API and the tests' in-process calls return normally.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

PREFECT_DRAIN_TIMEOUT_S = 30.0


def _drain_prefect() -> None:
    """Send what Prefect's log and event services still hold (what its exit hook would do)."""
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        try:
            service.drain_all(timeout=PREFECT_DRAIN_TIMEOUT_S)
        except Exception:  # an API gone away: the command's own result is already out
            pass


def _stop_forkserver() -> None:
    """End the run's forkserver (`forkserver.stop`), if this process imported the module."""
    module = sys.modules.get(f"{__package__}.forkserver")
    if module is not None:
        module.stop()


def exit_now(code: int) -> NoReturn:
    """Flush what the command wrote or queued, then end the process with `code`."""
    try:
        _drain_prefect()
        _stop_forkserver()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can reach it
                pass
    finally:
        os._exit(code)
