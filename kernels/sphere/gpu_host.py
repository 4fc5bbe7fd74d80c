"""The host's part of the sphere flow's GPU path (`sphere.gpu`): what no batched tensor code
decides, on host threads while the device steps on.

At a checkpoint the device hands over only the rows it needs the host for: the trajectories
whose hemisphere test no cheap certificate settled (`gpu_outcomes`; Wolfe's algorithm here, with
each trajectory's memory), and, where `record` asks for observables or states, every live row
(`observables.record_observables`). `Recorder` runs those jobs on `threads` single-thread pools,
each owning a fixed range of the batch's rows, so a trajectory's checkpoints are recorded in
order by one thread (its hemisphere memory runs along it). At the end `finish_rows` sets each
trajectory's nonfinite and t_hit from its classes.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    observables,
    outcomes,
)
from ..hemisphere import hemisphere_test
from .gpu_outcomes import HEMISPHERE_TOL

PENDING = 4  # checkpoints handed to the host and not yet recorded, at most (host memory)


@njit(nogil=True, cache=True)
def record_starts(z, ok, out, r0):
    """Trajectory r0 + b's hemisphere direction from its start z[b] (`observables.record_start`;
    only where `hemisphere_margin` is recorded)."""
    for b in range(z.shape[0]):
        if ok[b]:
            observables.record_start(z[b], out, r0 + b)


@njit(nogil=True, cache=True)
def host_rows(xs, xa, rows, undecided, k0, k1, r0, c, out, states, memo_v, memo_i):
    """Checkpoint c's host part for the rows xs[k] (n, m) float64, k0 <= k < k1, of batch rows
    rows[k] (trajectories r0 + rows[k]): in_hemisphere by Wolfe's algorithm where undecided[k]
    (with the trajectory's memory memo_v, memo_i: `memory(m)`), and the recorded observables and
    states where asked (xa (K, n, d): the ambient states, or (0, n, d): xs is ambient)."""
    n = xs.shape[1]
    g = np.empty((n, n))
    observe = states.shape[1] > 0 or observables_recorded(out)
    for k in range(k0, k1):
        b = rows[k]
        r = r0 + b
        x = xs[k]
        if undecided[k]:
            out.in_hemisphere[r, c] = hemisphere_test(x, HEMISPHERE_TOL, memo_v[b], memo_i[b])
        if observe:
            ambient = xa[k] if xa.shape[0] > 0 else x
            outcomes.gram(x, g)
            observables.record_observables(ambient, g, out, r, c)
            if states.shape[1] > 0:
                states[r, c] = ambient


@njit(nogil=True, cache=True)
def observables_recorded(out):
    return (out.overlap_hist.shape[1] > 0 or out.gram.shape[1] > 0
            or out.hemisphere_margin.shape[1] > 0 or out.consensus_error.shape[1] > 0
            or out.consensus_error_abs.shape[1] > 0)


@njit(nogil=True, cache=True)
def finish_rows(alive, r0, out, times):
    for b in range(alive.shape[0]):
        outcomes.finish_trajectory(out, r0 + b, alive[b], times)


class Recorder:
    """Records checkpoints on `threads` host threads while the device integrates on: the batch's
    rows split into one group per thread, each group's checkpoints recorded in order on its own
    single-thread pool (the hemisphere memory runs along a trajectory)."""

    def __init__(self, threads):
        self.pools = [ThreadPoolExecutor(1) for _ in range(threads)]
        self.pending = []

    def submit(self, job, rows):
        bounds = np.linspace(0, rows, len(self.pools) + 1).astype(int)
        futures = [pool.submit(job, int(b0), int(b1))
                   for pool, b0, b1 in zip(self.pools, bounds[:-1], bounds[1:]) if b1 > b0]
        self.pending.append(futures)
        while len(self.pending) > PENDING:
            self.wait_oldest()

    def wait_oldest(self):
        for future in self.pending.pop(0):
            future.result()

    def close(self):
        try:
            while self.pending:
                self.wait_oldest()
        finally:
            for pool in self.pools:
                pool.shutdown()
