"""The layout of a result cube: its variables, dimensions, chunks, CF attributes and fill values.

One zarr v3 store per sweep, written and read through xarray (and, chunk by chunk, through zarr:
`chunks`).

Layout: every output of the model is a variable over (grid axes..., [t,] traj, [trailing...]),
chunked one cell by ``partition_traj`` trajectories (trailing dimensions, e.g. the ``bin`` of a
recorded histogram, whole: `recording`), so a partition writes whole chunks that no
other partition touches. Beyond a few thousand partitions, every variable is chunked by batch
of partitions instead (`variable_layout`, `plan.default_batch_shape`): a batch has one writer
(`batch.py`); the batch shape is read back from the store (`cube.store_batch_shape`). ``status``
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
(`compat.growth`; `grow.grow_store` rebuilds the layout), anything that would change existing
numbers is refused (`compat.spec_differences`).
"""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING

import numpy as np

from ..models import get_model
from ..plan import Plan, default_batch_shape
from ..seeds import SEEDING_SCHEME
from ..spec.base import SPEC_ATTR, SweepBase
from ..spec.recording import declared_outputs, dimension_coords, dimension_sizes
from .provenance import code_version, software_versions

if TYPE_CHECKING:
    import xarray as xr

PENDING, DONE, FAILED = 0, 1, 2
STATUS_MEANINGS = "pending done failed"
# CF attributes of the coordinates (grid axes of every model, checkpoints, trajectories)
COORD_ATTRS = {
    "beta": {"long_name": "inverse temperature", "units": "1"},
    "d": {"long_name": "dimension of the ambient space", "units": "1"},
    "n": {"long_name": "number of tokens", "units": "1"},
    "sigma": {"long_name": "noise strength", "units": "1"},
    "omega": {"long_name": "turning speed of the value matrix's eigenvectors", "units": "rad per unit time"},
    "rho0": {"long_name": "initial overlap of the two tokens", "units": "1"},
    "start_scale": {"long_name": "factor multiplying every start", "units": "1"},
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


def _lazy_name(variable: str, shape: tuple, dtype) -> str:
    """The dask name of a template variable: given, so dask does not hash (cloudpickle) each
    `full` call's arguments: a quarter of `create_store`'s time. Unique per variable, shape and
    dtype; the template's graph is never computed (only its metadata is written)."""
    return f"template-{variable}-{'x'.join(map(str, shape))}-{np.dtype(dtype).str}"


def template(sweep: SweepBase) -> xr.Dataset:
    """The empty cube (lazy: nothing is allocated), with metadata and chunking."""
    import dask.array as da  # here only: a worker, which never creates a store, saves ~0.7 s
    import xarray as xr  # here only: `status` reads the partition table with zarr alone

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
                                         chunks=-1, name=_lazy_name(name, shape, out.dtype)), attrs)
        encoding[name] = variable_layout(sweep, dims, shape, batch_shape)
        if np.dtype(out.dtype).kind in "iu":  # CF mask on read, and what an unwritten chunk holds
            encoding[name].update(_FillValue=fill, fill_value=fill)

    status_dims = (*axes, "block")
    status_shape = (*grid_shape, plan.n_blocks)
    variables["status"] = (status_dims, da.zeros(status_shape, dtype="i1", chunks=-1,
                                                name=_lazy_name("status", status_shape, "i1")), {
        "long_name": "partition status", "flag_values": [PENDING, DONE, FAILED],
        "flag_meanings": STATUS_MEANINGS})
    for name, long_name in (("started", "partition start"), ("finished", "partition end")):
        variables[name] = (status_dims, da.full(status_shape, np.nan, chunks=-1,
                                                name=_lazy_name(name, status_shape, "f8")), {
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
