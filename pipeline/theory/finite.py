r"""Finite-T outcome probabilities of the two-token overlap diffusions (docs/models.md section 4.5).

For two tokens the overlap rho = <x_1, x_2> solves d rho = b(rho) dt + sqrt(a(rho)) dB on [-1, 1]
(`theory`: the deep stochastic transformer, section 4.2, and the hybrid model, section 5). The
kernels classify a pair at checkpoint t as antipodal when rho_t <= -1 + eps and as one cluster when
rho_t >= 1 - eps (`kernels/outcomes.py`), unresolved otherwise. The probabilities of these classes
at time T from rho_0 = r,

    u_-(r, T) = P_r(rho_T <= -1 + eps),   u_+(r, T) = P_r(rho_T >= 1 - eps),

solve the backward Kolmogorov equation

    u_T = b(r) u_r + (a(r) / 2) u_rr,   u(r, 0) = 1{r <= -1 + eps}  (resp. 1{r >= 1 - eps}),

and the unresolved fraction is 1 - u_- - u_+. The ends r = +-1 are never reached in finite time
([F26] Lemma 6), so the problem is posed on the whole interval with no absorption: absorbing the
pair at -1 + eps would answer another question, whose T -> infinity limit differs from
P(rho_inf = -1) of `theory` by a relative O(eps^(1 + gamma)) (3 % at gamma = -1/2, eps = 1e-3).
As T -> infinity u_- tends to that closed form, since rho_t -> +-1 almost surely.

Discretisation. a vanishes like (1 - r^2)^2 at both ends, so we work in y = artanh(r), where
(Ito) dy = B(y) dt + sqrt(A(y)) dB with bounded coefficients tending to constants at +-infinity:

    A = a / (1 - r^2)^2,   B = A (G(r) / 2 + r),   G = (1 - r^2) 2b / a (`theory`),

stochastic: A = 2 s^2 (p^2 + q^2), B = (A / 2) ((d - 2) / cosh(beta (1 - r)) + r);
hybrid:     A = 4 sigma^2 q^2,      B = 2 q (1 - sigma^2 p),

every factor computed from y (1 -+ r = 2 expit(-+2y)), so nothing cancels near +-1. The line is
cut at |y| = Y, with Dirichlet values u_-(-Y) = 1, u_-(Y) = 0 (u_+ mirrored): beyond the far
field the coefficients are constants (A_e, B_e), and the value there is wrong only if the path
crosses the distance D between the band edge and Y against the drift, with probability at most
min(exp(-2 |B_e| D / A_e), 2 Phi(-D / sqrt(A_e T))) (gambler's ruin, reflection principle). D is
chosen to make that <= 1e-9, and Y >= 25, beyond which the uniform start law has < 1e-10 of its
mass. The cut-off line is mapped to a uniform grid in xi by
y = c sinh(xi), c = artanh(1 - eps) (resolution near the band, a grid growing like y far out), and
the operator discretised by three-point differences with Il'in-Allen-Southwell exponential fitting
(the diffusion multiplied by P coth P, P the cell Peclet number): second order where P is small,
monotone (an M-matrix) for every P, so the far field, where the drift dominates, gives neither
oscillations nor negative probabilities. The band edge is a grid node carrying the value 1/2 of
the indicator, which keeps the start's discontinuity from costing an order. The method of lines
is integrated by `scipy.integrate.solve_ivp` (BDF, sparse constant Jacobian; the initial jump is
resolved by its adaptive steps; rtol 1e-6, atol 1e-9 change no probability by 1e-8 against 1e-8 and
1e-11, far below the grid's error). `tests/test_theory_finite.py` checks the second-order grid
convergence, the T -> infinity limit and a long simulation through the real kernel.

Start laws: a given rho_0 (cubic spline in xi), or independent uniform tokens, rho_0 with density
proportional to (1 - r^2)^((d-3)/2), i.e. sech(y)^(d-1) in y (trapezoid rule on the grid).

One solve serves every time up to its last: BDF's steps do not depend on the times it reports
(`t_eval` reads its interpolant), so a time asked alone or among others gets the same value to
~1e-16. A caller that will ask again at other times of the same horizon passes them all as
`along` (`report_times`: the checkpoints and a dense grid): the solves are cached by the whole set,
so the sections of one report (the table at T, the horizon curves, the dominant class) share one.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy import integrate, interpolate, sparse, special, stats

from .scale import check_attention, check_d

__all__ = ["Outcomes", "stochastic_outcomes", "hybrid_outcomes", "report_times", "RESOLUTION",
           "DENSE_INTERVALS"]

RESOLUTION = 48  # grid intervals between y = 0 and the band edge: ~1e-5 of the fine-grid values
DENSE_INTERVALS = 80  # a report's theory curves: t = k T / 80
_TOL = 1e-9  # bound on the probability that the cut at |y| = Y changes a value
_Y_MIN = 25.0  # 2 e^(-25) < 1e-10: the tail mass of sech(y)^(d-1) / 2 beyond, d >= 2


class Outcomes(NamedTuple):
    """Class probabilities at the requested times: P(antipodal), P(single cluster), the rest."""

    antipodal: np.ndarray
    single: np.ndarray
    unresolved: np.ndarray


def _expit_pair(x):
    """(1 / (1 + e^-x), 1 / (1 + e^x)) without overflow."""
    return special.expit(x), special.expit(-x)


def _one_minus_r(y):
    return 2 * special.expit(-2 * y)  # 1 - tanh(y), exact for large y


def _stochastic_coefficients(beta: float, d: int, attention: str, value_std: float):
    s2 = value_std**2

    def coefficients(y):
        r, gap = np.tanh(y), _one_minus_r(y)
        x = beta * gap  # beta (1 - r) >= 0
        if attention == "sa":
            p, q = _expit_pair(x)
            norm = p**2 + q**2
        else:  # USA: p = e^beta / 2, q = e^(beta r) / 2
            norm = (np.exp(2 * beta) + np.exp(2 * beta * r)) / 4
        A = 2 * s2 * norm
        return A, (A / 2) * ((d - 2) / np.cosh(np.minimum(x, 700.0)) + r)

    return coefficients


def _hybrid_coefficients(beta: float, sigma: float, attention: str):
    s2 = sigma**2

    def coefficients(y):
        r = np.tanh(y)
        if attention == "sa":
            p, q = _expit_pair(beta * _one_minus_r(y))
        else:
            p, q = np.exp(beta) / 2 + 0 * y, np.exp(beta * r) / 2
        return 4 * s2 * q**2, 2 * q * (1 - s2 * p)

    return coefficients


def _half_width(coefficients, y_band: float, t_end: float) -> float:
    """Y such that the Dirichlet values at +-Y change no probability by more than _TOL."""
    probe = np.linspace(-y_band - 12, y_band + 12, 241)
    A_all, _ = coefficients(probe)
    worst = _Y_MIN  # the uniform start law holds < 1e-10 of its mass beyond (any d >= 2)
    for end in (-1.0, 1.0):
        A_e, B_e = (float(v) for v in coefficients(np.array(end * (y_band + 12))))
        A_e = max(A_e, float(A_all.max()))
        ruin = A_e * np.log(1 / _TOL) / (2 * abs(B_e)) if B_e != 0 else np.inf
        spread = stats.norm.isf(_TOL / 2) * np.sqrt(A_e * t_end) if np.isfinite(t_end) else np.inf
        worst = max(worst, y_band + 2 + min(ruin, spread))
    return float(min(worst, 1e5))


def _operator(coefficients, xi, c):
    """Sparse generator on the xi grid (Dirichlet rows zero), with exponential fitting."""
    h = xi[1] - xi[0]
    y = c * np.sinh(xi)
    g1, g2 = c * np.cosh(xi), c * np.sinh(xi)  # dy/dxi, d2y/dxi2
    A, B = coefficients(y)
    diff = A / (2 * g1**2)  # u_yy = (u_xixi - (g2/g1) u_xi) / g1^2
    conv = B / g1 - A * g2 / (2 * g1**3)
    peclet = conv * h / (2 * diff)
    with np.errstate(invalid="ignore", divide="ignore"):
        fit = np.where(np.abs(peclet) < 1e-8, 1.0, peclet / np.tanh(peclet))
    diff = diff * fit
    lower, upper = diff / h**2 - conv / (2 * h), diff / h**2 + conv / (2 * h)
    main = -(lower + upper)
    for v in (lower, upper, main):
        v[[0, -1]] = 0.0  # the cut-off ends hold their Dirichlet values
    return sparse.diags([lower[1:], main, upper[:-1]], [-1, 0, 1], format="csc")


def report_times(T: float, checkpoints=()) -> tuple:
    """The times a report at horizon T asks for: k T / DENSE_INTERVALS (k = 1..) and the
    checkpoints, sorted, once each (pass them as `along`: one solve then answers every section).

    >>> len(report_times(10.0, [2.5, 10.0])), len(report_times(10.0, [3.1]))  # 2.5 is on the grid
    (80, 81)
    """
    dense = np.linspace(0.0, float(T), DENSE_INTERVALS + 1)[1:]
    return tuple(np.union1d(dense, np.asarray(checkpoints, float)).tolist())


@functools.lru_cache(maxsize=1024)  # ~0.5 MB each when ~80 times are kept
def _solve(coeff_key: tuple, times: tuple, eps: float, resolution: int):
    """(xi, c, u_-(xi, t), u_+(xi, t)) on the grid, one column per time."""
    coefficients = coeff_key[0](*coeff_key[1:])  # (the model's drift and diffusion, their arguments)
    c = float(np.arctanh(1 - eps))  # band edge y_+ = c, y_- = -c
    xi_band = float(np.arcsinh(1.0))
    h = xi_band / resolution
    y_max = _half_width(coefficients, c, max(times))
    k = int(np.ceil(np.arcsinh(y_max / c) / h))
    xi = h * np.arange(-k, k + 1)
    M = _operator(coefficients, xi, c)
    edge = np.abs(np.abs(xi) - xi_band) < h / 4
    anti = np.where(xi < 0, (xi < -xi_band) + 0.5 * edge, 0.0)
    start = np.concatenate([anti, anti[::-1]])  # u_+ is the mirror image of u_-'s start
    big = sparse.block_diag([M, M], format="csc")
    t = np.asarray(times, float)
    out = np.empty((start.size, t.size))
    positive = t > 0
    out[:, ~positive] = start[:, None]
    if positive.any():
        # a rejected trial step of BDF may overflow in its difference table (a warning, then a
        # smaller step); what counts is the accepted solution, checked below
        with np.errstate(invalid="ignore", over="ignore"):
            sol = integrate.solve_ivp(lambda _, u: big @ u, (0.0, float(t.max())), start, method="BDF",
                                      t_eval=t[positive], jac=big, rtol=1e-6, atol=1e-9)
        if not sol.success or not np.all(np.abs(sol.y - 0.5) <= 0.5 + 1e-6):
            raise RuntimeError(f"backward equation solver failed for {coeff_key[0].__name__}{coeff_key[1:]}: {sol.message}")
        out[:, positive] = sol.y
    n = xi.size
    return xi, c, np.clip(out[:n], 0, 1), np.clip(out[n:], 0, 1)


def _average(xi, c, u, d: int, rho0):
    if rho0 is not None:
        rho0 = float(rho0)
        if not -1 <= rho0 <= 1:
            raise ValueError(f"rho0={rho0!r}: an overlap lies in [-1, 1]")
        if abs(rho0) == 1:  # the ends are fixed points: the cut-off nodes hold their values
            return u[0] if rho0 < 0 else u[-1]
        x0 = np.arcsinh(np.arctanh(rho0) / c)
        if abs(x0) >= xi[-1]:
            raise ValueError(f"rho0={rho0!r} lies beyond the solver's cut-off |y| = {c * np.sinh(xi[-1]):.0f}")
        return interpolate.CubicSpline(xi, u, axis=0)(x0)
    y = c * np.sinh(xi)
    # density of y = artanh(rho_0) for uniform tokens, times dy/dxi: sech(y)^(d-1) c cosh(xi)
    w = np.exp(-(d - 1) * (np.logaddexp(y, -y) - np.log(2))) * c * np.cosh(xi)
    return integrate.trapezoid(u * w[:, None], xi, axis=0) / integrate.trapezoid(w, xi)


def _outcomes(key, t, eps, d, rho0, resolution, along=()):
    if not 0 < eps < 1:
        raise ValueError(f"eps={eps!r}: the classification threshold lies in (0, 1)")
    t = np.asarray(t, float)
    if np.any(t < 0) or not np.all(np.isfinite(t)):
        raise ValueError(f"t={t.tolist()!r}: times must be finite and >= 0")
    times = tuple(sorted(set(np.atleast_1d(t).tolist()) | set(np.asarray(along, float).ravel().tolist())))
    xi, c, u_minus, u_plus = _solve(key, times, float(eps), int(resolution))
    pos = np.searchsorted(times, np.atleast_1d(t))
    anti = _average(xi, c, u_minus, d, rho0)[pos].reshape(t.shape)
    single = _average(xi, c, u_plus, d, rho0)[pos].reshape(t.shape)
    return Outcomes(anti, single, np.clip(1 - anti - single, 0, 1))


def stochastic_outcomes(t, beta: float, d: int, attention: str = "sa", eps: float = 1e-3,
                        rho0=None, value_std: float = 1.0, resolution: int = RESOLUTION,
                        along=()) -> Outcomes:
    """Class probabilities at time(s) t of the two-token deep stochastic transformer (Q = K = I).

    Uniform start on S^(d-1), or the initial overlap rho0. Time in the model's units (h = T /
    layers); value_std s is a time change s^2 t. Converges to `theory.antipodal_probability` as
    t -> infinity. along: further times solved with t (module docstring), not returned.

    >>> o = stochastic_outcomes([0.0, 20.0], 2.0, 3)  # at t = 0: P(|rho_0| >= 1 - eps) = eps
    >>> round(float(o.unresolved[0]), 3), round(float(o.antipodal[1]), 3)
    (0.999, 0.363)
    """
    attention, d = check_attention(attention), check_d(d)
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta={beta!r} must be finite and >= 0")
    if not value_std > 0:
        raise ValueError(f"value_std={value_std!r} must be > 0")
    key = (_stochastic_coefficients, float(beta), d, attention, float(value_std))
    return _outcomes(key, t, eps, d, rho0, resolution, along)


def hybrid_outcomes(t, beta: float, sigma: float, attention: str = "usa", d: int = 3,
                    eps: float = 1e-3, rho0=None, resolution: int = RESOLUTION, along=()) -> Outcomes:
    """Class probabilities at time(s) t of the two-token hybrid model ([F26] Prop. 1).

    sigma must be > 0: at sigma = 0 the overlap follows an ODE (no diffusion to solve). d enters
    through the uniform start law only. Converges to `theory.hybrid_antipodal_probability`.
    along: further times solved with t (module docstring), not returned.
    """
    attention, d = check_attention(attention), check_d(d)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma={sigma!r}: the finite-T solver needs noise, sigma > 0")
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta={beta!r} must be finite and >= 0")
    key = (_hybrid_coefficients, float(beta), float(sigma), attention)
    return _outcomes(key, t, eps, d, rho0, resolution, along)
