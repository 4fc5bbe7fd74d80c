"""Noise on the sphere attention flows: one projected Euler-Maruyama step with retraction.

The SDE (Ito, tokens on S^{d-1}, docs/models.md section 7):

    dx_i = P_{x_i}(A_i(X)) dt + sigma P_{x_i} dW_i - ((d - 1) sigma^2 / 2) x_i dt,

with W_i independent standard Brownian motions in R^d ("independent": per-token noise) or one
W shared by all tokens ("common" noise), and P_x y = y - <x, y> x. Without drift each token is a
Brownian motion on the sphere with generator (sigma^2 / 2) Laplacian; the last term is the Ito
correction that keeps |x_i| = 1, and the retraction below produces it: the step

    x_i <- N( x_i + h F_i(x, t) + sigma sqrt(h) P_{x_i} xi_i ),   N(y) = y / |y|,

(F the drift of `sphere.drift.field`, xi_i standard normal in R^d) is the retraction Euler step of
the deterministic flow plus a projected Gaussian increment; |x + s P xi|^2 = 1 + s^2 |P xi|^2 + O(h)
gives the -(d - 1) sigma^2 h / 2 x drift to first order, so the scheme converges weakly (order 1)
to the SDE above.

Random numbers: per step, after any matrix redraw of that step, from the trajectory's own
Generator: n*d standard normals row-major (xi_i = z[i*d : (i+1)*d], as rng.standard_normal((n, d)))
for "independent", d standard normals (one xi for every token) for "common".
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (numba's cache folder, before any decoration)
from ..lowlevel.vecmath import tiny_like
from .drift import field

NONE = 0
INDEPENDENT = 1
COMMON = 2
NOISE_CODES = {"independent": INDEPENDENT, "common": COMMON}


@njit(nogil=True, cache=True, inline="always")
def noisy_euler_step(x, t, h, par, mats, ws, ls, f, rng, mode, sigma):
    """x (n, d) <- the projected Euler-Maruyama step with retraction (module docstring), in place.

    par, mats, ws: as `sphere.drift.step`; ls (n,), f (n, d): scratch in x's dtype; rng: the
    trajectory's Generator; mode: INDEPENDENT or COMMON; sigma > 0. False if non-finite.
    """
    n, d = x.shape
    field(x, t, par, mats, ws, ls, f)
    z = rng.standard_normal(n * d if mode == INDEPENDENT else d)
    s = sigma * np.sqrt(h)
    for i in range(n):
        o = i * d if mode == INDEPENDENT else 0
        dot = 0.0
        for k in range(d):
            dot += x[i, k] * z[o + k]
        norm2 = 0.0
        for k in range(d):
            y = x[i, k] + h * f[i, k] + s * (z[o + k] - dot * x[i, k])
            f[i, k] = y
            norm2 += y * y
        if not (norm2 >= tiny_like(x) and norm2 < np.inf):
            return False
        r = 1.0 / np.sqrt(norm2)
        for k in range(d):
            x[i, k] = f[i, k] * r
    return True


def resolve_noise(noise, sigma, integrator):
    """(mode code, sigma) for the kernels; (0, 0.0) when there is no noise."""
    if noise is None:
        if sigma != 0.0:
            raise ValueError(f"sigma = {sigma!r} needs noise = 'independent' or 'common'")
        return (0, 0.0)
    if noise not in NOISE_CODES:
        raise ValueError(f"noise = {noise!r} is unknown: use None or one of {tuple(NOISE_CODES)}")
    if not (np.isfinite(sigma) and sigma >= 0.0):
        raise ValueError(f"sigma = {sigma!r}, but the noise strength must be finite and >= 0")
    if sigma > 0.0 and integrator != "euler":
        raise ValueError(f"noise needs integrator = 'euler' (Euler-Maruyama), got {integrator!r}")
    return (NOISE_CODES[noise], float(sigma))
