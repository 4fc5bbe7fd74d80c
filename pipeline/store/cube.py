"""A cube on disk (or in an object store): created from its layout, its spec read back, its
per-partition tables and its lazy dataset opened, its provenance updated after a run.

Its metadata is written, consolidated, at creation; the only later change is the provenance a
finished flow adds (worker hosts, completion time), re-consolidated under the store's lock. A
local store appears whole or not at all (written beside it, then renamed into place).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecError, StoreError
from ..spec.base import SPEC_ATTR, SweepBase
from ..spec.load import sweep_from_json
from . import location
from .layout import DAMAGED_HINT, DONE, template
from .marks import interrupted

if TYPE_CHECKING:
    import xarray as xr

# How a partition table's times are stored (layout.template): decoded as xarray decodes them
EPOCH_SECONDS = "seconds since 1970-01-01T00:00:00Z"


def store_batch_shape(path: str | Path) -> tuple[int, ...]:
    """The batch shape of an existing store, over (grid axes..., block): the chunks of its
    ``status`` (all ones for a store of one chunk per partition, every store before batches)."""
    import zarr

    try:
        status = zarr.open_group(location.zarr_store(path, read_only=True), mode="r",
                                 use_consolidated=location.consolidated(path))["status"]
        return tuple(int(n) for n in (status.shards or status.chunks))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot read the layout of `status` ({type(err).__name__}: "
                         f"{err}): {DAMAGED_HINT}") from None


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def stored_sweep(path: str | Path) -> SweepBase:
    """The spec a store was created with; refuses paths that are not tokensweep stores."""
    if location.is_remote(path):
        return _stored_sweep_remote(str(path))
    path = Path(path)
    if not path.exists():
        if interrupted(path):
            raise StoreError(f"no store at {path}: an interrupted grow left "
                             f"{', '.join(interrupted(path))} beside it; run the spec again "
                             f"(`tokensweep run SPEC --store {path}`) to finish the grow")
        raise StoreError(f"no store at {path}: run `tokensweep run SPEC --store {path}` first")
    if not _is_store(path):
        raise StoreError(f"{path} is not a zarr v3 store (no zarr.json): not written by tokensweep")
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
    except (OSError, json.JSONDecodeError) as err:
        raise StoreError(f"{path}: unreadable store metadata ({err})") from None
    return _spec_of(path, attrs)


def _stored_sweep_remote(url: str) -> SweepBase:
    location.check_reachable(url)
    try:
        text = location.read_text(f"{url.rstrip('/')}/zarr.json")
    except FileNotFoundError:
        if location.holds_anything(url):
            raise StoreError(f"{url} is not a zarr v3 store (no zarr.json): not written by "
                             "tokensweep") from None
        raise StoreError(f"no store at {url}: run `tokensweep run SPEC --store {url}` first") from None
    except OSError as err:
        raise StoreError(f"{url}: unreadable store metadata ({err})") from None
    try:
        attrs = json.loads(text).get("attributes", {})
    except json.JSONDecodeError as err:
        raise StoreError(f"{url}: unreadable store metadata ({err})") from None
    return _spec_of(url, attrs)


def _spec_of(path, attrs: dict) -> SweepBase:
    """The spec in a store's root attributes."""
    if SPEC_ATTR not in attrs:
        raise StoreError(f"{path} is a zarr store but not a tokensweep cube (no {SPEC_ATTR} attribute)")
    try:
        return sweep_from_json(attrs[SPEC_ATTR])
    except SpecError as err:
        raise StoreError(f"{path}: its stored spec no longer validates: {err}") from None


def create_store(sweep: SweepBase, path: str | Path, attrs: dict | None = None) -> None:
    """Write a new store's metadata (the template of `sweep`, plus `attrs`); no chunk is written."""
    ds = template(sweep)
    ds.attrs.update(attrs or {})
    encoding = ds.encoding.pop("tokensweep_chunks")
    if location.is_remote(path):
        _write_metadata(ds, location.zarr_store(path), encoding)
        return
    # A local store appears whole or not at all: its metadata is written beside it and renamed
    # into place, so a creation cut short (Ctrl-C) leaves no half store that later runs refuse.
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f".{path.name}.creating-*"):  # a creation cut short (we hold the lock)
        shutil.rmtree(old, ignore_errors=True)
    staging = path.parent / f".{path.name}.creating-{os.getpid()}"
    try:
        _write_metadata(ds, str(staging), encoding)
        os.rename(staging, path)  # fails if `path` holds anything: never replaces a store
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_metadata(ds: xr.Dataset, store, encoding: dict) -> None:
    # Metadata is final at creation (partitions only write chunks), so consolidating it now
    # is safe and lets `xr.open_zarr(path)` open the cube quietly in one call.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        ds.to_zarr(store, mode="w-", compute=False, zarr_format=3, consolidated=True,
                   encoding=encoding)


def read_status(path: str | Path) -> np.ndarray:
    """Status per partition, flattened in plan order (cells in C order, then blocks)."""
    return read_partition_table(path, "status")


def read_partition_table(path: str | Path, name: str) -> np.ndarray:
    """One per-partition variable (status, started, finished), flattened in plan order: the
    values `xr.open_zarr(path)[name].values` holds (times as datetime64[ns], NaT where unset),
    read with zarr alone (xarray's import is most of a `tokensweep status`)."""
    import zarr

    try:
        group = zarr.open_group(location.zarr_store(path, read_only=True), mode="r",
                                use_consolidated=location.consolidated(path))
        array = group[name]
        values = np.asarray(array[...]).reshape(-1)
        units = array.attrs.get("units")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot read `{name}` ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None
    if units is None:
        return values
    if units != EPOCH_SECONDS or values.dtype.kind != "f":
        return _read_partition_table_xarray(path, name)
    return _seconds_to_datetime(values)


def _seconds_to_datetime(seconds: np.ndarray) -> np.ndarray:
    """Float seconds since the epoch to datetime64[ns] (NaN to NaT), as xarray's CF decoding
    does it: the seconds times 10^9, truncated to integer nanoseconds."""
    nan = np.isnan(seconds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        nanoseconds = np.asarray(seconds.astype(np.float64) * np.int64(1_000_000_000)).astype(np.int64)
    nanoseconds[nan] = np.iinfo(np.int64).min
    return np.datetime64(0, "ns") + nanoseconds.astype("timedelta64[ns]")


def _read_partition_table_xarray(path: str | Path, name: str) -> np.ndarray:
    import xarray as xr

    try:
        with xr.open_zarr(location.zarr_store(path, read_only=True),
                          consolidated=location.consolidated(path),
                          chunks=None) as ds:  # no dask: see execute.py
            return ds[name].values.reshape(-1)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot read `{name}` ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None


def open_cube(path: str | Path) -> xr.Dataset:
    """Open a cube lazily (dask-backed), checking that it is a tokensweep store."""
    import xarray as xr

    stored_sweep(path)
    try:
        return xr.open_zarr(location.zarr_store(path, read_only=True),
                            consolidated=location.consolidated(path))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot open the cube ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None


def record_provenance(path: str | Path, worker_hosts: set[str]) -> None:
    """Add the hosts that computed partitions (and, once every partition is done, the
    completion time) to the store's attributes, then re-consolidate. Call it holding the
    store's lock."""
    import zarr

    group = zarr.open_group(location.zarr_store(path), mode="r+", use_consolidated=True)
    update = {}
    hosts = sorted(set(group.attrs.get("worker_hosts", [])) | set(worker_hosts))
    if hosts != group.attrs.get("worker_hosts"):
        update["worker_hosts"] = hosts
    if (worker_hosts or "completed_at" not in group.attrs) and (read_status(path) == DONE).all():
        update["completed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not update:  # nothing was computed: a resume of a finished store changes nothing
        return
    group.attrs.update(update)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(location.zarr_store(path))
