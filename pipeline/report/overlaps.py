"""Report sections of pairwise overlaps against the sphere flow's one-parameter closed forms.

Each section draws only where the cube holds what it needs and the model has the closed form
(`analysis.overlaps`); otherwise it is empty.

* `tracking_section` ([GLPR-P] Thm 6.9): uniform starts with `record: [overlap_hist]`: the mean
  and the 1-99 % and 5-95 % quantile bands of the overlaps over pairs and trajectories against
  gamma(t) (`tracking.png`);
* `token2_section` ([RST] causal V = I): the measured <x_1, x_2> against the token-2 ODE a(t)
  (`token2.png`);
* `sharp_section` ([GLPR-P] section 9.1, V = -I): the overlaps at T against the simplex /
  cross-polytope values, a table.
"""

from __future__ import annotations

import numpy as np

from ..analysis.overlaps import sharp_table, token2_table, tracking_table
from ..analysis.stats import closed_form, grid_dims
from ..plugin import Part, ReportInput
from .figures import N_DENSE, figure_title, plt, save, subplots
from .observables import cell_label, shown_cells
from .tables import cell_rows, fmt, rows_table

__all__ = ["tracking_section", "token2_section", "sharp_section"]


def tracking_section(report: ReportInput) -> Part:
    ds = report.ds
    table = tracking_table(ds)
    if table is None:
        return Part([], {})
    dims = grid_dims(ds)
    curve = closed_form(ds, "random_start_overlap")
    figures = {"tracking": plot_tracking(table, dims, ds.attrs, curve, report.out / "tracking.png")}
    rows = []
    for labels, sel in cell_rows(table.n_traj, dims):
        cell = table[sel]
        d = float(ds["d"].values[sel["d"]]) if "d" in sel else float(ds["d"].values.ravel()[0])
        dev = cell.dev.values
        k = int(np.nanargmax(dev)) if np.isfinite(dev).any() else 0
        q = cell.quantiles
        half = table.attrs["half_bin"]  # the quantiles' own resolution
        inside = ((q.sel(quantile=0.01) - half <= cell.gamma) & (cell.gamma <= q.sel(quantile=0.99) + half)).values
        width = float((q.sel(quantile=0.95) - q.sel(quantile=0.05)).isel(t=0))
        rows.append(labels + [str(int(cell.n_traj)), f"{float(dev[k]):.3g}", f"{float(cell.t[k]):g}",
                              f"{float(dev[k]) * np.sqrt(d):.2f}", f"{width:.3f}",
                              f"{int(inside.sum())} of {inside.size}"])
    lines = [
        "## Random starts against gamma(t) ([GLPR-P] Thm 6.9)", "",
        "For d >> n, uniform starts are nearly orthogonal (overlaps ~ N(0, 1/d)) and every pairwise overlap "
        "stays within O(sqrt(log d / d)) of gamma(t), the equiangular solution (Thm 6.8). Mean and quantiles "
        "of the overlaps pooled over the n(n-1)/2 pairs and the trajectories, from the recorded histogram "
        f"(exact to half a bin, {table.attrs['half_bin']:.3g}). max |mean - γ| over checkpoints; "
        "sqrt(d) max |mean - γ| stays of order one where the deviation shrinks like 1/sqrt(d); "
        "5-95 % width at the first checkpoint; checkpoints at which γ(t) lies inside the 1-99 % band "
        "(widened by half a bin).", "",
        rows_table(dims + ["N", "max abs(mean - γ)", "at t", "sqrt(d) max dev", "5-95 % width (t0)",
                           "γ inside 1-99 %"], rows), "",
        "![tracking](tracking.png)", ""]
    return Part(lines, figures)


def plot_tracking(table, dims, attrs: dict, curve, path) -> str:
    cells = shown_cells(table.gamma.isel(t=0), dims)
    fig, axes = subplots(len(cells), width=5.0, height=3.8)
    times = table.t.values
    dense = np.linspace(0.0, times.max(), N_DENSE)
    for ax, sel in zip(axes, cells):
        cell = table[sel]
        q = cell.quantiles
        ax.fill_between(times, q.sel(quantile=0.01), q.sel(quantile=0.99), color="C0", alpha=0.15,
                        label="1-99 % of overlaps")
        ax.fill_between(times, q.sel(quantile=0.05), q.sel(quantile=0.95), color="C0", alpha=0.3,
                        label="5-95 %")
        ax.plot(times, cell["mean"], "o", ms=3, color="C0", label="mean overlap")
        ax.plot(times, q.sel(quantile=0.5), "_", ms=6, color="C0", label="median")
        values = {d: table[d].values[i] for d, i in sel.items()}
        ax.plot(dense, curve(dense, values), "k-", lw=1.2, label="γ(t), Thm 6.8 ODE")
        ax.set(xlabel="time t (dimensionless)", ylabel="pairwise overlap <x_i, x_j>",
               title=cell_label(table.gamma, sel), ylim=(-1.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    return save(fig, path, figure_title(attrs, "Uniform starts: overlaps over pairs and trajectories against γ(t)"))


def token2_section(report: ReportInput) -> Part:
    ds = report.ds
    table = token2_table(ds)
    if table is None:
        return Part([], {})
    dims = grid_dims(ds)
    curve = closed_form(ds, "token2_overlap")
    figures = {"token2": plot_token2(table, dims, ds.attrs, curve, report.out / "token2.png")}
    rows = []
    for labels, sel in cell_rows(table.n_traj, dims):
        cell = table[sel]
        k = int(np.nanargmax(cell.dev.values)) if np.isfinite(cell.dev.values).any() else 0
        rows.append(labels + [str(int(cell.n_traj)), f"{float(cell.dev[k]):.2e}", f"{float(cell.t[k]):g}",
                              fmt(float(cell.a[-1]), 6), fmt(float(cell["mean"][-1]), 6)])
    lines = [
        "## Causal token-2 overlap against its ODE ([RST])", "",
        "Causal SA with V = Q = K = I: token 1 attends only to itself and stays put (x_1(t) = N(e^{tV} x_1(0)) "
        "= x_1(0)), so <x_1, x_2>(t) = a(t) solves a' = (1 - a^2) e^{βa} / (e^{βa} + e^β) from a(0) = ρ0 "
        "(theory.causal_token2_overlap). max dev: largest |<x_1, x_2> - a(t)| over trajectories and "
        f"checkpoints (an O(h^p) integrator error; {getattr(report.sweep, 'integrator', '?')} here).", "",
        rows_table(dims + ["N", "max dev", "at t", "a(T)", "mean overlap (T)"], rows), "",
        "![token2](token2.png)", ""]
    return Part(lines, figures)


def plot_token2(table, dims, attrs: dict, curve, path) -> str:
    """One panel per cell without beta and rho0, one colour per (beta, rho0): ODE line, measured marks."""
    inner = [d for d in ("beta", "rho0") if d in dims]
    outer = [d for d in dims if d not in inner]
    panels = shown_cells(table.a.isel(t=0), outer) if outer else [{}]
    fig, axes = subplots(len(panels))
    times = table.t.values
    dense = np.linspace(0.0, times.max(), N_DENSE)
    for ax, outer_sel in zip(axes, panels):
        lines = list(cell_rows(table.a.isel(t=0, **outer_sel), inner)) if inner else [([], {})]
        for i, (_, sel) in enumerate(lines):
            full = {**outer_sel, **sel}
            colour = plt.cm.tab10(i % 10)
            values = {d: table[d].values[j] for d, j in full.items()}
            label = cell_label(table.a, sel)
            ax.plot(dense, curve(dense, values), "-", color=colour, lw=1, label=f"a(t), {label}")
            ax.plot(times, table["mean"][full].values, "o", ms=3, color=colour)
        ax.set(xlabel="time t (dimensionless)", ylabel="<x_1, x_2> (marks: mean over trajectories)",
               title=cell_label(table.a, outer_sel))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, figure_title(attrs, "Causal V = I: token-2 overlap against the ODE a(t)"))


def sharp_section(report: ReportInput) -> Part:
    ds = report.ds
    table = sharp_table(ds)
    if table is None:
        return Part([], {})
    dims = grid_dims(ds)
    rows = []
    for labels, sel in cell_rows(table.n_traj, dims):
        c = table[sel]
        known = bool(np.isfinite(float(c.expected_min)))
        name = ("—" if not known else "simplex" if float(c.expected_min) == float(c.expected_max)
                else "cross-polytope")
        rows.append(labels + [name, str(int(c.n_traj)), fmt(float(c.expected_min)), fmt(float(c.min_T)),
                              fmt(float(c.expected_max)), fmt(float(c.max_T)), f"{float(c.dev_before):.2e}",
                              f"{float(c.dev_T):.2e}", fmt(float(c.within), 3)])
    t_before = table.attrs["t_before"]
    lines = [
        "## Sharp configurations of V = -I ([GLPR-P] section 9.1)", "",
        "The repulsive flow decreases the interaction energy, whose n-point minimisers are sharp "
        "configurations: for n <= d + 1 the regular simplex (every overlap -1/(n-1); overlap_max = "
        "-1/(n-1) alone certifies it, since the mean overlap is at least -1/(n-1)), for n = 2d the "
        "cross-polytope (overlaps -1 and 0; min and max are necessary, not sufficient). Expected values "
        "from theory.sharp.sharp_overlaps; measured: mean over trajectories at T. max dev: largest "
        f"max(abs(min - expected min), abs(max - expected max)) over trajectories at t = {t_before:g} and at T "
        "(a shrinking dev is convergence; the configuration is a fixed point of the integrator too, so "
        f"the step moves the limit not at all). Within eps: fraction of trajectories with dev <= eps = "
        f"{table.attrs['eps']:g} at T.", "",
        rows_table(dims + ["configuration", "N", "expected min", "min overlap (T)", "expected max",
                           "max overlap (T)", f"max dev (t = {t_before:g})", "max dev (T)", "within eps"],
                   rows), ""]
    return Part(lines, {})
