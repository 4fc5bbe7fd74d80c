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
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from ..analysis.once import tables_once
from ..analysis.stats import stored_spec
from ..models import get_model
from ..plugin import ReportInput
from .agreement import agreement_summary, agreement_table
from .beside import beside_section
from .caveats import caveats, cells_done, unresolved_fraction
from .claims_table import check_claims, claims_lines, entry_of, verdict_counts
from .class_counts import class_count_section
from .html import render_markdown, render_page
from .observables import recorded_section
from .provenance import provenance
from .tables import fmt, rows_table

__all__ = ["write_report", "header_lines", "PURPOSE"]

# What the tool is for, on top of every report: a newcomer's first page says it
PURPOSE = ("tokensweep simulates the dynamics of tokens in a transformer, many random starts in every "
           "cell of a grid of parameters (beta, d, n, ...), and sets the measured outcomes beside the "
           "model's closed forms. This page reads one such run (a cube): its facts, then per outcome the "
           "measured probabilities with their intervals, the theory where one exists, the figures, and "
           "where the numbers came from.")


def header_lines(ds: xr.Dataset, level: float, t: float = float("nan"), pending: int = 0,
                 extra: tuple = ()) -> list[str]:
    """Title and the facts every report starts with; `extra`: more (name, value) facts."""
    attrs = ds.attrs
    sweep = stored_spec(ds)
    name = sweep.name if sweep is not None else attrs.get("name") or attrs.get("title", "sweep")
    lines = [f"# tokensweep report: {name}", ""]
    description = " ".join(str(getattr(sweep, "description", "") or "").split())
    lines += ([f"*{description}*", ""] if description else []) + [PURPOSE, ""]
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


def local_scheduler() -> dict:
    """`compute`'s scheduler where no Dask client can be active (distributed never imported, no
    scheduler configured): dask's own choice then (the threads of its arrays), named, so that
    dask does not import distributed to look for a client (~0.5 s of a tiny sweep's report,
    which runs in a process with no cluster). Else nothing: dask chooses as always."""
    import dask
    import dask.threaded

    if "distributed" in sys.modules or dask.config.get("scheduler", None) is not None:
        return {}
    return {"scheduler": dask.threaded.get}  # a function: a name would make dask import distributed


def write_report(ds: xr.Dataset, out_dir, level: float = 0.95, beside: xr.Dataset | None = None) -> dict:
    """Write report.md, report.html (self-contained) and summary.json with their figures into
    out_dir; return {'report': md path, 'html': html path, 'summary': json path, figure: path, ...}.
    `beside`: another cube (e.g. the deterministic counterpart of [F26] Fig. 9) drawn beside this
    one on the cells both hold (`report.beside`), and read by the claims that compare the two."""
    with tables_once():  # the sections, claims and summary ask for the same tables many times
        return _write_report(ds, out_dir, level, beside)


def _write_report(ds: xr.Dataset, out_dir, level: float, beside) -> dict:
    sweep = stored_spec(ds)
    if sweep is None:
        raise ValueError("the Dataset carries no tokensweep spec (attribute `tokensweep_spec`): "
                         "open a store written by tokensweep (tokensweep.pipeline.store.open_cube)")
    model = get_model(sweep.model)
    if ds.nbytes <= IN_MEMORY_BYTES:  # the sections read most of it, many times: read it once
        ds = ds.compute(**local_scheduler())
    if beside is not None and beside.nbytes <= IN_MEMORY_BYTES:
        beside = beside.compute(**local_scheduler())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report_input = ReportInput(ds, sweep, out, level, beside)
    body, figures, t = [], {}, float("nan")
    # the model's sections, then those any cube may have: classes over time, recorded observables,
    # the cube beside this one
    for section in [*model.sections(sweep), class_count_section, recorded_section, beside_section]:
        part = section(report_input)
        body += part.lines
        figures.update(part.figures)
    if "cluster_class" in ds and "t" in ds.dims:
        t = float(ds["t"].values[-1])  # the antipodal statistics are read at the last checkpoint
    extra = _spec_facts(sweep, model.report_facts)
    head = header_lines(ds, level, t, 0, extra)
    table = agreement_table(ds, level)
    warnings, agreement, origin = caveats(ds, table), agreement_summary(table), provenance(ds)
    claims = check_claims(report_input)
    claim_lines = claims_lines(claims, entry_of(sweep.name))
    summary_lines, outside_lines = [], []
    if agreement is not None:
        summary_lines = [f"**Agreement with the closed form**: {agreement.text}." +
                         (f" {agreement.why}" if agreement.why else ""), ""]
        outside_lines = ["## Cells outside their interval", ""] + (
            [rows_table(agreement.head, agreement.outside), ""] if agreement.outside else ["None.", ""])
    provenance_lines = ["## Provenance", ""] + [f"- **{k}**: {v}" for k, v in origin["facts"]] + [""]
    report = out / "report.md"
    report.write_text("\n".join(head + [w.markdown + "\n" for w in warnings] + summary_lines + body
                                 + claim_lines + outside_lines + provenance_lines))
    unresolved = unresolved_fraction(table)
    p_value = "—" if agreement is None else fmt(agreement.p_value, 3)
    html = out / "report.html"
    html.write_text(render_page(
        "report.html", name=sweep.name, version=ds.attrs.get("code_version", ""),
        facts=render_markdown("\n".join(head[2:]), out), caveats=warnings, agreement=agreement,
        p_value=p_value, unresolved=unresolved if math.isfinite(unresolved) else None,
        claims=claims, claim_counts=verdict_counts(claims), claims_note=render_markdown("\n".join(claim_lines[2:3]), out),
        body=render_markdown("\n".join(body), out), provenance=origin), encoding="utf-8")
    done, cells = cells_done(ds)
    summary = out / "summary.json"
    summary.write_text(json.dumps({
        "name": sweep.name, "model": sweep.model, "cells_done": done, "cells": cells,
        "agreement": None if agreement is None else agreement.as_dict(),
        "unresolved": unresolved if math.isfinite(unresolved) else None,
        "warnings": [w.title for w in warnings], "html": html.name,
        "claims": [c.as_dict() for c in claims], "claim_counts": verdict_counts(claims)}, indent=1))
    return {"report": str(report), "html": str(html), "summary": str(summary), **figures}
