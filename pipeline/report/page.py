"""A report page for one cube: the header every report starts with, then the model's sections.

`write_report(ds, out_dir)` reads the cube's typed spec, asks its model (pipeline/models/) for
its sections (functions of the outcome modules `antipodal`, `clustering`, `geometry` with the
model's closed forms bound in), adds the sections any cube may have (`class_counts`,
`observables`), and writes `report.md` beside the figures the sections drew, the same report as
one self-contained `report.html` (`html`: figures embedded) with the warnings (`caveats`), the
agreement summary (`agreement`) and the provenance (`provenance`) at hand, and `summary.json`,
what the index of many reports (`index`) lists.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import xarray as xr

from ..analysis.stats import stored_spec
from ..plugin import ReportInput

__all__ = ["write_report", "header_lines", "rows_table", "row_order", "fmt", "cell_rows"]


def fmt(x, digits=4) -> str:
    """A number for a table cell; an em dash for None, NaN or inf."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def row_order(dims) -> list[str]:
    """Grid dimensions, d first and beta last, so that rows read d then (...) then beta."""
    dims = list(dims)
    return [x for x in ["d"] if x in dims] + [x for x in dims if x not in ("d", "beta")] + \
        [x for x in ["beta"] if x in dims]


def rows_table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table from a header and rows of already formatted cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def cell_rows(da: xr.DataArray, dims):
    """(coordinate labels, index dict) over every cell of the given dims, in C order."""
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        sel = dict(zip(dims, idx))
        yield [f"{da[d].values[i]:g}" for d, i in sel.items()], sel


def header_lines(ds: xr.Dataset, level: float, t: float = float("nan"), pending: int = 0,
                 extra: tuple = ()) -> list[str]:
    """Title and the facts every report starts with; `extra`: more (name, value) facts."""
    attrs = ds.attrs
    sweep = stored_spec(ds)
    name = sweep.name if sweep is not None else attrs.get("name") or attrs.get("title", "sweep")
    lines = [f"# tokensweep report: {name}", ""]
    facts = [("model", attrs.get("model", "?"))]
    if attrs.get("attention"):
        facts.append(("attention", attrs["attention"]))
    facts += list(extra)
    if "T" in attrs:
        facts.append(("T", f"{float(attrs['T']):g}"))
        if attrs.get("layers"):
            h = attrs.get("h", float(attrs["T"]) / float(attrs["layers"]))
            facts += [("layers", attrs["layers"]), ("h = T / layers", f"{float(h):.4g}")]
    facts.append(("trajectories per cell", attrs.get("trajectories", ds.sizes.get("traj", "?"))))
    if "seed" in attrs:
        facts.append(("seed", attrs["seed"]))
    if np.isfinite(t):
        facts.append(("checkpoint t", f"{t:g}"))
    facts.append(("interval", f"Wilson score, {level:.0%}"))
    lines += [f"- **{k}**: {v}" for k, v in facts] + [""]
    if pending:
        lines += [f"**Incomplete cube**: {pending} trajectories belong to partitions not done and are "
                  "left out of every count below.", ""]
    return lines


def _spec_facts(sweep, names) -> tuple:
    values = sweep.model_dump(mode="json")
    return tuple((k, values[k]) for k in names if values.get(k) not in (None, ""))


# A cube up to this size is read into memory before the report (the caller's stays lazy); a larger
# one is read section by section, through dask
IN_MEMORY_BYTES = 512 * 2**20


def write_report(ds: xr.Dataset, out_dir, level: float = 0.95) -> dict:
    """Write report.md, report.html (self-contained) and summary.json with their figures into
    out_dir; return {'report': md path, 'html': html path, 'summary': json path, figure: path, ...}."""
    from ..models import get_model
    from .agreement import agreement_summary, agreement_table
    from .caveats import caveats, cells_done, unresolved_fraction
    from .class_counts import class_count_section
    from .html import render_markdown, render_page
    from .observables import recorded_section
    from .provenance import provenance

    sweep = stored_spec(ds)
    if sweep is None:
        raise ValueError("the Dataset carries no tokensweep spec (attribute `tokensweep_spec`): "
                         "open a store written by tokensweep (tokensweep.pipeline.store.open_cube)")
    model = get_model(sweep.model)
    if ds.nbytes <= IN_MEMORY_BYTES:  # the sections read most of it, many times: read it once
        ds = ds.compute()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report_input = ReportInput(ds, sweep, out, level)
    body, figures, t = [], {}, float("nan")
    # the model's sections, then those any cube may have: classes over time, recorded observables
    for section in [*model.sections(sweep), class_count_section, recorded_section]:
        part = section(report_input)
        body += part.lines
        figures.update(part.figures)
    if "cluster_class" in ds and "t" in ds.dims:
        t = float(ds["t"].values[-1])  # the antipodal statistics are read at the last checkpoint
    extra = _spec_facts(sweep, model.report_facts)
    head = header_lines(ds, level, t, 0, extra)
    table = agreement_table(ds, level)
    warnings, agreement, origin = caveats(ds, table), agreement_summary(table), provenance(ds)
    summary_lines, outside_lines = [], []
    if agreement is not None:
        summary_lines = [f"**Agreement with the closed form**: {agreement.text}.", ""]
        outside_lines = ["## Cells outside their interval", ""] + (
            [rows_table(agreement.head, agreement.outside), ""] if agreement.outside else ["None.", ""])
    provenance_lines = ["## Provenance", ""] + [f"- **{k}**: {v}" for k, v in origin["facts"]] + [""]
    report = out / "report.md"
    report.write_text("\n".join(head + [w.markdown + "\n" for w in warnings] + summary_lines + body
                                 + outside_lines + provenance_lines))
    unresolved = unresolved_fraction(table)
    p_value = "—" if agreement is None else fmt(agreement.p_value, 3)
    html = out / "report.html"
    html.write_text(render_page(
        "report.html", name=sweep.name, version=ds.attrs.get("code_version", ""),
        facts=render_markdown("\n".join(head[2:]), out), caveats=warnings, agreement=agreement,
        p_value=p_value, unresolved=unresolved if math.isfinite(unresolved) else None,
        body=render_markdown("\n".join(body), out), provenance=origin), encoding="utf-8")
    done, cells = cells_done(ds)
    summary = out / "summary.json"
    summary.write_text(json.dumps({
        "name": sweep.name, "model": sweep.model, "cells_done": done, "cells": cells,
        "agreement": None if agreement is None else agreement.as_dict(),
        "unresolved": unresolved if math.isfinite(unresolved) else None,
        "warnings": [w.title for w in warnings], "html": html.name}, indent=1))
    return {"report": str(report), "html": str(html), "summary": str(summary), **figures}
