r"""A turning value matrix against its closed forms ([RST] Thm 5.3; `theory.turning`).

`turning_table(ds, sweep)`: per grid cell of a causal, one-head sphere-flow cube with an explicit V
that turns (grid axis omega, or `value_rotation`) and records `states`, from the counted
trajectories (`stats.done_finite`):

* `dev`: the largest |x_1(t) - closed form| over checkpoints and trajectories, the closed form
  started from x_1 at the first checkpoint (token 1 attends only to itself);
* `kind`: 'lock' or 'slip' (or 'boundary'), from the spectrum of V - omega J;
* `lag_theory` / `lag`: in a lock, the angle between v_1(T) = R(omega T) v_1 and the locked
  direction, and its measured mean: the angle of x_1(T) to the line of +-v_1(T);
* `far_theory` / `far`: in a lock, the probability lag / pi that a start uniform on the open
  hemisphere of v_1(0) lies in the lune between that hemisphere's edge and the separatrix of
  V - omega J (the plane of its other eigenvectors), whose starts end at -v_1(t); and the
  fraction of trajectories whose token 1 ends beyond pi / 2 of v_1(T);
* `angle`: per trajectory, the largest angle of any token to v_1(T) (NaN where not counted);
* `rate_theory` / `rate`: in a slip, the mean rate at which token 1 turns against v_1(t), and the
  measured one: the unwrapped phase of x_1 in the turning frame between the first checkpoint and
  T, divided by the time between; `rate_bound` = pi / (T - t_1) is how far a window that is not a
  whole number of turns can put it from the mean (the phase of a linear flow in the plane stays
  within pi / 2 of the uniform one at each end);
* `spread`: the largest angle between any token and token 1 at T;
* `one_cluster`: the fraction of trajectories with n_clusters = 1 at T.

None where the cube is not such a cube, or its checkpoints are too far apart to unwrap the phase
(token 1 may turn by at most |omega| + the spread of V's spectrum per unit time: under pi between
checkpoints).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..theory.turning import lock_or_slip, rotation, top_eigen, turning_first_token
from .once import once
from .stats import done_finite, stored_spec

__all__ = ["turning_table", "turning_inputs"]


def turning_inputs(sweep):
    """(V, omegas) of a cube `turning_table` reads, else None: causal attention, one head, an
    explicit symmetric V, a turning speed (the axis omega or value_rotation)."""
    matrices = getattr(sweep, "matrices", None) or {}
    if (getattr(sweep, "model", None) != "sphere_flow" or not sweep.attention.startswith("causal")
            or sweep.heads != 1 or "V" not in matrices or not getattr(sweep, "turns", False)
            or "states" not in getattr(sweep, "record", ())):
        return None
    V = np.asarray(matrices["V"][0], float)
    if not np.allclose(V, V.T):
        return None
    omegas = sweep.grid.omega if sweep.grid.omega is not None else (sweep.value_rotation,)
    return V, tuple(float(w) for w in omegas)


def _phase_step_ok(sweep, V, omegas, times) -> bool:
    spectrum = np.linalg.eigvalsh(V)
    speed = max(abs(w) for w in omegas) + float(spectrum[-1] - spectrum[0])
    return float(np.max(np.diff(np.concatenate([[0.0], times])))) * speed < np.pi


@once
def turning_table(ds: xr.Dataset, sweep=None) -> xr.Dataset | None:
    """The table of the module docstring, over the cube's grid dims (omega included), or None.
    sweep: the cube's stored spec by default (one table per report: the section and each claim
    read it)."""
    sweep = stored_spec(ds) if sweep is None else sweep
    inputs = turning_inputs(sweep)
    if inputs is None or "states" not in ds or ds.sizes["t"] < 2:
        return None
    V, omegas = inputs
    times = ds["t"].values.astype(float)
    if not _phase_step_ok(sweep, V, omegas, times):
        return None
    v1 = top_eigen(V)[1]
    keep = done_finite(ds, ds["nonfinite"] if "nonfinite" in ds else ds["states"].isel(t=0, drop=True))
    cells = [d for d in keep.dims if d != "traj"]
    fields = {name: [] for name in ("dev", "lag_theory", "lag", "far_theory", "far", "rate_theory", "rate",
                                    "spread", "one_cluster", "n_traj")}
    kinds, angles = [], []
    for idx in np.ndindex(*[keep.sizes[d] for d in cells]):
        sel = {d: keep[d].values[i] for d, i in zip(cells, idx)}
        omega = float(sel.get("omega", sweep.value_rotation))
        use = keep.sel(sel).values
        states = ds["states"].sel(sel).transpose("traj", "t", "token", "component").values[use]
        kind, lag_theory, rate_theory = lock_or_slip(V, omega)
        kinds.append(kind)
        fields["lag_theory"].append(lag_theory)
        fields["far_theory"].append(lag_theory / np.pi)
        fields["rate_theory"].append(rate_theory)
        fields["n_traj"].append(states.shape[0])
        angle = np.full(keep.sizes["traj"], np.nan)
        angles.append(angle)
        if states.shape[0] == 0:
            for name in ("dev", "lag", "far", "rate", "spread", "one_cluster"):
                fields[name].append(np.nan)
            continue
        first = states[:, :, 0, :]  # token 1: (traj, t, component)
        exact = turning_first_token(first[:, 0], V, omega, times[0], times)  # (traj, t, component)
        fields["dev"].append(float(np.abs(first - exact).max()))
        v1_T = rotation(V.shape[0], omega * times[-1]) @ v1
        to_v1 = np.arccos(np.clip(states[:, -1] @ v1_T, -1.0, 1.0))  # (traj, token)
        angle[use] = to_v1.max(axis=1)
        fields["lag"].append(float(np.minimum(to_v1[:, 0], np.pi - to_v1[:, 0]).mean()))
        fields["far"].append(float(np.mean(to_v1[:, 0] > np.pi / 2)))
        frame = np.einsum("tji,ktj->kti", rotation(V.shape[0], omega * times), first)  # R^T x_1
        phase = np.unwrap(np.arctan2(frame[..., 1], frame[..., 0]), axis=1)
        fields["rate"].append(float(np.abs(phase[:, -1] - phase[:, 0]).mean() / (times[-1] - times[0])))
        last = states[:, -1]
        cos = np.einsum("kid,kd->ki", last, last[:, 0])
        fields["spread"].append(float(np.arccos(np.clip(cos, -1.0, 1.0)).max()))
        if "n_clusters" in ds:
            clusters = ds["n_clusters"].sel(sel).isel(t=-1).transpose("traj").values[use]
            fields["one_cluster"].append(float(np.mean(clusters == 1)))
        else:
            fields["one_cluster"].append(np.nan)
    shape = [keep.sizes[d] for d in cells]
    coords = {d: keep[d].values for d in cells}
    out = xr.Dataset({name: (cells, np.asarray(values, float).reshape(shape)) for name, values in fields.items()},
                     coords=coords)
    out["kind"] = (cells, np.asarray(kinds, object).reshape(shape))
    out["angle"] = ([*cells, "traj"], np.asarray(angles).reshape(shape + [keep.sizes["traj"]]))
    out.attrs["rate_bound"] = float(np.pi / (times[-1] - times[0]))
    return out
