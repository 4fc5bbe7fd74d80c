"""The R of the Householder QR of a layer's values in SIMD lanes: `householder_lanes` for one
trajectory's eight tokens (`lanes`), `householder_pairs` for two trajectories side by side in
sixteen lanes (`pairs`). Both are `value_noise.householder_r` (LAPACK signs) bit for bit: each
lane does the scalar code's operations in the same order (the passes and their costs: `pairs`).
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from ..lowlevel.simd import (
    WIDE,
    WIDTH,
    add,
    div,
    lane,
    load,
    load16,
    load_quads,
    mul,
    splat,
    splat2,
    splat2q,
    splat16,
    store,
    store_quads,
    sub,
    where,
)


@njit(nogil=True, cache=True, inline="always")
def householder_lanes(at, n, rl, norms):
    """`value_noise.householder_r` of A = at (d, 8) (column j of A in lane j), LAPACK signs.

    at is overwritten. rl (r, 8), r = min(n, d): row k of R in lanes 0..n-1, zeros elsewhere
    (lanes < k are R's exact zeros, lanes >= n padding). norms (8,): lane 0 the sum of the
    squares of A[1:, 0] (`attention_lanes`).
    """
    d = at.shape[0]
    r = min(n, d)
    next_norms = load(norms, 0)
    have_next = True
    for k in range(r):
        alpha = at[k, k]
        if have_next:
            xnorm2 = lane(next_norms, k)
        else:
            xnorm2 = 0.0
            for i in range(k + 1, d):
                xnorm2 += at[i, k] * at[i, k]
        have_next = False
        if xnorm2 == 0.0:
            rkk = alpha  # H = I (LAPACK tau = 0)
        else:
            rkk = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
            u0 = alpha - rkk
            at[k, k] = u0
            unorm2 = u0 * u0 + xnorm2
            if k + 1 < n:
                s = splat(0.0)
                for i in range(k, d):
                    s = add(s, mul(splat(at[i, k]), load(at, i * WIDTH)))
                f = div(mul(splat(2.0), s), splat(unorm2))
                nrm = splat(0.0)
                for i in range(k, d):
                    # u_i is read before row i is written (lane k is reflected too, unread later)
                    y = sub(load(at, i * WIDTH), mul(f, splat(at[i, k])))
                    store(at, i * WIDTH, y)
                    if i >= k + 2:
                        nrm = add(nrm, mul(y, y))
                next_norms = nrm
                have_next = True
        for j in range(k):
            rl[k, j] = 0.0
        rl[k, k] = rkk
        for j in range(k + 1, n):
            rl[k, j] = at[k, j]



@njit(nogil=True, cache=True, inline="always")
def _column(alpha, xnorm2):
    """R_kk, u_0 and |u|^2 of a Householder column (LAPACK signs), as `householder_lanes`;
    (alpha, 0, 1) when xnorm2 == 0 (no reflection: u is not used)."""
    if xnorm2 == 0.0:
        return alpha, 0.0, 1.0
    rkk = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
    u0 = alpha - rkk
    return rkk, u0, u0 * u0 + xnorm2


@njit(nogil=True, cache=True, inline="always")
def _next_norm(at, k, d, j):
    """Column j's sum of squares below row k + 1, in order from 0.0 (`householder_lanes`' scalar
    loop, for a column k that was not reflected)."""
    xnorm2 = 0.0
    for i in range(k + 2, d):
        xnorm2 += at[i, j] * at[i, j]
    return xnorm2


@njit(nogil=True, cache=True, inline="always")
def _reflect16(at, k, ka, kb, un_a, un_b, keep_a, keep_b):
    """Reflect rows k.. of both trajectories' columns by their column k (`householder_lanes`'
    two chains, sixteen lanes); a trajectory with keep_x False keeps its columns (`where`).
    Returns the sums of squares below row k + 1 of the reflected columns k + 1 (A, B)."""
    d = at.shape[0]
    s = splat16(0.0)
    for i in range(k, d):
        s = add(s, mul(splat2(at[i, ka], at[i, kb]), load16(at, i * WIDE)))
    f = div(mul(splat16(2.0), s), splat2(un_a, un_b))
    nrm = splat16(0.0)
    if keep_a and keep_b:
        for i in range(k, d):
            # u_i is read before row i is written (lane k is reflected too, unread later)
            y = sub(load16(at, i * WIDE), mul(f, splat2(at[i, ka], at[i, kb])))
            store(at, i * WIDE, y)
            if i >= k + 2:
                nrm = add(nrm, mul(y, y))
    else:
        keep = splat2(1.0 if keep_a else 0.0, 1.0 if keep_b else 0.0)
        for i in range(k, d):
            old = load16(at, i * WIDE)
            y = where(keep, sub(old, mul(f, splat2(at[i, ka], at[i, kb]))), old)
            store(at, i * WIDE, y)
            if i >= k + 2:
                nrm = add(nrm, mul(y, y))
    return lane(nrm, ka + 1), lane(nrm, kb + 1)


@njit(nogil=True, cache=True, inline="always")
def _reflect_quads(at, k, ka, kb, un_a, un_b, keep_a, keep_b):
    """`_reflect16` for k >= 3, on the upper four lanes of each trajectory only (`load_quads`:
    lanes 4-7 of A, then of B): lanes <= k are no longer read, and the reflection's stores,
    not its adds, bound two trajectories' pass, so half the lanes is half the pass."""
    d = at.shape[0]
    hi_a, hi_b = 4, WIDTH + 4  # offsets of the upper quads in a row
    s = splat(0.0)
    for i in range(k, d):
        s = add(s, mul(splat2q(at[i, ka], at[i, kb]),
                       load_quads(at, i * WIDE + hi_a, i * WIDE + hi_b)))
    f = div(mul(splat(2.0), s), splat2q(un_a, un_b))
    nrm = splat(0.0)
    if keep_a and keep_b:
        for i in range(k, d):
            y = sub(load_quads(at, i * WIDE + hi_a, i * WIDE + hi_b),
                    mul(f, splat2q(at[i, ka], at[i, kb])))
            store_quads(at, i * WIDE + hi_a, i * WIDE + hi_b, y)
            if i >= k + 2:
                nrm = add(nrm, mul(y, y))
    else:
        keep = splat2q(1.0 if keep_a else 0.0, 1.0 if keep_b else 0.0)
        for i in range(k, d):
            old = load_quads(at, i * WIDE + hi_a, i * WIDE + hi_b)
            y = where(keep, sub(old, mul(f, splat2q(at[i, ka], at[i, kb]))), old)
            store_quads(at, i * WIDE + hi_a, i * WIDE + hi_b, y)
            if i >= k + 2:
                nrm = add(nrm, mul(y, y))
    return lane(nrm, k + 1 - 4), lane(nrm, 4 + k + 1 - 4)  # lane k + 1 of A's quad, of B's


@njit(nogil=True, cache=True, inline="always")
def householder_pairs(at, n, rl, norms):
    """`householder_lanes` of both trajectories' A: at (d, 16) overwritten, rl (r, 16) R's rows
    (lanes 8 t + j), norms (16,): lanes 0 and 8 the first columns' sums of squares below row 0.

    A column that is exactly zero below its diagonal is not reflected (LAPACK tau = 0): where
    that holds for one trajectory only, `where` keeps its lanes unreflected, and its next norm is
    `householder_lanes`' scalar sum (`_next_norm`).
    """
    d = at.shape[0]
    r = min(n, d)
    xnorm2_a, xnorm2_b = norms[0], norms[WIDTH]
    for k in range(r):
        ka, kb = k, WIDTH + k
        rkk_a, u0_a, un_a = _column(at[k, ka], xnorm2_a)
        rkk_b, u0_b, un_b = _column(at[k, kb], xnorm2_b)
        reflect_a, reflect_b = xnorm2_a != 0.0, xnorm2_b != 0.0
        if reflect_a:
            at[k, ka] = u0_a
        if reflect_b:
            at[k, kb] = u0_b
        if k + 1 < n:
            next_a = next_b = 0.0
            if reflect_a or reflect_b:
                if k >= 3:
                    next_a, next_b = _reflect_quads(at, k, ka, kb, un_a, un_b, reflect_a, reflect_b)
                else:
                    next_a, next_b = _reflect16(at, k, ka, kb, un_a, un_b, reflect_a, reflect_b)
            xnorm2_a = next_a if reflect_a else _next_norm(at, k, d, ka + 1)
            xnorm2_b = next_b if reflect_b else _next_norm(at, k, d, kb + 1)
        for j in range(k):
            rl[k, j] = 0.0
            rl[k, WIDTH + j] = 0.0
        rl[k, ka] = rkk_a
        rl[k, kb] = rkk_b
        for j in range(k + 1, n):
            rl[k, j] = at[k, j]
            rl[k, WIDTH + j] = at[k, WIDTH + j]
