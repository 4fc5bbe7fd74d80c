"""Fixed start-up of a sweep, and what a partition's started..finished span adds to its kernel.

    $ python benchmarks/bench_startup.py              # all of it (~3 min on 2 quiet cores)
    $ python benchmarks/bench_startup.py tiny parts   # some: tiny|parts|speedup|warm|partition|batch

* tiny: `tokensweep run tiny.yaml` end to end (one trajectory, the Prefect server running, numba's
  cache warm: a first run warms both and is not counted), with its timeline read from STORE.log:
  CLI start -> flow run begins -> first partition done -> report done -> flow done -> exit;
  cold (each command imports for itself: no process is kept between commands), 3 runs.
  Target: under 6 s.
* parts: each piece on its own, in a fresh process: the CLI's imports, the flow's imports
  (Prefect), a worker's imports and its first partition (numba loading the cached kernels), a
  2-worker LocalCluster's start and close, the report of the tiny cube.
* speedup: a sweep of ~30 s of kernel (8 equal partitions, its layers calibrated on this machine) end
  to end on 1 and on 2 local workers, start-up included. Target: >= 1.7x.
* warm: tiny and the 30-second sweep on a warm cluster (`tokensweep cluster start`) of 1, then 2
  workers: no worker start-up nor close in the sweep.
* partition: one partition of 2048 trajectories at n = d = 32 (sphere_flow, one checkpoint): the
  bare kernel (model.simulate on ready generators) against `run_partition`'s started..finished
  span, in particle-steps/s. Target: the span within ~10 % of the kernel.
* batch: one batch (~200) of the trivial partitions of bench_flow's `large` sweep, in this process:
  `run_batch` (reads, kernels, placement, flushes) against the bare kernels alone.

Uses the Prefect server `tokensweep run` uses (started if none runs; never stopped here). The
machine's load average is printed: compare the ratios of one run, not numbers across runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

FOLDER = Path(tempfile.mkdtemp(prefix="bench-startup-"))
TINY = {"name": "tiny", "model": "stochastic_transformer", "attention": "sa",
        "grid": {"beta": [1.0], "d": [3], "n": 2}, "time": {"T": 1.0, "layers": 100, "checkpoints": 1},
        "trajectories": 1, "seed": 1}
# 8 equal partitions; `calibrated` sets the layers for ~30 s of kernel in all on this machine
THIRTY = {"name": "thirty", "model": "stochastic_transformer", "attention": "sa",
          "grid": {"beta": [0.5, 1.0, 1.5, 2.0], "d": 3, "n": 2},
          "time": {"T": 2.0, "layers": 2_000_000, "checkpoints": 2}, "trajectories": 8,
          "partition_traj": 4, "seed": 7}
PARTITION = {"name": "partition", "model": "sphere_flow", "attention": "sa", "integrator": "euler",
             "init": "uniform_sphere", "delta": 1.0e-3, "grid": {"beta": [1.0], "d": [32], "n": 32},
             "time": {"T": 10.0, "layers": 100, "checkpoints": 1}, "trajectories": 2048, "seed": 3}
LOG_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) \| \w+\s*\| (.*)$")


def tokensweep() -> list[str]:
    found = shutil.which("tokensweep", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "tokensweep.flows.cli"]


def write_spec(spec: dict, name: str) -> Path:
    path = FOLDER / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**spec, "store": str(FOLDER / f"{name}.zarr")}))
    return path


def run_cli(spec: Path, store: Path, *extra: str, env: dict | None = None
            ) -> tuple[float, float, float]:
    """(start, end, wall) of one `tokensweep run`, on a fresh store; `env`: added to this
    process's environment."""
    for old in (store, store.with_suffix(".report"), store.with_name(store.name + ".log")):
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    start = time.time()
    done = subprocess.run([*tokensweep(), "run", str(spec), "--store", str(store), "-q", *extra],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    end = time.time()
    if done.returncode:
        sys.exit(f"tokensweep run failed ({done.returncode}): {done.stderr.strip()}")
    return start, end, end - start


def timeline(log: Path, start: float, end: float) -> list[tuple[str, float]]:
    """Seconds since the CLI started at which the flow's milestones were logged."""
    day = dt.datetime.fromtimestamp(start).date()
    marks = {"flow run begins": r"Beginning flow run", "cluster ready": r"Dask dashboard|Connecting to",
             "first partition done": r"Task run '(?!report).*Finished", "report done": r"Task run 'report",
             "flow done": r"Flow run .* Finished in state"}
    seen: dict[str, float] = {}
    for line in log.read_text().splitlines():
        m = LOG_LINE.match(line)
        if not m:
            continue
        h, mi, s, ms, text = m.groups()
        at = dt.datetime.combine(day, dt.time(int(h), int(mi), int(s), int(ms) * 1000)).timestamp()
        for name, pattern in marks.items():
            if name not in seen and re.search(pattern, text):
                seen[name] = at - start
    return [("cli start", 0.0), *sorted(seen.items(), key=lambda kv: kv[1]), ("exit", end - start)]


def tiny() -> None:
    spec, store = write_spec(TINY, "tiny"), FOLDER / "tiny.zarr"
    run_cli(spec, store)  # warms the server connection, numba's cache and the OS's file cache
    walls = []
    for attempt in range(3):
        start, end, wall = run_cli(spec, store)
        walls.append(wall)
        steps = timeline(store.with_name(store.name + ".log"), start, end)
        print(f"tiny: run {attempt + 1}: {wall:.2f} s end to end; timeline (s): "
              + ", ".join(f"{name} {at:.2f}" for name, at in steps))
    print(f"tiny: best of 3: {min(walls):.2f} s, median {sorted(walls)[1]:.2f} s (target < 6 s)")


def in_fresh_process(code: str) -> dict:
    """Run `code` in a new interpreter; it prints one JSON line of timings."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    if out.returncode:
        sys.exit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


PARTS_CODE = """
import json, sys, time
t0 = time.perf_counter()
{body}
print(json.dumps(took))
"""


def parts() -> None:
    spec = write_spec(TINY, "parts")
    pieces = {
        "CLI imports (tokensweep.flows.cli)":
            "import tokensweep.flows.cli\ntook = {'s': time.perf_counter() - t0}",
        "flow imports (flows.sweep: Prefect, the pipeline)":
            "import tokensweep.flows.sweep\ntook = {'s': time.perf_counter() - t0}",
        "prefect_dask + distributed imports":
            "import prefect_dask, distributed\ntook = {'s': time.perf_counter() - t0}",
        "worker: pipeline imports + spec":
            "from tokensweep.pipeline.spec.load import load_sweep\nimport tokensweep.pipeline.execute\n"
            f"load_sweep({str(spec)!r})\ntook = {{'s': time.perf_counter() - t0}}",
        "worker: first partition (numba cache load)":
            "from tokensweep.pipeline.spec.load import load_sweep\nfrom tokensweep.pipeline.execute import "
            f"simulate_partition\nfrom tokensweep.pipeline.plan import Plan\ns = load_sweep({str(spec)!r})\n"
            "t0 = time.perf_counter()\nsimulate_partition(s, Plan(s)[0])\n"
            "took = {'s': time.perf_counter() - t0}",
        "2-worker LocalCluster: start":
            "from tokensweep.flows.clusters import start_local_cluster\nt0 = time.perf_counter()\n"
            "c = start_local_cluster(2, preload=False)\nt1 = time.perf_counter()\nc.close()\n"
            "took = {'s': t1 - t0, 'close': time.perf_counter() - t1}",
        "2-worker LocalCluster: start, worker modules preloaded":
            "from tokensweep.flows.clusters import start_local_cluster\nt0 = time.perf_counter()\n"
            "c = start_local_cluster(2)\nt1 = time.perf_counter()\nc.close()\n"
            "took = {'s': t1 - t0, 'close': time.perf_counter() - t1}",
    }
    for what, body in pieces.items():
        took = in_fresh_process(PARTS_CODE.format(body=body))
        extra = f", close {took['close']:.2f} s" if "close" in took else ""
        print(f"parts: {what}: {took['s']:.2f} s{extra}")
    store = FOLDER / "tiny.zarr"
    if store.is_dir():
        took = in_fresh_process(PARTS_CODE.format(body=(
            "from tokensweep.pipeline.store.location import report_dir\nfrom tokensweep.pipeline.report import "
            f"write_report\nfrom tokensweep.pipeline.store.cube import open_cube\nt0 = time.perf_counter()\n"
            f"ds = open_cube({str(store)!r})\nwrite_report(ds, report_dir({str(store)!r}))\n"
            "took = {'s': time.perf_counter() - t0}")))
        print(f"parts: report of the tiny cube (imports included): {took['s']:.2f} s")


def partition_spans(store: Path) -> tuple[float, float, float]:
    """(sum of the partitions' started..finished spans, first start, last finish) of a store."""
    import zarr

    group = zarr.open_group(str(store), mode="r")
    started, finished = (group[name][...].ravel() for name in ("started", "finished"))
    return float((finished - started).sum()), float(started.min()), float(finished.max())


def calibrated(spec: dict, seconds: float = 30.0) -> dict:
    """`spec` with as many layers as make its partitions' kernels take `seconds` in all here."""
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import parse_sweep

    probe = {**spec, "time": {**spec["time"], "layers": 200_000}, "store": str(FOLDER / "probe.zarr")}
    sweep = parse_sweep(probe)
    plan = Plan(sweep)
    simulate_partition(sweep, plan[0])  # numba's cache, once
    t0 = time.perf_counter()
    simulate_partition(sweep, plan[0])
    per_partition = time.perf_counter() - t0
    layers = int(200_000 * seconds / (per_partition * len(plan)) / 1000) * 1000
    return {**spec, "time": {**spec["time"], "layers": layers}}


def speedup() -> None:
    """Besides the two walls: the partitions' summed spans (kernel + write) and the fixed part
    (wall minus first start..last finish). Spans longer on 2 workers than on 1 mean the two
    did not get two cores (the machine's other load, the flow's process, the Prefect server):
    then no start-up cut reaches 2x; `cores used` = summed spans / (last finish - first start)."""
    thirty = calibrated(THIRTY)
    spec = write_spec(thirty, "thirty")
    print(f"speedup: {thirty['time']['layers']:,} layers: ~30 s of kernel on one core")
    run_cli(write_spec(TINY, "warm"), FOLDER / "warm.zarr")  # the server, numba's cache
    walls = {}
    for workers in (1, 2):
        store = FOLDER / f"thirty-{workers}.zarr"
        start, _, walls[workers] = run_cli(spec, store, "--workers", str(workers))
        spans, first, last = partition_spans(store)
        print(f"speedup: {workers} worker(s): {walls[workers]:.1f} s end to end; "
              f"partitions {spans:.1f} s summed, computing {first - start:.1f}.."
              f"{last - start:.1f} s (cores used {spans / (last - first):.2f}), fixed "
              f"{walls[workers] - (last - first):.1f} s")
    print(f"speedup: 2 workers over 1: {walls[1] / walls[2]:.2f}x (target >= 1.7x)")


def warm() -> None:
    """tiny and the 30-second sweep on a warm cluster (`tokensweep cluster start --workers N`,
    kept in a temporary TOKENSWEEP_HOME; the Prefect server is the usual one): 1 then 2 workers."""
    from tokensweep.flows.server import ensure_server

    env = {"PREFECT_API_URL": ensure_server(), "TOKENSWEEP_HOME": str(FOLDER / "home")}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    tiny_spec, spec, walls = write_spec(TINY, "tiny-warm"), write_spec(calibrated(THIRTY), "thirty-warm"), {}
    try:
        for workers in (1, 2):
            subprocess.run([*tokensweep(), "cluster", "start", "--workers", str(workers)], check=True,
                           capture_output=True)
            run_cli(tiny_spec, FOLDER / "tiny-warm.zarr")  # each worker's first partition loads numba's cache
            tiny = min(run_cli(tiny_spec, FOLDER / "tiny-warm.zarr")[2] for _ in range(2))
            walls[workers] = run_cli(spec, FOLDER / f"thirty-warm-{workers}.zarr")[2]
            print(f"warm: {workers} warm worker(s): tiny {tiny:.2f} s, "
                  f"30-second sweep {walls[workers]:.1f} s end to end")
            subprocess.run([*tokensweep(), "cluster", "stop"], capture_output=True)
    finally:
        subprocess.run([*tokensweep(), "cluster", "stop"], capture_output=True)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    print(f"warm: 2 warm workers over 1: {walls[1] / walls[2]:.2f}x (target >= 1.7x)")


def partition() -> None:
    from tokensweep.pipeline.execute import run_partition, simulate_partition
    from tokensweep.pipeline.models import get_model
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.seeds import trajectory_rngs
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.cube import create_store

    sweep = parse_sweep({**PARTITION, "store": str(FOLDER / "partition.zarr")})
    plan, model = Plan(sweep), get_model(sweep.model)
    part = plan[0]
    coords = plan.coords(part)
    simulate_partition(sweep, part)  # numba's cache, once
    steps = sweep.trajectories * 32 * sweep.time.layers
    kernel, span = [], []
    for attempt in range(3):
        rngs = trajectory_rngs(sweep.seed, coords, range(part.traj_start, part.traj_stop))
        t0 = time.perf_counter()
        model.simulate(sweep, coords, rngs)
        kernel.append(time.perf_counter() - t0)
        store = FOLDER / f"partition-{attempt}.zarr"
        create_store(sweep, store)
        span.append(run_partition(sweep, store, 0).seconds)  # its stored finished - started
    k, s = min(kernel), min(span)
    print(f"partition: 2048 trajectories, n = d = 32, {sweep.time.layers} steps, one checkpoint: "
          f"kernel {steps / k:.3g} particle-steps/s ({k:.2f} s), started..finished span "
          f"{steps / s:.3g} ({s:.2f} s): the span takes {100 * (s / k - 1):.0f} % longer (best of 3)")


def batch() -> None:
    """One batch of trivial partitions (bench_flow's `large` ones) in this process: run_batch's
    wall (reads, kernels, placement, flushes) against the bare kernels of the same partitions."""
    from tokensweep.pipeline.batch import run_batch
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.models import get_model
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.seeds import trajectory_rngs
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.cube import store_batch_shape
    from tokensweep.pipeline.store.lifecycle import prepare_store

    spec = {"model": "stochastic_transformer", "attention": "sa", "seed": 7, "name": "large",
            "grid": {"beta": {"start": 0.0, "stop": 3.0, "num": 500}, "d": list(range(2, 202)),
                     "n": 2}, "time": {"T": 0.1, "layers": 100, "checkpoints": 1}, "trajectories": 1}
    sweep = parse_sweep({**spec, "store": str(FOLDER / "large-0.zarr")})
    plan, model = Plan(sweep), get_model(sweep.model)
    simulate_partition(sweep, plan[0])  # numba's cache, once
    kernel, wall = [], []
    for attempt in range(2):  # alternating, best of 2 each: the load moves
        store = FOLDER / f"large-{attempt}.zarr"
        prepare_store(sweep, store)
        members = plan.batch_partitions(0, store_batch_shape(store))
        t0 = time.perf_counter()
        for index in members:
            part = plan[int(index)]
            coords = plan.coords(part)
            model.simulate(sweep, coords, trajectory_rngs(sweep.seed, coords,
                                                          range(part.traj_start, part.traj_stop)))
        kernel.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_batch(sweep, store, 0)
        wall.append(time.perf_counter() - t0)
    kernel, wall = min(kernel), min(wall)
    print(f"batch: {len(members)} trivial partitions of a {len(plan):,}-partition store in one "
          f"batch: run_batch {wall:.2f} s, bare kernels {kernel:.2f} s: overhead "
          f"{100 * (wall / kernel - 1):.0f} % of kernel time ({1e3 * (wall - kernel) / len(members):.2f}"
          f" ms per partition; Prefect's per-task cost not included)")


PARTS = {"tiny": tiny, "parts": parts, "speedup": speedup, "warm": warm, "partition": partition,
         "batch": batch}


def main(names: list[str]) -> None:
    unknown = set(names) - set(PARTS)
    if unknown:
        sys.exit(f"unknown part(s) {sorted(unknown)}: choose from {', '.join(PARTS)}")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")
    try:
        for name in names or list(PARTS):
            PARTS[name]()
    finally:
        shutil.rmtree(FOLDER, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the end")


if __name__ == "__main__":
    main(sys.argv[1:])
