r"""The doubly exponential rate at which P(t) turns Boolean in d = 1 ([GLPR-E] Thm 2.1, Fig. 3;
docs/models.md section 3).

D(t) is the kernel output `log_boolean_defect` (its log): with delta_i = 1 - max_j P_ij(t) the
attention mass off row i's leader, D = the second largest delta_i, the distance of P(t) to the set
of Fig. 2 (every row Boolean but one). Thm 2.1 (d = 1, V > 0, QK > 0) gives P(t) -> P* in that set,
"doubly exponentially in t" off the free row. The rate, derived here for the flow (RK4):

Once every row has locked on its leader (the extreme token of its own sign), the leader's z is
constant up to doubly exponentially small terms, so x_lead = e^{Vt} z_lead; a token k of its
cluster obeys dz_k/dt = V (z_lead - z_k), so the x gap Delta = x_lead - x_next tends to a constant
and x_k = z_lead e^{Vt} - (z_lead - z_k(t')) e^{Vt'} (t' the lock time). With logits
beta QK x_i x_j, a row i of that cluster has -log delta_i = beta QK x_i Delta (1 + doubly
exponentially small), hence

    -log D(t) = A e^{Vt} - B   (A > 0, 0 <= B < A e^{Vt'}),
    y(t) = log(-log D(t)) = V t + log A + g(t),   g = log(1 - (B / A) e^{-Vt}) non-decreasing.

So y is a straight line of slope V approached from above, whatever beta, Q, K (they set A), and:

- slope: the least-squares slope of y over a window [a, T] is V plus that of g, which lies in
  [0, sup g'] (a non-decreasing g has a non-negative slope, Chebyshev's sum inequality). Counting
  the lock from the first checkpoint t_l from which D <= 1/e at every later one, plus 1/V for the
  remaining off-leader mass to die (D <= e^{-e} by then), g' <= V e^{-s} / (1 - e^{-s}) with
  s = V (a - t_l) - 1: for s >= 2 (`LOCK_MARGIN` = 3 units of 1/V before the window) the slope
  lies in [V, V (1 + e^{-2} / (1 - e^{-2}))] = [V, 1.157 V] (`slope_bound`);
- straightness: |g - mean g| <= -log(1 - e^{-s}) <= 0.145, so 1 - r^2 <= 0.145^2 / (V^2 var t)
  over the window's checkpoints (`r2_bound`; 0.995 over [8, 16] at V = 1);
- a single exponential D ~ e^{-kt} would make log D, not y, straight. Since -log D is affine in
  e^{Vt}, the r^2 of log D against t equals corr(t, e^{Vt})^2 over the window's checkpoints,
  whatever A and B (`single_exponential_r2`; 0.60 over [8, 16] at V = 1): clearly worse.

The schemes have their own rates. Euler and RK4 step z, with the growth e^{tV} taken out exactly:
x_lead grows like e^{Vt}, but the gap of z shrinks by r(-hV) per step, r the scheme's stability
polynomial (1 + x for Euler, 1 + x + x^2/2 + x^3/6 + x^4/24 for RK4), so Delta grows like
(e^{hV} r(-hV))^{t/h} and the slope is 2V + log r(-hV) / h (RK4: V + h^4 V^5 / 120 + ...; Euler at
h = 0.1, V = 1: 0.946). The discrete transformer steps x itself by 1 + hV and keeps Delta
constant: log(1 + hV) / h. `predicted_slope` returns these.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy import stats

from .stats import done_finite

__all__ = ["LOCK_MARGIN", "predicted_slope", "trajectory_fits", "slope_bound", "r2_bound",
           "single_exponential_r2", "cell_summary", "rate_table", "window_size"]

LOCK_MARGIN = 3.0  # units of 1/V between the lock time and the window's start (module docstring)


def predicted_slope(V: float, h: float, integrator: str) -> float:
    """The slope of log(-log D) against t once P is locked: V for the flow, the scheme's own rate
    at step h (module docstring).

    >>> round(predicted_slope(1.0, 0.05, "rk4"), 6), round(predicted_slope(1.0, 0.1, "euler"), 4)
    (1.0, 0.9464)
    >>> round(predicted_slope(1.0, 0.1, "discrete"), 4)  # log(1.1) / 0.1
    0.9531
    """
    if integrator == "discrete":
        return math.log1p(h * V) / h
    x = -h * V
    shrink = 1 + x if integrator == "euler" else 1 + x + x**2 / 2 + x**3 / 6 + x**4 / 24
    return 2 * V + math.log(shrink) / h


def slope_bound(V: float) -> tuple[float, float]:
    """The range of the window's slope for a trajectory locked LOCK_MARGIN / V before it."""
    s = LOCK_MARGIN - 1.0
    return V, V * (1 + math.exp(-s) / (1 - math.exp(-s)))


def r2_bound(V: float, t) -> float:
    """Lower bound of r^2 of log(-log D) against the window's times t, locked trajectories."""
    s = LOCK_MARGIN - 1.0
    return 1 - math.log1p(-math.exp(-s)) ** 2 / (V**2 * float(np.var(np.asarray(t, float))))


def single_exponential_r2(V: float, t) -> float:
    """r^2 of log D against t over the times t if -log D = A e^{Vt} - B exactly: corr(t, e^{Vt})^2."""
    t = np.asarray(t, float)
    return float(np.corrcoef(t, np.exp(V * (t - t.max())))[0, 1] ** 2)


def window_size(t, start: float | None = None) -> int:
    """Checkpoints in the fit window [start, T] (default [T/2, T]); a fit needs 3."""
    t = np.asarray(t, float)
    return int((t >= (t[-1] / 2 if start is None else float(start)) - 1e-12).sum())


def _line_fit(t, y):
    """(slope, intercept, r^2) of least squares y ~ t along the last axis (NaN rows stay NaN)."""
    tc = t - t.mean()
    yc = y - y.mean(axis=-1, keepdims=True)
    slope = (yc * tc).sum(axis=-1) / (tc**2).sum()
    intercept = y.mean(axis=-1) - slope * t.mean()
    ss = (yc**2).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = 1 - ((yc - slope[..., None] * tc) ** 2).sum(axis=-1) / ss
    return slope, intercept, r2


def trajectory_fits(t, log_defect, V: float, start: float | None = None) -> dict:
    """Per trajectory fits over the window [start, T] (default start T / 2) of log D (..., nt).

    Returns arrays of the leading shape: slope, intercept, r2 (of log(-log D) against t),
    r2_single (of log D against t), lock (t_l: the first checkpoint from which D <= 1/e for good;
    NaN if D > 1/e at T) and locked (t_l <= start - LOCK_MARGIN / V), and `window`, the times used.
    A trajectory with a non-finite value in the window gets NaN fits and is not locked.
    """
    t = np.asarray(t, float)
    log_d = np.asarray(log_defect, float)
    start = t[-1] / 2 if start is None else float(start)
    w = t >= start - 1e-12
    if window_size(t, start) < 3:
        raise ValueError(f"the window [{start:g}, {t[-1]:g}] holds {int(w.sum())} checkpoints, but a "
                         "fit needs at least 3: record more checkpoints (time.checkpoints)")
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.log(-log_d)
    slope, intercept, r2 = _line_fit(t[w], np.where(np.isfinite(y[..., w]), y[..., w], np.nan))
    r2_single = _line_fit(t[w], np.where(np.isfinite(log_d[..., w]), log_d[..., w], np.nan))[2]
    above = ~(y >= 0)  # D > 1/e (or missing)
    last = t.size - 1 - np.argmax(above[..., ::-1], axis=-1)  # the last checkpoint above 1/e
    lock = np.where(last < t.size - 1, t[np.minimum(last + 1, t.size - 1)], np.nan)
    lock = np.where(above.any(axis=-1), lock, t[0])
    locked = (lock <= start - LOCK_MARGIN / V) & np.isfinite(slope)
    return {"slope": slope, "intercept": intercept, "r2": r2, "r2_single": r2_single, "lock": lock,
            "locked": locked, "window": t[w]}


def cell_summary(t, log_defect, V: float, level: float = 0.95) -> dict:
    """One cell's row of `rate_table` from its trajectories' log D (ntraj, nt) and its rate V."""
    fits = trajectory_fits(t, log_defect, V)
    locked = fits["locked"]
    slopes = fits["slope"][locked]
    k = slopes.size
    mean = float(slopes.mean()) if k else np.nan
    half = float(stats.t.ppf((1 + level) / 2, k - 1) * slopes.std(ddof=1) / np.sqrt(k)) if k > 1 else np.nan
    lo, hi = slope_bound(V)

    def median(values):
        return float(np.nanmedian(values)) if np.isfinite(values).any() else np.nan

    return {"n_traj": len(log_defect), "n_locked": k, "slope": mean, "lo": mean - half, "hi": mean + half,
            "slope_median_all": median(fits["slope"]), "predicted": V, "bound_lo": lo, "bound_hi": hi,
            "r2": median(fits["r2"][locked]), "r2_bound": r2_bound(V, fits["window"]),
            "r2_single": median(fits["r2_single"][locked]),
            "r2_single_expected": single_exponential_r2(V, fits["window"]),
            "window_start": float(fits["window"][0])}


def rate_table(ds: xr.Dataset, rate, level: float = 0.95) -> xr.Dataset | None:
    """`cell_summary` per cell with a predicted rate (d = 1), over a `cell` dimension with the grid
    coordinates: counts, the locked trajectories' mean slope with its t-interval (level), the
    derived range, the median r^2 of both fits and the single-exponential r^2 the law gives.
    None for a cube without log D, with fewer than 3 checkpoints in [T/2, T] or without such cells.

    rate: (cell: {axis: value}) -> predicted slope or None (the model's `boolean_rate`)."""
    if "log_boolean_defect" not in ds or window_size(ds["t"].values) < 3:
        return None
    log_d = ds["log_boolean_defect"]
    keep = done_finite(ds, log_d.isel(t=-1))
    dims = [d for d in log_d.dims if d not in ("t", "traj")]
    t = ds["t"].values.astype(float)
    coords, rows = [], []
    for idx in np.ndindex(*[log_d.sizes[d] for d in dims]):
        sel = dict(zip(dims, idx))
        cell = {d: log_d[d].values[i].item() for d, i in sel.items()}
        V = rate(cell)
        if V is None:
            continue
        values = log_d[sel].transpose("traj", "t").values[keep[sel].values]
        coords.append(cell)
        rows.append(cell_summary(t, values, V, level))
    if not rows:
        return None
    table = xr.Dataset({k: ("cell", [r[k] for r in rows]) for k in rows[0]},
                       coords={d: ("cell", [c[d] for c in coords]) for d in dims})
    table.attrs = {"level": level, "T": float(t[-1])}
    return table
