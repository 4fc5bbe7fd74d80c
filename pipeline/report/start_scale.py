"""Report section of a start-scale axis ([GLPR-E] Remark 3): the flow in R^d is not invariant under
scaling the starts, so how fast the tokens cluster depends on their typical modulus.

`settle_table(ds)`: per cell (start_scale among the grid axes), from the counted trajectories, the
time from which the cluster count of z no longer changes (`analysis.clustering.settle_times`): its
quartiles, in time and in layers, and the mean count at T; `scale_test(table)`: per value of the
other axes, the Kruskal-Wallis test that the settle times are the same at every scale. The section
draws the median and the quartiles against the scale (`start_scale.png`, log x). Empty without the axis.
"""

from __future__ import annotations

import numpy as np

from ..analysis.clustering import settle_times
from ..analysis.stats import grid_dims
from ..plugin import Part, ReportInput
from .claims_common import trajectories
from .figures import figure_title, save, subplots
from .tables import cell_rows, fmt, rows_table

__all__ = ["start_scale_section", "settle_table", "scale_test"]


def settle_table(ds):
    """{cell (tuple of (axis, value)): (settle times, counts at T, the cell's labels)} over the
    grid, or None without the axis."""
    if "start_scale" not in ds.dims or "n_clusters" not in ds:
        return None
    out = {}
    for labels, sel in cell_rows(ds["n_clusters"].isel(t=0, traj=0, drop=True), grid_dims(ds)):
        values = {d: ds[d].values[i].item() for d, i in sel.items()}
        counts = trajectories(ds, "n_clusters", values)
        out[tuple(values.items())] = (settle_times(counts, ds["t"].values), counts[:, -1], labels)
    return out


def scale_test(table) -> list[tuple[str, float, list]]:
    """Per value of the axes other than start_scale: (label, Kruskal-Wallis p, [(scale, times)])."""
    from scipy import stats

    groups: dict = {}
    for cell, (times, _, _) in table.items():
        other = tuple((k, v) for k, v in cell if k != "start_scale")
        groups.setdefault(other, []).append((dict(cell)["start_scale"], times))
    out = []
    for other, series in groups.items():
        series.sort(key=lambda pair: pair[0])
        samples = [times for _, times in series if len(times)]
        distinct = len({float(x) for times in samples for x in times}) > 1
        p = float(stats.kruskal(*samples).pvalue) if len(samples) > 1 and distinct else float("nan")
        out.append((", ".join(f"{k} = {v:g}" for k, v in other), p, series))
    return out


def start_scale_section(report: ReportInput) -> Part:
    table = settle_table(report.ds)
    if table is None:
        return Part([], {})
    h = float(report.sweep.time.h)
    rows = []
    for times, final, labels in table.values():
        q1, q2, q3 = np.percentile(times, [25, 50, 75]) if len(times) else (np.nan,) * 3
        rows.append(labels + [str(len(times)), fmt(q2, 3), f"{fmt(q1, 3)}-{fmt(q3, 3)}", str(int(round(q2 / h))),
                     fmt(float(np.mean(final)), 3)])
    tests = scale_test(table)
    figures = {"start_scale": plot_scale(tests, report.ds.attrs, report.out / "start_scale.png")}
    lines = [
        "## Clustering time against the start's scale ([GLPR-E] Remark 3)", "",
        "Every start is the spec's start times start_scale. Settled: the time from which a trajectory's "
        "cluster count of z no longer changes (clusters at eps times the start's own radius, so the "
        "count is comparable across scales); layers: that median in steps of h. Kruskal-Wallis p per "
        "value of the other axes (the same settle times at every scale?): "
        + "; ".join(f"{label or 'the grid'}: p = {p:.2g}" for label, p, _ in tests) + ".", "",
        rows_table(grid_dims(report.ds) + ["N", "settled: median t", "quartiles",
                                                           "median (layers)", "mean count (T)"], rows), "",
        "![start_scale](start_scale.png)", ""]
    return Part(lines, figures)


def plot_scale(tests, attrs: dict, path) -> str:
    fig, axes = subplots(1)
    ax = axes[0]
    for label, p, series in tests:
        scales = np.array([s for s, _ in series], float)
        q = np.array([np.percentile(t, [25, 50, 75]) if len(t) else [np.nan] * 3 for _, t in series])
        line, = ax.plot(scales, q[:, 1], "o-", ms=4, label=f"{label or 'median'} (p = {p:.2g})")
        ax.fill_between(scales, q[:, 0], q[:, 2], color=line.get_color(), alpha=0.2)
    ax.set(xscale="log", xlabel="start scale (factor on every start)",
           ylabel="settled: time of the last change of the cluster count", title="median and quartiles")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path, figure_title(attrs, "Clustering time against the start's scale"))
