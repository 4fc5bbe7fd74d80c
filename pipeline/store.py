"""The result cube: one zarr v3 store per sweep, written and read through xarray.

Layout: every output of the model is a variable over (grid axes..., [t,] traj), chunked
one cell by ``partition_traj`` trajectories, so a partition writes whole chunks that no
other partition touches. ``status`` (pending / done / failed) over (grid axes...,
block) says which partitions are complete; a partition writes it last, after its
outputs and its timing, so a partition killed mid-write stays pending. The store's
attributes hold the full spec (as JSON), the seeding scheme and the versions of the
software that wrote it; a store is only ever resumed by the spec that created it.
Its metadata is written, consolidated, at creation; the only later change is the
provenance a finished flow adds (worker hosts, completion time), re-consolidated under
the store's lock. The error of a failed partition is kept beside the store, in
``STORE.errors/INDEX.json``, for ``tokensweep status``; completion is still decided by
``status`` alone.
"""

from __future__ import annotations

import json
import platform
import socket
import time
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr

from .models import get_model
from .plan import Partition, Plan
from .seeds import SEEDING_SCHEME
from .spec import SPEC_ATTR, SpecError, SweepBase, sweep_from_json

PENDING, DONE, FAILED = 0, 1, 2
STATUS_MEANINGS = "pending done failed"
NEW_STORE_HINT = "use --store to write a new store, or delete the old one"
DAMAGED_HINT = "the store is damaged: restore it from a copy, or delete it and run the spec again"


class StoreError(ValueError):
    """A store that cannot be used as asked; the message says why and what to do."""


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("tokensweep", "numpy", "numba", "xarray", "zarr", "dask", "prefect"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def code_version() -> str:
    """`git describe` of the source tree when it is a checkout, else the package version."""
    import subprocess

    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=here,
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"tokensweep {software_versions()['tokensweep']} (not a git checkout)"


def template(sweep: SweepBase) -> xr.Dataset:
    """The empty cube (lazy: nothing is allocated), with metadata and chunking."""
    plan = Plan(sweep)
    axes = sweep.axes
    grid_shape = plan.grid_shape
    ntraj, nt = sweep.trajectories, len(sweep.time.checkpoint_layers)
    coords = {name: (name, np.asarray(values)) for name, values in axes.items()}
    coords["t"] = ("t", sweep.time.checkpoint_times, {"long_name": "checkpoint time", "units": "1"})
    coords["traj"] = ("traj", np.arange(ntraj), {"long_name": "trajectory index", "units": "1"})
    coords["block"] = ("block", np.arange(plan.n_blocks), {"long_name": "trajectory block"})

    variables, encoding = {}, {}
    cell_chunks = (1,) * len(grid_shape)
    for name, out in get_model(sweep.model).outputs.items():
        dims = (*axes, "t", "traj") if out.per_checkpoint else (*axes, "traj")
        shape = (*grid_shape, nt, ntraj) if out.per_checkpoint else (*grid_shape, ntraj)
        chunks = (*cell_chunks, nt, sweep.partition_traj) if out.per_checkpoint else (
            *cell_chunks, sweep.partition_traj)
        attrs = {"long_name": out.long_name, "units": out.units}
        if getattr(out, "flag_values", None) is not None:
            attrs["flag_values"] = list(out.flag_values)
            attrs["flag_meanings"] = out.flag_meanings
        fill = np.nan if np.dtype(out.dtype).kind == "f" else 0
        variables[name] = (dims, da.full(shape, fill, dtype=out.dtype, chunks=-1), attrs)
        encoding[name] = {"chunks": chunks}

    status_dims = (*axes, "block")
    status_shape = (*grid_shape, plan.n_blocks)
    status_chunks = (1,) * len(status_dims)
    variables["status"] = (status_dims, da.zeros(status_shape, dtype="i1", chunks=-1), {
        "long_name": "partition status", "flag_values": [PENDING, DONE, FAILED],
        "flag_meanings": STATUS_MEANINGS})
    for name, long_name in (("started", "partition start"), ("finished", "partition end")):
        variables[name] = (status_dims, da.full(status_shape, np.nan, chunks=-1), {
            "long_name": long_name, "units": "seconds since 1970-01-01T00:00:00Z"})
    for name in ("status", "started", "finished"):
        encoding[name] = {"chunks": status_chunks}

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


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def stored_sweep(path: str | Path) -> SweepBase:
    """The spec a store was created with; refuses paths that are not tokensweep stores."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"no store at {path}: run `tokensweep run SPEC --store {path}` first")
    if not _is_store(path):
        raise StoreError(f"{path} is not a zarr v3 store (no zarr.json): not written by tokensweep")
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
    except (OSError, json.JSONDecodeError) as err:
        raise StoreError(f"{path}: unreadable store metadata ({err})") from None
    if SPEC_ATTR not in attrs:
        raise StoreError(f"{path} is a zarr store but not a tokensweep cube (no {SPEC_ATTR} attribute)")
    try:
        return sweep_from_json(attrs[SPEC_ATTR])
    except SpecError as err:
        raise StoreError(f"{path}: its stored spec no longer validates: {err}") from None


def spec_differences(old: SweepBase, new: SweepBase) -> list[str]:
    a, b = old.canonical(), new.canonical()
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def prepare_store(sweep: SweepBase, path: str | Path) -> str:
    """Create the store from the template, or check that an existing one holds this spec.

    Returns "created" or "resumed". Never modifies an existing store.
    """
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        old = stored_sweep(path)
        diff = spec_differences(old, sweep)
        if diff:
            raise StoreError(
                f"{path} holds a different spec ({'; '.join(diff)}): {NEW_STORE_HINT}"
            )
        return "resumed"
    ds = template(sweep)
    encoding = ds.encoding.pop("tokensweep_chunks")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Metadata is final at creation (partitions only write chunks), so consolidating it now
    # is safe and lets `xr.open_zarr(path)` open the cube quietly in one call.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        ds.to_zarr(path, mode="w-", compute=False, zarr_format=3, consolidated=True,
                   encoding=encoding)
    return "created"


def read_status(path: str | Path) -> np.ndarray:
    """Status per partition, flattened in plan order (cells in C order, then blocks)."""
    return read_partition_table(path, "status")


def read_partition_table(path: str | Path, name: str) -> np.ndarray:
    """One per-partition variable (status, started, finished), flattened in plan order."""
    try:
        with xr.open_zarr(path, consolidated=False, chunks=None) as ds:  # no dask: see execute.py
            return ds[name].values.reshape(-1)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot read `{name}` ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None


def write_outputs(path: str | Path, plan: Plan, part: Partition, outputs: dict[str, np.ndarray]) -> None:
    """Write one partition's outputs: exactly one chunk of every output variable."""
    ndim = len(plan.grid_shape)
    variables = {}
    for name, spec in get_model(plan.sweep.model).outputs.items():
        values = np.asarray(outputs[name], dtype=spec.dtype)
        if spec.per_checkpoint:  # kernel gives (traj, t); the store keeps (cell..., t, traj)
            values, dims = values.T, (*plan.sweep.axes, "t", "traj")
        else:
            dims = (*plan.sweep.axes, "traj")
        variables[name] = (dims, values.reshape((1,) * ndim + values.shape))
    region = plan.region(part)
    region["t"] = slice(None)
    xr.Dataset(variables).to_zarr(path, region=region, mode="r+", consolidated=False)


def mark_started(path: str | Path, plan: Plan, part: Partition, started: float) -> None:
    """Record that a partition is running (its status stays pending until it is done)."""
    dims = (*plan.sweep.axes, "block")
    xr.Dataset({"started": (dims, np.full((1,) * len(dims), started))}).to_zarr(
        path, region=plan.status_region(part), mode="r+", consolidated=False)


def write_status(path: str | Path, plan: Plan, part: Partition, status: int,
                 started: float = np.nan, finished: float = np.nan) -> None:
    """Record timing first, then the status itself, so that status is written last."""
    dims = (*plan.sweep.axes, "block")
    shape = (1,) * len(dims)
    region = plan.status_region(part)
    timing = xr.Dataset({
        "started": (dims, np.full(shape, started)),
        "finished": (dims, np.full(shape, finished)),
    })
    timing.to_zarr(path, region=region, mode="r+", consolidated=False)
    xr.Dataset({"status": (dims, np.full(shape, status, dtype="i1"))}).to_zarr(
        path, region=region, mode="r+", consolidated=False)


def open_cube(path: str | Path) -> xr.Dataset:
    """Open a cube lazily (dask-backed), checking that it is a tokensweep store."""
    stored_sweep(path)
    try:
        return xr.open_zarr(path, consolidated=False)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path}: cannot open the cube ({type(err).__name__}: {err}): "
                         f"{DAMAGED_HINT}") from None


def record_provenance(path: str | Path, worker_hosts: set[str]) -> None:
    """Add the hosts that computed partitions (and, once every partition is done, the
    completion time) to the store's attributes, then re-consolidate. Call it holding the
    store's lock."""
    import zarr

    group = zarr.open_group(str(path), mode="r+", use_consolidated=True)
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
        zarr.consolidate_metadata(str(path))


# -- errors of failed partitions: STORE.errors/INDEX.json, read by `tokensweep status` --

def errors_dir(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".errors")


def write_error(path: str | Path, index: int, record: dict) -> None:
    """Keep the error of a failed partition (written before its status says failed)."""
    folder = errors_dir(path)
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{index}.json.tmp"
    tmp.write_text(json.dumps({"partition": index, **record}, indent=1))
    tmp.replace(folder / f"{index}.json")


def clear_error(path: str | Path, index: int) -> None:
    (errors_dir(path) / f"{index}.json").unlink(missing_ok=True)


def read_error(path: str | Path, index: int) -> dict | None:
    try:
        return json.loads((errors_dir(path) / f"{index}.json").read_text())
    except (OSError, ValueError):
        return None
