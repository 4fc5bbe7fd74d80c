"""What the R^d flow records at a checkpoint (`flow.OUTPUTS`, docs/models.md section 3): the
cluster count of z at a threshold, the spread max_i |E z_i| and log D, the Boolean defect of the
first head's attention (formulas in `flow`'s docstring), computed from the logits, never from P.
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from ..outcomes import union
from .schemes import project


@njit(nogil=True, cache=True)
def all_finite(z):
    """Are all entries of z finite?"""
    for x in z.ravel():
        if not np.isfinite(x):
            return False
    return True


@njit(nogil=True, cache=True)
def count_clusters_dist(z, thr):
    """Components of the graph on the rows of z (n, d) with an edge where |z_i - z_j| <= thr."""
    n, d = z.shape
    parent = np.arange(n)
    count = n
    thr2 = thr * thr
    for i in range(n):
        for j in range(i + 1, n):
            dist2 = 0.0
            for a in range(d):
                diff = z[i, a] - z[j, a]
                dist2 += diff * diff
            if dist2 <= thr2:
                count -= union(parent, i, j)
    return count


@njit(nogil=True, cache=True)
def initial_radius(z):
    """max_i |z_i - mean_j z_j| for z (n, d); 1.0 when it is 0 (single token, coincident start)."""
    n, d = z.shape
    mean = np.zeros(d)
    for i in range(n):
        for a in range(d):
            mean[a] += z[i, a] / n
    r2 = 0.0
    for i in range(n):
        acc = 0.0
        for a in range(d):
            diff = z[i, a] - mean[a]
            acc += diff * diff
        r2 = max(r2, acc)
    return np.sqrt(r2) if r2 > 0.0 else 1.0


@njit(nogil=True, cache=True)
def log_boolean_defect(z, qe, ke, beta, qz, kz, row):
    """log D of the attention matrix of z (n, d) with logits beta <QE z_i, KE z_j> (module
    docstring): the second largest over rows of log(1 - max_j P_ij); -inf when n = 1.
    qe, ke: (d, d) of one head; qz, kz: (n, d) and row: (n,) work arrays."""
    n, d = z.shape
    if n < 2:
        return -np.inf
    project(z, qe, ke, qz, kz)
    first = -np.inf  # the largest and second largest log delta_i so far
    second = -np.inf
    for i in range(n):
        lead = 0
        for j in range(n):
            acc = 0.0
            for a in range(d):
                acc += qz[i, a] * kz[j, a]
            row[j] = beta * acc
            if row[j] > row[lead]:
                lead = j
        m = row[lead]
        m2 = -np.inf
        for j in range(n):
            if j != lead and row[j] > m2:
                m2 = row[j]
        off = 0.0
        total = 0.0
        for j in range(n):
            total += np.exp(row[j] - m)
            if j != lead:
                off += np.exp(row[j] - m2)
        value = (m2 - m) + np.log(off) - np.log(total)
        if np.isnan(value):  # logits overflowed (e^{tV} too large): no defect to report
            return np.nan
        if value > first:
            second = first
            first = value
        elif value > second:
            second = value
    return second


@njit(nogil=True, cache=True)
def record(z, frame, beta, thr, out, r, c, work):
    """Checkpoint c of trajectory r with state z (n, d) in `frame` (E, QE, KE, M), into the record
    out: n_clusters of z, spread = max_i |E z_i|, log_boolean_defect of the first head's P
    (work: `allocate_work`'s arrays, qz, kz and row used)."""
    e = frame[0]
    out.log_boolean_defect[r, c] = log_boolean_defect(z, frame[1][0], frame[2][0], beta, work[0],
                                                      work[1], work[8])
    n, d = z.shape
    out.n_clusters[r, c] = count_clusters_dist(z, thr)
    s2 = 0.0
    for i in range(n):
        acc = 0.0
        for a in range(d):
            xa = 0.0
            for b in range(d):
                xa += e[a, b] * z[i, b]
            acc += xa * xa
        s2 = max(s2, acc)
    out.spread[r, c] = np.sqrt(s2)
