"""Running a sweep from Python (``tokensweep.run``): in a child process, with progress shown here.

Why a child process. A local Dask cluster starts its worker processes by *spawning* them, and a
spawned process re-imports the parent's main module. A script that calls the flow directly
without an ``if __name__ == "__main__":`` guard is re-run by every worker ("Nanny failed to
start"), and a notebook's kernel is no script at all. So the caller's process only validates
the spec (errors are raised here, as exceptions, before anything starts), then runs
``python -m tokensweep.flows.child SPEC.json STORE ...``, this module, whose own main guard the
workers do see, and shows the progress of the store meanwhile: the fraction of partitions whose
``status`` is done, read from the store itself (the truth, whatever the child prints), as a line
updated in place in a terminal, an updating HTML bar in Jupyter, or a line per tenth otherwise.

The child prints one line of JSON on stdout, its summary or its error (message and kind), and
exits 0, 2 for a spec, store or cluster that cannot be used, 1 when partitions failed, as the
command line does; here the error is raised again as the same exception class.
Interrupting the caller (Ctrl-C, a notebook's stop button) interrupts the child, which releases
the store's lock on its way out; so does the caller's end, however it ends (`die_with_parent`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..pipeline.errors import SpecError, StoreError, SweepError
from ..pipeline.spec.base import SweepBase

__all__ = ["SweepError", "run_in_child"]

POLL_S = 0.5
RESULT = "tokensweep-result: "  # prefix of the child's one line of JSON on stdout
PARENT_VARIABLE = "TOKENSWEEP_PARENT_PID"  # the caller's pid: the child ends when it is gone
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def run_in_child(sweep: SweepBase, workers: int | None = None, scheduler: str | None = None,
                 progress: bool = True, report: bool = True) -> dict:
    """Run `sweep` (checked by `pipeline.prepare.prepare_sweep`) in a child process; returns
    its summary."""
    with tempfile.TemporaryDirectory(prefix="tokensweep-run-") as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(sweep.model_dump(mode="json")))
        cmd = [sys.executable, "-m", "tokensweep.flows.child", str(spec_file), sweep.store]
        if workers:
            cmd += ["--workers", str(workers)]
        if not report:
            cmd.append("--no-report")
        if scheduler:
            cmd += ["--scheduler-file" if Path(scheduler).is_file() else "--scheduler", str(scheduler)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1",
                                     PARENT_VARIABLE: str(os.getpid())})
        out, err = [], []
        readers = [threading.Thread(target=lambda s=s, b=b: b.extend(s), daemon=True)
                   for s, b in ((proc.stdout, out), (proc.stderr, err))]
        for r in readers:
            r.start()
        bar = _ProgressDisplay(sweep) if progress else None
        try:
            while proc.poll() is None:
                if bar:
                    bar.update()
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            _interrupt(proc)
            raise
        finally:
            for r in readers:
                r.join(timeout=5)
            if bar:
                bar.close()
    return _result(proc.returncode, "".join(out), "".join(err))


def _interrupt(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # KeyboardInterrupt there: the lock is released on the way out
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _result(code: int, out: str, err: str) -> dict:
    """The child's summary, or its error raised here as the exception it was there."""
    lines = [line[len(RESULT):] for line in out.splitlines() if line.startswith(RESULT)]
    if not lines:
        raise SweepError(f"the sweep's process exited {code} without a result:\n{err[-3000:]}")
    result = json.loads(lines[-1])
    if "error" not in result:
        return result
    from .run import ClusterError

    kinds = {"SpecError": SpecError, "StoreError": StoreError, "ClusterError": ClusterError}
    raise kinds.get(result["kind"], SweepError)(result["error"])


class _ProgressDisplay:
    """Partitions done / all, read from the store's status, shown where the caller looks."""

    def __init__(self, sweep: SweepBase):
        from ..pipeline.plan import Plan

        self.store, self.name, self.total = sweep.store, sweep.name, len(Plan(sweep))
        self.start, self.shown = time.monotonic(), None
        self.handle = self.tty = None
        if _in_jupyter():
            from IPython.display import display

            self.handle = display(_Bar(self.name, 0, self.total, "starting"), display_id=True)
        else:
            self.tty = sys.stderr.isatty()

    def done(self) -> int | None:
        from ..pipeline.store.cube import read_status
        from ..pipeline.store.layout import DONE

        try:
            status = read_status(self.store)
        except (StoreError, OSError, ValueError):
            return None  # not created yet, or being grown
        return int((status == DONE).sum()) if status.size == self.total else None

    def update(self, final: bool = False) -> None:
        k = self.done()
        note = f"{time.monotonic() - self.start:.0f} s" if k is not None else "starting"
        k = 0 if k is None else k
        if self.handle is not None:
            self.handle.update(_Bar(self.name, k, self.total, note))
        elif self.tty:
            print(f"\r{self.name}: {k}/{self.total} partitions done ({note})", end="",
                  file=sys.stderr, flush=True)
        elif final or self.shown is None or 10 * k // self.total > 10 * self.shown // self.total:
            print(f"{self.name}: {k}/{self.total} partitions done ({note})", file=sys.stderr, flush=True)
            self.shown = k

    def close(self) -> None:
        self.update(final=True)
        if self.tty:
            print(file=sys.stderr)


class _Bar:
    """A progress bar for Jupyter (HTML), with a plain-text fallback."""

    def __init__(self, name: str, k: int, total: int, note: str):
        self.name, self.k, self.total, self.note = name, k, total, note

    def __repr__(self) -> str:
        return f"{self.name}: {self.k}/{self.total} partitions done ({self.note})"

    def _repr_html_(self) -> str:
        return (f"<div><code>{self.name}</code> <progress value='{self.k}' max='{self.total}'></progress> "
                f"{self.k}/{self.total} partitions done ({self.note})</div>")


def _in_jupyter() -> bool:
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return type(shell).__name__ == "ZMQInteractiveShell"


def die_with_parent() -> bool:
    """Make this process end as its parent (the caller of ``tokensweep.run``) does, however it
    ends (a SIGKILL from a timeout included): a KeyboardInterrupt in the main thread, once, as
    the caller's Ctrl-C is, so the flow releases the store's lock and closes its local cluster
    on its way out. On Linux the kernel signals it (PR_SET_PDEATHSIG, with SIGHUP: the caller
    hung up); elsewhere a thread watches the parent. A SIGTERM sent to this process is a
    KeyboardInterrupt too (outside a flow run; inside, Prefect takes SIGTERM over). False when
    the parent is gone already (before the signal was asked for)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parent = int(os.environ.pop(PARENT_VARIABLE, 0)) or None  # not for this process's children
    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGHUP, _parent_gone)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
    elif parent is not None:
        threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent",
                         daemon=True).start()
    return parent is None or os.getppid() == parent


def _parent_gone(signum, frame):
    """The parent-death signal, taken once: the kernel sends it again each time this process is
    handed to the next thread of its dying parent (3 in 4 ends of a caller with threads sent
    two), and a second interrupt would strike the flow's cleanup."""
    signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt


def _watch_parent(parent: int) -> None:
    import _thread

    while os.getppid() == parent:
        time.sleep(1.0)
    _thread.interrupt_main()


def main(argv: list[str] | None = None) -> int:
    """The child: run one resolved spec on its store with run.run_sweep; see the module docstring."""
    import argparse

    from .run import ClusterError, run_sweep

    parser = argparse.ArgumentParser(prog="python -m tokensweep.flows.child")
    parser.add_argument("spec_json")
    parser.add_argument("store")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--scheduler")
    parser.add_argument("--scheduler-file")
    parser.add_argument("--no-report", dest="report", action="store_false")
    args = parser.parse_args(argv)
    try:
        summary = run_sweep(json.loads(Path(args.spec_json).read_text()), args.store,
                            workers=args.workers, scheduler=args.scheduler,
                            scheduler_file=args.scheduler_file, progress=False, report=args.report)
    except (SpecError, StoreError, ClusterError, OSError, RuntimeError) as err:
        kind = type(err).__name__ if isinstance(err, (SpecError, StoreError, ClusterError)) else (
            "StoreError" if isinstance(err, OSError) else "SweepError")  # OSError: the store's folder
        print(RESULT + json.dumps({"error": str(err), "kind": kind}), flush=True)
        print(f"error: {err}", file=sys.stderr)
        return 1 if kind == "SweepError" else 2
    print(RESULT + json.dumps(summary, default=str), flush=True)
    return 0

if __name__ == "__main__":
    from .fast_exit import exit_now

    try:
        code = main() if die_with_parent() else 130
    except KeyboardInterrupt:  # the parent's Ctrl-C, or its end: a partition running in a thread
        code = 130  # of this process (flows/in_process.py) must not hold the exit until it ends
    except SystemExit as end:  # rich's answer to a stderr whose reader (the parent) is gone
        code = 0 if end.code is None else end.code if isinstance(end.code, int) else 1
    exit_now(code)
