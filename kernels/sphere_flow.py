"""Deterministic attention flows on the sphere [GLPR-P, RST] (models.md sections 1, 2 and 6).

Tokens x_1..x_n on S^{d-1} move by

    dx_i/dt = P_{x_i}( A_i(X) ),     P_x y = y - <x, y> x,
    A_i(X) = sum_h sum_{j in J(i)} w^h_ij V_h x_j,     w^h_ij from logits beta <Q_h x_i, K_h x_j>,

summed over heads without 1/H. SA: w = softmax over j; USA: w = exp(logit)/n; causal: J(i) = {j <= i}
(token 1 attends only to itself), else J(i) = {1..n}. The [RST] convention (`rst_scaling`) divides
every head by sqrt(d): a time change t_RST = sqrt(d) t for constant weights. With `time_varying`,
Q_h^T K_h is replaced by P_h(t) = D_h(t) Q_h^T K_h (`ensembles`).

Stable evaluation. Each head's row i is computed as A^h_i = exp(c^h_i) Ahat^h_i with every exponential
<= 1: logits minus the row max m_i (SA: c = 0; USA: c = m_i - log n), so beta up to 1e3 neither
overflows nor gives NaN. When Q = K = I (not time-varying, beta >= 0) the shift is the common
constant beta max_k |x_k|^2 >= every logit (Cauchy-Schwarz), which makes the weight matrix symmetric:
half the inner products and exponentials. Heads are combined in log-scale, so the drift is
f_i = exp(c_i) fhat_i.

Integrators, h = T / layers, t_k = k h:
- euler (retraction Euler, the papers' scheme): x <- N(x + h f(x, t)), with the scale e^{c_i} put
  on the side of the sum where it is <= 1 (N is scale invariant), so USA at large beta is exact too;
- heun:  k1 = f(x, t), k2 = f(x + h k1, t + h), x <- N(x + h (k1 + k2)/2);
- rk4:   classical stages, x <- N(x + h (k1 + 2 k2 + 2 k3 + k4)/6).
Stages are evaluated in the ambient space with the same formula (F(y) = A(y) - <y, A(y)> y keeps
|y| = 1 invariant), and only the step's end is normalised. Heun and RK4 form e^{c} fhat explicitly;
a USA run whose scale overflows is reported as non-finite.

Outcomes at each checkpoint (`OUTPUTS`): the shared ones of `outcomes` (overlap extremes, cluster
class, cluster count, t_hit, nonfinite) and
- frac_close: fraction of pairs i < j with <x_i, x_j> >= 1 - delta ([GLPR-P] Fig. 3; 1 when n = 1);
- energy: E_beta = (1/(2 beta n^2)) sum_ij exp(beta <x_i, x_j>), evaluated as exp(shift + log(...)),
  inf only if the value itself exceeds float64; for beta = 0 the limit of E_beta - 1/(2 beta), i.e.
  (1/(2 n^2)) sum_ij <x_i, x_j> = |mean x|^2 / 2 (the same dynamics: USA with Q = K = V = I is
  n times its gradient flow);
- in_hemisphere: are the tokens in an open hemisphere, i.e. 0 is not in their convex hull
  (`hemisphere`: Wolfe's exact min-norm-point algorithm with a tolerance).

Randomness: per trajectory, from its own Generator: the start, then the matrices, then (for
"rst_random_frequencies") the schedule, then every `period` steps the matrices again (order in
`ensembles`). A trajectory that becomes non-finite stops: NaN/0/False from that checkpoint on.
"""

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from tokensweep.kernels import outcomes
from tokensweep.kernels.ensembles import (
    draw_frequencies,
    draw_start,
    draw_weights,
    in_open_hemisphere,
)
from tokensweep.kernels.outcomes import OutputSpec

SA = 0
USA = 1
ATTENTIONS = ("sa", "usa", "causal_sa", "causal_usa")
EULER = 0
HEUN = 1
RK4 = 2
INTEGRATOR_CODES = {"euler": EULER, "heun": HEUN, "rk4": RK4}
# value fast paths
V_IDENTITY = 0
V_MINUS_IDENTITY = 1
V_GENERAL = 2
# time-varying modes
TV_NONE = 0
TV_COS = 1
TV_ABS_COS = 2

OUTPUTS = dict(outcomes.OUTPUTS)
OUTPUTS["frac_close"] = OutputSpec(
    True, "float64", "fraction of token pairs i < j with overlap >= 1 - delta", "1"
)
OUTPUTS["in_hemisphere"] = OutputSpec(
    True, "bool", "tokens lie in an open hemisphere (0 not in their convex hull)", "1"
)
OUTPUTS["energy"] = OutputSpec(
    True, "float64", "interaction energy (1/(2 beta n^2)) sum_ij exp(beta <x_i, x_j>)", "1"
)


@intrinsic
def _int64_bits_as_float64(typingctx, bits):
    """Reinterpret the bits of an int64 as a float64 (for 2^k in `exp_vec`)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # trailing zeros: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10


@njit(nogil=True, cache=True, inline="always")
def exp_vec(x):
    """exp(x) within 1 ulp for |x| <= 708, written so that loops over it vectorise (libm's exp
    does not): x = k ln2 + r (Cody-Waite), |r| <= ln2/2, e^r by its Taylor polynomial of degree 13
    (truncation < 5e-18), times 2^k built from its bits. x is clamped to [-708, 708] (exp(-708) ~
    3e-308 stands in for smaller values: a weight relative to the row's largest, 1); NaN stays NaN.
    """
    x = x if not (x < -708.0) else -708.0
    x = x if not (x > 708.0) else 708.0
    kf = np.floor(x * _LOG2E + 0.5)
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    ki = np.int64(kf) if kf == kf else np.int64(0)  # NaN: any k, p is NaN
    return p * _int64_bits_as_float64((ki + 1023) << 52)


@njit(nogil=True, cache=True)
def workspace(n, d, heads):
    """Scratch arrays of the drift: (xt, yt, at, bt, ft (d, n); e (n, n); tot, mx, lsh (n,);
    mt (d, d); dfac (d,))."""
    return (np.empty((d, n)), np.empty((d, n)), np.empty((d, n)), np.empty((d, n)),
            np.empty((d, n)), np.empty((n, n)), np.empty(n), np.empty(n), np.empty(n),
            np.empty((d, d)), np.empty(d))


@njit(nogil=True, cache=True)
def _weights(x, t, h, par, mats, ws):
    """Attention of head h in the transposed layout: at[:, i] = sum_j w_ij x_j, lsh[i] = log-scale.

    e[j, i] holds exp(logit_ij - shift_i) for the keys j of query i (j <= i if causal). Every inner
    loop runs over the query index i, contiguous, with no reduction in it, so LLVM vectorises it
    without reassociating sums (no fastmath): each sum over j or k is still taken in serial order.
    """
    beta, kind, causal, qk_identity, v_code, tv_mode, log_scale0 = par
    m, v, amp, omega, phase = mats
    xt, yt, at, bt, ft, e, tot, mx, lsh, mt, dfac = ws
    n, d = x.shape
    acc = np.empty(n)
    symmetric = qk_identity and tv_mode == TV_NONE and beta >= 0.0
    if symmetric:
        # e_ij = exp(beta (<x_i, x_j> - c)), c = max_k |x_k|^2 >= <x_i, x_j>: one symmetric matrix
        c = 0.0
        for i in range(n):
            s2 = 0.0
            for k in range(d):
                s2 += x[i, k] * x[i, k]
            c = max(c, s2)
        for j in range(n):
            nj = n - j
            for i in range(nj):
                acc[i] = 0.0
            k = 0
            while k + 4 <= d:  # 4 terms per pass, added in the same order as one at a time
                x0, x1, x2, x3 = x[j, k], x[j, k + 1], x[j, k + 2], x[j, k + 3]
                t0, t1, t2, t3 = xt[k, j:], xt[k + 1, j:], xt[k + 2, j:], xt[k + 3, j:]
                for i in range(nj):
                    acc[i] = (((acc[i] + x0 * t0[i]) + x1 * t1[i]) + x2 * t2[i]) + x3 * t3[i]
                k += 4
            for kk in range(k, d):
                xjk = x[j, kk]
                xtk = xt[kk, j:]
                for i in range(nj):
                    acc[i] += xjk * xtk[i]
            ej = e[j, j:]
            for i in range(nj):
                ej[i] = exp_vec(beta * (acc[i] - c))
        if not causal:
            for j in range(n):
                for i in range(j):
                    e[j, i] = e[i, j]
        for i in range(n):
            mx[i] = beta * c
    else:
        for p in range(d):
            dp = 1.0
            if tv_mode != TV_NONE:
                dp = amp[h, p] * np.cos(omega[h, p] * t + phase[h, p])
                if tv_mode == TV_ABS_COS:
                    dp = abs(dp)
            for q in range(d):
                mt[p, q] = dp * m[h, p, q]
        # yt[:, i] = P(t)^T x_i, so that logit_ij = beta <yt[:, i], x_j>
        for q in range(d):
            ytq = yt[q]
            for i in range(n):
                ytq[i] = 0.0
            for p in range(d):
                mpq = mt[p, q]
                xtp = xt[p]
                for i in range(n):
                    ytq[i] += mpq * xtp[i]
        for i in range(n):
            mx[i] = -np.inf
        for j in range(n):
            i0 = j if causal else 0
            nj = n - i0
            for i in range(nj):
                acc[i] = 0.0
            for q in range(d):
                xjq = x[j, q]
                ytq = yt[q, i0:]
                for i in range(nj):
                    acc[i] += xjq * ytq[i]
            ej = e[j, i0:]
            mxj = mx[i0:]
            for i in range(nj):
                ej[i] = beta * acc[i]
                mxj[i] = max(mxj[i], ej[i])
        for j in range(n):
            i0 = j if causal else 0
            ej = e[j, i0:]
            mxj = mx[i0:]
            for i in range(n - i0):
                ej[i] = exp_vec(ej[i] - mxj[i])
    # sums over keys j in serial order; inner loops over queries i >= i0, as views from 0
    for i in range(n):
        tot[i] = 0.0
    for j in range(n):
        i0 = j if causal else 0
        ej = e[j, i0:]
        totj = tot[i0:]
        for i in range(n - i0):
            totj[i] += ej[i]
    for k in range(d):
        atk = at[k]
        for i in range(n):
            atk[i] = 0.0
        j = 0
        while not causal and j + 4 <= n:  # 4 keys per pass, same order as one at a time
            x0, x1, x2, x3 = x[j, k], x[j + 1, k], x[j + 2, k], x[j + 3, k]
            e0, e1, e2, e3 = e[j], e[j + 1], e[j + 2], e[j + 3]
            for i in range(n):
                atk[i] = (((atk[i] + e0[i] * x0) + e1[i] * x1) + e2[i] * x2) + e3[i] * x3
            j += 4
        for jj in range(j, n):
            i0 = jj if causal else 0
            xjk = x[jj, k]
            ej = e[jj, i0:]
            atkj = at[k, i0:]
            for i in range(n - i0):
                atkj[i] += ej[i] * xjk
    log_n = np.log(n)
    for i in range(n):
        if kind == SA:
            lsh[i] = log_scale0
        else:
            lsh[i] = mx[i] - log_n + log_scale0
    if kind == SA:
        for k in range(d):
            atk = at[k]
            for i in range(n):
                atk[i] /= tot[i]
    return symmetric


@njit(nogil=True, cache=True)
def drift(x, t, par, mats, ws, f, ls):
    """Drift of all tokens as f_i = exp(ls_i) * fhat_i (module docstring).

    x: (n, d) states (on or near the sphere). t: time. par: (beta, kind SA|USA, causal, qk_identity,
    v_code, tv_mode, log_scale0). mats: (m (H, d, d) = Q^T K per head, v (H, d, d), amp, omega,
    phase (H, d)). ws: `workspace(n, d, H)`. f: (n, d) output fhat; ls: (n,) output log-scales.
    """
    causal, v_code = par[2], par[4]
    v = mats[1]
    xt, yt, at, bt, ft, e, tot, mx, lsh, mt, dfac = ws
    n, d = x.shape
    for i in range(n):
        for k in range(d):
            xt[k, i] = x[i, k]
    shared = False
    for h in range(v.shape[0]):
        if not shared:  # Q = K = I: every head has the same weights
            shared = _weights(x, t, h, par, mats, ws)
        if v_code == V_GENERAL:  # bt[:, i] = V_h at[:, i]
            for p in range(d):
                for i in range(n):
                    bt[p, i] = 0.0
                for q in range(d):
                    vpq = v[h, p, q]
                    for i in range(n):
                        bt[p, i] += vpq * at[q, i]
        else:
            sign = 1.0 if v_code == V_IDENTITY else -1.0
            for p in range(d):
                for i in range(n):
                    bt[p, i] = sign * at[p, i]
        if h == 0:
            for i in range(n):
                ls[i] = lsh[i]
            for p in range(d):
                for i in range(n):
                    ft[p, i] = bt[p, i]
        else:  # combine heads in log-scale
            for i in range(n):
                top = max(ls[i], lsh[i])
                tot[i] = exp_vec(ls[i] - top)
                mx[i] = exp_vec(lsh[i] - top)
                ls[i] = top
            for p in range(d):
                for i in range(n):
                    ft[p, i] = tot[i] * ft[p, i] + mx[i] * bt[p, i]
    # tangent projection P_{x_i}, back to the (n, d) layout
    for i in range(n):
        tot[i] = 0.0
    for k in range(d):
        for i in range(n):
            tot[i] += xt[k, i] * ft[k, i]
    for i in range(n):
        for k in range(d):
            f[i, k] = ft[k, i] - tot[i] * x[i, k]
    if causal and v_code != V_GENERAL:  # V = +-I: A_1 = +-x_1 exactly, token 1 does not move at all
        for k in range(d):
            f[0, k] = 0.0


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

    The scale is applied on the side where it is <= 1 (N is invariant under positive scaling).
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
        norm = np.sqrt(norm2)
        if not (norm > 0.0 and norm < np.inf):
            return False
        for k in range(d):
            x[i, k] /= norm
    return True


@njit(nogil=True, cache=True)
def step(x, t, h, integrator, par, mats, ws, stages, ls):
    """Advance x (n, d) in place by one step; False if the state became non-finite.

    stages: (5, n, d) scratch; ls: (n,) scratch.
    """
    if integrator == EULER:
        k1 = stages[0]
        drift(x, t, par, mats, ws, k1, ls)
        return retract(x, h, ls, k1)
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


@njit(nogil=True, cache=True)
def frac_close(g, delta):
    """Fraction of pairs i < j with g[i, j] >= 1 - delta; 1 when n = 1. g: (n, n) overlaps."""
    n = g.shape[0]
    if n < 2:
        return 1.0
    count = 0
    for i in range(n):
        for j in range(i + 1, n):
            if g[i, j] >= 1.0 - delta:
                count += 1
    return count / (n * (n - 1) / 2)


@njit(nogil=True, cache=True)
def energy(g, beta):
    """E_beta = (1/(2 beta n^2)) sum_ij exp(beta g_ij), shifted for range; beta = 0: the limit of
    E_beta - 1/(2 beta), sum_ij g_ij / (2 n^2). g: (n, n) overlaps."""
    n = g.shape[0]
    if beta == 0.0:
        acc = 0.0
        for i in range(n):
            for j in range(n):
                acc += g[i, j]
        return acc / (2.0 * n * n)
    top = -np.inf
    for i in range(n):
        for j in range(n):
            top = max(top, beta * g[i, j])
    acc = 0.0
    for i in range(n):
        for j in range(n):
            acc += np.exp(beta * g[i, j] - top)
    return np.sign(beta) * np.exp(top + np.log(acc / (2.0 * abs(beta) * n * n)))


@njit(nogil=True, cache=True)
def record(x, c, beta, delta, eps, g, omin, omax, cls, ncl, fclose, hemi, en):
    """All per-checkpoint outcomes of state x (n, d) at checkpoint c; g: (n, n) scratch."""
    outcomes.record_checkpoint(x, eps, g, c, omin, omax, cls, ncl)
    fclose[c] = frac_close(g, delta)
    en[c] = energy(g, beta)
    hemi[c] = in_open_hemisphere(x, 1e-9)


@njit(nogil=True, cache=True)
def trajectory(rng, n, d, h, layers, ckpt, times, par, integrator, init, kinds, q, k, v,
               tv, period, delta, eps, omin, omax, cls, ncl, fclose, hemi, en, states):
    """Integrate one trajectory and fill its output rows; returns nonfinite.

    kinds: (q_kind, k_kind, v_kind) ensemble codes. q, k, v: (H, d, d) fixed matrices (overwritten
    where drawn). tv: (amp, omega, phase) (H, d), random_frequencies. ckpt, times: (nt,).
    omin, omax, fclose, en: (nt,) float64; cls (nt,) int8; ncl (nt,) int16; hemi (nt,) bool.
    states: (nt, n, d) output, or (0, n, d) to skip.
    """
    beta = par[0]
    amp, omega, phase, random_frequencies = tv
    q_kind, k_kind, v_kind = kinds
    heads = q.shape[0]
    x = np.empty((n, d))
    m = np.empty((heads, d, d))
    ws = workspace(n, d, heads)
    stages = np.empty((5, n, d))
    ls = np.empty(n)
    g = np.empty((n, n))
    ok = draw_start(rng, init, x)
    draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m)
    if random_frequencies:
        draw_frequencies(rng, omega, phase)
    mats = (m, v, amp, omega, phase)
    redraw = q_kind != 0 or k_kind != 0 or v_kind != 0
    c = 0
    nt = ckpt.shape[0]
    if ok:
        for s in range(layers):
            if period > 0 and s > 0 and s % period == 0 and redraw:
                draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m)
            if not step(x, s * h, h, integrator, par, mats, ws, stages, ls):
                ok = False
                break
            if s + 1 == ckpt[c]:
                record(x, c, beta, delta, eps, g, omin, omax, cls, ncl, fclose, hemi, en)
                if states.shape[0] > 0:
                    states[c] = x
                c += 1
    if not ok:
        outcomes.fill_nonfinite(c, omin, omax, cls, ncl)
        for j in range(c, nt):
            fclose[j] = np.nan
            en[j] = np.nan
            hemi[j] = False
            if states.shape[0] > 0:
                states[j] = np.nan
    return not ok


# ---------------------------------------------------------------------------------------------
# Python entry point: validate, resolve names to codes and fixed matrices, allocate, loop.

_NAMES_FIX = "use one of {}"


def _matrix_arg(matrices, key, heads, d):
    arr = np.asarray(matrices[key], dtype=np.float64)
    if arr.shape == (d, d) and heads == 1:
        arr = arr[None]
    if arr.shape != (heads, d, d) or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"matrices[{key!r}] has shape {arr.shape}, but (heads, d, d) = ({heads}, {d}, {d}) "
            "finite entries are needed (a (d, d) array is accepted when heads = 1)"
        )
    return arr.copy()


def _resolve_weights(heads, d, qk, value, matrices, preset):
    """(q, k, v (H, d, d) fixed parts, (q_kind, k_kind, v_kind), qk_identity, v_code)."""
    from tokensweep.kernels import ensembles as ens

    if qk not in ens.QK_ENSEMBLES:
        raise ValueError(f"qk = {qk!r} is unknown: " + _NAMES_FIX.format(ens.QK_ENSEMBLES))
    if value not in ens.VALUE_ENSEMBLES:
        raise ValueError(f"value = {value!r} is unknown: " + _NAMES_FIX.format(ens.VALUE_ENSEMBLES))
    matrices = dict(matrices or {})
    unknown = set(matrices) - {"Q", "K", "V"}
    if unknown:
        raise ValueError(f"matrices has keys {sorted(unknown)}: only 'Q', 'K', 'V' are understood")
    eye = np.broadcast_to(np.eye(d), (heads, d, d)).copy()
    q, k, v = eye.copy(), eye.copy(), eye.copy()
    q_kind = k_kind = v_kind = ens.FIXED
    if preset is not None and preset["P"] is not None:
        if qk != "identity" or "Q" in matrices or "K" in matrices:
            raise ValueError("time_varying preset fixes Q^T K = P': leave qk='identity' and give "
                             "no matrices['Q'] / matrices['K']")
        k = np.array(preset["P"], dtype=np.float64)
    elif qk == "ginibre":
        q_kind = k_kind = ens.GINIBRE
    elif qk != "identity":
        k_kind = ens.ENSEMBLE_CODES[qk]
    if "Q" in matrices:
        q, q_kind = _matrix_arg(matrices, "Q", heads, d), ens.FIXED
    if "K" in matrices:
        k, k_kind = _matrix_arg(matrices, "K", heads, d), ens.FIXED
    if preset is not None and preset["V"] is not None:
        if value != "identity" or "V" in matrices:
            raise ValueError("time_varying preset fixes V: leave value='identity', no matrices['V']")
        v = np.array(preset["V"], dtype=np.float64)
    elif "V" in matrices:
        v = _matrix_arg(matrices, "V", heads, d)
    elif value == "minus_identity":
        v = -eye
    elif value == "qk":
        v_kind = ens.QK
    elif value != "identity":
        v_kind = ens.ENSEMBLE_CODES[value]
    qk_identity = q_kind == ens.FIXED and k_kind == ens.FIXED and np.all(q == eye) and np.all(k == eye)
    if v_kind != ens.FIXED and not (v_kind == ens.QK and qk_identity):
        v_code = V_GENERAL
    elif np.all(v == eye):
        v_code = V_IDENTITY
    elif np.all(v == -eye):
        v_code = V_MINUS_IDENTITY
    else:
        v_code = V_GENERAL
    return q, k, v, (q_kind, k_kind, v_kind), bool(qk_identity), v_code


def _resolve_time_varying(time_varying, heads, d):
    """(preset or None, tv_mode, amp, omega, phase (H, d), random_frequencies)."""
    from tokensweep.kernels.ensembles import TIME_VARYING

    zeros = np.zeros((heads, d))
    if time_varying is None:
        return None, TV_NONE, zeros, zeros.copy(), zeros.copy(), False
    if isinstance(time_varying, str):
        if time_varying not in TIME_VARYING:
            raise ValueError(f"time_varying = {time_varying!r} is unknown: use None, a dict "
                             f"{{'amp', 'omega', 'phase', 'absolute'}} or one of {tuple(TIME_VARYING)}")
        preset = TIME_VARYING[time_varying]
        for name, want, got in (("heads", preset["heads"], heads), ("d", preset["d"], d)):
            if want is not None and want != got:
                raise ValueError(f"time_varying = {time_varying!r} needs {name} = {want}, got {got}")
        mode = TV_ABS_COS if preset["absolute"] else TV_COS
        if preset["random"]:
            return preset, mode, np.full((heads, d), 2.0), zeros.copy(), zeros.copy(), True
        amp, omega, phase = (np.array([s[i] for s in preset["schedule"]], dtype=np.float64)
                             for i in range(3))
        return preset, mode, amp, omega, phase, False
    spec = dict(time_varying)
    arrays = []
    for key in ("amp", "omega", "phase"):
        arr = np.broadcast_to(np.asarray(spec.pop(key, 0.0), dtype=np.float64), (heads, d)).copy()
        arrays.append(arr)
    mode = TV_ABS_COS if spec.pop("absolute", False) else TV_COS
    if spec:
        raise ValueError(f"time_varying has keys {sorted(spec)}: only amp, omega, phase, absolute")
    return None, mode, *arrays, False


def simulate_sphere_flow(rngs, *, n, d, beta, T, layers, checkpoint_layers, attention="sa",
                         integrator="euler", heads=1, qk="identity", value="identity",
                         matrices=None, period=0, time_varying=None, init="uniform_sphere",
                         delta=1e-3, eps=1e-3, rst_scaling=False, return_states=False):
    """Integrate one deterministic attention flow per Generator in `rngs`; return `OUTPUTS` arrays.

    rngs: sequence of numpy Generators, one per trajectory (ntraj). h = T / layers; checkpoint c is
    the state after checkpoint_layers[c] steps, at time h * checkpoint_layers[c].
    attention: "sa", "usa", "causal_sa", "causal_usa". integrator: "euler", "heun", "rk4".
    qk: "identity", "ginibre", "goe", "wigner", "wishart"; value: those, "minus_identity" or "qk".
    matrices: optional {"Q", "K", "V"} arrays (heads, d, d) that replace the ensembles.
    period: redraw the random matrices every `period` steps (0: fixed per trajectory).
    time_varying: None, a preset name of `ensembles.TIME_VARYING`, or {"amp", "omega", "phase"
    (broadcast to (heads, d)), "absolute"}: P_h(t) = diag(amp cos(omega t + phase)) Q_h^T K_h.
    init: "uniform_sphere", "hemisphere" (of e_1), "equiangular" (needs d >= n).
    delta: frac_close threshold; eps: clustering threshold. rst_scaling: divide heads by sqrt(d).
    return_states: also return "states" (ntraj, nt, n, d).
    Returns {name: array} with (ntraj, nt) per-checkpoint and (ntraj,) per-trajectory outputs.
    """
    from tokensweep.kernels.ensembles import INIT_CODES

    ckpt = outcomes.check_common_arguments(rngs, n, d, beta, T, layers, checkpoint_layers,
                                           attention, ATTENTIONS, eps)
    n, d, layers = int(n), int(d), int(layers)
    if integrator not in INTEGRATOR_CODES:
        raise ValueError(f"integrator = {integrator!r} is unknown: use one of {tuple(INTEGRATOR_CODES)}")
    if int(heads) != heads or heads < 1:
        raise ValueError(f"heads = {heads!r}, but the number of heads must be an integer >= 1")
    if int(period) != period or period < 0:
        raise ValueError(f"period = {period!r}: use 0 (fixed matrices) or a number of steps >= 1")
    if init not in INIT_CODES:
        raise ValueError(f"init = {init!r} is unknown: use one of {tuple(INIT_CODES)}")
    if init == "equiangular" and d < n:
        raise ValueError(f"init = 'equiangular' needs d >= n orthonormal tokens, got n = {n}, d = {d}: "
                         "raise d or use init = 'uniform_sphere'")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta = {delta!r}, but the frac_close threshold needs 0 < delta < 1")
    heads = int(heads)
    preset, tv_mode, amp, omega, phase, random_freq = _resolve_time_varying(time_varying, heads, d)
    q, k, v, kinds, qk_identity, v_code = _resolve_weights(heads, d, qk, value, matrices, preset)
    h = T / layers
    kind = USA if attention.endswith("usa") else SA
    log_scale0 = -0.5 * np.log(d) if rst_scaling else 0.0
    par = (float(beta), kind, attention.startswith("causal"), qk_identity, v_code, tv_mode, log_scale0)
    nt = ckpt.shape[0]
    ntraj = len(rngs)
    out = outcomes.allocate_outputs(ntraj, nt, OUTPUTS)
    states = np.full((ntraj, nt if return_states else 0, n, d), np.nan)
    times = h * ckpt.astype(np.float64)
    for r, rng in enumerate(rngs):
        tv = (amp.copy(), omega.copy(), phase.copy(), random_freq)
        nonfinite = trajectory(
            rng, n, d, h, layers, ckpt, times, par, INTEGRATOR_CODES[integrator], INIT_CODES[init],
            kinds, q.copy(), k.copy(), v.copy(), tv, int(period), float(delta), float(eps),
            out["overlap_min"][r], out["overlap_max"][r], out["cluster_class"][r],
            out["n_clusters"][r], out["frac_close"][r], out["in_hemisphere"][r], out["energy"][r],
            states[r],
        )
        out["nonfinite"][r] = nonfinite
        out["t_hit"][r] = outcomes.hit_time(out["cluster_class"][r], times)
    if return_states:
        out["states"] = states
    return out
