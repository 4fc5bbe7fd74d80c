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

Gaussian value matrices (docs/models.md section 4): with V of i.i.d. N(0, s^2) entries and
A = [a_1 ... a_n] (d x n), the rows of V A are i.i.d. N(0, s^2 G), G = A^T A. Any R with R^T R = G
gives V A =_d s W^T R for W an (r, d) standard normal array. `householder_r` computes R
(r x n, r = min(n, d), upper trapezoidal) by Householder QR of the d x n matrix A, with LAPACK's
sign convention (R_kk = -sign(alpha) |x|, no reflection when the sub-column is exactly zero), so
`numpy.linalg.qr(A, mode="r")` gives the same R to rounding. The QR acts on A itself, never on G,
so it is exact (backward stable) for rank-deficient A: the normal late-time state where tokens
have collapsed onto each other or onto antipodes.

Array conventions: tokens are rows, x (n, d); the attention output Ahat is (n, d), row i = Ahat_i.
"""

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)

SA = 0
USA = 1
CAUSAL_SA = 2
ATTENTION_CODES = {"sa": SA, "usa": USA, "causal_sa": CAUSAL_SA}


@njit(nogil=True, cache=True)
def attention(x, beta, kind, ahat, logscale, logits):
    """Attention directions and log-scales of all tokens.

    x: (n, d) float64 token states. beta: float. kind: SA, USA or CAUSAL_SA.
    ahat: (n, d) output, Ahat_i (see module docstring). logscale: (n,) output, c_i.
    logits: (n,) work array.
    """
    n, d = x.shape
    log_n = np.log(n)
    for i in range(n):
        jmax = i + 1 if kind == CAUSAL_SA else n
        m = -np.inf
        for j in range(jmax):
            acc = 0.0
            for k in range(d):
                acc += x[i, k] * x[j, k]
            logits[j] = beta * acc
            if logits[j] > m:
                m = logits[j]
        for k in range(d):
            ahat[i, k] = 0.0
        total = 0.0
        for j in range(jmax):
            w = np.exp(logits[j] - m)
            total += w
            for k in range(d):
                ahat[i, k] += w * x[j, k]
        if kind == USA:
            logscale[i] = m - log_n
        else:
            inv = 1.0 / total
            for k in range(d):
                ahat[i, k] *= inv
            logscale[i] = 0.0


@njit(nogil=True, cache=True)
def householder_r(a, work, r_out):
    """R factor of the Householder QR of A = a.T (d x n), LAPACK sign convention.

    a: (n, d), row j = column j of A (not modified). work: (n, d) scratch.
    r_out: (r, n) output, r = min(n, d); upper trapezoidal, R^T R = A^T A.
    """
    n, d = a.shape
    r = min(n, d)
    work[:, :] = a
    for k in range(r):
        alpha = work[k, k]
        xnorm2 = 0.0
        for i in range(k + 1, d):
            xnorm2 += work[k, i] * work[k, i]
        if xnorm2 == 0.0:
            # H = I (LAPACK tau = 0): keep alpha with its sign
            r_out[k, k] = alpha
        else:
            beta_k = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
            # u = x - beta e1 is stored in work[k, k:]; H = I - 2 u u^T / |u|^2
            u0 = alpha - beta_k
            work[k, k] = u0
            unorm2 = u0 * u0 + xnorm2
            for j in range(k + 1, n):
                dot = 0.0
                for i in range(k, d):
                    dot += work[k, i] * work[j, i]
                f = 2.0 * dot / unorm2
                for i in range(k, d):
                    work[j, i] -= f * work[k, i]
            r_out[k, k] = beta_k
        for j in range(k):
            r_out[k, j] = 0.0
        for j in range(k + 1, n):
            r_out[k, j] = work[j, k]


@njit(nogil=True, cache=True)
def gaussian_values(r_fac, buf, off, s, out):
    """Rows of s V A for Gaussian V, from the factor R and standard normals W.

    r_fac: (r, n) with R^T R = A^T A. buf: 1-D standard normals; W (r, d) is buf[off:off + r*d]
    row-major. s: value std. out: (n, d) output, out[i] = s * sum_k R[k, i] W[k].
    """
    r, n = r_fac.shape
    d = out.shape[1]
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
    """s V Ahat_i for every token.

    buf: 1-D standard normals; V (d, d) is buf[off:off + d*d] row-major. ahat, out: (n, d).
    """
    n, d = ahat.shape
    for i in range(n):
        for a in range(d):
            acc = 0.0
            base = off + a * d
            for b in range(d):
                acc += buf[base + b] * ahat[i, b]
            out[i, a] = s * acc


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
def scaled_step(x, coef, logscale, direction):
    """x_i <- N(x_i + coef e^{c_i} direction_i) in place; False if a row is non-finite or zero.

    x, direction: (n, d); coef: float (may be negative); logscale: (n,) the c_i.
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
        if not normalize_row(x, i):
            return False
    return True
