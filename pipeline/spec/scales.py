"""A spec at one of its sizes: the quick version CI runs, or the paper's.

A spec file may hold, besides its fields, a block ``scales: {paper: {...}}``: what changes at
the paper's sizes, merged field by field over the spec (mappings merge, anything else is
replaced). The spec as written is the ``small`` scale. A larger scale runs under the name
``NAME-SCALE`` (and, where the spec names its store, ``STORE-SCALE.zarr``), so the two sizes
never share a store.

>>> spec = {"name": "fig", "grid": {"beta": {"start": 0, "stop": 3, "num": 7}, "d": [3, 4]},
...         "trajectories": 400, "scales": {"paper": {"grid": {"beta": {"num": 31}}, "trajectories": 2000}}}
>>> at_scale(spec, "paper")
{'name': 'fig-paper', 'grid': {'beta': {'start': 0, 'stop': 3, 'num': 31}, 'd': [3, 4]}, 'trajectories': 2000}
>>> at_scale(spec, None) == at_scale(spec, "small") == {k: v for k, v in spec.items() if k != "scales"}
True
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from ..errors import ScaleError

SCALES = ("small", "paper")  # small: the spec as written (a minute or two on 2 cores); paper: the paper's sizes
RESULTS_ENV = "TOKENSWEEP_RESULTS"  # the folder of default stores (default: results/ in the working directory)


def results_dir() -> str:
    """Where a spec without `store` keeps its cube: $TOKENSWEEP_RESULTS, else ``results``."""
    return os.environ.get(RESULTS_ENV) or "results"


def default_store(name: str) -> str:
    return f"{results_dir().rstrip('/')}/{name}.zarr"


def scales_of(data: dict) -> tuple[str, ...]:
    """The scales a spec's plain data can run at (always ``small`` first)."""
    extra = data.get("scales") or {}
    return ("small", *(s for s in SCALES[1:] if isinstance(extra, dict) and s in extra))


def at_scale(data: dict, scale: str | None, where: str = "the spec") -> dict:
    """The spec's plain data at `scale` (None: small), without its `scales` block."""
    scales = data.get("scales")
    base = {k: v for k, v in data.items() if k != "scales"}
    if scales is not None and (not isinstance(scales, dict)
                               or any(not isinstance(k, str) or k not in SCALES[1:] or not isinstance(v, dict)
                                      for k, v in scales.items())):
        raise ScaleError(f"scales: a mapping from {' or '.join(SCALES[1:])} to the fields that change "
                         f"at that size (e.g. scales: {{paper: {{trajectories: 2048}}}}), got {scales!r:.80}")
    if scale is None or scale == "small":
        return base
    if scale not in SCALES:
        raise ScaleError(f"scale: {scale!r} is not a scale: use one of {', '.join(SCALES)}")
    if not scales or scale not in scales:
        raise ScaleError(f"scale: {where} has no {scale} scale (it has: {', '.join(scales_of(data))}): "
                         f"drop --scale, or add scales: {{{scale}: {{...}}}} to the spec")
    changes = scales[scale]
    out = _merged(base, changes)
    if "name" not in changes and isinstance(base.get("name"), str):
        out["name"] = f"{base['name']}-{scale}"
    if "store" not in changes and isinstance(base.get("store"), str) and base["store"]:
        path = PurePosixPath(base["store"])
        out["store"] = str(path.with_name(f"{path.stem}-{scale}{path.suffix}"))
    return out


def _merged(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out
