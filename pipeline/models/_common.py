"""What several built-in plug-ins share: the kernels' time arguments (per cell, with `layers` as a grid
axis: `LayersGrid`), the two-token closed form's applicability, the grid coordinates of one cell and
the starts as kernel arguments."""

from __future__ import annotations

from typing import Optional

import numpy as np
from pydantic import field_validator

from ..spec.base import MAX_LAYERS, Grid, SweepBase, axis_values, refuse
from ..spec.starts import drawn_by_kernel, starts_of

CLOSED_FORM_ATTENTIONS = ("sa", "usa")  # the two-token and equiangular closed forms (Q = K = I)


def time_arguments(sweep: SweepBase) -> dict:
    """T, layers, checkpoint layer counts and the clustering threshold, as every kernel takes them."""
    return {
        "T": sweep.time.T,
        "layers": sweep.time.layers,
        "checkpoint_layers": np.asarray(sweep.time.checkpoint_layers, dtype=np.int64),
        "eps": sweep.eps,
    }


class LayersGrid(Grid):
    """beta, d, n, and optionally `layers` (h = T / layers per cell: a step's O(h) effect in one sweep)."""

    layers: Optional[tuple[int, ...]] = None

    @field_validator("layers")
    @classmethod
    def _layer_counts(cls, values):
        bad = [v for v in values if not 1 <= v <= MAX_LAYERS]
        if bad:
            raise ValueError(f"contains {bad}, but a layer count is from 1 to {MAX_LAYERS}: remove "
                             "them from grid.layers")
        return values


def implied_layers(data):
    """A raw spec whose grid has a layers axis and whose time has none: time.layers is its largest."""
    if not isinstance(data, dict):
        return data
    grid, time = data.get("grid"), data.get("time")
    if isinstance(grid, dict) and isinstance(time, dict) and "layers" not in time \
            and grid.get("layers") is not None:
        try:
            largest = max(int(v) for v in axis_values(grid["layers"], "layers"))
        except (TypeError, ValueError):
            return data  # reported by the grid's own validation
        data = {**data, "time": {**time, "layers": largest}}
    return data


def check_layers_axis(sweep: SweepBase) -> None:
    """time.layers among grid.layers, and every checkpoint a whole number of layers at every count."""
    if getattr(sweep.grid, "layers", None) is None:
        return
    if sweep.time.layers not in sweep.grid.layers:
        raise refuse("time.layers", f"{sweep.time.layers} is not among grid.layers "
                     f"{list(sweep.grid.layers)}: remove time.layers (the largest is used)")
    for layers in sweep.grid.layers:
        try:
            sweep.time.layers_at(layers)
        except ValueError as err:
            raise refuse("time.checkpoints", str(err)) from None


def without_axis_layers(sweep: SweepBase, out: dict) -> dict:
    """A canonical spec without time.layers where layers is a grid axis (its largest value by
    default, so a store may grow along the axis)."""
    if getattr(sweep.grid, "layers", None) is not None:
        out["time"] = {k: v for k, v in out["time"].items() if k != "layers"}
    return out


def cell_time_arguments(sweep: SweepBase, coords: dict) -> dict:
    """`time_arguments` at the cell's layer count where layers is a grid axis."""
    args = time_arguments(sweep)
    if "layers" in coords:
        layers = int(coords["layers"])
        args.update(layers=layers,
                    checkpoint_layers=np.asarray(sweep.time.layers_at(layers), dtype=np.int64))
    return args


def sphere_cell(coords: dict) -> dict:
    """The (n, d, beta) of a cell as the kernels take them."""
    return {"n": int(coords["n"]), "d": int(coords["d"]), "beta": float(coords["beta"])}


def two_token_cells(cells: dict, fill: float = np.nan):
    """(beta, d, n, mask) broadcast over the cells; mask: where a two-token closed form may apply."""
    beta = np.asarray(cells["beta"], float)
    d, n = np.broadcast_arrays(beta, np.asarray(cells["d"]), np.asarray(cells.get("n", 2)))[1:]
    mask = (n == 2) & (d >= 2) & ~np.isnan(beta)
    return beta, d, n, mask


def start_argument(sweep: SweepBase, coords: dict, rngs) -> dict:
    """{} where the kernel draws its uniform start itself, else {"x0": the partition's starts}
    (`pipeline/spec/starts.py`), drawn first from each trajectory's Generator."""
    return {} if drawn_by_kernel(sweep.init) else {"x0": starts_of(sweep, coords, rngs)}
