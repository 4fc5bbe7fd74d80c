"""Growing a cube: more trajectories, new grid values or a new description, without recomputing.

Why a new store. Grid axes are stored sorted, so a value added in the middle of an axis moves
every later cell, and more trajectories change the shape of every output; zarr can only resize
an array at its end. So the grown cube is built beside the old one with the layout of the final
spec (`cube.create_store`: its template, its attributes), every done partition of the old cube
is copied into it by coordinate, and the two directories are swapped. Nothing is recomputed
here; the sweep that grows the store then computes the partitions that are still pending, and
since a trajectory's numbers depend only on (seed, cell coordinates, trajectory index)
(`seeds.py`), the result equals a fresh run of the final spec, bit for bit.

What is copied. A done partition whose cell and trajectory range are the same in both layouts:
its outputs, its timing and its status, one chunk of each variable at a time (memory stays at
one chunk), as raw stored values through zarr (no CF decoding between read and write: the
values written are the values read). An old last block that was partial (trajectories 10:12 of
12, by 5) covers more trajectories in the new layout (10:15), so it is pending there and
computed whole. Partitions not done start pending; the error records of failed ones, numbered in
the old plan, go with the old store (`failures.py`).

Crash safety. Call it holding the store's lock. Beside STORE:

    STORE.grow-new    the grown cube while it is built
    STORE.grow-ready  the commit mark, written atomically once STORE.grow-new is complete
    STORE.grow-old    the old cube, between the two renames of the swap

Steps: build STORE.grow-new -> sync -> write the mark -> rename STORE to STORE.grow-old ->
rename STORE.grow-new to STORE -> delete STORE.grow-old, STORE.errors, the mark. Killed before
the mark, STORE is the old cube untouched (the next `recover` deletes the partial build); killed
after it, STORE is the old cube or the complete new one, and the next `recover` (called by
`lifecycle.prepare_store`, under the lock) finishes the swap. Only between the two renames is there
no STORE, and then both cubes are there, whole, for `recover` to finish with. A grow replaces
the directory: a cube opened before it must be opened again.

Not on an object store. S3 has no rename, let alone an atomic one: a swap there would be a copy of
every object, and a crash half-way would leave a mixed cube. A remote store is refused a grow
(`refuse_remote`, exit 2 on the command line, before anything is written) with the fix: grow a
local copy, or write the larger spec to a new store.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import zarr

from ..errors import StoreError
from ..models import get_model
from ..plan import Plan
from ..spec.base import SweepBase
from ..spec.recording import declared_outputs
from . import location
from .chunks import Region, StoreArrays
from .compat import growth
from .cube import create_store, read_status, stored_sweep
from .failures import errors_dir
from .layout import DONE
from .marks import NEW, OLD, READY, interrupted, sibling

__all__ = ["grow_store", "recover", "interrupted", "sibling", "refuse_remote", "copy_done_partitions"]

def grow_store(sweep: SweepBase, path: str | Path) -> list[str]:
    """Grow the store at `path` to the layout of `sweep`; returns what was added ([]: nothing to
    do, the store is left as it is). Raises StoreError if `sweep` would change stored numbers."""
    if location.is_remote(path):
        refuse_remote(path, growth(stored_sweep(path), sweep, path))
        return []
    path = Path(path)
    recover(path)
    old = stored_sweep(path)
    added = growth(old, sweep, path)
    if not added:
        return []
    new = sibling(path, NEW)
    shutil.rmtree(new, ignore_errors=True)
    create_store(sweep, new, attrs=_carried_attributes(path, added))
    copy_done_partitions(old, path, sweep, new)
    os.sync()  # the new cube is on disk before the mark says it is complete
    mark = sibling(path, READY)
    tmp = sibling(path, READY + ".tmp")
    tmp.write_text(json.dumps({"added": added, "at": time.time()}))
    tmp.replace(mark)  # the commit point
    _swap(path)
    return added


def refuse_remote(store: str, added: list[str]) -> None:
    """StoreError if `added` is not empty: a store in an object store cannot be grown."""
    if added:
        raise StoreError(
            f"{store}: cannot grow a store in an object store ({'; '.join(added)}): a grow swaps "
            "folders, which S3 cannot do atomically; copy the store to a local disk (e.g. "
            f"`aws s3 sync {store} local.zarr`), grow it there and copy it back, or give the "
            "larger spec a new --store")


def recover(path: str | Path) -> None:
    """Finish a grow that was committed (its mark exists), or undo one that was not. Holding the lock."""
    path = Path(path)
    if sibling(path, READY).exists():
        _swap(path)
        return
    shutil.rmtree(sibling(path, NEW), ignore_errors=True)  # a partial build: the old cube is whole
    sibling(path, READY + ".tmp").unlink(missing_ok=True)
    old = sibling(path, OLD)
    if old.exists() and not path.exists():  # not reachable by grow_store's steps; never lose a cube
        old.rename(path)


def _swap(path: Path) -> None:
    """Second half of a committed grow; every step may be repeated after a crash."""
    new, old = sibling(path, NEW), sibling(path, OLD)
    if new.exists():
        if path.exists():  # the old cube, not moved aside yet
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
        new.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(errors_dir(path), ignore_errors=True)  # numbered in the old plan
    sibling(path, READY).unlink()


def _carried_attributes(path: Path, added: list[str]) -> dict:
    """Provenance of the old cube kept by the grown one: worker hosts and a CF history line."""
    attrs = zarr.open_group(str(path), mode="r", use_consolidated=False).attrs.asdict()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    history = attrs.get("history") or (f"{attrs.get('created_at', '?')}: created on "
                                       f"{attrs.get('created_on', '?')}")
    carried = {"history": f"{history}\n{now}: grown ({'; '.join(added)})"}
    if attrs.get("worker_hosts"):
        carried["worker_hosts"] = attrs["worker_hosts"]
    return carried


def copy_done_partitions(old: SweepBase, src_path: Path, new: SweepBase, dst_path: Path) -> None:
    """Copy outputs, timing and status of every old done partition that keeps its traj range,
    one partition's chunk of each variable at a time, through the store's one chunk writer."""
    old_plan, new_plan = Plan(old), Plan(new)
    position = {axis: {v: i for i, v in enumerate(values)} for axis, values in new.axes.items()}
    src, dst = StoreArrays(src_path, mode="r"), StoreArrays(dst_path)
    names = [*declared_outputs(get_model(new.model), new), "started", "finished", "status"]  # status last
    for index in np.flatnonzero(read_status(src_path) == DONE):
        part = old_plan[int(index)]
        cell = tuple(position[axis][value] for axis, value in old_plan.coords(part).items())
        target = new_plan[new_plan.index_of(cell, part.block)]
        if (target.traj_start, target.traj_stop) != (part.traj_start, part.traj_stop):
            continue  # an old partial last block: computed whole in the new layout
        a, b = Region.of_partition(old_plan, src, part), Region.of_partition(new_plan, dst, target)
        for name in names:
            b.write(name, a.read(name))
