"""Report section of the observables a spec records over time (`record:`, pipeline/recording.py).

* `overlap_hist` -> `overlap_hist.png`: per grid cell, the histogram of the pairwise overlaps
  <x_i, x_j> at every checkpoint ([GLPR-P] Fig. 1 style): colour = fraction of the n (n - 1) / 2
  pairs in the bin, averaged over the counted trajectories, on a log scale (mass piles up at +-1);
* scalar observables (hemisphere_margin, consensus_error, consensus_error_abs, energy) ->
  `observables.png`: their mean over the counted trajectories against t, one line per cell;
* gram and states (per-token arrays) are stored, not drawn: `tokensweep.open(STORE)` reads them.

Only counted trajectories enter (`stats.done_finite`). At most `MAX_CELLS` cells are drawn,
evenly spread over the grid, and the text says so when cells are left out.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.colors import LogNorm

from ..analysis.stats import done_finite, grid_dims
from ..plugin import Part, ReportInput
from .figures import figure_title, plt, save, subplots

__all__ = ["recorded_section", "counted_mean", "shown_cells", "cell_label", "MAX_CELLS"]

MAX_CELLS = 9
NOT_DRAWN = ("gram", "states")


def shown_cells(da: xr.DataArray, dims, most: int = MAX_CELLS) -> list[dict]:
    """Index selections {dim: i} of at most `most` grid cells, evenly spread in C order."""
    shape = [da.sizes[d] for d in dims]
    total = int(np.prod(shape))
    picks = np.unique(np.linspace(0, total - 1, min(most, total)).round().astype(int))
    return [dict(zip(dims, np.unravel_index(i, shape))) for i in picks]


def cell_label(da: xr.DataArray, sel: dict) -> str:
    return ", ".join(f"{d} = {da[d].values[i]:g}" for d, i in sel.items()) or "the cell"


def counted_mean(ds: xr.Dataset, name: str) -> xr.DataArray:
    """Mean of output `name` over the counted trajectories, over (grid..., t, extra...)."""
    var = ds[name]
    keep = done_finite(ds, var.isel({d: 0 for d in var.dims if d not in grid_dims(ds) + ["traj"]},
                                    drop=True))
    return var.where(keep).astype("float64").mean("traj").compute()


def plot_overlap_hist(mean: xr.DataArray, dims, attrs: dict, path) -> str:
    """Fraction of pairs per overlap bin over (bin, t), one panel per cell shown."""
    cells = shown_cells(mean, dims)
    fig, axes = subplots(len(cells), width=5.0, height=3.8)
    times = mean["t"].values
    norm = LogNorm(vmin=1e-3, vmax=1.0)
    for ax, sel in zip(axes, cells):
        hist = mean[sel].transpose("t", "bin").values
        fraction = hist / np.where(hist.sum(axis=1, keepdims=True) > 0, hist.sum(axis=1, keepdims=True), np.nan)
        fraction = np.ma.masked_less_equal(np.nan_to_num(fraction), 0)
        mesh = ax.pcolormesh(mean["bin"].values, times, fraction, norm=norm, cmap="magma", shading="nearest")
        ax.set(xlabel="overlap <x_i, x_j>", ylabel="time t (dimensionless)", title=cell_label(mean, sel))
        fig.colorbar(mesh, ax=ax, label="fraction of pairs")
    return save(fig, path, figure_title(attrs, "Histogram of pairwise overlaps over time (mean over trajectories)"))


def plot_scalars(means: dict, dims, attrs: dict, path) -> str:
    """One panel per scalar observable: its mean against t, one line per cell shown."""
    fig, axes = subplots(len(means), width=5.5)
    for ax, (name, mean) in zip(axes, means.items()):
        for i, sel in enumerate(shown_cells(mean, dims)):
            ax.plot(mean["t"].values, mean[sel].values, "o-", ms=3, color=plt.cm.tab10(i % 10),
                    label=cell_label(mean, sel))
        ax.set(xlabel="time t (dimensionless)", ylabel=mean.attrs.get("long_name", name)[:60], title=name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, figure_title(attrs, "Recorded observables: mean over trajectories"))


def recorded_section(report: ReportInput) -> Part:
    """The figures of the observables `record` lists; empty for a sweep that records none."""
    ds, sweep = report.ds, report.sweep
    recorded = [name for name in getattr(sweep, "record", ()) if name in ds]
    if not recorded:
        return Part([], {})
    dims = grid_dims(ds)
    n_cells = int(np.prod([ds.sizes[d] for d in dims]))
    shown = f" ({min(MAX_CELLS, n_cells)} of {n_cells} cells shown, evenly spread)" if n_cells > MAX_CELLS else ""
    lines, figures = ["## Recorded observables over time", ""], {}
    if "overlap_hist" in recorded:
        mean = counted_mean(ds, "overlap_hist")
        figures["overlap_hist"] = plot_overlap_hist(mean, dims, ds.attrs, report.out / "overlap_hist.png")
        lines += [f"Histogram of the pairwise overlaps per checkpoint{shown}: colour is the fraction of "
                  f"pairs in each of the {ds.sizes['bin']} bins of [-1, 1], mean over trajectories.", "",
                  "![overlap_hist](overlap_hist.png)", ""]
    scalars = [n for n in recorded if n not in NOT_DRAWN and n != "overlap_hist"]
    if scalars:
        means = {n: counted_mean(ds, n).assign_attrs(ds[n].attrs) for n in scalars}
        figures["observables"] = plot_scalars(means, dims, ds.attrs, report.out / "observables.png")
        lines += [f"Mean over trajectories against t of {', '.join(scalars)}{shown}.", "",
                  "![observables](observables.png)", ""]
    stored = [n for n in recorded if n in NOT_DRAWN]
    if stored:
        lines += [f"{' and '.join(stored)} are stored per token, not drawn: `tokensweep.open(STORE)` "
                  "reads them.", ""]
    return Part(lines, figures)
