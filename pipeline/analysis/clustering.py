r"""Clustering over time in the deterministic flows: merged pairs, cluster counts, hemispheres.

Only counted trajectories (`stats.done_finite`) enter. Per grid cell:

* `frac_close_mean`: the fraction of close pairs (<x_i, x_j> >= 1 - delta) averaged over
  trajectories, over (grid..., t): the colour of [GLPR-P] Fig. 3.
* `crossing_table`: the first time t_cross at which that mean reaches `level` (linear interpolation
  between checkpoints), against the model's `merge_time` t*(beta): for the sphere flow the time at
  which the equiangular overlap gamma(t) reaches 1 - delta. For random starts in large d the tokens
  are nearly orthogonal, so the crossing sits near t* (docs/models.md section 2).
* `equiangular_table`: for an equiangular start every overlap is gamma(t) exactly, so overlap_min
  and overlap_max must both track the model's `equiangular_overlap`.
* `hemisphere_table`: the fraction of trajectories whose tokens lie in an open hemisphere at the
  first checkpoint, against the model's `hemisphere_probability` (Wendel's for uniform starts).
  Wendel is a statement about t = 0; with full attention and V = I the property is kept forward in
  time, and a start outside can still enter one, so at a later first checkpoint the fraction may
  only exceed it.
* `cluster_count_mean`: mean number of clusters over (grid..., t).
* `settle_times`: per trajectory, the checkpoint after the cluster count's last change (the
  plateau statistic of [F26] App. D.2: a metastable flow changes its count late).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .stats import closed_form, done_finite, flag, wilson_interval

__all__ = ["frac_close_mean", "cluster_count_mean", "settle_times", "crossing_time", "crossing_table",
           "equiangular_table", "hemisphere_table", "HEMISPHERE_LEVEL"]

HEMISPHERE_LEVEL = 0.99


def _mean_over_traj(ds: xr.Dataset, name: str) -> xr.DataArray:
    var = ds[name]
    keep = done_finite(ds, var.isel(t=0, drop=True))
    return var.where(keep).mean("traj").compute()


def frac_close_mean(ds: xr.Dataset) -> xr.DataArray:
    """Mean of frac_close over counted trajectories, dims (grid..., t)."""
    out = _mean_over_traj(ds, "frac_close")
    out.attrs.update(long_name="mean fraction of close pairs", units="1")
    return out


def cluster_count_mean(ds: xr.Dataset) -> xr.DataArray:
    """Mean number of clusters over counted trajectories, (grid..., t)."""
    out = _mean_over_traj(ds, "n_clusters")
    out.attrs.update(long_name="mean number of clusters", units="1")
    return out


def crossing_time(values, times, level: float = 0.5) -> float:
    """First time at which values (over times) reaches level, linearly interpolated; NaN if never.

    >>> crossing_time([0.0, 0.2, 0.6, 1.0], [1.0, 2.0, 3.0, 4.0])
    2.75
    >>> crossing_time([0.7, 1.0], [1.0, 2.0]), bool(np.isnan(crossing_time([0.1, 0.2], [1.0, 2.0])))
    (1.0, True)
    """
    v, t = np.asarray(values, float), np.asarray(times, float)
    above = np.flatnonzero(v >= level)
    if above.size == 0:
        return float("nan")
    k = int(above[0])
    if k == 0:
        return float(t[0])
    return float(t[k - 1] + (level - v[k - 1]) * (t[k] - t[k - 1]) / (v[k] - v[k - 1]))


def _cells(da: xr.DataArray, dims):
    """{dim: value} for every cell of `da` over `dims`, with its index tuple."""
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        yield idx, {d: da[d].values[i] for d, i in zip(dims, idx)}


def crossing_table(ds: xr.Dataset, level: float = 0.5, merge_time=None) -> xr.Dataset:
    """t_cross (mean frac_close reaches level) and t_star (the model's merge_time) per cell."""
    merge_time = closed_form(ds, "merge_time") if merge_time is None else merge_time
    mean = frac_close_mean(ds)
    dims = [d for d in mean.dims if d != "t"]
    cross = xr.apply_ufunc(crossing_time, mean, mean.t, kwargs={"level": level},
                           input_core_dims=[["t"], ["t"]], vectorize=True)
    star = xr.full_like(cross, np.nan, dtype=float)
    if merge_time is not None:
        for idx, cell in _cells(cross, dims):
            value = merge_time(cell)
            star[idx] = np.nan if value is None else float(value)
    table = xr.Dataset({"t_cross": cross, "t_star": star})
    table.attrs = {"level": level}
    return table


def equiangular_table(ds: xr.Dataset, overlap=None) -> xr.Dataset | None:
    """gamma(t) against the overlaps of an equiangular start, over (grid..., t); None if n/a.

    `overlap(times, cell)`: the closed-form overlap at `times` (default: the model's
    `equiangular_overlap`, which answers None where it does not apply). dev = max over counted
    trajectories of max(|overlap_min - gamma|, |overlap_max - gamma|).
    """
    overlap = closed_form(ds, "equiangular_overlap") if overlap is None else overlap
    if overlap is None:
        return None
    omin, omax = ds["overlap_min"], ds["overlap_max"]
    keep = done_finite(ds, omin.isel(t=0, drop=True))
    gamma = xr.zeros_like(omin.isel(traj=0, drop=True), dtype=float).compute()
    dims = [d for d in gamma.dims if d != "t"]
    for _, cell in _cells(gamma, dims):
        values = overlap(gamma.t.values, cell)
        if values is None:
            return None
        gamma.loc[cell] = values
    dev = np.maximum(abs(omin - gamma), abs(omax - gamma)).where(keep).max("traj").compute()
    return xr.Dataset({"gamma": gamma, "overlap_min": omin.where(keep).mean("traj").compute(),
                       "overlap_max": omax.where(keep).mean("traj").compute(), "dev": dev})


def hemisphere_table(ds: xr.Dataset, level: float = 0.95, probability=None) -> xr.Dataset:
    """Open-hemisphere fraction at the first checkpoint vs the model's probability, per cell."""
    probability = closed_form(ds, "hemisphere_probability") if probability is None else probability
    first = flag(ds["in_hemisphere"].isel(t=0))
    keep = done_finite(ds, first)
    table = xr.Dataset({"n_traj": keep.sum("traj"), "n_hemi": (first & keep).sum("traj")}).compute()
    table = table.astype("int64")
    with np.errstate(invalid="ignore", divide="ignore"):
        table["p_hemi"] = table.n_hemi / table.n_traj.where(table.n_traj > 0)
    lo, hi = wilson_interval(table.n_hemi, table.n_traj, level)
    table["lo"], table["hi"] = table.n_hemi.copy(data=lo), table.n_hemi.copy(data=hi)
    n, d = (table[name].broadcast_like(table.n_traj) for name in ("n", "d"))
    theory = np.full(table.n_traj.shape, np.nan) if probability is None else probability(n.values, d.values)
    table["theory"] = table.n_traj.copy(data=np.asarray(theory, float))
    lo99, hi99 = wilson_interval(table.n_hemi, table.n_traj, HEMISPHERE_LEVEL)
    # the probability is for the start; after it, full attention with V = I keeps tokens inside a
    # hemisphere and others may enter one, so later the fraction may only exceed it (one-sided)
    h = float(ds.attrs.get("h", np.nan))  # unknown step (not a tokensweep cube): two-sided
    at_start = not float(first["t"]) > h * (1 + 1e-9)
    below = table.theory <= hi99 + 1e-12
    table["agrees"] = below & (table.theory >= lo99 - 1e-12) if at_start else below
    table.attrs = {"t": float(first["t"]), "level": level, "two_sided": at_start}
    return table


def settle_times(counts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per trajectory (rows of `counts`, cluster counts over the checkpoints `t`), the first
    checkpoint from which the count no longer changes (t[0] where it never changes).

    >>> settle_times(np.array([[3, 2, 2, 2], [3, 3, 3, 1], [1, 1, 1, 1]]), np.array([1.0, 2, 3, 4]))
    array([2., 4., 1.])
    """
    changed = np.diff(counts, axis=1) != 0  # between t[j] and t[j + 1]
    last = np.where(changed.any(axis=1), changed.shape[1] - np.argmax(changed[:, ::-1], axis=1), 0)
    return np.asarray(t, float)[last]
