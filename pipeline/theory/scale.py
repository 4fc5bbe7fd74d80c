r"""The scale function of a two-token overlap diffusion, and the probabilities it gives (the
machinery `two_token` and `finite` share; derivations in docs/models.md).

Two-token overlap diffusions (docs/models.md sections 4 and 5)
----------------------------------------------------------
For two tokens the overlap rho = <x_1, x_2> is a 1-D diffusion on [-1, 1] with drift b and
variance a.  Everything we need is the ratio 2b/a, written as G(rho) / (1 - rho^2) with G smooth:

* deep stochastic transformer (SA and USA alike, Q = K = I):
  G(rho) = (d - 2) / cosh(beta (1 - rho)) - rho;
* hybrid model: G(rho) = [1 - sigma^2 (p + 2 q rho)] / (sigma^2 q), with p, q the self and cross
  attention weights (SA: softmax of (beta, beta rho); USA: e^beta / 2 and e^{beta rho} / 2).

The scale density s'(r) = exp(-int_0^r 2b/a) then factorises exactly (partial fractions) as

    s'(r) = (1 - r)^alpha (1 + r)^gamma exp(-H(r)),   alpha = G(1)/2,  gamma = -G(-1)/2,
    H(r) = int_0^r R,  R(u) = (G(u) - G(1)) / (2 (1 - u)) + (G(u) - G(-1)) / (2 (1 + u)),

with R smooth: the endpoint singularities are carried by the two powers, analytically.  A
boundary is attracting iff s' is integrable there: +1 iff alpha > -1, -1 iff gamma > -1.  When
both are, P(rho_inf = -1 | rho_0) = int_{rho_0}^1 s' / int_{-1}^1 s'.

Numerics: R is expanded in a Chebyshev series (adaptive degree; R is analytic, its poles sit at
Re u = 1 a distance ~ pi / (2 beta) off the axis) and integrated exactly.  The integrals of s'
are taken in y = artanh(r), where s'(r) dr = exp(L(y)) dy with
L(y) = (1 + alpha) log(1 - r) + (1 + gamma) log(1 + r) - H(r), both logs computed from y.  The
integrand is smooth (analytic in a strip of half-width >= pi/4, whatever beta: a boundary layer
of width 1/beta at r = 1 becomes O(1) wide in y) and decays like exp(-2 (1 + alpha) y) and
exp(-2 (1 + gamma) |y|): Gauss-Legendre on [-Y, Y] plus the two exponential tails, which are
exact up to O(e^{-2Y}).  This is what handles the near non-integrable end -1 close to beta_c,
where 1 + gamma -> 0.  Everything is kept in log space (L is shifted by its maximum), so large
beta d neither overflows nor underflows.

For independent uniform starts on S^{d-1}, (1 + rho_0) / 2 ~ Beta((d-1)/2, (d-1)/2), and the
averaged probability is int s' F / int s' with F that CDF.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import Chebyshev
from scipy import special

__all__ = ["ATTENTIONS", "check_attention", "check_d", "chebfun", "scale_parts", "log_density", "integral",
           "reference", "probability_given_overlap", "probability_uniform_start"]

ATTENTIONS = ("sa", "usa")
_Y = 20.0  # |artanh rho| beyond which the integrands are exact exponentials (to e^-40)
_N_NODES = 512  # Gauss-Legendre nodes on [y0, Y]: within 1e-14 of 3000 nodes (d <= 20, beta <= 200)
_U, _W = special.roots_legendre(_N_NODES)
_U, _W = (_U + 1) / 2, _W / 2  # mapped to [0, 1]


def check_attention(attention: str) -> str:
    key = str(attention).lower()
    if key not in ATTENTIONS:
        raise ValueError(f"attention={attention!r} has no closed form here: use one of {ATTENTIONS}")
    return key


def check_d(d) -> int:
    if int(d) != d or d < 2:
        raise ValueError(f"d={d!r}: the sphere S^(d-1) needs an integer d >= 2")
    return int(d)


# --------------------------------------------------------------------------------------------
# Scale function machinery (shared by both two-token models)
# --------------------------------------------------------------------------------------------

def chebfun(f, tol=1e-14, max_deg=1024) -> Chebyshev:
    """Chebyshev interpolant of f on [-1, 1], doubling the degree until the tail is negligible."""
    deg = 32
    while True:
        c = Chebyshev.interpolate(f, deg)
        if np.abs(c.coef[-4:]).max() <= tol * max(np.abs(c.coef).max(), 1.0) or deg >= max_deg:
            return c
        deg *= 2


def scale_parts(G):
    """(alpha, gamma, H) with s'(r) = (1-r)^alpha (1+r)^gamma exp(-H(r)), from G = (1-r^2) 2b/a."""
    g_plus, g_minus = float(G(np.array(1.0))), float(G(np.array(-1.0)))

    def R(u):
        # Chebyshev points of the first kind never hit +-1, so the divided differences are fine.
        g = G(u)
        return 0.5 * ((g - g_plus) / (1 - u) + (g - g_minus) / (1 + u))

    return g_plus / 2, -g_minus / 2, chebfun(R).integ(lbnd=0)


def log_density(parts, y):
    """log of s'(r) dr/dy at r = tanh(y), computed from y so that 1 -+ r never round to 0."""
    alpha, gamma, H = parts
    log_1m = np.log(2) - np.logaddexp(0, 2 * y)  # log(1 - tanh y)
    log_1p = np.log(2) - np.logaddexp(0, -2 * y)  # log(1 + tanh y)
    return (1 + alpha) * log_1m + (1 + gamma) * log_1p - H(np.tanh(y))


def integral(parts, y0, ref, c=None):
    """int_{y0}^{inf} s'(tanh y) (1 - tanh^2 y) [F(tanh y)] dy / e^ref, y0 >= -Y (array).

    Gauss-Legendre on [y0, Y]; beyond +-Y the log-integrand is linear up to O(e^{-2Y}), so the
    tails are exact exponentials: e^{L(Y)} / (2 (1 + alpha)) on the right and, when y0 = -Y, the
    left tail e^{L(-Y)} / (2 (1 + gamma + c)) (c = (d-1)/2 when the Beta CDF F is included).
    """
    alpha, gamma, _ = parts
    y0 = np.asarray(y0, dtype=float)[..., None]
    y = y0 + (_Y - y0) * _U

    def integrand(y):
        log_f = log_density(parts, y) - ref
        if c is not None:
            log_f = log_f + np.log(special.betainc(c, c, (1 + np.tanh(y)) / 2) + 1e-300)
        return np.exp(log_f)

    body = (_Y - y0[..., 0]) * np.sum(_W * integrand(y), axis=-1)
    right = integrand(np.array(_Y)) / (2 * (1 + alpha))
    left = integrand(np.array(-_Y)) / (2 * (1 + gamma + (c or 0.0)))
    return body + right + np.where(y0[..., 0] <= -_Y, left, 0.0)


def reference(parts):
    # common scale so that exp() neither overflows nor underflows where the mass is
    return np.max(log_density(parts, np.linspace(-_Y, _Y, 401)))


def probability_given_overlap(parts, rho0):
    alpha, gamma, H = parts
    rho0 = np.asarray(rho0, dtype=float)
    if alpha <= -1 and gamma <= -1:
        return np.full(rho0.shape, np.nan)  # neither boundary attracts: no limit
    if gamma <= -1:
        return np.where(rho0 == -1, 1.0, 0.0)
    if alpha <= -1:
        return np.where(rho0 == 1, 0.0, 1.0)
    ref = reference(parts)
    with np.errstate(divide="ignore"):
        y0 = np.clip(np.arctanh(rho0), -_Y, _Y)
    return np.clip(integral(parts, y0, ref) / integral(parts, -_Y, ref), 0.0, 1.0)


def probability_uniform_start(parts, d):
    alpha, gamma, H = parts
    if alpha <= -1 and gamma <= -1:
        return np.nan
    if gamma <= -1:
        return 0.0
    if alpha <= -1:
        return 1.0
    ref = reference(parts)
    num = integral(parts, -_Y, ref, c=(d - 1) / 2)
    return float(np.clip(num / integral(parts, -_Y, ref), 0.0, 1.0))
