r"""Pairwise overlaps over time against the sphere flow's one-parameter closed forms.

Only counted trajectories (`stats.done_finite`) enter. Per grid cell:

* `tracking_table` ([GLPR-P] Thm 6.9): from the recorded `overlap_hist`, the mean and the
  quantiles of the overlaps pooled over the n (n - 1) / 2 pairs and the trajectories, against the
  model's `random_start_overlap` gamma(t). For d >> n uniform starts are nearly orthogonal
  (overlaps ~ N(0, 1/d)) and every overlap stays within O(sqrt(log d / d)) of gamma(t), so the
  band narrows and the mean closes in on gamma as d grows. Quantiles interpolate linearly inside
  a bin, the mean takes bin centres: both are exact to half a bin width, 1 / record_bins.
* `token2_table` ([RST] causal V = I): overlap_min of a two-token cube is <x_1, x_2>, and token 1
  does not move, so it is a(t) = <x_1(0), x_2(t)>, the model's `token2_overlap`.
* `sharp_table` ([GLPR-P] section 9.1, V = -I): overlap_min and overlap_max at the last two
  checkpoints against the extreme overlaps of the model's `sharp_overlaps` configuration.
* `log_gap_rate`: the late-time rate -d log(1 - overlap) / dt between the last two checkpoints
  where the gap is still well above rounding ([GLPR-P] Thm 6.8: 2 for SA).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .stats import closed_form, done_finite

__all__ = ["tracking_table", "token2_table", "sharp_table", "log_gap_rate", "QUANTILES", "MIN_GAP"]

QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)
MIN_GAP = 1e-12  # 1 - overlap below this is rounding (overlaps are float64 dot products)


def _cells(da: xr.DataArray, dims):
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        yield idx, {d: da[d].values[i] for d, i in zip(dims, idx)}


def _theory_over_t(like: xr.DataArray, curve) -> xr.DataArray | None:
    """curve(times, cell) on every cell of `like` (grid..., t); None where the model has none."""
    out = xr.zeros_like(like, dtype=float).compute()
    dims = [d for d in out.dims if d != "t"]
    for idx, cell in _cells(out, dims):
        values = curve(out.t.values, cell)
        if values is None:
            return None
        out[idx] = values
    return out


def _quantile_from_counts(counts, edges, p):
    """The p-quantile of a histogram (counts over bins with these edges), linear inside a bin."""
    total = counts.sum()
    if total <= 0:
        return np.nan
    cumulative = np.concatenate([[0.0], np.cumsum(counts)]) / total
    return float(np.interp(p, cumulative, edges)) if p > 0 else float(edges[np.argmax(counts > 0)])


def tracking_table(ds: xr.Dataset, curve=None) -> xr.Dataset | None:
    """gamma(t), the pooled mean and QUANTILES of the overlaps, over (grid..., t); None if n/a."""
    curve = closed_form(ds, "random_start_overlap") if curve is None else curve
    if curve is None or "overlap_hist" not in ds:
        return None
    hist = ds["overlap_hist"]
    keep = done_finite(ds, hist.isel(t=0, bin=0, drop=True))
    pooled = hist.where(keep, 0).clip(min=0).sum("traj").astype("float64").compute()
    gamma = _theory_over_t(pooled.isel(bin=0, drop=True), curve)
    if gamma is None:
        return None
    edges = np.asarray(hist.attrs.get("bin_edges", np.linspace(-1, 1, hist.sizes["bin"] + 1)))
    total = pooled.sum("bin")
    mean = (pooled * pooled["bin"]).sum("bin") / total.where(total > 0)
    quantiles = xr.apply_ufunc(
        lambda c: np.array([_quantile_from_counts(c, edges, p) for p in QUANTILES]), pooled,
        input_core_dims=[["bin"]], output_core_dims=[["quantile"]], vectorize=True)
    quantiles = quantiles.assign_coords(quantile=list(QUANTILES))
    table = xr.Dataset({"gamma": gamma, "mean": mean, "quantiles": quantiles, "pairs": total,
                        "dev": abs(mean - gamma), "n_traj": keep.sum("traj")})
    table.attrs["half_bin"] = float(np.max(np.diff(edges)) / 2)
    return table


def token2_table(ds: xr.Dataset, curve=None) -> xr.Dataset | None:
    """a(t) against the mean and the extremes over trajectories of <x_1, x_2>; None if n/a."""
    curve = closed_form(ds, "token2_overlap") if curve is None else curve
    if curve is None or "overlap_min" not in ds:
        return None
    overlap = ds["overlap_min"]
    keep = done_finite(ds, overlap.isel(t=0, drop=True))
    a = _theory_over_t(overlap.isel(traj=0, drop=True), curve)
    if a is None:
        return None
    counted = overlap.where(keep)
    return xr.Dataset({"a": a, "mean": counted.mean("traj").compute(),
                       "dev": abs(counted - a).max("traj").compute(), "n_traj": keep.sum("traj")})


def sharp_table(ds: xr.Dataset, overlaps=None) -> xr.Dataset | None:
    """Per cell: the configuration's extreme overlaps, the mean measured extremes at the last
    checkpoint, the largest deviation over trajectories at the last two checkpoints, and the
    fraction of trajectories within eps of the configuration at T; None if no cell has one."""
    overlaps = closed_form(ds, "sharp_overlaps") if overlaps is None else overlaps
    if overlaps is None:
        return None
    omin, omax = ds["overlap_min"], ds["overlap_max"]
    keep = done_finite(ds, omin.isel(t=0, drop=True))
    like = omin.isel(traj=0, t=-1, drop=True)
    low, high = (xr.full_like(like, np.nan, dtype=float).compute() for _ in range(2))
    dims = list(like.dims)
    for idx, cell in _cells(like, dims):
        values = overlaps(int(cell["n"]), int(cell["d"]))
        if values is not None:
            low[idx], high[idx] = min(values), max(values)
    if not np.isfinite(low.values).any():
        return None
    dev = np.maximum(abs(omin - low), abs(omax - high)).where(keep)
    eps = float(ds.attrs.get("eps", 1e-3))
    last = dev.isel(t=-1, drop=True)
    within = ((last <= eps) & keep).sum("traj") / keep.sum("traj").where(keep.sum("traj") > 0)
    before = dev.isel(t=-2, drop=True).max("traj") if omin.sizes["t"] > 1 else last.max("traj") * np.nan
    return xr.Dataset({
        "expected_min": low, "expected_max": high,
        "min_T": omin.isel(t=-1, drop=True).where(keep).mean("traj"),
        "max_T": omax.isel(t=-1, drop=True).where(keep).mean("traj"),
        "dev_T": last.max("traj"), "dev_before": before, "within": within, "n_traj": keep.sum("traj")},
        attrs={"eps": eps, "t_before": float(omin.t.values[-2]) if omin.sizes["t"] > 1 else np.nan}).compute()


def log_gap_rate(times, overlap, min_gap: float = MIN_GAP) -> tuple[float, float, float]:
    """(rate, t0, t1): -(log(1 - o(t1)) - log(1 - o(t0))) / (t1 - t0) over the last two checkpoints
    with 1 - o > min_gap; NaN rate where fewer than two are left.

    >>> t = np.array([1.0, 2.0, 3.0]); rate, t0, t1 = log_gap_rate(t, 1 - 0.5 * np.exp(-2 * t))
    >>> round(rate, 12), t0, t1
    (2.0, 2.0, 3.0)
    """
    t, gap = np.asarray(times, float), 1.0 - np.asarray(overlap, float)
    usable = np.flatnonzero(np.isfinite(gap) & (gap > min_gap))
    if usable.size < 2:
        return float("nan"), float("nan"), float("nan")
    i, j = usable[-2], usable[-1]
    return float(-(np.log(gap[j]) - np.log(gap[i])) / (t[j] - t[i])), float(t[i]), float(t[j])
