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

Device: `device="cuda"` runs the symmetric path's configurations in PyTorch on a GPU
(`sphere.gpu`, docs/models.md 2.10): the same starts, the same record functions, states
~1e-15 per step apart from the CPU's; torch is imported only there.
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
from tokensweep.kernels.sphere.arguments import resolve_time_varying, resolve_weights
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
from tokensweep.kernels.sphere.noise import noisy_euler_step, resolve_noise
from tokensweep.kernels.sphere.norms import NORM_CODES, normalised_step

ATTENTIONS = vocabulary.SPHERE_FLOW_ATTENTIONS
INTEGRATOR_CODES = dict(zip(vocabulary.SPHERE_FLOW_INTEGRATORS, (EULER, HEUN, RK4)))

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
def _integrate(x0, ok, rng, kinds, q, k, mats, h, layers, ckpt, times, par, integrator, period,
               delta, eps, out, r, states, proto, layer):
    """Integrate trajectory r from the start x0 (n, d) (ok: the start is valid) and fill its
    entries of out and states (`trajectory`). rng: the trajectory's Generator, for the redraws
    every `period` steps, or None where nothing is ever redrawn (then q, k are not used).
    proto: an array of the working dtype: the state and the matrices m, v are copies in it,
    refreshed after each redraw (drawn in float64); outputs come from a float64 copy.
    layer: (noise mode, sigma) of `sphere.noise` (sigma > 0 needs rng: the Euler-Maruyama step),
    then the normalisation (`sphere.norms` code, nGPT alpha)."""
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
    c = 0
    if ok:
        observables.record_start(x0, out, r)
        for s in range(layers):
            if period > 0 and s > 0 and s % period == 0 and redraw:
                if rng is not None:
                    draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m, scaling)
                    mw[:, :, :] = m
                    vw[:, :, :] = v
            stepped = layer[2] != 0  # a normalisation variant (`sphere.norms`): its own step
            if stepped:
                ok = normalised_step(x, radius, s * h, h, par, mats_w, ws, ls, layer[2], layer[3])
            if rng is not None:
                if layer[1] > 0.0:  # the projected Euler-Maruyama step (`sphere.noise`)
                    stepped = True
                    ok = noisy_euler_step(x, s * h, h, par, mats_w, ws, ls, stages[0], rng,
                                          layer[0], layer[1])
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
def trajectory(rng, n, d, h, layers, ckpt, times, par, integrator, init, start, kinds, q, k, v,
               tv, period, delta, eps, out, r, states, proto, layer):
    """Integrate trajectory r and fill its entries of the outputs record out.

    kinds: (q_kind, k_kind, v_kind, scaling) ensemble codes (`ensembles`). q, k, v: (H, d, d)
    fixed matrices (overwritten where drawn). tv: (amp, omega, phase) (H, d), random_frequencies. ckpt, times: (nt,).
    out: `SphereFlowOutcomes` from `outcomes.allocate_outputs`. states: (ntraj, nt, n, d)
    NaN-filled, or (ntraj, 0, n, d) to skip. proto: an array of the working dtype.
    start: (n, d), the start drawn before when init is GIVEN (else not read).
    layer: (noise mode, sigma, norm code, alpha): `sphere.noise` (drawn per step after the start,
    matrices and schedule), `sphere.norms`.
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
    _integrate(x, ok, rng, kinds, q, k, mats, h, layers, ckpt, times, par, integrator, period,
               delta, eps, out, r, states, proto, layer)


@njit(nogil=True, cache=True)
def trajectories_from_normals(z, r0, init, mats, h, layers, ckpt, times, par, integrator,
                              delta, eps, out, states, proto):
    """Trajectories r0, r0 + 1, ... of a run whose only random draw is the start: z (B, n, d) holds
    each one's n*d standard normals (row-major, as `draw_start` draws them; overwritten).
    mats: (m, v, amp, omega, phase) fixed. Fills rows r0 to r0 + B - 1 of out and states."""
    kinds = (0, 0, 0, 0)
    for b in range(z.shape[0]):
        x = z[b]
        ok = shape_start(init, x)
        _integrate(x, ok, None, kinds, mats[0], mats[0], mats, h, layers, ckpt, times, par,
                   integrator, 0, delta, eps, out, r0 + b, states, proto, (0, 0.0, 0, 0.0))


# ---------------------------------------------------------------------------------------------
# Python entry point: validate, resolve names to codes and fixed matrices, allocate, loop.

PRECISIONS = dict(zip(vocabulary.FLOW_PRECISIONS, (np.float64, np.float32)))


def simulate_sphere_flow(rngs, *, n, d, beta, T, layers, checkpoint_layers, attention="sa",
                         integrator="euler", heads=1, qk="identity", value="identity",
                         matrices=None, period=0, time_varying=None, init="uniform_sphere",
                         delta=1e-3, eps=1e-3, rst_scaling=False, return_states=False,
                         precision="float64", threads=1, x0=None, record=(),
                         record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None, noise=None,
                         sigma=0.0, value_rotation=0.0, hardmax_tol=1e-9,
                         ensemble_scaling="normalised", layer_norm="post", ngpt_alpha=0.2,
                         device="cpu"):
    """Integrate one deterministic attention flow per Generator in `rngs`; return `OUTPUTS` arrays.

    rngs: sequence of numpy Generators, one per trajectory (ntraj). h = T / layers; checkpoint c is
    the state after checkpoint_layers[c] steps, at time h * checkpoint_layers[c].
    attention: "sa", "usa", "causal_sa", "causal_usa". integrator: "euler", "heun", "rk4".
    qk: "identity", "ginibre", "goe", "wigner", "wishart"; value: those, "minus_identity" or "qk".
    matrices: optional {"Q", "K", "V"} arrays (heads, d, d) that replace the ensembles.
    period: redraw the random matrices every `period` steps (0: fixed per trajectory).
    time_varying: None, a preset name of `ensembles.TIME_VARYING`, or {"amp", "omega", "phase"
    (broadcast to (heads, d)), "absolute"}: P_h(t) = diag(amp cos(omega t + phase)) Q_h^T K_h.
    init: "uniform_sphere", "hemisphere" (of e_1), "equiangular" (needs d >= n); x0: or the
    (ntraj, n, d) starts on the sphere, drawn before from the Generators (`kernels/starts.py`).
    delta: frac_close threshold; eps: clustering threshold. rst_scaling: divide heads by sqrt(d).
    return_states: also return "states" (ntraj, nt, n, d).
    precision: "float64" or "float32", the arithmetic of the state and the drift (the starts are
    drawn in float64, the outputs computed in float64 from the state at each checkpoint).
    threads: integrate blocks of trajectories on this many threads (each trajectory's result is
    the same bits whatever the threads; BLAS runs single-threaded inside each, see `run_blocks`).
    noise: None, "independent" or "common", with strength sigma >= 0 (`sphere.noise`: projected
    Euler-Maruyama, integrator "euler" only); sigma = 0 is the deterministic run, bit for bit.
    value_rotation: omega; V_h(t) = R(t) V_h R(t)^T, R(t) the rotation by omega t in the (e_1, e_2)
    plane (0: constant V). attention "hardmax" / "causal_hardmax": the beta -> infinity limit,
    weights uniform on the keys whose logit <Q x_i, K x_j> is within hardmax_tol (1 + |max|) of
    the row's maximum (beta is not used). ensemble_scaling: "normalised" (entries N(0, 1/d)) or
    "authors" (the scaling of [GLPR-P]'s scripts for Fig. 5, `ensembles.authors_scaling`).
    layer_norm: "post" (today), "pre", "peri" or "ngpt" (with ngpt_alpha), `sphere.norms`;
    not post: integrator "euler" only, no noise; outputs are of the normalised tokens.
    x0: optional (ntraj, n, d) starts drawn before (`kernels/starts.py`). record, record_bins,
    direction: observables also returned (`observables`; "states" is return_states).
    device: "cpu" (the numba kernels), or "cuda" / "cuda:N" / a torch.device: the PyTorch path
    (`sphere.gpu`; torch.device("cpu") runs it on the CPU, for tests) of the configurations the
    symmetric path covers (Euler, SA / USA, causal or not, Q = K = I, V = +-I, one head,
    beta >= 0, nothing time-varying, noisy or turning, post-LN), refused otherwise; `threads` then
    records on that many host threads. Raises RuntimeError (`sphere.gpu.NEEDS_CUDA`) where
    CUDA is asked for and this process has no PyTorch or no CUDA GPU.
    Returns {name: array} with (ntraj, nt) per-checkpoint and (ntraj,) per-trajectory outputs.
    """
    from tokensweep.kernels.ensembles import FIXED, INIT_CODES, QK, SCALING_CODES

    ckpt = outcomes.check_common_arguments(rngs, n, d, beta, T, layers, checkpoint_layers,
                                           attention, ATTENTIONS, eps)
    n, d, layers = int(n), int(d), int(layers)
    if integrator not in INTEGRATOR_CODES:
        raise ValueError(f"integrator = {integrator!r} is unknown: use one of {tuple(INTEGRATOR_CODES)}")
    if int(heads) != heads or heads < 1:
        raise ValueError(f"heads = {heads!r}, but the number of heads must be an integer >= 1")
    if int(period) != period or period < 0:
        raise ValueError(f"period = {period!r}: use 0 (fixed matrices) or a number of steps >= 1")
    if ensemble_scaling not in SCALING_CODES:
        raise ValueError(f"ensemble_scaling = {ensemble_scaling!r} is unknown: use one of "
                         f"{tuple(SCALING_CODES)}")
    if init not in INIT_CODES:
        raise ValueError(f"init = {init!r} is unknown: use one of {tuple(INIT_CODES)}")
    if init == "equiangular" and d < n:
        raise ValueError(f"init = 'equiangular' needs d >= n orthonormal tokens, got n = {n}, d = {d}: "
                         "raise d or use init = 'uniform_sphere'")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta = {delta!r}, but the frac_close threshold needs 0 < delta < 1")
    if precision not in PRECISIONS:
        raise ValueError(f"precision = {precision!r} is unknown: use one of {tuple(PRECISIONS)}")
    if int(threads) != threads or threads < 1:
        raise ValueError(f"threads = {threads!r}, but the number of threads must be an integer >= 1")
    heads, threads, rngs = int(heads), int(threads), list(rngs)
    layer_arg = resolve_noise(noise, sigma, integrator)
    if layer_norm not in NORM_CODES:
        raise ValueError(f"layer_norm = {layer_norm!r} is unknown: use one of {tuple(NORM_CODES)}")
    if layer_norm != "post" and (integrator != "euler" or layer_arg[1] > 0.0):
        raise ValueError(f"layer_norm = {layer_norm!r} is one Euler layer per step: use "
                         "integrator = 'euler' and no noise")
    if not (np.isfinite(ngpt_alpha) and ngpt_alpha > 0.0):
        raise ValueError(f"ngpt_alpha = {ngpt_alpha!r}: give a finite alpha > 0")
    layer_arg = (*layer_arg, NORM_CODES[layer_norm], float(ngpt_alpha))
    proto = np.empty(0, PRECISIONS[precision])
    preset, tv_mode, amp, omega, phase, random_freq = resolve_time_varying(time_varying, heads, d)
    q, k, v, kinds, qk_identity, v_code = resolve_weights(heads, d, qk, value, matrices, preset)
    h = T / layers
    kind = USA if attention.endswith("usa") else HARDMAX if attention.endswith("hardmax") else SA
    if not (np.isfinite(value_rotation) and np.isfinite(hardmax_tol) and hardmax_tol >= 0.0):
        raise ValueError(f"value_rotation = {value_rotation!r} and hardmax_tol = {hardmax_tol!r} "
                         "must be finite (hardmax_tol >= 0)")
    if value_rotation != 0.0:
        v_code = V_GENERAL  # R(t) V R(t)^T: the general product, even for V = +-I
    log_scale0 = -0.5 * np.log(d) if rst_scaling else 0.0
    par = (float(beta), kind, attention.startswith("causal"), qk_identity, v_code, tv_mode,
           log_scale0, float(value_rotation), float(hardmax_tol))
    nt = ckpt.shape[0]
    ntraj = len(rngs)
    record, record_bins, direction = observables.check_record(record, record_bins, direction, d)
    out = observables.allocate(SphereFlowOutcomes, ntraj, nt, n, d, record, record_bins, direction)
    return_states = return_states or "states" in record
    states = np.full((ntraj, nt if return_states else 0, n, d), np.nan)
    times = h * ckpt.astype(np.float64)
    codes = (INTEGRATOR_CODES[integrator], INIT_CODES[init] if x0 is None else GIVEN)
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (ntraj, n, d):
            raise ValueError(f"x0 has shape {x0.shape}, expected (ntraj, n, d) = {(ntraj, n, d)}")
        if not np.all(np.abs(np.linalg.norm(x0, axis=2) - 1.0) <= 1e-12):
            raise ValueError("x0 has rows off the unit sphere: normalise them (`kernels/starts.py` does)")

    on_torch = not (isinstance(device, str) and device == "cpu")

    def starts(r0, r1):  # the block's starts: normals drawn here (`draw_start`'s), or given ones;
        # the GPU path asks for a whole device batch: drawn on its `threads` host threads
        return (start_normals(rngs, r0, r1, n, d, threads if on_torch else 1) if x0 is None
                else x0[r0:r1].copy())
    q_kind, k_kind, v_kind = kinds
    kinds = (*kinds, SCALING_CODES[ensemble_scaling])
    fixed = (q_kind == FIXED and k_kind == FIXED and v_kind in (FIXED, QK) and not random_freq
             and layer_arg[1] == 0.0 and layer_norm == "post")
    args = (h, layers, ckpt, times)
    if on_torch and not (fixed and symmetric.applies(codes[0], par, heads)):
        raise ValueError(f"device = {device!r} runs retraction Euler with SA / USA, Q = K = I, "
                         "V = +-I, one head, beta >= 0, nothing time-varying, noisy or turning, "
                         "post-LN: use device = 'cpu' for this configuration")
    if fixed and symmetric.applies(codes[0], par, heads):
        # Q = K = I, V = +-I, one head, Euler: the symmetric path (`sphere.symmetric`)
        par_t = (float(beta), kind == USA, par[2], -1.0 if v_code == V_MINUS_IDENTITY else 1.0,
                 log_scale0)
        reduce = symmetric.SPAN_REDUCTION and d > n
        if on_torch:  # the same trajectories on a torch device (`sphere.gpu`)
            from tokensweep.kernels.sphere import gpu

            def work(r0, r1):  # one call: it batches the trajectories on the device itself
                gpu.integrate(starts, ntraj, n, d, codes[1], *args, par_t, float(delta),
                                       float(eps), out, states, proto, reduce, device, threads)
        else:
            def work(r0, r1):
                symmetric.integrate_t(starts(r0, r1), r0, codes[1], *args, par_t,
                                      float(delta), float(eps), out, states, proto, reduce)
    elif fixed:
        # nothing but the start is random: draw the starts' normals here (the same numbers as
        # `draw_start`), integrate a block of trajectories per call (no per-trajectory dispatch)
        m = np.empty_like(q)
        qk_products(q, k, v, v_kind, m)
        mats = (m, v, amp, omega, phase)

        def work(r0, r1):
            trajectories_from_normals(starts(r0, r1), r0, codes[1], mats, *args,
                                      par, codes[0], float(delta), float(eps), out, states, proto)
    else:
        def work(r0, r1):
            for r in range(r0, r1):
                tv = (amp.copy(), omega.copy(), phase.copy(), random_freq)
                start = x0[r] if x0 is not None else np.empty((n, d))
                trajectory(rngs[r], n, d, *args, par, codes[0], codes[1], start, kinds, q.copy(),
                           k.copy(), v.copy(), tv, int(period), float(delta), float(eps), out,
                           r, states, proto, layer_arg)
    if on_torch:
        work(0, ntraj)
    else:
        run_blocks(ntraj, block_size(ntraj, n, d, threads, fixed), threads, work)
    return observables.returned(out, OUTPUTS, (*record, *(("states",) if return_states else ())),
                                states)
