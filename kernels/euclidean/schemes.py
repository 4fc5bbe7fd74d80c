"""Time stepping of the flow in R^d [GLPR-E] on rescaled tokens (docs/models.md section 3).

H heads with value, query and key matrices V_h, Q_h, K_h (d x d), V = sum_h V_h:

    dx_i/dt = sum_h sum_j P^h_ij V_h x_j,   P^h_ij = softmax_j(beta <Q_h x_i, K_h x_j>).

Rows of each P^h sum to one, so dx_i/dt = V x_i + sum_h V_h sum_j P^h_ij (x_j - x_i), and three
schemes advance rescaled tokens z_i in which the growth e^{tV} (or R^k) is taken out exactly:

- EULER, RK4 (the continuous flow): z = e^{-tV} x obeys
      dz_i/dt = sum_h M_h(t) sum_j P^h_ij (z_j - z_i),   M_h(t) = e^{-tV} V_h e^{tV},
      logits beta <(Q_h E) z_i, (K_h E) z_j>,   E = e^{tV};
  one head: M = V (taken as given, no product). Explicit Euler (the papers' h = 0.1, first order)
  or classical RK4 (fourth order). Euler on z is not Euler on x: z grows like e^{-tV} x, and
  (1 + h lambda)^k underestimates e^{k h lambda}, so for V = -I the spread decays too fast (2.4x
  too small at t = 30, h = 0.1); RK4 is accurate to ~1e-6 there (tests/test_euclidean_integrators.py).
- DISCRETE: the discrete-time transformer itself ([GLPR-E] (3), Remark 4; multi-head: section 6),
      x^{k+1}_i = x^k_i + h sum_h sum_j P^h_ij(x^k) V_h x^k_j,
  computed on Remark 4's rescaled tokens z^k = R^{-k} x^k, R = I + hV (invertible):
      z^{k+1}_i = z^k_i + h sum_h M_h^k sum_j P^h_ij (z^k_j - z^k_i),   M_h^k = R^{-(k+1)} V_h R^k,
      logits beta <(Q_h R^k) z_i, (K_h R^k) z_j>;
  one head: M = R^{-1} V. R^k and R^{-k} are accumulated by one product per step. As h -> 0 the
  scheme tends to the continuous flow (first order, like EULER).

A "frame" is what a scheme needs at one time: E (e^{tV} or R^k: x = E z), QE_h = Q_h E,
KE_h = K_h E and M_h, as arrays (d, d), (H, d, d), (H, d, d), (H, d, d).

e^{tV} is evaluated by scaling and squaring: A = tV / 2^s with |A|_1 <= 1/2, the Taylor
polynomial of degree 18 in Horner form (truncation < 1e-22 relative), then s squarings. Logits are
formed with the row maximum subtracted before the exponential, so that logits of size 1e300
neither overflow nor produce NaN. The form sum_j P_ij (z_j - z_i) is kept (not P z - z, whose
rounding does not vanish once tokens merge).
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    vocabulary,
)

EULER = 0
RK4 = 1
DISCRETE = 2
INTEGRATOR_CODES = dict(zip(vocabulary.EUCLIDEAN_INTEGRATORS, (EULER, RK4, DISCRETE)))

_TAYLOR_DEGREE = 18


@njit(nogil=True, cache=True)
def matmul(a, b, out):
    """out = a @ b for square (d, d) arrays; out must not alias a or b."""
    d = a.shape[0]
    for i in range(d):
        for j in range(d):
            acc = 0.0
            for k in range(d):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc


@njit(nogil=True, cache=True)
def expm(a, out):
    """Matrix exponential by scaling and squaring with a degree-18 Taylor polynomial.

    a: (d, d) float64 (not modified). out: (d, d) output, e^a.
    """
    d = a.shape[0]
    norm1 = 0.0
    for j in range(d):
        col = 0.0
        for i in range(d):
            col += abs(a[i, j])
        norm1 = max(norm1, col)
    s = 0
    if norm1 > 0.5:
        s = int(np.ceil(np.log2(norm1 / 0.5)))
    scaled = a / 2.0**s
    work = np.empty((d, d))
    # Horner: P = I + A/m (I + A/(m-1) (... (I + A/1 ...)))
    for i in range(d):
        for j in range(d):
            out[i, j] = 1.0 if i == j else 0.0
    for k in range(_TAYLOR_DEGREE, 0, -1):
        matmul(scaled, out, work)
        for i in range(d):
            for j in range(d):
                out[i, j] = work[i, j] / k + (1.0 if i == j else 0.0)
    for _ in range(s):
        matmul(out, out, work)
        out[:, :] = work


@njit(nogil=True, cache=True)
def allocate_frame(heads, d):
    """Empty frame arrays (E, QE, KE, M): (d, d), (H, d, d), (H, d, d), (H, d, d)."""
    return (np.empty((d, d)), np.empty((heads, d, d)), np.empty((heads, d, d)),
            np.empty((heads, d, d)))


@njit(nogil=True, cache=True)
def _project_heads(e, q, k, frame):
    """QE_h = Q_h E and KE_h = K_h E for every head, E = frame[0] (already filled)."""
    for h in range(q.shape[0]):
        matmul(q[h], e, frame[1][h])
        matmul(k[h], e, frame[2][h])


@njit(nogil=True, cache=True)
def continuous_frame(t, v_sum, v, q, k, frame):
    """The frame of the z = e^{-tV} x system at time t. v_sum: (d, d) = sum_h v[h]; v, q, k:
    (H, d, d). One head: M = V itself; several: M_h = e^{-tV} V_h e^{tV}."""
    e, _, _, m = frame
    expm(t * v_sum, e)
    _project_heads(e, q, k, frame)
    heads, d, _ = v.shape
    if heads == 1:
        m[0, :, :] = v[0]
        return
    inv = np.empty((d, d))
    work = np.empty((d, d))
    expm(-t * v_sum, inv)
    for h in range(heads):
        matmul(inv, v[h], work)
        matmul(work, e, m[h])


@njit(nogil=True, cache=True)
def discrete_frame(power, inv_power, rinv, v, q, k, frame):
    """The frame of Remark 4's z^k = R^{-k} x^k: E = R^k (power), M_h = R^{-1} R^{-k} V_h R^k
    (inv_power = R^{-k}, rinv = R^{-1}); one head: M = R^{-1} V."""
    e, _, _, m = frame
    e[:, :] = power
    _project_heads(e, q, k, frame)
    heads, d, _ = v.shape
    if heads == 1:
        matmul(rinv, v[0], m[0])
        return
    work = np.empty((d, d))
    work2 = np.empty((d, d))
    for h in range(heads):
        matmul(inv_power, v[h], work)
        matmul(work, power, work2)
        matmul(rinv, work2, m[h])


@njit(nogil=True, cache=True)
def copy_frame(src, dst):
    """dst <- src, frame by frame (numba cannot loop over a tuple of unequal arrays)."""
    dst[0][:, :] = src[0]
    dst[1][:, :, :] = src[1]
    dst[2][:, :, :] = src[2]
    dst[3][:, :, :] = src[3]


@njit(nogil=True, cache=True)
def project(z, qe, ke, qz, kz):
    """qz_i = QE z_i, kz_i = KE z_i for the rows of z (n, d)."""
    n, d = z.shape
    for i in range(n):
        for a in range(d):
            acc_q = 0.0
            acc_k = 0.0
            for b in range(d):
                acc_q += qe[a, b] * z[i, b]
                acc_k += ke[a, b] * z[i, b]
            qz[i, a] = acc_q
            kz[i, a] = acc_k


@njit(nogil=True, cache=True)
def attention_matrix(z, qe, ke, beta, qz, kz, p):
    """Row-softmax P of L_ij = beta <QE z_i, KE z_j>, row max subtracted.

    z: (n, d). qe, ke: (d, d) = Q E, K E of one head. qz, kz: (n, d) work arrays.
    p: (n, n) output.
    """
    n, d = z.shape
    project(z, qe, ke, qz, kz)
    for i in range(n):
        m = -np.inf
        for j in range(n):
            acc = 0.0
            for a in range(d):
                acc += qz[i, a] * kz[j, a]
            p[i, j] = beta * acc
            if p[i, j] > m:
                m = p[i, j]
        total = 0.0
        for j in range(n):
            w = np.exp(p[i, j] - m)
            p[i, j] = w
            total += w
        for j in range(n):
            p[i, j] /= total


@njit(nogil=True, cache=True)
def velocity(z, frame, beta, qz, kz, row, mix, out):
    """Right-hand side sum_h M_h sum_j P^h_ij (z_j - z_i) in the given frame.

    z: (n, d). qz, kz, mix: (n, d) work; row: (n,) work. out: (n, d) output. Same arithmetic
    as `attention_matrix`, without storing P.
    """
    _, qe, ke, m = frame
    n, d = z.shape
    for h in range(qe.shape[0]):
        project(z, qe[h], ke[h], qz, kz)
        for i in range(n):
            mx = -np.inf
            for j in range(n):
                acc = 0.0
                for a in range(d):
                    acc += qz[i, a] * kz[j, a]
                row[j] = beta * acc
                if row[j] > mx:
                    mx = row[j]
            for a in range(d):
                mix[i, a] = 0.0
            total = 0.0
            for j in range(n):
                w = np.exp(row[j] - mx)
                total += w
                for a in range(d):
                    mix[i, a] += w * (z[j, a] - z[i, a])
            for a in range(d):
                mix[i, a] /= total
        for i in range(n):
            for a in range(d):
                acc = 0.0
                for b in range(d):
                    acc += m[h, a, b] * mix[i, b]
                if h == 0:
                    out[i, a] = acc
                else:
                    out[i, a] += acc


@njit(nogil=True, cache=True)
def allocate_work(n, d):
    """Work arrays of `advance`: qz, kz, mix, stage, k1..k4 (n, d) and row (n,)."""
    return (np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, d)),
            np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty(n))


@njit(nogil=True, cache=True)
def advance(z, scheme, h, beta, f0, f_mid, f1, work):
    """One step of one state z (n, d) in place: z + h velocity(f0) (EULER, DISCRETE, whose
    frames differ) or classical RK4 with frames at t, t + h/2, t + h."""
    qz, kz, mix, stage, k1, k2, k3, k4, row = work
    n, d = z.shape
    velocity(z, f0, beta, qz, kz, row, mix, k1)
    if scheme != RK4:
        for i in range(n):
            for a in range(d):
                z[i, a] += h * k1[i, a]
        return
    for i in range(n):
        for a in range(d):
            stage[i, a] = z[i, a] + 0.5 * h * k1[i, a]
    velocity(stage, f_mid, beta, qz, kz, row, mix, k2)
    for i in range(n):
        for a in range(d):
            stage[i, a] = z[i, a] + 0.5 * h * k2[i, a]
    velocity(stage, f_mid, beta, qz, kz, row, mix, k3)
    for i in range(n):
        for a in range(d):
            stage[i, a] = z[i, a] + h * k3[i, a]
    velocity(stage, f1, beta, qz, kz, row, mix, k4)
    for i in range(n):
        for a in range(d):
            z[i, a] += h / 6.0 * (k1[i, a] + 2.0 * k2[i, a] + 2.0 * k3[i, a] + k4[i, a])
