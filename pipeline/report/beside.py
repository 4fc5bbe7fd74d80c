"""Two cubes side by side (`tokensweep report STORE --beside OTHER`, `write_report(..., beside=)`).

[F26] App. D.2 / Fig. 9 compares the deep stochastic transformer with its deterministic
counterpart, the hybrid model (7) at sigma = 0: two models, so two cubes. On the cells both hold
(the same values of the grid axes they share; an axis of one cube alone must have one value), per
cube: the mean cluster count over t (`beside.png`, one panel per cell) and the plateau statistic
`analysis.clustering.settle_times` (when the count stops changing): its median and latest, the
share settled by T/2, and a one-sided Mann-Whitney test that this cube settles earlier.
`beside_table` is what the section and the claims read.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..analysis.clustering import settle_times
from ..analysis.stats import grid_dims, stored_spec
from ..plugin import Part, ReportInput
from .claims_common import trajectories
from .figures import figure_title, save, subplots
from .tables import fmt, rows_table

__all__ = ["beside_section", "beside_table", "cube_name"]


def cube_name(ds) -> str:
    """The spec name a cube was run under."""
    sweep = stored_spec(ds)
    return "?" if sweep is None else sweep.name


def shared_cells(ds, other):
    """({axis: value} per cell both cubes hold, None) or ([], why not)."""
    mine, theirs = grid_dims(ds), grid_dims(other)
    for cube, dims in ((ds, mine), (other, theirs)):
        single = [d for d in dims if d not in set(mine) & set(theirs) and cube.sizes[d] > 1]
        if single:
            return [], f"{cube_name(cube)} has the axis {single[0]} with several values, which the other lacks"
    shared = [d for d in mine if d in theirs]
    values = [sorted(set(ds[d].values.tolist()) & set(other[d].values.tolist())) for d in shared]
    return [dict(zip(shared, combo)) for combo in itertools.product(*values)], None


def _settle(cube, cell: dict) -> tuple[np.ndarray, np.ndarray]:
    """(counts, settle times) of the counted trajectories of a cube in a cell (its own lone axes at
    their one value)."""
    sel = {**cell, **{d: cube[d].values[0] for d in grid_dims(cube) if d not in cell}}
    counts = trajectories(cube, "n_clusters", sel)
    return counts, settle_times(counts, cube["t"].values)


def beside_table(ds, other) -> tuple[list[dict], str | None]:
    """Per shared cell: {cell, mine: stats, theirs: stats, p_earlier}; or ([], why not)."""
    if other is None:
        return [], "no cube beside this one (tokensweep report STORE --beside OTHER)"
    if "n_clusters" not in ds or "n_clusters" not in other:
        return [], "both cubes need the output n_clusters"
    cells, why = shared_cells(ds, other)
    if why is not None or not cells:
        return [], why or "the two cubes share no cell (the same values of their shared grid axes)"
    from scipy import stats

    rows = []
    for cell in cells:
        entry = {"cell": cell}
        for side, cube in (("mine", ds), ("theirs", other)):
            counts, settled = _settle(cube, cell)
            t = cube["t"].values
            entry[side] = {"name": cube_name(cube), "n": len(settled), "t": t,
                           "mean_count": counts.mean(axis=0) if len(settled) else np.full(t.size, np.nan),
                           "settled": settled}
        a, b = entry["mine"]["settled"], entry["theirs"]["settled"]
        entry["p_earlier"] = (float(stats.mannwhitneyu(a, b, alternative="less").pvalue)
                              if len(a) and len(b) else float("nan"))
        rows.append(entry)
    return rows, None


def beside_section(report: ReportInput) -> Part:
    if report.beside is None:
        return Part([], {})
    rows, why = beside_table(report.ds, report.beside)
    mine, theirs = cube_name(report.ds), cube_name(report.beside)
    if why is not None:
        return Part([f"## Beside {theirs}", "", f"Not drawn: {why}.", ""], {})
    table = []
    for row in rows:
        label = [", ".join(f"{k} = {v:g}" for k, v in row["cell"].items())]
        for side in ("mine", "theirs"):
            s = row[side]
            half = s["t"][-1] / 2
            table.append(label + [s["name"], str(s["n"]), fmt(float(s["mean_count"][-1]), 3),
                                  fmt(float(np.median(s["settled"])), 3), fmt(float(s["settled"].max()), 3),
                                  fmt(float(np.mean(s["settled"] <= half)), 3),
                                  f"{row['p_earlier']:.2g}" if side == "mine" else "—"])
    figures = {"beside": plot_beside(rows, report.ds.attrs, report.out / "beside.png")}
    lines = [
        f"## Beside {theirs}", "",
        f"The cluster count over t of this cube ({mine}) and of {theirs}, on the cells both hold. Settled: "
        "the checkpoint from which a trajectory's cluster count no longer changes (the plateau statistic: a "
        "metastable flow settles late); by T/2: the share settled in the first half; p (earlier): one-sided "
        f"Mann-Whitney test that {mine} settles earlier than {theirs}.", "",
        rows_table(["cell", "cube", "N", "mean count (T)", "settled: median t", "settled: latest t", "by T/2",
                    "p (earlier)"], table), "",
        "![beside](beside.png)", ""]
    return Part(lines, figures)


def plot_beside(rows, attrs: dict, path) -> str:
    """One panel per shared cell: both cubes' mean cluster count over t."""
    fig, axes = subplots(len(rows))
    for ax, row in zip(axes, rows):
        for side, style in (("mine", "-"), ("theirs", "--")):
            s = row[side]
            ax.plot(s["t"], s["mean_count"], style, lw=1.5, label=f"{s['name']} (N = {s['n']})")
        ax.set(xlabel="time t (dimensionless)", ylabel="mean number of clusters",
               title=", ".join(f"{k} = {v:g}" for k, v in row["cell"].items()))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path, figure_title(attrs, "Side by side: clusters over t"))
