"""Sweep specifications: the fields every model shares, and parsing a YAML file into one `Sweep`.

A spec names a model, a grid of parameters, a time discretisation and a number of trajectories
per grid cell. Each model's spec class (in its plug-in module, `pipeline/models/`) is a
`SweepBase` with its own `grid` and options; the registry joins them into one union
discriminated by `model`. Convenient spellings are accepted at the edge and normalised once,
here (as ``dask.array.normalize_chunks`` does for chunks):

* an axis may be a scalar, a list, or ``{start, stop, num}`` (inclusive, like
  ``numpy.linspace``); it always becomes a sorted tuple of unique values;
* ``time.checkpoints`` may be a count (equally spaced, ending at T) or a list of
  times, each a whole number of layers; it always becomes layer counts.

Anything impossible is refused before a single trajectory runs, with a message that
names the field, shows the value and says how to fix it. Parsing imports no kernel (no numba).

>>> quickstart = yaml.safe_load(resolve_spec_path("quickstart").read_text())
>>> sweep = parse_sweep({**quickstart, "grid": {"beta": {"start": 0, "stop": 2, "num": 3}, "d": 4, "n": 2},
...     "time": {"T": 1.0, "layers": 100, "checkpoints": 4}, "trajectories": 8})
>>> sweep.grid.beta, sweep.grid.d, sweep.grid.n
((0.0, 1.0, 2.0), (4,), (2,))
>>> sweep.time.checkpoint_layers
(25, 50, 75, 100)
>>> sweep.axes
{'beta': (0.0, 1.0, 2.0), 'd': (4,), 'n': (2,)}
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from .errors import ScaleError, SpecError
from .scales import at_scale, default_store

MAX_CELLS = 10_000_000
SPEC_ATTR = "tokensweep_spec"  # the store attribute holding a cube's spec as JSON
MAX_LAYERS = 100_000_000
MAX_CHECKPOINTS = 100_000
MAX_TRAJECTORIES = 1_000_000_000  # per cell; the store-size limit usually refuses far fewer
MAX_TOKENS = MAX_DIMENSION = 4096  # n and d: an n x n attention or a d x d matrix per trajectory
MAX_STORE_GIB = 20.0  # default of the store-size limit; TOKENSWEEP_MAX_STORE_GIB changes it


def _axis_values(value: Any, field: str) -> list:
    """Normalise one grid axis: scalar, list, or {start, stop, num}."""
    if isinstance(value, dict):
        unknown = set(value) - {"start", "stop", "num"}
        if unknown or not {"start", "stop", "num"} <= set(value):
            raise ValueError(
                f"a range needs exactly the keys start, stop, num; got {sorted(value)}"
            )
        num = value["num"]
        if not isinstance(num, int) or isinstance(num, bool) or not 1 <= num <= MAX_CELLS:
            raise ValueError(f"num must be an integer from 1 to {MAX_CELLS}, got {_short(num)}")
        for key in ("start", "stop"):
            end = value[key]
            if not isinstance(end, (int, float)) or isinstance(end, bool) or not math.isfinite(end):
                raise ValueError(f"{key} must be a finite number, got {_short(end)}: "
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


def _short(value: Any, limit: int = 60) -> str:
    """repr of a value, cut to one short line for an error message."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Grid(_Strict):
    """Grid axes shared by the models on the sphere: beta, d, n; and the optional axis rho0, the
    initial overlap of an `init: overlap` start (`pipeline/starts.py`)."""

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

    @field_validator("d", "n")
    @classmethod
    def _bounded(cls, values, info):
        limit = MAX_DIMENSION if info.field_name == "d" else MAX_TOKENS
        bad = [v for v in values if v > limit]
        if bad:
            raise ValueError(f"contains {_short(bad)}, more than tokensweep runs ({limit}): "
                             f"remove them from grid.{info.field_name}")
        return values

    @field_validator("n")
    @classmethod
    def _token_count(cls, values):
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"contains {bad}, but a sweep needs n >= 1 tokens: remove them from grid.n")
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
        if (len(value) if isinstance(value, tuple) else value) > MAX_CHECKPOINTS:
            raise ValueError(f"records more than {MAX_CHECKPOINTS} checkpoints: record fewer")
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

    @model_validator(mode="after")
    def _start_fits_grid(self):
        from .starts import check_start  # the `init` field every built-in model has

        check_start(self)
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


# -- parsing: plain data or a YAML file -> the spec class of the model it names ---------------

_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")
_NAME = re.compile(r"^[A-Za-z_]\w*$|^\d+$")  # a field or a list index, not a union member's tag
_UNION_TAGS = {"int", "float", "str", "bool", "list", "tuple", "dict", "none"}


def _format_errors(err: ValidationError, model: str | None, names: list[str]) -> str:
    """One line, `field: problem[; field: problem...]`, each problem saying how to fix it."""
    problems: dict[str, tuple[list[str], str]] = {}  # field -> problems, the value given
    for e in err.errors():
        loc = [str(p) for p in e["loc"] if p != model]
        path = [p for p in loc if _NAME.match(p) and p not in _UNION_TAGS]
        field = ".".join(path) or "spec"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown key {_short(loc[-1])}: remove it or check its spelling"
        elif e["type"] == "union_tag_invalid":
            field = "model"
            msg = f"unknown model {_short(e['ctx']['tag'])}: choose one of {', '.join(names)}"
        elif e["type"] == "union_tag_not_found":
            field, msg = "model", f"missing: choose one of {', '.join(names)}"
        elif e["type"] == "missing":
            msg = "missing: add it (catalog/quickstart.yaml shows every field)"
        named = _FIELD_PREFIX.match(msg)  # a cross-field check, or a part of this field, names it
        if named and (field == "spec" or named.group(1).startswith(field + ".")):
            field, msg = msg.split(": ", 1)
        got = f" (got {_short(e['input'])})" if "input" in e and e["type"] not in (
            "value_error", "missing", "extra_forbidden", "union_tag_invalid",
            "union_tag_not_found") else ""
        msgs, _ = problems.setdefault(field, ([], got))
        if msg not in msgs:
            msgs.append(msg)
    # a field that fits none of a union's types has one problem per type: "... or ..."
    return "; ".join(f"{field}: {' or '.join(msgs)}{got}" for field, (msgs, got) in problems.items()) \
        .replace("\n", " ")


def parse_sweep(data: dict, scale: str | None = None, **overrides) -> SweepBase:
    """Validate plain data (e.g. loaded YAML) into its model's spec at `scale` (`pipeline.scales`;
    None: the spec as written); None overrides are ignored.

    Raises SpecError, with one line `field: problem`, for anything that cannot run.
    """
    from .models import registry, sweep_adapter

    if not isinstance(data, dict):
        raise SpecError(f"spec: a spec is a mapping of fields (name: ..., model: ...), "
                        f"got {type(data).__name__}")
    data = spec_at_scale(data, scale)
    data = {**data, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return sweep_adapter().validate_python(data)
    except ValidationError as err:
        model = data.get("model") if isinstance(data.get("model"), str) else None
        raise SpecError(_format_errors(err, model, list(registry()))) from None


def load_sweep(path: str | Path, scale: str | None = None, **overrides) -> SweepBase:
    """Read a YAML spec file (or a catalog name) at `scale`, validate it and check the size of
    its store."""
    sweep = parse_sweep(read_spec(path, scale), **overrides)
    check_store_size(sweep)
    return sweep


def read_spec(path: str | Path, scale: str | None = None) -> dict:
    """The plain data of a YAML spec file (or a catalog name), at `scale` when one is given (else
    with its `scales` block); raises SpecError for a file that is not a YAML mapping."""
    path = resolve_spec_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                        f"{err.start}): give a YAML spec saved as UTF-8") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot be read ({err.strerror}): check its permissions") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{path}: not valid YAML{where}: {problem}: fix the syntax there") from None
    if data is None:
        raise SpecError(f"{path}: the file is empty (no YAML fields): write a spec in it "
                        "(`tokensweep catalog` lists examples, e.g. catalog/quickstart.yaml)")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec is a mapping of fields (name: ..., model: ...), "
                        f"but this file holds a {type(data).__name__}")
    return data if scale is None else spec_at_scale(data, scale, where=str(path))


def spec_at_scale(data: dict, scale: str | None, where: str = "the spec") -> dict:
    """`scales.at_scale`, raising SpecError."""
    try:
        return at_scale(data, scale, where)
    except ScaleError as err:
        raise SpecError(str(err)) from None


CATALOG = Path(__file__).resolve().parent.parent / "catalog"  # the `tokensweep.catalog` package


def resolve_spec_path(path: str | Path) -> Path:
    """A spec file, or the name of a catalog entry (e.g. ``quickstart``)."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        raise SpecError(f"{path} is a directory, not a spec file: give a YAML file "
                        f"(e.g. {p / 'NAME.yaml'}) or a catalog name")
    for candidate in (CATALOG / f"{path}.yaml", CATALOG / str(path)):
        if candidate.is_file():
            return candidate
    raise SpecError(f"spec file {str(path)!r} not found (and no catalog entry of that name: "
                    "`tokensweep catalog` lists them)")


def estimated_store_bytes(sweep: SweepBase, recorded: bool = True) -> int:
    """Uncompressed size of the cube: every declared output of every trajectory (with the
    observables `record` asks for, unless recorded=False), plus status."""
    from .models import get_model
    from .recording import declared_outputs, dimension_sizes, output_shape

    model = get_model(sweep.model)
    outputs = declared_outputs(model, sweep) if recorded else model.outputs
    sizes = dimension_sizes(sweep)
    nt = len(sweep.time.checkpoint_layers)
    per_trajectory = sum(np.dtype(out.dtype).itemsize * (nt if out.per_checkpoint else 1)
                         * math.prod(output_shape(out, sizes)) for out in outputs.values())
    partitions = sweep.n_cells * -(-sweep.trajectories // sweep.partition_traj)
    return sweep.n_cells * sweep.trajectories * per_trajectory + partitions * (1 + 8 + 8)


def max_store_bytes() -> int:
    """The store-size limit: TOKENSWEEP_MAX_STORE_GIB (GiB) when set, else MAX_STORE_GIB."""
    try:
        gib = float(os.environ.get("TOKENSWEEP_MAX_STORE_GIB") or MAX_STORE_GIB)
    except ValueError:
        gib = MAX_STORE_GIB
    return int(gib * 2**30)


def check_store_size(sweep: SweepBase) -> None:
    """Refuse a sweep whose store would exceed the limit, naming the estimate and the fix."""
    size, limit = estimated_store_bytes(sweep), max_store_bytes()
    if size > limit and estimated_store_bytes(sweep, recorded=False) <= limit:
        raise SpecError(
            f"record: the store would need {format_bytes(size)} with record {list(sweep.record)} "
            f"({format_bytes(estimated_store_bytes(sweep, recorded=False))} without), more than "
            f"the {format_bytes(limit)} limit: record fewer checkpoints (time.checkpoints) or "
            f"trajectories, drop gram / states from record, or allow it with "
            f"TOKENSWEEP_MAX_STORE_GIB={math.ceil(size / 2**30)}")
    if size > limit:
        raise SpecError(
            f"spec: the store would need {format_bytes(size)} ({sweep.n_cells} cells x "
            f"{sweep.trajectories} trajectories), more than the {format_bytes(limit)} limit: lower "
            f"trajectories or the grid, or split the sweep (or allow it with "
            f"TOKENSWEEP_MAX_STORE_GIB={math.ceil(size / 2**30)})")


def format_bytes(n: float) -> str:
    """A size for people: 1009.7 KiB, 240.7 GiB."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def sweep_from_json(text: str) -> SweepBase:
    """Inverse of ``json.dumps(sweep.model_dump(mode='json'))``."""
    return parse_sweep(json.loads(text))
