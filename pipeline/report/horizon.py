"""Report section of P(antipodal) at every checkpoint against the finite-T theory ([F26] App. D.1).

A two-token cube with `cluster_class` over several checkpoints, of a model with the closed form
`finite_time_outcomes` (the backward Kolmogorov equation of the limit diffusion, `theory.finite`):
at each checkpoint t and cell, p = n_antipodal / N with its Wilson interval against P(antipodal at t),
and the unresolved fraction against its predicted value (`horizon.png`: P(antipodal) over t with
error bars and the theory drawn densely in t, the unresolved fraction dashed). One table row per
checkpoint: the cells whose theory at t lies in the 99 % Wilson interval widened by the discrete
model's O(h) allowance (as the main table), sum z_t^2 with its p-value, and the unresolved fraction
measured and predicted. The checkpoints of one trajectory are not independent, so the chi-square is
per checkpoint, never pooled over t.

One solve per cell covers every time, and it is the one the main table at T already made (the
model passes `theory.finite.report_times` along with every request), so the section costs little
beyond it; cubes with more than `MAX_CELLS` cells get one line instead (their last checkpoint is in
the main table).
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats

from ..analysis.antipodal import agrees, antipodal_table
from ..analysis.once import once
from ..analysis.stats import cells_of, closed_form
from ..plugin import Part, ReportInput
from ..theory import finite as theory_finite
from .antipodal import AGREE_LEVEL, AGREE_WIDEN
from .figures import figure_title, panels, plt, save, subplots
from .tables import fmt, row_order, rows_table

__all__ = ["horizon_section", "horizon_table", "MAX_CELLS", "MAX_ROWS"]

MAX_CELLS = 64  # cells solved for (each a backward-equation solve, ~0.1 s)
MAX_ROWS = 60  # (cell, checkpoint) rows listed one by one


@once
def horizon_table(ds: xr.Dataset, level: float = 0.95) -> xr.Dataset | None:
    """Counts, p, Wilson interval, theory_t, unresolved_t and z_t per (cell, checkpoint); the dense
    theory in `curve_antipodal` / `curve_unresolved` over `t_dense`. None where n/a."""
    form = closed_form(ds, "finite_time_outcomes")
    if form is None or "cluster_class" not in ds or ds.sizes.get("t", 1) < 2:
        return None
    if _cells(ds) > MAX_CELLS:
        return None
    times = ds.t.values.astype(float)
    # the classes read once for every checkpoint (a lazy cube would be read again per checkpoint);
    # at most MAX_CELLS cells, so they fit in memory
    classes = ds[[v for v in ("cluster_class", "nonfinite", "status") if v in ds]].load()
    table = xr.concat([antipodal_table(classes, t=t, level=level, finite_t=False) for t in times], dim="t")
    dims = row_order([d for d in table.n_traj.dims if d != "t"])
    table = table.transpose(*dims, "t")
    first = table.n_traj.isel(t=0, drop=True)
    # the model's own solve covers these (theory.finite.report_times): no second solve per cell
    t_dense = np.asarray(theory_finite.report_times(times.max(), times))
    probs = np.asarray(form(cells_of(table, dims, first), t_dense), float)  # (3, cells..., t_dense)
    if not np.isfinite(probs).any():
        return None
    at = np.searchsorted(t_dense, times)
    table["theory_t"] = table.n_traj.copy(data=probs[0][..., at])
    table["unresolved_t"] = table.n_traj.copy(data=probs[2][..., at])
    table["unresolved"] = table.n_unresolved / table.n_traj.where(table.n_traj > 0)
    p_th, N = table.theory_t, table.n_traj
    degenerate = (p_th <= 0) | (p_th >= 1) | p_th.isnull() | (N == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["z_t"] = ((table.p_antipodal - p_th) / np.sqrt(p_th * (1 - p_th) / N)).where(~degenerate)
    curve = dict(dims=(*dims, "t_dense"), coords={"t_dense": t_dense})
    table["curve_antipodal"] = xr.DataArray(probs[0], **curve)
    table["curve_unresolved"] = xr.DataArray(probs[2], **curve)
    table.attrs = {"level": level}
    return table


def _cells(ds: xr.Dataset) -> int:
    return int(np.prod([n for d, n in ds["cluster_class"].sizes.items() if d not in ("t", "traj")]))


def horizon_section(report: ReportInput) -> Part:
    ds = report.ds
    if "cluster_class" not in ds or ds.sizes.get("t", 1) < 2 or closed_form(ds, "finite_time_outcomes") is None:
        return Part([], {})
    if _cells(ds) > MAX_CELLS:
        return Part([f"P(antipodal) over the checkpoints against the finite-T theory: not drawn for "
                     f"{_cells(ds)} cells (more than {MAX_CELLS} backward-equation solves).", ""], {})
    table = horizon_table(ds, report.level)
    if table is None:
        return Part([], {})
    dims = [d for d in table.n_traj.dims if d != "t"]
    judged = table.theory_t.notnull() & (table.n_traj > 0)
    agree = agrees(table, AGREE_LEVEL, AGREE_WIDEN, "theory_t") & judged
    summary = []
    for k, t in enumerate(table.t.values):
        z = table.z_t.isel(t=k).values
        z = z[np.isfinite(z)]
        chi2 = float(np.sum(z ** 2))
        unresolved = table.unresolved.isel(t=k)
        summary.append([f"{t:g}", f"{int(agree.isel(t=k).sum())} of {int(judged.isel(t=k).sum())}",
                        f"{chi2:.2f}", str(z.size), fmt(float(stats.chi2.sf(chi2, z.size)) if z.size else np.nan, 3),
                        fmt(float(unresolved.mean())), fmt(float(table.unresolved_t.isel(t=k).where(
                            unresolved.notnull()).mean()))])
    level = report.level
    lines = [
        "## P(antipodal) over the checkpoints against the finite-T theory", "",
        "At each checkpoint t, p = n_antipodal / N (unresolved count as not antipodal) against "
        "P(antipodal at t) of the limit diffusion (backward Kolmogorov equation, docs/models.md section "
        "4.5), which also predicts the unresolved fraction. Agrees: theory (t) inside the "
        f"{AGREE_LEVEL:.0%} Wilson interval widened by {AGREE_WIDEN} (the discrete model's O(h) bias). "
        "The chi-square is per checkpoint (the checkpoints of one trajectory are not independent).", "",
        rows_table(["t", "cells agree", "sum z_t^2", "dof", "p-value", "unresolved (mean)",
                    "unresolved (theory, mean)"], summary), ""]
    if table.n_traj.size <= MAX_ROWS:
        rows = []
        for idx in np.ndindex(*[table.sizes[d] for d in dims], table.sizes["t"]):
            cell = table[dict(zip([*dims, "t"], idx))]
            rows.append([f"{cell[d].values.item():g}" for d in [*dims, "t"]] + [
                str(int(cell.n_traj)), fmt(float(cell.p_antipodal)),
                f"[{fmt(float(cell.lo))}, {fmt(float(cell.hi))}]", fmt(float(cell.theory_t)),
                fmt(float(cell.z_t), 2), fmt(float(cell.unresolved)), fmt(float(cell.unresolved_t)),
                ("yes" if bool(agree[dict(zip([*dims, "t"], idx))]) else "no")
                if bool(judged[dict(zip([*dims, "t"], idx))]) else "n/a"])
        lines += [rows_table([*dims, "t", "N", "p_antipodal", f"{level:.0%} Wilson", "theory (t)", "z (t)",
                              "unresolved", "unresolved (theory, t)", "agrees (t)"], rows), ""]
    figures = {"horizon": plot_horizon(table, ds.attrs, report.out / "horizon.png")}
    lines += ["![horizon](horizon.png)", ""]
    return Part(lines, figures)


def plot_horizon(table: xr.Dataset, attrs: dict, path) -> str:
    """P(antipodal) over t per beta (Wilson bars) with the theory at t; unresolved dashed."""
    facet = list(panels(table.n_traj.isel(t=0, drop=True), ("beta",)))
    fig, axes = subplots(len(facet), width=5.5)
    for ax, (label, sel) in zip(axes, facet):
        sub = table.sel(sel)
        betas = sub.beta.values if "beta" in sub.n_traj.dims else [None]
        for i, beta in enumerate(betas):
            cell = sub if beta is None else sub.sel(beta=beta)
            colour = plt.cm.viridis(i / max(1, len(betas) - 1))
            t, p = cell.t.values, cell.p_antipodal.values
            ax.errorbar(t, p, yerr=[p - cell.lo.values, cell.hi.values - p], fmt="o", ms=4, capsize=2,
                        color=colour, label="" if beta is None else f"β = {beta:g}")
            ax.plot(cell.t_dense.values, cell.curve_antipodal.values, "-", color=colour, lw=1)
            ax.plot(t, cell.unresolved.values, "s", ms=3, mfc="none", color=colour)
            ax.plot(cell.t_dense.values, cell.curve_unresolved.values, "--", color=colour, lw=0.8)
        ax.set(xlabel="checkpoint t (dimensionless)", ylabel="P(antipodal at t); unresolved (dashed)",
               ylim=(-0.02, 1.02), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path, figure_title(attrs, "P(antipodal) at each checkpoint (Wilson bars) against the "
                                               "finite-T theory; unresolved: squares and dashed"))
