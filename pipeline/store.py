"""The result cube: one zarr v3 store per sweep, written and read through xarray.

Layout: every output of the model is a variable over (grid axes..., [t,] traj, [trailing...]),
chunked one cell by ``partition_traj`` trajectories (trailing dimensions, e.g. the ``bin`` of a
recorded histogram, whole: `recording`), so a partition writes whole chunks that no
other partition touches. Beyond a few thousand partitions, every variable is chunked by batch
of partitions instead (`variable_layout`, `plan.default_batch_shape`): a batch has one writer
(`batch.py`); the batch shape is read back from the store (`store_batch_shape`). ``status``
(pending / done / failed) over (grid axes...,
block) says which partitions are complete; a partition writes it last, after its
outputs and its timing, so a partition killed mid-write stays pending. The store's
attributes hold the full spec (as JSON), the seeding scheme and the versions of the
software that wrote it; a store is resumed by the spec that created it, or grown by one
that only adds to it.
Its metadata is written, consolidated, at creation; the only later change is the
provenance a finished flow adds (worker hosts, completion time), re-consolidated under
the store's lock. The error of a failed partition is kept beside the store, in
``STORE.errors/INDEX.json``, for ``tokensweep status``; completion is still decided by
``status`` alone.

Unwritten is never valid: every integer output has a CF ``_FillValue`` (and zarr ``fill_value``)
of its dtype's minimum, a value no kernel returns (valid values are >= -1), so a chunk no
partition wrote reads as NaN through xarray instead of as class 0; floats keep NaN. Bool outputs
cannot carry one in CF: readers mask them by ``status`` (`reading.open_sweep`).

A store only grows: a spec that adds trajectories, grid values or a new description is accepted
(`growth`; `grow.grow_store` rebuilds the layout), anything that would change existing numbers
is refused (`spec_differences`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

from . import location
from .errors import SpecError, StoreError
from .failures import clear_error, errors_dir, read_error, write_error  # noqa: F401 (re-exported)
from .models import get_model
from .plan import Partition, Plan, default_batch_shape
from .provenance import code_version, software_versions  # noqa: F401 (re-exported)
from .seeds import SEEDING_SCHEME
from .spec.base import SPEC_ATTR, SweepBase
from .spec.load import sweep_from_json
from .spec.recording import declared_outputs, dimension_coords, dimension_sizes

PENDING, DONE, FAILED = 0, 1, 2
STATUS_MEANINGS = "pending done failed"
NEW_STORE_HINT = ("a store only grows (more trajectories, new grid values, a new description); "
                  "use --store to write a new store, or delete the old one")
# CF attributes of the coordinates (grid axes of every model, checkpoints, trajectories)
COORD_ATTRS = {
    "beta": {"long_name": "inverse temperature", "units": "1"},
    "d": {"long_name": "dimension of the ambient space", "units": "1"},
    "n": {"long_name": "number of tokens", "units": "1"},
    "sigma": {"long_name": "noise strength", "units": "1"},
    "rho0": {"long_name": "initial overlap of the two tokens", "units": "1"},
    "layers": {"long_name": "number of layers (h = T / layers)", "units": "1"},
    "t": {"long_name": "checkpoint time", "units": "1"},
    "traj": {"long_name": "trajectory index", "units": "1"},
    "block": {"long_name": "trajectory block (partition along traj)", "units": "1"},
    # trailing dimensions of recorded observables (`recording`)
    "bin": {"long_name": "overlap bin centre", "units": "1"},
    "i": {"long_name": "token index i", "units": "1"},
    "j": {"long_name": "token index j", "units": "1"},
    "token": {"long_name": "token index", "units": "1"},
    "component": {"long_name": "coordinate index in R^d", "units": "1"},
}
DAMAGED_HINT = "the store is damaged: restore it from a copy, or delete it and run the spec again"


def template(sweep: SweepBase) -> xr.Dataset:
    """The empty cube (lazy: nothing is allocated), with metadata and chunking."""
    import dask.array as da  # here only: a worker, which never creates a store, saves ~0.7 s

    plan = Plan(sweep)
    axes = sweep.axes
    grid_shape = plan.grid_shape
    ntraj, nt = sweep.trajectories, len(sweep.time.checkpoint_layers)
    coords = {name: (name, np.asarray(values)) for name, values in axes.items()}
    coords["t"] = ("t", sweep.time.checkpoint_times)
    coords["traj"] = ("traj", np.arange(ntraj))
    coords["block"] = ("block", np.arange(plan.n_blocks))
    coords = {name: (*value, coord_attrs(name)) for name, value in coords.items()}

    variables, encoding = {}, {}
    outputs = declared_outputs(get_model(sweep.model), sweep)
    trailing = _trailing_dimensions(sweep, outputs.values(), coords)
    batch_shape = default_batch_shape(sweep, partition_bytes(sweep))
    for name, out in outputs.items():
        dims = (*axes, "t", "traj") if out.per_checkpoint else (*axes, "traj")
        shape = (*grid_shape, nt, ntraj) if out.per_checkpoint else (*grid_shape, ntraj)
        extra = tuple(trailing[dim] for dim in out.extra_dims)
        dims, shape = (*dims, *out.extra_dims), (*shape, *extra)
        attrs = {"long_name": out.long_name, "units": out.units}
        if getattr(out, "flag_values", None) is not None:
            attrs["flag_values"] = list(out.flag_values)
            attrs["flag_meanings"] = out.flag_meanings
        fill = fill_value(out.dtype)
        variables[name] = (dims, da.full(shape, False if fill is None else fill, dtype=out.dtype,
                                         chunks=-1), attrs)
        encoding[name] = variable_layout(sweep, dims, shape, batch_shape)
        if np.dtype(out.dtype).kind in "iu":  # CF mask on read, and what an unwritten chunk holds
            encoding[name].update(_FillValue=fill, fill_value=fill)

    status_dims = (*axes, "block")
    status_shape = (*grid_shape, plan.n_blocks)
    variables["status"] = (status_dims, da.zeros(status_shape, dtype="i1", chunks=-1), {
        "long_name": "partition status", "flag_values": [PENDING, DONE, FAILED],
        "flag_meanings": STATUS_MEANINGS})
    for name, long_name in (("started", "partition start"), ("finished", "partition end")):
        variables[name] = (status_dims, da.full(status_shape, np.nan, chunks=-1), {
            "long_name": long_name, "units": "seconds since 1970-01-01T00:00:00Z"})
    for name in ("status", "started", "finished"):
        encoding[name] = variable_layout(sweep, status_dims, status_shape, batch_shape)

    attrs = {
        "title": f"tokensweep cube: {sweep.name}",
        "model": sweep.model,
        "attention": getattr(sweep, "attention", ""),
        "T": sweep.time.T,
        "layers": sweep.time.layers,
        "h": sweep.time.h,
        "trajectories": sweep.trajectories,
        "seed": sweep.seed,
        "eps": sweep.eps,
        "seeding_scheme": SEEDING_SCHEME,
        SPEC_ATTR: json.dumps(sweep.model_dump(mode="json")),
        "software_versions": json.dumps(software_versions()),
        "code_version": code_version(),
        "created_on": socket.gethostname(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "Conventions": "CF-1.10",
    }
    ds = xr.Dataset(variables, coords=coords, attrs=attrs)
    ds.encoding["tokensweep_chunks"] = encoding
    return ds


def _trailing_dimensions(sweep: SweepBase, outputs, coords: dict) -> dict[str, int]:
    """Sizes of the trailing dimensions `outputs` use; adds their coordinates to `coords`."""
    used = list(dict.fromkeys(dim for out in outputs for dim in out.extra_dims))
    for dim, (values, attrs) in dimension_coords(sweep, used).items():
        coords[dim] = (dim, values, {**coord_attrs(dim), **attrs})
    sizes = dimension_sizes(sweep)
    return {dim: sizes[dim] for dim in used}


def variable_layout(sweep: SweepBase, dims: tuple[str, ...], shape: tuple[int, ...],
                    batch_shape: tuple[int, ...]) -> dict:
    """The zarr chunks of a variable over `dims`: one chunk per batch of partitions
    (`plan.default_batch_shape`; every other dimension whole), so no chunk has two writers.

    Without batches (every store up to a few thousand partitions) a chunk is one partition: one
    cell, ``partition_traj`` trajectories, one block. A batch's chunk is not split into one
    inner chunk per partition (zarr v3 sharding): zarr 3.1 decodes every inner chunk on its own,
    ~0.7 ms each, so reading the 1-byte statuses of 2*10^4 partitions took 14 s sharded and 0.8 s
    with one chunk per batch (`benchmarks/bench_flow.py`).

    >>> from tokensweep.pipeline.spec.load import load_sweep
    >>> sweep = load_sweep("quickstart")  # 400 trajectories, 200 per partition
    >>> variable_layout(sweep, ("beta", "d", "n", "t", "traj"), (7, 8, 1, 5, 400), (1, 1, 1, 1))
    {'chunks': (1, 1, 1, 5, 200)}
    >>> variable_layout(sweep, ("beta", "d", "n", "t", "traj"), (7, 8, 1, 5, 400), (1, 8, 1, 2))
    {'chunks': (1, 8, 1, 5, 400)}
    """
    axes = list(sweep.axes)
    chunks = []
    for dim, size in zip(dims, shape):
        if dim in axes:
            chunks.append(batch_shape[axes.index(dim)])
        elif dim == "block":
            chunks.append(batch_shape[-1])
        elif dim == "traj":
            chunks.append(batch_shape[-1] * sweep.partition_traj)
        else:  # checkpoints and any other dimension of an output: whole in every chunk
            chunks.append(size)
    return {"chunks": tuple(chunks)}


def partition_bytes(sweep: SweepBase) -> int:
    """Bytes of one partition's outputs (what a batch holds in memory per partition)."""
    nt = len(sweep.time.checkpoint_layers)
    sizes = dimension_sizes(sweep)
    return sweep.partition_traj * sum(
        np.dtype(out.dtype).itemsize * (nt if out.per_checkpoint else 1)
        * int(np.prod([sizes[dim] for dim in out.extra_dims], dtype=np.int64))
        for out in declared_outputs(get_model(sweep.model), sweep).values())


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


def fill_value(dtype):
    """The value an unwritten entry holds: the dtype's minimum for integers (never valid data:
    valid values are >= -1; the maximum for unsigned ones, whose minimum 0 is data), NaN for
    floats, None for bool (CF has no fill value for it).

    >>> fill_value("int8"), fill_value("int16"), fill_value("uint8"), fill_value("float64")
    (np.int8(-128), np.int16(-32768), np.uint8(255), nan)
    >>> fill_value("bool") is None
    True
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.min if dtype.kind == "i" else info.max)
    return np.nan if dtype.kind == "f" else None


def coord_attrs(name: str) -> dict:
    """CF attributes (long_name, units) of a coordinate; a grid axis not listed gets its name."""
    return dict(COORD_ATTRS.get(name, {"long_name": name, "units": "1"}))


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def stored_sweep(path: str | Path) -> SweepBase:
    """The spec a store was created with; refuses paths that are not tokensweep stores."""
    if location.is_remote(path):
        return _stored_sweep_remote(str(path))
    path = Path(path)
    if not path.exists():
        from .grow import interrupted

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
            out += _grid_refusals(a[k], b[k])
            continue
        out.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return out


def _grid_refusals(a: dict, b: dict) -> list[str]:
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
    from .models import get_model
    from .spec.recording import declared_outputs

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


def prepare_store(sweep: SweepBase, path: str | Path) -> str:
    """Create the store, resume it (it holds this spec) or grow it (`sweep` only adds to it).

    Returns "created", "resumed" or "grown". Refuses a store whose spec differs otherwise.
    Call it holding the store's lock (`lock.store_lock`): it finishes or undoes an interrupted
    grow first (`grow.recover`), and a grow replaces the store's directory.
    """
    from .grow import grow_store, recover

    if location.is_remote(path):  # never grown (`grow.refuse_remote`), so nothing to recover
        if location.holds_anything(path):
            refuse_missing_outputs(sweep, path)
            grow_store(sweep, path)  # refuses a different spec, and any growth
            return "resumed"
        create_store(sweep, path)
        return "created"
    path = Path(path)
    recover(path)
    if path.exists() and any(path.iterdir()):
        growth(stored_sweep(path), sweep, path)  # refuses before anything is written
        refuse_missing_outputs(sweep, path)
        return "grown" if grow_store(sweep, path) else "resumed"
    create_store(sweep, path)
    return "created"


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
    """One per-partition variable (status, started, finished), flattened in plan order."""
    try:
        with xr.open_zarr(location.zarr_store(path, read_only=True),
                          consolidated=location.consolidated(path),
                          chunks=None) as ds:  # no dask: see execute.py
            return ds[name].values.reshape(-1)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot read `{name}` ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None


def write_outputs(path: str | Path, plan: Plan, part: Partition, outputs: dict[str, np.ndarray]) -> None:
    """Write one partition's outputs: exactly one chunk of every output variable."""
    region = plan.region(part)
    region["t"] = slice(None)
    data = partition_dataset(plan, outputs)
    region.update({dim: slice(None) for dim in data.dims if dim not in region})  # trailing: whole
    data.to_zarr(location.zarr_store(path), region=region, mode="r+",
                 consolidated=location.consolidated(path))


def partition_dataset(plan: Plan, outputs: dict[str, np.ndarray]) -> xr.Dataset:
    """One partition's outputs as stored: every variable with the store's dims, cell axes of 1."""
    ndim = len(plan.grid_shape)
    variables = {}
    declared = declared_outputs(get_model(plan.sweep.model), plan.sweep)
    for name, spec in declared.items():
        values = np.asarray(outputs[name], dtype=spec.dtype)
        if spec.per_checkpoint:  # kernel: (traj, t, ...); the store keeps (cell..., t, traj, ...)
            values, dims = np.swapaxes(values, 0, 1), (*plan.sweep.axes, "t", "traj")
        else:
            dims = (*plan.sweep.axes, "traj")
        variables[name] = ((*dims, *spec.extra_dims), values.reshape((1,) * ndim + values.shape))
    return xr.Dataset(variables)


def mark_started(path: str | Path, plan: Plan, part: Partition, started: float) -> None:
    """Record that a partition is running (its status stays pending until it is done)."""
    dims = (*plan.sweep.axes, "block")
    xr.Dataset({"started": (dims, np.full((1,) * len(dims), started))}).to_zarr(
        location.zarr_store(path), region=plan.status_region(part), mode="r+",
        consolidated=location.consolidated(path))


def write_status(path: str | Path, plan: Plan, part: Partition, status: int,
                 started: float = np.nan, finished: float = np.nan) -> None:
    """Record timing first, then the status itself, so that status is written last."""
    dims = (*plan.sweep.axes, "block")
    shape = (1,) * len(dims)
    region = plan.status_region(part)
    store, consolidated = location.zarr_store(path), location.consolidated(path)
    timing = xr.Dataset({
        "started": (dims, np.full(shape, started)),
        "finished": (dims, np.full(shape, finished)),
    })
    timing.to_zarr(store, region=region, mode="r+", consolidated=consolidated)
    xr.Dataset({"status": (dims, np.full(shape, status, dtype="i1"))}).to_zarr(
        store, region=region, mode="r+", consolidated=consolidated)


def open_cube(path: str | Path) -> xr.Dataset:
    """Open a cube lazily (dask-backed), checking that it is a tokensweep store."""
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
