"""Observables over time, recorded on request (`vocabulary.OBSERVABLES`, docs/models.md section 10).

For unit tokens x_1..x_n with overlaps G_ij = <x_i, x_j>, at each checkpoint:

- overlap_hist (bin): counts of the pairs i < j with G_ij in each of `bins` equal bins of
  [-1, 1]; bin k = floor((G + 1) / 2 * bins), the last bin closed on the right, an overlap that
  rounding puts outside [-1, 1] counted in the end bin. Each row sums to n (n - 1) / 2;
- gram (i, j): G itself; states (token, component): x (the kernels' states array);
- hemisphere_margin: min_i <x_i, v> ([RST] Fig. 3 plots 1 - this, their Lyapunov function (10)).
  v is `direction` when given (normalised), else the max-margin direction of the start: v = p/|p|
  with p the point of conv{x_i(0)} nearest 0 (Wolfe's algorithm), which maximises min_i <x_i, v>
  over unit v, so the start's margin is |p| > 0 when it lies in an open hemisphere. A start that
  does not (0 in the hull) has no such direction: v is then its normalised mean (e_1 if 0);
- consensus_error: 1 - (1/n) sum_i <x_1, x_i> ([RST] Eq. (25), Fig. 4), and consensus_error_abs:
  1 - (1/n) sum_i |<x_1, x_i>|, which also vanishes on antipodal configurations;
- energy: E_beta = (1/(2 beta n^2)) sum_ij exp(beta G_ij) (`sphere.checkpoints.energy`; the sphere
  flow records it always).

A kernel's record holds one array per observable, allocated (ntraj, 0, ...) when not asked for
(`allocate`), so each record function tests a size and skips: a run that records nothing extra
does the same work as before, plus these tests once per checkpoint. Adding an observable: declare
it in `vocabulary.OBSERVABLES`, write it in `record_observables`, carry it in `carry_observables`.
"""

import numpy as np
from numba import njit

from . import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    vocabulary,
)
from .hemisphere import minor_cycles
from .outcomes import RECORD_FIELDS, allocate_outputs  # noqa: F401  (RECORD_FIELDS re-exported)
from .sphere.checkpoints import energy

OBSERVABLES = vocabulary.OBSERVABLES
RECORD_NAMES = vocabulary.RECORD_NAMES


@njit(nogil=True, cache=True)
def min_norm_point(x, p):
    """p (d,) <- the point of conv{x_i} nearest 0 (Wolfe's major cycles from x_0, with the minor
    cycles of `hemisphere`); returns |p|. x: (n, d)."""
    n, d = x.shape
    cap = d + 2
    idx = np.empty(cap, dtype=np.int64)
    lam = np.empty(cap)
    alpha = np.empty(cap)
    gram = np.empty((cap + 1, cap + 2))
    idx[0], lam[0], k = 0, 1.0, 1
    for _ in range(50 * (n + d)):
        p[:] = 0.0
        for a in range(k):
            p += lam[a] * x[idx[a]]
        pp = np.dot(p, p)
        if pp <= 1e-24:
            break
        best, lo = 0, np.inf
        for i in range(n):
            v = np.dot(x[i], p)
            if v < lo:
                best, lo = i, v
        if lo >= pp - 1e-13 or k == cap:
            break  # optimal: every x_i is on the far side of the plane through p normal to p
        known = False
        for a in range(k):
            known = known or idx[a] == best
        if known:
            break  # no progress possible at this precision
        idx[k], lam[k] = best, 0.0
        k = minor_cycles(x, idx, lam, alpha, gram, k + 1)
        if k < 1:
            break
    return np.sqrt(np.dot(p, p))


@njit(nogil=True, cache=True)
def start_direction(x, v):
    """v (d,) <- the max-margin direction of the start x (n, d), or its fallback (docstring)."""
    norm = min_norm_point(x, v)
    if norm <= 1e-12:  # 0 in the hull: no open hemisphere holds the start
        v[:] = 0.0
        for i in range(x.shape[0]):
            v += x[i]
        norm = np.sqrt(np.dot(v, v))
        if norm == 0.0:
            v[0], norm = 1.0, 1.0
    v /= norm


@njit(nogil=True, cache=True)
def record_start(x, out, r):
    """Trajectory r starts at x (n, d): set its hemisphere direction unless given or not asked."""
    if out.hemisphere_margin.shape[1] > 0 and np.isnan(out.direction[r, 0]):
        start_direction(x, out.direction[r])


@njit(nogil=True, cache=True)
def overlap_histogram(g, counts):
    """counts (bins,) <- the histogram of g[i, j], i < j, over equal bins of [-1, 1]."""
    bins = counts.shape[0]
    counts[:] = 0
    n = g.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            k = int(np.floor((g[i, j] + 1.0) * 0.5 * bins))
            counts[min(max(k, 0), bins - 1)] += 1


@njit(nogil=True, cache=True)
def record_observables(x, g, out, r, c):
    """Every observable asked for (but energy) at checkpoint c of trajectory r, from its state
    x (n, d) and overlaps g (n, n)."""
    n = g.shape[0]
    if out.overlap_hist.shape[1] > 0:
        overlap_histogram(g, out.overlap_hist[r, c])
    if out.gram.shape[1] > 0:
        out.gram[r, c] = g
    if out.hemisphere_margin.shape[1] > 0:
        v = out.direction[r]
        lo = np.inf
        for i in range(n):
            lo = min(lo, np.dot(x[i], v))
        out.hemisphere_margin[r, c] = lo
    if out.consensus_error.shape[1] > 0 or out.consensus_error_abs.shape[1] > 0:
        signed = 0.0
        absolute = 0.0
        for i in range(n):
            signed += g[0, i]
            absolute += abs(g[0, i])
        if out.consensus_error.shape[1] > 0:
            out.consensus_error[r, c] = 1.0 - signed / n
        if out.consensus_error_abs.shape[1] > 0:
            out.consensus_error_abs[r, c] = 1.0 - absolute / n


@njit(nogil=True, cache=True)
def observe(x, g, beta, out, r, c):
    """`record_observables` and, when asked for, the energy (models that do not record it)."""
    record_observables(x, g, out, r, c)
    if out.energy.shape[1] > 0:
        out.energy[r, c] = energy(g, beta)


@njit(nogil=True, cache=True)
def carry_observables(out, r, c):
    """Early stop after checkpoint c: repeat trajectory r's observables at every later one."""
    for b in range(c + 1, out.cluster_class.shape[1]):
        if out.overlap_hist.shape[1] > 0:
            out.overlap_hist[r, b] = out.overlap_hist[r, c]
        if out.gram.shape[1] > 0:
            out.gram[r, b] = out.gram[r, c]
        if out.hemisphere_margin.shape[1] > 0:
            out.hemisphere_margin[r, b] = out.hemisphere_margin[r, c]
        if out.consensus_error.shape[1] > 0:
            out.consensus_error[r, b] = out.consensus_error[r, c]
        if out.consensus_error_abs.shape[1] > 0:
            out.consensus_error_abs[r, b] = out.consensus_error_abs[r, c]
        if out.energy.shape[1] > 0:
            out.energy[r, b] = out.energy[r, c]


# ---------------------------------------------------------------------------------------------
# Python side: check the request, allocate the record, return what was asked for


def check_record(record, bins, direction, d):
    """Validate a kernel's `record` request; return (names tuple, bins, direction or None)."""
    record = tuple(record or ())
    unknown = [name for name in record if name not in RECORD_NAMES]
    if unknown:
        raise ValueError(f"record = {record!r} has unknown names {unknown}: "
                         f"use some of {RECORD_NAMES}")
    if int(bins) != bins or bins < 1:
        raise ValueError(f"record_bins = {bins!r}, but the histogram needs an integer >= 1 bins")
    if direction is not None:
        direction = np.asarray(direction, dtype=np.float64).ravel()
        norm = np.sqrt(direction @ direction) if direction.shape == (d,) else 0.0
        if not (np.isfinite(norm) and norm > 0):
            raise ValueError(f"direction = {direction!r}, but hemisphere_margin needs a finite, "
                             f"nonzero vector of length d = {d}")
        direction = direction / norm
    return record, int(bins), direction


def allocate(record_cls, ntraj, nt, n, d, record=(), bins=vocabulary.DEFAULT_RECORD_BINS,
             direction=None):
    """The outputs record of a kernel (`outcomes.allocate_outputs`) with the observables in
    `record` sized and the others empty; direction: given v (d,), or None (from the start)."""
    sizes = {"bin": bins, "i": n, "j": n, "component": d}
    out = allocate_outputs(ntraj, nt, record_cls, sizes=sizes, recorded=record)
    if direction is not None:
        out.direction[:] = direction
    return out


def returned(out, outputs, record, states=None):
    """{name: array} of a kernel's default `outputs` and the observables in `record` (states:
    the kernel's states array, returned as "states" when asked for)."""
    names = [*outputs, *(name for name in record if name not in outputs and name != "states")]
    result = {name: getattr(out, name) for name in names}
    if "states" in record:
        result["states"] = states
    return result
