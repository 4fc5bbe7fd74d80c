"""A sweep's numba kernels, loaded before its first partition, in the forkserver that local
workers are forked from (`forkserver.py`).

numba loads a model's compiled kernels from its cache the first time each is called: ~1.3 s of
one core for the stochastic transformer, which each local worker paid inside its first
partition (2.7 s each where two loaded at once on two cores). A fork of a process that ran
one tiny partition of the same configuration has them loaded already.

The forkserver can only be told module names to import, so it gets the sweep in the
environment variable SPEC_VARIABLE, read and removed as it imports this module.
"""

from __future__ import annotations

import json
import os

SPEC_VARIABLE = "TOKENSWEEP_FORKSERVER_SPEC"
MAX_SPEC_CHARS = 65536  # an environment variable is at most 128 kB on Linux


def tiny(spec: dict) -> dict:
    """`spec` cut to one trajectory and one layer per checkpoint (or, with layers as a grid
    axis, its smallest count alone): the same kernels, next to no work."""
    time, grid = dict(spec.get("time") or {}), dict(spec.get("grid") or {})
    if grid.get("layers"):
        grid["layers"] = [min(grid["layers"])]
        time.pop("layers", None)
    else:
        checkpoints = time.get("checkpoints", 1)
        count = checkpoints if isinstance(checkpoints, int) else len(checkpoints)
        time.update(layers=count, checkpoints=count)
    cut = {k: v for k, v in spec.items() if k not in ("store", "partition_traj", "threads")}
    return {**cut, "grid": grid, "trajectories": 1, "time": time}  # one thread: none left to a fork


def load(spec: dict) -> None:
    """Run the first partition of `tiny(spec)`, writing nothing; not for a GPU sweep (the
    workers and commands that fork from this process would lose the device). A spec it cannot
    cut (or any other failure) loads nothing: the run itself meets and reports the same
    problem, and the workers load their kernels as they go."""
    from ..pipeline.execute import simulate_partition
    from ..pipeline.plan import Plan
    from ..pipeline.spec.load import parse_sweep

    if spec.get("device", "cpu") != "cpu":  # CUDA, once initialised, is lost to every fork
        return
    try:
        sweep = parse_sweep(tiny(spec))
        simulate_partition(sweep, Plan(sweep)[0])
    except Exception:  # noqa: BLE001 - an optimisation only (docstring)
        pass


def as_variable(spec: dict) -> str | None:
    """`spec` as an environment variable's value (for `from_variable` in a child process), or
    None where it is not JSON or too long to pass."""
    try:
        text = json.dumps(spec)
    except (TypeError, ValueError):
        return None
    return text if len(text) <= MAX_SPEC_CHARS else None


def from_variable(name: str) -> dict | None:
    """The sweep `as_variable` put in the environment variable `name`, removed from this
    process's environment (its own forks need not see it); None where there is none, or not
    ours (a process that fails here would warm up nothing, or start no worker)."""
    try:
        spec = json.loads(os.environ.pop(name, "null"))
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


_forkserver_spec = from_variable(SPEC_VARIABLE)
if _forkserver_spec is not None:  # the forkserver's preload (forkserver.start)
    load(_forkserver_spec)
