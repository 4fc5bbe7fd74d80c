"""Closed forms of the deterministic flows (docs/models.md section 2): the equiangular ODEs, the time
t* at which they come within delta of 1, Wendel's hemisphere probability and the causal solutions.
"""

from __future__ import annotations

import numpy as np

from .scale import check_attention

# scipy's integrate, linalg and stats are imported by the functions that use them: every command
# imports this module through the model registry, and they cost ~0.9 s (`tokensweep status`)

__all__ = ["equiangular_rhs", "equiangular_gamma", "equiangular_rate", "t_star", "wendel_probability",
           "causal_first_token", "causal_token2_overlap"]


def equiangular_rhs(gamma, beta: float, n: int, attention: str = "sa"):
    """d gamma / dt for the equiangular start (every pairwise overlap equals gamma).

    SA:  2 (1 - g) ((n-1) g + 1) / (exp(beta (1 - g)) + n - 1)
    USA: (2/n) exp(beta g) (1 - g) ((n-1) g + 1)
    """
    attention, g = check_attention(attention), np.asarray(gamma, dtype=float)
    if attention == "sa":
        return 2 * (1 - g) * ((n - 1) * g + 1) / (np.exp(beta * (1 - g)) + n - 1)
    return (2 / n) * np.exp(beta * g) * (1 - g) * ((n - 1) * g + 1)


def equiangular_rate(beta: float, n: int, attention: str = "sa") -> float:
    """Late-time exponential rate of 1 - gamma(t): 2 for SA, 2 e^beta for USA (any n)."""
    return 2.0 if check_attention(attention) == "sa" else 2.0 * np.exp(beta)


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
    from scipy import integrate
    attention, t = check_attention(attention), np.asarray(t, dtype=float)
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
    from scipy import integrate
    attention = check_attention(attention)
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta!r}: the gap 1 - gamma must reach a delta in (0, 1)")
    b = np.asarray(beta, dtype=float)
    out = []
    for x in b.ravel():
        rhs = _log_gap_rhs(float(x), n, attention)
        value, _ = integrate.quad(lambda y, rhs=rhs: -1.0 / rhs(0.0, y), np.log(delta), 0.0, epsabs=0.0,
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
    from scipy import stats
    n, d = np.asarray(n), np.asarray(d)
    if np.any(n < 1) or np.any(d < 1):
        raise ValueError(f"n={n.tolist()!r}, d={d.tolist()!r}: need n >= 1 and d >= 1")
    return stats.binom.cdf(d - 1, n - 1, 0.5)


def causal_first_token(x1_0, V, t):
    """Causal attention, token 1 attends only to itself: x_1(t) = N(e^{tV} x_1(0)).

    Returns shape (d,) for scalar t, (len(t), d) for an array of times.
    """
    from .turning import turning_first_token  # the same flow with V not turning (omega = 0)

    return turning_first_token(x1_0, V, 0.0, 0.0, t)


def causal_token2_overlap(a0, beta: float, t):
    """a(t) = <x_1(0), x_2(t)> for causal SA, V = Q = K = I, two tokens (time in SA units).

    Solves a' = (1 - a^2) e^{beta a} / (e^{beta a} + e^beta) as y = artanh(a),
    y' = 1 / (1 + e^{beta (1 - a)}), which stays bounded as a -> 1.  a0 = +-1 are fixed points.
    For beta = 0: a(t) = tanh(artanh(a0) + t/2).  Returns shape broadcast(a0) + shape(t).
    """
    from scipy import integrate
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
