r"""The h -> 0 limit of P(antipodal) from a `layers` grid axis (docs/models.md section 4.6).

The discrete stochastic transformer is a weak order-1 scheme for its limit SDE ([F26] Thm 1), so
at fixed T and a smooth outcome law its class probabilities expand as

    p(h) = p_0 + c_1 h + c_2 h^2 + ...,   h = T / layers,

and p_0 is the limit diffusion's probability at T (`theory.finite`; the closed form once T is
large). Per cell, with k_j antipodal of N_j trajectories at step h_j (independent streams per
layer count, `pipeline/seeds.py`), we fit p_j ~ X beta by weighted least squares with the
binomial weights w_j = N_j / (p_j (1 - p_j)), X = [1, h] (linear) or [1, h, h^2] (the check).
The variance is taken at the fitted values (two passes: first with p~_j = (k_j + 1/2)/(N_j + 1),
then with the first fit, clipped to [1/(2N), 1 - 1/(2N)]), so a cell with k_j = 0 keeps a
weight. Since the binomial variance is known, Cov(beta) = (X^T W X)^{-1} (no residual scaling)
and the interval of p_0 is p_0 +- z se(p_0), z the two-sided normal quantile of `level`. The
residual sum sum_j w_j (p_j - fit_j)^2 is chi-square with J - (degree + 1) dof under the model:
its p-value says whether the linear form holds over the h range used (`h_max` drops larger
steps), and the quadratic term's z-score whether the curvature is visible at all.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy import stats

__all__ = ["zero_step_fit", "zero_step_table"]


def zero_step_fit(h, k, N, degree: int = 1, level: float = 0.99) -> dict:
    """WLS fit of k / N against h (polynomial of `degree`); the h -> 0 value with its interval.

    >>> fit = zero_step_fit([0.1, 0.05, 0.02], [600, 700, 760], [2000, 2000, 2000])
    >>> round(fit["p0"], 4), fit["dof"]
    (0.4, 1)
    """
    h, k, N = (np.asarray(v, float) for v in (h, k, N))
    keep = N > 0
    h, k, N = h[keep], k[keep], N[keep]
    nan = {"p0": np.nan, "lo": np.nan, "hi": np.nan, "se": np.nan, "slope": np.nan, "slope_se": np.nan,
           "coef": np.full(degree + 1, np.nan), "z_top": np.nan, "chi2": np.nan, "dof": 0,
           "p_value": np.nan}
    if h.size < degree + 1:
        return nan
    X = np.vander(h, degree + 1, increasing=True)  # [1, h, h^2, ...]
    p = k / N
    var = (k + 0.5) / (N + 1) * (1 - (k + 0.5) / (N + 1))
    for _ in range(2):  # second pass: the binomial variance at the fitted probabilities
        w = N / var
        cov = np.linalg.inv(X.T @ (w[:, None] * X))
        coef = cov @ (X.T @ (w * p))
        fitted = np.clip(X @ coef, 0.5 / N, 1 - 0.5 / N)
        var = fitted * (1 - fitted)
    se = np.sqrt(np.diag(cov))
    z = stats.norm.isf((1 - level) / 2)
    dof = int(h.size - (degree + 1))
    chi2 = float(np.sum(w * (p - X @ coef) ** 2))
    return {"p0": float(coef[0]), "lo": float(coef[0] - z * se[0]), "hi": float(coef[0] + z * se[0]),
            "se": float(se[0]), "slope": float(coef[1]) if degree >= 1 else np.nan,
            "slope_se": float(se[1]) if degree >= 1 else np.nan, "coef": coef,
            "z_top": float(coef[-1] / se[-1]), "chi2": chi2, "dof": dof,
            "p_value": float(stats.chi2.sf(chi2, dof)) if dof > 0 else np.nan}


def zero_step_table(table: xr.Dataset, T: float, level: float = 0.99, h_max: float | None = None) -> xr.Dataset:
    """Per cell (every grid axis but `layers`): the linear and the quadratic h -> 0 fits.

    ``table``: `antipodal_table` of a cube with a `layers` axis (n_antipodal, n_traj, theory,
    theory_t). Returns p0, lo, hi, se, slope, chi2, dof, p_value (linear fit); p0_quad, lo_quad,
    hi_quad, z_curvature (quadratic; NaN with fewer than 3 steps); theory and theory_t of the
    cell; n_steps (steps used, h <= h_max).
    """
    if "layers" not in table.dims:
        raise ValueError("zero_step_table needs a `layers` axis (time.layers as a grid axis)")
    others = [dim for dim in table.n_traj.dims if dim != "layers"]
    h_all = T / table.layers.values.astype(float)
    use = np.ones(h_all.shape, bool) if h_max is None else h_all <= h_max * (1 + 1e-12)
    names = ["p0", "lo", "hi", "se", "slope", "chi2", "dof", "p_value",
             "p0_quad", "lo_quad", "hi_quad", "z_curvature", "n_steps"]
    sizes = [table.sizes[dim] for dim in others]
    out = {name: np.full(sizes, np.nan) for name in names}
    layered = table.transpose(*others, "layers")
    for idx in np.ndindex(*sizes):
        cell = layered[dict(zip(others, idx))]
        k, N = cell.n_antipodal.values[use], cell.n_traj.values[use]
        lin = zero_step_fit(h_all[use], k, N, 1, level)
        quad = zero_step_fit(h_all[use], k, N, 2, level)
        values = [lin["p0"], lin["lo"], lin["hi"], lin["se"], lin["slope"], lin["chi2"], lin["dof"],
                  lin["p_value"], quad["p0"], quad["lo"], quad["hi"], quad["z_top"], int(use.sum())]
        for name, value in zip(names, values):
            out[name][idx] = value
    coords = {dim: table[dim] for dim in others}
    result = xr.Dataset({name: (others, values) for name, values in out.items()}, coords=coords)
    for name in ("theory", "theory_t"):
        if name in table:
            result[name] = table[name].isel(layers=0, drop=True).transpose(*others)
    result.attrs = {**table.attrs, "level": level, "T": T, "h_max": np.nan if h_max is None else h_max}
    return result
