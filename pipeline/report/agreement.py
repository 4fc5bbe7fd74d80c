r"""The agreement of a cube with its model's closed form, in one summary: how many cells agree,
the chi-square of the z-scores with its p-value, and the cells outside their interval.

Read from the analysis's antipodal table (`analysis.antipodal.antipodal_table`): whatever columns
the analysis adds, the summary reads only `theory`, `z`, the counts and the interval. A cell is
judged where it has a theory and data and is not on the boundary beta = beta_c(d), where no finite T
reaches the T = infinity limit (`analysis.antipodal.judged`; such a cell is counted apart and the
summary says why); it agrees when the theory lies in the `AGREE_LEVEL` Wilson
interval widened by `AGREE_WIDEN` (the table's `agrees` column, `report.antipodal`). The z-scores
z = (p - p_th) / sqrt(p_th (1 - p_th) / N) of the valid cells give chi^2 = sum z^2 with one degree
of freedom per cell; p-value = P(chi^2_dof >= chi^2) under the theory (scipy.stats.chi2.sf).

A cube without `cluster_class`, or whose model has no closed form for these options, has no
summary (None): its sections carry their own comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from ..analysis.antipodal import BOUNDARY_WHY, agrees, antipodal_table, judged
from ..analysis.once import once
from ..analysis.stats import chi_square_summary, wilson_interval
from .antipodal import AGREE_LEVEL, AGREE_WIDEN
from .tables import fmt, row_order

__all__ = ["Agreement", "agreement_summary", "agreement_table"]


@dataclass
class Agreement:
    """judged cells, agreeing cells, chi-square (chi2, dof, p_value) and the cells outside."""

    judged: int
    agreed: int
    chi2: float
    dof: int
    p_value: float
    head: list[str] = field(default_factory=list)  # columns of `outside`
    outside: list[list[str]] = field(default_factory=list)
    boundary: list[str] = field(default_factory=list)  # cells on beta = beta_c(d), not judged: "d = 3, beta = 0"

    @property
    def counts(self) -> str:
        """'k of n cells agree', or with boundary cells 'k of n judged cells agree; m boundary cell(s)
        not judged'."""
        if not self.boundary:
            return f"{self.agreed} of {self.judged} cells agree"
        many = len(self.boundary) > 1
        return (f"{self.agreed} of {self.judged} judged cells agree; {len(self.boundary)} boundary "
                f"cell{'s' if many else ''} not judged ({'; '.join(self.boundary)})")

    @property
    def why(self) -> str:
        """Why a boundary cell is not judged ('' without one)."""
        return f"Boundary cells: {BOUNDARY_WHY}." if self.boundary else ""

    @property
    def text(self) -> str:
        """One line: 'k of n cells agree; chi^2 = ... over dof cells, p = ...'."""
        return f"{self.counts}; chi² = {self.chi2:.2f} over {self.dof} cells, p = {fmt(self.p_value, 3)}"

    def as_dict(self) -> dict:
        return {"judged": self.judged, "agreed": self.agreed, "boundary": len(self.boundary),
                "chi2": self.chi2, "dof": self.dof,
                "p_value": None if not np.isfinite(self.p_value) else self.p_value, "text": self.text}


@once
def agreement_table(ds: xr.Dataset, level: float) -> xr.Dataset | None:
    """The antipodal table with its `agrees` column; None without classes or a closed form."""
    if "cluster_class" not in ds:
        return None
    table = antipodal_table(ds, level=level)
    if not bool(table.theory.notnull().any()):
        return None
    table["agrees"] = agrees(table, AGREE_LEVEL, AGREE_WIDEN)
    return table


def agreement_summary(table: xr.Dataset | None) -> Agreement | None:
    """The summary of an agreement table (see the module docstring); None for None."""
    if table is None:
        return None
    judged_ = judged(table)
    chi = chi_square_summary(table)
    dims = row_order(table.n_traj.dims)
    flat = table.transpose(*dims)
    head = dims + ["N", "p", f"{AGREE_LEVEL:.0%} Wilson ± {AGREE_WIDEN}", "theory", "z"]
    lo, hi = wilson_interval(flat.n_antipodal.values, flat.n_traj.values, AGREE_LEVEL)
    outside = []
    for idx in zip(*np.nonzero((judged_ & ~table.agrees).transpose(*dims).values)):
        cell = flat[dict(zip(dims, idx))]
        outside.append([f"{cell[d].values.item():g}" for d in dims] + [
            str(int(cell.n_traj)), fmt(float(cell.p_antipodal)),
            f"[{fmt(max(lo[idx] - AGREE_WIDEN, 0.0))}, {fmt(min(hi[idx] + AGREE_WIDEN, 1.0))}]",
            fmt(float(cell.theory)),
            fmt(float(cell.z), 2)])
    on_boundary = table.theory.notnull() & (table.n_traj > 0) & table.on_boundary
    boundary = [", ".join(f"{d} = {flat[d].values[i]:g}" for d, i in zip(dims, idx))
                for idx in zip(*np.nonzero(on_boundary.transpose(*dims).values))]
    return Agreement(int(judged_.sum()), int((judged_ & table.agrees).sum()), chi["chi2"], chi["dof"],
                     chi["p_value"], head, outside, boundary)
