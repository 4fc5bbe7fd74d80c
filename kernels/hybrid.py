"""Hybrid noise model [F26, Prop. 1] (docs/models.md section 5): attention flow with a scalar noise.

Discrete model, L = layers, h = T / L, k = 0..L-1:

    x_i <- N( x_i + h A_i + sigma sqrt(h) xi_k A_i ) = N( x_i + (h + sigma sqrt(h) xi_k) A_i ),

xi_k one standard normal per layer, shared by all tokens, sigma >= 0, A_i the attention of
`tokensweep.kernels.attention` (sa, usa, causal_sa; Q = K = V = I, beta). Tokens start i.i.d.
uniform on S^{d-1}. Limit: dx = (1 - sigma^2 <x, A>) P_x A dt - (sigma^2/2) |P_x A|^2 x dt
+ sigma P_x A dB. For USA with n = 2 the threshold is sigma_c^2 = 2 e^{-beta}: single cluster
below, antipodal above.

Random stream of one trajectory (one numpy Generator each, `standard_normal`):
  1. n*d normals, row-major (n, d): the start, each row normalised (or a given `x0`, drawn before
     from the same Generator, `kernels/starts.py`);
  2. then xi_0, xi_1, ..., one normal per layer, fetched `draw_batch` layers at a time (the stream
     and the outputs do not depend on the batch size).

The scalar noise moves every token along its own attention direction, so the dynamics is
permutation-equivariant pathwise (non-causal attention). Outputs: `outcomes.OUTPUTS`, one record
for all trajectories (`outcomes`).
"""

import numpy as np
from numba import njit

from . import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
    vocabulary,
)
from .attention import ATTENTION_CODES, attention, gram, normalize_rows, scaled_step, uniform_start
from .outcomes import (
    OUTPUTS,
    SphereOutcomes,
    carry_forward,
    check_common_arguments,
    check_run_options,
    finish_trajectory,
    for_each_trajectory,
    record_overlaps,
    resolved_for,
)

ATTENTIONS = vocabulary.HYBRID_ATTENTIONS
DEFAULT_DRAW_BATCH = 1024  # layers per buffered draw

__all__ = ["ATTENTIONS", "OUTPUTS", "simulate_hybrid", "simulate_hybrid_states"]


@njit(nogil=True, cache=True)
def _trajectory(rng, x, draw_start, beta, att, sigma, h, layers, ckpt, times, eps, batch, window,
                out, r, states):
    """Integrate trajectory r and fill its entries of the outputs record out.

    As stochastic._trajectory: x (n, d); ckpt (nt,) int64, times (nt,); out `SphereOutcomes`;
    states (ntraj, nt, n, d) NaN-filled, or (ntraj, 0, n, d) to skip them; window: early
    stopping's window (0: off; `stochastic.transformer` module docstring).
    """
    n, d = x.shape
    keep = states.shape[1] > 0
    ok = uniform_start(rng, x) if draw_start else normalize_rows(x)
    observables.record_start(x, out, r)
    ahat = np.empty((n, d))
    logscale = np.empty(n)
    w = np.empty((n, n))
    g = np.empty((n, n))
    norm2 = np.empty(n)
    sqrt_h = np.sqrt(h)
    buf = np.empty(0)
    pos = np.int64(0)  # int64s, not literals (kernels/__init__.py)
    c = np.int64(0)
    fresh = False  # g holds the overlaps of x
    for layer in range(layers):
        if not ok:
            break
        if pos == buf.shape[0]:
            buf = rng.standard_normal(min(batch, layers - layer))
            pos = np.int64(0)
        if not fresh:
            gram(x, g)
        attention(x, g, beta, att, ahat, logscale, w)
        ok = scaled_step(x, h + sigma * sqrt_h * buf[pos], logscale, ahat, norm2)
        pos += 1
        fresh = False
        if ok and layer + 1 == ckpt[c]:
            gram(x, g)
            fresh = True
            record_overlaps(g, eps, out, r, c)
            observables.observe(x, g, beta, out, r, c)
            if keep:
                states[r, c] = x
            if resolved_for(out, r, c, window):
                carry_forward(out, r, c)
                observables.carry_observables(out, r, c)
                if keep:
                    for b in range(c + 1, ckpt.shape[0]):
                        states[r, b] = x
                break
            c += 1
    finish_trajectory(out, r, ok, times)


def _run(rngs, n, d, beta, sigma, T, layers, checkpoint_layers, attention, eps, draw_batch, x0,
         keep_states, stop_when_resolved, resolved_window, threads, record=(),
         record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None):
    ckpt = check_common_arguments(rngs, n, d, beta, T, layers, checkpoint_layers, attention,
                                  ATTENTIONS, eps)
    window, threads = check_run_options(stop_when_resolved, resolved_window, threads)
    if not (np.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma = {sigma!r}, but the noise level must be finite and >= 0")
    batch = DEFAULT_DRAW_BATCH if draw_batch is None else int(draw_batch)
    if batch < 1:
        raise ValueError(f"draw_batch = {draw_batch!r}, but it must be >= 1 (or None for a default)")
    n, d, layers = int(n), int(d), int(layers)
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

    def run_one(r):
        x = np.empty((n, d)) if x0 is None else x0[r].copy()
        _trajectory(rngs[r], x, x0 is None, float(beta), ATTENTION_CODES[attention], float(sigma),
                    h, layers, ckpt, times, float(eps), batch, window, out, r, states)

    for_each_trajectory(run_one, ntraj, threads)
    return observables.returned(out, OUTPUTS, record, states), states


def simulate_hybrid(rngs, *, n, d, beta, sigma, T, layers, checkpoint_layers, attention="sa",
                    eps=1e-3, draw_batch=None, stop_when_resolved=False, resolved_window=2,
                    threads=1, x0=None, record=(), record_bins=vocabulary.DEFAULT_RECORD_BINS,
                    direction=None):
    """Simulate len(rngs) trajectories of the hybrid noise model; one Generator each.

    Returns the arrays described by OUTPUTS: (ntraj, nt) per checkpoint, (ntraj,) otherwise.
    stop_when_resolved, resolved_window: early stopping (`stochastic.transformer` module docstring);
    threads: trajectories run on this many threads (results do not depend on it).
    x0: optional (ntraj, n, d) starts already drawn (as in `simulate_stochastic_transformer`).
    record, record_bins, direction: observables also returned (`observables`).
    """
    out, _ = _run(rngs, n, d, beta, sigma, T, layers, checkpoint_layers, attention, eps, draw_batch,
                  x0, False, stop_when_resolved, resolved_window, threads, record, record_bins,
                  direction)
    return out


def simulate_hybrid_states(rngs, *, n, d, beta, sigma, T, layers, checkpoint_layers, attention="sa",
                           eps=1e-3, draw_batch=None, x0=None, stop_when_resolved=False,
                           resolved_window=2, threads=1, record=(),
                           record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None):
    """As simulate_hybrid, also returning the states (ntraj, nt, n, d): (states, outputs).

    x0: optional (ntraj, n, d) start (rows are normalised); then no start normals are drawn.
    """
    out, states = _run(rngs, n, d, beta, sigma, T, layers, checkpoint_layers, attention, eps,
                       draw_batch, x0, True, stop_when_resolved, resolved_window, threads, record,
                       record_bins, direction)
    return states, out
