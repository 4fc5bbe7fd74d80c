"""The general stochastic path for 3 <= n <= 8 tokens, one token per SIMD lane: bit-identical.

`stochastic.general.trajectory` keeps the state as rows x (n, d): every sum over coordinates (the
overlaps, the Householder dot products and norms, the row norms) is a chain of dependent adds,
a few run side by side at best. Here the state is kept transposed, xt (d, 8) with token i in
lane i (lanes n..7 are zero), and each of those sums runs for all tokens at once in one vector
register (`lowlevel.simd`): the same operations in the same order per lane, so the same bits as the
general path (tests/test_kernel_stochastic_lanes.py compares the two on many cells):

- overlaps: row i of G is sum_k x_ki * xt[k, :], eight accumulators over k;
- attention (SA, USA): G is symmetric to the bit, so row j of G holds <x_i, x_j> in lane i: the
  logits' maxima, exponentials (`lowlevel.simd.exp`, fast_exp's formula) and row sums of all tokens run
  across lanes, j in order; Ahat^T[k, :] = sum_j w[:, j] x_jk over j in order, four k side by side;
- Householder R of A = Ahat^T (d x n): A's columns are the lanes, so the dot products
  u^T A[:, j] and the reflections of all columns run as one vector chain over the rows i >= k
  (lanes <= k are reflected too: they are no longer read), and the next column's norm is summed
  in the same pass;
- noise s W^T R: direction^T[c, :] = sum_k (s R[k, :]) W[k, c], zero terms for k > i add +-0
  to a sum that is never -0, so they change nothing; four c side by side;
- the step and its normalisation: the row norms as one vector chain; the rare rescaling path
  (|y|^2 zero, inf or NaN) of `normalize_row` on that token alone.

The state is transposed back to rows only at checkpoints (outcomes, observables, states).

Where the time goes (n = 8, ns per step, `benchmarks/bench_stochastic.py`, one core, load ~15;
an earlier machine, whose draws were 3x faster than those measured in `stochastic.pairs`):

    d  | draws  overlaps  attention     R  noise  step | kernel  (general path)
    4  |    51        11         90    86     10    28 |    364  (1036)
    16 |   410        44        132   377     56    57 |   1141  (2421)
    64 |  1625       164        288   972    190   154 |   3534  (6494)

What is left besides the draws is mostly the Householder R: per column two dependent vector
chains over the rows (the dot products, then the next column's norm: 2 (d - k) adds at the
adder's latency, with a sqrt and a division between), so it runs near its latency bound. Only
independent work beside it hides that: `stochastic.pairs` runs two trajectories per pass (the
default where a call has two or more; this module then runs an odd last one, and the survivor
of a pair whose other trajectory ended, `continue_lanes`); fewer dependent operations would
need a factor of the n x n Gram (another random stream). Tried, no gain: drawing the
layer's normals one by one inside the Householder loops (the call into numpy's generator
clobbers the vector registers: 30-50 % slower); eight rows side by side in Ahat and the noise.
Taken for the defaults only (gaussian law and noise, Q = K = I, SA or USA, discrete scheme,
`lowlevel.fast_exp` matching libm); everything else runs `stochastic.general.trajectory`.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
)
from ..attention import USA, gram, normalize_row, normalize_rows, uniform_start
from ..lowlevel.fast_exp import HEAD, TAIL
from ..lowlevel.simd import (
    WIDTH,
    add,
    all_normal,
    div,
    exp,
    exp_is_rare,
    load,
    load_as,
    max_of,
    mul,
    splat,
    splat_as,
    sqrt,
    store,
    sub,
    width_of,
)
from ..outcomes import finish_trajectory, record_overlaps, resolved_for
from .general import stop
from .householder import householder_lanes

MAX_TOKENS = WIDTH


@njit(nogil=True, cache=True, inline="always")
def gram_lanes(xt, g8):
    """g8 (8, 8): g8[i, j] = <x_i, x_j>, each a sum over k in order from 0.0 (as `gram`)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = splat(0.0)
    for k in range(xt.shape[0]):
        row = load(xt, k * WIDTH)
        a0 = add(a0, mul(splat(xt[k, 0]), row))
        a1 = add(a1, mul(splat(xt[k, 1]), row))
        a2 = add(a2, mul(splat(xt[k, 2]), row))
        a3 = add(a3, mul(splat(xt[k, 3]), row))
        a4 = add(a4, mul(splat(xt[k, 4]), row))
        a5 = add(a5, mul(splat(xt[k, 5]), row))
        a6 = add(a6, mul(splat(xt[k, 6]), row))
        a7 = add(a7, mul(splat(xt[k, 7]), row))
    store(g8, 0, a0)
    store(g8, 8, a1)
    store(g8, 16, a2)
    store(g8, 24, a3)
    store(g8, 32, a4)
    store(g8, 40, a5)
    store(g8, 48, a6)
    store(g8, 56, a7)


@njit(nogil=True, inline="always")
def attention_weights(g, n, beta, kind, logscale, expo, wt, mask, zero):
    """The attention weights of every token, one per lane, from the overlaps g (8, w): wt[w j + q]
    = w_qj, logscale the c_q; returns the factor of Ahat per lane (1 / the row sum for SA, the
    mask for USA). w = 8 (one trajectory) or 16 (two, `stochastic.pairs`): zero, splat(0.0) of
    that width, chooses (not cached: lanes values are its arguments; inlined into the callers).

    G is symmetric to the bit, so lane i of row j of g is <x_i, x_j>: the maxima, exponents and
    row sums of all tokens run across lanes, j in order; the exponentials by `lowlevel.simd.exp`
    (fast_exp's formula, libm's bits), np.exp where it is not libm's (as exp_array).
    """
    w = width_of(zero)
    bv = splat_as(zero, beta)
    m = splat_as(zero, -np.inf)
    for j in range(n):
        m = max_of(m, mul(bv, load_as(zero, g, j * w)))
    total = zero
    for j in range(n):
        e = sub(mul(bv, load_as(zero, g, j * w)), m)
        wj = exp(e, TAIL, HEAD)
        if exp_is_rare(e):  # |e| >= 512, inf or NaN: np.exp's own path, as exp_array
            store(expo, 0, e)
            store(wt, j * w, wj)
            for q in range(w):
                if not (abs(expo[q]) < 512.0):
                    wt[j * w + q] = np.exp(expo[q])
            wj = load_as(zero, wt, j * w)
        store(wt, j * w, wj)
        total = add(total, wj)
    if kind == USA:
        store(logscale, 0, sub(m, splat_as(zero, np.log(n))))
        return load_as(zero, mask, 0)
    store(logscale, 0, zero)
    return mul(div(splat_as(zero, 1.0), total), load_as(zero, mask, 0))


@njit(nogil=True, cache=True, inline="always")
def attention_lanes(xt, g8, n, beta, kind, ahat_t, logscale, expo, wt, mask, norms):
    """`attention_fast` (SA, USA) into ahat_t (d, 8), Ahat_i in lane i; logscale (8,) the c_i.

    The weights by `attention_weights`; Ahat^T[k, :] = sum_j w[:, j] x_jk over j in order, four
    k side by side. expo (8,), wt (8 n,): work; wt[8 j + i] = w_ij. mask (8,): 1 in lanes < n, 0 elsewhere
    (x * 1.0 = x exactly, so USA's Ahat is the bare sum as in `finish_row`). norms (8,): output,
    lane j the sum over rows i >= 1 of Ahat^T[i, j]^2 in order (`householder_lanes`' first norm).
    """
    d = xt.shape[0]
    sv = attention_weights(g8, n, beta, kind, logscale, expo, wt, mask, splat(0.0))
    nrm = splat(0.0)
    k = 0
    while k + 4 <= d:
        s0 = s1 = s2 = s3 = splat(0.0)
        for j in range(n):
            wj = load(wt, j * WIDTH)
            s0 = add(s0, mul(wj, splat(xt[k, j])))
            s1 = add(s1, mul(wj, splat(xt[k + 1, j])))
            s2 = add(s2, mul(wj, splat(xt[k + 2, j])))
            s3 = add(s3, mul(wj, splat(xt[k + 3, j])))
        s0 = mul(s0, sv)
        s1 = mul(s1, sv)
        s2 = mul(s2, sv)
        s3 = mul(s3, sv)
        store(ahat_t, k * WIDTH, s0)
        store(ahat_t, (k + 1) * WIDTH, s1)
        store(ahat_t, (k + 2) * WIDTH, s2)
        store(ahat_t, (k + 3) * WIDTH, s3)
        if k > 0:
            nrm = add(nrm, mul(s0, s0))
        nrm = add(add(add(nrm, mul(s1, s1)), mul(s2, s2)), mul(s3, s3))
        k += 4
    while k < d:
        s0 = splat(0.0)
        for j in range(n):
            s0 = add(s0, mul(load(wt, j * WIDTH), splat(xt[k, j])))
        s0 = mul(s0, sv)
        store(ahat_t, k * WIDTH, s0)
        if k > 0:
            nrm = add(nrm, mul(s0, s0))
        k += 1
    store(norms, 0, nrm)


@njit(nogil=True, cache=True, inline="always")
def noise_lanes(rl, s, buf, off, dir_t, rs):
    """dir_t (d, 8): lane i of row c is s sum_k R[k, i] W[k, c], W = buf[off:off + r d] (r, d),
    as `gaussian_values`. rs (r * 8,): work, s R row by row."""
    r = rl.shape[0]
    d = dir_t.shape[0]
    sv = splat(s)
    for k in range(r):
        store(rs, k * WIDTH, mul(sv, load(rl, k * WIDTH)))
    c = 0
    while c + 4 <= d:
        s0 = s1 = s2 = s3 = splat(0.0)
        for k in range(r):
            rk = load(rs, k * WIDTH)
            base = off + k * d + c
            s0 = add(s0, mul(rk, splat(buf[base])))
            s1 = add(s1, mul(rk, splat(buf[base + 1])))
            s2 = add(s2, mul(rk, splat(buf[base + 2])))
            s3 = add(s3, mul(rk, splat(buf[base + 3])))
        store(dir_t, c * WIDTH, s0)
        store(dir_t, (c + 1) * WIDTH, s1)
        store(dir_t, (c + 2) * WIDTH, s2)
        store(dir_t, (c + 3) * WIDTH, s3)
        c += 4
    while c < d:
        s0 = splat(0.0)
        for k in range(r):
            s0 = add(s0, mul(load(rs, k * WIDTH), splat(buf[off + k * d + c])))
        store(dir_t, c * WIDTH, s0)
        c += 1


@njit(nogil=True, cache=True, inline="always")
def usa_factors(logscale, n, coef, fx, fa):
    """USA's factors of the step per lane q (token q % 8 < n): fx = e^{-c} if c > 0, fa =
    coef e^c if c < 0, else 1 and coef (as `scaled_step`); the padding keeps fx = 1, fa = 0."""
    for q in range(fx.shape[0]):
        if q % WIDTH < n:
            c = logscale[q]
            fx[q] = 1.0
            fa[q] = coef
            if c > 0.0:
                fx[q] = np.exp(-c)
            elif c < 0.0:
                fa[q] = coef * np.exp(c)


@njit(nogil=True, cache=True, inline="always")
def rare_norms(xt, n, first, norm2, inv, column):
    """The step's normalisation token by token, for the tokens in lanes first..first + n - 1 of
    xt (d, w) (a squared norm 0, inf or NaN in some lane): inv = 1 / sqrt(norm2), or as
    `scaled_step`: recompute, rescale or fail, on that token alone (`normalize_row`, inv = 1).
    False if a token fails (the rest are then not done: the trajectory ends)."""
    d = xt.shape[0]
    for q in range(first, first + n):
        if norm2[q] > 0.0 and norm2[q] < np.inf:
            inv[q] = 1.0 / np.sqrt(norm2[q])
        else:
            for k in range(d):
                column[0, k] = xt[k, q]
            if not normalize_row(column, np.int64(0)):
                return False
            for k in range(d):
                xt[k, q] = column[0, k]
            inv[q] = 1.0
    return True


@njit(nogil=True, cache=True, inline="always")
def step_lanes(xt, n, kind, coef, logscale, dir_t, fx, fa, norm2, inv, pad, column):
    """`attention.scaled_step` on xt (d, 8); False if a token is non-finite or zero.

    fx, fa, norm2, inv (8,): work (lanes >= n keep fx = 1, fa = 0, so they stay 0). pad (8,):
    0 in lanes < n, 1 elsewhere (|y|^2 + 0 = |y|^2 exactly; 1 / sqrt(1) in the padding).
    column (1, d): work for the rare rescaling path of `normalize_row`.
    """
    d = xt.shape[0]
    if kind == USA:
        usa_factors(logscale, n, coef, fx, fa)
        fxv = load(fx, 0)
        fav = load(fa, 0)
    else:  # c_i = 0: fx = 1, fa = coef (the padding's direction is 0)
        fxv = splat(1.0)
        fav = splat(coef)
    nrm = splat(0.0)
    for k in range(d):
        y = add(mul(fxv, load(xt, k * WIDTH)), mul(fav, load(dir_t, k * WIDTH)))
        store(xt, k * WIDTH, y)
        nrm = add(nrm, mul(y, y))
    nrm = add(nrm, load(pad, 0))
    if all_normal(nrm):
        iv = div(splat(1.0), sqrt(nrm))  # lane-wise 1.0 / np.sqrt(norm2_i), correctly rounded
    else:
        store(norm2, 0, nrm)
        if not rare_norms(xt, n, 0, norm2, inv, column):
            return False
        iv = load(inv, 0)
    for k in range(d):
        store(xt, k * WIDTH, mul(load(xt, k * WIDTH), iv))
    return True


@njit(nogil=True, cache=True)
def _to_rows(xt, x):
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            x[i, k] = xt[k, i]


@njit(nogil=True, cache=True)
def trajectory_lanes(rng, x, draw_start, beta, att, s, h, layers, ckpt, times, eps, batch,
                     window, out, r, states):
    """`stochastic.general.trajectory` for 3 <= n <= 8, SA or USA, gaussian noise, Q = K = I:
    the same arguments (without noise, law, m, fast), random stream and results."""
    n, d = x.shape
    ok = uniform_start(rng, x) if draw_start else normalize_rows(x)
    observables.record_start(x, out, r)
    if ok:
        xt = np.zeros((d, WIDTH))
        for i in range(n):
            for k in range(d):
                xt[k, i] = x[i, k]
        start = np.int64(0)  # int64, not a literal (kernels/__init__.py)
        ok = continue_lanes(rng, x, xt, start, np.empty(0), start, start, beta, att, s, h, layers, ckpt, eps,
                            batch, window, out, r, states)
    finish_trajectory(out, r, ok, times)


@njit(nogil=True, cache=True)
def continue_lanes(rng, x, xt, layer0, buf, pos, c, beta, att, s, h, layers, ckpt, eps, batch,
                   window, out, r, states):
    """Layers layer0.. of a running trajectory: xt (d, 8) its state (x (n, d) is written at
    checkpoints), buf its draws with pos the next unread, c its next checkpoint. Returns False
    if a step failed (the trajectory is finished by the caller). `trajectory_lanes` starts here
    with layer0 = 0, `stochastic.pairs` continues one of two trajectories here."""
    n, d = x.shape
    keep = states.shape[1] > 0
    rank = min(n, d)
    per_layer = rank * d
    at = np.zeros((d, WIDTH))
    dir_t = np.zeros((d, WIDTH))
    rl = np.zeros((rank, WIDTH))
    rs = np.zeros(rank * WIDTH)
    g8 = np.zeros((WIDTH, WIDTH))
    g = np.empty((n, n))
    mask, pad = np.zeros(WIDTH), np.ones(WIDTH)
    mask[:n] = 1.0
    pad[:n] = 0.0
    fx, fa = np.ones(WIDTH), np.zeros(WIDTH)
    norm2, inv, norms = np.zeros(WIDTH), np.ones(WIDTH), np.zeros(WIDTH)
    column = np.empty((1, d))
    logscale = np.zeros(WIDTH)
    expo, wt = np.empty(WIDTH), np.empty(n * WIDTH)
    sqrt_h = np.sqrt(h)
    ok = True
    for layer in range(layer0, layers):
        if not ok:
            break
        if pos == buf.shape[0]:
            buf = rng.standard_normal(min(batch, layers - layer) * per_layer)
            pos = np.int64(0)  # int64, not a literal (kernels/__init__.py)
        gram_lanes(xt, g8)
        attention_lanes(xt, g8, n, beta, att, at, logscale, expo, wt, mask, norms)
        householder_lanes(at, n, rl, norms)
        noise_lanes(rl, s, buf, pos, dir_t, rs)
        pos += per_layer
        ok = step_lanes(xt, n, att, sqrt_h, logscale, dir_t, fx, fa, norm2, inv, pad, column)
        if ok and layer + 1 == ckpt[c]:
            _to_rows(xt, x)
            gram(x, g)
            record_overlaps(g, eps, out, r, c)
            observables.observe(x, g, beta, out, r, c)
            if keep:
                states[r, c] = x
            if resolved_for(out, r, c, window):
                stop(out, r, c, states, x)
                break
            c += 1
    return ok
