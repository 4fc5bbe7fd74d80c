"""Reference integrator of the stochastic transformer's limit SDE ([F26] Thm 1; docs/models.md 4.4).

The limit of the discrete model (kernels/stochastic/transformer.py) as h -> 0 is the Ito SDE on the sphere

    dx_i = P_{x_i} dW A_i(X) - ((d-1)/2) s^2 |A_i|^2 x_i dt,

W a d x d Brownian matrix, entries of variance s^2 per unit time, common to all tokens. Scheme
`sde` integrates it by geometric Euler-Maruyama with the exponential map: over a step h, with
dW the increment (entries N(0, s^2 h)),

    v_i = P_{x_i} dW A_i(X),     x_i <- exp_{x_i}(v_i) = cos|v_i| x_i + sin|v_i| v_i / |v_i|

(then renormalised against rounding). The Ito drift is radial and the geodesic step makes it:
exp_x(v) = x + v - (|v|^2 / 2) x + O(|v|^3) and E|v_i|^2 = (d-1) s^2 |A_i|^2 h; the increments
have mean 0, covariance s^2 h <A_i, A_j> P_{x_i} P_{x_j} and vanishing third moments, so the scheme
has weak order 1. It differs from the discrete model (x_i <- N(x_i + dW A_i)) by the term
-<x_i, dW A_i> P_{x_i} dW A_i, of mean zero, per step: both tend to the same law as h -> 0, from
different O(h) biases (tests/test_stochastic_options.py checks both against the closed form).

Random stream: the start (n*d normals) as the discrete model's, then per step the r*d normals of
the exact Gaussian factor (`attention.householder_r`, `gaussian_values`, r = min(n, d)) that give
dW A_i in law: the same numbers as `noise: gaussian`, so the two schemes run on the same Brownian
increments. USA's scale e^{c_i} multiplies the step: a non-finite step stops the trajectory
(flagged nonfinite), as in the discrete model. Q, K: logits beta <x_i, M x_j>, M = Q^T K, as
there. Early stopping, checkpoints and outputs: as kernels/stochastic/transformer.py.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
)
from ..attention import attention, gaussian_values, gram, householder_r, normalize_row, normalize_rows, uniform_start
from ..outcomes import finish_trajectory, record_overlaps, resolved_for
from .general import stop
from .options import bilinear_logits

__all__ = ["geodesic_step"]


@njit(nogil=True, cache=True)
def geodesic_step(x, sqrt_h, logscale, direction):
    """x_i <- exp_{x_i}(v_i), v_i = sqrt_h e^{c_i} P_{x_i} direction_i (direction is overwritten
    with v). False if a step is non-finite or leaves a zero row."""
    n, d = x.shape
    for i in range(n):
        coef = sqrt_h * np.exp(logscale[i])
        dot = 0.0
        for k in range(d):
            dot += x[i, k] * direction[i, k]
        norm2 = 0.0
        for k in range(d):
            v = coef * (direction[i, k] - dot * x[i, k])
            direction[i, k] = v
            norm2 += v * v
        theta = np.sqrt(norm2)
        if not theta < np.inf:
            return False
        if theta > 0.0:
            cs = np.cos(theta)
            sn = np.sin(theta) / theta
            for k in range(d):
                x[i, k] = cs * x[i, k] + sn * direction[i, k]
        if not normalize_row(x, i):
            return False
    return True


@njit(nogil=True, cache=True)
def trajectory_sde(rng, x, draw_start, beta, att, s, h, layers, ckpt, times, eps, batch, window,
                   out, r, states, m):
    """Integrate trajectory r by the geodesic scheme; arguments as `stochastic.transformer._trajectory`
    (steps = layers, m: (d, d) Q^T K or (0, 0) for Q = K = I)."""
    n, d = x.shape
    qk = m.shape[0] > 0
    keep = states.shape[1] > 0
    ok = uniform_start(rng, x) if draw_start else normalize_rows(x)
    observables.record_start(x, out, r)
    rank = min(n, d)
    per_layer = rank * d
    ahat = np.empty((n, d))
    direction = np.empty((n, d))
    rfac = np.zeros((rank, n))
    logscale = np.empty(n)
    w = np.empty((n, n))
    g = np.empty((n, n))
    sqrt_h = np.sqrt(h)
    buf = np.empty(0)
    pos = np.int64(0)  # int64s, not literals (kernels/__init__.py)
    c = np.int64(0)
    for layer in range(layers):
        if not ok:
            break
        if pos == buf.shape[0]:
            buf = rng.standard_normal(min(batch, layers - layer) * per_layer)
            pos = np.int64(0)
        if qk:
            bilinear_logits(x, m, direction, g)
        else:
            gram(x, g)
        attention(x, g, beta, att, ahat, logscale, w)
        householder_r(ahat, rfac)
        gaussian_values(rfac, buf, pos, s, direction)
        pos += per_layer
        ok = geodesic_step(x, sqrt_h, logscale, direction)
        if ok and layer + 1 == ckpt[c]:
            gram(x, g)
            record_overlaps(g, eps, out, r, c)
            observables.observe(x, g, beta, out, r, c)
            if keep:
                states[r, c] = x
            if resolved_for(out, r, c, window):
                stop(out, r, c, states, x)
                break
            c += 1
    finish_trajectory(out, r, ok, times)

