r"""[GLPR-P]'s proven single-cluster regions (Fig. 2) and the closed forms of Thm 5.1's proof (App. B).

Q = K = V = I. The energy E_beta's Hessian on (S^{d-1})^n has off-diagonal entries
g(theta_ij) / n^2 with ((B.1)-(B.3))

    g(tau) = e^{beta cos tau} ((d - 1) cos tau - beta sin^2 tau)          (Fig. 6: d = 2, beta = 2, 6)

which is negative outside [-tau*, tau*], tau*_{beta,d} the root in [0, pi/2) of
beta sin^2 tau = (d - 1) cos tau (`tau_star`; in closed form cos tau* = (sqrt((d-1)^2 + 4 beta^2) - (d-1))
/ (2 beta), and tau* = (1 + o(1)) sqrt((d-1) / beta) as beta -> infinity). At a local maximum of
E_beta every proper subset of tokens has a token outside it within tau* (B.2), so when
(n - 1) tau* < pi/2 the tokens lie in an open hemisphere and Lemma 6.4 makes the maximum one
cluster: the proof's explicit form of Thm 5.1's beta >= C(d) n^2 is `thm51_beta` (the smallest such
beta). The proof is written for USA; Remark B.1 carries it to SA (same energy, same critical points and
Hessian signature), so the region is the same for both.

In d = 2 the same g is the derivative of the closing speed of two USA tokens: their angle tau solves
tau' = -sin tau e^{beta cos tau} (`two_token_speed`), so g = d(speed)/d tau and the speed peaks at tau*.

The regions of Fig. 2 (`proven_theorems`; n, beta, d as the grid gives them): Thm 4.1, beta = 0; Thm
4.3, beta <= C / n with a numerical C not given, explicit only in d = 2, where beta <= 1 ([CRMB24]);
Thm 5.1, beta >= `thm51_beta(n, d)`; Thm 6.1 ([MTG17, CRMB24]), every beta in d >= 3.
"""

from __future__ import annotations

import numpy as np

__all__ = ["tau_star", "hessian_g", "two_token_speed", "thm51_beta", "proven_theorems", "THM43_D2_BETA"]

THM43_D2_BETA = 1.0  # Thm 4.3's explicit bound in d = 2 ([CRMB24]): one cluster for beta <= 1


def tau_star(beta, d: int = 2):
    """tau*_{beta,d}: the root in [0, pi/2] of beta sin^2 tau = (d - 1) cos tau (pi/2 at beta = 0).

    >>> round(float(tau_star(2.0)), 6), round(float(tau_star(6.0)), 6)
    (0.674889, 0.402377)
    >>> round(float(tau_star(1e6) * np.sqrt(1e6)), 4)   # (1 + o(1)) / sqrt(beta)
    1.0
    """
    b, k = np.asarray(beta, dtype=float), float(d - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        # cos tau* = 2b / (k + sqrt(k^2 + 4 b^2)): the root of b c^2 + k c - b = 0 without cancellation
        cos = 2.0 * b / (k + np.sqrt(k * k + 4.0 * b * b))
    return np.arccos(np.clip(cos, -1.0, 1.0))


def hessian_g(tau, beta: float, d: int = 2):
    """g(tau) = e^{beta cos tau} ((d - 1) cos tau - beta sin^2 tau): n^2 times the Hessian's
    off-diagonal entry of E_beta at two tokens tau apart ((B.1)-(B.3)).

    >>> round(float(hessian_g(0.0, 2.0)), 6) == round(float(np.exp(2.0)), 6)
    True
    >>> abs(float(hessian_g(tau_star(6.0), 6.0))) < 1e-12
    True
    """
    t = np.asarray(tau, dtype=float)
    return np.exp(beta * np.cos(t)) * ((d - 1) * np.cos(t) - beta * np.sin(t) ** 2)


def two_token_speed(tau, beta: float):
    """-d tau / dt of two USA tokens tau apart (any d: they stay in a plane): sin tau e^{beta cos tau};
    its derivative in tau is `hessian_g` with d = 2.

    >>> round(float(two_token_speed(np.pi / 2, 3.0)), 12)
    1.0
    """
    t = np.asarray(tau, dtype=float)
    return np.sin(t) * np.exp(beta * np.cos(t))


def thm51_beta(n, d: int = 2):
    """The smallest beta with (n - 1) tau*_{beta,d} < pi/2 (the proof of Thm 5.1): beta =
    (d - 1) cos(s) / sin(s)^2 at s = pi / (2 (n - 1)); 0 for n <= 2.

    >>> [round(float(thm51_beta(n)), 3) for n in (2, 3, 4, 5)]
    [0.0, 1.414, 3.464, 6.309]
    """
    m = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.pi / (2.0 * (m - 1.0))
        out = (d - 1) * np.cos(s) / np.sin(s) ** 2
    return np.where(m <= 2, 0.0, out)


def proven_theorems(beta: float, d: int, n: int) -> list[str]:
    """The theorems of [GLPR-P] that prove one cluster (almost every start, t -> infinity) for SA and
    USA with Q = K = V = I at (beta, d, n): a sublist of ['Thm 4.1', 'Thm 4.3', 'Thm 5.1', 'Thm 6.1'].

    >>> proven_theorems(1.0, 2, 8), proven_theorems(2.0, 2, 3), proven_theorems(2.0, 2, 4)
    (['Thm 4.3'], ['Thm 5.1'], [])
    >>> proven_theorems(9.0, 3, 32)
    ['Thm 6.1']
    """
    out = []
    if beta == 0:
        out.append("Thm 4.1")
    if d == 2 and 0 < beta <= THM43_D2_BETA:
        out.append("Thm 4.3")
    if n >= 2 and beta > 0 and beta > float(thm51_beta(n, d)):
        out.append("Thm 5.1")
    if d >= 3:
        out.append("Thm 6.1")
    return out
