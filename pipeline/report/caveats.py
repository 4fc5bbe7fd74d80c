r"""What a reader must know before trusting a report's numbers: the warnings at the top of the page.

* **Incomplete cube**: trajectories of partitions not done are left out of every count; the
  statistics are then those of the done part (cells done = cells whose every trajectory is done).
* **Unresolved trajectories**: at the checkpoint read, a trajectory neither antipodal nor single
  cluster is counted as "not antipodal", so the T = infinity probability of a cell lies in
  [p, p + u], u the cell's unresolved fraction. That bias matters once it is comparable to the
  sampling error: the warning names the cells where u exceeds the half-width of the Wilson
  interval, (hi - lo) / 2, and the largest u. Below that the finite T cannot move a verdict by
  more than the interval already allows.
* **Non-finite trajectories**: left out of every statistic.

`unresolved_fraction` is reported whether or not it warns (the summary of the index shows it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..analysis.stats import done_mask, flag, pending_count

__all__ = ["Caveat", "caveats", "cells_done", "unresolved_fraction"]


@dataclass(frozen=True)
class Caveat:
    kind: str  # "incomplete", "unresolved", "nonfinite"
    title: str
    text: str

    @property
    def markdown(self) -> str:
        return f"> **Warning: {self.title}.** {self.text}"


def cells_done(ds: xr.Dataset) -> tuple[int, int]:
    """(cells whose every trajectory is done, cells) over the grid axes."""
    done = done_mask(ds)
    if done is None:
        ref = ds["nonfinite"] if "nonfinite" in ds else next(iter(ds.data_vars.values()))
        cells = int(np.prod([ref.sizes[d] for d in ref.dims if d not in ("traj", "t", "block")]))
        return cells, cells
    every = done.all("traj")
    return int(every.sum()), int(every.size)


def unresolved_fraction(table: xr.Dataset | None) -> float:
    """Unresolved trajectories over all counted ones of an antipodal table (NaN without data)."""
    if table is None or int(table.n_traj.sum()) == 0:
        return float("nan")
    return float(table.n_unresolved.sum()) / float(table.n_traj.sum())


def caveats(ds: xr.Dataset, table: xr.Dataset | None) -> list[Caveat]:
    """The warnings of a cube; `table`: its antipodal table (analysis.antipodal), or None."""
    found = []
    pending = pending_count(ds)
    if pending:
        done, cells = cells_done(ds)
        found.append(Caveat(
            "incomplete", "incomplete cube",
            f"{pending} trajectories belong to partitions not done and are left out of every count "
            f"below; {done} of {cells} cells are complete. Finish the sweep with `tokensweep rerun STORE`."))
    if table is not None and "n_unresolved" in table:
        with np.errstate(invalid="ignore", divide="ignore"):
            u = table.n_unresolved / table.n_traj.where(table.n_traj > 0)
        biased = u > (table.hi - table.lo) / 2
        if bool(biased.any()):
            t = table.attrs.get("t", np.nan)
            found.append(Caveat(
                "unresolved", "unresolved trajectories may bias the comparison",
                f"At t = {t:g}, {int(biased.sum())} of {int(u.notnull().sum())} cells have an unresolved "
                f"fraction larger than the half-width of their interval (largest: {float(u.max()):.3f}; "
                f"overall {unresolved_fraction(table):.3f}). Unresolved trajectories count as not "
                "antipodal, so P(antipodal) at T = infinity may be higher by up to that fraction: "
                "a longer T (time.T) resolves them."))
    n_bad = 0
    if "nonfinite" in ds:
        bad, done = flag(ds["nonfinite"]), done_mask(ds)
        n_bad = int((bad if done is None else bad & done).sum())
    if n_bad:
        found.append(Caveat("nonfinite", f"{n_bad} trajectories became non-finite",
                            "they are left out of every statistic."))
    return found
