"""The sphere flow's GPU path with general weights (issue 26 item 2): random or given Q, K, V per
trajectory, several heads, a time-varying bilinear form, noise, drawn and stepped on the device in
PyTorch.

Covers retraction Euler, Heun and RK4 for SA / USA, causal or not, any heads, any `qk` / `value` ensemble
(`ensembles`: ginibre, goe, wigner, wishart, value "qk") in either `ensemble_scaling`, given
`matrices`, `time_varying` (P_h(t) = D_h(t) Q_h^T K_h, random frequencies included), noise
(`sphere.noise`), the [RST] 1/sqrt(d), post-LN, matrices drawn once (period 0), V not turning:
what [GLPR-P] Fig. 5 and [RST]'s examples need. (Q = K = I, V = +-I, one head, nothing else
runs `sphere.gpu.euler_step`, the symmetric step.)

Draws: after its start's blocks (`gpu_starts`), a trajectory's Philox stream gives, in the order
of `ensembles.draw_weights` (head 0, 1, ...: Q if drawn, K if drawn, V if drawn), each matrix's
normals from the next unused block (`philox.fill`'s layout), shaped as `ensembles.draw_matrix`
(G = normals / sqrt(d); GOE (G + G^T) / sqrt 2; Wigner: d(d+1)/2 normals over a <= b, row-major;
Wishart G^T G), then M = Q^T K, V = M for "qk", and `ensembles.authors_scaling`'s factors;
then random frequencies (per head: omega, d uniforms; phase, 2 pi times d uniforms), then each
step's noise.

The step is `sphere.drift.euler_step`'s, batched (B trajectories, H heads): logits
beta x_i^T M_h x_j minus each row's maximum (every exponential <= 1), causal keys masked, SA
normalised by the row sums, USA scaled by e^{max - log n}; heads combined in log-scale; each
token's scale put on the side of x_i + h e^{ls_i} inc_i where it is <= 1; a token whose
increment is exactly 0 stays bitwise (V = +-I causal: token 1).
"""

import math

from ..ensembles import AUTHORS, FIXED, GINIBRE, GOE, QK, WIGNER, WISHART
from ..lowlevel.philox import blocks_for
from . import gpu_starts
from .drift import HARDMAX, HEUN, TV_ABS_COS, TV_NONE
from .noise import INDEPENDENT
from .norms import NORM_CODES


def covers(run):
    """Does this path cover the resolved run (`options.Run`)? Euler (with or without noise),
    Heun or RK4, not hardmax, weights not redrawn, V not turning, post-LN."""
    s = run.steps
    return (s.par[1] != HARDMAX and s.par[7] == 0.0 and s.period == 0
            and s.layer[2] == NORM_CODES["post"])


def normals_per_draw(kind, d):
    return d * (d + 1) // 2 if kind == WIGNER else d * d


def matrix(z, kind, d):
    """`ensembles.draw_matrix` of normals z (B, count) float64: (B, d, d)."""
    import torch

    s = 1.0 / math.sqrt(d)
    if kind == WIGNER:
        a, b = torch.triu_indices(d, d, device=z.device)
        out = torch.zeros(z.shape[0], d, d, dtype=z.dtype, device=z.device)
        out[:, a, b] = s * z
        out[:, b, a] = s * z
        return out
    g = z.view(-1, d, d) * s
    if kind == GINIBRE:
        return g
    if kind == GOE:
        return (g + g.transpose(1, 2)) * (1.0 / math.sqrt(2.0))
    if kind == WISHART:
        return torch.bmm(g.transpose(1, 2), g)
    raise ValueError(f"ensemble code {kind} is not a matrix ensemble")


class Weights:
    """A run's weights: q, k, v (H, d, d) fixed parts (numpy), kinds (q_kind, k_kind, v_kind,
    scaling) ensemble codes (`ensembles`); general_value False: V = +-I (no V is drawn or
    multiplied). `draw` gives a batch's M = Q^T K and V on the device."""

    def __init__(self, q, k, v, kinds, general_value, tv_mode=TV_NONE, tv=None):
        self.q, self.k, self.v = q, k, v
        self.q_kind, self.k_kind, self.v_kind, self.scaling = (int(c) for c in kinds)
        self.general_value = bool(general_value)
        self.tv_mode = int(tv_mode)
        self.tv = tv  # (amp, omega, phase (H, d), random_frequencies) of `options.Run`

    def draw(self, keys, first, device):
        """(m, v, schedule, next): m and v (B or 1, H, d, d) float64 on device (1: the same for
        every trajectory, broadcast; v None: V = +-I),
        trajectory b's from keys[b] (a (B, 2) int64 tensor), its matrices from block `first`
        on, then (random frequencies) per head omega (d uniforms), phase (2 pi times d
        uniforms), as `ensembles.draw_frequencies`; `next` the first block they leave unused;
        fixed ones broadcast (not copied). schedule: None, or `Schedule` of the time-varying
        P_h(t) = D_h(t) Q_h^T K_h."""
        import torch

        heads, d = self.q.shape[0], self.q.shape[1]
        fixed = {name: torch.from_numpy(getattr(self, name)).to(device) for name in "qkv"}
        mats = {name: [] for name in "qkv"}
        block = first
        for h in range(heads):
            for name, kind in (("q", self.q_kind), ("k", self.k_kind), ("v", self.v_kind)):
                if kind in (FIXED, QK):  # (1, d, d): every trajectory's, by broadcasting
                    mats[name].append(fixed[name][h][None])
                    continue
                count = normals_per_draw(kind, d)
                mats[name].append(matrix(gpu_starts.normals(keys, count, block), kind, d))
                block += blocks_for(count)
        q, k, v = (torch.stack(mats[name], dim=1) for name in "qkv")
        m = torch.matmul(q.transpose(2, 3), k)
        if self.v_kind == QK:
            v = m
        if self.scaling == AUTHORS:  # `ensembles.authors_scaling`
            r = math.sqrt(d)
            norm_v = math.sqrt(d + 1.0) if self.k_kind == GOE else r
            if self.k_kind != FIXED:
                m = m * r
                if self.v_kind == QK:
                    v = m.transpose(2, 3) / norm_v
            if self.v_kind not in (FIXED, QK):
                v = v * r
        schedule = None
        if self.tv_mode != TV_NONE:
            amp, omega, phase, random_frequencies = (
                torch.from_numpy(a).to(device)[None, :, None, :] if i < 3 else a
                for i, a in enumerate(self.tv))
            if random_frequencies:
                drawn = []
                for _ in range(2 * heads):
                    drawn.append(gpu_starts.uniforms(keys, d, block))
                    block += blocks_for(d)
                omega = torch.stack(drawn[0::2], dim=1)[:, :, None, :]
                phase = (2.0 * math.pi) * torch.stack(drawn[1::2], dim=1)[:, :, None, :]
            schedule = Schedule(amp, omega, phase, self.tv_mode == TV_ABS_COS)
        return m, (v if self.general_value else None), schedule, block


class Schedule:
    """D_h(t) = diag(amp cos(omega t + phase)) (|.| if absolute), each (B or 1, H, 1, d)."""

    def __init__(self, amp, omega, phase, absolute):
        self.amp, self.omega, self.phase, self.absolute = amp, omega, phase, absolute

    def at(self, t):
        import torch

        dt = self.amp * torch.cos(self.omega * t + self.phase)
        return dt.abs() if self.absolute else dt


class Clock:
    """The step count of a batch, a device tensor advanced by each step (so a step replayed
    from a CUDA graph reads the time of its own step): t = count h, the CPU's s h."""

    def __init__(self, h, device):
        import torch

        self.h = h
        self.count = torch.zeros((), dtype=torch.int64, device=device)

    def restart(self):
        self.count.zero_()

    def time(self):
        import torch

        return self.count.to(torch.float64) * self.h

    def tick(self):
        self.count.add_(1)


def drift(x, m, v, sign, beta, usa, causal, log_scale0, schedule=None, t=None):
    """(inc, ls): the tangent drift of a batch x (B, n, d) as e^{ls_i} inc_i, inc (B, n, d),
    ls (B, n, 1) (`sphere.drift.drift`), with M = Q^T K per trajectory and head (B or 1, H, d, d)
    and V likewise, or v None: V = sign I exactly (then token 1's inc is 0 when causal);
    schedule (a `Schedule`): P_h(t) = D_h(t) M_h at time t (a 0-d tensor)."""
    import torch

    n = x.shape[1]
    heads = m.shape[1]
    xh = x[:, None]  # (B, 1, n, d)
    left = xh if schedule is None else xh * schedule.at(t).to(x.dtype)  # x_i^T D(t)
    logits = torch.matmul(torch.matmul(left, m), xh.transpose(2, 3)).mul_(beta)  # (B, H, n, n)
    if causal:
        mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu_(1)
        logits = logits.masked_fill_(mask, -math.inf)
    top = logits.amax(3, keepdim=True)  # (B, H, n, 1)
    e = logits.sub_(top).exp_()
    a = torch.matmul(e, xh)  # (B, H, n, d)
    if usa:
        lsh = top[..., 0] + (log_scale0 - math.log(n))  # (B, H, n)
    else:
        a = a / e.sum(3, keepdim=True)
        lsh = torch.full(top.shape[:3], log_scale0, dtype=x.dtype, device=x.device)
    if v is not None:
        a = torch.matmul(a, v.transpose(2, 3))  # V_h a_i in rows
    elif sign < 0.0:
        a = -a
    ls = lsh.amax(1)  # (B, n): heads combined in log-scale
    f = (torch.exp(lsh - ls[:, None])[..., None] * a).sum(1) if heads > 1 else a[:, 0]
    inc = f - (x * f).sum(2, keepdim=True) * x
    if causal and v is None:  # V = +-I: A_1 = +-x_1, token 1 does not move at all
        inc[:, 0] = 0.0
    return inc, ls[..., None]


def _drift_now(x, m, v, sign, beta, usa, causal, log_scale0, schedule, clock):
    """`drift` at the clock's time, and the clock advanced (clock None: not time-varying)."""
    if clock is None:
        return drift(x, m, v, sign, beta, usa, causal, log_scale0)
    found = drift(x, m, v, sign, beta, usa, causal, log_scale0, schedule, clock.time())
    clock.tick()
    return found


def euler_step(x, m, v, sign, h, beta, usa, causal, log_scale0, schedule=None, clock=None):
    """One retraction-Euler step of a batch x (B, n, d) (`drift`'s arguments; clock: a
    `Clock`, with a schedule); returns the new state (x itself is not changed)."""
    import torch

    inc, ls = _drift_now(x, m, v, sign, beta, usa, causal, log_scale0, schedule, clock)
    fx = torch.exp(-ls.clamp(min=0.0))  # the scale e^{ls} on the side where it is <= 1
    fa = h * torch.exp(ls.clamp(max=0.0))
    return retract(x, fx * x + fa * inc, inc)


def retract(x, y, inc):
    """Each token's y / |y| (y divided by max |y_k| first where |y|^2 underflows), or x itself
    where its increment inc is exactly 0 (the token stays bitwise): `sphere.drift.retract`."""
    import torch

    norm2 = (y * y).sum(2, keepdim=True)
    y = torch.where(norm2 >= torch.finfo(x.dtype).tiny, y, y / y.abs().amax(2, keepdim=True))
    y = y * torch.linalg.vector_norm(y, dim=2, keepdim=True).reciprocal()
    return torch.where((inc == 0).all(2, keepdim=True), x, y)


def runge_kutta_step(x, m, v, sign, h, beta, usa, causal, log_scale0, schedule=None, clock=None,
                     integrator=HEUN):
    """One Heun or classical RK4 step of a batch x (B, n, d) (`euler_step`'s arguments), as
    `sphere.drift.step`: stages of the scaled drift k = e^{ls} inc at t, t + h/2, t + h, then
    x_i <- N(x_i + c (sum of b_s k_s)_i) (`sphere.drift.retract` with ls = 0); a token whose sum
    is exactly 0 stays bitwise. Returns the new state (x itself is not changed)."""
    import torch

    t = None if clock is None else clock.time()

    def field(y, offset):
        inc, ls = drift(y, m, v, sign, beta, usa, causal, log_scale0, schedule,
                        None if t is None else t + offset)
        return inc * torch.exp(ls)

    k1 = field(x, 0.0)
    if integrator == HEUN:
        k2 = field(x + h * k1, h)
        total, coef = k1 + k2, 0.5 * h
    else:
        k2 = field(x + 0.5 * h * k1, 0.5 * h)
        k3 = field(x + 0.5 * h * k2, 0.5 * h)
        k4 = field(x + h * k3, h)
        total, coef = k1 + 2.0 * k2 + 2.0 * k3 + k4, h / 6.0
    if clock is not None:
        clock.tick()
    return retract(x, x + coef * total, total)


class Noise:
    """The Brownian increments of `sphere.noise` from each trajectory's Philox stream: at step s,
    n d normals (independent, row-major) or d (common: one xi for every token) from block
    first + s blocks_for(count) on. `block` is a device tensor advanced by each draw, so a step
    replayed from a CUDA graph draws the next step's numbers."""

    def __init__(self, keys, n, d, mode, sigma, first, dtype):
        import torch

        self.keys, self.n, self.d, self.sigma, self.dtype = keys, n, d, float(sigma), dtype
        self.count = n * d if mode == INDEPENDENT else d
        self.first = first
        self.block = torch.full((), first, dtype=torch.int64, device=keys.device)

    def restart(self):
        self.block.fill_(self.first)

    def draw(self):
        z = gpu_starts.normals(self.keys, self.count, self.block).to(self.dtype)
        self.block.add_(blocks_for(self.count))
        return z.view(z.shape[0], -1, self.d)  # (B, n, d) or (B, 1, d)


def noisy_euler_step(x, m, v, sign, h, beta, usa, causal, log_scale0, schedule, clock, noise):
    """`sphere.noise.noisy_euler_step` of a batch: x <- N(x + h F + sigma sqrt(h) P_x xi), F the
    drift e^{ls} inc (`euler_step`'s arguments), xi from `noise` (a `Noise`); a token whose
    |y|^2 is 0, below the dtype's tiny or not finite turns NaN (its trajectory stops, as on
    the CPU)."""
    import torch

    inc, ls = _drift_now(x, m, v, sign, beta, usa, causal, log_scale0, schedule, clock)
    xi = noise.draw()
    y = x + h * torch.exp(ls) * inc + (noise.sigma * math.sqrt(h)) * (
        xi - (x * xi).sum(2, keepdim=True) * x)
    norm2 = (y * y).sum(2, keepdim=True)
    ok = (norm2 >= torch.finfo(x.dtype).tiny) & torch.isfinite(norm2)
    return torch.where(ok, y * norm2.rsqrt(), math.nan)
