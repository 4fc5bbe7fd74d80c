"""Drift and one integration step of the sphere attention flows (`sphere.flow`, docs/models.md sections 1, 2, 6).

State x (n, d), tokens as rows. The drift is evaluated in the transposed layout (xt, at, ft: (d, n))
with the weight matrix stored key-major, e[j, i] = weight of key j for query i, so that every
elementwise loop runs over the contiguous query index i with no reduction in it and vectorises
without reassociation (no fastmath). The three products, logits e = x (P^T xt) (Q = K = I: the Gram
x xt), the weighted sum at = xt e and, for general values, V_h at, are 2-D `np.dot` calls (float64,
or float32: every function here takes either, `lowlevel.vecmath.vexp` picks the exponential), which numba
hands to the BLAS gemm that scipy ships (OpenBLAS): it returns the same bits for the
same inputs on the same machine (checked here with 1 and 2 OpenBLAS threads: threads split the
output, not the sums), so runs stay deterministic; they agree with a plain NumPy evaluation to
rounding, ~1e-15, not bitwise. Other sums (softmax normalisers, head combination, tangent
projection, norms) are serial over j or k, vectorised over i. `euler_step` fuses the projection
with the retraction.

Causal attention keeps the full products and sets e[j, i] = 0 for keys j > i: they add exact zeros.

Stable evaluation: see `sphere.flow`. With Q = K = I (not time-varying, beta >= 0) the shift is the
common constant beta max_k |x_k|^2 (the Gram's largest diagonal entry), the exponentials are taken
on the upper triangle j <= i only and mirrored, so the weight matrix is exactly symmetric.
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from ..lowlevel.vecmath import exp_vec, fma, tiny_like, vexp  # noqa: F401  (exp_vec, fma: re-exported)

SA = 0
USA = 1
HARDMAX = 2  # beta -> infinity: uniform weights on the keys of maximal logit (`_hardmax_row`)
EULER = 0
HEUN = 1
RK4 = 2
# value fast paths
V_IDENTITY = 0
V_MINUS_IDENTITY = 1
V_GENERAL = 2
# time-varying modes
TV_NONE = 0
TV_COS = 1
TV_ABS_COS = 2


@njit(nogil=True, cache=True, inline="always")
def _weights(x, t, h, par, mats, ws):
    """Attention of head h in the transposed layout: at[:, i] = sum_j w_ij x_j, lsh[i] = log-scale.

    e[j, i] holds exp(logit_ij - shift_i) for the keys j of query i, 0 for masked (causal) keys.
    Returns True when the weights do not depend on the head (Q = K = I, not time-varying).
    """
    beta, kind, causal, qk_identity, tv_mode, log_scale0 = par[0], par[1], par[2], par[3], par[5], par[6]
    m = mats[0]
    amp, omega, phase = mats[2], mats[3], mats[4]
    xt, yt, at, bt, ft, e, tot, mx, lsh, u1, u2, mt = ws  # `sphere.flow.workspace`
    n, d = x.shape
    symmetric = qk_identity and tv_mode == TV_NONE and beta >= 0.0 and kind != HARDMAX
    if symmetric:
        # e_ij = exp(beta (<x_i, x_j> - c)), c = max_k |x_k|^2 >= <x_i, x_j>: one symmetric matrix
        np.dot(x, xt, e)
        c = 0.0
        for i in range(n):
            c = max(c, e[i, i])
        for j in range(n):
            ej = e[j, j:]
            for i in range(n - j):
                ej[i] = vexp(beta * (ej[i] - c))
        for j in range(n):
            ej = e[j]
            if causal:
                for i in range(j):
                    ej[i] = 0.0
            else:
                for i in range(j):
                    ej[i] = e[i, j]
        for i in range(n):
            mx[i] = beta * c
    else:
        if tv_mode == TV_NONE:  # P = Q^T K as it is (1.0 * m, the same bits)
            np.dot(m[h].T, xt, yt)  # yt[:, i] = P^T x_i, so that logit_ij = beta <x_j, yt[:, i]>
        else:
            for p in range(d):
                dp = amp[h, p] * np.cos(omega[h, p] * t + phase[h, p])
                if tv_mode == TV_ABS_COS:
                    dp = abs(dp)
                for q in range(d):
                    mt[p, q] = dp * m[h, p, q]
            np.dot(mt.T, xt, yt)
        np.dot(x, yt, e)
        b = 1.0 if kind == HARDMAX else beta  # hardmax: the logits themselves (beta irrelevant)
        for i in range(n):
            mx[i] = -np.inf
        for j in range(n):
            i0 = j if causal else 0
            ej = e[j, i0:]
            mxj = mx[i0:]
            for i in range(n - i0):
                ej[i] = b * ej[i]
                mxj[i] = max(mxj[i], ej[i])
        for j in range(n):
            ej = e[j]
            i0 = j if causal else 0
            for i in range(i0):
                ej[i] = 0.0
            if kind == HARDMAX:
                _hardmax_row(ej, mx, i0, par[8])
            else:
                for i in range(i0, n):
                    ej[i] = vexp(ej[i] - mx[i])
    # normalisers: serial sums over keys j, vectorised over queries i
    for i in range(n):
        tot[i] = 0.0
    for j in range(n):
        ej = e[j]
        for i in range(n):
            tot[i] += ej[i]
    np.dot(xt, e, at)
    log_n = np.log(n)
    for i in range(n):
        if kind != USA:
            lsh[i] = log_scale0
        else:
            lsh[i] = mx[i] - log_n + log_scale0
    if kind != USA:
        for i in range(n):
            tot[i] = 1.0 / tot[i]
        for k in range(d):
            atk = at[k]
            for i in range(n):
                atk[i] *= tot[i]
    return symmetric


@njit(nogil=True, cache=True, inline="always")
def _hardmax_row(ej, mx, i0, tol):
    """ej[i] = 1 if key j's logit is within tol (1 + |max|) of query i's maximum, else 0: the
    weights of the beta -> infinity limit of SA, before the row normalisation (i >= i0)."""
    for i in range(i0, ej.shape[0]):
        ej[i] = 1.0 if ej[i] >= mx[i] - tol * (1.0 + abs(mx[i])) else 0.0


@njit(nogil=True, cache=True)
def _rotated_value(vh, at, yt, bt, angle):
    """bt = R V R^T at, R the rotation by `angle` in the (e_1, e_2) plane: V(t) of
    `value_rotation` ([RST] Thm 5.3: the spectrum is kept, the eigenvectors turn). yt: scratch."""
    c, s = np.cos(angle), np.sin(angle)
    yt[:, :] = at
    n = at.shape[1]
    for i in range(n):  # R^T at
        yt[0, i] = c * at[0, i] + s * at[1, i]
        yt[1, i] = -s * at[0, i] + c * at[1, i]
    np.dot(vh, yt, bt)
    for i in range(n):  # R (V R^T at)
        b0, b1 = bt[0, i], bt[1, i]
        bt[0, i] = c * b0 - s * b1
        bt[1, i] = s * b0 + c * b1


@njit(nogil=True, cache=True)
def head_sum(x, t, par, mats, ws, ls):
    """fs[:, i] = exp(-ls_i) sum_h exp(lsh_i) V_h A^h_i in the transposed layout (d, n); fills xt.

    Returns fs, one of the workspace's (d, n) arrays (at, bt or ft); ls: (n,) output log-scales.
    """
    v_code = par[4]
    v = mats[1]
    xt, yt, at, bt, ft, e, tot, mx, lsh, u1, u2, mt = ws
    n, d = x.shape
    heads = v.shape[0]
    for i in range(n):
        for k in range(d):
            xt[k, i] = x[i, k]
    shared = False
    for h in range(heads):
        if not shared:  # Q = K = I: every head has the same weights
            shared = _weights(x, t, h, par, mats, ws)
        if v_code == V_GENERAL and par[7] != 0.0:  # V_h(t) = R(t) V_h R(t)^T
            _rotated_value(v[h], at, yt, bt, par[7] * t)
            b = bt
        elif v_code == V_GENERAL:  # bt[:, i] = V_h at[:, i]
            np.dot(v[h], at, bt)
            b = bt
        elif v_code == V_IDENTITY:
            b = at
        else:
            for p in range(d):
                for i in range(n):
                    bt[p, i] = -at[p, i]
            b = bt
        if h == 0:
            for i in range(n):
                ls[i] = lsh[i]
            if heads == 1:
                return b
            for p in range(d):
                for i in range(n):
                    ft[p, i] = b[p, i]
        else:  # combine heads in log-scale
            for i in range(n):
                top = max(ls[i], lsh[i])
                tot[i] = vexp(ls[i] - top)
                mx[i] = vexp(lsh[i] - top)
                ls[i] = top
            for p in range(d):
                for i in range(n):
                    ft[p, i] = tot[i] * ft[p, i] + mx[i] * b[p, i]
    return ft


@njit(nogil=True, cache=True, inline="always")
def _radial(xt, fs, dot):
    """dot[i] = <x_i, fs_i> (serial over k, vectorised over i); xt, fs: (d, n)."""
    d, n = xt.shape
    for i in range(n):
        dot[i] = 0.0
    for k in range(d):
        xtk = xt[k]
        fsk = fs[k]
        for i in range(n):
            dot[i] += xtk[i] * fsk[i]


@njit(nogil=True, cache=True, inline="always")
def drift(x, t, par, mats, ws, f, ls):
    """Drift of all tokens as f_i = exp(ls_i) * fhat_i (`sphere.flow` docstring).

    x: (n, d) states (on or near the sphere). t: time. par: (beta, kind SA|USA|HARDMAX, causal,
    qk_identity, v_code, tv_mode, log_scale0, value_rotation omega, hardmax tie tolerance).
    mats: (m (H, d, d) = Q^T K per head, v (H, d, d), amp, omega, phase (H, d)). ws: `sphere.flow.workspace(n, d, H)`. f: (n, d) output fhat; ls: (n,) output
    log-scales.
    """
    causal, v_code = par[2], par[4]
    xt, tot = ws[0], ws[6]
    n, d = x.shape
    fs = head_sum(x, t, par, mats, ws, ls)
    _radial(xt, fs, tot)  # tangent projection P_{x_i}, back to the (n, d) layout
    for i in range(n):
        for k in range(d):
            f[i, k] = fs[k, i] - tot[i] * x[i, k]
    if causal and v_code != V_GENERAL:  # V = +-I: A_1 = +-x_1 exactly, token 1 does not move at all
        for k in range(d):
            f[0, k] = 0.0


@njit(nogil=True, cache=True, inline="always")
def euler_step(x, t, h, par, mats, ws, ls):
    """drift + retract(x, h, ls, f) fused, in the transposed layout; same formulas, same result
    up to the rounding of the normalisation (one reciprocal per token). False if non-finite."""
    causal, v_code = par[2], par[4]
    xt, yt, at, bt, ft, e, dot, fx, fa, norm2, moved, mt = ws
    n, d = x.shape
    fs = head_sum(x, t, par, mats, ws, ls)
    _radial(xt, fs, dot)
    for i in range(n):  # x_i + h e^{ls_i} inc_i, the scale on the side where it is <= 1
        if ls[i] > 0.0:
            fx[i] = np.exp(-ls[i])
            fa[i] = h
        elif ls[i] < 0.0:
            fx[i] = 1.0
            fa[i] = h * np.exp(ls[i])
        else:
            fx[i] = 1.0
            fa[i] = h
        norm2[i] = 0.0
        moved[i] = 0.0
    for k in range(d):
        xtk = xt[k]
        fsk = fs[k]
        ytk = yt[k]
        for i in range(n):
            inc = fsk[i] - dot[i] * xtk[i]
            y = fx[i] * xtk[i] + fa[i] * inc
            ytk[i] = y
            norm2[i] += y * y
            moved[i] += abs(inc)  # 0 iff inc_i = 0 exactly (NaN: not 0)
    if causal and v_code != V_GENERAL:  # V = +-I: token 1 does not move at all
        moved[0] = 0.0
    for i in range(n):
        if moved[i] == 0.0:  # inc_i exactly 0: the token stays bitwise fixed
            continue
        nrm2 = norm2[i]
        if not nrm2 >= tiny_like(x):  # |y|^2 underflowed (or NaN): normalise y / max_k |y_k| first
            top = 0.0
            for k in range(d):
                top = max(top, abs(yt[k, i]))
            if not top > 0.0:
                return False
            nrm2 = 0.0
            for k in range(d):
                yt[k, i] /= top
                nrm2 += yt[k, i] * yt[k, i]
        norm = np.sqrt(nrm2)
        if not (norm > 0.0 and norm < np.inf):
            return False
        s = 1.0 / norm
        for k in range(d):
            x[i, k] = yt[k, i] * s
    return True


@njit(nogil=True, cache=True)
def field(x, t, par, mats, ws, ls, out):
    """Drift with its scale applied: out (n, d) = exp(ls_i) fhat_i; ls: (n,) scratch."""
    drift(x, t, par, mats, ws, out, ls)
    n, d = x.shape
    for i in range(n):
        if ls[i] != 0.0:
            s = np.exp(ls[i])
            for k in range(d):
                out[i, k] *= s


@njit(nogil=True, cache=True)
def retract(x, coef, ls, inc):
    """x_i <- N(x_i + coef e^{ls_i} inc_i) in place; False if a row is non-finite or zero.

    The scale is applied on the side where it is <= 1 (N is invariant under positive scaling);
    a finite, non-zero row whose squared norm underflows is divided by its largest entry first.
    A row with inc_i exactly 0 is left untouched (no renormalisation rounding): a fixed token stays
    bitwise fixed. x, inc: (n, d); ls: (n,).
    """
    n, d = x.shape
    for i in range(n):
        moving = False
        for k in range(d):
            if inc[i, k] != 0.0:
                moving = True
        if not moving:
            continue
        if ls[i] > 0.0:
            fx = np.exp(-ls[i])
            fa = coef
        else:
            fx = 1.0
            fa = coef * np.exp(ls[i])
        norm2 = 0.0
        for k in range(d):
            yk = fx * x[i, k] + fa * inc[i, k]
            x[i, k] = yk
            norm2 += yk * yk
        if not norm2 >= tiny_like(x):  # |y|^2 underflowed (or NaN): normalise y / max_k |y_k| first
            top = 0.0
            for k in range(d):
                top = max(top, abs(x[i, k]))
            if not top > 0.0:
                return False
            norm2 = 0.0
            for k in range(d):
                yk = x[i, k] / top
                x[i, k] = yk
                norm2 += yk * yk
        norm = np.sqrt(norm2)
        if not (norm > 0.0 and norm < np.inf):
            return False
        s = 1.0 / norm
        for k in range(d):
            x[i, k] *= s
    return True


@njit(nogil=True, cache=True, inline="always")
def step(x, t, h, integrator, par, mats, ws, stages, ls):
    """Advance x (n, d) in place by one step; False if the state became non-finite.

    stages: (5, n, d) scratch; ls: (n,) scratch.
    """
    if integrator == EULER:
        return euler_step(x, t, h, par, mats, ws, ls)
    n, d = x.shape
    k1, k2, k3, k4, y = stages[0], stages[1], stages[2], stages[3], stages[4]
    field(x, t, par, mats, ws, ls, k1)
    if integrator == HEUN:
        for i in range(n):
            for k in range(d):
                y[i, k] = x[i, k] + h * k1[i, k]
        field(y, t + h, par, mats, ws, ls, k2)
        for i in range(n):
            ls[i] = 0.0
            for k in range(d):
                y[i, k] = k1[i, k] + k2[i, k]
        return retract(x, 0.5 * h, ls, y)
    for i in range(n):
        for k in range(d):
            y[i, k] = x[i, k] + 0.5 * h * k1[i, k]
    field(y, t + 0.5 * h, par, mats, ws, ls, k2)
    for i in range(n):
        for k in range(d):
            y[i, k] = x[i, k] + 0.5 * h * k2[i, k]
    field(y, t + 0.5 * h, par, mats, ws, ls, k3)
    for i in range(n):
        for k in range(d):
            y[i, k] = x[i, k] + h * k3[i, k]
    field(y, t + h, par, mats, ws, ls, k4)
    for i in range(n):
        ls[i] = 0.0
        for k in range(d):
            y[i, k] = k1[i, k] + 2.0 * k2[i, k] + 2.0 * k3[i, k] + k4[i, k]
    return retract(x, h / 6.0, ls, y)
