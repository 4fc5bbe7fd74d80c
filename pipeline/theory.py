r"""Closed forms the simulated phase diagrams are checked against (derivations in docs/models.md).

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

Deterministic flows (docs/models.md section 2): the equiangular ODEs, the time t* at which they come
within delta of 1, Wendel's hemisphere probability and the causal solutions.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.polynomial import Chebyshev
from scipy import integrate, linalg, special, stats

__all__ = [
    "beta_c",
    "antipodal_probability_given_overlap",
    "antipodal_probability",
    "hybrid_sigma_c",
    "hybrid_antipodal_probability",
    "equiangular_rhs",
    "equiangular_gamma",
    "equiangular_rate",
    "t_star",
    "wendel_probability",
    "causal_first_token",
    "causal_token2_overlap",
]

_ATTENTIONS = ("sa", "usa")
_Y = 20.0  # |artanh rho| beyond which the integrands are exact exponentials (to e^-40)
_N_NODES = 512  # Gauss-Legendre nodes on [y0, Y]: within 1e-14 of 3000 nodes (d <= 20, beta <= 200)
_U, _W = special.roots_legendre(_N_NODES)
_U, _W = (_U + 1) / 2, _W / 2  # mapped to [0, 1]


def _check_attention(attention: str) -> str:
    key = str(attention).lower()
    if key not in _ATTENTIONS:
        raise ValueError(f"attention={attention!r} has no closed form here: use one of {_ATTENTIONS}")
    return key


def _check_d(d) -> int:
    if int(d) != d or d < 2:
        raise ValueError(f"d={d!r}: the sphere S^(d-1) needs an integer d >= 2")
    return int(d)


# --------------------------------------------------------------------------------------------
# Scale function machinery (shared by both two-token models)
# --------------------------------------------------------------------------------------------

def _chebfun(f, tol=1e-14, max_deg=1024) -> Chebyshev:
    """Chebyshev interpolant of f on [-1, 1], doubling the degree until the tail is negligible."""
    deg = 32
    while True:
        c = Chebyshev.interpolate(f, deg)
        if np.abs(c.coef[-4:]).max() <= tol * max(np.abs(c.coef).max(), 1.0) or deg >= max_deg:
            return c
        deg *= 2


def _scale_parts(G):
    """(alpha, gamma, H) with s'(r) = (1-r)^alpha (1+r)^gamma exp(-H(r)), from G = (1-r^2) 2b/a."""
    g_plus, g_minus = float(G(np.array(1.0))), float(G(np.array(-1.0)))

    def R(u):
        # Chebyshev points of the first kind never hit +-1, so the divided differences are fine.
        g = G(u)
        return 0.5 * ((g - g_plus) / (1 - u) + (g - g_minus) / (1 + u))

    return g_plus / 2, -g_minus / 2, _chebfun(R).integ(lbnd=0)


def _log_density(parts, y):
    """log of s'(r) dr/dy at r = tanh(y), computed from y so that 1 -+ r never round to 0."""
    alpha, gamma, H = parts
    log_1m = np.log(2) - np.logaddexp(0, 2 * y)  # log(1 - tanh y)
    log_1p = np.log(2) - np.logaddexp(0, -2 * y)  # log(1 + tanh y)
    return (1 + alpha) * log_1m + (1 + gamma) * log_1p - H(np.tanh(y))


def _integral(parts, y0, ref, c=None):
    """int_{y0}^{inf} s'(tanh y) (1 - tanh^2 y) [F(tanh y)] dy / e^ref, y0 >= -Y (array).

    Gauss-Legendre on [y0, Y]; beyond +-Y the log-integrand is linear up to O(e^{-2Y}), so the
    tails are exact exponentials: e^{L(Y)} / (2 (1 + alpha)) on the right and, when y0 = -Y, the
    left tail e^{L(-Y)} / (2 (1 + gamma + c)) (c = (d-1)/2 when the Beta CDF F is included).
    """
    alpha, gamma, _ = parts
    y0 = np.asarray(y0, dtype=float)[..., None]
    y = y0 + (_Y - y0) * _U

    def integrand(y):
        log_f = _log_density(parts, y) - ref
        if c is not None:
            log_f = log_f + np.log(special.betainc(c, c, (1 + np.tanh(y)) / 2) + 1e-300)
        return np.exp(log_f)

    body = (_Y - y0[..., 0]) * np.sum(_W * integrand(y), axis=-1)
    right = integrand(np.array(_Y)) / (2 * (1 + alpha))
    left = integrand(np.array(-_Y)) / (2 * (1 + gamma + (c or 0.0)))
    return body + right + np.where(y0[..., 0] <= -_Y, left, 0.0)


def _reference(parts):
    # common scale so that exp() neither overflows nor underflows where the mass is
    return np.max(_log_density(parts, np.linspace(-_Y, _Y, 401)))


def _probability_given_overlap(parts, rho0):
    alpha, gamma, H = parts
    rho0 = np.asarray(rho0, dtype=float)
    if alpha <= -1 and gamma <= -1:
        return np.full(rho0.shape, np.nan)  # neither boundary attracts: no limit
    if gamma <= -1:
        return np.where(rho0 == -1, 1.0, 0.0)
    if alpha <= -1:
        return np.where(rho0 == 1, 0.0, 1.0)
    ref = _reference(parts)
    with np.errstate(divide="ignore"):
        y0 = np.clip(np.arctanh(rho0), -_Y, _Y)
    return np.clip(_integral(parts, y0, ref) / _integral(parts, -_Y, ref), 0.0, 1.0)


def _probability_uniform_start(parts, d):
    alpha, gamma, H = parts
    if alpha <= -1 and gamma <= -1:
        return np.nan
    if gamma <= -1:
        return 0.0
    if alpha <= -1:
        return 1.0
    ref = _reference(parts)
    num = _integral(parts, -_Y, ref, c=(d - 1) / 2)
    return float(np.clip(num / _integral(parts, -_Y, ref), 0.0, 1.0))


# --------------------------------------------------------------------------------------------
# Deep stochastic transformer, two tokens (docs/models.md section 4)
# --------------------------------------------------------------------------------------------

def beta_c(d):
    """Critical inverse temperature above which the antipodal state -1 attracts.

    beta_c(d) = arccosh(d - 2) / 2 for d >= 3.  For d = 2 both outcomes attract for every beta;
    we return -inf so that the rule "antipodal possible iff beta > beta_c(d)" stays true.

    >>> float(beta_c(3)), round(float(beta_c(4)), 3), round(float(beta_c(8)), 3)
    (0.0, 0.658, 1.239)
    >>> float(beta_c(2))
    -inf
    """
    d = np.asarray(d)
    if np.any(d < 2):
        raise ValueError(f"d={d.tolist()!r}: the sphere S^(d-1) needs d >= 2")
    with np.errstate(invalid="ignore"):
        return np.where(d == 2, -np.inf, np.arccosh(np.maximum(d - 2.0, 1.0)) / 2)


@functools.lru_cache(maxsize=4096)
def _transformer_parts(beta: float, d: int):
    def G(r):
        return (d - 2) / np.cosh(np.minimum(beta * (1 - r), 700.0)) - r
    return _scale_parts(G)


def antipodal_probability_given_overlap(rho0, beta: float, d: int):
    """P(rho_inf = -1 | rho_0) for the two-token deep stochastic transformer (SA or USA).

    (s(1) - s(rho_0)) / (s(1) - s(-1)); 0 where -1 does not attract (beta <= beta_c(d)).
    For d = 2 this is arccos(rho_0) / pi (computed by the same quadrature, checked in tests).

    >>> round(float(antipodal_probability_given_overlap(0.0, 1.0, 2)), 12)
    0.5
    >>> float(antipodal_probability_given_overlap(0.3, 0.5, 4))  # beta < beta_c(4)
    0.0
    """
    d = _check_d(d)
    if not np.cosh(2 * beta) > d - 2:  # equality: single cluster with probability 1
        return np.zeros(np.shape(rho0))
    return _probability_given_overlap(_transformer_parts(float(beta), d), rho0)


def antipodal_probability(beta, d: int):
    """P(antipodal) for two tokens started independently uniform on S^(d-1).

    Vectorised over beta (cached per (beta, d)); 0 for beta <= beta_c(d), 1/2 for d = 2.

    >>> np.round(antipodal_probability([1.0, 2.0], 4), 3)
    array([0.12 , 0.281])
    """
    d = _check_d(d)
    b = np.asarray(beta, dtype=float)
    out = np.array([_antipodal_probability_scalar(float(x), d) for x in b.ravel()])
    return out.reshape(b.shape) if b.ndim else float(out[0])


@functools.lru_cache(maxsize=2**20)  # a report asks twice per cell; grids reach 10^6 cells
def _antipodal_probability_scalar(beta: float, d: int) -> float:
    if np.isnan(beta):
        return np.nan
    if not np.cosh(2 * beta) > d - 2:
        return 0.0
    return _probability_uniform_start(_transformer_parts(beta, d), d)


# --------------------------------------------------------------------------------------------
# Hybrid noise model, two tokens (docs/models.md section 5)
# --------------------------------------------------------------------------------------------

def _self_weights(beta, attention):
    """Self-attention weight p at rho = +1 and rho = -1 (n = 2, Q = K = I)."""
    if attention == "sa":
        return 0.5 + 0.0 * beta, 1 / (1 + np.exp(-2 * beta))
    return np.exp(beta) / 2, np.exp(beta) / 2


def hybrid_sigma_c(beta, attention: str = "usa"):
    """Noise thresholds (sigma_lo, sigma_hi) of the two-token hybrid model.

    +1 attracts iff sigma^2 < 1/p(+1) = sigma_hi^2, -1 attracts iff sigma^2 > 1/p(-1) = sigma_lo^2:
    single cluster for sigma < sigma_lo, antipodal for sigma > sigma_hi, both possible between.

    * USA (1/n, n = 2): p = e^beta / 2 constant, so sigma_lo = sigma_hi = sqrt(2 e^-beta), one
      sharp threshold (at equality neither boundary attracts);
    * SA: sigma_lo = sqrt(1 + e^-2beta), sigma_hi = sqrt(2), a bistable window.

    >>> lo, hi = hybrid_sigma_c(0.0, "usa"); float(lo), float(hi)
    (1.4142135623730951, 1.4142135623730951)
    >>> lo, hi = hybrid_sigma_c(1.0, "sa"); round(float(lo), 4), round(float(hi), 4)
    (1.0655, 1.4142)
    """
    attention = _check_attention(attention)
    p_plus, p_minus = _self_weights(np.asarray(beta, dtype=float), attention)
    return np.sqrt(1 / p_minus), np.sqrt(1 / p_plus)


@functools.lru_cache(maxsize=65536)
def _hybrid_scalar(beta: float, sigma: float, attention: str, d: int, rho0: float | None):
    s2 = sigma**2
    p_plus, p_minus = _self_weights(beta, attention)
    # strict, with a relative tolerance so that sigma = hybrid_sigma_c(...) counts as equality
    plus, minus = s2 * p_plus < 1 - 1e-12, s2 * p_minus > 1 + 1e-12
    if not (plus or minus):
        return np.nan
    if not minus:
        return 0.0
    if not plus:
        return 1.0
    if attention == "sa":
        def G(r):
            e = np.exp(np.minimum(beta * (1 - r), 700.0))  # 1/q = 1 + e^{beta (1 - r)}
            q = 1 / (1 + e)
            return (1 - s2 * (1 - q + 2 * q * r)) * (1 + e) / s2
    else:
        def G(r):
            return (1 - s2 * (np.exp(beta) / 2 + np.exp(beta * r) * r)) * 2 * np.exp(-beta * r) / s2
    parts = _scale_parts(G)
    if rho0 is None:
        return _probability_uniform_start(parts, d)
    return float(_probability_given_overlap(parts, rho0))


def hybrid_antipodal_probability(beta, sigma, attention: str = "usa", d: int = 3, rho0=None):
    """P(antipodal) of the two-token hybrid model, from the scale function of

        d rho = 2q (1 - rho^2) [1 - sigma^2 (p + 2 q rho)] dt + 2 sigma q (1 - rho^2) dB,

    averaged over uniform starts on S^(d-1) (or at the given initial overlap rho0).  Vectorised
    over broadcast beta, sigma (and rho0); NaN where neither boundary attracts (USA at
    sigma = sigma_c exactly), 0 below sigma_lo, 1 above sigma_hi.

    >>> float(hybrid_antipodal_probability(1.0, 0.5, "sa")), float(hybrid_antipodal_probability(1.0, 2.0, "sa"))
    (0.0, 1.0)
    """
    attention, d = _check_attention(attention), _check_d(d)
    if np.any(np.asarray(sigma) < 0):
        raise ValueError(f"sigma={sigma!r} must be >= 0")
    b, s, r = np.broadcast_arrays(np.asarray(beta, float), np.asarray(sigma, float),
                                  np.asarray(np.nan if rho0 is None else rho0, float))
    out = np.array([
        _hybrid_scalar(float(x), float(y), attention, d, None if rho0 is None else float(z))
        for x, y, z in zip(b.ravel(), s.ravel(), r.ravel())
    ])
    return out.reshape(b.shape) if b.ndim else float(out[0])


# --------------------------------------------------------------------------------------------
# Deterministic flows (docs/models.md section 2)
# --------------------------------------------------------------------------------------------

def equiangular_rhs(gamma, beta: float, n: int, attention: str = "sa"):
    """d gamma / dt for the equiangular start (every pairwise overlap equals gamma).

    SA:  2 (1 - g) ((n-1) g + 1) / (exp(beta (1 - g)) + n - 1)
    USA: (2/n) exp(beta g) (1 - g) ((n-1) g + 1)
    """
    attention, g = _check_attention(attention), np.asarray(gamma, dtype=float)
    if attention == "sa":
        return 2 * (1 - g) * ((n - 1) * g + 1) / (np.exp(beta * (1 - g)) + n - 1)
    return (2 / n) * np.exp(beta * g) * (1 - g) * ((n - 1) * g + 1)


def equiangular_rate(beta: float, n: int, attention: str = "sa") -> float:
    """Late-time exponential rate of 1 - gamma(t): 2 for SA, 2 e^beta for USA (any n)."""
    return 2.0 if _check_attention(attention) == "sa" else 2.0 * np.exp(beta)


def _log_gap_rhs(beta, n, attention):
    # y = log(1 - gamma): y' = -gamma' / (1 - gamma), free of cancellation as gamma -> 1.
    def rhs(t, y):
        g = -np.expm1(y)
        if attention == "sa":
            return -2 * ((n - 1) * g + 1) / (np.exp(beta * (1 - g)) + n - 1)
        return -(2 / n) * np.exp(beta * g) * ((n - 1) * g + 1)
    return rhs


def equiangular_gamma(t, beta: float, n: int, attention: str = "sa"):
    """gamma(t) for the equiangular start, gamma(0) = 0 (solve_ivp on log(1 - gamma), rtol 1e-12).

    >>> round(float(equiangular_gamma(0.0, 1.0, 4)), 12)
    0.0
    """
    attention, t = _check_attention(attention), np.asarray(t, dtype=float)
    t_end = float(t.max()) if t.size else 0.0
    if t_end <= 0:
        return np.zeros(t.shape)
    sol = integrate.solve_ivp(_log_gap_rhs(beta, n, attention), (0.0, t_end), [0.0], method="DOP853",
                              rtol=1e-12, atol=1e-14, dense_output=True)
    return -np.expm1(sol.sol(t)[0])


def t_star(beta, n: int, delta: float = 1e-3, attention: str = "sa"):
    """Time at which the equiangular overlap reaches 1 - delta ([GLPR-P] Fig. 3 curve).

    With y = log(1 - gamma), y' = f(y) < 0 on [log delta, 0] (`_log_gap_rhs`), so y is monotone
    and the hitting time is a quadrature, not an ODE solve plus a root search:

        t* = int_{log delta}^{0} dy / |f(y)|,

    whose integrand is smooth and bounded (|f| >= 2 / (e^beta + n - 1) for SA, >= 2/n for USA).
    Adaptive Gauss-Kronrod (scipy.integrate.quad) to 1e-12 relative; the same value as integrating
    the ODE to the crossing, at a fraction of the cost (reports draw t* on a dense beta grid).

    >>> round(float(t_star(1.0, 32)), 2), round(float(t_star(1.0, 32, attention="usa")), 2)
    (5.27, 2.9)
    """
    attention = _check_attention(attention)
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta!r}: the gap 1 - gamma must reach a delta in (0, 1)")
    b = np.asarray(beta, dtype=float)
    out = []
    for x in b.ravel():
        rhs = _log_gap_rhs(float(x), n, attention)
        value, _ = integrate.quad(lambda y: -1.0 / rhs(0.0, y), np.log(delta), 0.0, epsabs=0.0,
                                  epsrel=1e-12, limit=200)
        out.append(value)
    out = np.array(out)
    return out.reshape(b.shape) if b.ndim else float(out[0])


def wendel_probability(n, d):
    """P(n i.i.d. uniform points on S^(d-1) lie in an open hemisphere) (Wendel 1962).

    2^-(n-1) sum_{k=0}^{d-1} C(n-1, k): the sum stops at d - 1 ([RST] Remark 4.3 stops one term early,
    at d - 2; docs/models.md section 2).

    >>> float(wendel_probability(3, 3)), float(wendel_probability(4, 2)), float(wendel_probability(5, 3))
    (1.0, 0.5, 0.6875)
    """
    n, d = np.asarray(n), np.asarray(d)
    if np.any(n < 1) or np.any(d < 1):
        raise ValueError(f"n={n.tolist()!r}, d={d.tolist()!r}: need n >= 1 and d >= 1")
    return stats.binom.cdf(d - 1, n - 1, 0.5)


def causal_first_token(x1_0, V, t):
    """Causal attention, token 1 attends only to itself: x_1(t) = N(e^{tV} x_1(0)).

    Returns shape (d,) for scalar t, (len(t), d) for an array of times.
    """
    x, V, t = np.asarray(x1_0, float), np.asarray(V, float), np.asarray(t, float)
    ys = np.array([linalg.expm(s * V) @ x for s in t.ravel()])
    ys /= np.linalg.norm(ys, axis=-1, keepdims=True)
    return ys.reshape(t.shape + x.shape)


def causal_token2_overlap(a0, beta: float, t):
    """a(t) = <x_1(0), x_2(t)> for causal SA, V = Q = K = I, two tokens (time in SA units).

    Solves a' = (1 - a^2) e^{beta a} / (e^{beta a} + e^beta) as y = artanh(a),
    y' = 1 / (1 + e^{beta (1 - a)}), which stays bounded as a -> 1.  a0 = +-1 are fixed points.
    For beta = 0: a(t) = tanh(artanh(a0) + t/2).  Returns shape broadcast(a0) + shape(t).
    """
    a0, t = np.asarray(a0, float), np.asarray(t, float)
    out = np.empty(a0.shape + t.shape)
    inner = np.abs(a0) < 1
    out[~inner] = a0[~inner][..., None] if t.ndim else a0[~inner]
    if inner.any():
        y0 = np.arctanh(a0[inner])
        t_end = float(t.max())
        if t_end <= 0:
            ys = np.repeat(y0[:, None], t.size, axis=1)
        else:
            sol = integrate.solve_ivp(lambda s, y: 1 / (1 + np.exp(beta * (1 - np.tanh(y)))),
                                      (0.0, t_end), y0, method="DOP853", rtol=1e-12, atol=1e-12,
                                      dense_output=True)
            ys = sol.sol(t.ravel())
        out[inner] = np.tanh(ys).reshape((-1,) + t.shape)
    return out
