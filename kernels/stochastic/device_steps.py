"""One trajectory of the deep stochastic transformer as device code (`stochastic.cuda`).

The model and the scheme are the CPU kernel's (`stochastic.general`, docs/models.md 4.1): tokens
start i.i.d. uniform on S^{d-1}; each layer x_i <- N(x_i + sqrt(h) e^{c_i} s dir_i), with the
attention direction Ahat_i and log-scale c_i of `attention.attention` (sa, usa, causal_sa;
Q = K = I), and dir_i = sum_k R[k, i] W[k] (the Householder R of A = [Ahat_1 .. Ahat_n], W r x d
standard normals: the exact Gaussian shortcut) or V Ahat_i (V d x d entries of the value law: the
literal path). The scale e^{c_i} goes on the side where it is <= 1, as `attention.scaled_step`.
Outcomes at each checkpoint as `outcomes.record_overlaps` (overlap min / max, class, clusters by
union-find); early stopping and t_hit as `outcomes`. Only the random numbers differ: Philox
blocks keyed by (seed, cell) with the trajectory in the counter (`lowlevel.philox`), the start
from blocks 0.., then each layer's normals (or uniforms) from the next blocks in order.
Noise code SCALAR (one normal per layer shared by the tokens) runs the hybrid noise model instead (docs/models.md 5, `kernels/hybrid.py`):
x_i <- N(x_i + (h + sigma sqrt(h) xi_k) e^{c_i} Ahat_i), xi_k the first normal of one block per
layer, sigma passed as s.

Everything is plain Python over scalars and arrays, built by `build(jit)` into device functions
(numba.cuda.jit(device=True)) or CPU functions (numba.njit) from the same source; the caller
gives each trajectory its work arrays (local arrays on the device). A trajectory is run by
`width` lanes sharing those arrays (one thread: lane 0 of width 1; a warp: 32): each per-token
step takes the tokens i = lane, lane + width, ..., the serial ones (the Householder R, the
outcomes) run on lane 0, with the build's barrier `sync` between phases; every number is
computed by the same expression whatever the width. Sums run in the CPU kernel's
orders where that was simple, but the device's exp, log and sqrt and its fused multiply-adds
are not libm's, so results agree with the CPU kernel in law, not bit for bit.
"""

import math
from types import SimpleNamespace

from ..lowlevel import philox
from . import device_observables

SA, USA, CAUSAL_SA = 0, 1, 2  # = attention.ATTENTION_CODES
GAUSSIAN, LITERAL = 0, 1  # noise codes, as `stochastic.general`
SCALAR = 2  # the hybrid model (docs/models.md 5): one normal xi per layer, s = sigma
UNRESOLVED, SINGLE, ANTIPODAL = 0, 1, 2  # = vocabulary's cluster classes


def normalize(x, i, d):
    """x_i <- x_i / |x_i| (as `attention.normalize_row`); False if non-finite or zero."""
    norm2 = 0.0
    for k in range(d):
        norm2 += x[i, k] * x[i, k]
    if norm2 == math.inf or norm2 == 0.0:
        big = 0.0
        for k in range(d):
            big = max(big, abs(x[i, k]))
        if not (big > 0.0 and big < math.inf):
            return False
        norm2 = 0.0
        for k in range(d):
            x[i, k] /= big
            norm2 += x[i, k] * x[i, k]
    norm = math.sqrt(norm2)
    if not (norm < math.inf):
        return False
    inv = 1.0 / norm
    for k in range(d):
        x[i, k] *= inv
    return True


def gram(x, g, n, d, lane, width):
    """g = x x^T; lane of width: the rows i = lane, lane + width, ... (and their mirrors)."""
    for i in range(lane, n, width):
        for j in range(i, n):
            acc = 0.0
            for k in range(d):
                acc += x[i, k] * x[j, k]
            g[i, j] = acc
            g[j, i] = acc


def attention(x, g, a, logscale, n, d, beta, att, lane, width):
    """Ahat_i into a[i] and c_i into logscale[i], as `attention.attention` (rows of this lane)."""
    log_n = math.log(n)
    for i in range(lane, n, width):
        jmax = i + 1 if att == CAUSAL_SA else n
        mi = -math.inf
        for j in range(jmax):
            if beta * g[i, j] > mi:
                mi = beta * g[i, j]
        for k in range(d):
            a[i, k] = 0.0
        total = 0.0
        for j in range(jmax):
            e = beta * g[i, j] - mi
            w = 1.0 if e == 0.0 else math.exp(e)
            total += w
            for k in range(d):
                a[i, k] += w * x[j, k]
        if att == USA:
            logscale[i] = mi - log_n
        else:
            inv = 1.0 / total
            for k in range(d):
                a[i, k] *= inv
            logscale[i] = 0.0


def householder_r(a, rf, n, d):
    """R (r x n, r = min(n, d)) of the Householder QR of A = a.T, LAPACK signs; a overwritten."""
    r = min(n, d)
    for k in range(r):
        alpha = a[k, k]
        xnorm2 = 0.0
        for i in range(k + 1, d):
            xnorm2 += a[k, i] * a[k, i]
        if xnorm2 == 0.0:
            rf[k, k] = alpha
        else:
            beta_k = -math.copysign(math.sqrt(alpha * alpha + xnorm2), alpha)
            u0 = alpha - beta_k
            a[k, k] = u0
            unorm2 = u0 * u0 + xnorm2
            for j in range(k + 1, n):
                dot = 0.0
                for i in range(k, d):
                    dot += a[k, i] * a[j, i]
                f = 2.0 * dot / unorm2
                for i in range(k, d):
                    a[j, i] -= f * a[k, i]
            rf[k, k] = beta_k
        for j in range(k + 1, n):
            rf[k, j] = a[j, k]


def gaussian_values(rf, buf, out, n, d, s, lane, width):
    """out[i] = s sum_{k <= min(i, r - 1)} R[k, i] W[k], W = buf (r, d) row-major (this lane's i)."""
    r = min(n, d)
    for i in range(lane, n, width):
        for c in range(d):
            acc = 0.0
            for k in range(min(i + 1, r)):
                acc += (s * rf[k, i]) * buf[k * d + c]
            out[i, c] = acc


def literal_values(buf, a, out, n, d, s, lane, width):
    """out[i] = s V Ahat_i, V = buf (d, d) row-major (this lane's i)."""
    for i in range(lane, n, width):
        for c in range(d):
            acc = 0.0
            for b in range(d):
                acc += buf[c * d + b] * a[i, b]
            out[i, c] = s * acc


def record(g, parent, n, eps, omin, omax, cls, ncl, r, c):
    """Checkpoint c of trajectory r from the overlaps g, as `outcomes.record_overlaps`."""
    lo, hi, lo_abs = 1.0, 1.0, 1.0
    if n >= 2:
        lo, hi, lo_abs = math.inf, -math.inf, math.inf
        for i in range(n):
            for j in range(i + 1, n):
                v = g[i, j]
                lo = min(lo, v)
                hi = max(hi, v)
                lo_abs = min(lo_abs, abs(v))
    omin[r, c] = lo
    omax[r, c] = hi
    if lo >= 1.0 - eps:
        cls[r, c] = SINGLE
    elif lo_abs >= 1.0 - eps and lo <= -1.0 + eps:
        cls[r, c] = ANTIPODAL
    else:
        cls[r, c] = UNRESOLVED
    for i in range(n):
        parent[i] = i
    count = n
    for i in range(n):
        for j in range(i + 1, n):
            if g[i, j] >= 1.0 - eps:
                ri = i
                while parent[ri] != ri:
                    parent[ri] = parent[parent[ri]]
                    ri = parent[ri]
                rj = j
                while parent[rj] != rj:
                    parent[rj] = parent[parent[rj]]
                    rj = parent[rj]
                if ri != rj:
                    parent[rj] = ri
                    count -= 1
    ncl[r, c] = count


def resolved_for(cls, r, c, window):
    """`outcomes.resolved_for` on the class array."""
    if window < 1 or c + 1 < window:
        return False
    last = cls[r, c]
    if last == UNRESOLVED:
        return False
    for b in range(c - window + 1, c):
        if cls[r, b] != last:
            return False
    return True


def finish(ok, times, omin, omax, cls, ncl, thit, nonfin, r, c_stop):
    """Carry an early stop's checkpoint c_stop (-1: none) forward; nonfinite and t_hit."""
    nt = times.shape[0]
    if c_stop >= 0:
        for b in range(c_stop + 1, nt):
            omin[r, b] = omin[r, c_stop]
            omax[r, b] = omax[r, c_stop]
            cls[r, b] = cls[r, c_stop]
            ncl[r, b] = ncl[r, c_stop]
    nonfin[r] = not ok
    if ok:
        final = cls[r, nt - 1]
        if final == UNRESOLVED:
            thit[r] = math.nan
        else:
            c = nt - 1
            while c > 0 and cls[r, c - 1] == final:
                c -= 1
            thit[r] = times[c]


def make_trajectory(fill, normalize, gram, attention, householder_r, gaussian_values,
                    literal_values, step, record, resolved_for, finish, observe, carry, sync,
                    all_ok):
    def trajectory(x, a, direction, g, rf, buf, logscale, parent, n, d, att, noise, law, k0, k1,
                   traj, beta, s, h, sqrt_h, layers, ckpt, times, eps, window, omin, omax, cls,
                   ncl, thit, nonfin, hist, gram_o, margin, towards, cons, cons_abs, energies,
                   states, r, lane, width):
        """Trajectory `traj` (its Philox counter) into row r of the outputs and of the
        recorded observables (`device_observables`; towards: the hemisphere directions), by
        `width` lanes sharing the work arrays (this one: `lane`; module docstring)."""
        block = fill(buf, n * d, 0, k0, k1, traj, 0, lane, width)
        sync()
        ok = True
        for i in range(lane, n, width):
            for k in range(d):
                x[i, k] = buf[i * d + k]
            if ok:
                ok = normalize(x, i, d)
        ok = all_ok(ok)
        per_layer = min(n, d) * d if noise == GAUSSIAN else (1 if noise == SCALAR else d * d)
        c = 0
        c_stop = -1
        for layer in range(layers):
            if not ok:
                break
            block = fill(buf, per_layer, law, k0, k1, traj, block, lane, width)
            gram(x, g, n, d, lane, width)
            sync()
            attention(x, g, a, logscale, n, d, beta, att, lane, width)
            sync()
            if noise == SCALAR:
                ok = step(x, a, logscale, n, d, h + s * sqrt_h * buf[0], lane, width)
            else:
                if noise == GAUSSIAN:
                    if lane == 0:  # serial: one lane, the others wait
                        householder_r(a, rf, n, d)
                    sync()
                    gaussian_values(rf, buf, direction, n, d, s, lane, width)
                else:
                    literal_values(buf, a, direction, n, d, s, lane, width)
                ok = step(x, direction, logscale, n, d, sqrt_h, lane, width)
            ok = all_ok(ok)  # every token stepped before anything reads x or buf again
            if ok and layer + 1 == ckpt[c]:
                gram(x, g, n, d, lane, width)
                sync()
                if lane == 0:
                    record(g, parent, n, eps, omin, omax, cls, ncl, r, c)
                    observe(x, g, n, d, beta, hist, gram_o, margin, towards, cons, cons_abs,
                            energies, states, r, c)
                sync()
                if resolved_for(cls, r, c, window):
                    c_stop = c
                    break
                c += 1
        if lane == 0:
            finish(ok, times, omin, omax, cls, ncl, thit, nonfin, r, c_stop)
            if c_stop >= 0:
                carry(hist, gram_o, margin, cons, cons_abs, energies, states, r, c_stop,
                      times.shape[0])
    return trajectory


def serial_sync():
    """The barrier of one lane: nothing to wait for."""


def serial_all(ok):
    """`all_ok` of one lane: its own."""
    return ok


def build(jit, sync=None, all_ok=None):
    """The trajectory and its parts compiled by `jit` (numba.njit or cuda.jit(device=True));
    sync(), all_ok(ok): the lanes' barrier and their and-reduction (itself a barrier), compiled
    already (one lane by default: `serial_sync`, `serial_all`)."""
    gen = philox.build(jit)
    parts = dict(normalize=jit(normalize), gram=jit(gram), attention=jit(attention),
                 householder_r=jit(householder_r), gaussian_values=jit(gaussian_values),
                 literal_values=jit(literal_values), record=jit(record),
                 resolved_for=jit(resolved_for), finish=jit(finish),
                 **dict(zip(("observe", "carry"), device_observables.build(jit))))
    parts["step"] = jit(make_step(parts["normalize"]))
    trajectory = jit(make_trajectory(gen.fill, **parts, sync=sync or jit(serial_sync),
                                     all_ok=all_ok or jit(serial_all)))
    return SimpleNamespace(gen=gen, trajectory=trajectory, **parts)


def make_step(normalize_fn):
    """x_i <- N(x_i + coef e^{c_i} direction_i) for this lane's tokens, as
    `attention.scaled_step`; False on failure. Calls the build's own `normalize` (compiled code
    cannot call a Python function)."""
    def step_built(x, direction, logscale, n, d, coef, lane, width):
        for i in range(lane, n, width):
            c = logscale[i]
            fx = 1.0
            fa = coef
            if c > 0.0:
                fx = math.exp(-c)
            elif c < 0.0:
                fa = coef * math.exp(c)
            for k in range(d):
                x[i, k] = fx * x[i, k] + fa * direction[i, k]
        for i in range(lane, n, width):
            if not normalize_fn(x, i, d):
                return False
        return True
    return step_built
