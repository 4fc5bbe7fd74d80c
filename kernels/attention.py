"""Self-attention of tokens on the sphere with Q = K = V = I, and the exact Gaussian noise factor.

Attention (docs/models.md section 1), inverse temperature beta, logits S_ij = beta <x_i, x_j>:

    SA:        A_i = sum_j softmax_j(S_ij) x_j
    USA:       A_i = (1/n) sum_j exp(S_ij) x_j
    causal_sa: as SA with the sums over j <= i only (token 0 attends only to itself).

Every row is evaluated with its maximum m_i = max_j S_ij subtracted, and returned as a direction
part and a log-scale,

    A_i = exp(c_i) * Ahat_i,   Ahat_i = sum_j exp(S_ij - m_i) x_j  (/ sum_j exp(S_ij - m_i) for SA),
    c_i = 0 (SA, causal_sa),   c_i = m_i - log n (USA),

so that no exponential exceeds 1 and beta up to 1e3 (USA: exp(beta) ~ 1e434) neither overflows nor
underflows to NaN. The update rules only use A_i inside a normalisation N(x + a A_i), and for
c > 0 N(x + a e^c u) = N(e^-c x + a u): the kernels apply the scale on whichever side keeps it <= 1
(`scaled_step`).

The value matrices' noise (Householder R, s W^T R, s V Ahat, the value laws) is in `value_noise`.

Array conventions: tokens are rows, x (n, d); the attention output Ahat is (n, d), row i = Ahat_i.
Speed under bit-identity. Every sum here is accumulated in one fixed order (over coordinates, or
over tokens for Ahat), the order the results were first produced in, so any rewrite must keep it:
no fastmath (no reassociation, no FMA contraction). What can change is how independent sums are
interleaved. A single sum waits on the adder's latency once per term; `gram` (2 x 4 pairs), the
Householder dot products (4 columns) and the row norms of `scaled_step` (4 rows) run several
sums side by side, and the next column's Householder norm is summed while that column is
reflected. The overlaps are symmetric to the bit (x_ik x_jk = x_jk x_ik), so `gram` computes
i <= j only; the attention reads its logits from them and the kernels reuse a checkpoint's
overlaps as the next layer's. exp(0) = 1 is not evaluated (collapsed tokens). Ahat is an axpy
along the coordinates for d >= LONG_ROW (vectorised) and four register sums otherwise: an axpy over
a few coordinates waits on its own stores once per term. Tried, no gain: reusing exp(S_ij - m_i)
for row j when m_j = m_i, numba's SLP vectoriser, inlining the helpers. Per-component costs:
`benchmarks/bench_stochastic.py --profile`.
"""

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from .value_noise import (  # noqa: F401  (re-exported: the noise of the value matrices)
    GAUSSIAN_LAW,
    LONG_ROW,
    RADEMACHER_LAW,
    UNIFORM_LAW,
    VALUE_LAW_CODES,
    gaussian_values,
    householder_r,
    literal_values,
    value_draws,
)

SA = 0
USA = 1
CAUSAL_SA = 2
ATTENTION_CODES = {"sa": SA, "usa": USA, "causal_sa": CAUSAL_SA}


@njit(nogil=True, cache=True)
def gram(x, g):
    """g[i, j] = <x_i, x_j> for x (n, d), each a sum over k in order from 0.0 (as `outcomes.gram`).

    Pairs i <= j are computed, two rows by four columns at a time (eight sums side by side; the
    last block of a row pair repeats column n - 1 where fewer are left), and mirrored.
    g: (n, n) output.
    """
    n, d = x.shape
    if n < 4:  # too few pairs to block
        for i in range(n):
            for j in range(i, n):
                s0 = 0.0
                for k in range(d):
                    s0 += x[i, k] * x[j, k]
                g[i, j] = s0
                g[j, i] = s0
        return
    for i in range(0, n, 2):
        i1 = min(i + 1, n - 1)
        for j in range(i, n, 4):
            j1 = min(j + 1, n - 1)
            j2 = min(j + 2, n - 1)
            j3 = min(j + 3, n - 1)
            s0 = s1 = s2 = s3 = t0 = t1 = t2 = t3 = 0.0
            for k in range(d):
                u = x[i, k]
                v = x[i1, k]
                a0 = x[j, k]
                a1 = x[j1, k]
                a2 = x[j2, k]
                a3 = x[j3, k]
                s0 += u * a0
                s1 += u * a1
                s2 += u * a2
                s3 += u * a3
                t0 += v * a0
                t1 += v * a1
                t2 += v * a2
                t3 += v * a3
            g[i, j] = s0
            g[i, j1] = s1
            g[i, j2] = s2
            g[i, j3] = s3
            g[i1, j] = t0
            g[i1, j1] = t1
            g[i1, j2] = t2
            g[i1, j3] = t3
    for i in range(n):
        for j in range(i):
            g[i, j] = g[j, i]


@njit(nogil=True, cache=True)
def attention(x, g, beta, kind, ahat, logscale, w):
    """Attention directions and log-scales of all tokens, from their overlaps g = `gram`(x).

    x: (n, d) float64 token states. beta: float. kind: SA, USA or CAUSAL_SA.
    ahat: (n, d) output, Ahat_i (see module docstring). logscale: (n,) output, c_i.
    w: (n, n) work, the weights exp(S_ij - m_i).
    """
    n, d = x.shape
    log_n = np.log(n)
    for i in range(n):
        jmax = i + 1 if kind == CAUSAL_SA else n
        mi = -np.inf
        for j in range(jmax):
            if beta * g[i, j] > mi:
                mi = beta * g[i, j]
        total = 0.0
        for j in range(jmax):
            e = beta * g[i, j] - mi
            wij = 1.0 if e == 0.0 else np.exp(e)  # exp(0) = 1: collapsed tokens skip the call
            w[i, j] = wij
            total += wij
        finish_row(w, i, x, jmax, total, mi, kind, log_n, ahat, logscale)


@njit(nogil=True, cache=True)
def finish_row(w, i, x, jmax, total, mi, kind, log_n, ahat, logscale):
    """Row i from its weights w[i, :jmax] (summing to total) and max logit mi: Ahat_i, c_i."""
    _combine(w, i, x, jmax, ahat)
    if kind == USA:
        logscale[i] = mi - log_n
    else:
        inv = 1.0 / total
        for k in range(x.shape[1]):
            ahat[i, k] *= inv
        logscale[i] = 0.0


@njit(nogil=True, cache=True)
def _combine(w, i, x, jmax, out):
    """out[i, k] = sum_{j < jmax} w[i, j] x[j, k], each sum in j order from 0.0 (see LONG_ROW)."""
    d = x.shape[1]
    if d >= LONG_ROW:
        for k in range(d):  # eight (then four) terms per pass, added left to right
            out[i, k] = 0.0
        j = 0
        while j + 8 <= jmax:
            w0 = w[i, j]
            w1 = w[i, j + 1]
            w2 = w[i, j + 2]
            w3 = w[i, j + 3]
            w4 = w[i, j + 4]
            w5 = w[i, j + 5]
            w6 = w[i, j + 6]
            w7 = w[i, j + 7]
            for k in range(d):
                out[i, k] = (((((((out[i, k] + w0 * x[j, k]) + w1 * x[j + 1, k])
                                 + w2 * x[j + 2, k]) + w3 * x[j + 3, k]) + w4 * x[j + 4, k])
                              + w5 * x[j + 5, k]) + w6 * x[j + 6, k]) + w7 * x[j + 7, k]
            j += 8
        while j + 4 <= jmax:
            w0 = w[i, j]
            w1 = w[i, j + 1]
            w2 = w[i, j + 2]
            w3 = w[i, j + 3]
            for k in range(d):
                out[i, k] = (((out[i, k] + w0 * x[j, k]) + w1 * x[j + 1, k]) + w2 * x[j + 2, k]) \
                    + w3 * x[j + 3, k]
            j += 4
        while j < jmax:
            wij = w[i, j]
            for k in range(d):
                out[i, k] += wij * x[j, k]
            j += 1
        return
    k = 0
    while k + 4 <= d:
        s0 = s1 = s2 = s3 = 0.0
        for j in range(jmax):
            wij = w[i, j]
            s0 += wij * x[j, k]
            s1 += wij * x[j, k + 1]
            s2 += wij * x[j, k + 2]
            s3 += wij * x[j, k + 3]
        out[i, k] = s0
        out[i, k + 1] = s1
        out[i, k + 2] = s2
        out[i, k + 3] = s3
        k += 4
    while k < d:
        s0 = 0.0
        for j in range(jmax):
            s0 += w[i, j] * x[j, k]
        out[i, k] = s0
        k += 1


@njit(nogil=True, cache=True)
def normalize_rows(x):
    """x_i <- x_i / |x_i| in place for x (n, d); False if a row is non-finite or zero."""
    for i in range(x.shape[0]):
        if not normalize_row(x, i):
            return False
    return True


@njit(nogil=True, cache=True)
def uniform_start(rng, x):
    """Fill x (n, d) with i.i.d. uniform points on the sphere: n*d normals, row-major, normalised."""
    n, d = x.shape
    z = rng.standard_normal(n * d)
    for i in range(n):
        for k in range(d):
            x[i, k] = z[i * d + k]
    return normalize_rows(x)


@njit(nogil=True, cache=True)
def normalize_row(x, i):
    """x_i <- x_i / |x_i|; False if x_i is non-finite or zero. Rescales only if |x_i|^2 over/underflows."""
    d = x.shape[1]
    norm2 = 0.0
    for k in range(d):
        norm2 += x[i, k] * x[i, k]
    if norm2 == np.inf or norm2 == 0.0:
        big = 0.0
        for k in range(d):
            big = max(big, abs(x[i, k]))
        if not (big > 0.0 and big < np.inf):
            return False
        norm2 = 0.0
        for k in range(d):
            x[i, k] /= big
            norm2 += x[i, k] * x[i, k]
    norm = np.sqrt(norm2)
    if not (norm < np.inf):  # NaN
        return False
    inv = 1.0 / norm  # one division: d of them dominate the step at large d
    for k in range(d):
        x[i, k] *= inv
    return True


@njit(nogil=True, cache=True)
def scaled_step(x, coef, logscale, direction, norm2):
    """x_i <- N(x_i + coef e^{c_i} direction_i) in place; False if a row is non-finite or zero.

    x, direction: (n, d); coef: float (may be negative); logscale: (n,) the c_i; norm2: (n,) work.
    The operations of `normalize_row` on each row, whose rescaling path (|y|^2 zero, inf or NaN)
    runs only where needed; the squared norms of four rows are summed side by side.
    """
    n, d = x.shape
    for i in range(n):
        c = logscale[i]
        # apply e^c on the side where it is <= 1 (N is invariant under positive scaling)
        fx = 1.0
        fa = coef
        if c > 0.0:
            fx = np.exp(-c)
        elif c < 0.0:
            fa = coef * np.exp(c)
        for k in range(d):
            x[i, k] = fx * x[i, k] + fa * direction[i, k]
    i = 0
    while i + 4 <= n:
        s0 = s1 = s2 = s3 = 0.0
        for k in range(d):
            s0 += x[i, k] * x[i, k]
            s1 += x[i + 1, k] * x[i + 1, k]
            s2 += x[i + 2, k] * x[i + 2, k]
            s3 += x[i + 3, k] * x[i + 3, k]
        norm2[i] = s0
        norm2[i + 1] = s1
        norm2[i + 2] = s2
        norm2[i + 3] = s3
        i += 4
    while i < n:
        s0 = 0.0
        for k in range(d):
            s0 += x[i, k] * x[i, k]
        norm2[i] = s0
        i += 1
    for i in range(n):
        if norm2[i] > 0.0 and norm2[i] < np.inf:
            inv = 1.0 / np.sqrt(norm2[i])
            for k in range(d):
                x[i, k] *= inv
        elif not normalize_row(x, i):  # recomputes the same sum, then rescales or fails
            return False
    return True
