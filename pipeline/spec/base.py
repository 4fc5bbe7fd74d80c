"""The building blocks of every spec: the fields all models share (`SweepBase`), the grid of the
models on the sphere (`Grid`), the time discretisation (`Time`), and the helpers plug-ins use to
normalise an axis and refuse a value (`axis_values`, `refuse`, `short`).

Nothing here knows the models: a plug-in imports this module, and the loader (`spec.load`) joins
the plug-ins' spec classes through the registry. Convenient spellings are accepted at the edge and
normalised once, here (as ``dask.array.normalize_chunks`` does for chunks):

* an axis may be a scalar, a list, or ``{start, stop, num}`` (inclusive, like
  ``numpy.linspace``); it always becomes a sorted tuple of unique values;
* ``time.checkpoints`` may be a count (equally spaced, ending at T) or a list of
  times, each a whole number of layers; it always becomes layer counts.

Anything impossible is refused before a single trajectory runs, with a message that names the
field, shows the value and says how to fix it. No kernel (no numba) is imported.

>>> time = Time(T=1.0, layers=100, checkpoints=4)
>>> time.checkpoint_layers, time.h
((25, 50, 75, 100), 0.01)
>>> Grid(beta={"start": 0, "stop": 2, "num": 3}, d=4, n=2).beta
(0.0, 1.0, 2.0)
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from .scales import default_store

MAX_CELLS = 10_000_000
SPEC_ATTR = "tokensweep_spec"  # the store attribute holding a cube's spec as JSON
MAX_LAYERS = 100_000_000
MAX_CHECKPOINTS = 100_000
MAX_TRAJECTORIES = 1_000_000_000  # per cell; the store-size limit usually refuses far fewer
MAX_TOKENS = MAX_DIMENSION = 4096  # n and d: an n x n attention or a d x d matrix per trajectory
MAX_STORE_GIB = 20.0  # default of the store-size limit; TOKENSWEEP_MAX_STORE_GIB changes it


def axis_values(value: Any, field: str) -> list:
    """Normalise one grid axis: scalar, list, or {start, stop, num}."""
    if isinstance(value, dict):
        unknown = set(value) - {"start", "stop", "num"}
        if unknown or not {"start", "stop", "num"} <= set(value):
            raise ValueError(
                f"a range needs exactly the keys start, stop, num; got {sorted(value)}"
            )
        num = value["num"]
        if not isinstance(num, int) or isinstance(num, bool) or not 1 <= num <= MAX_CELLS:
            raise ValueError(f"num must be an integer from 1 to {MAX_CELLS}, got {short(num)}")
        for key in ("start", "stop"):
            end = value[key]
            if not isinstance(end, (int, float)) or isinstance(end, bool) or not math.isfinite(end):
                raise ValueError(f"{key} must be a finite number, got {short(end)}: "
                                 "write e.g. {start: 0, stop: 3, num: 7}")
        with np.errstate(all="ignore"):
            values = np.linspace(float(value["start"]), float(value["stop"]), num).round(12)
        if not np.isfinite(values).all():
            raise ValueError("the range from start to stop overflows: use smaller numbers")
        return values.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise ValueError("is empty: give at least one value")
        return list(value)
    return [value]


def nonnegative_axis(values: tuple, name: str) -> tuple:
    """A grid axis of strengths (e.g. a noise's sigma): finite and >= 0, or a one-line refusal."""
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"contains {bad}, but {name} must be finite and >= 0: remove them")
    return values


def short(value: Any, limit: int = 60) -> str:
    """repr of a value, cut to one short line for an error message."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GridAxes(Strict):
    """Every field a grid axis: a value, a list or a range (`axis_values`), stored sorted, each
    value once. Each model's grid derives from it (`Grid`, the network's `NetworkGrid`)."""

    @field_validator("*", mode="before")
    @classmethod
    def _normalise(cls, value, info):
        return axis_values(value, info.field_name)

    @field_validator("*", mode="after")
    @classmethod
    def _sorted_unique(cls, values, info):
        if len(set(values)) != len(values):
            raise ValueError(f"has repeated values {list(values)}: list each value once")
        return tuple(sorted(values))


class Grid(GridAxes):
    """Grid axes shared by the models on the sphere: beta, d, n; and the optional axis rho0, the
    initial overlap of an `init: overlap` start (`pipeline/spec/starts.py`)."""

    beta: tuple[float, ...]
    d: tuple[int, ...]
    n: tuple[int, ...]
    rho0: Optional[tuple[float, ...]] = None

    @model_serializer(mode="wrap")
    def _present_axes(self, handler):  # an absent optional axis is not written: specs stay as they were
        return {k: v for k, v in handler(self).items() if v is not None}

    @field_validator("rho0")
    @classmethod
    def _overlap(cls, values):
        bad = [v for v in values if not -1 <= v <= 1]
        if bad:
            raise ValueError(f"contains {bad}, but an overlap lies in [-1, 1]: remove them from grid.rho0")
        return values

    @field_validator("beta")
    @classmethod
    def _finite_beta(cls, values):
        bad = [v for v in values if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(
                f"contains {bad}, but beta must be finite and >= 0: remove them from grid.beta"
            )
        return values

    @field_validator("d")
    @classmethod
    def _sphere_dimension(cls, values):
        bad = [v for v in values if v < 2]
        if bad:
            raise ValueError(
                f"contains {bad}, but the sphere needs d >= 2: remove them from grid.d"
            )
        return values

    @field_validator("d", "n")
    @classmethod
    def _bounded(cls, values, info):
        limit = MAX_DIMENSION if info.field_name == "d" else MAX_TOKENS
        bad = [v for v in values if v > limit]
        if bad:
            raise ValueError(f"contains {short(bad)}, more than tokensweep runs ({limit}): "
                             f"remove them from grid.{info.field_name}")
        return values

    @field_validator("n")
    @classmethod
    def _token_count(cls, values):
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"contains {bad}, but a sweep needs n >= 1 tokens: remove them from grid.n")
        return values


class Time(Strict):
    """Horizon T, number of layers L (step h = T/L) and the checkpoints recorded."""

    T: float = Field(gt=0, allow_inf_nan=False)
    layers: int = Field(ge=1, le=MAX_LAYERS)
    checkpoints: Union[int, tuple[float, ...]] = 1

    @field_validator("checkpoints")
    @classmethod
    def _positive(cls, value):
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be a positive count or a list of times, got {value}")
        if isinstance(value, tuple) and not value:
            raise ValueError("is an empty list: give at least one time")
        if (len(value) if isinstance(value, tuple) else value) > MAX_CHECKPOINTS:
            raise ValueError(f"records more than {MAX_CHECKPOINTS} checkpoints: record fewer")
        return value

    @model_validator(mode="after")
    def _checkpoints_on_layers(self):
        _ = self.checkpoint_layers  # raises with a clear message when impossible
        return self

    @property
    def h(self) -> float:
        return self.T / self.layers

    @property
    def checkpoint_layers(self) -> tuple[int, ...]:
        if isinstance(self.checkpoints, int):
            if self.checkpoints > self.layers:
                raise ValueError(
                    f"checkpoints = {self.checkpoints} exceeds layers = {self.layers}: "
                    "record at most one checkpoint per layer"
                )
            k = np.arange(1, self.checkpoints + 1)
            return tuple(int(v) for v in (k * self.layers) // self.checkpoints)
        layers = []
        for t in self.checkpoints:
            exact = t / self.h
            if not (0 < t <= self.T * (1 + 1e-12)) or abs(exact - round(exact)) > 1e-6:
                raise ValueError(
                    f"checkpoint time {t} is not a whole number of layers in (0, T] "
                    f"(h = T/layers = {self.h:g}): use multiples of h"
                )
            layers.append(int(round(exact)))
        if layers[-1] != self.layers or sorted(set(layers)) != layers:
            raise ValueError(
                f"checkpoints {list(self.checkpoints)} must increase and end at T = {self.T}"
            )
        return tuple(layers)

    @property
    def checkpoint_times(self) -> np.ndarray:
        return np.asarray(self.checkpoint_layers, dtype=np.float64) * self.h

    def layers_at(self, layers: int) -> tuple[int, ...]:
        """The checkpoint layer counts at another layer count (a `layers` grid axis), same times.

        Raises ValueError naming the first checkpoint time that is not a whole number of layers.
        """
        h = self.T / layers
        exact = self.checkpoint_times / h
        for t, e in zip(self.checkpoint_times, exact):
            if abs(e - round(e)) > 1e-6:
                raise ValueError(f"checkpoint time {t:g} is not a whole number of layers at layers = "
                                 f"{layers} (h = {h:g}): choose checkpoint times that are multiples "
                                 "of every h, or layer counts that are multiples of the checkpoint count")
        return tuple(int(round(e)) for e in exact)


class SweepBase(Strict):
    """Fields every model's sweep has."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    time: Time
    trajectories: int = Field(ge=1)
    eps: float = Field(default=1e-3, gt=0, lt=1)
    seed: int = Field(default=0, ge=0)
    store: str = ""
    partition_traj: int = Field(default=0, ge=0)

    @field_validator("trajectories")
    @classmethod
    def _bounded_trajectories(cls, value):
        if value > MAX_TRAJECTORIES:
            raise ValueError(f"{value} per cell is more than tokensweep runs (at most "
                             f"{MAX_TRAJECTORIES}, for a store of at most {MAX_STORE_GIB:g} GiB by "
                             "default): lower it")
        return value

    @field_validator("store")
    @classmethod
    def _path_like(cls, value):
        if "\x00" in value:
            raise ValueError("contains a NUL character: give a plain path")
        return value[len("file://"):] if value.startswith("file://") else value  # a local path

    @model_validator(mode="after")
    def _defaults_and_size(self):
        if not self.store:
            object.__setattr__(self, "store", default_store(self.name))
        if self.partition_traj == 0:
            object.__setattr__(self, "partition_traj", self.trajectories)
        if self.n_cells > MAX_CELLS:
            raise ValueError(
                f"grid has {self.n_cells} cells, more than {MAX_CELLS}: split the sweep"
            )
        return self

    @property
    def axes(self) -> dict[str, tuple]:
        """Grid axes in storage order (the order of the grid's fields); an optional axis left out
        (None) is no axis."""
        return {name: getattr(self.grid, name) for name in type(self.grid).model_fields
                if getattr(self.grid, name) is not None}

    @property
    def n_cells(self) -> int:
        return math.prod(len(v) for v in self.axes.values())

    def canonical(self) -> dict:
        """The spec as plain data, without where it is stored (a store may move)."""
        return self.model_dump(mode="json", exclude={"store"})


def refuse(field: str, text: str) -> ValueError:
    """A cross-field error from a model validator, reported under `field` (see `_format_errors`)."""
    return ValueError(f"{field}: {text}")
