r"""Closed forms of the two-token models (docs/models.md sections 4 and 5): the deep stochastic
transformer's critical beta_c(d) and antipodal probability, the hybrid model's sigma_c and antipodal
probability; each through the scale function of its overlap diffusion (`scale`), with

* deep stochastic transformer (SA and USA alike, Q = K = I):
  G(rho) = (d - 2) / cosh(beta (1 - rho)) - rho;
* hybrid model: G(rho) = [1 - sigma^2 (p + 2 q rho)] / (sigma^2 q), with p, q the self and cross
  attention weights (SA: softmax of (beta, beta rho); USA: e^beta / 2 and e^{beta rho} / 2).
"""

from __future__ import annotations

import functools

import numpy as np

from .scale import check_attention, check_d, probability_given_overlap, probability_uniform_start, scale_parts

__all__ = ["beta_c", "antipodal_probability_given_overlap", "antipodal_probability", "hybrid_sigma_c",
           "hybrid_antipodal_probability"]


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
    return scale_parts(G)


def antipodal_probability_given_overlap(rho0, beta: float, d: int):
    """P(rho_inf = -1 | rho_0) for the two-token deep stochastic transformer (SA or USA).

    (s(1) - s(rho_0)) / (s(1) - s(-1)); 0 where -1 does not attract (beta <= beta_c(d)).
    For d = 2 this is arccos(rho_0) / pi (computed by the same quadrature, checked in tests).

    >>> round(float(antipodal_probability_given_overlap(0.0, 1.0, 2)), 12)
    0.5
    >>> float(antipodal_probability_given_overlap(0.3, 0.5, 4))  # beta < beta_c(4)
    0.0
    """
    d = check_d(d)
    if not np.cosh(2 * beta) > d - 2:  # equality: single cluster with probability 1
        return np.zeros(np.shape(rho0))
    return probability_given_overlap(_transformer_parts(float(beta), d), rho0)


def antipodal_probability(beta, d: int):
    """P(antipodal) for two tokens started independently uniform on S^(d-1).

    Vectorised over beta (cached per (beta, d)); 0 for beta <= beta_c(d), 1/2 for d = 2.

    >>> np.round(antipodal_probability([1.0, 2.0], 4), 3)
    array([0.12 , 0.281])
    """
    d = check_d(d)
    b = np.asarray(beta, dtype=float)
    out = np.array([_antipodal_probability_scalar(float(x), d) for x in b.ravel()])
    return out.reshape(b.shape) if b.ndim else float(out[0])


@functools.lru_cache(maxsize=2**20)  # a report asks twice per cell; grids reach 10^6 cells
def _antipodal_probability_scalar(beta: float, d: int) -> float:
    if np.isnan(beta):
        return np.nan
    if not np.cosh(2 * beta) > d - 2:
        return 0.0
    return probability_uniform_start(_transformer_parts(beta, d), d)


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
    attention = check_attention(attention)
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
    parts = scale_parts(G)
    if rho0 is None:
        return probability_uniform_start(parts, d)
    return float(probability_given_overlap(parts, rho0))


def hybrid_antipodal_probability(beta, sigma, attention: str = "usa", d: int = 3, rho0=None):
    """P(antipodal) of the two-token hybrid model, from the scale function of

        d rho = 2q (1 - rho^2) [1 - sigma^2 (p + 2 q rho)] dt + 2 sigma q (1 - rho^2) dB,

    averaged over uniform starts on S^(d-1) (or at the given initial overlap rho0).  Vectorised
    over broadcast beta, sigma (and rho0); NaN where neither boundary attracts (USA at
    sigma = sigma_c exactly), 0 below sigma_lo, 1 above sigma_hi.

    >>> float(hybrid_antipodal_probability(1.0, 0.5, "sa")), float(hybrid_antipodal_probability(1.0, 2.0, "sa"))
    (0.0, 1.0)
    """
    attention, d = check_attention(attention), check_d(d)
    if np.any(np.asarray(sigma) < 0):
        raise ValueError(f"sigma={sigma!r} must be >= 0")
    b, s, r = np.broadcast_arrays(np.asarray(beta, float), np.asarray(sigma, float),
                                  np.asarray(np.nan if rho0 is None else rho0, float))
    out = np.array([
        _hybrid_scalar(float(x), float(y), attention, d, None if rho0 is None else float(z))
        for x, y, z in zip(b.ravel(), s.ravel(), r.ravel())
    ])
    return out.reshape(b.shape) if b.ndim else float(out[0])
