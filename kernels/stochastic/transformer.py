"""Deep stochastic transformer [F26] (docs/models.md section 4): tokens driven by random value matrices.

Discrete model, L = layers, h = T / L, k = 0..L-1:

    x_i <- N( x_i + sqrt(h) V_k A_i(X) ),   N(y) = y / |y|,

V_k a fresh d x d matrix each layer, shared by all tokens, i.i.d. N(0, s^2) entries (s = value_std;
other laws below), A_i the attention of `tokensweep.kernels.attention` (sa, usa, causal_sa;
Q = K = I unless given, beta). Tokens start i.i.d. uniform on S^{d-1}. As L -> infinity this is
the SDE
dx_i = P_{x_i} dW A_i - ((d-1)/2) s^2 |A_i|^2 x_i dt.

Noise paths (same law, different random numbers):

- "literal": draw V_k (d*d normals, row-major) and multiply, noise_i = s V_k Ahat_i.
- "gaussian" (default, exact in distribution): the rows of V_k [a_1 ... a_n] are i.i.d.
  N(0, s^2 G), G = A^T A, so with R^T R = G (Householder R of A, r = min(n, d) rows, exact also
  when tokens have collapsed and G is singular) noise_i = s sum_k R[k, i] W[k], W (r, d) standard
  normals, row-major. r*d normals per layer instead of d*d. Permuting tokens changes R, so this path
  is permutation-equivariant in law only; the literal path is equivariant pathwise.

Random stream of one trajectory (one numpy Generator each, consumed by `standard_normal`):
  1. n*d normals, row-major (n, d): the start, each row normalised (or a start `x0` drawn before
     from the same Generator, `kernels/starts.py`);
  2. then, layer by layer in order, the layer's normals: W (r*d) or V_k (d*d).
Layer draws are fetched `draw_batch` layers at a time into one buffer; the stream is the same
concatenation whatever the batch size, so outputs are bit-identical for any `draw_batch`.

Every other run takes the general path, `_trajectory` (`stochastic.general.trajectory`, whose
exponentials are vectorised by `lowlevel.fast_exp`, bit-identical), or for 3 <= n <= 8 with the defaults
(SA or USA) its bit-identical lanes version, `stochastic.lanes.trajectory_lanes` (one token per
SIMD lane; `_LANES` switches it off for tests), two trajectories at a time side by side
(`stochastic.pairs.trajectory_pairs`, sixteen lanes, bit-identical; `_PAIRS` switches it off,
an odd last trajectory runs alone). Two tokens with gaussian noise (the main
production case) run `_trajectory_pair`: the same
floating-point operations in the same order as the general `_trajectory`, fused into one pass per
layer (no helper calls, scratch copies or zero fills), so its results are bit-identical to the
general path's; `_run` picks it, tests compare the two with `_SPECIALISE` switched off.

USA carries its scale e^{beta max_j <x_i,x_j>} / n as a log (attention.scaled_step), so beta up to
1e3 neither overflows nor gives NaN. Outputs: `outcomes.OUTPUTS`, recorded after each layer count in
checkpoint_layers (checkpoint time h * layer) into one record for all trajectories (`outcomes`).

Early stopping (opt-in, stop_when_resolved=True; also `hybrid`). A trajectory whose cluster class
was the same resolved class (single or antipodal: every pair within eps of +1, resp. of +-1 with
one pair near -1) at resolved_window consecutive checkpoints stops integrating after the last of
them; every later checkpoint repeats that checkpoint's outputs (overlaps, class, cluster count,
state), and t_hit follows from the repeated classes as usual. Checks happen only at checkpoints,
where the outcomes are computed anyway, so the window spans (resolved_window - 1) checkpoint
intervals of model time: that span, not a layer count, is what guards against a pair that leaves
a boundary again (near -1 when beta < beta_c, where -1 does not attract). Up to the stop every
output is bit-identical to the full run (same stream, same operations); after it the carried
values are the stop's, not the full run's, so early stopping is an approximation whose error is
the probability of leaving a resolved class later (measured: benchmarks/bench_early_stop.py).
It is safe where the resolved classes attract (two tokens; beta above beta_c for antipodal
pairs); for n > 2 a split into two opposite clusters need not be absorbing (n = 3, d = 4,
beta = 2, window 2: 21 % of the final classes differ from the full run's).
The stream stays a function of (seed, cell, trajectory): a stopped trajectory draws nothing more.

Generalisations (docs/models.md 4.4; the defaults below run the code paths above unchanged):
- value_law "rademacher" / "uniform": entries +-1 / sqrt(3)(2u - 1) from rng.random (numpy's
  stream, `attention.value_draws`), in place of the normals of V_k; literal noise only.
- qk / matrices (Q, K): logits beta <x_i, M x_j>, M = Q^T K (`bilinear_logits`), M fixed or drawn
  per trajectory right after the start (as `ensembles.draw_weights` for one head, value fixed), so
  the stream is: start normals, then Q, K's normals, then the layers'. With x0 given, Q, K first.
- scheme "sde": `stochastic.sde.trajectory_sde`, the limit SDE by geodesic Euler-Maruyama, on the
  stream of the gaussian noise path.
The n = 2 fused path runs only for the defaults (gaussian law and noise, Q = K = I, discrete).

Threads (threads > 1): trajectories are handed out one at a time (two at a time on the lanes
path's pairs) to a pool of threads; each has its own Generator and writes its own rows, and the
kernels release the GIL, so the outputs do not depend on the thread count.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
    vocabulary,
)
from ..attention import (
    ATTENTION_CODES,
    CAUSAL_SA,
    GAUSSIAN_LAW,
    USA,
    normalize_row,
    normalize_rows,
    uniform_start,
)
from ..lowlevel.fast_exp import matches_libm
from ..outcomes import (
    OUTPUTS,
    SphereOutcomes,
    check_common_arguments,
    check_run_options,
    finish_trajectory,
    for_each_trajectory,
    record_checkpoint,
    resolved_for,
)
from .general import GAUSSIAN, LITERAL, stop
from .general import trajectory as _trajectory
from .lanes import MAX_TOKENS, trajectory_lanes
from .options import NO_QK, SCHEMES, VALUE_LAWS, check_options, query_key
from .pairs import trajectory_pairs

ATTENTIONS = vocabulary.STOCHASTIC_ATTENTIONS
NOISES = vocabulary.NOISES
NORMALS_PER_DRAW = 4096  # default buffer size (normals), when draw_batch is not given
_SPECIALISE = True  # n = 2 gaussian runs use _trajectory_pair (bit-identical); tests switch it off
_LANES = True  # 3 <= n <= 8 runs of the defaults use trajectory_lanes (bit-identical); idem
_PAIRS = True  # and run two trajectories side by side (trajectory_pairs, bit-identical); idem
_FAST_EXP = None  # whether fast_exp reproduces libm's exp here: checked once, at the first run

__all__ = [
    "ATTENTIONS", "NOISES", "OUTPUTS", "SCHEMES", "VALUE_LAWS", "simulate_stochastic_transformer",
    "simulate_stochastic_states",
]


@njit(nogil=True, cache=True, inline="always")
def _pair_attention_row(x, d, l0, l1, two, usa, log_n, a):
    """Row i of `attention` for n = 2 from its logits (l0, l1) = beta (<x_i, x_0>, <x_i, x_1>).

    two: False for causal_sa row 0 (attends to x_0 only). Writes Ahat_i into a (d,), returns c_i.
    Same operations in the same order as `attention`, and exp(0) = 1 is not evaluated.
    """
    m = -np.inf
    if l0 > m:
        m = l0
    if two and l1 > m:
        m = l1
    e = l0 - m
    w0 = 1.0 if e == 0.0 else np.exp(e)
    total = 0.0 + w0
    if two:
        e = l1 - m
        w1 = 1.0 if e == 0.0 else np.exp(e)
        total += w1
        for k in range(d):
            a[k] = (0.0 + w0 * x[0, k]) + w1 * x[1, k]
    else:
        for k in range(d):
            a[k] = 0.0 + w0 * x[0, k]
    if usa:
        return m - log_n
    inv = 1.0 / total
    for k in range(d):
        a[k] *= inv
    return 0.0


@njit(nogil=True, cache=True, inline="always")
def _pair_step_row(x, i, d, coef, c, f0, f1, buf, off):
    """Row i of `scaled_step` with direction_i = f0 W[0] + f1 W[1] (f1 unused for i = 0), as
    `gaussian_values` forms it; the normalisation of `normalize_row`, whose general path is
    only taken when |y|^2 is 0, inf or NaN. Returns False if the row is non-finite or zero."""
    fx = 1.0
    fa = coef
    if c > 0.0:
        fx = np.exp(-c)
    elif c < 0.0:
        fa = coef * np.exp(c)
    norm2 = 0.0
    if i == 0:
        for k in range(d):
            y = fx * x[0, k] + fa * (0.0 + f0 * buf[off + k])
            x[0, k] = y
            norm2 += y * y
    else:
        for k in range(d):
            y = fx * x[1, k] + fa * ((0.0 + f0 * buf[off + k]) + f1 * buf[off + d + k])
            x[1, k] = y
            norm2 += y * y
    if not (norm2 > 0.0 and norm2 < np.inf):
        return normalize_row(x, np.int64(i))  # recomputes norm2, rescales or fails (int64 i:
        # kernels/__init__.py)
    inv = 1.0 / np.sqrt(norm2)
    for k in range(d):
        x[i, k] *= inv
    return True


@njit(nogil=True, cache=True)
def _trajectory_pair(rng, x, draw_start, beta, att, noise, s, h, layers, ckpt, times, eps, batch,
                     window, out, r, states):
    """`_trajectory` for n = 2 tokens and the gaussian noise path (noise is not read).

    Same arguments, same random stream, and bit-identical results: the same floating-point
    operations in the same order, with `attention`, `householder_r` (d x 2, LAPACK signs),
    `gaussian_values` and `scaled_step` fused into one pass per layer over scalars and two
    d-vectors, so no helper calls, scratch copies or zero-filled factors per layer.
    """
    d = x.shape[1]
    keep = states.shape[1] > 0
    ok = uniform_start(rng, x) if draw_start else normalize_rows(x)
    observables.record_start(x, out, r)
    per_layer = 2 * d
    a0 = np.empty(d)  # Ahat_0 (column 0 of A; u of the first reflection from index 1 on)
    a1 = np.empty(d)  # Ahat_1, then H_1 Ahat_1
    g_work = np.empty((2, 2))
    sqrt_h = np.sqrt(h)
    log_n = np.log(2)
    usa = att == USA
    causal = att == CAUSAL_SA
    buf = np.empty(0)
    pos = np.int64(0)  # int64s, not literals (kernels/__init__.py)
    c = np.int64(0)
    for layer in range(layers):
        if not ok:
            break
        if pos == buf.shape[0]:
            buf = rng.standard_normal(min(batch, layers - layer) * per_layer)
            pos = np.int64(0)
        # attention: logits beta <x_i, x_j>
        g00 = 0.0
        g01 = 0.0
        g11 = 0.0
        for k in range(d):
            g00 += x[0, k] * x[0, k]
            g01 += x[0, k] * x[1, k]
            g11 += x[1, k] * x[1, k]
        c0 = _pair_attention_row(x, d, beta * g00, beta * g01, not causal, usa, log_n, a0)
        c1 = _pair_attention_row(x, d, beta * g01, beta * g11, True, usa, log_n, a1)
        # R (2 x 2) of the Householder QR of A = [a0 a1], as householder_r
        alpha = a0[0]
        xnorm2 = 0.0
        for k in range(1, d):
            xnorm2 += a0[k] * a0[k]
        if xnorm2 == 0.0:
            r00 = alpha
        else:
            r00 = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
            u0 = alpha - r00
            unorm2 = u0 * u0 + xnorm2
            dot = 0.0 + u0 * a1[0]
            for k in range(1, d):
                dot += a0[k] * a1[k]
            f = 2.0 * dot / unorm2
            a1[0] -= f * u0
            for k in range(1, d):
                a1[k] -= f * a0[k]
        r01 = a1[0]
        alpha = a1[1]
        xnorm2 = 0.0
        for k in range(2, d):
            xnorm2 += a1[k] * a1[k]
        if xnorm2 == 0.0:
            r11 = alpha
        else:
            r11 = -np.copysign(np.sqrt(alpha * alpha + xnorm2), alpha)
        # noise_i = s sum_k R[k, i] W[k] and the normalised step, row by row
        ok = _pair_step_row(x, 0, d, sqrt_h, c0, s * r00, 0.0, buf, pos)
        if ok:
            ok = _pair_step_row(x, 1, d, sqrt_h, c1, s * r01, s * r11, buf, pos)
        pos += per_layer
        if ok and layer + 1 == ckpt[c]:
            record_checkpoint(x, eps, g_work, out, r, c)
            observables.observe(x, g_work, beta, out, r, c)
            if keep:
                states[r, c] = x
            if resolved_for(out, r, c, window):
                stop(out, r, c, states, x)
                break
            c += 1
    finish_trajectory(out, r, ok, times)


def _fast_exp():
    """Whether the general path may use `lowlevel.fast_exp` (bit-identical to np.exp on this machine)."""
    global _FAST_EXP
    if _FAST_EXP is None:
        _FAST_EXP = matches_libm()
    return _FAST_EXP


def _run(rngs, n, d, beta, value_std, T, layers, checkpoint_layers, attention, noise, eps,
         draw_batch, x0, keep_states, stop_when_resolved, resolved_window, threads,
         value_law="gaussian", qk="identity", matrices=None, scheme="discrete",
         record=(), record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None):
    ckpt = check_common_arguments(rngs, n, d, beta, T, layers, checkpoint_layers, attention,
                                  ATTENTIONS, eps)
    window, threads = check_run_options(stop_when_resolved, resolved_window, threads)
    if noise not in NOISES:
        raise ValueError(f"noise = {noise!r} is unknown: use one of {NOISES}")
    if not (np.isfinite(value_std) and value_std >= 0):
        raise ValueError(f"value_std = {value_std!r}, but the value entries' std must be finite, >= 0")
    law = check_options(noise, value_law, scheme)
    n, d, layers = int(n), int(d), int(layers)
    per_layer = min(n, d) * d if noise == "gaussian" else d * d
    batch = max(1, NORMALS_PER_DRAW // per_layer) if draw_batch is None else int(draw_batch)
    if batch < 1:
        raise ValueError(f"draw_batch = {draw_batch!r}, but it must be >= 1 (or None for a default)")
    ntraj, nt = len(rngs), ckpt.size
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (ntraj, n, d):
            raise ValueError(f"x0 has shape {x0.shape}, expected (ntraj, n, d) = {(ntraj, n, d)}")
    record, record_bins, direction = observables.check_record(record, record_bins, direction, d)
    out = observables.allocate(SphereOutcomes, ntraj, nt, n, d, record, record_bins, direction)
    states = np.full((ntraj, nt if keep_states or "states" in record else 0, n, d), np.nan)
    h = float(T) / layers
    times = h * ckpt.astype(np.float64)
    att, code = ATTENTION_CODES[attention], GAUSSIAN if noise == "gaussian" else LITERAL
    draw_qk = query_key(d, qk, matrices)
    default = law == GAUSSIAN_LAW and draw_qk is None and scheme == "discrete"
    trajectory = _trajectory_pair if (n == 2 and code == GAUSSIAN and _SPECIALISE and default) \
        else _trajectory
    fast = _fast_exp()
    if (trajectory is _trajectory and _LANES and fast and code == GAUSSIAN and default
            and att != CAUSAL_SA and 3 <= n <= MAX_TOKENS):
        trajectory = trajectory_lanes

    def run_one(r):
        x = np.empty((n, d)) if x0 is None else x0[r].copy()
        rng, draw_start = rngs[r], x0 is None
        m = NO_QK
        if draw_qk is not None:  # start, then Q, K, from the trajectory's stream (docstring)
            if draw_start:
                x[:] = rng.standard_normal((n, d))  # = uniform_start's normals; normalised there
                draw_start = False
            m = draw_qk(rng)
        args = (rng, x, draw_start, float(beta), att, code, float(value_std), h, layers, ckpt,
                times, float(eps), batch, window, out, r, states)
        if scheme == "sde":
            from .sde import trajectory_sde

            trajectory_sde(*args[:5], *args[6:], m)
        elif trajectory is _trajectory:
            _trajectory(*args, law, m, fast)
        elif trajectory is trajectory_lanes:
            trajectory_lanes(*args[:5], *args[6:])
        else:
            trajectory(*args)

    if trajectory is trajectory_lanes and _PAIRS:
        def run_pair(u):  # trajectories 2u and 2u + 1 side by side; an odd last one alone
            ra, rb = 2 * u, 2 * u + 1
            if rb == ntraj:
                return run_one(ra)
            xa = np.empty((n, d)) if x0 is None else x0[ra].copy()
            xb = np.empty((n, d)) if x0 is None else x0[rb].copy()
            trajectory_pairs(rngs[ra], xa, rngs[rb], xb, x0 is None, float(beta), att,
                             float(value_std), h, layers, ckpt, times, float(eps), batch, window,
                             out, ra, rb, states)

        for_each_trajectory(run_pair, (ntraj + 1) // 2, threads)
    else:
        for_each_trajectory(run_one, ntraj, threads)
    return observables.returned(out, OUTPUTS, record, states), states


def simulate_stochastic_transformer(rngs, *, n, d, beta, value_std=1.0, T, layers, checkpoint_layers,
                                    attention="sa", noise="gaussian", eps=1e-3, draw_batch=None,
                                    stop_when_resolved=False, resolved_window=2, threads=1,
                                    value_law="gaussian", qk="identity", matrices=None,
                                    scheme="discrete", x0=None, record=(),
                                    record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None):
    """Simulate len(rngs) trajectories of the deep stochastic transformer; one Generator each.

    Returns the arrays described by OUTPUTS: (ntraj, nt) per checkpoint, (ntraj,) otherwise,
    nt = len(checkpoint_layers). draw_batch: layers per buffered draw (results do not depend on it).
    stop_when_resolved, resolved_window: early stopping (module docstring). threads: trajectories
    run on this many threads (results do not depend on it). value_law: "gaussian", "rademacher" or
    "uniform" entries of V_k (the last two need noise="literal"). qk: Q, K ensemble as the sphere
    flow's ("identity", "ginibre", "goe", "wigner", "wishart"); matrices: explicit {"Q", "K"} (d, d).
    scheme: "discrete" (the transformer) or "sde" (`stochastic.sde`, its limit SDE). x0: optional
    (ntraj, n, d) starts (`kernels/starts.py`; rows normalised), already drawn from the Generators,
    which then give Q, K (when drawn) and the layers' noise; None: each Generator draws a uniform
    start first. record: names of `vocabulary.OBSERVABLES` also returned, over record_bins bins
    and about `direction` (`observables`).
    """
    out, _ = _run(rngs, n, d, beta, value_std, T, layers, checkpoint_layers, attention, noise, eps,
                  draw_batch, x0, False, stop_when_resolved, resolved_window, threads,
                  value_law, qk, matrices, scheme, record, record_bins, direction)
    return out


def simulate_stochastic_states(rngs, *, n, d, beta, value_std=1.0, T, layers, checkpoint_layers,
                               attention="sa", noise="gaussian", eps=1e-3, draw_batch=None, x0=None,
                               stop_when_resolved=False, resolved_window=2, threads=1,
                               value_law="gaussian", qk="identity", matrices=None, scheme="discrete",
                               record=(), record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None):
    """As simulate_stochastic_transformer, also returning the states: (states, outputs).

    states: (ntraj, nt, n, d) tokens at each checkpoint (NaN after a non-finite step; an
    early-stopped trajectory repeats its last state). x0: optional (ntraj, n, d) start (rows are
    normalised); then the stream starts with layer 0's noise, no start normals are drawn.
    """
    out, states = _run(rngs, n, d, beta, value_std, T, layers, checkpoint_layers, attention, noise,
                       eps, draw_batch, x0, True, stop_when_resolved, resolved_window, threads,
                       value_law, qk, matrices, scheme, record, record_bins, direction)
    return states, out
