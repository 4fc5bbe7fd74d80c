"""The symmetric path of the sphere flow: retraction Euler for SA / USA with Q = K = I, V = +-I,
one head, not time-varying, beta >= 0 (the setting of [GLPR-P] Figs. 3-4; docs/models.md 2).

Same formulas as the general `sphere.drift.euler_step`; the same bits only where OpenBLAS sums
both layouts' products in one order, which depends on the shape and on the CPU's kernels: on the
Intel machines of the earlier measurements every shape tests/test_kernel_sphere_flow.py checks,
but not n = 20, d = 19 or n = 12, d = 19; on AMD EPYC also not 4 of its 9 shapes (1-3 ulp per
step, so the test holds them to rtol 1e-13). A cube's numbers are those of the path its
configuration takes, always the same one. Organised for speed:

- the state lives in the transposed layout xt (d, n) from the start to the end of a trajectory
  (the layout the two products and the per-token loops want), not copied in and out every step;
- weights: the Gram G = xt^T xt (BLAS gemm; every entry one fused-multiply-add chain over k, so
  G is exactly symmetric) on its upper blocks of 8 rows only (`lowlevel.gemm.gram_upper`: gemm on
  sub-blocks, the same bits, 5/8 of the flops at n = 32: 1.24 -> 0.84 us at d = 32), the common
  shift c = max_k G_kk, E = exp(beta (G - c)) on the upper triangle, each row from its 8-aligned
  column on (full vectors: rows that start mid-vector run their scalar remainder, which made a
  plain triangle no faster than the full matrix), the rest mirrored: 0.63 -> 0.55 us at n = 32;
  without a clamp when 2 beta c < 700, where the clamp of `exp_vec` cannot act (same bits).
  Measured and not taken: dsyrk for G (bitwise the same triangle, but 1.7-3.6x slower than dgemm
  at n = 32: OpenBLAS's syrk driver); the Gram, exponentials and product fused in numba loops
  over rows (1.7-2.7x slower: 32-long inner loops); register-tiled numba micro-kernels for the
  two products (5-10x slower than gemm: numba turns LLVM's SLP vectoriser off, so the tiles stay
  scalar; row-update loops run 2 loads and a store per fma);
- at = xt E and the column sums of E (SA normalisers) in one dgemm, from the state stored with a
  row of ones below it (a sum of 1 * E_ji chained by fma is the serial sum); then three passes
  over (d, n): <x_i, f_i> with f = sign of V times at / tot (SA); the increment, y (kept in at),
  |y_i|^2 and "moved"; y / |y| written back into xt (four / two rows k per pass, see below).
- recording: `sphere.checkpoints.record_t`, from the transposed state. It cannot reuse the step's
  Gram or exponentials and keep today's bits: the recorded overlaps are serial multiply-then-add
  sums (`outcomes.gram`'s bits, shared with the general path), the step's Gram fma chains, and the
  energy's exponent is beta G - beta max G, the step's beta (G - c).
- d > n: with V = +-I every token stays in the span of the start's n tokens, so the flow is run
  in the coordinates y = x B^T of an orthonormal basis B (n, d) of that span (Householder QR of
  the start): an isometry, so every output (overlaps, counts, energy, hemisphere) is unchanged in
  exact arithmetic, at the cost of an n-dimensional step instead of a d-dimensional one. Rounding
  differs from the d-dimensional run (~1e-15 per step); states are mapped back as y B.

Precision: the kernels take xt float64 or float32 (`lowlevel.vecmath.vexp` and `like` pick the float32
exp and constants); records are computed in float64 from the state.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
    outcomes,
)
from ..ensembles import shape_start
from ..lowlevel.aligned import empty_lines
from ..lowlevel.gemm import BLOCK, gram_upper
from ..lowlevel.vecmath import like, tiny_like, vexp, vexp_unclamped
from .checkpoints import memory, record_t
from .drift import EULER, TV_NONE, V_IDENTITY, V_MINUS_IDENTITY

SPAN_REDUCTION = True  # d > n: integrate in an n-dimensional basis of the start's span


def applies(integrator, par, heads):
    """Is the symmetric path this configuration's? integrator: code; par: `sphere.flow`'s
    (beta, kind, causal, qk_identity, v_code, tv_mode, log_scale0, ...); not hardmax (kind 2)."""
    beta, kind, qk_identity, v_code, tv_mode = par[0], par[1], par[3], par[4], par[5]
    return (kind != 2 and integrator == EULER and heads == 1 and qk_identity and tv_mode == TV_NONE
            and beta >= 0.0 and v_code in (V_IDENTITY, V_MINUS_IDENTITY))


@njit(nogil=True, cache=True)
def workspace_t(n, d, proto):
    """Scratch of `euler_step_t` in the dtype of proto: (g (n, n), dot, nrm, mvd, s (n,),
    ae (d + 1, n))."""
    lines = empty_lines(5, n, proto)  # dot, nrm, mvd, s: vectors of 8 tokens from 0 on
    return (empty_lines(n, n, proto), lines[0], lines[1], lines[2], lines[3],
            empty_lines(d + 1, n, proto))


@njit(nogil=True, cache=True, inline="always")
def _exp_row(row, b, c, clamp):
    """row[i] <- exp(b (row[i] - c)) (a loop from 0: it vectorises)."""
    if clamp:
        for i in range(row.shape[0]):
            row[i] = vexp(b * (row[i] - c))
    else:
        for i in range(row.shape[0]):
            row[i] = vexp_unclamped(b * (row[i] - c))


@njit(nogil=True, cache=True)
def symmetric_weights(xt, beta, causal, g):
    """g <- E, E[j, i] = exp(beta (G_ij - c)) for keys j of query i (0 for causally masked
    j > i), G = xt^T xt, c = max_k G_kk. Returns c."""
    d, n = xt.shape
    gram_upper(xt, g)  # rows j from column j - j % 8 on: what the exponentials read
    c = like(0.0, xt)
    for i in range(n):
        c = max(c, g[i, i])
    b = like(beta, xt)
    clamp = not 2.0 * beta * c < 700.0  # else every argument is in [-708, 0]: no clamp can act
    if causal:
        for j in range(n):
            gj = g[j]
            for i in range(j):
                gj[i] = 0.0
            _exp_row(gj[j:], b, c, clamp)
    else:  # the upper triangle from 8-aligned columns on (full vectors), then the mirror
        for j in range(n):
            j0 = j - j % BLOCK
            _exp_row(g[j, j0:], b, c, clamp)
            gj = g[j]
            for i in range(j0):
                gj[i] = g[i, j]
    return c


@njit(nogil=True, cache=True)
def euler_step_t(xe, h, beta, usa, causal, sign, log_scale0, ws):
    """One retraction-Euler step of the symmetric flow in place; False if non-finite.

    xe (d + 1, n): the state xt (d, n) in rows 0..d-1, ones in row d, so that the product
    xe E also returns the column sums of E (each an fma chain with factors 1: the serial sums).
    usa: USA (else SA); sign: +1.0 (V = I) or -1.0 (V = -I); log_scale0: -log(d)/2 with the
    [RST] scaling, else 0; ws: `workspace_t`. The scale e^{shift} (USA: beta c - log n) goes on
    the side of x_i + h e^{shift} inc_i where it is <= 1, as in `sphere.drift.euler_step`."""
    g, dot, nrm, mvd, s, ae = ws
    d = xe.shape[0] - 1
    n = xe.shape[1]
    xt = xe[:d]
    c = symmetric_weights(xt, beta, causal, g)
    np.dot(xe, g, ae)
    at = ae[:d]
    tot = ae[d]
    if usa:
        shift = beta * float(c) - np.log(n) + log_scale0
        for i in range(n):
            tot[i] = 1.0
    else:
        shift = log_scale0
        for i in range(n):
            tot[i] = 1.0 / tot[i]
    if shift > 0.0:
        fx, fa = np.exp(-shift), h
    elif shift < 0.0:
        fx, fa = 1.0, h * np.exp(shift)
    else:
        fx, fa = 1.0, h
    fx, fa, sg = like(fx, xt), like(fa, xt), like(sign, xt)
    for i in range(n):
        dot[i] = 0.0
        nrm[i] = 0.0
        mvd[i] = 0.0
    _radial_t(at, xt, tot, sg, dot)
    _increment_t(at, xt, tot, sg, dot, fx, fa, nrm, mvd)
    if causal:  # V = +-I: A_1 = +-x_1, token 1 does not move at all
        mvd[0] = 0.0
    tiny = tiny_like(xt)
    special = False
    for i in range(n):
        s[i] = 0.0  # 0: leave the token as it is
        if mvd[i] == 0.0:  # inc_i exactly 0: the token stays bitwise fixed
            continue
        if not nrm[i] >= tiny:  # |y|^2 underflowed (or NaN): below, token by token
            s[i] = -1.0
            special = True
            continue
        norm = np.sqrt(nrm[i])
        if not (norm > 0.0 and norm < np.inf):
            return False
        s[i] = 1.0 / norm
    _normalise_t(at, xt, s)
    if special:
        for i in range(n):
            if s[i] < 0.0 and not _normalise_scaled(xt, at, i):
                return False
    return True


# The three O(n d) passes of a step. <x_i, f_i> takes four rows k per pass over i, the increment
# two (fewer loop entries and accumulator loads and stores), indexed as 2-D arrays (one base
# pointer per array: few enough runtime alias checks that LLVM still vectorises the loop; row
# slices made it give up); f is not stored (the next pass recomputes it, the same bits); the
# sums over k keep their serial order. Unrolling the normalisation measured slower.


@njit(nogil=True, cache=True, inline="always")
def _radial_t(at, xt, tot, sg, dot):
    """dot[i] += <x_i, f_i>, f = sg (at * tot), serial over k (at is not changed)."""
    d, n = xt.shape
    k = 0
    while k + 4 <= d:
        for i in range(n):
            t = tot[i]
            dot[i] = ((((dot[i] + xt[k, i] * (sg * (at[k, i] * t)))
                        + xt[k + 1, i] * (sg * (at[k + 1, i] * t)))
                       + xt[k + 2, i] * (sg * (at[k + 2, i] * t)))
                      + xt[k + 3, i] * (sg * (at[k + 3, i] * t)))
        k += 4
    while k < d:
        for i in range(n):
            dot[i] += xt[k, i] * (sg * (at[k, i] * tot[i]))
        k += 1


@njit(nogil=True, cache=True, inline="always")
def _increment_t(at, xt, tot, sg, dot, fx, fa, nrm, mvd):
    """inc = f - <x_i, f_i> x_i, y = fx x + fa inc into at, nrm += |y_i|^2, mvd += |inc_i|_1
    (two rows k per pass over i, 2-D indexed: serial sums, the bits of one row per pass)."""
    d, n = xt.shape
    k = 0
    while k + 2 <= d:
        for i in range(n):
            t = tot[i]
            q = dot[i]
            inc0 = sg * (at[k, i] * t) - q * xt[k, i]
            inc1 = sg * (at[k + 1, i] * t) - q * xt[k + 1, i]
            y0 = fx * xt[k, i] + fa * inc0
            y1 = fx * xt[k + 1, i] + fa * inc1
            at[k, i] = y0
            at[k + 1, i] = y1
            nrm[i] = (nrm[i] + y0 * y0) + y1 * y1
            mvd[i] = (mvd[i] + abs(inc0)) + abs(inc1)
        k += 2
    while k < d:
        for i in range(n):
            inc = sg * (at[k, i] * tot[i]) - dot[i] * xt[k, i]
            y = fx * xt[k, i] + fa * inc
            at[k, i] = y
            nrm[i] += y * y
            mvd[i] += abs(inc)
        k += 1


@njit(nogil=True, cache=True, inline="always")
def _normalise_t(at, xt, s):
    """x_i <- y_i s_i for the tokens with s_i > 0 (y in at)."""
    d, n = xt.shape
    for k in range(d):
        ak = at[k]
        xk = xt[k]
        for i in range(n):
            if s[i] > 0.0:
                xk[i] = ak[i] * s[i]


@njit(nogil=True, cache=True)
def _normalise_scaled(xt, at, i):
    """Token i whose |y|^2 underflowed (y in at[:, i]): y / max_k |y_k|, then normalised
    (`retract`)."""
    d = xt.shape[0]
    top = 0.0
    for k in range(d):
        top = max(top, abs(at[k, i]))
    if not top > 0.0:
        return False
    nrm2 = 0.0
    for k in range(d):
        at[k, i] /= top
        nrm2 += at[k, i] * at[k, i]
    norm = np.sqrt(nrm2)
    if not (norm > 0.0 and norm < np.inf):
        return False
    for k in range(d):
        xt[k, i] = at[k, i] * (1.0 / norm)
    return True


# ---------------------------------------------------------------------------------------------
# blocks of trajectories


@njit(nogil=True, cache=True)
def span_basis(x, basis):
    """basis (n, d) <- orthonormal rows spanning the rows of x (n, d), n < d (Householder QR of
    x^T: orthonormal even where x is rank deficient)."""
    q, _ = np.linalg.qr(x.T.copy())
    basis[:, :] = q.T


@njit(nogil=True, cache=True)
def integrate_t(z, r0, init, h, layers, ckpt, times, par, delta, eps, out, states, proto,
                reduce):
    """Trajectories r0, r0 + 1, ... of a symmetric run (module docstring) from z (B, n, d), each
    one's n*d standard normals (as `sphere.flow.trajectories_from_normals`; overwritten).

    par: (beta, usa, causal, sign, log_scale0). proto: an array of the working dtype (float64 or
    float32). reduce: integrate in the span of the start (needs n < d). Fills rows r0 to
    r0 + B - 1 of out and states."""
    beta, usa, causal, sign, log_scale0 = par
    nb, n, d = z.shape
    m = n if reduce else d
    ws = workspace_t(n, m, proto)
    xe = empty_lines(m + 1, n, proto)  # the state in rows 0..m-1, ones in row m (`euler_step_t`)
    xe[m] = 1.0
    xt = xe[:m]
    g = empty_lines(n, n, z)  # the records' float64 Gram and state (z: float64)
    xr = np.empty((n, m))
    x64 = empty_lines(m, n, z)
    basis = np.empty((n, d))
    for b in range(nb):
        r = r0 + b
        memo = memory(m)
        x = z[b]
        ok = shape_start(init, x)
        if ok:
            observables.record_start(x, out, r)
            if reduce:
                span_basis(x, basis)
                y = np.dot(x, basis.T)
            else:
                y = x
            for i in range(n):
                for k in range(m):
                    xt[k, i] = y[i, k]
        c = np.int64(0)  # int64, not a literal (kernels/__init__.py)
        if ok:
            for s in range(layers):
                if not euler_step_t(xe, h, beta, usa, causal, sign, log_scale0, ws):
                    ok = False
                    break
                if s + 1 == ckpt[c]:
                    record_t(xt, beta, delta, eps, g, x64, xr, out, r, c, memo)
                    ambient = reduce and (states.shape[1] > 0 or out.hemisphere_margin.shape[1] > 0)
                    xa = np.dot(xr, basis) if ambient else xr  # the state in R^d
                    observables.record_observables(xa, g, out, r, c)
                    if states.shape[1] > 0:
                        states[r, c] = xa
                    c += 1
        outcomes.finish_trajectory(out, r, ok, times)
