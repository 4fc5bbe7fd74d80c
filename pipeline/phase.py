r"""Phase-diagram statistics: trajectory counts -> probabilities -> agreement with the theory.

For every grid cell (all dimensions of the cube except ``traj`` and ``t``) at one checkpoint t,
the N finite trajectories of done partitions (the store's ``status``) with a known class are counted as antipodal (class 2), single cluster
(1) or unresolved (0).  The estimate p = n_antipodal / N counts unresolved trajectories as "not
(yet) antipodal"; their fraction is reported alongside so that a finite-T bias is visible.

Intervals are Wilson score intervals: with z the normal quantile of (1 + level) / 2,

    centre = (k + z^2/2) / (N + z^2),   half = z / (N + z^2) * sqrt(k (N - k) / N + z^2 / 4),

which keep a sensible width at k = 0 or k = N, unlike the Wald interval.  The per-cell score
z = (p - p_th) / sqrt(p_th (1 - p_th) / N) is standardised under the theory; it is NaN where the
theory is missing or degenerate (p_th in {0, 1}: the binomial has no spread, a single stray count
is then judged by the interval test `agrees`, not by z).  Summing z^2 over the valid cells gives a
chi-square statistic with one degree of freedom per cell.

The closed form applies to two tokens with Q = K = I: the deep stochastic transformer (SA or USA,
theory.antipodal_probability) and the hybrid model (theory.hybrid_antipodal_probability, with the
``sigma`` coordinate).  Everything else gets NaN.

More than two tokens ([F26] Figs. 6-7): a trajectory has an antipodal pair at checkpoint t when
overlap_min(t) <= -1 + eps, i.e. some pair is within eps of antipodal whatever the other tokens do.
`any_antipodal_table` gives, per cell and checkpoint, p_any = n_any / N with its Wilson interval, and
its persistence: the fraction p_persist of trajectories whose antipodal pair, present at t, is
present at every later checkpoint as well (p_persist <= p_any; equal when no pair ever comes apart).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr
from scipy import stats

from . import theory

__all__ = ["wilson_interval", "theory_probability", "antipodal_table", "agrees", "chi_square_summary",
           "any_antipodal_table", "done_finite"]

CLASS_UNRESOLVED, CLASS_SINGLE, CLASS_ANTIPODAL = 0, 1, 2
TRANSFORMER_MODELS = ("stochastic_transformer", "deep_stochastic_transformer")
HYBRID_MODELS = ("hybrid",)


def wilson_interval(k, N, level: float = 0.95):
    """Wilson score interval (lo, hi) for k successes in N trials; NaN where N = 0.

    >>> lo, hi = wilson_interval(0, 10); round(float(lo), 6), round(float(hi), 4)
    (0.0, 0.2775)
    >>> lo, hi = wilson_interval([5, 50], [10, 100], level=0.99); np.round(lo, 4)
    array([0.1842, 0.3753])
    """
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie strictly between 0 and 1, e.g. 0.95")
    k, N = np.asarray(k, dtype=float), np.asarray(N, dtype=float)
    z = stats.norm.ppf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = (k + z**2 / 2) / (N + z**2)
        half = z / (N + z**2) * np.sqrt(np.maximum(k * (N - k) / N, 0) + z**2 / 4)
        lo, hi = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    return np.where(N > 0, lo, np.nan), np.where(N > 0, hi, np.nan)


def _identity_qk(attrs) -> bool:
    # the closed forms need Q = K = I; stores that record another choice get no theory
    return all(str(attrs.get(key, "identity")).lower() in ("identity", "i", "eye", "none")
               for key in ("Q", "K", "qk"))


def theory_probability(model: str, attention: str, beta, d, n=2, sigma=None):
    """Closed-form P(antipodal) broadcast over (beta, d, n, sigma); NaN where none applies.

    >>> theory_probability("stochastic_transformer", "sa", [1.0, 2.0], 4).round(3)
    array([0.12 , 0.281])
    >>> float(theory_probability("stochastic_transformer", "causal_sa", 1.0, 4))
    nan
    """
    model, attention = str(model).lower(), str(attention).lower()
    b, dd, nn, s = np.broadcast_arrays(np.asarray(beta, float), np.asarray(d), np.asarray(n),
                                       np.asarray(np.nan if sigma is None else sigma, float))
    out = np.full(b.shape, np.nan)
    if attention not in ("sa", "usa") or model not in TRANSFORMER_MODELS + HYBRID_MODELS:
        return out
    for idx in np.ndindex(b.shape):
        if nn[idx] != 2 or dd[idx] < 2 or np.isnan(b[idx]):
            continue
        if model in TRANSFORMER_MODELS:
            out[idx] = theory.antipodal_probability(b[idx], int(dd[idx]))
        elif not np.isnan(s[idx]):
            out[idx] = theory.hybrid_antipodal_probability(b[idx], s[idx], attention, int(dd[idx]))
    return out


def _grid_values(table, attrs, name, default):
    """Values of a grid parameter on every cell: a coordinate, else a fixed attribute, else default."""
    ref = table.n_traj
    if name in table.coords:
        return table[name].broadcast_like(ref).transpose(*ref.dims).values
    return np.full(ref.shape, attrs.get(name, default))


def _done_mask(ds: xr.Dataset):
    """Trajectories whose partition is done, from the store's ``status`` (grid..., block).

    A cube written by pipeline/store.py is pre-filled (class 0 = unresolved), so trajectories of
    pending or failed partitions must not be counted.  Block b holds trajectories
    [b P, (b + 1) P) with P = partition_traj from the stored spec.  No status: all done.
    """
    if "status" not in ds or "block" not in ds["status"].dims:
        return None
    status = ds["status"].load()  # tiny (one value per partition); indexing it lazily explodes the graph
    meanings = str(status.attrs.get("flag_meanings", "pending done failed")).split()
    values = list(status.attrs.get("flag_values", range(len(meanings))))
    n_traj, n_blocks = ds.sizes["traj"], ds.sizes["block"]
    try:
        size = int(json.loads(ds.attrs["tokensweep_spec"])["partition_traj"]) or n_traj
    except (KeyError, TypeError, ValueError):
        size = -(-n_traj // n_blocks)
    block = xr.DataArray(np.minimum(np.arange(n_traj) // size, n_blocks - 1), dims="traj")
    return status.isel(block=block) == values[meanings.index("done")]


def antipodal_table(ds: xr.Dataset, t=None, level: float = 0.95) -> xr.Dataset:
    """Counts, probabilities, Wilson intervals, theory and z-scores per grid cell.

    ``ds`` holds ``cluster_class`` (int8 over grid dims, t, traj), optionally ``nonfinite`` (bool
    over grid dims, traj).  ``t`` picks the checkpoint (nearest; default: the last one).  Works
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
    done = _done_mask(ds)
    done = xr.ones_like(cc, dtype=bool) if done is None else done
    bad = (ds["nonfinite"] if "nonfinite" in ds else xr.zeros_like(cc, dtype=bool)) & done
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

    attrs = dict(ds.attrs)
    th = np.full(table.n_traj.shape, np.nan)
    if _identity_qk(attrs):
        th = theory_probability(attrs.get("model", ""), attrs.get("attention", ""),
                                *[_grid_values(table, attrs, name, default) for name, default in
                                  (("beta", np.nan), ("d", -1), ("n", -1), ("sigma", np.nan))])
    table["theory"] = table.n_traj.copy(data=th)
    p_th, N = table.theory, table.n_traj
    degenerate = (p_th <= 0) | (p_th >= 1) | p_th.isnull() | (N == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["z"] = ((table.p_antipodal - p_th) / np.sqrt(p_th * (1 - p_th) / N)).where(~degenerate)

    table.attrs = {**attrs, "level": level, "t": float(cc["t"]) if "t" in cc.coords else np.nan}
    for name, text in [("n_traj", "finite trajectories with a class"), ("p_antipodal", "P(antipodal)"),
                       ("lo", f"Wilson {level:.0%} lower bound"), ("hi", f"Wilson {level:.0%} upper bound"),
                       ("theory", "closed-form P(antipodal)"), ("z", "standardised residual")]:
        table[name].attrs.update(long_name=text, units="1")
    return table


def agrees(table: xr.Dataset, level: float = 0.99, widen: float = 0.01) -> xr.DataArray:
    """True where the theory lies in the `level` Wilson interval widened by `widen` on each side.

    The widening absorbs the documented O(h) step-size bias of the discrete model (models.md
    section 4: e.g. 0.035 at h = 0.01 against 0.042).  False where there is no theory.
    """
    lo, hi = wilson_interval(table.n_antipodal, table.n_traj, level)
    inside = (table.theory >= lo - widen) & (table.theory <= hi + widen)
    return inside & table.theory.notnull()


def chi_square_summary(table: xr.Dataset) -> dict:
    """Sum of z^2 over the cells with a valid z, its degrees of freedom and p-value.

    >>> t = xr.Dataset({"z": ("c", [1.0, -1.0, np.nan])})
    >>> s = chi_square_summary(t); s["chi2"], s["dof"], round(s["p_value"], 4)
    (2.0, 2, 0.3679)
    """
    z = np.asarray(table["z"]).ravel()
    z = z[np.isfinite(z)]
    chi2, dof = float(np.sum(z**2)), int(z.size)
    return {"chi2": chi2, "dof": dof, "p_value": float(stats.chi2.sf(chi2, dof)) if dof else np.nan}


def done_finite(ds: xr.Dataset, like: xr.DataArray) -> xr.DataArray:
    """Trajectories to count (grid..., traj): in a done partition and never non-finite."""
    done = _done_mask(ds)
    done = xr.ones_like(like, dtype=bool) if done is None else done
    if "nonfinite" in ds:
        done = done & ~ds["nonfinite"]
    return done


def any_antipodal_table(ds: xr.Dataset, eps: float | None = None, level: float = 0.95) -> xr.Dataset:
    """P(at least one antipodal pair) per grid cell and checkpoint, with persistence over t.

    A trajectory counts at checkpoint t when overlap_min(t) <= -1 + eps (eps: the store's, default
    1e-3); it persists from t when it counts at every checkpoint >= t.  Returns a Dataset over
    (grid..., t): n_traj, n_any, p_any, lo, hi (Wilson, `level`), n_persist, p_persist.

    >>> ds = xr.Dataset({"overlap_min": (("n", "t", "traj"), [[[-1.0, -1.0, 0.2], [-1.0, 0.9, -1.0]]])},
    ...                 coords={"n": [4], "t": [1.0, 2.0]}, attrs={"eps": 1e-3})
    >>> tab = any_antipodal_table(ds)
    >>> tab.n_any.values.tolist(), tab.n_persist.values.tolist()
    ([[2, 2]], [[1, 2]])
    """
    if "overlap_min" not in ds or "t" not in ds["overlap_min"].dims:
        raise KeyError("any_antipodal_table needs 'overlap_min' over (grid..., t, traj); "
                       f"the Dataset has {sorted(ds.data_vars)}")
    eps = float(ds.attrs.get("eps", 1e-3) if eps is None else eps)
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
