"""The recorded observables of the stochastic transformer's device kernel (`stochastic.cuda`).

Plain Python over arrays and floats, compiled by `stochastic.device_steps.build(jit)` for the
device (numba.cuda.jit(device=True)) and for the CPU (numba.njit), as `device_steps`: at
checkpoint c of trajectory r, from the state x (n, d) and its overlaps g (n, n), each
observable of `vocabulary.OBSERVABLES` whose array has a t axis (shape[1] > 0: recorded) gets
`observables.observe`'s value: overlap_hist, gram, hemisphere_margin (about direction[r]),
consensus_error(_abs), energy (`sphere.checkpoints.energy`), states. After an early stop at
checkpoint c the later checkpoints repeat c's values (`observables.carry_observables`).
"""

import math


def energy(g, n, beta):
    """E_beta = (1/(2 beta n^2)) sum_ij exp(beta g_ij), shifted by max_ij beta g_ij; beta = 0:
    sum_ij g_ij / (2 n^2) (`sphere.checkpoints.energy`)."""
    if beta == 0.0:
        acc = 0.0
        for i in range(n):
            for j in range(n):
                acc += g[i, j]
        return acc / (2.0 * n * n)
    top = -math.inf
    for i in range(n):
        for j in range(n):
            top = max(top, beta * g[i, j])
    acc = 0.0
    for i in range(n):
        for j in range(n):
            acc += math.exp(beta * g[i, j] - top)
    sign = 1.0 if beta > 0.0 else -1.0
    return sign * math.exp(top + math.log(acc / (2.0 * abs(beta) * n * n)))


def make_observe(energy_fn):
    """`observe` calling the build's own `energy` (compiled code cannot call a Python function)."""
    def observe(x, g, n, d, beta, hist, gram, margin, direction, cons, cons_abs, energies, states,
                r, c):
        """Checkpoint c of trajectory r: every recorded observable (module docstring)."""
        if hist.shape[1] > 0:
            bins = hist.shape[2]
            for k in range(bins):
                hist[r, c, k] = 0
            for i in range(n):
                for j in range(i + 1, n):
                    k = int(math.floor((g[i, j] + 1.0) * 0.5 * bins))
                    hist[r, c, min(max(k, 0), bins - 1)] += 1
        if gram.shape[1] > 0:
            for i in range(n):
                for j in range(n):
                    gram[r, c, i, j] = g[i, j]
        if margin.shape[1] > 0:
            lo = math.inf
            for i in range(n):
                acc = 0.0
                for k in range(d):
                    acc += x[i, k] * direction[r, k]
                lo = min(lo, acc)
            margin[r, c] = lo
        if cons.shape[1] > 0 or cons_abs.shape[1] > 0:
            signed = 0.0
            absolute = 0.0
            for i in range(n):
                signed += g[0, i]
                absolute += abs(g[0, i])
            if cons.shape[1] > 0:
                cons[r, c] = 1.0 - signed / n
            if cons_abs.shape[1] > 0:
                cons_abs[r, c] = 1.0 - absolute / n
        if energies.shape[1] > 0:
            energies[r, c] = energy_fn(g, n, beta)
        if states.shape[1] > 0:
            for i in range(n):
                for k in range(d):
                    states[r, c, i, k] = x[i, k]
    return observe


def carry(hist, gram, margin, cons, cons_abs, energies, states, r, c_stop, nt):
    """Early stop at checkpoint c_stop: its recorded observables repeated at every later one."""
    for b in range(c_stop + 1, nt):
        if hist.shape[1] > 0:
            for k in range(hist.shape[2]):
                hist[r, b, k] = hist[r, c_stop, k]
        if gram.shape[1] > 0:
            for i in range(gram.shape[2]):
                for j in range(gram.shape[3]):
                    gram[r, b, i, j] = gram[r, c_stop, i, j]
        if margin.shape[1] > 0:
            margin[r, b] = margin[r, c_stop]
        if cons.shape[1] > 0:
            cons[r, b] = cons[r, c_stop]
        if cons_abs.shape[1] > 0:
            cons_abs[r, b] = cons_abs[r, c_stop]
        if energies.shape[1] > 0:
            energies[r, b] = energies[r, c_stop]
        if states.shape[1] > 0:
            for i in range(states.shape[2]):
                for k in range(states.shape[3]):
                    states[r, b, i, k] = states[r, c_stop, i, k]


def build(jit):
    """observe and carry compiled by `jit` (numba.njit or numba.cuda.jit(device=True))."""
    return jit(make_observe(jit(energy))), jit(carry)
