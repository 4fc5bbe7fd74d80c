"""`tokensweep catalog`, `plan` and `models`: looking before running.

`catalog` lists the ready-to-run specs with their cost and the figure or claim each reproduces
(its row of catalog/README.md); `plan` says what `run` would do (partitions, store size, and
the time, from a calibration run of a few trajectories of the first cell), writing nothing;
`models` lists the models a spec can name.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path
from typing import Optional

import typer

from .common import (
    PartitionOpt,
    ScaleOpt,
    SpecArg,
    StoreOpt,
    WorkersOpt,
    fail,
    first_line,
    local_problem,
    partitions_to_run,
    workers_phrase,
)


def catalog_claims() -> dict[str, str]:
    """`name.yaml` -> its "paper, figure or claim" cell in catalog/README.md's table."""
    from ...pipeline.spec.load import CATALOG

    try:
        text = (CATALOG / "README.md").read_text(encoding="utf-8")
    except OSError:
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\| `([^`]+)` \|([^|]+)\|", text, re.M)}


def _claim(path: Path, sweep, claims: dict[str, str]) -> str:
    """What a catalog entry reproduces: its README row, else its first comment line or description."""
    if path.name in claims:
        return claims[path.name]
    first = path.read_text(encoding="utf-8").splitlines()[:1]
    if first and first[0].startswith("#"):
        return first[0].lstrip("#").strip()
    return " ".join(sweep.description.split())


def _cost(sweep) -> str:
    cells, traj, layers = sweep.n_cells, sweep.trajectories, sweep.time.layers
    return f"{cells} cells x {traj} traj x {layers} layers = {cells * traj * layers:.2g}"


def catalog(scale: Optional[str] = ScaleOpt):
    """List the catalog: name, model, cost (cells x trajectories x layers), figure or claim."""
    from ...pipeline.errors import SpecError
    from ...pipeline.spec.load import CATALOG, load_sweep, read_spec
    from ...pipeline.spec.scales import scales_of

    claims = catalog_claims()
    for path in sorted(CATALOG.glob("*.yaml")):
        if scale not in (None, "small") and scale not in scales_of(read_spec(path)):
            continue  # no such size of this entry
        try:
            sweep = load_sweep(path, scale)
        except SpecError as err:
            typer.echo(f"{path.stem:22s} invalid: {err}")
            continue
        typer.echo(f"{path.stem:22s} {sweep.model:22s} {_cost(sweep):42s} {_claim(path, sweep, claims)}")


CALIBRATION_SAMPLES = 5  # partitions timed by `plan`: the first, the last, 3 spread between
FULL_RUN_S = 2.0  # the longest calibration call over all of a spec's layers (`_calibrate`)


def _calibrate(sweep, target_s: float = 0.2) -> tuple[float, str]:
    """Seconds per trajectory per layer on this core: the mean over a few partitions spread over
    the grid (the first, the last and golden-ratio picks between: the cost of a step grows with
    d and n, not linearly, and a pick of equally spaced ones can alias with the grid's order),
    with the spec's checkpoints per layer (recording a checkpoint can cost more than a step:
    [GLPR-P] Fig. 3 at the paper's scale records one every layer).

    A warm-up call first (it compiles the kernel, or loads it from numba's cache), then one
    trajectory of the partition over more and more layers (the spec's step h), then more of its
    trajectories, until one call takes `target_s` or runs the whole partition. Where that stopped
    short of the spec's layers and a trajectory over all of them would take at most `FULL_RUN_S`
    at the rate seen, the rate is taken over all layers instead: what a trajectory costs beside
    its steps (its start, the final reductions) depends on its state at T (the flow in R^d
    solves one LP per cluster centre at T: ~66 ms per trajectory at 10 layers of glpre-hull's
    paper scale, where 40 tokens are still apart, ~20 ms at T, where they have merged).
    """
    import numpy as np

    from ...pipeline.models import get_model
    from ...pipeline.plan import Plan

    for key in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(key, "1")  # as on a worker: one thread per partition
    model, plan = get_model(sweep.model), Plan(sweep)
    golden = (math.sqrt(5) - 1) / 2
    picks = {0, len(plan) - 1} | {int((k * golden) % 1 * len(plan))
                                  for k in range(1, CALIBRATION_SAMPLES - 1)}
    parts = [plan[i] for i in sorted(picks)]
    rates = [_seconds_per_layer(sweep, model, plan, part, target_s) for part in parts]
    if len(parts) == 1:
        return rates[0], f"at {plan.label(parts[0])}"
    return float(np.mean(rates)), (f"the mean of {len(parts)} partitions from "
                                   f"{plan.label(parts[0])} to {plan.label(parts[-1])}")


def _seconds_per_layer(sweep, model, plan, part, target_s: float) -> float:
    from ...pipeline.seeds import trajectory_rngs

    coords = plan.coords(part)
    per_layer = len(sweep.time.checkpoint_layers) / sweep.time.layers

    def seconds(ntraj: int, layers: int) -> float:
        checkpoints = min(layers, max(1, round(per_layer * layers)))
        short_time = sweep.time.model_copy(
            update={"T": sweep.time.h * layers, "layers": layers, "checkpoints": checkpoints})
        short = sweep.model_copy(update={"time": short_time})
        cell = {**coords, "layers": layers} if "layers" in coords else coords  # a layers axis
        rngs = trajectory_rngs(sweep.seed, cell, range(ntraj))
        start = time.perf_counter()
        model.simulate(short, cell, rngs)
        return time.perf_counter() - start

    seconds(1, 1)
    size = part.traj_stop - part.traj_start
    # one trajectory while the layers grow: its fixed costs (start, final reductions) are spread
    # over as many layers as a call of target_s holds (four trajectories held a quarter)
    ntraj, layers = 1, min(sweep.time.layers, 10)
    while (elapsed := seconds(ntraj, layers)) < target_s:
        if layers < sweep.time.layers:
            layers = min(sweep.time.layers, layers * 10)
        elif ntraj < size:  # every layer: more trajectories, as a partition spreads its call's set-up
            ntraj = min(size, ntraj * 4)
        else:
            break
    full = sweep.time.layers
    if layers < full and elapsed / ntraj * full / layers <= FULL_RUN_S:
        ntraj, layers = 1, full
        while (elapsed := seconds(ntraj, layers)) < target_s and ntraj < size:
            ntraj = min(size, ntraj * 4)
    return elapsed / (ntraj * layers)


def duration(seconds: float) -> str:
    """A duration as one reads it: 970 ms, 4.2 s, 38 s, 3.4 min, 2.1 h."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def partition_sizes(sweep) -> str:
    """How many trajectories a partition holds: "200 trajectories each", or, where a cell's
    last block is shorter, "200 trajectories each, the last of each cell 10"."""
    each, last = sweep.partition_traj, sweep.trajectories % sweep.partition_traj
    if sweep.trajectories <= each:
        return f"{sweep.trajectories} trajectories each"
    return f"{each} trajectories each" + (f", the last of each cell {last}" if last else "")


def plan(
    spec: str = SpecArg,
    store: Optional[str] = StoreOpt,
    scale: Optional[str] = ScaleOpt,
    partition_traj: Optional[int] = PartitionOpt,
    workers: Optional[int] = WorkersOpt,
    calibrate: bool = typer.Option(True, help="time a few trajectories of the first cell to "
                                              "estimate the run time"),
):
    """What `run SPEC` would do (partitions, store size, time), computing and writing nothing."""
    import numpy as np

    from ...pipeline.errors import SpecError, StoreError
    from ...pipeline.plan import Plan
    from ...pipeline.prepare import prepare_sweep
    from ...pipeline.spec.load import estimated_store_bytes, format_bytes
    from ...pipeline.store.lock import describe_lock
    from ..clusters import local_workers
    from ..gpus import gpus_for
    from .compiling import kernels_cold

    try:
        sweep = prepare_sweep(spec, scale=scale, store=store, partition_traj=partition_traj,
                              check_lock=False)
    except (SpecError, StoreError) as err:
        fail(str(err))
    partitions, todo = len(Plan(sweep)), partitions_to_run(sweep)
    size = estimated_store_bytes(sweep)
    typer.echo(f"{sweep.name}: {sweep.model}, {sweep.n_cells} cells x {sweep.trajectories} "
               f"trajectories x {sweep.time.layers} layers, {len(sweep.time.checkpoint_layers)} "
               "checkpoints")
    typer.echo(f"partitions: {partitions} ({partition_sizes(sweep)}), {todo} to run")
    typer.echo(f"store: {sweep.store}: {size} bytes ({format_bytes(size)}) uncompressed")
    lock = describe_lock(sweep.store)
    if lock:
        typer.echo(f"locked by {lock}")
    if not calibrate:
        return
    problem = local_problem(sweep)
    if problem:  # the calibration computes here
        fail(f"{problem} (`tokensweep plan --no-calibrate` plans without timing)")
    if kernels_cold(sweep.model):
        typer.echo(f"compiling {sweep.model}'s kernels (first run of this model only) ...")
    try:
        per_layer, label = _calibrate(sweep)
    except Exception as err:  # the kernel itself failed: say so in one line
        fail(f"the calibration run failed ({type(err).__name__}: {first_line(err)}): "
              "`tokensweep plan --no-calibrate` plans without timing", code=1)
    # one per usable core (affinity, cgroups) by default; a cuda spec: one per GPU seen here
    gpus = gpus_for(sweep)
    n_workers = local_workers(workers, gpus=gpus)
    layers = float(np.mean(sweep.axes.get("layers", sweep.time.layers)))  # a layers axis: its mean
    per_partition = per_layer * layers * sweep.partition_traj
    core = per_layer * layers * sweep.trajectories * sweep.n_cells * todo / partitions
    wall = math.ceil(todo / n_workers) * per_partition
    typer.echo(f"{'GPU' if gpus else 'core'} time: ~{duration(core)} ({per_layer * 1e6:.3g} us per "
               f"trajectory and layer, {label}); wall time: ~{duration(wall)} on "
               f"{workers_phrase(n_workers, gpus)}, plus the start of the cluster and the report")


def models():
    """List the models a spec can name."""
    from ...pipeline.models import registry

    for model in registry().values():
        typer.echo(f"{model.name:24s} {model.summary}")
