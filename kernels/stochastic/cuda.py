"""The deep stochastic transformer on an NVIDIA GPU (numba-cuda): one thread per trajectory.

`simulate_stochastic_cuda(key, trajectories, ...)` (and `simulate_hybrid_cuda`, the hybrid
model) runs the device build of `stochastic.device_steps` (the CPU kernels' models and schemes,
docs/models.md 4.6): each thread
integrates one trajectory in local arrays (x, Ahat, the noise direction, overlaps, R, the layer's
draws) and writes its outcomes (overlap min / max, class, cluster count per checkpoint; t_hit,
nonfinite), so only those cross the bus. Its random numbers are Philox blocks keyed by the cell
(`lowlevel.philox.device_key`) with the trajectory index in the counter, so a trajectory's
numbers do not depend on the batch, the launch or the GPU.

target="cpu" runs the same source compiled by numba.njit on the host, one trajectory after
another: the same numbers up to the device's own exp / log / sqrt and fused multiply-adds, and
exactly those of the device build run by numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1, set
before numba.cuda is first imported), which is how the tests check the device code without a
GPU. `device_ready()` says whether a launch can run here (a GPU, or the simulator).

Sizes: n from 1 to MAX_TOKENS, d from 2 to MAX_DIM (local arrays have compile-time shapes: one
kernel per size class, n and d rounded up to powers of two, `cuda_kernel.capacity`). Options:
attention sa / usa / causal_sa, noise gaussian / literal, value laws gaussian / rademacher /
uniform (literal noise), early stopping, the recorded observables (`device_observables`; a
hemisphere direction from the start is computed on the host from the start's Philox normals).
Not on the device: Q, K other than the identity, scheme sde, given starts (the spec refuses
them with `device: cuda`).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

from .. import vocabulary
from . import device_steps

MAX_TOKENS = 32
MAX_DIM = 64
THREADS_PER_BLOCK = 64
LAYOUTS = ("auto", "thread", "warp")
# where "auto" takes a warp per trajectory: a first guess (no GPU has measured the two yet;
# benchmarks/bench_cuda.py times both): 8+ tokens in states of 512+ numbers
WARP_MIN_TOKENS = 8
WARP_MIN_ELEMENTS = 512
ATTENTION_CODES = {"sa": device_steps.SA, "usa": device_steps.USA,
                   "causal_sa": device_steps.CAUSAL_SA}
# gaussian, literal: the value matrices' noise; scalar: one normal per layer shared by the tokens,
# scaling the attention step ([F26] (7), the hybrid model)
NOISE_CODES = {"gaussian": device_steps.GAUSSIAN, "literal": device_steps.LITERAL,
               "scalar": device_steps.SCALAR}
LAW_CODES = {"gaussian": 0, "rademacher": 1, "uniform": 2}  # = lowlevel.philox.fill's laws
SIMULATOR_ENV = vocabulary.SIMULATOR_ENV

__all__ = ["MAX_DIM", "MAX_TOKENS", "device_ready", "simulate_hybrid_cuda", "simulate_stochastic_cuda"]


def device_ready() -> str | None:
    """None if a `device: cuda` run can start here, else one line saying what to do."""
    if importlib.util.find_spec("numba_cuda") is None:
        return ("device: cuda needs numba-cuda: pip install 'numba-cuda[cu12]' (or [cu13]) on a "
                "machine with an NVIDIA GPU, or set device: cpu")
    if os.environ.get(SIMULATOR_ENV) == "1":
        return None
    from numba import cuda

    if cuda.is_available():
        return None
    return ("device: cuda but no CUDA GPU is visible here: run on a GPU machine, set device: cpu, "
            f"or set {SIMULATOR_ENV}=1 for numba-cuda's (slow) simulator")


@functools.cache
def _cpu_loop():
    from numba import njit

    parts = device_steps.build(njit)
    trajectory = parts.trajectory

    def loop(n, d, att, noise, law, k0, k1, trajs, beta, s, h, sqrt_h, layers, ckpt, times, eps,
             window, omin, omax, cls, ncl, thit, nonfin, hist, gram, margin, towards, cons,
             cons_abs, energies, states):
        size = max(n * d, d * d) + 1
        for r in range(trajs.shape[0]):
            trajectory(np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, n)),
                       np.zeros((n, n)), np.empty(size), np.empty(n), np.empty(n, np.int64),
                       n, d, att, noise, law, k0, k1, trajs[r], beta, s, h, sqrt_h, layers, ckpt,
                       times, eps, window, omin, omax, cls, ncl, thit, nonfin, hist, gram,
                       margin, towards, cons, cons_abs, energies, states, r, 0, 1)

    return njit(loop)


# the record's arrays in the kernels' argument order: outputs, then the observables
KERNEL_ARRAYS = ("overlap_min", "overlap_max", "cluster_class", "n_clusters", "t_hit", "nonfinite",
                 "overlap_hist", "gram", "hemisphere_margin", "direction", "consensus_error",
                 "consensus_error_abs", "energy")


def layout_for(n, d):
    """The layout "auto" picks: a warp per trajectory from WARP_MIN_TOKENS tokens and
    WARP_MIN_ELEMENTS numbers n d per state (where a thread's local arrays outgrow its cache),
    else a thread."""
    return "warp" if n >= WARP_MIN_TOKENS and n * d >= WARP_MIN_ELEMENTS else "thread"


def _launch(layout, n, d, args, trajs, scalars, ckpt, times, eps, window, arrays):
    """Run the device kernel of `layout` on trajs, filling the host arrays."""
    from numba import cuda

    from .cuda_kernel import WARP, capacity, device_kernel, warp_kernel

    on_device = [cuda.to_device(a) for a in arrays]
    common = (n, d, *args, cuda.to_device(trajs), *scalars, cuda.to_device(ckpt),
              cuda.to_device(times), eps, window, *on_device)
    if layout == "thread":
        blocks = (trajs.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        device_kernel(capacity(n, 2), capacity(d, 4))[blocks, THREADS_PER_BLOCK](*common)
    else:
        b = trajs.size
        work = [np.empty((b, n, d)), np.empty((b, n, d)), np.empty((b, n, d)),
                np.empty((b, n, n)), np.zeros((b, n, n)), np.empty((b, max(n * d, d * d) + 1)),
                np.empty((b, n)), np.empty((b, n), np.int64)]
        warp_kernel()[b, WARP](*common, *(cuda.to_device(w) for w in work))
    for host, dev in zip(arrays, on_device):
        dev.copy_to_host(host)


def start_directions(key, trajs, n, d, out):
    """Each trajectory's hemisphere direction from its start (`observables.start_direction`),
    where hemisphere_margin is recorded about no given direction: the start's normals by the
    numpy Philox (`philox.normals_numpy`: the device's numbers, to rounding), normalised."""
    from .. import observables
    from ..lowlevel.philox import normals_numpy

    if out.hemisphere_margin.shape[1] == 0:
        return
    for r, traj in enumerate(trajs):
        if np.isnan(out.direction[r, 0]):
            x = normals_numpy(key, int(traj), 0, n * d).reshape(n, d)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            observables.start_direction(x, out.direction[r])


def simulate_stochastic_cuda(key, trajectories, *, n, d, beta, value_std=1.0, T, layers,
                             checkpoint_layers, attention="sa", noise="gaussian",
                             value_law="gaussian", eps=1e-3, stop_when_resolved=False,
                             resolved_window=2, record=(),
                             record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None,
                             target="cuda", layout="auto"):
    """Outputs of trajectories `trajectories` (int indices, the Philox counter's) of one cell.

    key: (k0, k1), the cell's Philox key (`lowlevel.philox.device_key`). Returns the arrays of
    `vocabulary.STOCHASTIC_OUTPUTS` and the observables in `record` (over record_bins bins,
    about `direction` or each start's own) as the CPU kernel does. target: "cuda" (a GPU, or
    numba-cuda's simulator) or "cpu" (the same source by numba.njit on the host). layout:
    "thread" (one thread per trajectory), "warp" (one warp), or "auto" (`layout_for`): the
    same numbers either way. noise="scalar" runs the hybrid model with sigma = value_std
    (`simulate_hybrid_cuda`).
    """
    from .. import observables
    from ..outcomes import SphereOutcomes

    n, d, layers = int(n), int(d), int(layers)
    if not 1 <= n <= MAX_TOKENS:
        raise ValueError(f"n = {n}: the device kernel takes 1 to {MAX_TOKENS} tokens")
    if not 2 <= d <= MAX_DIM:
        raise ValueError(f"d = {d}: the device kernel takes d from 2 to {MAX_DIM}")
    if value_law != "gaussian" and noise == "gaussian":
        raise ValueError(f"value_law = {value_law!r} needs noise = 'literal'")
    if target not in ("cuda", "cpu"):
        raise ValueError(f"target = {target!r}: use 'cuda' or 'cpu'")
    if layout not in LAYOUTS:
        raise ValueError(f"layout = {layout!r}: use one of {LAYOUTS}")
    ckpt = np.asarray(checkpoint_layers, dtype=np.int64).ravel()
    if ckpt.size == 0 or ckpt[-1] != layers or np.any(np.diff(ckpt) <= 0) or ckpt[0] < 1:
        raise ValueError(f"checkpoint_layers = {ckpt}: sorted, unique, in 1..layers, ending at layers")
    record, record_bins, direction = observables.check_record(record, record_bins, direction, d)
    trajs = np.asarray(trajectories, dtype=np.int64).ravel()
    h = float(T) / layers
    times = h * ckpt.astype(np.float64)
    window = int(resolved_window) if stop_when_resolved else 0
    out = observables.allocate(SphereOutcomes, trajs.size, ckpt.size, n, d, record,
                               record_bins, direction)
    states = np.full((trajs.size, ckpt.size if "states" in record else 0, n, d), np.nan)
    k0, k1 = (int(k) for k in key)
    start_directions((k0, k1), trajs, n, d, out)
    args = (ATTENTION_CODES[attention], NOISE_CODES[noise], LAW_CODES[value_law], k0, k1)
    scalars = (float(beta), float(value_std), h, float(np.sqrt(h)), layers)
    arrays = [getattr(out, name) for name in KERNEL_ARRAYS] + [states]
    if trajs.size > 0 and target == "cpu":
        _cpu_loop()(n, d, *args, trajs, *scalars, ckpt, times, float(eps), window, *arrays)
    elif trajs.size > 0:
        _launch(layout_for(n, d) if layout == "auto" else layout, n, d, args, trajs, scalars, ckpt,
                times, float(eps), window, arrays)
    return observables.returned(out, vocabulary.STOCHASTIC_OUTPUTS, record, states)


def simulate_hybrid_cuda(key, trajectories, *, n, d, beta, sigma, T, layers, checkpoint_layers,
                         attention="sa", eps=1e-3, stop_when_resolved=False, resolved_window=2,
                         record=(), record_bins=vocabulary.DEFAULT_RECORD_BINS, direction=None,
                         target="cuda", layout="auto"):
    """The hybrid noise model (docs/models.md 5) on the device: as `simulate_stochastic_cuda`."""
    if not (np.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma = {sigma!r}, but the noise level must be finite and >= 0")
    return simulate_stochastic_cuda(
        key, trajectories, n=n, d=d, beta=beta, value_std=float(sigma), T=T, layers=layers,
        checkpoint_layers=checkpoint_layers, attention=attention, noise="scalar", eps=eps,
        stop_when_resolved=stop_when_resolved, resolved_window=resolved_window, record=record,
        record_bins=record_bins, direction=direction, target=target, layout=layout)
