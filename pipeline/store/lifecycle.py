"""Preparing a store for a sweep: create it, resume it (it holds this spec) or grow it (the spec
only adds to it), finishing or undoing an interrupted grow first."""

from __future__ import annotations

from pathlib import Path

from ..spec.base import SweepBase
from . import location
from .compat import growth, refuse_missing_outputs
from .cube import create_store, stored_sweep
from .grow import grow_store, recover


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
