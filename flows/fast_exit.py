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
from typing import Callable, NoReturn

PREFECT_DRAIN_TIMEOUT_S = 30.0
_before_exit: list[Callable[[int], None]] = []  # last things to do, given the exit code


def before_exit(hook: Callable[[int], None]) -> None:
    """Call `hook(code)` once the command's output is flushed, just before the process ends
    (the warm process's child reports its code; a cold command leaves a warm process)."""
    _before_exit.append(hook)


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


def exit_now(code: int) -> NoReturn:
    """Flush what the command wrote or queued, then end the process with `code`."""
    try:
        _drain_prefect()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can reach it
                pass
        for hook in _before_exit:
            try:
                hook(code)
            except Exception:  # the command is over: its own result stands
                pass
    finally:
        os._exit(code)
