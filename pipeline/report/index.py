"""The index of many reports: `write_index(DIR)` finds every tokensweep store under DIR, writes the
report of each that has none or whose store was written since (`location.report_dir(STORE)`, the default
folder `STORE.report`), and writes DIR/index.html: one row per store with its name, model, cells
done, agreement summary, the verdict counts of its claims table (`claims_table`) and warnings,
linking its report.html, then the same counts per paper the claims cite (`paper_counts`);
`verdict_lines(DIR)` gives both as text, one line per store and one per paper (what
`tokensweep report --index` prints).

It reads each report's `summary.json` (written by `write_report`), so an index over finished
stores opens no cube. A store's report is stale when a file of its `status` array (written as
each partition finishes) or its metadata is newer than the summary.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from ..errors import StoreError
from ..store import location
from ..store.cube import open_cube, stored_sweep
from ..store.provenance import code_version
from .claims import KINDS, verdict_kind
from .html import render_page

__all__ = ["write_index", "find_stores", "verdict_lines", "paper_counts", "paper_of"]


def find_stores(root) -> list[Path]:
    """Every tokensweep store under root (not looking inside stores or report folders), sorted."""
    found = []
    for folder, subdirs, files in os.walk(root):
        path = Path(folder)
        if "zarr.json" in files:
            subdirs.clear()  # a zarr group's arrays, or a store: nothing further down
            try:
                stored_sweep(path)
            except StoreError:
                continue
            found.append(path)
        subdirs[:] = sorted(d for d in subdirs if not d.endswith(".report"))
    return sorted(found)


def _newest_write(store: Path) -> float:
    times = [(store / "zarr.json").stat().st_mtime]
    for folder, _, files in os.walk(store / "status"):
        times += [(Path(folder) / f).stat().st_mtime for f in files]
    return max(times)


def _summary(store: Path, level: float) -> dict:
    """The store's report summary, writing the report first when it is missing or stale."""
    from .page import write_report

    path = location.report_dir(store) / "summary.json"
    stale = not path.is_file() or path.stat().st_mtime < _newest_write(store)
    if stale or "claim_counts" not in json.loads(path.read_text()):  # written before claims tables
        with open_cube(store) as ds:
            write_report(ds, location.report_dir(store), level)
    return json.loads(path.read_text())


def write_index(root, level: float = 0.95) -> Path:
    """Write root/index.html over every store under root (module docstring); return its path."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"{root} is not a folder: give the folder that holds the stores "
                         "(tokensweep report --index DIR)")
    entries, summaries = [], []
    for store in find_stores(root):
        summary = _summary(store, level)
        summaries.append(summary)
        agreement = summary.get("agreement") or {}
        entries.append({
            "name": summary["name"], "model": summary["model"], "cells_done": summary["cells_done"],
            "cells": summary["cells"], "agreement": agreement.get("text"),
            "warnings": summary.get("warnings", []), "claims": summary.get("claim_counts", {}),
            "href": (location.report_dir(store) / summary.get("html", "report.html")).relative_to(root).as_posix(),
            "store": store.relative_to(root).as_posix()})
    index = root / "index.html"
    index.write_text(render_page("index.html", root=str(root), entries=entries, papers=paper_counts(summaries),
                                 version=code_version(),
                                 written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                     encoding="utf-8")
    return index


def paper_of(source: str) -> str:
    """The paper a claim's source cites: its leading tag.

    >>> paper_of("[GLPR-P] Thm 6.8, (6.10) (USA)"), paper_of("invariant")
    ('[GLPR-P]', 'no paper')
    """
    found = re.match(r"\[[^\]]+\]", source)
    return found[0] if found else "no paper"


def paper_counts(summaries) -> dict[str, dict[str, int]]:
    """{paper: {kind: verdicts}} over the claims tables of `summaries`, papers in sorted order."""
    counts: dict[str, dict[str, int]] = {}
    for summary in summaries:
        for claim in summary.get("claims", []):
            row = counts.setdefault(paper_of(claim["source"]), dict.fromkeys(KINDS, 0))
            row[verdict_kind(claim["verdict"])] += 1
    return dict(sorted(counts.items()))


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in KINDS)


def verdict_lines(root, level: float = 0.95) -> list[str]:
    """'NAME: 3 holds, 1 fails, 0 hypothesis not met, 2 not checked' per store under root (the
    summaries `write_index` keeps up to date), then the same counts per paper cited, summed over
    the stores ('[F26]: ...'; a claim judged in two stores counts twice)."""
    summaries = [_summary(store, level) for store in find_stores(Path(root))]
    lines = [f"{s['name']}: {_counts_text(s.get('claim_counts', {}))}" for s in summaries]
    return lines + [f"{paper}: {_counts_text(counts)}" for paper, counts in paper_counts(summaries).items()]
