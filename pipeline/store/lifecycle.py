"""Preparing a store for a sweep: create it, resume it (it holds this spec) or grow it (the spec
only adds to it), finishing or undoing an interrupted grow first; and how many partitions a run
on it computes."""

from __future__ import annotations

from pathlib import Path

from ..errors import StoreError
from ..plan import Plan
from ..spec.base import SweepBase
from . import location
from .compat import growth, refuse_missing_outputs
from .cube import create_store, read_status, stored_sweep
from .grow import grow_store, recover
from .layout import DONE, FAILED


def prepare_store(sweep: SweepBase, path: str | Path) -> str:
    """Create the store, resume it (it holds this spec) or grow it (`sweep` only adds to it).

    Returns "created", "resumed" or "grown". Refuses a store whose spec differs otherwise.
    Call it holding the store's lock (`lock.store_lock`): it finishes or undoes an interrupted
    grow first (`grow.recover`), and a grow replaces the store's directory.
    """
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


def partitions_to_run(sweep: SweepBase, path: str | Path, failed_only: bool = False) -> int:
    """How many partitions a run of `sweep` on the store at `path` computes: every one of a new
    store; on an existing one those not done (or, `failed_only`, the failed ones); on a store the
    spec grows (`grow.py`), every partition of the grown plan but the done ones the grow carries
    over: those whose cell and trajectory range it keeps (an old partial last block is computed
    whole). A store that cannot be read counts as new: the run itself refuses it, saying why."""
    plan = Plan(sweep)
    try:
        if not location.exists(f"{str(path).rstrip('/')}/zarr.json"):
            return len(plan)
        flat, old = read_status(path), stored_sweep(path)
    except (StoreError, OSError, ValueError, KeyError):
        return len(plan)
    if old.trajectories == sweep.trajectories and old.axes == sweep.axes:  # no growth
        return int((flat == FAILED).sum() if failed_only else (flat != DONE).sum())
    done = (flat == DONE).reshape(-1, Plan(old).n_blocks)  # (cells, blocks)
    carried = int(done.sum())
    if old.trajectories % old.partition_traj and sweep.trajectories != old.trajectories:
        carried -= int(done[:, -1].sum())  # a partial last block grows: computed whole
    return len(plan) - carried
