"""The noise of the value matrices V_k (docs/models.md section 4): the exact Gaussian factor, the
literal product and the value laws; split from `attention`, which re-exports these names.

Gaussian value matrices (docs/models.md section 4): with V of i.i.d. N(0, s^2) entries and
A = [a_1 ... a_n] (d x n), the rows of V A are i.i.d. N(0, s^2 G), G = A^T A. Any R with R^T R = G
gives V A =_d s W^T R for W an (r, d) standard normal array. `householder_r` computes R
(r x n, r = min(n, d), upper trapezoidal) by Householder QR of the d x n matrix A, with LAPACK's
sign convention (R_kk = -sign(alpha) |x|, no reflection when the sub-column is exactly zero), so
`numpy.linalg.qr(A, mode="r")` gives the same R to rounding. The QR acts on A itself, never on G,
so it is exact (backward stable) for rank-deficient A: the normal late-time state where tokens
have collapsed onto each other or onto antipodes.
"""

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)

LONG_ROW = 32  # rows of at least this many coordinates are combined by vectorised axpys


@njit(nogil=True, cache=True)
def householder_r(a, r_out):
    """R factor of the Householder QR of A = a.T (d x n), LAPACK sign convention.

    a: (n, d), row j = column j of A; overwritten (by the reflected columns). r_out: (r, n)
    output, r = min(n, d); upper trapezoidal, R^T R = A^T A. Each dot product with the reflector
    u runs over the rows in order; four columns' dot products run side by side.
    """
    n, d = a.shape
    r = min(n, d)
    have_next = False  # next_xnorm2 holds column k's sum of squares, summed while reflecting it
    next_xnorm2 = 0.0
    for k in range(r):
        alpha = a[k, k]
        if have_next:
            xnorm2 = next_xnorm2
        else:
            xnorm2 = 0.0
            for i in range(k + 1, d):
                xnorm2 += a[k, i] * a[k, i]
        have_next = False
        if xnorm2 == 0.0:
            # H = I (LAPACK tau = 0): keep alpha with its sign
            r_out[k, k] = alpha
        else:
            beta_k = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
            # u = x - beta e1 is stored in a[k, k:]; H = I - 2 u u^T / |u|^2
            u0 = alpha - beta_k
            a[k, k] = u0
            unorm2 = u0 * u0 + xnorm2
            for j in range(k + 1, n, 4):
                # four columns per pass (the last pass repeats column n - 1 where fewer are left:
                # a sum costs its latency, not its width); reflect each column once
                j1 = min(j + 1, n - 1)
                j2 = min(j + 2, n - 1)
                j3 = min(j + 3, n - 1)
                s0 = s1 = s2 = s3 = 0.0
                for i in range(k, d):
                    v = a[k, i]
                    s0 += v * a[j, i]
                    s1 += v * a[j1, i]
                    s2 += v * a[j2, i]
                    s3 += v * a[j3, i]
                if j == k + 1:
                    next_xnorm2 = _reflect_and_norm(a, j, k, 2.0 * s0 / unorm2)
                    have_next = True
                else:
                    _reflect(a, j, k, 2.0 * s0 / unorm2)
                if j1 > j:
                    _reflect(a, j1, k, 2.0 * s1 / unorm2)
                if j2 > j1:
                    _reflect(a, j2, k, 2.0 * s2 / unorm2)
                if j3 > j2:
                    _reflect(a, j3, k, 2.0 * s3 / unorm2)
            r_out[k, k] = beta_k
        for j in range(k):
            r_out[k, j] = 0.0
        for j in range(k + 1, n):
            r_out[k, j] = a[j, k]


@njit(nogil=True, cache=True, inline="always")
def _reflect(a, j, k, f):
    """a[j, k:] -= f a[k, k:] (column j of H A)."""
    for i in range(k, a.shape[1]):
        a[j, i] -= f * a[k, i]


@njit(nogil=True, cache=True, inline="always")
def _reflect_and_norm(a, j, k, f):
    """`_reflect`, returning sum_{i > j} a[j, i]^2 of the result in order from 0.0: the next
    step's xnorm2 (j = k + 1), summed while the reflection's loads are at hand."""
    d = a.shape[1]
    for i in range(k, min(k + 2, d)):
        a[j, i] -= f * a[k, i]
    s = 0.0
    for i in range(k + 2, d):
        y = a[j, i] - f * a[k, i]
        a[j, i] = y
        s += y * y
    return s


@njit(nogil=True, cache=True)
def gaussian_values(r_fac, buf, off, s, out):
    """Rows of s V A for Gaussian V, from the factor R and standard normals W.

    r_fac: (r, n) with R^T R = A^T A. buf: 1-D standard normals; W (r, d) is buf[off:off + r*d]
    row-major. s: value std. out: (n, d) output, out[i] = s * sum_k R[k, i] W[k], summed over k
    in order from 0.0: in registers per entry for d < 8, by (vectorised) axpys along the row
    otherwise.
    """
    r, n = r_fac.shape
    d = out.shape[1]
    if d < 8:  # an axpy over a few coordinates waits on its own stores once per term
        for i in range(n):
            kmax = min(i + 1, r)
            for c in range(d):
                acc = 0.0
                for k in range(kmax):
                    acc += (s * r_fac[k, i]) * buf[off + k * d + c]
                out[i, c] = acc
        return
    for i in range(n):
        for c in range(d):
            out[i, c] = 0.0
        for k in range(min(i + 1, r)):
            f = s * r_fac[k, i]
            base = off + k * d
            for c in range(d):
                out[i, c] += f * buf[base + c]


@njit(nogil=True, cache=True)
def literal_values(buf, off, ahat, s, out):
    """s V Ahat_i for every token, each entry a sum over b in order (four rows of V at a time
    for d >= LONG_ROW). buf: 1-D standard normals; V (d, d) is buf[off:off + d*d] row-major.
    ahat, out: (n, d).
    """
    n, d = ahat.shape
    for i in range(n):
        a = 0
        while a + 4 <= d and d >= LONG_ROW:
            s0 = s1 = s2 = s3 = 0.0
            base = off + a * d
            for b in range(d):
                v = ahat[i, b]
                s0 += buf[base + b] * v
                s1 += buf[base + d + b] * v
                s2 += buf[base + 2 * d + b] * v
                s3 += buf[base + 3 * d + b] * v
            out[i, a] = s * s0
            out[i, a + 1] = s * s1
            out[i, a + 2] = s * s2
            out[i, a + 3] = s * s3
            a += 4
        while a < d:
            s0 = 0.0
            base = off + a * d
            for b in range(d):
                s0 += buf[base + b] * ahat[i, b]
            out[i, a] = s * s0
            a += 1


# value laws of the stochastic transformer's entries: centred, unit variance (docs/models.md 4.4)
GAUSSIAN_LAW = 0
RADEMACHER_LAW = 1
UNIFORM_LAW = 2
VALUE_LAW_CODES = {"gaussian": GAUSSIAN_LAW, "rademacher": RADEMACHER_LAW, "uniform": UNIFORM_LAW}


@njit(nogil=True, cache=True)
def value_draws(rng, law, size):
    """size i.i.d. centred unit-variance entries of the given law, from the trajectory's Generator.

    gaussian: rng.standard_normal(size); rademacher: u = rng.random(size), +1 where u < 1/2 else -1;
    uniform: sqrt(3) (2u - 1), uniform on [-sqrt 3, sqrt 3). The Generator inside njit draws the
    same numbers as numpy's, so a numpy reference calling these methods in order reproduces them.
    """
    if law == GAUSSIAN_LAW:
        return rng.standard_normal(size)
    u = rng.random(size)
    if law == RADEMACHER_LAW:
        for i in range(size):
            u[i] = 1.0 if u[i] < 0.5 else -1.0
    else:
        root3 = np.sqrt(3.0)
        for i in range(size):
            u[i] = root3 * (2.0 * u[i] - 1.0)
    return u
