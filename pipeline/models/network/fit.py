"""The particle model's beta and time per layer that best match a network's mean-overlap curve.

The idealisation: the tokens of the SA flow on the sphere in high dimension keep equal pairwise
overlaps gamma(t), gamma' = 2 (1 - g) ((n-1) g + 1) / (exp(beta (1 - g)) + n - 1) ([GLPR-P]
Thm 6.9; `theory.deterministic.equiangular_rhs`), here started from the network's own layer-0
overlap. Layer l of the network is matched to time tau * l. (beta, tau) minimise the squared
distance to the mean curve over prompts (scipy.optimize.least_squares); the interval is the
percentile bootstrap over prompts (the same fit on prompts redrawn with replacement).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, optimize

__all__ = ["particle_curve", "fit_particle", "fit_with_interval"]

BOUNDS = ([np.log(1e-3), np.log(1e-4)], [np.log(50.0), np.log(100.0)])  # log beta, log tau


def particle_curve(layers, gamma0: float, beta: float, tau: float, n: int) -> np.ndarray:
    """gamma(tau * l) at the layer indices `layers` (>= 0), gamma(0) = gamma0.

    LSODA through scipy's odeint, whose steps run in Fortran: a fit solves this ODE ~80 times
    and a report fits 21 times per cell, and solve_ivp's Python step loop made that 7 s of a
    network report. The right-hand side is `equiangular_rhs` (SA) on a float, without numpy's
    per-call overhead (test_network checks that the two agree)."""
    t = tau * np.asarray(layers, dtype=float)
    if t.size == 0 or t.max() <= 0:
        return np.full(t.shape, float(gamma0))
    order = np.argsort(t)
    times = np.concatenate([[0.0], t[order]])  # odeint starts at its first time, the start's

    def rhs(y, _t):
        g = y[0]
        return 2.0 * (1.0 - g) * ((n - 1) * g + 1.0) / (math.exp(beta * (1.0 - g)) + n - 1)

    out = np.empty_like(t)
    out[order] = integrate.odeint(rhs, float(gamma0), times, rtol=1e-8, atol=1e-10)[1:, 0]
    return np.clip(out, -1.0, 1.0)


def fit_particle(layers, curve, gamma0: float, n: int, start=(1.0, 0.5)) -> tuple[float, float, float]:
    """(beta, tau, rms residual) of the best particle curve through `curve` at `layers`."""
    layers, curve = np.asarray(layers, float), np.asarray(curve, float)

    def residual(p):
        return particle_curve(layers, gamma0, np.exp(p[0]), np.exp(p[1]), n) - curve

    x0 = np.clip(np.log(start), BOUNDS[0], BOUNDS[1])
    res = optimize.least_squares(residual, x0, bounds=BOUNDS, xtol=1e-8, ftol=1e-10)
    return float(np.exp(res.x[0])), float(np.exp(res.x[1])), float(np.sqrt(np.mean(res.fun ** 2)))


def fit_with_interval(layers, curves, gamma0s, n: int, level: float = 0.95, resamples: int = 20,
                      seed: int = 0) -> dict:
    """The fit to the mean over prompts (rows of `curves`), with percentile bootstrap intervals."""
    curves, gamma0s = np.asarray(curves, float), np.asarray(gamma0s, float)
    keep = np.isfinite(curves).all(axis=1) & np.isfinite(gamma0s)
    curves, gamma0s = curves[keep], gamma0s[keep]
    beta, tau, rms = fit_particle(layers, curves.mean(0), gamma0s.mean(), n)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples if len(curves) > 1 else 0):
        pick = rng.integers(0, len(curves), len(curves))
        draws.append(fit_particle(layers, curves[pick].mean(0), gamma0s[pick].mean(), n, (beta, tau))[:2])
    lo, hi = (np.quantile(np.asarray(draws), [(1 - level) / 2, (1 + level) / 2], axis=0)
              if draws else np.full((2, 2), np.nan))
    return {"beta": beta, "tau": tau, "rms": rms, "beta_lo": float(lo[0]), "beta_hi": float(hi[0]),
            "tau_lo": float(lo[1]), "tau_hi": float(hi[1]), "prompts": int(len(curves))}
