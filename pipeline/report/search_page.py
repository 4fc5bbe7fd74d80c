"""The page of an adaptive boundary search (`pipeline/search.py`, `tokensweep boundary`): per value of
the other axes the interval found, the trajectories it cost, and what a dense grid would cost for the
same width.

The dense grid's cost. A dense grid reaches an interval of width W when two adjacent points of
spacing W on either side of the crossing are decided, each at the N that decides a point W / 2 from
the crossing; that is the N of the search's last pair (`max_n`, module docstring of
`pipeline/search.py`). The grid over [x_lo, x_hi] has ceil((x_hi - x_lo) / W) + 1 points, and it
computes every point at that N (it cannot know in advance which two points matter):

    dense = (ceil((x_hi - x_lo) / W) + 1) * max_n.

`benchmarks/bench_boundary.py` measures the dense grid for real (growing it until its interval
reaches W) and finds the same order; this page gives the formula's value beside each search.

`write_boundary_report(results, sweep, design, axis, outcome, folder)` writes `boundary.md`,
`boundary.png` (per cell, the looks: the empirical probability at each point with its Wilson bar at
the search's level, the level, and the interval) and a self-contained `boundary.html` into folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..analysis.stats import wilson_interval
from .figures import save, subplots
from .html import render_markdown, render_page
from .tables import fmt, rows_table

__all__ = ["write_boundary_report", "dense_cost"]


def dense_cost(x_lo: float, x_hi: float, width: float, n: int) -> int:
    """Trajectories of a dense grid of spacing `width` over [x_lo, x_hi], n at every point.

    >>> dense_cost(0.5, 4.5, 0.05, 800)
    64800
    """
    return (math.ceil((x_hi - x_lo) / width - 1e-9) + 1) * int(n)


def write_boundary_report(results, sweep, design, axis: str, outcome: str, folder) -> dict:
    """boundary.md, boundary.png and boundary.html in `folder`; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    x_lo, x_hi = min(sweep.axes[axis]), max(sweep.axes[axis])
    others = list(results[0].coords) if results else []
    rows, total, total_dense = [], 0, 0
    for found in results:
        dense = dense_cost(x_lo, x_hi, design.width, found.max_n) if found.max_n else None
        total += found.trajectories
        total_dense += dense or 0
        width = None if found.low is None else found.high - found.low
        rows.append([f"{found.coords[k]:g}" for k in others] + [
            fmt(found.estimate), "—" if found.low is None else f"[{fmt(found.low)}, {fmt(found.high)}]",
            fmt(width), str(found.points), str(found.max_n), str(found.trajectories),
            "—" if dense is None else str(dense),
            "—" if not dense or not found.trajectories else f"{dense / found.trajectories:.1f}", found.status])
    figure = plot_looks(results, design, axis, x_lo, x_hi, sweep, folder / "boundary.png")
    points = math.ceil((x_hi - x_lo) / design.width - 1e-9) + 1
    lines = [
        f"# tokensweep boundary search: {sweep.name}", "",
        f"- **where**: P({outcome}) crosses {design.level:g} along {axis} in [{x_lo:g}, {x_hi:g}]",
        f"- **requested width**: {design.width:g}, coverage {design.confidence:.0%} "
        f"(each look one-sided at {(1 - design.confidence) / design.looks:.2g}, {design.looks} looks)",
        f"- **model**: {sweep.model}" + (f" ({sweep.attention})" if getattr(sweep, "attention", None) else ""),
        f"- **T**: {sweep.time.T:g}, layers {sweep.time.layers}, seed {sweep.seed}", "",
        "## Intervals and cost against a dense grid", "",
        "Trajectories: every trajectory the cell's stores computed (one store per trajectory "
        f"count, points x count). Dense grid: "
        f"{points} points of spacing {design.width:g}, each at the search's final N (max N), the N that "
        "decides the two grid points next to the crossing: (ceil(range / width) + 1) x max N "
        "(module docstring; benchmarks/bench_boundary.py measures it for real).", "",
        rows_table(others + ["estimate", "interval", "width", "points", "max N", "trajectories",
                             "dense grid", "dense / search", "status"], rows), "",
        f"**In all**: {total} trajectories for the search against {total_dense} for dense grids"
        + (f" ({total_dense / total:.1f}x)." if total else "."), "",
        "## Looks", "",
        f"Each point the search looked at, at its largest N: the fraction with the outcome and its Wilson "
        f"interval at the search's per-look level ({design.z_level:.4g} two-sided); the interval found "
        "shaded, the level dashed.", "", "![looks](boundary.png)", ""]
    markdown = folder / "boundary.md"
    markdown.write_text("\n".join(lines))
    page = folder / "boundary.html"
    page.write_text(render_page("boundary.html", name=sweep.name, body=render_markdown("\n".join(lines), folder)),
                    encoding="utf-8")
    return {"report": str(markdown), "html": str(page), "looks": figure}


def plot_looks(results, design, axis: str, x_lo: float, x_hi: float, sweep, path) -> str:
    fig, axes = subplots(max(1, len(results)), width=5.0, height=3.6)
    for ax, found in zip(axes, results):
        last = {}
        for x, n, k, _ in found.looks:  # the largest N looked at per point
            if x not in last or n > last[x][0]:
                last[x] = (n, k)
        xs = np.array(sorted(last))
        if xs.size:
            n = np.array([last[x][0] for x in xs])
            k = np.array([last[x][1] for x in xs])
            lo, hi = wilson_interval(k, n, design.z_level)
            p = k / n
            ax.errorbar(xs, p, yerr=[p - lo, hi - p], fmt="o", ms=4, capsize=2, color="C0",
                        label="looks (largest N)")
        if found.low is not None:
            ax.axvspan(found.low, found.high, color="C1", alpha=0.25, label="interval")
            ax.axvline(found.estimate, color="C1", lw=1)
        ax.axhline(design.level, ls="--", color="k", lw=1, label=f"level {design.level:g}")
        where = ", ".join(f"{k} = {v:g}" for k, v in found.coords.items()) or "the cell"
        ax.set(xlabel=axis, ylabel="fraction with the outcome", xlim=(x_lo, x_hi), ylim=(-0.02, 1.02),
               title=where)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, f"Adaptive boundary search: {sweep.name}")
