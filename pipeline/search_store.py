"""The adaptive boundary search through stores (`search` has the design): one store per value of the
other grid axes and trajectory count, grown round by round by the points the search asks for, each
sweep run by the caller (`flows/cli/boundary.py` runs it as a flow on one local cluster).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Callable

import numpy as np

from .analysis.antipodal import antipodal_table, any_antipodal_table
from .errors import SpecError, StoreError
from .search import OUTCOMES, Boundary, Counts, Design, describe, key, search
from .spec.base import SweepBase
from .spec.load import parse_sweep
from .store.cube import open_cube, stored_sweep
from .store.layout import DONE

__all__ = ["boundary_search", "check_request", "default_axis", "boundary_folder", "StoreEvaluate",
           "CountStores"]

# -- through the store: one store per value of the other axes, grown round by round -----------

def default_axis(sweep: SweepBase) -> str:
    """sigma for a model with a sigma axis (the hybrid model's noise), else beta."""
    return "sigma" if "sigma" in sweep.axes and len(sweep.axes["sigma"]) > 1 else "beta"


def check_request(sweep: SweepBase, axis: str, outcome: str, design: Design) -> None:
    """Refuse, with one line naming the option and the fix, what cannot be searched."""
    if not 0 < design.level < 1:
        raise SpecError(f"--level: {design.level:g} is outside (0, 1): give a probability strictly "
                        "between 0 and 1, e.g. --level 0.1")
    if not (design.width > 0 and math.isfinite(design.width)):
        raise SpecError(f"--width: {design.width:g} must be a positive number, e.g. --width 0.05")
    if not 0 < design.confidence < 1:
        raise SpecError(f"--confidence: {design.confidence:g} is outside (0, 1): e.g. --confidence 0.95")
    if axis not in sweep.axes:
        raise SpecError(f"--axis: the spec has no grid axis {axis!r} (it has {', '.join(sweep.axes)}): "
                        "search along beta, or sigma for the hybrid model")
    values = sweep.axes[axis]
    if len(values) < 2:
        raise SpecError(f"grid.{axis}: a single value {values[0]:g}; the search needs a range: give "
                        f"grid.{axis} its two ends (e.g. [0.5, 3.0])")
    if design.width >= values[-1] - values[0]:
        raise SpecError(f"--width: {design.width:g} is not narrower than the range of grid.{axis} "
                        f"[{values[0]:g}, {values[-1]:g}]: give a smaller width")
    if outcome not in OUTCOMES:
        raise SpecError(f"--outcome: unknown {outcome!r}: choose one of {', '.join(OUTCOMES)}")
    if design.max_trajectories < sweep.trajectories:
        raise SpecError(f"--max-trajectories: {design.max_trajectories} is fewer than the spec's "
                        f"{sweep.trajectories} trajectories: raise it")
    from .models import get_model
    from .spec.recording import declared_outputs

    outputs = declared_outputs(get_model(sweep.model), sweep)
    needs = "overlap_min" if outcome == "any_pair" else "cluster_class"
    if needs not in outputs:
        raise SpecError(f"--outcome: {outcome} needs the output {needs}, which model "
                        f"{sweep.model} does not write: choose another outcome")


def boundary_folder(sweep: SweepBase) -> Path:
    """Default folder of a search's stores: beside the spec's store, `NAME.boundary`."""
    store = Path(sweep.store)
    return store.with_name(store.name.removesuffix(".zarr") + ".boundary")


def other_cells(sweep: SweepBase, axis: str) -> list[dict]:
    """Every combination of the other axes' values, in grid order."""
    others = {k: v for k, v in sweep.axes.items() if k != axis}
    return [dict(zip(others, combo)) for combo in itertools.product(*others.values())]


def cell_tag(coords: dict) -> str:
    return "-".join(f"{k}{v:g}" for k, v in coords.items()) or "all"


class StoreEvaluate:
    """`Evaluate` through a store: grow it by the points and trajectories asked for, run the sweep
    (`run(sweep)`, the Prefect flow) when it does not hold them yet, and count the outcome."""

    def __init__(self, sweep: SweepBase, axis: str, coords: dict, outcome: str, path: Path,
                 run: Callable[[SweepBase], None]):
        self.sweep, self.axis, self.coords, self.outcome = sweep, axis, coords, outcome
        self.path, self.run = Path(path), run
        self.sweeps_run = 0

    def __call__(self, points: list[float], n: int) -> Counts:
        if not self._holds(points, n):
            old = stored_sweep(self.path) if (self.path / "zarr.json").is_file() else None
            values = sorted(set(points) | set(old.axes[self.axis] if old else ()))
            self.run(self.spec(values, max(n, old.trajectories if old else 0)))
            self.sweeps_run += 1
            if not self._holds(points, n):
                raise StoreError(f"{self.path}: the sweep left points of {points} at {n} "
                                 "trajectories not done: rerun the same command")
        return self.count(points, n)

    def spec(self, values: list[float], trajectories: int) -> SweepBase:
        """The base spec on this cell, with `values` on the searched axis."""
        data = self.sweep.model_dump(mode="json")
        data["grid"] = {**data["grid"], **{k: [v] for k, v in self.coords.items()},
                        self.axis: list(values)}
        data.update(name=f"{self.sweep.name}-boundary-{cell_tag(self.coords)}", store=str(self.path),
                    trajectories=int(trajectories), partition_traj=self.sweep.partition_traj)
        return parse_sweep(data)

    def _holds(self, points: list[float], n: int) -> bool:
        if not (self.path / "zarr.json").is_file():
            return False
        old = stored_sweep(self.path)
        if old.trajectories < n or not set(points) <= set(old.axes[self.axis]):
            return False
        with open_cube(self.path) as ds:
            status = ds["status"].sel({self.axis: points}).isel(
                block=slice(0, -(-n // old.partition_traj))).values
        return bool((status == DONE).all())

    def count(self, points: list[float], n: int) -> Counts:
        """(k, N) of the first n trajectories at each point, at the last checkpoint."""
        with open_cube(self.path) as ds:
            ds = ds.sel({self.axis: points}).isel(traj=slice(0, n))
            if self.outcome == "any_pair":
                table = any_antipodal_table(ds).isel(t=-1)
                k = table.n_any
            else:
                table = antipodal_table(ds, theory=lambda cells: np.nan)
                k = table.n_antipodal if self.outcome == "antipodal" else table.n_single
            other = [d for d in k.dims if d != self.axis]
            k, total = k.squeeze(other), table.n_traj.squeeze(other)
            return {key(x): (int(k.sel({self.axis: x})), int(total.sel({self.axis: x})))
                    for x in points}

    def trajectories(self) -> int:
        """Every trajectory the store computed: points x trajectories."""
        if not (self.path / "zarr.json").is_file():
            return 0
        old = stored_sweep(self.path)
        return len(old.axes[self.axis]) * old.trajectories


class CountStores:
    """`Evaluate` through one `StoreEvaluate` store per trajectory count N, ``CELL-N{N}.zarr``:
    a look at (points, N) grows only the store of N, so a point is computed at the counts it is
    looked at, not at every count the search reaches. Trajectory j of a point has the same
    numbers in every store (`seeds.py`), so the counts, and the search, are those of one store."""

    def __init__(self, sweep: SweepBase, axis: str, coords: dict, outcome: str, folder: Path,
                 run: Callable[[SweepBase], None]):
        self.args = (sweep, axis, coords, outcome)
        self.folder, self.tag, self.run = Path(folder), cell_tag(coords), run
        self.stores: dict[int, StoreEvaluate] = {}

    def __call__(self, points: list[float], n: int) -> Counts:
        if n not in self.stores:
            self.stores[n] = StoreEvaluate(*self.args, self.folder / f"{self.tag}-N{n}.zarr",
                                           self.run)
        return self.stores[n](points, n)

    @property
    def sweeps_run(self) -> int:
        return sum(store.sweeps_run for store in self.stores.values())

    def trajectories(self) -> int:
        """Every trajectory the cell's stores computed (in this search or an earlier one)."""
        paths = self.folder.glob(f"{self.tag}-N*.zarr")
        return sum(StoreEvaluate(*self.args, path, self.run).trajectories() for path in paths)


def boundary_search(sweep: SweepBase, design: Design, run: Callable[[SweepBase], None], *,
                    axis: str = "beta", outcome: str = "antipodal", folder: Path | None = None,
                    progress: Callable[[str], None] | None = None) -> list[Boundary]:
    """One search per value of the other axes, each in its own store under `folder`."""
    check_request(sweep, axis, outcome, design)
    folder = Path(folder) if folder else boundary_folder(sweep)
    start = [key(x) for x in sweep.axes[axis]]
    results = []
    for coords in other_cells(sweep, axis):
        evaluate = CountStores(sweep, axis, coords, outcome, folder, run)
        found = search(evaluate, start, sweep.trajectories, design, coords)
        found.trajectories = evaluate.trajectories()
        results.append(found)
        if progress:
            progress(describe(found, axis))
    return results
