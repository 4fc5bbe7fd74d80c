"""The GPU path of the sphere flow in PyTorch (issues 11, 26): `integrate` runs a run's
trajectories on a torch device in batches, everything but the rare host work on the device.

Per batch: the starts and the trajectories' Philox keys (`device_starts`: drawn on the device,
`gpu_starts`; or given starts uploaded), the weights where the run has any (`gpu_general`), the
steps, each checkpoint's outcomes (`gpu_outcomes`, copied to the host once per batch), and the
host's part (`gpu_host`: undecided hemisphere tests, recorded observables and states).

The step. Q = K = I, V = +-I, one head, nothing time-varying or noisy, beta >= 0 runs the
symmetric step here (`euler_step`), else `gpu_general`'s. Trajectories are a leading batch axis
(B, n, d); the symmetric step is two batched products and a dozen element-wise kernels, with no
host synchronisation between checkpoints; on CUDA every step is replayed from one captured graph
(`GraphStep`: the same kernels on the same buffers, so the same bits as the eager step; ~15 us
of launches saved per kernel). Its evaluation is the CPU kernel's: E = exp(beta (G - c)),
G = X X^T, c = max_k G_kk >= every logit (beta >= 0), so every exponential is <= 1; SA divides
by the row sums, USA carries the scale e^{shift}, shift = beta c - log n (+ log of the [RST]
1/sqrt(d)), put on the side of y = fx x + fa inc where it is <= 1 (fx = e^{-max(shift, 0)},
fa = h e^{min(shift, 0)}), so USA at large beta neither overflows nor loses the step. Where fx^2
could underflow (USA, beta - log n > 40 % of the dtype's exponent range) every y is first
divided by max_k |y_k|, as `sphere.symmetric._normalise_scaled` does for the tokens that need
it. d > n runs in the n-dimensional span of the start, as `sphere.symmetric.SPAN_REDUCTION`
(`span_basis`). Not bitwise the CPU's: products by cuBLAS, exp by CUDA, rounding ~1e-16 per
step apart; the flow contracts, so states stay ~1e-12 apart after 300 steps
(tests/test_kernel_sphere_torch.py, from the same starts).

Non-finite: a NaN, once in a state, spreads to every token of that trajectory at the next step,
so a trajectory whose state holds a non-finite number at a checkpoint stops recording there, and
its later checkpoints keep their missing values, as on the CPU.

PyTorch is imported inside the functions, never by importing this module: `import tokensweep`
and the CPU paths do not need it. `cuda_problem` says why a process cannot run device "cuda".
"""

import math

import numpy as np

from ..lowlevel.philox import blocks_for
from . import gpu_general, gpu_outcomes, gpu_starts
from .drift import EULER
from .gpu_host import Recorder, finish_rows, host_rows, observables_recorded, record_starts

NEEDS_CUDA = "device: cuda needs PyTorch with a CUDA GPU on the worker"
BATCH_ELEMENTS = 1 << 24  # trajectories per device batch: B n max(n, m) at most this (128 MB)
UNDERFLOW_FRACTION = 0.4  # robust normalisation where USA's fx^2 could underflow (docstring)


def cuda_problem():
    """Why this process cannot run device "cuda" (one line), or None where it can."""
    try:
        import torch
    except ImportError as err:
        return f"PyTorch is not installed ({err}): pip install 'tokensweep[gpu]' on the worker"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA GPU here (its CUDA: "
                f"{torch.version.cuda or 'none, a CPU-only build'}): run on a machine with an "
                "NVIDIA GPU and a CUDA build of torch, or set device: cpu")
    return None


def torch_device(device):
    """The torch.device for `device` ("cuda", "cuda:N", or a torch.device: torch.device("cpu")
    runs the path on the CPU, for tests); raises RuntimeError (`NEEDS_CUDA`: ...) where CUDA
    is asked for and this process has none."""
    if str(device).startswith("cuda"):
        problem = cuda_problem()
        if problem is not None:
            raise RuntimeError(f"{NEEDS_CUDA}: {problem}")
    import torch

    return torch.device(device)


# ---------------------------------------------------------------------------------------------
# the step, on the device


def euler_step(x, h, beta, usa, causal, sign, log_scale0, robust):
    """One retraction-Euler step of the symmetric flow for a batch x (B, n, m); returns the new
    state (x itself is not changed). usa: USA (else SA); sign: +1.0 (V = I) or -1.0 (V = -I);
    log_scale0: -log(d)/2 with the [RST] scaling, else 0; robust: divide y by max |y_k| before
    normalising (module docstring)."""
    import torch

    n = x.shape[1]
    g = torch.bmm(x, x.transpose(1, 2))
    c = torch.diagonal(g, dim1=1, dim2=2).amax(1)  # (B,): >= every logit
    e = g.sub_(c[:, None, None]).mul_(beta).exp_()  # e[i, j]: key j of query i, <= 1
    if causal:
        e = e.tril_()
    a = torch.bmm(e, x)
    if usa:  # the scale e^{shift} in float64, as the CPU kernel computes it
        shift = c.to(torch.float64) * beta + (log_scale0 - math.log(n))
        fx = torch.exp(-shift.clamp(min=0.0)).to(x.dtype)[:, None, None]
        fa = (h * torch.exp(shift.clamp(max=0.0))).to(x.dtype)[:, None, None]
        f = a
    else:
        fx, fa = 1.0, h * math.exp(min(log_scale0, 0.0))
        f = a.mul_(e.sum(2, keepdim=True).reciprocal_())
    if sign < 0.0:
        f = f.neg_()
    dot = (x * f).sum(2, keepdim=True)
    inc = torch.addcmul(f, dot, x, value=-1.0)  # f - <x, f> x
    if usa:
        y = torch.addcmul(inc.mul_(fa), x, fx)
    else:
        y = torch.add(x, inc, alpha=fa)
    if robust:
        y = y.div_(y.abs().amax(2, keepdim=True))
    y = y.mul_(torch.linalg.vector_norm(y, dim=2, keepdim=True).reciprocal_())
    if causal:  # V = +-I: A_1 = +-x_1, token 1 does not move at all
        y[:, 0] = x[:, 0]
    return y


USE_GRAPHS = True  # on CUDA, each step replays one captured graph (False: eager, for checks)


class GraphStep:
    """`euler_step` on a CUDA device as one captured CUDA graph, replayed once per step: the
    dozen kernels of a step launched together, without Python's and the launches' ~15 us each
    (at n = 32 a step's kernels take less than that). The graph reads and then overwrites one
    static state tensor, `x`; replaying it runs the same kernels on the same buffers as the
    eager step, so the states are the same bits. For `x0` of a given shape and the step's
    arguments (its Python numbers are fixed in the graph)."""

    def __init__(self, step, x0, *args):
        import torch

        self.x = x0.clone()
        side = torch.cuda.Stream()  # capture wants its warm-up off the current stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step(self.x, *args)  # a new tensor each time: x itself is not changed
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.x.copy_(step(self.x, *args))

    def __call__(self):
        self.graph.replay()
        return self.x


def needs_robust(usa, beta, n, log_scale0, dtype):
    """Can USA's fx = e^{-shift} square to below the dtype's smallest normal (c ~ 1)?"""
    import torch

    tiny_log = -math.log(torch.finfo(dtype).tiny)
    return bool(usa and beta - math.log(n) + log_scale0 > UNDERFLOW_FRACTION * tiny_log)


def span_basis(x):
    """(B, d, n) orthonormal columns spanning the rows of each x[b] (n, d), n < d, float64:
    CholeskyQR2 (two passes of q <- q L^{-T}, L L^T = q^T q: batched products, no per-matrix
    loop), and Householder QR (`torch.linalg.qr`, as the CPU's `span_basis`) for the starts
    where that fails or leaves |Q^T Q - I| > 1e-12 (nearly dependent tokens). Any orthonormal
    basis of the span gives the same outcomes (an isometry); states are mapped back by it."""
    import torch

    a = x.transpose(1, 2)
    q, bad = a, torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    for _ in range(2):
        low, info = torch.linalg.cholesky_ex(torch.bmm(q.transpose(1, 2), q))
        bad |= info != 0
        low = torch.where(bad[:, None, None], torch.eye(low.shape[1], dtype=low.dtype,
                                                        device=low.device), low)
        q = torch.linalg.solve_triangular(low, q.transpose(1, 2), upper=False).transpose(1, 2)
    eye = torch.eye(q.shape[2], dtype=q.dtype, device=q.device)
    bad |= ~((torch.bmm(q.transpose(1, 2), q) - eye).abs().flatten(1).amax(1) <= 1e-12)
    if bool(bad.any()):
        q = q.clone()
        q[bad] = torch.linalg.qr(a[bad]).Q
    return q


def integrate(starts, ntraj, n, d, h, layers, ckpt, times, par, delta, eps, out, states, proto,
              reduce, device, threads=1, batch=None, weights=None, noise=(0, 0.0),
              integrator=EULER):
    """`sphere.symmetric.integrate_t`'s configurations for trajectories 0..ntraj-1 on a torch
    device, or with `weights` (`gpu_general.Weights`) those of `gpu_general`.

    starts(r0, r1, dev): (x (r1 - r0, n, d) float64, ok (r1 - r0,) bool, keys (r1 - r0, 2) int64
    or None) on dev: the shaped starts and the trajectories' Philox keys (`device_starts`);
    par: (beta, usa, causal, sign, log_scale0); proto: an array of the working
    dtype; reduce: integrate in the span of the start (n < d; not with weights); device: for
    `torch_device`; threads: host threads for the host's part (`host_rows`); batch:
    trajectories per device batch (default: what fits BATCH_ELEMENTS, `batch_size`); noise:
    (mode, sigma) of `sphere.noise` (sigma > 0 needs weights: the projected Euler-Maruyama
    step `gpu_general.noisy_euler_step`); integrator: `sphere.drift`'s EULER, HEUN or RK4 (the
    last two need weights: `gpu_general.runge_kutta_step`). Fills out and states."""
    import torch

    dev = torch_device(device)
    beta, usa, causal, sign, log_scale0 = par
    dtype = torch.float32 if proto.dtype == np.float32 else torch.float64
    robust = needs_robust(usa, beta, n, log_scale0, dtype)
    ckpt = [int(k) for k in ckpt]
    size = int(batch or batch_size(n, d, reduce, weights, integrator))
    recorder = Recorder(max(1, int(threads)))
    finished = []
    try:
        for r0 in range(0, ntraj, size):
            x64, ok, keys = starts(r0, min(ntraj, r0 + size), dev)
            x64[~ok] = 0.0  # a degenerate start: e_1 for every token, integrated, never recorded
            x64[~ok, :, 0] = 1.0
            if out.hemisphere_margin.shape[1] > 0:
                record_starts(x64.cpu().numpy(), ok.cpu().numpy(), out, r0)
            stateful = ()  # what a step advances: the graph's warm-up must be undone
            if weights is None:
                step = (euler_step, h, beta, usa, causal, sign, log_scale0, robust)
            else:  # the matrices, then the noise, follow the start in each trajectory's stream
                m, v, schedule, block = weights.draw(keys, blocks_for(n * d), dev)
                clock = None if schedule is None else gpu_general.Clock(h, dev)
                step = (gpu_general.euler_step, m.to(dtype), None if v is None else v.to(dtype),
                        sign, h, beta, usa, causal, log_scale0, schedule, clock)
                if noise[1] > 0.0:  # Euler-Maruyama, whatever the integrator (as the CPU)
                    brownian = gpu_general.Noise(keys, n, d, *noise, block, dtype)
                    step = (gpu_general.noisy_euler_step, *step[1:], brownian)
                    stateful = (brownian,)
                elif integrator != EULER:
                    step = (gpu_general.runge_kutta_step, *step[1:], integrator)
                stateful += (clock,) if clock is not None else ()
            alive = _integrate_batch(torch, dev, dtype, x64, ok, r0, step, ckpt, par[0], delta,
                                     eps, out, states, reduce and weights is None, recorder,
                                     layers, stateful)
            finished.append((r0, alive))
    finally:
        recorder.close()
    for r0, alive in finished:
        finish_rows(alive, r0, out, times)


def batch_size(n, d, reduce, weights, integrator=EULER):
    """Trajectories per device batch: B times a trajectory's largest tensors <= BATCH_ELEMENTS
    (B n max(n, m) for the symmetric step; with weights, its H (2 d^2 + n^2 + n d), and the
    stages of Heun or RK4, 5 n d more)."""
    if weights is None:
        per = n * max(n, n if reduce else d)
    else:
        per = weights.q.shape[0] * (2 * d * d + n * n + n * d) + (5 * n * d if integrator != EULER else 0)
    return max(1, BATCH_ELEMENTS // per)


def device_starts(rngs, n, d, init, x0=None):
    """`integrate`'s starts and keys: the keys drawn from the Generators (`gpu_starts`), the
    starts drawn from them on the device, or the given x0 (ntraj, n, d) uploaded."""
    def starts(r0, r1, dev):
        import torch

        keys = torch.from_numpy(gpu_starts.generator_keys(rngs, r0, r1)).to(dev)
        if x0 is None:
            return (*gpu_starts.starts(keys, n, d, init), keys)
        ok = torch.ones(r1 - r0, dtype=torch.bool, device=dev)
        return torch.from_numpy(np.ascontiguousarray(x0[r0:r1])).to(dev), ok, keys
    return starts


def _integrate_batch(torch, dev, dtype, x64, ok, r0, step, ckpt, beta, delta, eps, out,
                     states, reduce, recorder, layers, stateful):
    """One device batch: step (the step function, then its arguments after the state), record
    each checkpoint's outcomes on the device and hand the host its part; returns the rows still
    finite at the end (numpy bool). stateful: what the step advances (`gpu_general.Noise`,
    `gpu_general.Clock`), restarted after the CUDA graph's warm-up."""
    rows, n, d = x64.shape
    basis = None
    if reduce:  # orthonormal columns spanning the start's tokens: x = y basis^T
        basis = span_basis(x64)  # (B, d, n)
        x64 = torch.bmm(x64, basis)
    x = x64.to(dtype)
    m = x.shape[2]
    found = gpu_outcomes.Outcomes(rows, len(ckpt), m, beta, delta, eps, dev)
    observe = states.shape[1] > 0 or observables_recorded(out)
    ambient = reduce and (states.shape[1] > 0 or out.hemisphere_margin.shape[1] > 0)
    memo_v = np.zeros((rows, m))
    memo_i = np.zeros((rows, m + 3), dtype=np.int64)
    no_ambient = np.empty((0, n, d))
    alive = ok.clone()
    c = 0
    step_fn, args = step[0], step[1:]
    graph = GraphStep(step_fn, x, *args) if dev.type == "cuda" and USE_GRAPHS else None
    for state in stateful:
        state.restart()  # the graph's warm-up steps drew and ticked
    for s in range(layers):
        x = graph() if graph is not None else step_fn(x, *args)
        if c < len(ckpt) and s + 1 == ckpt[c]:
            xc = x.to(torch.float64)
            alive &= torch.isfinite(xc).flatten(1).all(1)
            undecided = alive & (found.record(xc, alive, c) == gpu_outcomes.UNDECIDED)
            picked = torch.nonzero(alive if observe else undecided).flatten()
            if picked.numel() > 0:  # the host's part: only these rows cross the bus
                xs = xc[picked]
                xa = (torch.bmm(xs, basis[picked].transpose(1, 2)).cpu().numpy() if ambient
                      else no_ambient)
                job_args = (xs.cpu().numpy(), xa, picked.cpu().numpy(),
                            undecided[picked].cpu().numpy(), r0, c)

                def job(b0, b1, a=job_args):  # batch rows b0..b1-1: one thread each, in order
                    xs_, xa_, picked_, undecided_, r0_, c_ = a
                    k0, k1 = np.searchsorted(picked_, (b0, b1))
                    host_rows(xs_, xa_, picked_, undecided_, k0, k1, r0_, c_, out, states,
                              memo_v, memo_i)
                recorder.submit(job, rows)
            c += 1
    found.to_host(out, r0)
    return alive.cpu().numpy()
