"""What an idle Dask cluster costs: a scheduler and two single-threaded workers (with their
nannies), started as `dask scheduler` / `dask worker`, left alone, their CPU time summed over a
minute. Distributed's defaults against `flows.clusters.IDLE_CONFIG` (what every cluster tokensweep
starts runs with), in the same run, side by side. Numbers, not pass/fail.

    $ python benchmarks/bench_cluster_idle.py            # ~1.5 min
    $ python benchmarks/bench_cluster_idle.py 120        # seconds measured (default 60)

Measured on a 2-core VM: defaults 0.154 of a core, IDLE_CONFIG 0.036.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tokensweep.flows.clusters import IDLE_CONFIG, dask_environment

BIN = Path(sys.executable).parent


def start_cluster(env: dict[str, str]) -> list[subprocess.Popen]:
    folder = tempfile.mkdtemp(prefix="bench-idle-")
    scheduler_file = Path(folder) / "scheduler.json"
    common = dict(env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                  start_new_session=True)
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(scheduler_file)], **common)]
    while not scheduler_file.exists():
        time.sleep(0.2)
    for _ in range(2):
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", "--scheduler-file", str(scheduler_file),
                                       "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"], **common))
    return procs


def cpu_seconds(procs: list[subprocess.Popen]) -> float:
    total = 0.0
    for proc in procs:
        parent = psutil.Process(proc.pid)
        for p in [parent, *parent.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
    return total


def main(argv: list[str]) -> None:
    seconds = float(argv[0]) if argv else 60.0
    clusters = {"distributed's defaults": start_cluster({}),
                "IDLE_CONFIG": start_cluster(dask_environment(IDLE_CONFIG))}
    try:
        time.sleep(25)  # both started and settled (workers registered)
        before = {name: cpu_seconds(procs) for name, procs in clusters.items()}
        time.sleep(seconds)
        print(f"idle scheduler + 2 workers, {seconds:.0f} s, load average {os.getloadavg()[0]:.2f}:")
        for name, procs in clusters.items():
            print(f"  {name:24s} {(cpu_seconds(procs) - before[name]) / seconds:.3f} of a core")
    finally:
        for procs in clusters.values():
            for proc in procs:
                os.killpg(proc.pid, 9)


if __name__ == "__main__":
    main(sys.argv[1:])
