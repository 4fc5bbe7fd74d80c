"""The errors of failed partitions, kept beside the store in ``STORE.errors/INDEX.json``.

`tokensweep status` shows them; completion is decided by the store's ``status`` alone, so a
record is only information (written before the status says failed, cleared when the partition
is done). INDEX is the partition's number in the plan of the store's spec: a grow, which changes
the plan, drops them with the old layout (`grow.py`).
"""

from __future__ import annotations

import json
from pathlib import Path


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
