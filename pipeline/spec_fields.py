"""The building blocks every sweep spec shares: grid axes, time, and the common fields.

Each model's sweep (pipeline/spec.py, pipeline/spec_flows.py) is a `SweepBase` with its own
`grid` class and options. Axis spellings are normalised here, once.
"""

from __future__ import annotations

import math
from typing import Any, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_CELLS = 10_000_000
MAX_LAYERS = 100_000_000


class SpecError(ValueError):
    """A spec that cannot run; the message names the field and the fix."""


def _axis_values(value: Any, field: str) -> list:
    """Normalise one grid axis: scalar, list, or {start, stop, num}."""
    if isinstance(value, dict):
        unknown = set(value) - {"start", "stop", "num"}
        if unknown or not {"start", "stop", "num"} <= set(value):
            raise ValueError(
                f"a range needs exactly the keys start, stop, num; got {sorted(value)}"
            )
        num = value["num"]
        if not isinstance(num, int) or num < 1:
            raise ValueError(f"num must be a positive integer, got {num!r}")
        return np.linspace(float(value["start"]), float(value["stop"]), num).round(12).tolist()
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise ValueError("is empty: give at least one value")
        return list(value)
    return [value]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Grid(_Strict):
    """Grid axes shared by the models on the sphere: beta, d, n."""

    beta: tuple[float, ...]
    d: tuple[int, ...]
    n: tuple[int, ...]

    @field_validator("*", mode="before")
    @classmethod
    def _normalise(cls, value, info):
        return _axis_values(value, info.field_name)

    @field_validator("*", mode="after")
    @classmethod
    def _sorted_unique(cls, values, info):
        if len(set(values)) != len(values):
            raise ValueError(f"has repeated values {list(values)}: list each value once")
        return tuple(sorted(values))

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

    @field_validator("n")
    @classmethod
    def _token_count(cls, values):
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"contains {bad}, but a sweep needs n >= 1 tokens: remove them from grid.n")
        return values


class HybridGrid(Grid):
    """The hybrid noise model adds the noise amplitude sigma."""

    sigma: tuple[float, ...]

    @field_validator("sigma")
    @classmethod
    def _noise_amplitude(cls, values):
        bad = [v for v in values if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"contains {bad}, but sigma must be finite and >= 0")
        return values


class EuclideanGrid(Grid):
    """Tokens in R^d [GLPR-E]: d = 1 is allowed (no sphere to live on)."""

    @field_validator("d")
    @classmethod
    def _sphere_dimension(cls, values):  # same name: replaces Grid's d >= 2 rule
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"contains {bad}, but R^d needs d >= 1: remove them from grid.d")
        return values


class Time(_Strict):
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
        return value

    @model_validator(mode="after")
    def _checkpoints_on_layers(self):
        self.checkpoint_layers  # raises with a clear message when impossible
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


class SweepBase(_Strict):
    """Fields every model's sweep has."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    time: Time
    trajectories: int = Field(ge=1)
    eps: float = Field(default=1e-3, gt=0, lt=1)
    seed: int = Field(default=0, ge=0)
    store: str = ""
    partition_traj: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _defaults_and_size(self):
        if not self.store:
            object.__setattr__(self, "store", f"results/{self.name}.zarr")
        if self.partition_traj == 0:
            object.__setattr__(self, "partition_traj", self.trajectories)
        if self.n_cells > MAX_CELLS:
            raise ValueError(
                f"grid has {self.n_cells} cells, more than {MAX_CELLS}: split the sweep"
            )
        return self

    @property
    def axes(self) -> dict[str, tuple]:
        """Grid axes in storage order (the order of the grid's fields)."""
        return {name: getattr(self.grid, name) for name in type(self.grid).model_fields}

    @property
    def n_cells(self) -> int:
        return math.prod(len(v) for v in self.axes.values())

    def canonical(self) -> dict:
        """The spec as plain data, without where it is stored (a store may move)."""
        return self.model_dump(mode="json", exclude={"store"})

