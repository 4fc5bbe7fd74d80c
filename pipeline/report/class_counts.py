"""Report section of the cluster classes over time (the stochastic models): at every checkpoint,
the fraction of counted trajectories that are antipodal (solid) and still unresolved (dashed),
one line per beta, one panel per value of the other grid axes (`classes.png`).

It shows how far the run is from T = infinity: the antipodal fraction should level off as the
unresolved fraction falls to 0 (the caveat `unresolved` flags the cells where it has not).
"""

from __future__ import annotations

import xarray as xr

from ..analysis.antipodal import CLASS_ANTIPODAL, CLASS_UNRESOLVED
from ..analysis.stats import done_finite
from ..plugin import Part, ReportInput
from .figures import figure_title, key_lines, plt, save, subplots, value_colours
from .observables import cell_label, shown_cells

__all__ = ["class_count_section", "class_fractions"]


def class_fractions(ds: xr.Dataset) -> xr.Dataset:
    """Fractions antipodal and unresolved over (grid..., t) among the counted trajectories."""
    cc = ds["cluster_class"]
    keep = done_finite(ds, cc.isel(t=0, drop=True))
    # the count is `counted`, never `n`: `n` is the token-count grid axis, and a variable of that
    # name would stand for the coordinate (every fraction divided by n, as it once was)
    counts = xr.Dataset({"antipodal": ((cc == CLASS_ANTIPODAL) & keep).sum("traj"),
                         "unresolved": ((cc == CLASS_UNRESOLVED) & keep).sum("traj"),
                         "counted": keep.sum("traj")}).compute()
    counted = counts.counted.where(counts.counted > 0)  # nothing counted yet: NaN, not a warning
    return xr.Dataset({"antipodal": counts.antipodal / counted, "unresolved": counts.unresolved / counted})


def plot_class_fractions(frac: xr.Dataset, attrs: dict, path):
    """Per panel (shown cell of the other axes) and beta: the antipodal fraction against t (solid,
    markers) then the unresolved one (dashed); the path written (the open figure for path None)."""
    dims = [d for d in frac.antipodal.dims if d not in ("t", "beta")]
    cells = shown_cells(frac.antipodal.isel(t=0, drop=True), dims)
    fig, axes = subplots(len(cells), width=5.5)
    betas = frac["beta"].values if "beta" in frac.antipodal.dims else [None]
    colours = [plt.cm.viridis(0.0)] if betas[0] is None else value_colours(betas)
    for ax, sel in zip(axes, cells):
        for beta, colour in zip(betas, colours):
            cell = frac[sel] if beta is None else frac[sel].sel(beta=beta)
            label = "" if beta is None else f"β = {beta:g}"
            ax.plot(cell.t.values, cell.antipodal.values, "o-", ms=3, color=colour, label=label)
            ax.plot(cell.t.values, cell.unresolved.values, "--", color=colour)
        ax.set(xlabel="time t (dimensionless)", ylabel="fraction of trajectories", ylim=(-0.02, 1.02),
               title=cell_label(frac.antipodal, sel))
        ax.grid(alpha=0.3)
        if betas[0] is not None:
            key_lines(ax, betas, fontsize=7, ncol=2)
    return save(fig, path, figure_title(attrs, "Antipodal (solid) and unresolved (dashed) over time"))


def class_count_section(report: ReportInput) -> Part:
    """classes.png for a cube with `cluster_class` over more than one checkpoint; else empty."""
    ds = report.ds
    if "cluster_class" not in ds or ds.sizes.get("t", 1) < 2:
        return Part([], {})
    figures = {"classes": plot_class_fractions(class_fractions(ds), ds.attrs, report.out / "classes.png")}
    lines = ["## Cluster classes over time", "",
             "Fraction of counted trajectories classified antipodal (solid) and still unresolved "
             "(dashed) at each checkpoint: P(antipodal) is read at the last one.", "",
             "![classes](classes.png)", ""]
    return Part(lines, figures)
