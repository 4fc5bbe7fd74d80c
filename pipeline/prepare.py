"""The one pre-run check: is this spec runnable on this store, now? Writes nothing.

Every way a sweep starts goes through `prepare_sweep` before anything is computed or written:
`tokensweep run` (the CLI), ``tokensweep.run`` (the Python API), the Prefect flow itself (so a
run launched from the UI or `tokensweep serve` is checked the same way) and `plan`. It checks,
in order: the spec (a YAML path or catalog name, plain data or a parsed spec, at `scale`), the
size its store would reach (`spec.check_store_size`: TOKENSWEEP_MAX_STORE_GIB), the store's path
(a folder one can write in, or a URL that answers), what an existing store holds (it keeps its
partitioning unless one is given; it may only grow; a remote store never grows; a damaged store
or one that lacks an output its model records now is refused) and, unless `check_lock=False`,
its lock. Bad input raises SpecError or StoreError naming the field and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SpecError, StoreError
from .spec.base import SweepBase
from .spec.load import check_store_size, parse_sweep, read_spec, spec_at_scale
from .store import location
from .store.lock import describe_lock

__all__ = ["prepare_sweep", "store_target", "check_store_path", "refuse_if_locked"]


def prepare_sweep(spec, *, scale: str | None = None, store: str | Path | None = None,
                  partition_traj: int | None = None, check_lock: bool = True) -> SweepBase:
    """The sweep `spec` runs on `store` (default: the spec's), checked against the store; writes
    nothing. `spec`: a YAML path or catalog name, a dict (plain data, at `scale`) or a parsed
    spec (`scale` is ignored: it is already at one). Raises SpecError or StoreError."""
    data, store = _spec_data(spec, scale, store)
    store = None if store is None else str(store)
    sweep = parse_sweep(data, store=store, partition_traj=partition_traj)
    check_store_size(sweep)
    path = store_target(sweep.store)
    check_store_path(path)
    if location.holds_anything(path):
        from .store.compat import growth, refuse_missing_outputs
        from .store.cube import read_status, stored_sweep
        from .store.grow import refuse_remote

        old = stored_sweep(path)
        if partition_traj is None and "partition_traj" not in data:
            # a store keeps the partitioning it was created with unless the user asks otherwise
            sweep = parse_sweep({**data, "partition_traj": old.partition_traj}, store=store)
        added = growth(old, sweep, path)  # refuses what would change numbers already stored
        if location.is_remote(path):  # no grow there: refused now, not in the flow
            refuse_remote(path, added)
        read_status(path)  # a damaged store is refused here, before any flow starts
        refuse_missing_outputs(sweep, path)
    if check_lock:
        refuse_if_locked(path)
    return sweep


def _spec_data(spec, scale: str | None, store) -> tuple[dict, str | Path | None]:
    """The spec as plain data at its scale, and the store (the one given, else a parsed spec's)."""
    if isinstance(spec, SweepBase):
        data = spec.model_dump(mode="json", exclude={"store"})
        if "partition_traj" not in spec.model_fields_set:  # defaulted: the store's may be kept
            data.pop("partition_traj")
        return data, spec.store if store is None else store
    if isinstance(spec, dict):
        return spec_at_scale(spec, scale), store
    if isinstance(spec, (str, Path)):
        return read_spec(spec, scale or "small"), store
    raise SpecError(f"spec: give a YAML path, a catalog name, a mapping of fields or a parsed "
                    f"spec, got {type(spec).__name__}")


def store_target(store: str | Path) -> Path | str:
    """A store argument as the pipeline takes it: a Path, or a URL kept as text."""
    return store if location.is_remote(store) else Path(location.normalised(store))


def check_store_path(path: Path | str) -> None:
    """A store path a sweep can create or resume: not a file, in a folder one can write in; a
    store URL: a protocol fsspec knows, an endpoint that answers, credentials, the bucket."""
    if location.is_remote(path):
        location.check_reachable(path)
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StoreError(f"store {path} is a file, not a store folder: give --store a new path "
                         "or an existing tokensweep store")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(f"store {path}: {folder} is a file, not a folder: give --store a path "
                         "inside a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"store {path}: cannot write in {folder}: give --store a path in a "
                         "folder you can write in")


def refuse_if_locked(path: Path | str) -> None:
    """StoreError naming the lock's owner (and whether it is stale) when another sweep holds it."""
    held = describe_lock(path)
    if held:
        raise StoreError(f"{path} is being written by another sweep ({held})")
