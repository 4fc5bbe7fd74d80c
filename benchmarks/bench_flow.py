"""Flow overhead, strong scaling and planner cost of tokensweep sweeps (numbers, not pass/fail).

    $ python benchmarks/bench_flow.py              # all of it (~3 min on 2 quiet cores)
    $ python benchmarks/bench_flow.py planner      # one part: overhead | scaling | planner

* overhead: the sweep flow on a store whose partitions are all done (what a Retry or a
  resume costs when nothing is left), and a 100-partition sweep of trivial partitions:
  wall time against the kernel time summed from the store's started/finished.
* scaling: a CPU-bound sweep on a 1-worker and on a 2-worker LocalCluster (target >= 1.8x).
* planner: a 10^6-cell grid is planned and its store initialised (< 30 s, < 1 GiB).

Clusters are started once per measurement and passed by address, so their start-up is
not counted. Prefect runs against a server of its own (temporary PREFECT_HOME) unless
PREFECT_API_URL is set. Run it on a quiet machine: the load average is printed.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="bench-flow-"))
os.environ.setdefault("TOKENSWEEP_HOME", str(HOME / "tokensweep"))
os.environ.setdefault("PREFECT_HOME", str(HOME / "prefect"))
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

BASE = {"model": "stochastic_transformer", "attention": "sa", "seed": 7}
TRIVIAL = {**BASE, "name": "trivial", "grid": {"beta": {"start": 0.0, "stop": 3.0, "num": 50},
                                               "d": [3, 4], "n": 2},
           "time": {"T": 0.1, "layers": 10, "checkpoints": 1}, "trajectories": 1}
CPU_BOUND = {**BASE, "name": "cpu", "grid": {"beta": [0.5, 1.0, 1.5, 2.0], "d": 3, "n": 2},
             "time": {"T": 2.0, "layers": 30_000_000, "checkpoints": 2}, "trajectories": 4,
             "partition_traj": 2}  # 8 partitions of ~6 s each
MILLION = {**BASE, "name": "million", "grid": {"beta": {"start": 0.0, "stop": 3.0, "num": 1000},
                                               "d": list(range(2, 1002)), "n": 2},
           "time": {"T": 1.0, "layers": 10, "checkpoints": 2}, "trajectories": 100}


def sweep_on(spec: dict, store: Path, workers: int) -> tuple[float, dict]:
    """Wall time of one flow run on a fresh LocalCluster of `workers` (start-up excluded)."""
    import dask
    from distributed import LocalCluster

    from tokensweep.flows.run import LOCAL_CLUSTER_CONFIG, run_sweep

    with dask.config.set(LOCAL_CLUSTER_CONFIG), LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        warm = cluster.get_client()  # import tokensweep and compile the kernels on each worker
        warm.run(_warm_up)
        started = time.perf_counter()
        summary = run_sweep(spec, str(store), scheduler=cluster.scheduler_address, progress=False)
        wall = time.perf_counter() - started
        warm.close()
    return wall, summary


def _warm_up():
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec import parse_sweep

    sweep = parse_sweep({**TRIVIAL, "name": "warm"})
    simulate_partition(sweep, Plan(sweep)[0])


def kernel_seconds(store: Path) -> float:
    import xarray as xr

    with xr.open_zarr(store, decode_times=False) as ds:  # seconds since the epoch, as stored
        return float((ds.finished - ds.started).sum())


def overhead(folder: Path) -> None:
    store = folder / "trivial.zarr"
    wall, summary = sweep_on(TRIVIAL, store, workers=2)
    kernel = kernel_seconds(store)
    n = summary["partitions"]
    print(f"overhead: {n} trivial partitions on 2 workers: wall {wall:.1f} s, kernel (summed "
          f"started->finished) {kernel:.2f} s, overhead {1000 * (wall - kernel / 2) / n:.0f} ms "
          f"per partition (report included)")
    wall, summary = sweep_on(TRIVIAL, store, workers=2)
    print(f"overhead: all-done sweep of {n} partitions: wall {wall:.1f} s "
          f"(computed {summary['computed']}, report included)")


def scaling(folder: Path) -> None:
    times = {}
    for workers in (1, 2):
        store = folder / f"cpu-{workers}.zarr"
        times[workers], summary = sweep_on(CPU_BOUND, store, workers)
        print(f"scaling: {summary['partitions']} CPU-bound partitions on {workers} worker(s): "
              f"wall {times[workers]:.1f} s, kernel {kernel_seconds(store):.1f} s")
    print(f"scaling: speed-up 1 -> 2 workers: {times[1] / times[2]:.2f}x (target >= 1.8x)")


def planner(folder: Path) -> None:
    """Run in a child process so that its peak memory is its own."""
    out = subprocess.run([sys.executable, __file__, "_planner_child", str(folder)],
                         capture_output=True, text=True, check=True)
    print(out.stdout.strip())


def _planner_child(folder: Path) -> None:
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec import parse_sweep
    from tokensweep.pipeline.store import prepare_store

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    started = time.perf_counter()
    sweep = parse_sweep(MILLION)
    plan = Plan(sweep)
    last = plan[len(plan) - 1]
    planned = time.perf_counter()
    prepare_store(sweep, folder / "million.zarr")
    done = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"planner: {sweep.n_cells:,} cells, {len(plan):,} partitions (last {plan.label(last)}): "
          f"plan {planned - started:.3f} s, store initialised {done - planned:.1f} s "
          f"(target < 30 s); traced peak {peak:.0f} MiB, max RSS {rss:.0f} MiB "
          f"({rss_before:.0f} MiB after imports; target < 1024 MiB)")


def main(parts: list[str]) -> None:
    if parts[:1] == ["_planner_child"]:
        return _planner_child(Path(parts[1]))
    parts = parts or ["overhead", "scaling", "planner"]
    from tokensweep.flows.server import ensure_server, stop_server

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    own_server = not os.environ.get("PREFECT_API_URL")
    ensure_server()
    try:
        for part in parts:
            with tempfile.TemporaryDirectory(dir=HOME) as folder:
                {"overhead": overhead, "scaling": scaling, "planner": planner}[part](Path(folder))
    finally:
        if own_server:
            stop_server()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
