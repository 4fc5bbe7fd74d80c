"""Sweep specifications: a YAML file becomes one validated, normalised `Sweep`.

A spec names a model, a grid of parameters, a time discretisation and a number of
trajectories per grid cell. Convenient spellings are accepted at the edge and
normalised once, here (as ``dask.array.normalize_chunks`` does for chunks):

* an axis may be a scalar, a list, or ``{start, stop, num}`` (inclusive, like
  ``numpy.linspace``); it always becomes a sorted tuple of unique values;
* ``time.checkpoints`` may be a count (equally spaced, ending at T) or a list of
  times, each a whole number of layers; it always becomes layer counts.

Anything impossible is refused before a single trajectory runs, with a message that
names the field, shows the value and says how to fix it.

>>> sweep = parse_sweep({"name": "tiny", "model": "stochastic_transformer",
...     "grid": {"beta": {"start": 0, "stop": 2, "num": 3}, "d": 4, "n": 2},
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
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

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


class StochasticTransformerSweep(SweepBase):
    """Deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i(X))."""

    model: Literal["stochastic_transformer"]
    attention: Literal["sa", "usa", "causal_sa"] = "sa"
    grid: Grid
    value_std: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    noise: Literal["gaussian", "literal"] = "gaussian"


class HybridSweep(SweepBase):
    """Hybrid noise model [F26, Prop. 1]: x_i <- N(x_i + h A_i + sigma sqrt(h) xi_k A_i)."""

    model: Literal["hybrid"]
    attention: Literal["sa", "usa", "causal_sa"] = "sa"
    grid: HybridGrid


# names and constraints of the kernels' options, kept here so that parsing a spec does not import
# numba; tests/test_models_pipeline.py checks them against kernels/sphere_flow.py and ensembles.py
SPHERE_ATTENTIONS = ("sa", "usa", "causal_sa", "causal_usa")
QK_ENSEMBLES = ("identity", "ginibre", "goe", "wigner", "wishart")
VALUE_ENSEMBLES = ("identity", "minus_identity", "ginibre", "goe", "wigner", "wishart", "qk")
# preset -> (heads, d, fixes Q^T K, fixes V); None: any
TIME_VARYING_PRESETS = {
    "rst_two_head_hemisphere": (2, 3, True, False),
    "rst_causal": (1, 3, True, True),
    "rst_random_frequencies": (None, None, False, False),
}
Matrix = tuple[tuple[float, ...], ...]
MATRIX_KEYS = ("Q", "K", "V")  # the kernel's `matrices` keys (sphere_flow._resolve_weights)


def _refuse(field: str, text: str):
    """A cross-field error from a model validator, attributed to `field` by _format_errors."""
    return ValueError(f"{field}: {text}")


class SphereFlowSweep(SweepBase):
    """Deterministic attention flow on the sphere [GLPR-P, RST]: dx_i/dt = P_{x_i}(A_i(X)).

    Defaults are the kernel's (kernels/sphere_flow.py): SA, retraction Euler, one head,
    Q = K = V = I, uniform start, frac_close threshold delta = 1e-3.

    `matrices` fixes Q, K and/or V explicitly (never drawn): each one d x d matrix (every head)
    or a list of `heads` of them, normalised to (heads, d, d); it fixes grid.d, and a matrix it
    gives cannot also come from `qk` / `value` / a `time_varying` preset.

    >>> s = parse_sweep({"name": "f", "model": "sphere_flow", "grid": {"beta": 1, "d": 8, "n": 4},
    ...     "time": {"T": 3.0, "layers": 30}, "trajectories": 2, "init": "equiangular"})
    >>> s.attention, s.integrator, s.init, s.delta
    ('sa', 'euler', 'equiangular', 0.001)
    """

    model: Literal["sphere_flow"]
    attention: Literal[SPHERE_ATTENTIONS] = "sa"
    grid: Grid
    integrator: Literal["euler", "heun", "rk4"] = "euler"
    heads: int = Field(default=1, ge=1)
    qk: Literal[QK_ENSEMBLES] = "identity"
    value: Literal[VALUE_ENSEMBLES] = "identity"
    period: int = Field(default=0, ge=0)
    time_varying: Optional[Literal[tuple(TIME_VARYING_PRESETS)]] = None
    init: Literal["uniform_sphere", "hemisphere", "equiangular"] = "uniform_sphere"
    delta: float = Field(default=1e-3, gt=0, lt=1)
    rst_scaling: bool = False
    matrices: Optional[dict[Literal[MATRIX_KEYS], tuple[Matrix, ...]]] = None

    @field_validator("matrices", mode="before")
    @classmethod
    def _head_matrices(cls, value, info):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"got {value!r}: give a mapping with keys among {', '.join(MATRIX_KEYS)}, "
                             "each one d x d matrix or a list of heads of them")
        unknown = sorted(str(k) for k in value if k not in MATRIX_KEYS)
        if unknown:
            raise ValueError(f"has keys {unknown}: only {', '.join(MATRIX_KEYS)} are understood: "
                             "remove them or check their spelling")
        heads = info.data.get("heads")  # absent when heads itself is invalid (reported there)
        return {k: _per_head_matrices(value[k], f"matrices.{k}", heads)
                for k in MATRIX_KEYS if k in value} or None

    @model_validator(mode="after")
    def _consistent_options(self):
        if self.init == "equiangular":
            bad = [(d, n) for d in self.grid.d for n in self.grid.n if d < n]
            if bad:
                d, n = bad[0]
                raise _refuse("init", f"'equiangular' needs d >= n orthonormal tokens in every cell, "
                              f"but the grid pairs d = {d} with n = {n}: raise grid.d, lower grid.n "
                              "or use init: uniform_sphere")
        random_weights = self.qk != "identity" or self.value in ("ginibre", "goe", "wigner", "wishart")
        if self.period and not random_weights:
            raise _refuse("period", f"{self.period} redraws random matrices, but qk = {self.qk!r} and "
                          f"value = {self.value!r} are fixed: remove period or choose an ensemble")
        if self.time_varying is not None:
            heads, d, fixes_qk, fixes_v = TIME_VARYING_PRESETS[self.time_varying]
            name = repr(self.time_varying)
            if heads is not None and self.heads != heads:
                raise _refuse("heads", f"time_varying {name} has {heads} head(s), got heads = "
                              f"{self.heads}: set heads: {heads}")
            if d is not None and self.grid.d != (d,):
                raise _refuse("grid.d", f"time_varying {name} is defined in d = {d}, got "
                              f"{list(self.grid.d)}: set grid.d: {d}")
            if fixes_qk and self.qk != "identity":
                raise _refuse("qk", f"time_varying {name} fixes Q^T K = P', got qk = {self.qk!r}: "
                              "leave qk: identity")
            if fixes_v and self.value != "identity":
                raise _refuse("value", f"time_varying {name} fixes V, got value = {self.value!r}: "
                              "leave value: identity")
        for key, mats in (self.matrices or {}).items():
            field = f"matrices.{key}"
            _check_fixes_d(field, len(mats[0]), self.grid.d)
            if key in ("Q", "K") and self.qk != "identity":
                raise _refuse(field, f"an explicit {key} fixes the query-key pair, but qk = {self.qk!r} "
                              f"draws it: remove {field} or set qk: identity")
            if key == "V" and self.value != "identity":
                raise _refuse(field, f"an explicit V fixes the value matrix, but value = {self.value!r} "
                              f"sets it: remove {field} or set value: identity")
            if self.time_varying is not None:
                _, _, fixes_qk, fixes_v = TIME_VARYING_PRESETS[self.time_varying]
                if (fixes_qk and key in ("Q", "K")) or (fixes_v and key == "V"):
                    raise _refuse(field, f"time_varying {self.time_varying!r} fixes "
                                  f"{'Q^T K' if key in ('Q', 'K') else 'V'}: remove {field}")
        return self


def _square_matrix(value, field: str, names: tuple[str, ...] = ()):
    """A named choice, or a list of d lists of d finite numbers (returned as nested tuples)."""
    if isinstance(value, str) and names:
        if value not in names:
            raise ValueError(f"{value!r} is not a known matrix: use one of {', '.join(names)} "
                             f"or an explicit d x d list")
        return value
    if not isinstance(value, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in value):
        raise ValueError(f"got {value!r}: give {field} as a list of d lists of d numbers"
                         + (f" or one of {', '.join(names)}" if names else ""))
    rows = len(value)
    if rows == 0 or any(len(r) != rows for r in value):
        raise ValueError(f"is not a square matrix (row lengths {[len(r) for r in value]}): "
                         f"give {field} as a list of d lists of d numbers")
    try:
        matrix = tuple(tuple(float(x) for x in r) for r in value)
    except (TypeError, ValueError):
        raise ValueError(f"has entries that are not numbers: {value!r}") from None
    if not all(math.isfinite(x) for r in matrix for x in r):
        raise ValueError(f"has non-finite entries: give finite numbers in {field}")
    return matrix


def _check_fixes_d(field: str, size: int, grid_d: tuple[int, ...], alternative: str = ""):
    """An explicit size x size matrix fixes d: refuse a grid.d that is not exactly (size,)."""
    if grid_d != (size,):
        raise _refuse(field, f"an explicit {size} x {size} matrix fixes d = {size}, but grid.d is "
                      f"{list(grid_d)}: set grid.d: {size}" + alternative)


def _per_head_matrices(value, field: str, heads: Optional[int]) -> tuple:
    """One d x d matrix (for every head) or a list of `heads` of them -> `heads` matrices (nested
    tuples); heads None (itself invalid): no count check, a single matrix is kept once."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):  # a list of per-head arrays
        value = [m.tolist() if isinstance(m, np.ndarray) else m for m in value]
    per_head = (isinstance(value, list) and len(value) > 0 and isinstance(value[0], (list, tuple))
                and len(value[0]) > 0 and isinstance(value[0][0], (list, tuple)))
    items = list(enumerate(value)) if per_head else [(None, value)]
    mats = []
    for h, m in items:
        name = field if h is None else f"{field}.{h}"
        try:
            mats.append(_square_matrix(m, name))
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    if per_head:
        if heads is not None and len(mats) != heads:
            raise ValueError(f"{field}: is a list of {len(mats)} matrices, but heads = {heads}: give "
                             f"one d x d matrix per head, or a single one for every head")
        sizes = [len(m) for m in mats]
        if len(set(sizes)) > 1:
            raise ValueError(f"{field}: the heads' matrices have sizes {sizes}: every head needs a "
                             "d x d matrix of the same d")
        return tuple(mats)
    return tuple(mats) * (heads or 1)


class EuclideanFlowSweep(SweepBase):
    """Unnormalised attention flow in R^d [GLPR-E]: dx_i/dt = sum_j P_ij V x_j.

    V is "identity", "minus_identity" or an explicit d x d list (which fixes grid.d); Q, K are
    optional explicit matrices (default I). Tokens start in the box U[-box, box]^d by default.

    >>> s = parse_sweep({"name": "e", "model": "euclidean_flow", "grid": {"beta": 1, "d": 2, "n": 5},
    ...     "time": {"T": 1.0, "layers": 10}, "trajectories": 2, "V": [[1, 0], [0, -0.5]]})
    >>> s.V, s.init, s.box
    (((1.0, 0.0), (0.0, -0.5)), 'box', 5.0)
    """

    model: Literal["euclidean_flow"]
    grid: EuclideanGrid
    V: Union[Literal["identity", "minus_identity"], Matrix] = "identity"
    Q: Optional[Matrix] = None
    K: Optional[Matrix] = None
    integrator: Literal["euler", "rk4"] = "euler"
    init: Literal["box", "gaussian", "uniform_sphere"] = "box"
    box: float = Field(default=5.0, gt=0, allow_inf_nan=False)

    @field_validator("V", "Q", "K", mode="before")
    @classmethod
    def _square(cls, value, info):
        names = ("identity", "minus_identity") if info.field_name == "V" else ()
        return None if value is None else _square_matrix(value, info.field_name, names)

    @model_validator(mode="after")
    def _matrices_fix_d(self):
        for name in ("V", "Q", "K"):
            m = getattr(self, name)
            if m is not None and not isinstance(m, str):
                _check_fixes_d(name, len(m), self.grid.d,
                               " or use V: identity / minus_identity" if name == "V" else "")
        return self


Sweep = Annotated[
    Union[StochasticTransformerSweep, HybridSweep, SphereFlowSweep, EuclideanFlowSweep],
    Field(discriminator="model"),
]
_SWEEP = TypeAdapter(Sweep)
MODELS = ("stochastic_transformer", "hybrid", "sphere_flow", "euclidean_flow")
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")


def _format_errors(err: ValidationError, model: str | None) -> str:
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"] if p != model]
        field = ".".join(loc) or "spec"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}: remove it or check its spelling"
        elif e["type"] == "union_tag_invalid":
            field = "model"
            msg = f"unknown model {e['ctx']['tag']!r}: choose one of {', '.join(MODELS)}"
        elif e["type"] == "union_tag_not_found":
            field, msg = "model", f"missing: choose one of {', '.join(MODELS)}"
        elif "input" in e and e["type"] not in ("value_error", "missing"):
            msg = f"{msg} (got {e['input']!r})"
        named = _FIELD_PREFIX.match(msg)  # a cross-field check, or a part of this field, names it
        if named and (field == "spec" or named.group(1).startswith(field + ".")):
            field, msg = msg.split(": ", 1)
        lines.append(f"{field}: {msg}")
    return "invalid spec:\n  " + "\n  ".join(lines)


def parse_sweep(data: dict, **overrides) -> SweepBase:
    """Validate plain data (e.g. loaded YAML) into a Sweep; None overrides are ignored."""
    if not isinstance(data, dict):
        raise SpecError(f"a spec must be a mapping of fields, got {type(data).__name__}")
    data = {**data, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return _SWEEP.validate_python(data)
    except ValidationError as err:
        raise SpecError(_format_errors(err, data.get("model"))) from None


def load_sweep(path: str | Path, **overrides) -> SweepBase:
    """Read a YAML spec file (or a catalog name) and validate it."""
    path = resolve_spec_path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {err}") from None
    return parse_sweep(data, **overrides)


def resolve_spec_path(path: str | Path) -> Path:
    """A spec file, or the name of a catalog entry (e.g. ``quickstart``)."""
    p = Path(path)
    if p.is_file():
        return p
    catalog = Path(__file__).resolve().parent.parent / "catalog"
    for candidate in (catalog / f"{path}.yaml", catalog / str(path)):
        if candidate.is_file():
            return candidate
    raise SpecError(f"spec file {str(path)!r} not found (and no catalog entry of that name)")


def sweep_from_json(text: str) -> SweepBase:
    """Inverse of ``json.dumps(sweep.model_dump(mode='json'))``."""
    return parse_sweep(json.loads(text))
