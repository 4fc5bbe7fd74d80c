"""Observables over time in a cube: the spec fields `record`, `record_bins`, `record_direction`,
the outputs they add and the trailing dimensions those have (docs/models.md section 10).

`record` lists names of `kernels.vocabulary.OBSERVABLES`; each becomes an output variable of the
cube beside the model's defaults, over (grid..., t, traj) and its own trailing dimensions:

    bin        overlap_hist, record_bins equal bins of [-1, 1]; coordinate: the bin centres,
               attribute bin_edges
    i, j       gram, n x n
    token, component   states, n x d

gram and states are sized by n and d, so they need one n and one d per spec (a cube has one
shape per variable); everything else works over any grid. No numba here: specs and stores are
shaped from the declarations alone.

>>> from tokensweep.pipeline.spec.load import parse_sweep
>>> s = parse_sweep({"name": "r", "model": "stochastic_transformer", "grid": {"beta": 1, "d": 3, "n": 4},
...     "time": {"T": 1.0, "layers": 10}, "trajectories": 2,
...     "record": ["overlap_hist", "gram"], "record_bins": 4})
>>> dimension_sizes(s)
{'bin': 4, 'i': 4, 'j': 4, 'token': 4, 'component': 3}
>>> dimension_coords(s, ("bin",))["bin"][0].tolist()
[-0.75, -0.25, 0.25, 0.75]
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...kernels.vocabulary import DEFAULT_RECORD_BINS, OBSERVABLES, PER_CELL_SHAPED, RECORD_NAMES
from .base import SweepBase, refuse

MAX_RECORD_BINS = 100_000


class RecordingSweep(SweepBase):
    """A sweep of a model on the sphere that can record observables over time (module docstring).

    record: names of observables, each an extra output; record_bins: bins of overlap_hist;
    record_direction: the v of hemisphere_margin (d numbers, normalised; default: the max-margin
    direction of each trajectory's start, `kernels/observables.py`).
    """

    record: tuple[Literal[RECORD_NAMES], ...] = ()
    record_bins: int = Field(default=DEFAULT_RECORD_BINS, ge=1, le=MAX_RECORD_BINS)
    record_direction: Optional[tuple[float, ...]] = None

    @field_validator("record", mode="before")
    @classmethod
    def _one_or_more(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("record")
    @classmethod
    def _once_each(cls, value):
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {repeated} more than once: list each observable once")
        return value

    @model_validator(mode="after")
    def _recordable(self):
        for name in PER_CELL_SHAPED:
            if name not in self.record:
                continue
            for axis in ("n", "d"):
                values = self.axes.get(axis, ())
                if len(values) != 1:
                    raise refuse("record", f"{name} is sized by n and d, but grid.{axis} has "
                                  f"{len(values)} values {list(values)}: give grid.{axis} one "
                                  f"value (one spec per {axis}) or drop {name} from record")
        if self.record_direction is not None:
            if "hemisphere_margin" not in self.record:
                raise refuse("record_direction", "is the direction of hemisphere_margin, which "
                             "record does not list: add hemisphere_margin to record or remove it")
            v = np.asarray(self.record_direction, float)
            d = self.axes.get("d", ())
            if len(d) != 1 or v.size != d[0]:
                raise refuse("record_direction", f"has {v.size} numbers, but it needs one d and "
                             f"d numbers (grid.d is {list(d)}): give d numbers and one grid.d")
            if not (np.isfinite(v).all() and np.any(v != 0)):
                raise refuse("record_direction", f"{list(v)} is not a direction: give finite "
                             "numbers, not all zero")
        return self


def record_arguments(sweep) -> dict:
    """The kernels' keywords for the observables of `sweep` (none for a sweep without them)."""
    if not getattr(sweep, "record", ()):
        return {}
    return {"record": tuple(sweep.record), "record_bins": sweep.record_bins,
            "direction": None if sweep.record_direction is None else
            np.asarray(sweep.record_direction, dtype=np.float64)}


def declared_outputs(model, sweep) -> dict:
    """The outputs a cube of `sweep` holds: the model's, the observables it records, then those an
    option of the model adds (`Model.spec_outputs`)."""
    extra = {name: OBSERVABLES[name] for name in getattr(sweep, "record", ())
             if name not in model.outputs}
    return {**model.outputs, **extra, **model.spec_outputs(sweep)}


def dimension_sizes(sweep) -> dict[str, int]:
    """Sizes of the outputs' trailing dimensions: bin always, the n- and d-sized ones where the
    grid has one n and one d."""
    sizes = {"bin": int(getattr(sweep, "record_bins", DEFAULT_RECORD_BINS))}
    n, d = sweep.axes.get("n", ()), sweep.axes.get("d", ())
    if len(n) == 1:
        sizes.update(i=int(n[0]), j=int(n[0]), token=int(n[0]))
    if len(d) == 1:
        sizes["component"] = int(d[0])
    sizes.update(getattr(sweep, "trailing_sizes", {}))  # a model's own trailing dimensions
    return sizes


def output_shape(spec, sizes: dict) -> tuple[int, ...]:
    """The trailing shape of one output (after (traj,) or (traj, t))."""
    return tuple(sizes[dim] for dim in spec.extra_dims)


def dimension_coords(sweep, dims) -> dict:
    """{dim: (values, attrs)} of the trailing dimensions `dims` (bin: centres, and edges in attrs;
    the CF names are the store's, `store.coord_attrs`)."""
    sizes = dimension_sizes(sweep)
    coords = {}
    for dim in dims:
        attrs = {}
        if dim == "bin":
            edges = np.linspace(-1.0, 1.0, sizes["bin"] + 1)
            values = (edges[:-1] + edges[1:]) / 2
            attrs["bin_edges"] = edges.tolist()
        else:
            values = np.arange(sizes[dim])
        coords[dim] = (values, attrs)
    return coords
