"""The names a grow leaves beside a store while it runs (`grow.py` says what each one means), and
which of them an interrupted grow left: what a reader of the store checks before it says "no
store here"."""

from __future__ import annotations

from pathlib import Path

NEW, READY, OLD = ".grow-new", ".grow-ready", ".grow-old"


def sibling(path: str | Path, suffix: str) -> Path:
    path = Path(path)
    return path.with_name(path.name + suffix)


def interrupted(path: str | Path) -> list[str]:
    """The names an unfinished grow of `path` left beside it ([] when none)."""
    return [sibling(path, s).name for s in (NEW, READY, OLD) if sibling(path, s).exists()]
