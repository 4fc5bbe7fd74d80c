"""The deep stochastic transformer [F26] beside a random-weight network (a report-time simulation).

A random-weight layer adds a random value map to its residual stream, as the stochastic
transformer x_i <- N(x_i + sqrt(h) V_k A_i(X)) does with a fresh Gaussian V_k each layer
(docs/models.md section 4; `kernels.stochastic.transformer`, the project's own kernel). Beside a
network cell it runs with the cell's n and width d, the beta of the cell's sphere-flow fit
(`fit.fit_particle`: the network's attention temperature as its idealisation reads it), value_std
1, from equiangular starts at the network's layer-0 mean overlap gamma0 (every pair of tokens at
cosine gamma0; a uniform start where d < n + 1). Its clock is matched to the network's: the limit
SDE's law depends on value_std^2 t only, so one simulation on [0, T] serves every clock, and the
time per layer c minimises the squared distance between the two mean-overlap curves (the
network's at layer l against the simulation's at c l, interpolated; `match_clock`).

[F26]'s antipodal side: two tokens' P(antipodal | rho0) of the limit SDE (`theory`), positive only
above beta_c(d) = arccosh(d - 2) / 2, beside the fraction of the network's pairs whose cosine ends
below -0.9.
"""

from __future__ import annotations

import numpy as np

__all__ = ["equiangular_starts", "stochastic_overlaps", "match_clock", "SIM_STEP", "SIM_TRAJECTORIES"]

SIM_STEP = 0.1  # h d of the simulation: small steps for the kernel's discrete map (|sqrt(h) V A| ~ sqrt(h d))
SIM_LAYERS = 50  # T = SIM_LAYERS * SIM_STEP / d, doubled (up to twice) until the overlap reaches the network's
SIM_TRAJECTORIES = 4


def equiangular_starts(rng: np.random.Generator, trajectories: int, n: int, d: int, gamma0: float) -> np.ndarray:
    """(trajectories, n, d) unit tokens with every pairwise cosine gamma0 in [0, 1):
    x_i = sqrt(gamma0) u + sqrt(1 - gamma0) e_i, (u, e_1..e_n) a Haar-random orthonormal frame."""
    out = np.empty((trajectories, n, d))
    for k in range(trajectories):
        frame, _ = np.linalg.qr(rng.standard_normal((d, n + 1)))
        out[k] = np.sqrt(gamma0) * frame[:, 0] + np.sqrt(1 - gamma0) * frame[:, 1:].T
    return out


def stochastic_overlaps(n: int, d: int, beta: float, gamma0: float, seed: int = 0, reach: float = 1.0,
                        trajectories: int = SIM_TRAJECTORIES, layers: int = SIM_LAYERS) -> dict:
    """A report-time simulation: {"t": times from 0, "mean_overlap", "pairs_near_minus_one" (mean
    over trajectories per time), "T", "uniform_start"}; over T = layers * SIM_STEP / d, run again
    with T doubled (twice at most) while its final mean overlap stays below `reach`."""
    for grow in (1, 2, 4):
        sim = _simulate(n, d, beta, gamma0, seed, trajectories, layers, grow * layers * SIM_STEP / d)
        if sim["mean_overlap"][-1] >= reach:
            break
    return sim


def _simulate(n, d, beta, gamma0, seed, trajectories, layers, T) -> dict:
    from ....kernels.stochastic.transformer import simulate_stochastic_transformer  # numba: here

    rng = np.random.default_rng(seed)
    gamma0 = float(np.clip(gamma0, 0.0, 0.999))
    x0 = equiangular_starts(rng, trajectories, n, d, gamma0) if d >= n + 1 else None
    rngs = [np.random.default_rng([seed, j]) for j in range(trajectories)]
    out = simulate_stochastic_transformer(rngs, n=n, d=d, beta=float(beta), T=T, layers=layers,
                                          checkpoint_layers=np.arange(1, layers + 1, dtype=np.int64),
                                          x0=x0, record=("gram",))
    gram = out["gram"]  # (trajectories, layers, n, n)
    upper = np.triu_indices(n, 1)
    pairs = gram[:, :, upper[0], upper[1]]
    start = gamma0 if x0 is not None else 0.0
    return {"t": np.arange(layers + 1) * T / layers,
            "mean_overlap": np.concatenate([[start], pairs.mean(axis=(0, 2))]),
            "pairs_near_minus_one": np.concatenate([[0.0], (pairs < -0.9).mean(axis=(0, 2))]),
            "T": T, "uniform_start": x0 is None}


def match_clock(layers, curve, sim_t, sim_curve, candidates: int = 400) -> tuple[float, float]:
    """(time per layer c, rms): the c in (0, T / max layer] minimising the rms distance between
    `curve` at `layers` and the simulation's curve at c * layers (linear interpolation)."""
    layers, curve = np.asarray(layers, float), np.asarray(curve, float)
    top = float(sim_t[-1]) / max(float(layers.max()), 1.0)
    grid = top * np.geomspace(1e-3, 1.0, candidates)
    errors = [np.sqrt(np.mean((np.interp(c * layers, sim_t, sim_curve) - curve) ** 2)) for c in grid]
    best = int(np.argmin(errors))
    return float(grid[best]), float(errors[best])
