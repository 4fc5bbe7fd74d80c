"""The general path of the deep stochastic transformer (`stochastic.transformer`): any n, both noise paths, every
value law and Q, K; one layer x_i <- N(x_i + sqrt(h) s V_k A_i(X)) as the `stochastic.transformer` docstring.

Where the time goes (n = 8, `benchmarks/bench_stochastic.py` prints the split): the normals, the
n^2 exponentials of the attention weights, the Householder R of A (d x n), the noise s W^T R and
the normalised step. The exponentials were a libm call each (about 5 ns, not vectorisable); here
they are evaluated for the whole n x n matrix in one vectorised loop by `lowlevel.fast_exp.exp_array`,
which returns libm's bits, so the results are bit-identical to the per-element calls. Callers pass
fast=False where `fast_exp.matches_libm()` is False (another C library), which keeps np.exp.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
)
from ..attention import CAUSAL_SA, attention, finish_row, gram, normalize_rows, scaled_step, uniform_start
from ..lowlevel.fast_exp import HEAD, TAIL, exp_array
from ..outcomes import carry_forward, finish_trajectory, record_overlaps, resolved_for
from ..value_noise import gaussian_values, householder_r, literal_values, value_draws
from .options import bilinear_logits

GAUSSIAN = 0  # noise codes, as `stochastic.transformer`
LITERAL = 1


@njit(nogil=True, cache=True)
def attention_fast(x, g, beta, kind, ahat, logscale, w, expo, tail_work, head_work):
    """`attention.attention` with its n^2 exponentials in one `exp_array` call: the same results.

    w: (n, n) work, the weights; expo (n*n,) the exponents S_ij - m_i; tail_work (n*n,) float64
    and head_work (n*n,) int64 scratch. Row i of causal_sa uses j <= i; its other exponents are
    set to 0 (weight 1, never read).
    """
    n, d = x.shape
    log_n = np.log(n)
    for i in range(n):
        jmax = i + 1 if kind == CAUSAL_SA else n
        mi = -np.inf
        for j in range(jmax):
            if beta * g[i, j] > mi:
                mi = beta * g[i, j]
        for j in range(jmax):
            expo[i * n + j] = beta * g[i, j] - mi
        for j in range(jmax, n):
            expo[i * n + j] = 0.0
        logscale[i] = mi  # kept until the weights are known
    # exp(0) = 1 exactly, as `attention` skips it
    exp_array(expo, w.reshape(n * n), n * n, TAIL, HEAD, tail_work, head_work)
    for i in range(n):
        jmax = i + 1 if kind == CAUSAL_SA else n
        total = 0.0
        for j in range(jmax):
            total += w[i, j]
        finish_row(w, i, x, jmax, total, logscale[i], kind, log_n, ahat, logscale)


@njit(nogil=True, cache=True)
def trajectory(rng, x, draw_start, beta, att, noise, s, h, layers, ckpt, times, eps, batch,
               window, out, r, states, law, m, fast):
    """Integrate trajectory r and fill its entries of the outputs record out.

    x: (n, d) state; drawn from rng when draw_start, else the given start (normalised here).
    ckpt: (nt,) int64 layer counts; times: (nt,) their times h * ckpt. out: `SphereOutcomes`
    from `allocate_outputs` (checkpoints not reached keep their missing values).
    states: (ntraj, nt, n, d) NaN-filled, row r gets the checkpoint states; or (ntraj, 0, n, d).
    batch: layers per buffered draw. window: early stopping's window (0: off; module docstring).
    The overlaps of a checkpoint's state are also the next layer's logits: computed once.
    law: the value entries' law (attention.VALUE_LAW_CODES; literal noise unless gaussian).
    m: (d, d) M = Q^T K, logits beta <x_i, M x_j>; (0, 0) for Q = K = I.
    fast: the exponentials by `attention_fast` (True only where `fast_exp.matches_libm()`).
    """
    n, d = x.shape
    qk = m.shape[0] > 0
    keep = states.shape[1] > 0
    ok = uniform_start(rng, x) if draw_start else normalize_rows(x)
    observables.record_start(x, out, r)
    rank = min(n, d)  # rows of R
    per_layer = rank * d if noise == GAUSSIAN else d * d
    ahat = np.empty((n, d))
    direction = np.empty((n, d))
    rfac = np.zeros((rank, n))
    logscale = np.empty(n)
    w = np.empty((n, n))
    g = np.empty((n, n))
    norm2 = np.empty(n)
    expo = np.empty(n * n)
    tail_work = np.empty(n * n)
    head_work = np.empty(n * n, np.int64)
    sqrt_h = np.sqrt(h)
    buf = np.empty(0)
    pos = np.int64(0)  # int64s, not literals (kernels/__init__.py)
    c = np.int64(0)
    fresh = False  # g holds the overlaps of x
    for layer in range(layers):
        if not ok:
            break
        if pos == buf.shape[0]:
            buf = value_draws(rng, law, min(batch, layers - layer) * per_layer)
            pos = np.int64(0)
        if qk:
            bilinear_logits(x, m, direction, g)
        elif not fresh:
            gram(x, g)
        if fast:
            attention_fast(x, g, beta, att, ahat, logscale, w, expo, tail_work, head_work)
        else:
            attention(x, g, beta, att, ahat, logscale, w)
        if noise == GAUSSIAN:
            householder_r(ahat, rfac)
            gaussian_values(rfac, buf, pos, s, direction)
        else:
            literal_values(buf, pos, ahat, s, direction)
        pos += per_layer
        ok = scaled_step(x, sqrt_h, logscale, direction, norm2)
        fresh = False
        if ok and layer + 1 == ckpt[c]:
            gram(x, g)
            fresh = True
            record_overlaps(g, eps, out, r, c)
            observables.observe(x, g, beta, out, r, c)
            if keep:
                states[r, c] = x
            if resolved_for(out, r, c, window):
                stop(out, r, c, states, x)
                break
            c += 1
    finish_trajectory(out, r, ok, times)


@njit(nogil=True, cache=True)
def stop(out, r, c, states, x):
    """Early stop after checkpoint c: carry its outputs (and state) to the later checkpoints."""
    carry_forward(out, r, c)
    observables.carry_observables(out, r, c)
    if states.shape[1] > 0:
        for b in range(c + 1, states.shape[1]):
            states[r, b] = x
