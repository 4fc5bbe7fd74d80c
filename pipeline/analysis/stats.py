r"""Shared statistics: the cube's typed spec and model, which trajectories count, Wilson intervals,
chi-square.

Counted trajectories: those of partitions whose `status` is done, that stayed finite. A cube is
pre-filled before partitions write, so trajectories of pending or failed partitions must be left
out of every count (`done_mask`). Everything here takes a cube as `xr.open_zarr` reads it (integer
outputs decoded to float, NaN where unwritten; bool outputs as bool) or as `tokensweep.open` does
(every output float, NaN outside done partitions, bool outputs as 1.0 / 0.0): `flag` reads a bool
output either way.

Wilson score interval, z the normal quantile of (1 + level) / 2:

    centre = (k + z^2/2) / (N + z^2),   half = z / (N + z^2) * sqrt(k (N - k) / N + z^2 / 4),

which keeps a sensible width at k = 0 or k = N, unlike the Wald interval.
"""

from __future__ import annotations

import functools

import numpy as np
import xarray as xr

from ..errors import SpecError
from ..spec.base import SPEC_ATTR, SweepBase
from ..spec.load import sweep_from_json

__all__ = ["stored_spec", "closed_form", "grid_dims", "done_mask", "done_finite", "wilson_interval",
           "chi_square_summary", "cells_of", "flag", "pending_count"]


def stored_spec(ds: xr.Dataset) -> SweepBase | None:
    """The typed spec a cube was written with (its attributes); None for a cube without one."""
    text = ds.attrs.get(SPEC_ATTR)
    if text is None:
        return None
    return _parse(str(text))


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> SweepBase:
    try:
        return sweep_from_json(text)
    except SpecError as err:
        raise ValueError(f"the cube's stored spec no longer validates: {err}") from None


def closed_form(ds: xr.Dataset, name: str):
    """The model's closed form `name` bound to the cube's spec, or None where it has none.

    An outcome module asks by name (e.g. "antipodal_probability"); the model of the cube's
    stored spec (pipeline/models/) answers if it defines a method of that name.
    """
    from ..models import get_model
    from ..plugin import CLOSED_FORMS

    if name not in CLOSED_FORMS:
        raise ValueError(f"{name!r} is not a closed form a model may define: one of {sorted(CLOSED_FORMS)}")
    sweep = stored_spec(ds)
    if sweep is None:
        return None
    method = getattr(get_model(sweep.model), name, None)
    return None if method is None else functools.partial(method, sweep)


def grid_dims(ds: xr.Dataset) -> list[str]:
    """The grid axes of a cube: the dims of `nonfinite` (grid..., traj) other than traj."""
    ref = ds["nonfinite"] if "nonfinite" in ds else next(iter(ds.data_vars.values()))
    return [d for d in ref.dims if d not in ("traj", "t", "block")]


def cells_of(table: xr.Dataset | xr.DataArray, names, like: xr.DataArray) -> dict[str, np.ndarray]:
    """Coordinate values broadcast over every cell of `like`, for the names that are coordinates."""
    return {name: table[name].broadcast_like(like).transpose(*like.dims).values
            for name in names if name in table.coords}


def done_mask(ds: xr.Dataset) -> xr.DataArray | None:
    """Trajectories whose partition is done, over (grid..., traj); None for a cube without status.

    Block b holds trajectories [b P, (b + 1) P), P = partition_traj of the stored spec.
    """
    if "status" not in ds or "block" not in ds["status"].dims:
        return None
    status = ds["status"].load()  # tiny (one value per partition); indexing it lazily explodes the graph
    meanings = str(status.attrs.get("flag_meanings", "pending done failed")).split()
    values = list(status.attrs.get("flag_values", range(len(meanings))))
    n_traj, n_blocks = ds.sizes["traj"], ds.sizes["block"]
    sweep = stored_spec(ds)
    size = sweep.partition_traj if sweep is not None else -(-n_traj // n_blocks)
    block = xr.DataArray(np.minimum(np.arange(n_traj) // size, n_blocks - 1), dims="traj")
    return status.isel(block=block) == values[meanings.index("done")]


def flag(var: xr.DataArray) -> xr.DataArray:
    """A bool output as booleans, whether stored (bool) or masked on read (1.0 / 0.0 / NaN: False).

    >>> flag(xr.DataArray([1.0, 0.0, np.nan])).values.tolist()
    [True, False, False]
    """
    return var if var.dtype == bool else var == 1


def done_finite(ds: xr.Dataset, like: xr.DataArray) -> xr.DataArray:
    """Trajectories to count (grid..., traj): in a done partition and never non-finite."""
    done = done_mask(ds)
    done = xr.ones_like(like, dtype=bool) if done is None else done
    if "nonfinite" in ds:
        done = done & ~flag(ds["nonfinite"])
    return done


def pending_count(ds: xr.Dataset) -> int:
    """Trajectories in partitions not done (left out of every statistic)."""
    done = done_mask(ds)
    return 0 if done is None else int((~done).sum())


def wilson_interval(k, N, level: float = 0.95):
    """Wilson score interval (lo, hi) for k successes in N trials; NaN where N = 0.

    >>> lo, hi = wilson_interval(0, 10); round(float(lo), 6), round(float(hi), 4)
    (0.0, 0.2775)
    >>> lo, hi = wilson_interval([5, 50], [10, 100], level=0.99); np.round(lo, 4)
    array([0.1842, 0.3753])
    """
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie strictly between 0 and 1, e.g. 0.95")
    from scipy import stats  # here, not at import: scipy.stats alone adds ~0.5 s to the CLI's start

    k, N = np.asarray(k, dtype=float), np.asarray(N, dtype=float)
    z = stats.norm.ppf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = (k + z**2 / 2) / (N + z**2)
        half = z / (N + z**2) * np.sqrt(np.maximum(k * (N - k) / N, 0) + z**2 / 4)
        lo, hi = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    lo, hi = np.where(k == 0, 0.0, lo), np.where(k == N, 1.0, hi)  # exact ends: no rounding off 0 or 1
    return np.where(N > 0, lo, np.nan), np.where(N > 0, hi, np.nan)


def chi_square_summary(table: xr.Dataset) -> dict:
    """Sum of z^2 over the cells with a valid z, its degrees of freedom and p-value.

    >>> t = xr.Dataset({"z": ("c", [1.0, -1.0, np.nan])})
    >>> s = chi_square_summary(t); s["chi2"], s["dof"], round(s["p_value"], 4)
    (2.0, 2, 0.3679)
    """
    from scipy import stats

    z = np.asarray(table["z"]).ravel()
    z = z[np.isfinite(z)]
    chi2, dof = float(np.sum(z**2)), int(z.size)
    return {"chi2": chi2, "dof": dof, "p_value": float(stats.chi2.sf(chi2, dof)) if dof else np.nan}
