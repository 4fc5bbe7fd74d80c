"""Deterministic attention flows on the sphere [GLPR-P, RST] (docs/models.md sections 1, 2 and 6).

Tokens x_1..x_n on S^{d-1} move by

    dx_i/dt = P_{x_i}( A_i(X) ),     P_x y = y - <x, y> x,
    A_i(X) = sum_h sum_{j in J(i)} w^h_ij V_h x_j,     w^h_ij from logits beta <Q_h x_i, K_h x_j>,

summed over heads without 1/H. SA: w = softmax over j; USA: w = exp(logit)/n; causal: J(i) = {j <= i}
(token 1 attends only to itself), else J(i) = {1..n}. The [RST] convention (`rst_scaling`) divides
every head by sqrt(d): a time change t_RST = sqrt(d) t for constant weights. With `time_varying`,
Q_h^T K_h is replaced by P_h(t) = D_h(t) Q_h^T K_h (`ensembles`). Options (docs/models.md 2.4-2.7):
hardmax attention (beta -> infinity: w uniform on the keys of maximal logit), a turning value
V_h(t) = R(t) V_h R(t)^T (`value_rotation`), Brownian noise (`sphere.noise`), and the ensembles
scaled as the authors' scripts (`ensembles.authors_scaling`).

Stable evaluation. Each head's row i is computed as A^h_i = exp(c^h_i) Ahat^h_i with every exponential
<= 1: logits minus the row max m_i (SA: c = 0; USA: c = m_i - log n), so beta up to 1e3 neither
overflows nor gives NaN. When Q = K = I (not time-varying, beta >= 0) the shift is the common
constant beta max_k |x_k|^2 >= every logit (Cauchy-Schwarz), which makes the weight matrix symmetric:
half the exponentials. Heads are combined in log-scale, so the drift is f_i = exp(c_i) fhat_i.
The drift and the steps live in `sphere.drift` (re-exported here): products by BLAS gemm, the rest
in loops that vectorise, deterministic (not bitwise equal to a NumPy evaluation: ~1e-15). Euler with
Q = K = I, V = +-I, one head, not time-varying, beta >= 0 runs on `sphere.symmetric`: the same
bits, faster (the state kept transposed, one pass for the exponentials), and for d > n in the span
of the start (an isometry: same outcomes, rounding ~1e-15 apart).

Integrators, h = T / layers, t_k = k h:
- euler (retraction Euler, the papers' scheme): x <- N(x + h f(x, t)), with the scale e^{c_i} put
  on the side of the sum where it is <= 1 (N is scale invariant), so USA at large beta is exact too;
- heun:  k1 = f(x, t), k2 = f(x + h k1, t + h), x <- N(x + h (k1 + k2)/2);
- rk4:   classical stages, x <- N(x + h (k1 + 2 k2 + 2 k3 + k4)/6).
Stages are evaluated in the ambient space with the same formula (F(y) = A(y) - <y, A(y)> y keeps
|y| = 1 invariant), and only the step's end is normalised. Heun and RK4 form e^{c} fhat explicitly;
a USA run whose scale overflows is reported as non-finite.

Outcomes at each checkpoint (`OUTPUTS`, declared in `vocabulary`, computed in `sphere.checkpoints`):
the shared ones of `outcomes` (overlap extremes, cluster class, cluster count, t_hit, nonfinite) and
- frac_close: fraction of pairs i < j with <x_i, x_j> >= 1 - delta ([GLPR-P] Fig. 3; 1 when n = 1);
- energy: E_beta = (1/(2 beta n^2)) sum_ij exp(beta <x_i, x_j>), evaluated as exp(shift + log(...)),
  inf only if the value itself exceeds float64; for beta = 0 the limit of E_beta - 1/(2 beta), i.e.
  (1/(2 n^2)) sum_ij <x_i, x_j> = |mean x|^2 / 2 (the same dynamics: USA with Q = K = V = I is
  n times its gradient flow);
- in_hemisphere: are the tokens in an open hemisphere, i.e. 0 is not in their convex hull
  (`hemisphere`: Wolfe's exact min-norm-point algorithm with a tolerance).

Randomness: per trajectory, from its own Generator: the start, then the matrices, then (for
"rst_random_frequencies") the schedule, then every `period` steps the matrices again (order in
`ensembles`). A trajectory that becomes non-finite stops: its later checkpoints keep the missing
values NaN/0/False the output record was allocated with (`outcomes.allocate_outputs`).
When only the start is random (no matrix ensemble, no random schedule) the starts' normals are drawn
in Python (`Generator.standard_normal`, the same numbers numba draws) and blocks of trajectories
are integrated by one call (`trajectories_from_normals`); otherwise one `trajectory` call each.
`threads` > 1 runs those calls on a thread pool (`blocks.run_blocks`): the same bits.

Precision: `precision="float32"` runs the state, the matrices and the drift in float32 (the starts
and the random matrices are drawn in float64 and rounded; the outcomes are computed in float64
from the state): 1.6-1.8 times the speed at large n d, the statistics of float64 (tests).

Device: `device="cuda"` runs Euler configurations in PyTorch on a GPU (`sphere.gpu`,
docs/models.md 2.10): starts, weights, noise and outcomes drawn and computed on the device from
Philox streams keyed by each trajectory's Generator (not the CPU's numbers: `device` is part of
the spec), states ~1e-15 per step apart from the CPU kernel's from the same starts and weights;
torch is imported only there.
"""

import numpy as np
from numba import njit

from tokensweep.kernels import (
    cache,  # noqa: F401  (numba's cache folder, before any decoration)
    observables,
    outcomes,
    vocabulary,
)
from tokensweep.kernels.blocks import block_size, run_blocks, start_normals
from tokensweep.kernels.ensembles import (
    GIVEN,
    draw_frequencies,
    draw_start,
    draw_weights,
    qk_products,
    shape_start,
)
from tokensweep.kernels.sphere import symmetric
from tokensweep.kernels.sphere.checkpoints import energy, frac_close, memory, record  # noqa: F401
from tokensweep.kernels.sphere.drift import (  # noqa: F401  (re-exported: drift, retract, ...)
    EULER,
    HARDMAX,
    HEUN,
    RK4,
    SA,
    TV_ABS_COS,
    TV_COS,
    TV_NONE,
    USA,
    V_GENERAL,
    V_IDENTITY,
    V_MINUS_IDENTITY,
    drift,
    exp_vec,
    field,
    retract,
    step,
)
from tokensweep.kernels.sphere.noise import noisy_euler_step
from tokensweep.kernels.sphere.norms import normalised_step
from tokensweep.kernels.sphere.options import (  # noqa: F401  (re-exported)
    ATTENTIONS,
    INTEGRATOR_CODES,
    PRECISIONS,
    SphereFlowOptions,
    Steps,
)

OUTPUTS = vocabulary.SPHERE_FLOW_OUTPUTS
SphereFlowOutcomes = outcomes.record_class("SphereFlowOutcomes", OUTPUTS, __name__,
                                           outcomes.RECORD_FIELDS)


@njit(nogil=True, cache=True)
def workspace(n, d, heads, proto):
    """Scratch arrays of `sphere.drift.drift` / `euler_step` in the dtype of proto: (xt, yt, at,
    bt, ft (d, n); e (n, n); tot, mx, lsh, u1, u2 (n,); mt (d, d)). Defined here, next to its
    caller `trajectory` (a cached function returning arrays, defined in another module than its
    cached caller, fails to box its result when later called from Python: numba 0.68)."""
    dt = proto.dtype
    return (np.empty((d, n), dt), np.empty((d, n), dt), np.empty((d, n), dt),
            np.empty((d, n), dt), np.empty((d, n), dt), np.empty((n, n), dt), np.empty(n, dt),
            np.empty(n, dt), np.empty(n, dt), np.empty(n, dt), np.empty(n, dt),
            np.empty((d, d), dt))


@njit(nogil=True, cache=True)
def _integrate(x0, ok, rng, kinds, q, k, mats, steps, out, r, states, proto):
    """Integrate trajectory r from the start x0 (n, d) (ok: the start is valid) and fill its
    entries of out and states (`trajectory`). rng: the trajectory's Generator, for the redraws
    every `period` steps and the noise (`trajectories_from_normals` passes one it never draws from).
    steps: the run's `options.Steps` (h, layers, checkpoints, par, integrator, period, delta,
    eps and layer: (noise mode, sigma) of `sphere.noise` (sigma > 0 needs rng: the
    Euler-Maruyama step), then the normalisation (`sphere.norms` code, nGPT alpha)).
    proto: an array of the working dtype: the state and the matrices m, v are copies in it,
    refreshed after each redraw (drawn in float64); outputs come from a float64 copy."""
    h, layers, ckpt, times, par, integrator, period, delta, eps, layer = steps
    beta = par[0]
    m, v = mats[0], mats[1]
    q_kind, k_kind, v_kind, scaling = kinds
    n, d = x0.shape
    x = x0.astype(proto.dtype)
    mw, vw = m.astype(proto.dtype), v.astype(proto.dtype)
    mats_w = (mw, vw, mats[2], mats[3], mats[4])
    ws = workspace(n, d, m.shape[0], proto)
    stages = np.empty((5, n, d), proto.dtype)
    ls = np.empty(n)
    radius = np.ones(n)  # the tokens' radii under pre- and peri-LN (`sphere.norms`)
    g = np.empty((n, n))
    memo = memory(d)
    redraw = q_kind != 0 or k_kind != 0 or v_kind != 0
    c = np.int64(0)  # int64, not a literal (kernels/__init__.py)
    if ok:
        observables.record_start(x0, out, r)
        for s in range(layers):
            if period > 0 and s > 0 and s % period == 0 and redraw:
                draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m, scaling)
                mw[:, :, :] = m
                vw[:, :, :] = v
            stepped = layer[2] != 0  # a normalisation variant (`sphere.norms`): its own step
            if stepped:
                ok = normalised_step(x, radius, s * h, h, par, mats_w, ws, ls, layer[2], layer[3])
            if layer[1] > 0.0:  # the projected Euler-Maruyama step (`sphere.noise`)
                stepped = True
                ok = noisy_euler_step(x, s * h, h, par, mats_w, ws, ls, stages[0], rng, layer[0],
                                      layer[1])
            if not stepped:
                ok = step(x, s * h, h, integrator, par, mats_w, ws, stages, ls)
            if not ok:
                break
            if s + 1 == ckpt[c]:
                xr = x.astype(np.float64)
                record(xr, beta, delta, eps, g, out, r, c, memo)
                observables.record_observables(xr, g, out, r, c)
                if states.shape[1] > 0:
                    states[r, c] = xr
                c += 1
    outcomes.finish_trajectory(out, r, ok, times)


@njit(nogil=True, cache=True)
def trajectory(rng, n, d, steps, init, start, kinds, q, k, v, tv, out, r, states, proto):
    """Integrate trajectory r and fill its entries of the outputs record out.

    steps: the run's `options.Steps`. kinds: (q_kind, k_kind, v_kind, scaling) ensemble codes
    (`ensembles`). q, k, v: (H, d, d) fixed matrices (overwritten where drawn). tv: (amp, omega,
    phase) (H, d), random_frequencies. out: `SphereFlowOutcomes` from `outcomes.allocate_outputs`.
    states: (ntraj, nt, n, d) NaN-filled, or (ntraj, 0, n, d) to skip. proto: an array of the
    working dtype. start: (n, d), the start drawn before when init is GIVEN (else not read).
    The noise of `sphere.noise` is drawn per step after the start, matrices and schedule.
    """
    amp, omega, phase, random_frequencies = tv
    q_kind, k_kind, v_kind, scaling = kinds
    x = start.copy() if init == GIVEN else np.empty((n, d))
    m = np.empty((q.shape[0], d, d))
    ok = shape_start(init, x) if init == GIVEN else draw_start(rng, init, x)
    draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m, scaling)
    if random_frequencies:
        draw_frequencies(rng, omega, phase)
    mats = (m, v, amp, omega, phase)
    _integrate(x, ok, rng, kinds, q, k, mats, steps, out, r, states, proto)


@njit(nogil=True, cache=True)
def trajectories_from_normals(z, r0, init, unused_rng, mats, steps, out, states, proto):
    """Trajectories r0, r0 + 1, ... of a run whose only random draw is the start: z (B, n, d) holds
    each one's n*d standard normals (row-major, as `draw_start` draws them; overwritten).
    mats: (m, v, amp, omega, phase) fixed. steps: `options.Steps` with period 0 and no noise or
    normalisation variant. Fills rows r0 to r0 + B - 1 of out and states. unused_rng: any
    Generator, never drawn from (nothing is redrawn, no noise): with it and int64 kinds,
    `_integrate` has `trajectory`'s signature and is compiled once for both (~25 s, not twice)."""
    none = np.int64(0)  # an ensemble code of nothing drawn (kernels/__init__.py: not a literal)
    kinds = (none, none, none, none)
    for b in range(z.shape[0]):
        x = z[b]
        ok = shape_start(init, x)
        _integrate(x, ok, unused_rng, kinds, mats[0], mats[0], mats, steps, out, r0 + b, states,
                   proto)


# ---------------------------------------------------------------------------------------------
# Python entry point: options checked and resolved (`options`), outputs allocated, one path run.


def simulate_sphere_flow(rngs, *, x0=None, **options):
    """Integrate one deterministic attention flow per Generator in `rngs`; return `OUTPUTS` arrays.

    rngs: sequence of numpy Generators, one per trajectory (ntraj). options: the keywords of
    `SphereFlowOptions` (n, d, beta, T, layers, checkpoint_layers, then attention, integrator,
    heads, qk, value, ..., device with their defaults; its docstring says what each does).
    x0: optional (ntraj, n, d) starts on the sphere, drawn before from the Generators
    (`kernels/starts.py`).
    Returns {name: array} with (ntraj, nt) per-checkpoint and (ntraj,) per-trajectory outputs.
    """
    options = SphereFlowOptions(**options)
    run = options.resolve(rngs, x0)
    n, d, ntraj, steps = run.n, run.d, len(run.rngs), run.steps
    nt = steps.ckpt.shape[0]
    out = observables.allocate(SphereFlowOutcomes, ntraj, nt, n, d, run.record, run.record_bins,
                               run.direction)
    states = np.full((ntraj, nt if run.return_states else 0, n, d), np.nan)
    device = options.device
    on_torch = not (isinstance(device, str) and device == "cpu")
    on_symmetric = run.fixed and symmetric.applies(steps.integrator, steps.par, run.heads)
    if on_torch:
        from tokensweep.kernels.sphere import gpu_general

        if not (on_symmetric or gpu_general.covers(run)):
            raise ValueError(f"device = {device!r} runs retraction Euler (with or without noise), "
                             "Heun or RK4 with SA / USA, weights drawn once, V not turning, "
                             "post-LN: use device = 'cpu' for this configuration")
        work = _device_work(run, out, states, device, on_symmetric)
    elif on_symmetric:
        work = _symmetric_work(run, out, states)
    elif run.fixed:
        work = _fixed_work(run, out, states)
    else:
        work = _general_work(run, out, states)
    if on_torch:
        work(0, ntraj)
    else:
        run_blocks(ntraj, block_size(ntraj, n, d, run.threads, run.fixed), run.threads, work)
    return observables.returned(out, OUTPUTS, (*run.record, *(("states",) if run.return_states else ())),
                                states)


def _starts(run):
    """The block's starts: normals drawn here (`draw_start`'s), or the given ones."""
    def starts(r0, r1):
        return (start_normals(run.rngs, r0, r1, run.n, run.d) if run.x0 is None
                else run.x0[r0:r1].copy())
    return starts


def _symmetric_work(run, out, states):
    """Q = K = I, V = +-I, one head, Euler: the symmetric path (`sphere.symmetric`)."""
    s = run.steps
    reduce = symmetric.SPAN_REDUCTION and run.d > run.n
    starts = _starts(run)

    def work(r0, r1):
        symmetric.integrate_t(starts(r0, r1), r0, run.init, s.h, s.layers, s.ckpt, s.times,
                              _device_par(s), s.delta, s.eps, out, states, run.proto, reduce)
    return work


def _device_par(steps):
    """(beta, usa, causal, sign of V = +-I, log_scale0): the symmetric and device steps' par."""
    p = steps.par
    return p[0], p[1] == USA, p[2], -1.0 if p[4] == V_MINUS_IDENTITY else 1.0, p[6]


def _device_work(run, out, states, device, on_symmetric):
    """The run on a torch device (`sphere.gpu`): the symmetric step where it applies (in the
    span of the start where d > n), else with general weights (`sphere.gpu_general`)."""
    from tokensweep.kernels.sphere import gpu, gpu_general

    s = run.steps
    noise = s.layer[:2]  # (mode, sigma): the symmetric step has none (`run.fixed`)
    weights = None if on_symmetric else gpu_general.Weights(run.q, run.k, run.v, run.kinds,
                                                            s.par[4] == V_GENERAL, s.par[5],
                                                            run.tv)
    reduce = symmetric.SPAN_REDUCTION and run.d > run.n and on_symmetric
    starts = gpu.device_starts(run.rngs, run.n, run.d, run.init, run.x0)

    def work(r0, r1):  # one call: it batches the trajectories on the device itself
        gpu.integrate(starts, len(run.rngs), run.n, run.d, s.h, s.layers, s.ckpt, s.times,
                      _device_par(s), s.delta, s.eps, out, states, run.proto, reduce, device,
                      run.threads, weights=weights, noise=noise, integrator=s.integrator)
    return work


def _fixed_work(run, out, states):
    """Nothing but the start is random: the starts' normals drawn here (the same numbers as
    `draw_start`), a block of trajectories integrated per call (no per-trajectory dispatch)."""
    amp, omega, phase, _ = run.tv
    m = np.empty_like(run.q)
    qk_products(run.q, run.k, run.v, run.kinds[2], m)
    mats = (m, run.v, amp, omega, phase)
    steps = run.steps._replace(period=0, layer=(0, 0.0, 0, 0.0))
    starts = _starts(run)
    unused_rng = np.random.default_rng(0)  # never drawn from (`trajectories_from_normals`)

    def work(r0, r1):
        trajectories_from_normals(starts(r0, r1), r0, run.init, unused_rng, mats, steps, out, states,
                                  run.proto)
    return work


def _general_work(run, out, states):
    """One `trajectory` call per trajectory: its matrices (and schedule) drawn from its Generator."""
    amp, omega, phase, random_freq = run.tv
    q, k, v, x0 = run.q, run.k, run.v, run.x0

    def work(r0, r1):
        for r in range(r0, r1):
            tv = (amp.copy(), omega.copy(), phase.copy(), random_freq)
            start = x0[r] if x0 is not None else np.empty((run.n, run.d))
            trajectory(run.rngs[r], run.n, run.d, run.steps, run.init, start, run.kinds, q.copy(),
                       k.copy(), v.copy(), tv, out, r, states, run.proto)
    return work
