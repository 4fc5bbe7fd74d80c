"""[GLPR-P] Fig. 2's proven single-cluster regions over a measured diagram (`proven_section`).

Fig. 2 marks where one cluster (almost every start, t -> infinity, Q = K = V = I, SA or USA) is
proven: Thm 4.1 (beta = 0), Thm 4.3 (d = 2: beta <= 1), Thm 5.1 (beta past the proof's
(n - 1) tau*_{beta,d} < pi/2) and Thm 6.1 (d >= 3, every beta) (`theory.regions.proven_theorems`).
`proven_table` gives per cell of a plain-flow cube from uniform starts the fraction of trajectories
in one cluster at T and the theorems that cover the cell; `proven_section` draws it
(`proven_regions.png`: the fraction over beta and n, or over beta and d, the proven cells framed and
labelled) where the grid has several beta and a cell outside every region, so that the picture
has something to separate.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..analysis.stats import done_finite, grid_dims
from ..models import get_model
from ..plugin import Part, ReportInput
from ..theory.regions import proven_theorems, thm51_beta
from .figures import figure_title, plt, save, subplots
from .tables import cell_rows, fmt, rows_table

__all__ = ["proven_table", "proven_section", "plot_proven", "region_hypothesis"]

AXES = ("beta", "d", "n")
SHORT = {"Thm 4.1": "4.1", "Thm 4.3": "4.3", "Thm 5.1": "5.1", "Thm 6.1": "6.1"}


def region_hypothesis(report: ReportInput) -> str | None:
    """Why Fig. 2's regions do not apply to the cube (None when they do): the plain flow (SA or USA,
    Q = K = V = I) from uniform starts, n_clusters recorded, a grid over beta, d, n only."""
    sweep, ds = report.sweep, report.ds
    attention = getattr(get_model(sweep.model), "closed_form_attention", None)
    if attention is None or attention(sweep) is None:
        return "the theorems are for SA or USA with Q = K = V = I"
    if getattr(sweep.init, "kind", None) != "uniform":
        return "the theorems are for almost every start: uniform starts"
    if "n_clusters" not in ds:
        return "the cube records no n_clusters"
    if any(d not in AXES for d in grid_dims(ds)):
        return f"grid axes {grid_dims(ds)} beyond β, d, n"
    return None


def proven_table(ds: xr.Dataset) -> xr.Dataset:
    """Per cell (beta, d, n): n_traj, one (trajectories in one cluster at T), fraction, and
    `theorems` (the covering theorems, ', '-joined; '' outside every region)."""
    final = ds["n_clusters"].isel(t=-1)
    keep = done_finite(ds, final)
    one = ((final == 1) & keep).sum("traj")
    n_traj = keep.sum("traj")
    full = xr.Dataset({"one": one, "n_traj": n_traj}).expand_dims([a for a in AXES if a not in one.dims])
    full = full.transpose(*AXES)
    theorems = np.empty(full.one.shape, dtype=object)
    for idx in np.ndindex(*theorems.shape):
        beta, d, n = (float(full[a].values[i]) for a, i in zip(AXES, idx))
        theorems[idx] = ", ".join(proven_theorems(beta, int(d), int(n)))
    full["theorems"] = (AXES, theorems.astype(str))
    full["fraction"] = full.one / full.n_traj.where(full.n_traj > 0)
    full.attrs["T"] = float(ds.t.values[-1])
    return full


def proven_section(report: ReportInput) -> Part:
    if region_hypothesis(report) is not None:
        return Part([], {})
    table = proven_table(report.ds)
    proven = table.theorems != ""
    if table.sizes["beta"] < 2 or bool(proven.all()):
        return Part([], {})
    figures = {"proven_regions": plot_proven(table, report.ds.attrs, report.out / "proven_regions.png")}
    dims = [a for a in AXES if table.sizes[a] > 1]
    rows = [labels + [f"{table.one.isel(sel).values.item()}/{table.n_traj.isel(sel).values.item()}",
                      str(table.theorems.isel(sel).values.item()) or "—"]
            for labels, sel in cell_rows(table.one, dims)]
    lines = ["## Proven single-cluster regions ([GLPR-P] Fig. 2)", "",
             f"Trajectories in one cluster at T = {table.attrs['T']:g} per cell, beside the theorems that "
             "prove one cluster there as t → ∞ (almost every start, Q = K = V = I): Thm 4.1 (β = 0), "
             "Thm 4.3 (d = 2, β ≤ 1), Thm 5.1 (the proof's (n - 1) τ*_{β,d} < π/2: in d = 2 from β = "
             f"{float(thm51_beta(3)):.3g} for n = 3, {float(thm51_beta(4)):.3g} for n = 4, "
             f"{float(thm51_beta(6)):.3g} for n = 6), Thm 6.1 (d ≥ 3). A finite T can only fall short of "
             "a proven one cluster; outside the regions nothing is proven, and the measured fraction "
             "says what the flow does there.", "",
             rows_table(dims + ["one cluster at T", "proven by"], rows), "",
             "![proven_regions](proven_regions.png)", ""]
    return Part(lines, figures)


def plot_proven(table: xr.Dataset, attrs: dict, path) -> str:
    """The one-cluster fraction at T over beta (x) and n (y; d where n is one value), one panel per
    value of the remaining axis; proven cells framed in green and labelled by theorem."""
    y = "n" if table.sizes["n"] > 1 or table.sizes["d"] == 1 else "d"
    other = "d" if y == "n" else "n"
    values = table[other].values
    fig, axes = subplots(len(values), width=5.5, height=4.2)
    for ax, value in zip(axes, values):
        cell = table.sel({other: value})
        frac = cell.fraction.transpose(y, "beta").values.astype(float)
        image = ax.imshow(frac, origin="lower", vmin=0, vmax=1, cmap="viridis", aspect="auto")
        names = cell.theorems.transpose(y, "beta").values
        for (i, j), text in np.ndenumerate(names):
            shown = fmt(frac[i, j], 2) + (f"\n{', '.join(SHORT.get(t, t) for t in text.split(', '))}" if text else "")
            ax.text(j, i, shown, ha="center", va="center", fontsize=7, color="w" if frac[i, j] < 0.6 else "k")
            if text:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="limegreen", lw=2.5))
        ax.set_xticks(range(cell.sizes["beta"]), [f"{b:g}" for b in cell.beta.values])
        ax.set_yticks(range(cell.sizes[y]), [f"{int(v)}" for v in cell[y].values])
        ax.set(xlabel="β", ylabel=y, title=f"{other} = {value:g}")
        fig.colorbar(image, ax=ax, label="fraction in one cluster at T")
    return save(fig, path, figure_title(attrs, "One cluster at T; green frames: proven as t → ∞ ([GLPR-P] Fig. 2: "
                                               "Thm 4.1, 4.3, 5.1, 6.1)"))
