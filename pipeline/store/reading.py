"""Reading a cube safely: `open_sweep`, behind ``tokensweep.open``.

A cube is written partition by partition, so at any moment part of it may be pending, failed or
half-written. Read raw, those entries hold the store's fill values, and a reduction over ``traj``
silently mixes them with data. `open_sweep` returns the cube so that this cannot happen:

* every output (every variable with a ``traj`` dimension) is NaN outside the partitions whose
  ``status`` is done. Integer outputs already decode to float with NaN where unwritten (their CF
  ``_FillValue``, `store.fill_value`); status masking also covers what the fill value cannot: a
  partition killed after writing some outputs but before its status, and bool outputs, which CF
  gives no fill value and which read here as 1.0 / 0.0 / NaN;
* ``ds.attrs["pending"]``: the number of trajectories left out that way (0 when complete);
* grid axes of length one are squeezed to scalar coordinates, so that
  ``ds.cluster_class.isel(t=-1).mean("traj").plot.line(x="beta", hue="d")`` needs no
  ``.squeeze("n")``; the squeezed values stay on the cube as coordinates;
* every coordinate carries CF ``long_name`` and ``units`` (cubes written before they were stored
  get them here).

The result is lazy (dask), like ``xr.open_zarr``: opening a large cube reads only its metadata
and the per-partition ``status``.
"""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from ..analysis.stats import done_mask, pending_count, stored_spec
from ..errors import SpecError
from ..spec.base import SweepBase
from ..spec.load import load_sweep, resolve_spec_path
from . import location
from .cube import open_cube
from .layout import coord_attrs

__all__ = ["open_sweep", "store_path"]


def store_path(target, scale: str | None = None) -> Path | str:
    """Where a cube is: a store path or URL (``s3://bucket/x.zarr``), or the default store of a
    spec (a catalog name, a YAML file or a parsed spec; at `scale`); a path that is neither is
    returned as it is, for `open_cube` to refuse."""
    if isinstance(target, SweepBase):
        return target.store if location.is_remote(target.store) else Path(target.store)
    if location.is_remote(target):
        return str(target)
    path = location.local_path(target)
    if path.is_dir():
        return path
    try:
        resolve_spec_path(target)
    except SpecError:
        return path
    return store_path(load_sweep(target, scale))


def open_sweep(target, scale: str | None = None) -> xr.Dataset:
    """The cube at `target` (a store, or a spec's default store at `scale`), masked, squeezed and
    labelled."""
    ds = open_cube(store_path(target, scale))
    done = done_mask(ds)
    pending = pending_count(ds)
    if done is not None:
        ds = ds.assign({name: _masked(var, done) for name, var in ds.data_vars.items()
                        if "traj" in var.dims})
    for name in ds.coords:
        ds[name].attrs = {**coord_attrs(name), **ds[name].attrs}
    sweep = stored_spec(ds)
    axes = sweep.axes if sweep is not None else {}
    ds = ds.squeeze([axis for axis in axes if ds.sizes.get(axis) == 1])
    ds.attrs["pending"] = pending
    return ds


def _masked(var: xr.DataArray, done: xr.DataArray) -> xr.DataArray:
    """NaN outside done partitions; bool -> float32 first (a bool array has no NaN)."""
    out = (var.astype("float32") if var.dtype == bool else var).where(done)
    out.attrs = dict(var.attrs)
    out.encoding = {}
    return out
