"""Normalisation variants of the attention layer (docs/models.md section 2.8): one step each.

A token is z_i = r_i x_i, x_i on S^{d-1} (what attention reads: LN(z_i) = x_i), r_i > 0 its
radius (1 at the start); A_i = A_i(X) is the attention output of section 1 (heads summed), h the
step. The layer, written as the residual update of one Transformer block of depth h:

    post   (post-LN, today's `sphere.flow`)  x_i <- N(x_i + h P_{x_i} A_i)              r_i = 1
    pre    (pre-LN)                          z_i <- z_i + h A_i                          r_i = |z_i|
    peri   (peri-LN: the output normalised)  z_i <- z_i + h A_i / |A_i|                  r_i = |z_i|
    ngpt   (nGPT, Loshchilov et al. 2024)    x_i <- N(x_i + h alpha (A_i / |A_i| - x_i))  r_i = 1

N(y) = y / |y|. In the limit h -> 0: pre r' = <x, A>, x' = P_x A / r; peri r' = <x, A/|A|>,
x' = P_x (A/|A|) / r; ngpt x' = alpha P_x (A/|A|): the radius slows pre- and peri-LN tokens down
(a time change per token), nGPT moves every token at speed alpha |P_x A| / |A| <= alpha.
The state kept is x (the normalised tokens: every output is computed from them) and r.
A_i = 0 exactly (peri, ngpt) gives no move.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (numba's cache folder, before any decoration)
    vocabulary,
)
from ..lowlevel.vecmath import tiny_like
from .drift import head_sum

POST_LN = 0
PRE_LN = 1
PERI_LN = 2
NGPT = 3
NORM_CODES = dict(zip(vocabulary.LAYER_NORMS, (POST_LN, PRE_LN, PERI_LN, NGPT)))


@njit(nogil=True, cache=True, inline="always")
def normalised_step(x, radius, t, h, par, mats, ws, ls, mode, alpha):
    """One step of the layer `mode` (PRE_LN, PERI_LN or NGPT; module docstring) in place:
    x (n, d) the normalised tokens, radius (n,) their radii. par, mats, ws: as
    `sphere.drift.drift`; ls: (n,) scratch. False if the state became non-finite or zero."""
    n, d = x.shape
    a = head_sum(x, t, par, mats, ws, ls)  # (d, n): A_i = exp(ls_i) a[:, i]
    for i in range(n):
        scale = np.exp(ls[i])
        norm_a = 0.0
        for k in range(d):
            norm_a += a[k, i] * a[k, i]
        norm_a = np.sqrt(norm_a) * scale
        if mode == PRE_LN:
            c_x, c_a = radius[i], h * scale
        elif norm_a == 0.0:
            continue
        elif mode == PERI_LN:
            c_x, c_a = radius[i], h * scale / norm_a
        else:
            c_x, c_a = 1.0 - h * alpha, h * alpha * scale / norm_a
        norm2 = 0.0
        for k in range(d):
            y = c_x * x[i, k] + c_a * a[k, i]
            ws[1][k, i] = y  # yt: scratch, never what `head_sum` returns
            norm2 += y * y
        if not (norm2 >= tiny_like(x) and norm2 < np.inf):
            return False
        nrm = np.sqrt(norm2)
        if mode != NGPT:
            radius[i] = nrm
        for k in range(d):
            x[i, k] = ws[1][k, i] / nrm
    return True
