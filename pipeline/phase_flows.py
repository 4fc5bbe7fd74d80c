r"""Statistics of the deterministic flows: sphere_flow [GLPR-P, RST] and euclidean_flow [GLPR-E].

Only trajectories of done partitions that stayed finite are counted (`phase.done_finite`).

Sphere flow (models.md section 2), all per grid cell:

* `frac_close_mean`: the fraction of close pairs (<x_i, x_j> >= 1 - delta) averaged over
  trajectories, over (grid..., t): the colour of [GLPR-P] Fig. 3.
* `crossing_table`: the first time t_cross at which that mean reaches `level` (linear interpolation
  between checkpoints), against t*(beta) of `theory.t_star`: the time at which the equiangular
  overlap gamma(t) reaches 1 - delta.  For random starts in large d the tokens are nearly orthogonal,
  so the crossing sits near t* (models.md: sup |<x_i, x_j> - gamma| ~ 2.5 / sqrt(d)).
* `equiangular_table`: for the equiangular start every overlap is gamma(t) exactly, so overlap_min
  and overlap_max must both track `theory.equiangular_gamma`.
* `hemisphere_table`: the fraction of trajectories whose tokens lie in an open hemisphere at the
  first checkpoint, against Wendel's probability for n uniform points on S^{d-1} (1 for the
  hemisphere and equiangular starts).  Wendel is a statement about t = 0; with full attention and
  V = I the property is kept forward in time, and a start outside can still enter one, so at a
  later first checkpoint the fraction may only exceed it (by little when that checkpoint is early).

The closed forms need Q = K = V = I, no time-varying P(t) and non-causal SA or USA.  Time units:
with `heads` identical heads the field is `heads` times larger, with `rst_scaling` it is divided by
sqrt(d); so a theory time t_th is simulated at t = t_th * sqrt(d)^rst / heads (`time_factor`).

Euclidean flow (models.md section 3): `euclidean_table` summarises the per-trajectory geometry that
the registry stores (pipeline/models.py): cluster count and spread at T, whether the cluster centres
are hull vertices, the number of psi_1 hyperplanes, the rank and Booleanness of P(T).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from . import theory
from .phase import _done_mask, done_finite, wilson_interval

__all__ = ["spec_of", "closed_form_attention", "time_factor", "frac_close_mean", "crossing_time",
           "crossing_table", "equiangular_table", "cluster_count_mean", "hemisphere_table",
           "euclidean_table", "grid_dims"]

HEMISPHERE_LEVEL = 0.99


def spec_of(ds: xr.Dataset) -> dict:
    """The spec a cube was written with (attrs), as plain data; {} when it has none."""
    try:
        return json.loads(ds.attrs["tokensweep_spec"])
    except (KeyError, TypeError, ValueError):
        return {}


def grid_dims(ds: xr.Dataset) -> list[str]:
    """The grid axes of a cube: the dims of `nonfinite` (grid..., traj) other than traj."""
    ref = ds["nonfinite"] if "nonfinite" in ds else next(iter(ds.data_vars.values()))
    return [d for d in ref.dims if d not in ("traj", "t", "block")]


def closed_form_attention(spec: dict) -> str | None:
    """'sa' or 'usa' when the equiangular closed forms apply to this spec, else None."""
    attention = spec.get("attention", "sa")
    fixed = (spec.get("qk", "identity") == "identity" and spec.get("value", "identity") == "identity"
             and spec.get("time_varying") is None and not spec.get("matrices"))
    return attention if fixed and attention in ("sa", "usa") else None


def time_factor(spec: dict, d) -> float:
    """Simulated time per unit of theory time: sqrt(d) with rst_scaling, divided by heads."""
    return (np.sqrt(float(d)) if spec.get("rst_scaling") else 1.0) / float(spec.get("heads", 1))


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
    """Mean number of clusters (overlap >= 1 - eps components) over trajectories, (grid..., t)."""
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


def crossing_table(ds: xr.Dataset, level: float = 0.5) -> xr.Dataset:
    """t_cross (mean frac_close reaches level) and t_star (theory, simulated time) per cell."""
    spec = spec_of(ds)
    attention = closed_form_attention(spec)
    delta = float(spec.get("delta", 1e-3))
    mean = frac_close_mean(ds)
    dims = [d for d in mean.dims if d != "t"]
    cross = xr.apply_ufunc(crossing_time, mean, mean.t, kwargs={"level": level},
                           input_core_dims=[["t"], ["t"]], vectorize=True)
    star = xr.full_like(cross, np.nan, dtype=float)
    if attention is not None:
        for idx in np.ndindex(cross.shape):
            cell = {d: mean[d].values[i] for d, i in zip(dims, idx)}
            star[idx] = float(theory.t_star(cell["beta"], int(cell["n"]), delta, attention)) \
                * time_factor(spec, cell["d"])
    table = xr.Dataset({"t_cross": cross, "t_star": star})
    table.attrs = {"level": level, "delta": delta}
    return table


def equiangular_table(ds: xr.Dataset) -> xr.Dataset | None:
    """gamma(t) against the overlaps of an equiangular start, over (grid..., t); None if n/a.

    dev = max over counted trajectories of max(|overlap_min - gamma|, |overlap_max - gamma|).
    """
    spec = spec_of(ds)
    attention = closed_form_attention(spec)
    if spec.get("init") != "equiangular" or attention is None:
        return None
    omin, omax = ds["overlap_min"], ds["overlap_max"]
    keep = done_finite(ds, omin.isel(t=0, drop=True))
    gamma = xr.zeros_like(omin.isel(traj=0, drop=True), dtype=float).compute()
    dims = [d for d in gamma.dims if d != "t"]
    for idx in np.ndindex(*[gamma.sizes[d] for d in dims]):
        cell = {d: gamma[d].values[i] for d, i in zip(dims, idx)}
        t_th = gamma.t.values / time_factor(spec, cell["d"])
        gamma.loc[cell] = theory.equiangular_gamma(t_th, float(cell["beta"]), int(cell["n"]), attention)
    dev = np.maximum(abs(omin - gamma), abs(omax - gamma)).where(keep).max("traj").compute()
    return xr.Dataset({"gamma": gamma, "overlap_min": omin.where(keep).mean("traj").compute(),
                       "overlap_max": omax.where(keep).mean("traj").compute(), "dev": dev})


def _hemisphere_theory(init: str, n, d):
    if init == "uniform_sphere":
        return theory.wendel_probability(n, d)
    return np.ones(np.broadcast(n, d).shape)  # a half sphere or an orthonormal frame: always


def hemisphere_table(ds: xr.Dataset, level: float = 0.95) -> xr.Dataset:
    """Open-hemisphere fraction at the first checkpoint vs Wendel, per cell (grid...)."""
    spec = spec_of(ds)
    first = ds["in_hemisphere"].isel(t=0)
    keep = done_finite(ds, first)
    table = xr.Dataset({"n_traj": keep.sum("traj"), "n_hemi": (first & keep).sum("traj")}).compute()
    table = table.astype("int64")
    with np.errstate(invalid="ignore", divide="ignore"):
        table["p_hemi"] = table.n_hemi / table.n_traj.where(table.n_traj > 0)
    lo, hi = wilson_interval(table.n_hemi, table.n_traj, level)
    table["lo"], table["hi"] = table.n_hemi.copy(data=lo), table.n_hemi.copy(data=hi)
    n, d = (table[name].broadcast_like(table.n_traj) for name in ("n", "d"))
    wendel = _hemisphere_theory(spec.get("init", "uniform_sphere"), n.values, d.values)
    table["theory"] = table.n_traj.copy(data=np.asarray(wendel, float))
    lo99, hi99 = wilson_interval(table.n_hemi, table.n_traj, HEMISPHERE_LEVEL)
    # Wendel's law is for the start; after it, full attention with V = I keeps tokens inside a
    # hemisphere and others may enter one, so later the fraction may only exceed it (one-sided).
    h = float(ds.attrs.get("h", np.nan))  # unknown step (not a tokensweep cube): two-sided
    at_start = not float(first["t"]) > h * (1 + 1e-9)
    below = table.theory <= hi99 + 1e-12
    table["agrees"] = below & (table.theory >= lo99 - 1e-12) if at_start else below
    table.attrs = {"t": float(first["t"]), "level": level, "two_sided": at_start}
    return table


def _done_nonfinite(ds: xr.Dataset, like: xr.DataArray) -> xr.DataArray:
    done = _done_mask(ds)
    done = xr.ones_like(like, dtype=bool) if done is None else done
    return ds["nonfinite"] & done


def euclidean_table(ds: xr.Dataset) -> xr.Dataset:
    """Per cell: geometric outcomes at T of the unnormalised flow, over counted trajectories."""
    last = ds["n_clusters"].isel(t=-1)
    keep = done_finite(ds, last)
    psi = ds["n_psi1_values"].where(keep & (ds["n_psi1_values"] >= 0))
    t_end = float(ds["t"].values[-1])
    table = xr.Dataset({
        "n_traj": keep.sum("traj"),
        "n_nonfinite": _done_nonfinite(ds, last).sum("traj"),
        "clusters_mean": last.where(keep).mean("traj"),
        "clusters_max": last.where(keep).max("traj"),
        "p_on_hull": ds["centres_on_hull"].where(keep).mean("traj"),
        "psi1_mean": psi.mean("traj"),
        "p_psi1_le3": (psi <= 3).where(psi.notnull()).mean("traj"),
        "rank_mean": ds["attention_rank"].where(keep).mean("traj"),
        "rank_max": ds["attention_rank"].where(keep).max("traj"),
        "booleanness_max": ds["booleanness"].where(keep).max("traj"),
        "spread_mean": ds["spread"].isel(t=-1).where(keep).mean("traj"),
    }).compute()
    table["sqrtT_spread"] = np.sqrt(t_end) * table.spread_mean
    table.attrs = {"T": t_end}
    return table
