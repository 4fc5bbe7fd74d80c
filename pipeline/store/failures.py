"""The errors of failed partitions, kept beside the store in ``STORE.errors/INDEX.json``.

`tokensweep status` shows them; completion is decided by the store's ``status`` alone, so a
record is only information (written before the status says failed, cleared when the partition
is done). INDEX is the partition's number in the plan of the store's spec: a grow, which changes
the plan, drops them with the old layout (`grow.py`). A remote store keeps them as objects beside
it in the same bucket (`location.sibling`).
"""

from __future__ import annotations

import json
from pathlib import Path

from . import location


def errors_dir(path: str | Path) -> str | Path:
    """The folder of the records: a Path beside a local store, a URL beside a remote one."""
    if location.is_remote(path):
        return location.sibling(path, ".errors")
    path = Path(path)
    return path.with_name(path.name + ".errors")


def _record(path: str | Path, index: int) -> str:
    return f"{errors_dir(path)}/{index}.json"


def write_error(path: str | Path, index: int, record: dict) -> None:
    """Keep the error of a failed partition (written before its status says failed)."""
    location.write_text(_record(path, index), json.dumps({"partition": index, **record}, indent=1))


def clear_error(path: str | Path, index: int) -> None:
    location.delete(_record(path, index))


def recorded_errors(path: str | Path) -> set[int]:
    """The partitions that have a record: one listing, where a batch of trivial partitions
    would otherwise pay a delete (a request, on an object store) per partition."""
    names = location.listdir(errors_dir(path))
    return {int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit()}


def read_error(path: str | Path, index: int) -> dict | None:
    try:
        return json.loads(location.read_text(_record(path, index)))
    except (OSError, ValueError):
        return None
