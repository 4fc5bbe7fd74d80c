"""The options of a sphere-flow run, checked and resolved before any numba call.

`SphereFlowOptions` (a frozen dataclass) declares what `flow.simulate_sphere_flow` accepts, with
its defaults; `resolve` checks the options in a fixed order, one message per bad value (it names
the option, echoes the value and says how to fix it), and turns names into the codes, matrices
and records the kernels take: `Steps`, the numba record every trajectory of a run shares, in
place of ten separate arguments of each kernel.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np

from .. import observables, outcomes, vocabulary
from ..ensembles import GIVEN
from .arguments import resolve_time_varying, resolve_weights
from .drift import EULER, HARDMAX, HEUN, RK4, SA, USA, V_GENERAL
from .noise import resolve_noise
from .norms import NORM_CODES

ATTENTIONS = vocabulary.SPHERE_FLOW_ATTENTIONS
INTEGRATOR_CODES = dict(zip(vocabulary.SPHERE_FLOW_INTEGRATORS, (EULER, HEUN, RK4)))
PRECISIONS = dict(zip(vocabulary.FLOW_PRECISIONS, (np.float64, np.float32)))


class Steps(NamedTuple):
    """What every trajectory of a run shares, as one record of the numba kernels (`flow`).

    h: the step T / layers; layers: the number of steps; ckpt (nt,) int64: the checkpoints'
    step counts; times (nt,): their times; par: (beta, kind, causal, qk_identity, v_code,
    tv_mode, log_scale0, value_rotation, hardmax_tol) of `drift`; integrator: EULER, HEUN or
    RK4; period: steps between redraws of the random matrices (0: never); delta, eps: the
    frac_close and clustering thresholds; layer: (noise mode, sigma, norm code, nGPT alpha) of
    `noise` and `norms`.
    """

    h: float
    layers: int
    ckpt: np.ndarray
    times: np.ndarray
    par: tuple
    integrator: int
    period: int
    delta: float
    eps: float
    layer: tuple


@dataclass(frozen=True)
class SphereFlowOptions:
    """The options of `flow.simulate_sphere_flow` (its keywords), with their defaults.

    h = T / layers; checkpoint c is the state after checkpoint_layers[c] steps, at time
    h * checkpoint_layers[c].
    attention: "sa", "usa", "causal_sa", "causal_usa". integrator: "euler", "heun", "rk4".
    qk: "identity", "ginibre", "goe", "wigner", "wishart"; value: those, "minus_identity" or "qk".
    matrices: optional {"Q", "K", "V"} arrays (heads, d, d) that replace the ensembles.
    period: redraw the random matrices every `period` steps (0: fixed per trajectory).
    time_varying: None, a preset name of `ensembles.TIME_VARYING`, or {"amp", "omega", "phase"
    (broadcast to (heads, d)), "absolute"}: P_h(t) = diag(amp cos(omega t + phase)) Q_h^T K_h.
    init: "uniform_sphere", "hemisphere" (of e_1), "equiangular" (needs d >= n).
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
    record, record_bins, direction: observables also returned (`observables`; "states" is
    return_states).
    device: "cpu" (the numba kernels), or "cuda" / "cuda:N" / a torch.device: the PyTorch path
    (`sphere.gpu`; torch.device("cpu") runs it on the CPU, for tests) of the Euler
    configurations (SA / USA, causal or not, weights drawn once or given, any heads,
    time_varying, noise, post-LN; not hardmax, period or value_rotation, refused otherwise), its
    own random streams; `threads` then runs the host's part (`sphere.gpu_host`) on that many
    host threads. Raises RuntimeError (`sphere.gpu.NEEDS_CUDA`) where CUDA is asked for and this
    process has no PyTorch or no CUDA GPU.
    """

    n: int
    d: int
    beta: float
    T: float
    layers: int
    checkpoint_layers: Any
    attention: str = "sa"
    integrator: str = "euler"
    heads: int = 1
    qk: str = "identity"
    value: str = "identity"
    matrices: Optional[dict] = None
    period: int = 0
    time_varying: Any = None
    init: str = "uniform_sphere"
    delta: float = 1e-3
    eps: float = 1e-3
    rst_scaling: bool = False
    return_states: bool = False
    precision: str = "float64"
    threads: int = 1
    record: tuple = ()
    record_bins: int = vocabulary.DEFAULT_RECORD_BINS
    direction: Any = None
    noise: Optional[str] = None
    sigma: float = 0.0
    value_rotation: float = 0.0
    hardmax_tol: float = 1e-9
    ensemble_scaling: str = "normalised"
    layer_norm: str = "post"
    ngpt_alpha: float = 0.2
    device: Any = "cpu"

    def resolve(self, rngs, x0):
        """Check every option (and rngs, x0) and resolve them: a `Run`."""
        from ..ensembles import FIXED, INIT_CODES, QK, SCALING_CODES

        o = self
        ckpt = outcomes.check_common_arguments(rngs, o.n, o.d, o.beta, o.T, o.layers,
                                               o.checkpoint_layers, o.attention, ATTENTIONS, o.eps)
        n, d, layers = int(o.n), int(o.d), int(o.layers)
        integrator, heads, period, threads = o.integrator, o.heads, o.period, o.threads
        if integrator not in INTEGRATOR_CODES:
            raise ValueError(f"integrator = {integrator!r} is unknown: use one of {tuple(INTEGRATOR_CODES)}")
        if int(heads) != heads or heads < 1:
            raise ValueError(f"heads = {heads!r}, but the number of heads must be an integer >= 1")
        if int(period) != period or period < 0:
            raise ValueError(f"period = {period!r}: use 0 (fixed matrices) or a number of steps >= 1")
        if o.ensemble_scaling not in SCALING_CODES:
            raise ValueError(f"ensemble_scaling = {o.ensemble_scaling!r} is unknown: use one of "
                             f"{tuple(SCALING_CODES)}")
        if o.init not in INIT_CODES:
            raise ValueError(f"init = {o.init!r} is unknown: use one of {tuple(INIT_CODES)}")
        if o.init == "equiangular" and d < n:
            raise ValueError(f"init = 'equiangular' needs d >= n orthonormal tokens, got n = {n}, d = {d}: "
                             "raise d or use init = 'uniform_sphere'")
        if not (0.0 < o.delta < 1.0):
            raise ValueError(f"delta = {o.delta!r}, but the frac_close threshold needs 0 < delta < 1")
        if o.precision not in PRECISIONS:
            raise ValueError(f"precision = {o.precision!r} is unknown: use one of {tuple(PRECISIONS)}")
        if int(threads) != threads or threads < 1:
            raise ValueError(f"threads = {threads!r}, but the number of threads must be an integer >= 1")
        heads, threads, rngs = int(heads), int(threads), list(rngs)
        layer_arg = resolve_noise(o.noise, o.sigma, integrator)
        if o.layer_norm not in NORM_CODES:
            raise ValueError(f"layer_norm = {o.layer_norm!r} is unknown: use one of {tuple(NORM_CODES)}")
        if o.layer_norm != "post" and (integrator != "euler" or layer_arg[1] > 0.0):
            raise ValueError(f"layer_norm = {o.layer_norm!r} is one Euler layer per step: use "
                             "integrator = 'euler' and no noise")
        if not (np.isfinite(o.ngpt_alpha) and o.ngpt_alpha > 0.0):
            raise ValueError(f"ngpt_alpha = {o.ngpt_alpha!r}: give a finite alpha > 0")
        layer_arg = (*layer_arg, NORM_CODES[o.layer_norm], float(o.ngpt_alpha))
        proto = np.empty(0, PRECISIONS[o.precision])
        preset, tv_mode, amp, omega, phase, random_freq = resolve_time_varying(o.time_varying, heads, d)
        q, k, v, kinds, qk_identity, v_code = resolve_weights(heads, d, o.qk, o.value, o.matrices, preset)
        h = o.T / layers
        attention = o.attention
        kind = USA if attention.endswith("usa") else HARDMAX if attention.endswith("hardmax") else SA
        if not (np.isfinite(o.value_rotation) and np.isfinite(o.hardmax_tol) and o.hardmax_tol >= 0.0):
            raise ValueError(f"value_rotation = {o.value_rotation!r} and hardmax_tol = {o.hardmax_tol!r} "
                             "must be finite (hardmax_tol >= 0)")
        if o.value_rotation != 0.0:
            v_code = V_GENERAL  # R(t) V R(t)^T: the general product, even for V = +-I
        log_scale0 = -0.5 * np.log(d) if o.rst_scaling else 0.0
        par = (float(o.beta), kind, attention.startswith("causal"), qk_identity, v_code, tv_mode,
               log_scale0, float(o.value_rotation), float(o.hardmax_tol))
        record, record_bins, direction = observables.check_record(o.record, o.record_bins, o.direction, d)
        times = h * ckpt.astype(np.float64)
        init = INIT_CODES[o.init] if x0 is None else GIVEN
        if x0 is not None:
            x0 = np.asarray(x0, dtype=np.float64)
            if x0.shape != (len(rngs), n, d):
                raise ValueError(f"x0 has shape {x0.shape}, expected (ntraj, n, d) = {(len(rngs), n, d)}")
            if not np.all(np.abs(np.linalg.norm(x0, axis=2) - 1.0) <= 1e-12):
                raise ValueError("x0 has rows off the unit sphere: normalise them (`kernels/starts.py` does)")
        q_kind, k_kind, v_kind = kinds
        fixed = (q_kind == FIXED and k_kind == FIXED and v_kind in (FIXED, QK) and not random_freq
                 and layer_arg[1] == 0.0 and o.layer_norm == "post")
        steps = Steps(h, layers, ckpt, times, par, INTEGRATOR_CODES[integrator], int(period),
                      float(o.delta), float(o.eps), layer_arg)
        return Run(rngs, x0, n, d, heads, threads, init, steps, proto, (*kinds, SCALING_CODES[o.ensemble_scaling]),
                   q, k, v, (amp, omega, phase, random_freq), fixed, record, record_bins, direction,
                   o.return_states or "states" in record)


@dataclass(frozen=True)
class Run:
    """A run's options resolved (`SphereFlowOptions.resolve`): the Generators (a list) and the
    checked starts x0 (or None); init: the start's code (GIVEN with x0); steps: `Steps`; proto: an
    empty array of the working dtype; kinds: (q_kind, k_kind, v_kind, scaling) ensemble codes;
    q, k, v: (H, d, d) fixed parts; tv: (amp, omega, phase, random_frequencies); fixed: nothing
    but the start is random; record, record_bins, direction: the observables; return_states."""

    rngs: list
    x0: Optional[np.ndarray]
    n: int
    d: int
    heads: int
    threads: int
    init: int
    steps: Steps
    proto: np.ndarray
    kinds: tuple
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    tv: tuple
    fixed: bool
    record: tuple
    record_bins: Any
    direction: Any
    return_states: bool
