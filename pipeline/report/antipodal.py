"""Report sections and figures of the antipodal outcome (the stochastic models, [F26]).

* `probability_section`: the per-cell table of P(antipodal) (`analysis.antipodal.antipodal_table`)
  with the model's closed form, the agreement count, the chi-square summary and `phase.png`:
  P(antipodal) against beta, one colour per d, Wilson error bars, the closed form drawn densely
  and the model's `critical_beta` as a dashed line of the same colour. Other grid axes of size > 1
  (n, sigma, ...) become facets.
* `heatmap_section`: P(antipodal) over (beta, sigma) with the model's `threshold_curves` over it.
* `step_bias_section` (a `layers` grid axis only): P(antipodal) against h = T / layers per cell,
  its h -> 0 extrapolation (`analysis.step_bias`) and the theory at t and at t = infinity beside it.
* `any_pair_section` (n > 2 only): P(at least one antipodal pair) against beta per n and its
  persistence over the checkpoints ([F26] Figs. 6-7).

The agreement column uses the 99 % Wilson interval widened by 0.01 on each side: the discrete
model with step h carries an O(h) bias against the limit SDE (docs/models.md section 4: at d = 8,
beta = 1.5 the discrete model gives 0.035 at h = 0.01 against 0.042), which a pure sampling
interval would flag as disagreement at large N.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.antipodal import BOUNDARY_WHY, agrees, antipodal_table, any_antipodal_table, judged
from ..analysis.stats import chi_square_summary, closed_form
from ..analysis.step_bias import zero_step_table
from ..plugin import Part, ReportInput
from .figures import N_DENSE, facets, figure_title, panels, plt, save, scalar, subplots, with_dims
from .tables import fmt, row_order, rows_table

__all__ = ["probability_section", "heatmap_section", "any_pair_section", "step_bias_section", "markdown_table",
           "plot_antipodal_vs_beta", "plot_heatmap", "plot_any_antipodal", "plot_persistence", "AGREE_LEVEL", "AGREE_WIDEN"]

AGREE_LEVEL, AGREE_WIDEN = 0.99, 0.01


MAX_TABLE_ROWS = 500  # rows of the page's table; every cell is in antipodal.csv
BOUNDARY_CELL = "not judged: β = β_c"  # the agreement of a cell on the boundary (analysis.antipodal.judged)


def markdown_table(table: xr.Dataset, level: float = 0.95, max_rows: int | None = None) -> str:
    """One row per grid cell: coordinates, N, p, interval, theory, z, unresolved, agreement;
    the first `max_rows` rows (in d, ..., beta order) and a line counting the rest."""
    dims = row_order(table.n_traj.dims)
    table = table.sortby(dims).transpose(*dims)
    head = dims + ["N", "p_antipodal", f"{level:.0%} Wilson", "theory", "z", "unresolved",
                   "nonfinite", f"agrees ({AGREE_LEVEL:.0%} ± {AGREE_WIDEN})", "theory (t)", "z (t)",
                   "unresolved (theory, t)", "agrees (t)"]
    # whole columns at once: a cell-by-cell xarray selection costs ~1 ms a cell
    flat = {name: np.ravel(table[name].values) for name in table.data_vars}
    agree = np.ravel(agrees(table, AGREE_LEVEL, AGREE_WIDEN).transpose(*dims).values)
    agree_t = np.ravel(agrees(table, AGREE_LEVEL, AGREE_WIDEN, "theory_t").transpose(*dims).values)
    # a flag needs a theory and data; on the boundary beta = beta_c(d) the T = infinity one judges nothing
    judged_ = np.ravel(judged(table).transpose(*dims).values)
    boundary = np.isfinite(flat["theory"]) & (flat["n_traj"] > 0) & ~judged_
    judged_t = np.ravel(judged(table, "theory_t").transpose(*dims).values)
    labels = [np.ravel(v) for v in np.meshgrid(*[table[d].values for d in dims], indexing="ij")]
    total = flat["n_traj"].size
    shown = total if max_rows is None else min(total, max_rows)
    rows = []
    for i in range(shown):
        N = int(flat["n_traj"][i])
        unresolved = float(flat["n_unresolved"][i]) / N if N else float("nan")
        rows.append([f"{label[i]:g}" for label in labels] + [
            str(N), fmt(float(flat["p_antipodal"][i])),
            f"[{fmt(float(flat['lo'][i]))}, {fmt(float(flat['hi'][i]))}]", fmt(float(flat["theory"][i])),
            fmt(float(flat["z"][i]), 2), fmt(unresolved), str(int(flat["n_nonfinite"][i])),
            BOUNDARY_CELL if boundary[i] else ("yes" if agree[i] else "no") if judged_[i] else "n/a",
            fmt(float(flat["theory_t"][i])), fmt(float(flat["z_t"][i]), 2),
            fmt(float(flat["unresolved_t"][i])), ("yes" if agree_t[i] else "no") if judged_t[i] else "n/a"])
    text = rows_table(head, rows)
    if shown < total:
        text += f"\n\n{total - shown} more cells are left out of this table: `antipodal.csv` has every cell."
    return text


def probability_section(report: ReportInput) -> Part:
    """P(antipodal) per cell against the closed form: table, agreement, chi-square, phase.png.

    Needs `cluster_class` over (grid..., t, traj) and the grid axes `beta` and `d` (a model on
    `spec.Grid` has them).
    """
    ds, level = report.ds, report.level
    table = antipodal_table(ds, level=level)
    figures = {"phase": plot_antipodal_vs_beta(table, report.out / "phase.png")}
    table.to_dataframe().to_csv(report.out / "antipodal.csv")
    chi = chi_square_summary(table)
    judged_ = judged(table)
    n_agree = int((agrees(table, AGREE_LEVEL, AGREE_WIDEN) & judged_).sum())
    n_theory = int(judged_.sum())
    n_boundary = int((table.theory.notnull() & (table.n_traj > 0) & ~judged_).sum())
    boundary = (f" {n_boundary} cell{'s' if n_boundary > 1 else ''} on the boundary, marked "
                f"`{BOUNDARY_CELL}`, {'are' if n_boundary > 1 else 'is'} not judged: {BOUNDARY_WHY}."
                if n_boundary else "")
    lines = [
        "## P(antipodal) per grid cell", "",
        "p_antipodal = n_antipodal / N, N = finite trajectories with a class (unresolved ones count "
        "as not antipodal; their fraction is in the `unresolved` column). z = (p - theory) / "
        "sqrt(theory (1 - theory) / N), left blank where the theory is missing, 0 or 1.", "",
        markdown_table(table, level, MAX_TABLE_ROWS), "",
        f"**Agreement**: {n_agree} of {n_theory} cells with a closed form and data agree: the theory lies in "
        f"the {AGREE_LEVEL:.0%} Wilson interval widened by {AGREE_WIDEN} on each side. The widening "
        "allows for the documented O(h) step-size bias of the discrete model against the limit SDE "
        "(docs/models.md section 4), and near beta_c for the slow convergence at finite T." + boundary, "",
        _checkpoint_paragraph(table), "",
        "## Chi-square summary", "",
        f"sum z^2 = {chi['chi2']:.2f} over {chi['dof']} cells (dof = {chi['dof']}), "
        f"p-value = {fmt(chi['p_value'], 3)}.", "",
        "## Figures", "", "![phase](phase.png)", ""]
    return Part(lines, figures)


def _checkpoint_paragraph(table: xr.Dataset) -> str:
    t = table.attrs["t"]
    if table.attrs.get("finite_t"):
        return f"**At the checkpoint t = {t:g}**: the class probabilities at t are {table.attrs['finite_t']}."
    return (f"**At the checkpoint t = {t:g}**: {int(agrees(table, AGREE_LEVEL, AGREE_WIDEN, 'theory_t').sum())} "
            f"of {int((table.theory_t.notnull() & (table.n_traj > 0)).sum())} cells agree with `theory (t)`, the "
            "class probabilities at t of the limit diffusion (backward Kolmogorov equation, docs/models.md "
            "section 4.5), which also predicts the unresolved fraction; the figure shades the band "
            "[theory (t), theory (t) + unresolved (theory, t)] in which the trajectories unresolved at t "
            "may still put the eventual P(antipodal).")


def heatmap_section(report: ReportInput) -> Part:
    """P(antipodal) over (beta, sigma) with the model's thresholds; empty unless both vary."""
    table = antipodal_table(report.ds, level=report.level)
    if not all(table.sizes.get(dim, 1) > 1 for dim in ("beta", "sigma")):
        return Part([], {})
    figures = {"heatmap": plot_heatmap(table, report.out / "heatmap.png")}
    return Part(["![heatmap](heatmap.png)", ""], figures)


def any_pair_section(report: ReportInput) -> Part:
    """[F26] Figs. 6-7: P(at least one antipodal pair) per cell and its persistence; n > 2 only."""
    ds, level = report.ds, report.level
    if "overlap_min" not in ds or "n" not in ds.coords or not (np.asarray(ds["n"]) > 2).any():
        return Part([], {})
    table = any_antipodal_table(ds, level=level)
    figures = {"any_antipodal": plot_any_antipodal(table, report.out / "any_antipodal.png")}
    if table.sizes["t"] > 1:
        figures["persistence"] = plot_persistence(table, report.out / "persistence.png")
    dims = row_order(table.n_traj.isel(t=0, drop=True).dims)
    table = table.sortby(dims).transpose(*dims, "t")
    t0, t1 = float(table.t[0]), float(table.t[-1])
    head = dims + ["N", f"p_any (t = {t1:g})", f"{level:.0%} Wilson", f"p_any (t = {t0:g})",
                   f"p_persist (from t = {t0:g})", f"p_persist (from t = {t1:g})"]
    rows = []
    for idx in np.ndindex(*[table.sizes[d] for d in dims]):
        cell = table[{d: i for d, i in zip(dims, idx)}]
        last, first = cell.isel(t=-1), cell.isel(t=0)
        rows.append([f"{cell[d].values.item():g}" for d in dims] + [
            str(int(last.n_traj)), fmt(float(last.p_any)),
            f"[{fmt(float(last.lo))}, {fmt(float(last.hi))}]", fmt(float(first.p_any)),
            fmt(float(first.p_persist)), fmt(float(last.p_persist))])
    lines = [
        "## P(at least one antipodal pair), n > 2", "",
        f"A trajectory has an antipodal pair at t when overlap_min(t) <= -1 + eps (eps = "
        f"{table.attrs['eps']:g}). p_persist (from t): the pair is present at t and at every later "
        "checkpoint. For n = 2 p_any is P(antipodal) of the table above up to the |overlap| condition.", "",
        rows_table(head, rows), "", "![any antipodal](any_antipodal.png)", ""]
    if "persistence" in figures:
        lines += ["![persistence](persistence.png)", ""]
    return Part(lines, figures)


MAX_CURVES = 10  # d values drawn per panel (one colour each); more would be unreadable


def plot_antipodal_vs_beta(table: xr.Dataset, path) -> str:
    """P(antipodal) vs beta with Wilson bars, dense theory curves and critical betas; returns path.
    At most MAX_CURVES values of d, evenly spread over the grid's (the table has them all)."""
    table = with_dims(table, ("beta", "d"))
    attrs = table.attrs
    all_d = table.d.size
    if all_d > MAX_CURVES:
        table = table.isel(d=np.unique(np.linspace(0, all_d - 1, MAX_CURVES).round().astype(int)))
    theory = closed_form(table, "antipodal_probability")
    critical = closed_form(table, "critical_beta")
    panels_ = list(facets(table, ("beta", "d")))
    fig, axes = subplots(len(panels_), share=True)
    colours = {d: plt.cm.tab10(i % 10) for i, d in enumerate(table.d.values)}
    betas = table.beta.values
    # the dense curve also reaches back to the critical betas, where the transition starts
    lines_at = {d: critical(d) if critical is not None else np.nan for d in table.d.values}
    start = min([betas.min()] + [b for b in lines_at.values() if np.isfinite(b) and b >= 0])
    dense = np.linspace(start, betas.max(), N_DENSE)
    for ax, (label, sub) in zip(axes, panels_):
        for d in sub.d.values:
            cell = sub.sel(d=d).squeeze()  # keep n, sigma as scalar coordinates
            colour = colours[d]
            p, lo, hi = (np.ravel(cell[v].values) for v in ("p_antipodal", "lo", "hi"))
            # clip: at k = 0 or k = N the Wilson bound may differ from p by a rounding error
            ax.errorbar(np.ravel(cell.beta.values), p, yerr=np.maximum([p - lo, hi - p], 0), fmt="o", ms=4,
                        capsize=2, color=colour, label=f"d = {d} (simulation)")
            if theory is None:
                continue
            cells = {"beta": dense, "d": np.full(dense.shape, d)}
            for name in ("n", "sigma", "rho0"):  # rho0: the conditional closed form
                value = scalar(cell, name, None)
                if value is not None:
                    cells[name] = np.full(dense.shape, value)
            at_t, band = (np.ravel(cell[v].values) for v in ("theory_t", "unresolved_t"))
            if np.isfinite(at_t).any():  # the finite-t curve at the grid's betas, with its band
                b = np.ravel(cell.beta.values)
                ax.plot(b, at_t, ":", color=colour, lw=1.2, label=f"d = {d} (theory at t)")
                ax.fill_between(b, at_t, at_t + band, color=colour, alpha=0.15, lw=0)
            curve = np.asarray(theory(cells), float)
            if np.isfinite(curve).any():
                ax.plot(dense, curve, "-", color=colour, lw=1.2, label=f"d = {d} (theory)")
                if np.isfinite(lines_at[d]):
                    ax.axvline(float(lines_at[d]), ls="--", lw=1, color=colour)
        top = min(1.02, max(0.55, float(np.nanmax(sub.hi.values, initial=0.0)) + 0.05))
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="P(antipodal) (probability)",
               ylim=(-0.01, top), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    level = attrs.get("level", 0.95)
    what = f"P(antipodal) vs β, Wilson {level:.0%} intervals"
    if all_d > MAX_CURVES:
        what += f" ({MAX_CURVES} of {all_d} values of d)"
    if critical is not None:
        what += "; dashed: β_c(d) = arccosh(d-2)/2"
    if np.isfinite(table.theory_t.values).any():
        what += f"; dotted: theory at t = {attrs.get('t', np.nan):g}, shaded: + predicted unresolved"
    return save(fig, path, figure_title(attrs, what))


def plot_heatmap(table: xr.Dataset, path) -> str:
    """Heatmap of P(antipodal) over (beta, sigma), the model's threshold curves drawn over it."""
    table = with_dims(table, ("beta", "sigma"))
    attrs = table.attrs
    thresholds = closed_form(table, "threshold_curves")
    panels_ = list(facets(table, ("beta", "sigma")))
    fig, axes = subplots(len(panels_), width=5.5)
    betas, sigmas = table.beta.values, table.sigma.values
    dense = np.linspace(betas.min(), betas.max(), N_DENSE)
    for ax, (label, sub) in zip(axes, panels_):
        p = sub.p_antipodal.squeeze(drop=True).transpose("sigma", "beta")
        mesh = ax.pcolormesh(betas, sigmas, p.values, shading="nearest", vmin=0, vmax=1, cmap="viridis")
        curves = thresholds(dense) if thresholds is not None else []
        for name, style, values in curves:
            ax.plot(dense, values, style, lw=2, label=name)
        if curves:
            ax.legend(fontsize=7, loc="upper right", facecolor="0.3", labelcolor="w")
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="noise level σ (dimensionless)",
               ylim=(sigmas.min(), sigmas.max()), title=label)
        fig.colorbar(mesh, ax=ax, label="P(antipodal)")
    return save(fig, path, figure_title(attrs, "P(antipodal) over (β, σ)"))


def plot_any_antipodal(table: xr.Dataset, path):
    """P(any antipodal pair) vs beta per n at the last checkpoint (Wilson bars)."""
    attrs = table.attrs
    last = table.isel(t=-1)
    facet = list(panels(last.p_any, ("beta", "n")))
    fig, axes = subplots(len(facet), share=True)
    for ax, (label, sel) in zip(axes, facet):
        sub = last.sel(sel)
        for i, n in enumerate(sub.n.values):
            cell = sub.sel(n=n)
            p, lo, hi = cell.p_any.values, cell.lo.values, cell.hi.values
            ax.errorbar(cell.beta.values, p, yerr=np.maximum([p - lo, hi - p], 0), fmt="o-", ms=4,
                        capsize=2, color=plt.cm.tab10(i % 10), label=f"n = {n:g}")
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="P(at least one antipodal pair)",
               ylim=(-0.01, 1.01), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    level = attrs.get("level", 0.95)
    return save(fig, path, figure_title(
        {**attrs, "t": float(last.t)}, f"P(some pair within eps of antipodal), Wilson {level:.0%} intervals"))


def plot_persistence(table: xr.Dataset, path):
    """Per cell of the other axes, over the checkpoints: P(antipodal pair at t) (solid) and
    P(present from t to the last checkpoint) (dashed), for at most 6 betas."""
    facet = list(panels(table.p_any.isel(t=0, drop=True), ("beta",)))
    fig, axes = subplots(len(facet), share=True)
    betas = table.beta.values
    shown = betas if betas.size <= 6 else betas[np.linspace(0, betas.size - 1, 6).round().astype(int)]
    for ax, (label, sel) in zip(axes, facet):
        for i, beta in enumerate(shown):
            cell = table.sel(sel).sel(beta=beta)
            colour = plt.cm.viridis(i / max(1, len(shown) - 1))
            ax.plot(cell.t.values, cell.p_any.values, "o-", ms=3, color=colour, label=f"β = {beta:g}")
            ax.plot(cell.t.values, cell.p_persist.values, "--", color=colour)
        ax.set(xlabel="checkpoint t (dimensionless)", ylabel="probability", ylim=(-0.01, 1.01),
               title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save(fig, path, figure_title(table.attrs, "P(antipodal pair at t) (solid) and P(present from t "
                                                     "to T) (dashed)"))


def step_bias_section(report: ReportInput) -> Part:
    """The O(h) bias: P(antipodal) against h = T / layers per cell, beside the closed form (the
    h -> 0 limit); only when `layers` is a grid axis with more than one value."""
    ds, level = report.ds, report.level
    if ds.sizes.get("layers", 1) < 2:
        return Part([], {})
    table = antipodal_table(ds, level=level)
    T = float(ds.attrs["T"])
    others = [dim for dim in row_order(table.n_traj.dims) if dim != "layers"]
    table = table.sortby(others + ["layers"]).transpose(*others, "layers")
    hs = T / table.layers.values
    fit = zero_step_table(table, T, level=AGREE_LEVEL).transpose(*others)
    head = others + [f"h = {h:.3g}" for h in hs] + [
        f"h → 0, linear fit [{AGREE_LEVEL:.0%}]", "χ²/dof", f"h → 0, quadratic [{AGREE_LEVEL:.0%}]",
        f"theory at t = {float(table.attrs.get('t', T)):g}", "theory (t → ∞)"]
    rows = []
    for idx in np.ndindex(*[table.sizes[dim] for dim in others]):
        cell, f = table[dict(zip(others, idx))], fit[dict(zip(others, idx))]
        rows.append([f"{cell[dim].values.item():g}" for dim in others] + [
            f"{fmt(float(c.p_antipodal))} [{fmt(float(c.lo))}, {fmt(float(c.hi))}]"
            for c in (cell.isel(layers=i) for i in range(len(hs)))] + [
            f"{fmt(float(f.p0))} [{fmt(float(f.lo))}, {fmt(float(f.hi))}]",
            f"{fmt(float(f.chi2), 1)}/{int(f.dof)}" if np.isfinite(float(f.chi2)) else "—",
            f"{fmt(float(f.p0_quad))} [{fmt(float(f.lo_quad))}, {fmt(float(f.hi_quad))}]",
            fmt(float(f.theory_t)), fmt(float(cell.theory.isel(layers=0)))])
    figures = {"step_bias": plot_step_bias(table, hs, report.out / "step_bias.png", fit)}
    lines = [
        "## P(antipodal) against the step h = T / layers", "",
        f"Each row: one cell at every layer count ({level:.0%} Wilson intervals), then the h → 0 "
        "extrapolations (weighted least squares of p against h with binomial weights, linear and, as a "
        "check, quadratic; χ² of the linear fit; docs/models.md section 4.6), the limit diffusion's "
        "probability at this t (backward equation) and the closed form (t → ∞). The discrete model's "
        "bias is O(h) (docs/models.md section 4). "
        "The header's layers and h are the spec's time.layers; each column has its own h.", "",
        rows_table(head, rows), "", "![step bias](step_bias.png)", ""]
    return Part(lines, figures)


def plot_step_bias(table: xr.Dataset, hs, path, fit: xr.Dataset | None = None) -> str:
    """P(antipodal) vs h per cell (Wilson bars), the closed form drawn at h = 0 and the linear
    extrapolation (`fit`, `zero_step_table`) with its interval; returns path."""
    others = [dim for dim in table.n_traj.dims if dim != "layers"]
    fig, axes = subplots(1, width=7.0)
    ax = axes[0]
    for i, idx in enumerate(np.ndindex(*[table.sizes[dim] for dim in others])):
        cell = table[dict(zip(others, idx))]
        label = ", ".join(f"{dim} = {cell[dim].values.item():g}" for dim in others
                          if table.sizes[dim] > 1)
        colour = plt.cm.tab10(i % 10)
        p, lo, hi = (np.ravel(cell[v].values) for v in ("p_antipodal", "lo", "hi"))
        ax.errorbar(hs, p, yerr=np.maximum([p - lo, hi - p], 0), fmt="o-", ms=4, capsize=2,
                    color=colour, label=label or None)
        ax.plot([0.0], [float(cell.theory.isel(layers=0))], "*", ms=10, color=colour)
        if fit is not None:
            f = fit[dict(zip(others, idx))]
            ax.errorbar([0.0], [float(f.p0)], yerr=[[float(f.p0 - f.lo)], [float(f.hi - f.p0)]],
                        fmt="D", ms=4, capsize=2, color=colour, alpha=0.6)
    ax.set(xlabel="step h = T / layers (time units)", ylabel="P(antipodal) (probability)",
           xlim=(-0.03 * max(hs), 1.03 * max(hs)))
    ax.grid(alpha=0.3)
    if len(ax.get_legend_handles_labels()[0]):
        ax.legend(fontsize=7, ncol=2)
    attrs = {k: v for k, v in table.attrs.items() if k != "layers"}  # h varies: not one h
    return save(fig, path, figure_title(attrs, "P(antipodal) vs h; stars: closed form (h → 0), "
                                        "diamonds: linear extrapolation"))
