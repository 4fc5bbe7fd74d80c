"""A report page for one sweep: header, per-cell table, chi-square summary and figures.

`write_report(ds, out_dir)` dispatches on the cube's model (``ds.attrs["model"]``). The deterministic
flows (sphere_flow, euclidean_flow) are reported by pipeline/report_flows.py. For the stochastic
models it reduces the cube with `phase.antipodal_table`, draws `phase.png` (P(antipodal) vs beta;
plus `heatmap.png` over (beta, sigma) for the hybrid model) and writes `report.md`; when the grid
holds n > 2 it adds P(at least one antipodal pair) vs beta per n and its persistence over the
checkpoints (`phase.any_antipodal_table`, `any_antipodal.png`, `persistence.png`).  The agreement column uses the 99 % Wilson interval widened by 0.01 on each side:
the discrete model with step h carries an O(h) bias against the limit SDE (models.md section 4:
at d = 8, beta = 1.5 the discrete model gives 0.035 at h = 0.01 against 0.042), which a pure
sampling interval would flag as disagreement at large N.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import xarray as xr

from . import phase, plots

__all__ = ["write_report", "markdown_table", "AGREE_LEVEL", "AGREE_WIDEN", "header_lines", "rows_table"]
FLOW_MODELS = ("sphere_flow", "euclidean_flow")

AGREE_LEVEL, AGREE_WIDEN = 0.99, 0.01


def _fmt(x, digits=4) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def _row_order(table: xr.Dataset) -> list[str]:
    """Grid dimensions, d first and beta last, so that rows read d then (...) then beta."""
    dims = list(table.n_traj.dims)
    return [x for x in ["d"] if x in dims] + [x for x in dims if x not in ("d", "beta")] + \
        [x for x in ["beta"] if x in dims]


def markdown_table(table: xr.Dataset, level: float = 0.95) -> str:
    """One row per grid cell: coordinates, N, p, interval, theory, z, unresolved, agreement."""
    dims = _row_order(table)
    table = table.sortby(dims).transpose(*dims)
    agree = phase.agrees(table, AGREE_LEVEL, AGREE_WIDEN).transpose(*dims).values
    judged = (table.theory.notnull() & (table.n_traj > 0)).values  # a flag needs a theory and data
    head = dims + ["N", "p_antipodal", f"{level:.0%} Wilson", "theory", "z", "unresolved",
                   "nonfinite", f"agrees ({AGREE_LEVEL:.0%} ± {AGREE_WIDEN})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for idx in np.ndindex(table.n_traj.shape):
        cell = table[{dim: i for dim, i in zip(dims, idx)}]
        N = int(cell.n_traj)
        unresolved = float(cell.n_unresolved) / N if N else float("nan")
        row = [f"{cell[dim].values.item():g}" for dim in dims] + [
            str(N), _fmt(float(cell.p_antipodal)),
            f"[{_fmt(float(cell.lo))}, {_fmt(float(cell.hi))}]", _fmt(float(cell.theory)),
            _fmt(float(cell.z), 2), _fmt(unresolved), str(int(cell.n_nonfinite)),
            ("yes" if agree[idx] else "no") if judged[idx] else "n/a"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def rows_table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table from a header and rows of already formatted cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def header_lines(ds: xr.Dataset, level: float, t: float = float("nan"), pending: int = 0,
                 extra: tuple = ()) -> list[str]:
    """Title and the facts every report starts with; `extra`: more (name, value) facts."""
    attrs = ds.attrs
    try:
        name = attrs.get("name") or json.loads(attrs["tokensweep_spec"])["name"]
    except (KeyError, TypeError, ValueError):
        name = attrs.get("title", "sweep")
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


def write_report(ds: xr.Dataset, out_dir, level: float = 0.95) -> dict:
    """Write report.md and its figures into out_dir; return {'report': ..., 'phase': ..., ...}."""
    model = str(ds.attrs.get("model", "")).lower()
    if model in FLOW_MODELS:
        from . import report_flows

        return report_flows.write_flow_report(ds, out_dir, level)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = phase.antipodal_table(ds, level=level)
    paths = {"phase": plots.plot_antipodal_vs_beta(table, out / "phase.png")}
    hybrid = str(ds.attrs.get("model", "")).lower() in phase.HYBRID_MODELS
    if hybrid and all(table.sizes.get(dim, 1) > 1 for dim in ("beta", "sigma")):
        paths["heatmap"] = plots.plot_hybrid_heatmap(table, out / "heatmap.png")

    chi = phase.chi_square_summary(table)
    n_agree = int(phase.agrees(table, AGREE_LEVEL, AGREE_WIDEN).sum())
    n_theory = int((table.theory.notnull() & (table.n_traj > 0)).sum())
    pending = int(table.n_pending.sum()) if "n_pending" in table else 0
    lines = header_lines(ds, level, table.attrs.get("t", np.nan), pending) + [
        "## P(antipodal) per grid cell", "",
        "p_antipodal = n_antipodal / N, N = finite trajectories with a class (unresolved ones count "
        "as not antipodal; their fraction is in the `unresolved` column). z = (p - theory) / "
        "sqrt(theory (1 - theory) / N), left blank where the theory is missing, 0 or 1.", "",
        markdown_table(table, level), "",
        f"**Agreement**: {n_agree} of {n_theory} cells with a closed form and data agree: the theory lies in "
        f"the {AGREE_LEVEL:.0%} Wilson interval widened by {AGREE_WIDEN} on each side. The widening "
        "allows for the documented O(h) step-size bias of the discrete model against the limit SDE "
        "(models.md section 4), and near beta_c for the slow convergence at finite T.", "",
        "## Chi-square summary", "",
        f"sum z^2 = {chi['chi2']:.2f} over {chi['dof']} cells (dof = {chi['dof']}), "
        f"p-value = {_fmt(chi['p_value'], 3)}.", "",
        "## Figures", "", "![phase](phase.png)", ""]
    if "heatmap" in paths:
        lines += ["![heatmap](heatmap.png)", ""]
    if "overlap_min" in ds and "n" in ds.coords and (np.asarray(ds["n"]) > 2).any():
        any_lines, any_paths = _any_antipodal_section(ds, out, level)
        lines += any_lines
        paths.update(any_paths)
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return {"report": str(report), **paths}


def _any_antipodal_section(ds: xr.Dataset, out: Path, level: float) -> tuple[list[str], dict]:
    """[F26] Figs. 6-7: P(at least one antipodal pair) per cell, and its persistence over t."""
    from .plots_flows import plot_any_antipodal

    table = phase.any_antipodal_table(ds, level=level)
    paths = plot_any_antipodal(table, out / "any_antipodal.png", out / "persistence.png")
    dims = _row_order(table.n_traj.isel(t=0, drop=True).to_dataset(name="n_traj"))
    table = table.sortby(dims).transpose(*dims, "t")
    t0, t1 = float(table.t[0]), float(table.t[-1])
    head = dims + ["N", f"p_any (t = {t1:g})", f"{level:.0%} Wilson", f"p_any (t = {t0:g})",
                   f"p_persist (from t = {t0:g})", f"p_persist (from t = {t1:g})"]
    rows = []
    for idx in np.ndindex(*[table.sizes[d] for d in dims]):
        cell = table[{d: i for d, i in zip(dims, idx)}]
        last, first = cell.isel(t=-1), cell.isel(t=0)
        rows.append([f"{cell[d].values.item():g}" for d in dims] + [
            str(int(last.n_traj)), _fmt(float(last.p_any)),
            f"[{_fmt(float(last.lo))}, {_fmt(float(last.hi))}]", _fmt(float(first.p_any)),
            _fmt(float(first.p_persist)), _fmt(float(last.p_persist))])
    lines = [
        "## P(at least one antipodal pair), n > 2", "",
        f"A trajectory has an antipodal pair at t when overlap_min(t) <= -1 + eps (eps = "
        f"{table.attrs['eps']:g}). p_persist (from t): the pair is present at t and at every later "
        "checkpoint. For n = 2 p_any is P(antipodal) of the table above up to the |overlap| condition.", "",
        rows_table(head, rows), "", "![any antipodal](any_antipodal.png)", ""]
    if "persistence" in paths:
        lines += ["![persistence](persistence.png)", ""]
    return lines, paths
