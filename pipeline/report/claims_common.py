r"""Checks several papers' claims share, as factories of ``(ReportInput) -> Claim`` (`claims`):

* `closed_form`: P(antipodal) per cell on the model's T = infinity closed form (the agreement table
  the page already shows: each judged cell's theory inside its 99 % Wilson interval widened by the
  discrete model's O(h) allowance, boundary cells beta = beta_c(d) left out);
* `finite_time`: the same at every checkpoint against the backward equation (`horizon.horizon_table`);
* `per_trajectory`: a statement of every trajectory, from a function of the counted trajectories'
  arrays (`trajectories`);
* `fixed`: a claim the cube cannot judge, with why.

`trajectories(ds, name, sel)` gives a stored output of the counted trajectories (done, finite) as one
array (trajectory, [t], ...), the cells of `sel` (or all) stacked.
"""

from __future__ import annotations

import numpy as np

from ..analysis.antipodal import judged
from ..analysis.stats import done_finite
from ..plugin import ReportInput
from .agreement import agreement_table
from .antipodal import AGREE_LEVEL, AGREE_WIDEN
from .claims import Claim, cells_claim, every_trajectory, not_checked
from .horizon import horizon_table
from .tables import row_order

__all__ = ["closed_form", "finite_time", "per_trajectory", "fixed", "trajectories", "cell_labels"]


def trajectories(ds, name: str, sel: dict | None = None) -> np.ndarray:
    """The counted trajectories of output `name` in the cells of `sel` (all cells without): an
    array (trajectory, then the output's t and trailing dims)."""
    var = ds[name]
    like = ds["nonfinite"] if "nonfinite" in ds else var.isel(t=0, drop=True)
    keep = done_finite(ds, like)
    if sel:
        var, keep = var.sel(sel), keep.sel(sel)
    cells = [d for d in keep.dims if d != "traj"]
    rest = [d for d in var.dims if d not in keep.dims]
    stacked = var.transpose(*cells, "traj", *rest).values.reshape(-1, *[var.sizes[d] for d in rest])
    return stacked[keep.transpose(*cells, "traj").values.ravel()]


def cell_labels(da, dims) -> list[str]:
    """'beta = 1, d = 3' per cell of `da` over `dims`, in C order."""
    labels = []
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        labels.append(", ".join(f"{d} = {da[d].values[i]:g}" for d, i in zip(dims, idx)))
    return labels


def closed_form(claim: str, source: str, expected: str):
    """P(antipodal) per cell on the model's closed form (module docstring)."""
    def check(report: ReportInput) -> Claim:
        table = agreement_table(report.ds, report.level)
        if table is None:
            return Claim(claim, source, "no classes or no closed form", expected,
                         not_checked("the cube has no two-token classes with a closed form"))
        dims = row_order(table.n_traj.dims)
        table = table.transpose(*dims)
        use = judged(table).values.ravel()
        labels = np.array(cell_labels(table.n_traj, dims))[use]
        boundary = int((table.on_boundary & (table.n_traj > 0)).sum())
        extra = (f"within the {AGREE_LEVEL:.0%} Wilson interval ± {AGREE_WIDEN} (O(h) allowance)"
                 + (f"; {boundary} boundary cell(s) β = β_c(d) not judged" if boundary else ""))
        return cells_claim(claim, source, expected, table.agrees.values.ravel()[use], labels, "cells", extra)
    return check


def finite_time(claim: str, source: str, expected: str):
    """P(antipodal) at every (cell, checkpoint) on the backward equation's value at t."""
    def check(report: ReportInput) -> Claim:
        table = horizon_table(report.ds, report.level)
        if table is None:
            return Claim(claim, source, "no finite-T theory", expected,
                         not_checked("no backward equation for this cube, or over 64 cells"))
        from ..analysis.antipodal import agrees

        ok = agrees(table, AGREE_LEVEL, AGREE_WIDEN, column="theory_t")
        use = (table.theory_t.notnull() & (table.n_traj > 0))
        dims = list(table.n_traj.dims)
        labels = np.array(cell_labels(table.n_traj, dims))[use.values.ravel()]
        return cells_claim(claim, source, expected, ok.values.ravel()[use.values.ravel()], labels,
                           "(cell, t) pairs", f"within the {AGREE_LEVEL:.0%} Wilson interval ± {AGREE_WIDEN}")
    return check


def per_trajectory(claim: str, source: str, expected: str, name: str, judge, what: str,
                   sel: dict | None = None, largest_is_worst: bool = True, worst_fmt=None):
    """Judge `judge(values) -> (ok, worst)` on the counted trajectories of output `name` (each row
    one trajectory); not checked where the cube lacks the output."""
    def check(report: ReportInput) -> Claim:
        if name not in report.ds:
            return Claim(claim, source, f"no `{name}` in the cube", expected,
                         not_checked(f"the cube does not record `{name}`"))
        ok, worst = judge(trajectories(report.ds, name, sel))
        kwargs = {} if worst_fmt is None else {"worst_fmt": worst_fmt}
        return every_trajectory(claim, source, expected, ok, worst, what,
                                largest_is_worst=largest_is_worst, **kwargs)
    return check


def fixed(claim: str, source: str, expected: str, why: str, measured: str = "—"):
    """A claim this cube cannot judge."""
    def check(report: ReportInput) -> Claim:
        return Claim(claim, source, measured, expected, not_checked(why))
    return check
