"""Loading a spec: plain data, a YAML file or a catalog name -> the typed spec of the model it
names (through the registry of `pipeline.models`), and the size check of its store.

`parse_sweep` validates plain data into the spec class of its model; `load_sweep` reads a file
(or a catalog entry) and checks that its store stays under the size limit. Errors are one line,
``field: problem[; field: problem...]``, each saying how to fix it (`SpecError`).

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

import numpy as np
import yaml
from pydantic import ValidationError

from ..errors import ScaleError, SpecError
from ..models import get_model, registry, sweep_adapter
from .base import MAX_STORE_GIB, SweepBase, short
from .recording import declared_outputs, dimension_sizes, output_shape
from .scales import at_scale

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
            msg = f"unknown key {short(loc[-1])}: remove it or check its spelling"
        elif e["type"] == "union_tag_invalid":
            field = "model"
            msg = f"unknown model {short(e['ctx']['tag'])}: choose one of {', '.join(names)}"
        elif e["type"] == "union_tag_not_found":
            field, msg = "model", f"missing: choose one of {', '.join(names)}"
        elif e["type"] == "missing":
            msg = "missing: add it (catalog/quickstart.yaml shows every field)"
        named = _FIELD_PREFIX.match(msg)  # a cross-field check, or a part of this field, names it
        if named and (field == "spec" or named.group(1).startswith(field + ".")):
            field, msg = msg.split(": ", 1)
        got = f" (got {short(e['input'])})" if "input" in e and e["type"] not in (
            "value_error", "missing", "extra_forbidden", "union_tag_invalid",
            "union_tag_not_found") else ""
        msgs, _ = problems.setdefault(field, ([], got))
        if msg not in msgs:
            msgs.append(msg)
    # a field that fits none of a union's types has one problem per type: "... or ..."
    return "; ".join(f"{field}: {' or '.join(msgs)}{got}" for field, (msgs, got) in problems.items()) \
        .replace("\n", " ")


def parse_sweep(data: dict, scale: str | None = None, **overrides) -> SweepBase:
    """Validate plain data (e.g. loaded YAML) into its model's spec at `scale` (`spec.scales`;
    None: the spec as written); None overrides are ignored.

    Raises SpecError, with one line `field: problem`, for anything that cannot run.
    """
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


CATALOG = Path(__file__).resolve().parents[2] / "catalog"  # the `tokensweep.catalog` package


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
