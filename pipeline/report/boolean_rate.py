"""Report section of the doubly exponential rate at which P(t) turns Boolean in d = 1 ([GLPR-E]
Thm 2.1, Fig. 3; `analysis.boolean_rate`, docs/models.md section 3).

Per d = 1 cell whose model predicts a rate (`boolean_rate`): a table of the locked trajectories'
mean slope of log(-log D) against t over [T/2, T] with its t-interval, against the predicted slope
and the range a finite window allows, the median r^2 of that straight line and of the
single-exponential alternative (log D against t) beside the value the doubly exponential law
gives; and `boolean_rate.png`, log(-log D) over every checkpoint per trajectory with the predicted
line. Cubes without the output (written before it existed) get no section, cubes with fewer than
3 checkpoints in [T/2, T] one line.
"""

from __future__ import annotations

import numpy as np

from ..analysis.boolean_rate import LOCK_MARGIN, rate_table, trajectory_fits, window_size
from ..analysis.stats import closed_form, done_finite
from ..plugin import Part, ReportInput
from .figures import figure_title, save, subplots
from .tables import fmt, rows_table

__all__ = ["boolean_rate_section", "MAX_PANELS"]

MAX_PANELS = 9  # cells drawn; the table lists them all


def boolean_rate_section(report: ReportInput) -> Part:
    """The rate table and boolean_rate.png for the cells with a predicted rate; empty without."""
    ds = report.ds
    rate = closed_form(ds, "boolean_rate")
    if rate is None or "log_boolean_defect" not in ds:
        return Part([], {})  # no theorem, or a cube written before the output existed
    if window_size(ds["t"].values) < 3:
        return Part([f"The doubly exponential rate of P(t) ([GLPR-E] Thm 2.1): not fitted, "
                     f"{window_size(ds['t'].values)} checkpoints in [T/2, T] (3 needed: raise "
                     "time.checkpoints).", ""], {})
    table = rate_table(ds, rate, report.level)
    if table is None:  # no cell with a rate (d > 1, V < 0, ...)
        return Part([], {})
    dims = [d for d in table.coords if d in ds["log_boolean_defect"].dims]
    rows = []
    for k in range(table.sizes["cell"]):
        c = table.isel(cell=k)
        rows.append([f"{c[d].values.item():g}" for d in dims] + [
            str(int(c.n_traj)), str(int(c.n_locked)),
            f"{fmt(float(c.slope))} [{fmt(float(c.lo))}, {fmt(float(c.hi))}]",
            fmt(float(c.predicted)), f"[{fmt(float(c.bound_lo), 3)}, {fmt(float(c.bound_hi), 3)}]",
            fmt(float(c.slope_median_all)), fmt(float(c.r2), 6), fmt(float(c.r2_bound), 4),
            fmt(float(c.r2_single), 4), fmt(float(c.r2_single_expected), 4)])
    level = report.level
    lines = [
        "## Boolean attention: the doubly exponential rate ([GLPR-E] Thm 2.1)", "",
        "D(t): the distance of P(t) to the set of Fig. 2, the second largest over rows of "
        "1 - max_j P_ij (one row is left free). Once every row has locked on its leader, "
        "-log D = A e^{Vt} - B, so log(-log D) is a straight line of slope V (the scheme's own rate "
        "at step h) approached from above, and log D against t is not: its r^2 is corr(t, e^{Vt})^2. "
        f"Fits per trajectory over [T/2, T]; locked: D <= 1/e from {LOCK_MARGIN:g}/V before the "
        "window on, for which the slope lies in the range shown and r^2 above its bound "
        "(derivation: `pipeline/analysis/boolean_rate.py`).", "",
        rows_table(dims + ["N", "locked", f"slope, locked (mean, {level:.0%} t)", "predicted",
                           "range (finite window)", "slope, all (median)", "r^2 (median)",
                           "r^2 bound", "r^2 single exp.", "r^2 single exp. (law)"], rows), "",
        "![boolean_rate](boolean_rate.png)", ""]
    figures = {"boolean_rate": plot_boolean_rate(ds, table, report.out / "boolean_rate.png")}
    return Part(lines, figures)


def plot_boolean_rate(ds, table, path) -> str:
    """log(-log D) against t per trajectory (locked ones coloured), with the predicted line of
    slope V through the locked trajectories' median intercept; the window shaded."""
    log_d = ds["log_boolean_defect"]
    keep = done_finite(ds, log_d.isel(t=-1))
    dims = [d for d in table.coords if d in log_d.dims]
    n = min(table.sizes["cell"], MAX_PANELS)
    fig, axes = subplots(n, width=5.0)
    t = ds["t"].values.astype(float)
    for ax, k in zip(axes, range(n)):
        c = table.isel(cell=k)
        sel = {d: c[d].values.item() for d in dims}
        values = log_d.sel(sel).transpose("traj", "t").values[keep.sel(sel).values]
        V = float(c.predicted)
        fits = trajectory_fits(t, values, V)
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.log(-values)
        for row, locked in zip(y, fits["locked"]):
            ax.plot(t, row, color="tab:blue" if locked else "0.6", lw=0.7, alpha=0.6)
        if fits["locked"].any():
            b = float(np.median(fits["intercept"][fits["locked"]]))
            ax.plot(t, V * t + b, "k--", lw=1.2, label=f"slope {V:.4g} (predicted)")
            ax.plot([], [], color="tab:blue", lw=0.7, label=f"locked ({int(c.n_locked)}): mean slope "
                                                            f"{float(c.slope):.4f}")
            ax.legend(fontsize=7)  # here only: without a locked trajectory no line has a label
        ax.axvspan(float(c.window_start), t[-1], color="0.9", zorder=0)
        ax.set(xlabel="t", ylabel="log(-log D(t))",
               title=", ".join(f"{d} = {v:g}" for d, v in sel.items()))
        ax.grid(alpha=0.3)
    return save(fig, path, figure_title(ds.attrs, "P(t) turns Boolean: log(-log D) against t, a straight "
                                                  "line for a doubly exponential rate (window shaded)"))
