r"""Antipodal statistics: cluster classes -> probabilities -> agreement with the model's closed form.

For every grid cell at one checkpoint t, the N counted trajectories (`stats.done_finite`) with a
class are split into antipodal (class 2), single cluster (1) and unresolved (0). The estimate
p = n_antipodal / N counts unresolved trajectories as "not (yet) antipodal"; their fraction is
reported alongside, so that a finite-T bias is visible (docs/models.md section 4).

The per-cell score z = (p - p_th) / sqrt(p_th (1 - p_th) / N) is standardised under the theory; it
is NaN where the theory is missing or degenerate (p_th in {0, 1}: the binomial has no spread, a
stray count is then judged by the interval test `agrees`) and on the boundary beta = beta_c(d),
which the T = infinity theory does not judge (`judged`, `BOUNDARY_WHY`: no finite T reaches its
limit there). Summing z^2 over the valid cells gives
a chi-square statistic with one degree of freedom per cell (`stats.chi_square_summary`).

The closed form is the cube's model's `antipodal_probability(sweep, cells)` (NaN where none
applies), or any callable passed as `theory`: the T = infinity limit. At the finite checkpoint t
the model's `finite_time_outcomes` (the backward equation of the limit diffusion,
`theory.finite`, docs/models.md section 4.5) gives the class probabilities at t: `theory_t`
(antipodal), `single_t` and `unresolved_t`, with `z_t` scored against `theory_t`. The band
[theory_t, theory_t + unresolved_t] is where the eventual P(antipodal) of the trajectories still
unresolved at t may take the estimate.

More than two tokens ([F26] Figs. 6-7): a trajectory has an antipodal pair at checkpoint t when
overlap_min(t) <= -1 + eps. `any_antipodal_table` gives p_any = n_any / N per cell and checkpoint
with its Wilson interval, and its persistence p_persist: the fraction whose antipodal pair, present
at t, is present at every later checkpoint as well (p_persist <= p_any).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .once import once
from .stats import cells_of, closed_form, done_finite, done_mask, flag, stored_spec, wilson_interval

__all__ = ["antipodal_table", "agrees", "judged", "any_antipodal_table", "CLASS_UNRESOLVED", "CLASS_SINGLE",
           "CLASS_ANTIPODAL", "BOUNDARY_WHY"]

CLASS_UNRESOLVED, CLASS_SINGLE, CLASS_ANTIPODAL = 0, 1, 2

# A cell on the boundary beta = beta_c(d) (the equality case cosh(2 beta) = d - 2 of docs/models.md
# 4.2) is not judged against the T = infinity closed form: there the pair ends single with
# probability 1, but it leaves the antipodal end only diffusively, so no finite T comes near that
# limit (quickstart's d = 3, beta = 0 at T = 30; +0.026 still at T = 200). Its theory at t (the
# backward equation) still judges it.
BOUNDARY_WHY = ("on β = β_c(d) the T = ∞ closed form is a limit that no finite T reaches (the pair leaves "
                "the antipodal end only diffusively, docs/models.md 4.2), so the cell is not judged against "
                "it; `theory (t)`, the probability at the checkpoint, still applies")
BOUNDARY_ATOL = 1e-9  # beta within this of beta_c(d): on the boundary (grids hit it exactly or not at all)

# The finite-t theory solves one backward equation per cell (~20-90 ms each): beyond this many
# cells a table leaves it out (NaN, and attrs["finite_t"] says why) unless finite_t="all".
FINITE_T_MAX_CELLS = 1000


@once
def antipodal_table(ds: xr.Dataset, t=None, level: float = 0.95, theory=None,
                    finite_t: bool | str = True) -> xr.Dataset:
    """Counts, probabilities, Wilson intervals, theory and z-scores per grid cell.

    ``ds`` holds ``cluster_class`` (int8 over grid dims, t, traj), optionally ``nonfinite`` (bool
    over grid dims, traj). ``t`` picks the checkpoint (nearest; default: the last one). ``theory``:
    cells -> P(antipodal) (default: the cube's model's closed form). ``finite_t``: add the model's
    finite-t class probabilities (theory_t, single_t, unresolved_t, z_t; NaN where none), for at
    most ``FINITE_T_MAX_CELLS`` cells unless ``finite_t="all"``. Works
    on lazy (dask) cubes: the reductions are xarray sums over ``traj``, computed once at the end.
    """
    if "cluster_class" not in ds:
        raise KeyError(f"the Dataset has no 'cluster_class' variable (it has {sorted(ds.data_vars)}): "
                       "antipodal_table needs the per-trajectory classes")
    cc = ds["cluster_class"]
    if "t" in cc.dims:
        cc = cc.isel(t=-1) if t is None else cc.sel(t=t, method="nearest")
    if "traj" not in cc.dims:
        raise ValueError(f"cluster_class has dims {cc.dims}, expected a 'traj' dimension")
    done = done_mask(ds)
    done = xr.ones_like(cc, dtype=bool) if done is None else done
    bad = (flag(ds["nonfinite"]) if "nonfinite" in ds else xr.zeros_like(cc, dtype=bool)) & done
    finite = done & ~bad
    counts = xr.Dataset({
        "n_antipodal": ((cc == CLASS_ANTIPODAL) & finite).sum("traj"),
        "n_single": ((cc == CLASS_SINGLE) & finite).sum("traj"),
        "n_unresolved": ((cc == CLASS_UNRESOLVED) & finite).sum("traj"),
        "n_nonfinite": bad.sum("traj"),
        "n_pending": (~done).sum("traj"),
    }).compute()
    table = counts.astype("int64")
    table["n_traj"] = table.n_antipodal + table.n_single + table.n_unresolved
    with np.errstate(invalid="ignore", divide="ignore"):
        table["p_antipodal"] = table.n_antipodal / table.n_traj.where(table.n_traj > 0)
    lo, hi = wilson_interval(table.n_antipodal, table.n_traj, level)
    table["lo"], table["hi"] = table.n_traj.copy(data=lo), table.n_traj.copy(data=hi)

    theory = closed_form(ds, "antipodal_probability") if theory is None else theory
    th = np.full(table.n_traj.shape, np.nan)
    if theory is not None:
        th = np.asarray(theory(cells_of(table, table.coords, table.n_traj)), float)
    table["theory"] = table.n_traj.copy(data=np.broadcast_to(th, table.n_traj.shape).copy())
    p_th, N = table.theory, table.n_traj
    table["on_boundary"] = table.n_traj.copy(data=_on_boundary(table, ds))
    # no z on the boundary either: the chi-square sums the judged cells only
    degenerate = (p_th <= 0) | (p_th >= 1) | p_th.isnull() | (N == 0) | table.on_boundary
    with np.errstate(invalid="ignore", divide="ignore"):
        table["z"] = ((table.p_antipodal - p_th) / np.sqrt(p_th * (1 - p_th) / N)).where(~degenerate)

    t_value = float(cc["t"]) if "t" in cc.coords else np.nan
    note = _add_finite_t(table, ds, t_value if finite_t else np.nan, finite_t == "all")
    table.attrs = {**ds.attrs, "level": level, "t": t_value, **({"finite_t": note} if note else {})}
    for name, text in [("n_traj", "finite trajectories with a class"), ("p_antipodal", "P(antipodal)"),
                       ("lo", f"Wilson {level:.0%} lower bound"), ("hi", f"Wilson {level:.0%} upper bound"),
                       ("theory", "closed-form P(antipodal) (t -> infinity)"), ("z", "standardised residual"),
                       ("theory_t", "P(antipodal) at t (backward equation)"),
                       ("single_t", "P(single cluster) at t (backward equation)"),
                       ("unresolved_t", "P(unresolved) at t (backward equation)"),
                       ("z_t", "standardised residual against theory_t"),
                       ("on_boundary", "beta = beta_c(d): not judged against theory")]:
        table[name].attrs.update(long_name=text, units="1")
    return table


def _on_boundary(table: xr.Dataset, ds: xr.Dataset) -> np.ndarray:
    """Cells with beta = beta_c(d), the model's `critical_beta` (all False without one)."""
    critical = closed_form(ds, "critical_beta")
    if critical is None or not {"beta", "d"} <= set(table.coords):
        return np.zeros(table.n_traj.shape, bool)
    cells = cells_of(table, ("beta", "d"), table.n_traj)
    by_d = {d: float(critical(d)) for d in np.unique(cells["d"])}
    beta_c = np.vectorize(by_d.__getitem__, otypes=[float])(cells["d"])
    return np.isclose(cells["beta"], beta_c, rtol=0, atol=BOUNDARY_ATOL)


def judged(table: xr.Dataset, column: str = "theory") -> xr.DataArray:
    """Cells a closed form judges: it has a value and the cell has data; for the T = infinity
    `theory`, a cell on the boundary beta = beta_c(d) is not judged (`BOUNDARY_WHY`)."""
    out = table[column].notnull() & (table.n_traj > 0)
    if column == "theory" and "on_boundary" in table:
        out = out & ~table.on_boundary
    return out


def _add_finite_t(table: xr.Dataset, ds: xr.Dataset, t: float, every_cell: bool) -> str:
    """theory_t, single_t, unresolved_t and z_t (NaN without a model form or a finite t, or
    beyond FINITE_T_MAX_CELLS cells unless every_cell): returns why they are NaN, or ""."""
    shape = table.n_traj.shape
    probs = np.full((3, *shape), np.nan)
    form = closed_form(ds, "finite_time_outcomes") if np.isfinite(t) else None
    note = ""
    if form is not None and table.n_traj.size > FINITE_T_MAX_CELLS and not every_cell:
        form, note = None, (f"not computed: {table.n_traj.size} cells, more than {FINITE_T_MAX_CELLS} "
                            "backward-equation solves of ~50 ms each; antipodal_table(ds, "
                            "finite_t='all') computes them")
    if form is not None:
        probs = np.broadcast_to(np.asarray(form(cells_of(table, table.coords, table.n_traj), t), float),
                                probs.shape)
    for name, values in zip(("theory_t", "single_t", "unresolved_t"), probs):
        table[name] = table.n_traj.copy(data=np.array(values, dtype=float))
    p_th, N = table.theory_t, table.n_traj
    degenerate = (p_th <= 0) | (p_th >= 1) | p_th.isnull() | (N == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["z_t"] = ((table.p_antipodal - p_th) / np.sqrt(p_th * (1 - p_th) / N)).where(~degenerate)
    return note


def agrees(table: xr.Dataset, level: float = 0.99, widen: float = 0.01,
           column: str = "theory") -> xr.DataArray:
    """True where the theory lies in the `level` Wilson interval widened by `widen` on each side.

    The widening absorbs the documented O(h) step-size bias of the discrete model (docs/models.md
    section 4: e.g. 0.035 at h = 0.01 against 0.042). False where there is no theory. `column`:
    "theory" (t -> infinity) or "theory_t" (at the table's checkpoint).
    """
    lo, hi = wilson_interval(table.n_antipodal, table.n_traj, level)
    theory = table[column]
    inside = (theory >= lo - widen) & (theory <= hi + widen)
    return inside & theory.notnull()


@once
def any_antipodal_table(ds: xr.Dataset, eps: float | None = None, level: float = 0.95) -> xr.Dataset:
    """P(at least one antipodal pair) per grid cell and checkpoint, with persistence over t.

    A trajectory counts at checkpoint t when overlap_min(t) <= -1 + eps (eps: the spec's, default
    1e-3); it persists from t when it counts at every checkpoint >= t. Returns a Dataset over
    (grid..., t): n_traj, n_any, p_any, lo, hi (Wilson, `level`), n_persist, p_persist.

    >>> ds = xr.Dataset({"overlap_min": (("n", "t", "traj"), [[[-1.0, -1.0, 0.2], [-1.0, 0.9, -1.0]]])},
    ...                 coords={"n": [4], "t": [1.0, 2.0]})
    >>> tab = any_antipodal_table(ds)
    >>> tab.n_any.values.tolist(), tab.n_persist.values.tolist()
    ([[2, 2]], [[1, 2]])
    """
    if "overlap_min" not in ds or "t" not in ds["overlap_min"].dims:
        raise KeyError("any_antipodal_table needs 'overlap_min' over (grid..., t, traj); "
                       f"the Dataset has {sorted(ds.data_vars)}")
    sweep = stored_spec(ds)
    if eps is None:  # the spec's; a cube written by hand may carry it as an attribute
        eps = sweep.eps if sweep is not None else ds.attrs.get("eps", 1e-3)
    eps = float(eps)
    om = ds["overlap_min"]
    keep = done_finite(ds, om.isel(t=0, drop=True))
    hit = (om <= -1 + eps) & keep
    # persistent from t: hit at t and at every later checkpoint (reverse cumulative "and")
    persist = hit.isel(t=slice(None, None, -1)).cumprod("t").isel(t=slice(None, None, -1)).astype(bool)
    table = xr.Dataset({
        "n_traj": keep.sum("traj").broadcast_like(hit.isel(traj=0, drop=True)),
        "n_any": hit.sum("traj"),
        "n_persist": persist.sum("traj"),
    }).compute().astype("int64")
    with np.errstate(invalid="ignore", divide="ignore"):
        valid = table.n_traj.where(table.n_traj > 0)
        table["p_any"] = table.n_any / valid
        table["p_persist"] = table.n_persist / valid
    lo, hi = wilson_interval(table.n_any, table.n_traj, level)
    table["lo"], table["hi"] = table.n_any.copy(data=lo), table.n_any.copy(data=hi)
    table.attrs = {**ds.attrs, "level": level, "eps": eps}
    for name, text in [("n_traj", "finite trajectories of done partitions"),
                       ("p_any", "P(at least one antipodal pair)"),
                       ("p_persist", "P(antipodal pair present from t to the last checkpoint)"),
                       ("lo", f"Wilson {level:.0%} lower bound"), ("hi", f"Wilson {level:.0%} upper bound")]:
        table[name].attrs.update(long_name=text, units="1")
    return table
