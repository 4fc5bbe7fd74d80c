"""Whether a store can take a spec: the differences that would change stored numbers (refused),
and what a spec may add to a store (growth: more trajectories, new grid values, a description).
"""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from ..errors import StoreError
from ..models import get_model
from ..spec.base import SweepBase
from ..spec.recording import declared_outputs
from . import location
from .layout import DAMAGED_HINT

NEW_STORE_HINT = ("a store only grows (more trajectories, new grid values, a new description); "
                  "use --store to write a new store, or delete the old one")

# how a partition is executed, not what it computes: results are bit-identical for any value
EXECUTION_FIELDS = ("threads",)


def spec_differences(old: SweepBase, new: SweepBase, growable: bool = False) -> list[str]:
    """The fields in which `new` differs from `old`, one "field: old -> new" each.

    growable=True leaves out what a store may grow by (`growth`): a new description, more
    trajectories, new values on a grid axis; what remains would change numbers already stored.
    """
    a, b = old.canonical(), new.canonical()
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k) or k in EXECUTION_FIELDS or (growable and k == "description"):
            continue
        if growable and k == "trajectories" and b[k] > a[k]:
            continue
        if growable and k == "grid" and isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += grid_refusals(a[k], b[k])
            continue
        out.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return out


def grid_refusals(a: dict, b: dict) -> list[str]:
    """Grid changes a store cannot grow by: another set of axes, or values taken away."""
    if list(a) != list(b):
        return [f"grid axes: {list(a)} -> {list(b)}"]
    return [f"grid.{axis}: {a[axis]!r} -> {b[axis]!r} (drops {sorted(set(a[axis]) - set(b[axis]))})"
            for axis in a if not set(a[axis]) <= set(b[axis])]


def growth(old: SweepBase, new: SweepBase, path: str | Path = "the store") -> list[str]:
    """What `new` adds to a store holding `old` ([] when nothing); raises StoreError listing every
    difference that would change numbers already stored (model, time, seed, eps, options, ...).

    >>> from tokensweep.pipeline.spec.load import load_sweep
    >>> old = load_sweep("quickstart")
    >>> growth(old, old.model_copy(update={"trajectories": 800, "description": "more"}))
    ['trajectories: 400 -> 800', 'description']
    >>> growth(old, old.model_copy(update={"seed": 1}))
    Traceback (most recent call last):
    tokensweep.pipeline.errors.StoreError: the store holds a different spec (seed: 20260129 -> 1): ...
    """
    refused = spec_differences(old, new, growable=True)
    if refused:
        raise StoreError(f"{path} holds a different spec ({'; '.join(refused)}): {NEW_STORE_HINT}")
    added = []
    if new.trajectories != old.trajectories:
        added.append(f"trajectories: {old.trajectories} -> {new.trajectories}")
    for axis, values in new.axes.items():
        extra = sorted(set(values) - set(old.axes[axis]))
        if extra:
            added.append(f"grid.{axis}: + {extra}")
    if new.description != old.description:
        added.append("description")
    return added


def refuse_missing_outputs(sweep: SweepBase, path: str | Path) -> None:
    """Refuses a store written before its model recorded an output it records now (a new
    observable of a later tokensweep): resumed, its done partitions would never get it."""
    try:
        with xr.open_zarr(location.zarr_store(path, read_only=True),
                          consolidated=location.consolidated(path), chunks=None) as ds:
            stored = set(ds.data_vars)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: unreadable store ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None
    missing = sorted(set(declared_outputs(get_model(sweep.model), sweep)) - stored)
    if missing:
        raise StoreError(f"{path} was written by an earlier tokensweep: it lacks "
                         f"{', '.join(missing)}, which {sweep.model} records now; give a new "
                         "--store (this one stays readable with `tokensweep.open`)")
