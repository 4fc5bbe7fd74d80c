"""Report sections and figures of clustering over time (the deterministic flows).

* `merge_section`: `frac_close.png`, the mean fraction of close pairs over (beta, t) with the model's
  merge time t*(beta) over it ([GLPR-P] Fig. 3), and the time that mean reaches 1/2 against t*;
* `cluster_count_section`: mean cluster counts over time (`clusters.png`, [GLPR-P] Fig. 4);
* `hemisphere_section`: the open-hemisphere fraction at the first checkpoint against the model's
  probability (Wendel's for uniform starts);
* `equiangular_section`: for an equiangular start, the overlaps against gamma(t) (`equiangular.png`)
  and the late-time rate of 1 - gamma against [GLPR-P] Thm 6.8's.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis import clustering
from ..analysis.overlaps import MIN_GAP, log_gap_rate
from ..analysis.stats import closed_form, grid_dims
from ..plugin import Part, ReportInput
from .figures import N_DENSE, figure_title, key_lines, panels, plt, save, subplots, value_colours
from .tables import cell_rows, fmt, rows_table

__all__ = ["merge_section", "cluster_count_section", "hemisphere_section", "equiangular_section",
           "plot_frac_close_heatmap", "plot_cluster_counts", "plot_equiangular", "CROSSING_LEVEL"]

CROSSING_LEVEL = 0.5  # t_cross: the mean fraction of close pairs reaches one half
MAX_COLUMNS_T = 6  # checkpoints shown in the cluster-count table
N_CURVE = 80  # t*(beta) costs one quadrature per beta


def merge_section(report: ReportInput) -> Part:
    ds, sweep = report.ds, report.sweep
    dims = grid_dims(ds)
    mean = clustering.frac_close_mean(ds)
    merge_time = closed_form(ds, "merge_time")
    figures = {"frac_close": plot_frac_close_heatmap(mean, ds.attrs, merge_time, report.out / "frac_close.png")}
    crossing = clustering.crossing_table(ds, CROSSING_LEVEL, merge_time)
    has_theory = bool(np.isfinite(crossing.t_star.values).any())
    theory_note = ("t* from the model's closed form (equiangular overlap reaches 1 - delta), in simulated "
                   "time" if has_theory else "no t* here: no closed form applies to these options "
                   "(docs/models.md section 2: it needs Q = K = V = I, no time-varying P(t), SA or USA)")
    rows = []
    for labels, sel in cell_rows(crossing.t_cross, dims):
        c, s = float(crossing.t_cross[sel]), float(crossing.t_star[sel])
        rows.append(labels + [fmt(c, 2), fmt(s, 2), fmt(c / s if s else np.nan, 3)])
    delta = getattr(sweep, "delta", None)
    lines = [
        "## Fraction of close pairs ([GLPR-P] Fig. 3)", "",
        f"Colour: mean over trajectories of the fraction of pairs with <x_i, x_j> >= 1 - delta"
        f"{f' (delta = {delta:g})' if delta is not None else ''}. t_cross: first time that mean reaches "
        f"{CROSSING_LEVEL:g} (linear interpolation between checkpoints; — if never by T). {theory_note}.", "",
        rows_table(dims + ["t_cross", "t*", "t_cross / t*"], rows), "", "![frac_close](frac_close.png)", ""]
    return Part(lines, figures)


def cluster_count_section(report: ReportInput) -> Part:
    ds = report.ds
    dims = grid_dims(ds)
    counts = clustering.cluster_count_mean(ds)
    figures = {"clusters": plot_cluster_counts(counts, ds.attrs, report.out / "clusters.png")}
    shown = np.unique(np.linspace(0, counts.sizes["t"] - 1, min(MAX_COLUMNS_T, counts.sizes["t"]))
                      .round().astype(int))
    rows = [labels + [fmt(float(v), 2) for v in counts[sel].isel(t=shown).values]
            for labels, sel in cell_rows(counts, dims)]
    lines = ["## Cluster counts", "",
             f"Mean number of clusters (components of overlap >= 1 - eps, eps = {report.sweep.eps:g}).",
             "", rows_table(dims + [f"t = {counts.t.values[i]:g}" for i in shown], rows), "",
             "![clusters](clusters.png)", ""]
    return Part(lines, figures)


def hemisphere_section(report: ReportInput) -> Part:
    ds, level = report.ds, report.level
    dims = grid_dims(ds)
    hemi = clustering.hemisphere_table(ds, level)
    rows = []
    for labels, sel in cell_rows(hemi.n_traj, dims):
        cell = hemi[sel]
        rows.append(labels + [str(int(cell.n_traj)), fmt(float(cell.p_hemi)),
                              f"[{fmt(float(cell.lo))}, {fmt(float(cell.hi))}]", fmt(float(cell.theory)),
                              "yes" if bool(cell.agrees) else "no"])
    lines = [f"## Open hemisphere at the first checkpoint (t = {hemi.attrs['t']:g})", "",
             "Fraction of trajectories whose tokens lie in an open hemisphere, against the probability "
             "that the start lies in one (Wendel's 2^-(n-1) sum_{k<d} C(n-1, k) for n uniform points; 1 for "
             "a hemisphere or equiangular start). The property is kept by full attention with V = I, and "
             "a start outside may still enter one, so the fraction can only exceed it as t grows. "
             f"Agreement: theory inside the {clustering.HEMISPHERE_LEVEL:.0%} Wilson interval"
             + ("." if hemi.attrs["two_sided"] else
                " or below it (one-sided: the first checkpoint is after the first step)."), "",
             rows_table(dims + ["N", "p_hemisphere", f"{level:.0%} Wilson", "theory (t = 0)", "agrees"], rows), ""]
    return Part(lines, {})


def equiangular_section(report: ReportInput) -> Part:
    ds = report.ds
    eq = clustering.equiangular_table(ds)
    if eq is None:
        return Part([], {})
    dims = grid_dims(ds)
    overlap = closed_form(ds, "equiangular_overlap")
    rate = closed_form(ds, "equiangular_rate")
    figures = {"equiangular": plot_equiangular(eq, ds.attrs, overlap, report.out / "equiangular.png")}
    rows = []
    for labels, sel in cell_rows(eq.dev, dims):
        cell = eq[sel]
        k = int(np.nanargmax(cell.dev.values)) if np.isfinite(cell.dev.values).any() else 0
        measured, t0, t1 = log_gap_rate(cell.t.values, cell.overlap_min.values)
        ode = (log_gap_rate([t0, t1], overlap(np.array([t0, t1]), {d: cell[d].item() for d in dims}))[0]
               if np.isfinite(t0) else np.nan)
        late = rate({d: cell[d].item() for d in dims}) if rate is not None else None
        rows.append(labels + [f"{float(cell.dev.max()):.2e}", f"{float(cell.t[k]):g}",
                              fmt(float(cell.gamma[-1]), 6), fmt(float(cell.overlap_min[-1]), 6),
                              f"{fmt(t0, 2)}-{fmt(t1, 2)}", fmt(measured), fmt(ode), fmt(late)])
    lines = ["## Equiangular start", "",
             "Every pairwise overlap should equal gamma(t) (docs/models.md section 2); max |dev| is "
             "the largest |overlap - gamma| over trajectories, checkpoints and min/max overlaps "
             f"(an O(h^p) integrator error; {getattr(report.sweep, 'integrator', '?')} here). "
             "Rate: -d log(1 - overlap) / dt of the mean min overlap between the last two checkpoints with "
             f"1 - overlap > {MIN_GAP:g} (rounding below), against the ODE's own over the same window and the "
             "late-time rate of [GLPR-P] Thm 6.8 (theory.equiangular_rate: 2 for SA, 2 e^β for USA), "
             "which the ODE's approaches as γ -> 1.", "",
             rows_table(dims + ["max dev", "at t", "gamma(T)", "mean min overlap (T)", "rate window",
                                "measured rate", "ODE rate (window)", "late-time rate"], rows), "",
             "![equiangular](equiangular.png)", ""]
    return Part(lines, figures)


def plot_frac_close_heatmap(mean: xr.DataArray, attrs: dict, merge_time, path) -> str:
    """Heatmap of mean frac_close over (beta, t), t*(beta) over it; one panel per (d, n, ...)."""
    facet = list(panels(mean, ("beta", "t")))
    fig, axes = subplots(len(facet), width=5.5)
    betas, times = mean.beta.values, mean.t.values
    for ax, (label, sel) in zip(axes, facet):
        sub = mean.sel(sel).transpose("t", "beta")
        cell = {name: sel.get(name, mean[name].values[0]) for name in mean.dims if name not in ("beta", "t")}
        if betas.size > 1:
            mesh = ax.pcolormesh(betas, times, sub.values, shading="nearest", vmin=0, vmax=1,
                                 cmap="viridis")
            fig.colorbar(mesh, ax=ax, label="fraction of close pairs")
            dense = np.linspace(betas.min(), betas.max(), N_CURVE)
            curve = None if merge_time is None else merge_time({**cell, "beta": dense})
            if curve is not None:
                ax.plot(dense, curve, "w-", lw=2, label="t*(β): γ(t*) = 1 - δ")
                ax.legend(fontsize=7, loc="upper left", facecolor="0.3", labelcolor="w")
            ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="time t (dimensionless)",
                   ylim=(times.min(), times.max()), title=label)
        else:
            ax.plot(times, sub.values[:, 0], "o-", ms=3, label=f"β = {betas[0]:g}")
            star = None if merge_time is None else merge_time({**cell, "beta": betas})
            if star is not None:
                ax.axvline(float(np.ravel(star)[0]), ls="--", color="k", lw=1, label="t*(β)")
            ax.set(xlabel="time t (dimensionless)", ylabel="fraction of close pairs", ylim=(-0.02, 1.02),
                   title=label)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    return save(fig, path, figure_title(attrs, "Fraction of pairs with <x_i, x_j> ≥ 1 - δ, mean over trajectories"))


def plot_cluster_counts(mean: xr.DataArray, attrs: dict, path) -> str:
    """Mean number of clusters against t, one line per beta; one panel per (d, n, ...)."""
    facet = list(panels(mean, ("beta", "t")))
    fig, axes = subplots(len(facet))
    for ax, (label, sel) in zip(axes, facet):
        sub = mean.sel(sel)
        betas = sub.beta.values
        for beta, colour in zip(betas, value_colours(betas)):
            ax.plot(sub.t.values, sub.sel(beta=beta).values, "o-", ms=3, color=colour,
                    label=f"β = {beta:g}")
        ax.set(xlabel="time t (dimensionless)", ylabel="mean number of clusters", title=label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        key_lines(ax, betas, fontsize=7, ncol=2)
    return save(fig, path, figure_title(attrs, f"Cluster counts (overlap ≥ 1 - eps, eps = "
                                               f"{attrs.get('eps', 1e-3):g}) over time"))


def plot_equiangular(table: xr.Dataset, attrs: dict, overlap, path) -> str:
    """Mean overlap_min / overlap_max of an equiangular start against gamma(t), per beta."""
    facet = list(panels(table.gamma, ("beta", "t")))
    fig, axes = subplots(len(facet))
    times = table.t.values
    dense = np.linspace(0.0, times.max(), N_DENSE)
    for ax, (label, sel) in zip(axes, facet):
        sub = table.sel(sel)
        cell = {name: sel.get(name, table[name].values[0]) for name in table.gamma.dims
                if name not in ("beta", "t")}
        for i, beta in enumerate(sub.beta.values):
            colour = plt.cm.tab10(i % 10)
            cell_values = sub.sel(beta=beta)
            ax.plot(dense, overlap(dense, {**cell, "beta": beta}), "-", color=colour, lw=1.2,
                    label=f"β = {beta:g}: γ(t)")
            ax.plot(times, cell_values.overlap_min.values, "v", ms=4, color=colour, label="min overlap")
            ax.plot(times, cell_values.overlap_max.values, "^", ms=4, mfc="none", color=colour,
                    label="max overlap")
        ax.set(xlabel="time t (dimensionless)", ylabel="pairwise overlap <x_i, x_j>", title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save(fig, path, figure_title(attrs, "Equiangular start: overlaps against γ(t)"))
