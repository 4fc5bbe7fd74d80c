"""Flow overhead, strong scaling and planner cost of tokensweep sweeps (numbers, not pass/fail).

    $ python benchmarks/bench_flow.py              # all of it (~15 min on 2 quiet cores)
    $ python benchmarks/bench_flow.py planner      # one part: overhead | scaling | planner |
                                                   #   status | large

* overhead: the sweep flow on a store whose partitions are all done (what a Retry or a
  resume costs when nothing is left), and a 100-partition sweep of trivial partitions:
  wall time against the kernel time summed from the store's started/finished.
* scaling: a CPU-bound sweep on a 1-worker and on a 2-worker LocalCluster (target >= 1.8x).
* planner: a 10^6-cell grid is planned, its store initialised and its pending partitions
  grouped into tasks (< 30 s, < 1 GiB).
* status: `tokensweep status` of a store whose partitions are all done (statuses and timings
  written straight through zarr), before (one chunk per partition, forced, at 10^4 partitions,
  extrapolated) and after (batched chunks, at 10^6, target < 10 s); files per store.
* large: a sweep of trivial partitions (T 0.1, 100 layers, 1 trajectory: ~1 ms each) on 2
  workers, before (one task per partition, forced, 200 partitions) and after (batched, 10^5
  partitions, target: overhead < 10 % of kernel time); files per store.
  Overhead = wall - kernel / 2, the wall of the flow run without its report (the report is
  timed apart); kernel: started->finished summed from the store (for a batch: the partition's
  seeds, kernel call and placement in memory; for an unbatched partition also its output
  writes). What simulate_partition alone costs per partition is printed beside it.

Clusters are started once per measurement and passed by address, so their start-up is
not counted. Prefect runs against a server of its own (temporary PREFECT_HOME) unless
PREFECT_API_URL is set. Run it on a quiet machine: the load average is printed.
"""

from __future__ import annotations

import contextlib
import math
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


# trivial partitions for the large sweep: 500 x 200 cells x 1 trajectory = 10^5 partitions
LARGE = {**BASE, "name": "large", "grid": {"beta": {"start": 0.0, "stop": 3.0, "num": 500},
                                           "d": list(range(2, 202)), "n": 2},
         "time": {"T": 0.1, "layers": 100, "checkpoints": 1}, "trajectories": 1}
LARGE_BEFORE = {**LARGE, "grid": {**LARGE["grid"], "beta": 1.0}}  # 200 partitions
# the status benchmark: beta x d cells, 1 trajectory each
STATUS_SPEC = {**BASE, "name": "status", "time": {"T": 0.1, "layers": 10, "checkpoints": 1},
               "trajectories": 1}


def status_spec(partitions: int) -> dict:
    return {**STATUS_SPEC, "grid": {"beta": {"start": 0.0, "stop": 3.0, "num": 1000},
                                    "d": list(range(2, 2 + partitions // 1000)), "n": 2}}


@contextlib.contextmanager
def unbatched():
    """Today's layout and tasks before batches: one chunk and one task per partition."""
    from tokensweep.pipeline import plan

    saved, plan.BATCH_ABOVE = plan.BATCH_ABOVE, 10**12
    try:
        yield
    finally:
        plan.BATCH_ABOVE = saved


def count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def sweep_on(spec: dict, store: Path, workers: int, report: bool = True) -> tuple[float, dict]:
    """Wall time of one flow run on a fresh LocalCluster of `workers` (start-up excluded)."""
    from tokensweep.flows.clusters import start_local_cluster
    from tokensweep.flows.run import run_sweep
    from tokensweep.flows.server import ensure_server

    ensure_server()  # started once, not timed: a sweep finds it running
    import tokensweep.flows.sweep  # noqa: F401  the CLI has imported it before a flow starts
    with start_local_cluster(workers, preload=False) as cluster:
        warm = cluster.get_client()  # import tokensweep and compile the kernels on each worker
        warm.run(_warm_up)
        started = time.perf_counter()
        summary = run_sweep(spec, str(store), scheduler=cluster.scheduler_address, progress=False,
                            report=report)
        wall = time.perf_counter() - started
        warm.close()
    return wall, summary


def _warm_up():
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import parse_sweep

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


def status(folder: Path) -> None:
    """`tokensweep status` on a store of all-done partitions: unbatched 10^4, batched 10^6."""
    before = status_of(folder / "before.zarr", 10_000, batched=False)
    after = status_of(folder / "after.zarr", 1_000_000, batched=True)
    print(f"status: before (one chunk per partition) extrapolated to 10^6 partitions: "
          f"{before * 100:.0f} s; after (batched): {after:.1f} s (target < 10 s)")


def status_of(store: Path, partitions: int, batched: bool) -> float:
    import zarr

    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.lifecycle import prepare_store

    sweep = parse_sweep(status_spec(partitions), store=str(store))
    with contextlib.nullcontext() if batched else unbatched():
        prepare_store(sweep, store)
    started = time.perf_counter()
    group = zarr.open_group(str(store), mode="r+", use_consolidated=False)
    for name, value in (("started", 1.7e9), ("finished", 1.7e9 + 1.0), ("status", 1)):
        group[name][...] = value
    written = time.perf_counter() - started
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(["tokensweep", "status", str(store)], capture_output=True, text=True,
                         check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    chunks = group["status"].chunks
    print(f"status: {partitions:,} partitions, {'batched' if batched else 'unbatched'} (status "
          f"chunks {chunks}): `tokensweep status` {wall:.1f} s wall, "
          f"{after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime:.1f} s CPU "
          f"({out.stdout.splitlines()[0]}); {count_files(store):,} files "
          f"(statuses and timings only; written in {written:.0f} s)")
    return wall


def large(folder: Path) -> None:
    """A large sweep of trivial partitions: batched on 10^5, unbatched on 200."""
    after = large_sweep(folder / "after.zarr", LARGE, "after, batched")
    with unbatched():
        before = large_sweep(folder / "before.zarr", LARGE_BEFORE, "before, unbatched")
    print(f"large: overhead per partition {before * 1e3:.2f} ms before, {after * 1e3:.3f} ms after")


def large_sweep(store: Path, spec: dict, what: str) -> float:
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.report import write_report
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.cube import open_cube, store_batch_shape

    wall, summary = sweep_on(spec, store, workers=2, report=False)
    kernel = kernel_seconds(store)
    n = summary["partitions"]
    overhead = wall - kernel / 2
    print(f"large ({what}): {n:,} partitions in batches of {math.prod(store_batch_shape(store))}, "
          f"2 workers: wall {wall:.1f} s (no report) = kernel/2 {kernel / 2:.1f} s "
          f"+ overhead {overhead:.1f} s ({100 * overhead / kernel:.1f} % of kernel {kernel:.1f} s; "
          f"{1e3 * overhead / n:.2f} ms per partition); {count_files(store):,} files in the store")
    # what the spans hold besides the numba kernel: the partition's set-up and placement
    sweep = parse_sweep(spec)
    plan = Plan(sweep)
    sample = range(0, n, max(1, n // 2000))
    started = time.perf_counter()
    for index in sample:
        simulate_partition(sweep, plan[index], plan)
    bare = (time.perf_counter() - started) / len(sample)
    print(f"large ({what}): span {1e3 * kernel / n:.2f} ms per partition, of which "
          f"simulate_partition {1e3 * bare:.2f} ms (in this process, {len(sample)} partitions)")
    started = time.perf_counter()
    with open_cube(store) as ds:
        write_report(ds, store.with_suffix(".report"))
    print(f"large ({what}): report {time.perf_counter() - started:.1f} s")
    return overhead / n


def planner(folder: Path) -> None:
    """Run in a child process so that its peak memory is its own."""
    out = subprocess.run([sys.executable, __file__, "_planner_child", str(folder)],
                         capture_output=True, text=True, check=True)
    print(out.stdout.strip())


def _planner_child(folder: Path) -> None:
    from tokensweep.pipeline.execute import pending_partitions
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.cube import store_batch_shape
    from tokensweep.pipeline.store.lifecycle import prepare_store

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    started = time.perf_counter()
    sweep = parse_sweep(MILLION)
    plan = Plan(sweep)
    last = plan[len(plan) - 1]
    planned = time.perf_counter()
    prepare_store(sweep, folder / "million.zarr")
    done = time.perf_counter()
    tasks = plan.batches_of(pending_partitions(sweep, folder / "million.zarr"),
                            store_batch_shape(folder / "million.zarr"))
    grouped = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"planner: {sweep.n_cells:,} cells, {len(plan):,} partitions (last {plan.label(last)}): "
          f"plan {planned - started:.3f} s, store initialised {done - planned:.1f} s "
          f"(target < 30 s), {len(tasks)} tasks from the pending partitions in "
          f"{grouped - done:.1f} s; traced peak {peak:.0f} MiB, max RSS {rss:.0f} MiB "
          f"({rss_before:.0f} MiB after imports; target < 1024 MiB)")


def main(parts: list[str]) -> None:
    if parts[:1] == ["_planner_child"]:
        return _planner_child(Path(parts[1]))
    parts = parts or ["overhead", "scaling", "planner", "status", "large"]
    from tokensweep.flows.server import ensure_server, stop_server

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    own_server = not os.environ.get("PREFECT_API_URL")
    ensure_server()
    try:
        for part in parts:
            with tempfile.TemporaryDirectory(dir=HOME) as folder:
                {"overhead": overhead, "scaling": scaling, "planner": planner, "status": status,
                 "large": large}[part](Path(folder))
    finally:
        if own_server:
            stop_server()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
