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
import re
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import Field, TypeAdapter, ValidationError


from .spec_fields import Grid, HybridGrid, SpecError, SweepBase  # noqa: F401 (public names)
from .spec_flows import EuclideanFlowSweep, SphereFlowSweep


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
