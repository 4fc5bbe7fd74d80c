"""A pytest plugin that measures numba's compilation per test and per process (numba's event API),
for the quick suite's compile floor (issue 23: the suite's time minus what compiling costs).

    NUMBA_CACHE_DIR=$(mktemp -d) PYTHONPATH=benchmarks python -m pytest -q -p pytest_compile_log
    python benchmarks/pytest_compile_log.py        # the summary of the last run

Each test process writes COMPILE_LOG-PID.json (default /tmp/tokensweep-compile): its total, and
every outermost compilation (function, signature, seconds, the test that triggered it), the time
spent in tests (setup, call, teardown) and the process's whole time. The
summary prints the total per process and the compilations, longest first: the same function
under two signatures is compiled twice (e.g. a read-only and a writable array). Seconds are the
process's CPU time (time.process_time), which a busy neighbour on a shared machine inflates less
than wall time. Last, every function compiled for a literal argument (`Literal[int](0)`), with
its own CPU time without its callees: a counter that starts as `0` (kernels/__init__.py).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

PREFIX = os.environ.get("COMPILE_LOG", "/tmp/tokensweep-compile")
LOG = {"compile": 0.0, "compilations": [], "literal": [], "tests": 0.0, "started": time.time()}
_stack = []  # [what, start, seconds of nested compilations] per compilation under way
_state = {"test": "?"}


def pytest_configure(config):
    from numba.core import event

    class Compilations(event.Listener):
        """Times the outermost compilation (a kernel compiles its callees inside); notes each
        compilation for a literal argument, with its own time."""

        def on_start(self, ev):
            dispatcher = ev.data.get("dispatcher")
            function = getattr(dispatcher, "py_func", None)
            what = (f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
                    f" {ev.data.get('args')}")
            _stack.append([what, time.process_time(), 0.0])

        def on_end(self, ev):
            what, start, nested = _stack.pop()
            seconds = time.process_time() - start
            if _stack:
                _stack[-1][2] += seconds
            else:
                LOG["compile"] += seconds
                LOG["compilations"].append([what, seconds, _state["test"]])
            if "Literal[" in what and what.startswith("tokensweep"):
                LOG["literal"].append([what, seconds - nested, _state["test"]])

    event.register("numba:compile", Compilations())


def pytest_runtest_setup(item):
    _state["test"] = item.nodeid


def pytest_runtest_logreport(report):
    LOG["tests"] += report.duration  # setup, call and teardown


def pytest_sessionfinish(session):
    LOG["session"] = time.time() - LOG["started"]  # the process's life, collection included
    with open(f"{PREFIX}-{os.getpid()}.json", "w") as f:
        json.dump(LOG, f)


def summary() -> None:
    for path in sorted(glob.glob(f"{PREFIX}-*.json")):
        log = json.load(open(path))
        if not log["compilations"]:
            continue
        print(f"{path}: {log['compile']:.1f} s of CPU in compilation, {log.get('tests', 0):.1f} s in tests "
              f"(compilation included), {log.get('session', 0):.1f} s from start to end")
        for what, seconds, test in sorted(log["compilations"], key=lambda c: -c[1]):
            print(f"  {seconds:6.1f} s  {what[:100]}  <- {test}")
        for what, seconds, test in log.get("literal", []):
            print(f"  literal: {seconds:5.1f} s  {what[:100]}  <- {test}")


if __name__ == "__main__":
    sys.exit(summary())
