"""Per-checkpoint outcomes of the sphere flow (`sphere.flow.OUTPUTS`, docs/models.md section 2.3).

Besides the shared ones of `outcomes` (overlap extremes, cluster class and count):
- frac_close: fraction of pairs i < j with <x_i, x_j> >= 1 - delta ([GLPR-P] Fig. 3; 1 if n = 1);
- energy: E_beta = (1/(2 beta n^2)) sum_ij exp(beta <x_i, x_j>), evaluated as
  exp(shift + log(...)), inf only if the value itself exceeds float64; for beta = 0 the limit of
  E_beta - 1/(2 beta), (1/(2 n^2)) sum_ij <x_i, x_j> = |mean x|^2 / 2;
- in_hemisphere: are the tokens in an open hemisphere (`hemisphere.in_open_hemisphere`; along a
  trajectory with the memory `hemisphere_test` keeps: `memory(d)`, reset per trajectory).

`record` takes the state as rows x (n, d), `record_t` in the transposed layout xt (d, n) of
`sphere.symmetric` (float64 or float32); both compute the overlaps with the serial-in-k sums of
`outcomes.gram` (`gram_t`: the same bits, vectorised over j), so they return the same outputs.
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    outcomes,
)
from ..hemisphere import hemisphere_test
from ..lowlevel.vecmath import exp_unclamped, exp_vec


@njit(nogil=True, cache=True)
def frac_close(g, delta):
    """Fraction of pairs i < j with g[i, j] >= 1 - delta; 1 when n = 1. g: (n, n) overlaps."""
    n = g.shape[0]
    if n < 2:
        return 1.0
    count = 0
    for i in range(n):
        gi = g[i]
        for j in range(i + 1, n):
            count += gi[j] >= 1.0 - delta
    return count / (n * (n - 1) / 2)


@njit(nogil=True, cache=True)
def energy(g, beta):
    """E_beta = (1/(2 beta n^2)) sum_ij exp(beta g_ij), shifted for range; beta = 0: the limit of
    E_beta - 1/(2 beta), sum_ij g_ij / (2 n^2). g: (n, n) overlaps."""
    n = g.shape[0]
    gmin = np.inf
    gmax = -np.inf
    for i in range(n):
        for j in range(n):
            gmin = min(gmin, g[i, j])
            gmax = max(gmax, g[i, j])
    return _energy(g, beta, gmin, gmax)


@njit(nogil=True, cache=True)
def _energy(g, beta, gmin, gmax):
    """`energy` given gmin, gmax: the extremes of g over all (i, j), the diagonal included."""
    n = g.shape[0]
    if beta == 0.0:
        acc = 0.0
        for i in range(n):
            for j in range(n):
                acc += g[i, j]
        return acc / (2.0 * n * n)
    # max_ij beta g_ij is beta times an extreme of g (rounding is monotone), likewise the min
    top, bottom = (beta * gmax, beta * gmin) if beta > 0.0 else (beta * gmin, beta * gmax)
    col = np.zeros(n)  # column sums (vectorised over j), then their serial sum
    if bottom - top >= -700.0:  # every argument in [-700, 0]: the clamp of exp_vec cannot act
        for i in range(n):
            gi = g[i]
            for j in range(n):
                col[j] += exp_unclamped(beta * gi[j] - top)
    else:
        for i in range(n):
            gi = g[i]
            for j in range(n):
                col[j] += exp_vec(beta * gi[j] - top)
    acc = 0.0
    for j in range(n):
        acc += col[j]
    return np.sign(beta) * np.exp(top + np.log(acc / (2.0 * abs(beta) * n * n)))


@njit(nogil=True, cache=True)
def pair_statistics(g, eps, delta):
    """(overlap min, max, min |.|, n_clusters, frac_close) of the overlaps g (n, n) over the pairs
    i < j: the values of `outcomes.overlap_extremes`, `outcomes.count_clusters` and `frac_close`.

    g is exactly symmetric (`gram_t`), so the pairs' values are those of the off-diagonal
    entries; the diagonal is set to the pair value g[0, 1] for the pass (then restored), which
    leaves the extremes unchanged and adds n to each count of g[0, 1]'s side: full rows, kept per
    column (vectorised), then reduced."""
    n = g.shape[0]
    if n < 2:
        return 1.0, 1.0, 1.0, n, 1.0
    diag = np.empty(n)
    v01 = g[0, 1]
    for i in range(n):
        diag[i] = g[i, i]
        g[i, i] = v01
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    lo_abs = np.full(n, np.inf)
    close = 0
    edges = 0
    for i in range(n):
        gi = g[i]
        for j in range(n):
            v = gi[j]
            lo[j] = min(lo[j], v)
            hi[j] = max(hi[j], v)
            lo_abs[j] = min(lo_abs[j], abs(v))
            close += v >= 1.0 - delta
            edges += v >= 1.0 - eps
    for i in range(n):
        g[i, i] = diag[i]
    pairs = n * (n - 1) // 2
    close = (close - n * (v01 >= 1.0 - delta)) // 2
    edges = (edges - n * (v01 >= 1.0 - eps)) // 2
    if edges == 0:
        count = n
    elif edges == pairs:
        count = 1
    else:  # union-find over the edges
        parent = np.arange(n)
        count = n
        for i in range(n - 1):
            ri = outcomes.find_root(parent, i)
            gi = g[i]
            for j in range(i + 1, n):
                if gi[j] >= 1.0 - eps:
                    rj = outcomes.find_root(parent, j)
                    if rj != ri:
                        parent[rj] = ri  # ri stays a root
                        count -= 1
    return lo.min(), hi.max(), lo_abs.min(), count, close / (pairs * 1.0)


@njit(nogil=True, cache=True)
def gram_t(xt, g):
    """g[i, j] = sum_k xt[k, i] xt[k, j], serial in k with separate multiply and add: the bits of
    `outcomes.gram` of x = xt^T, vectorised over j (four k per pass over a row). xt: (d, n);
    g: (n, n)."""
    d, n = xt.shape
    for i in range(n):
        gi = g[i]
        a0 = xt[0, i]
        x0 = xt[0]
        for j in range(n):
            gi[j] = 0.0 + a0 * x0[j]
        k = 1
        while k + 4 <= d:
            a0, a1, a2, a3 = xt[k, i], xt[k + 1, i], xt[k + 2, i], xt[k + 3, i]
            x0, x1, x2, x3 = xt[k], xt[k + 1], xt[k + 2], xt[k + 3]
            for j in range(n):
                gi[j] = (((gi[j] + a0 * x0[j]) + a1 * x1[j]) + a2 * x2[j]) + a3 * x3[j]
            k += 4
        while k < d:
            a0 = xt[k, i]
            x0 = xt[k]
            for j in range(n):
                gi[j] += a0 * x0[j]
            k += 1


@njit(nogil=True, cache=True)
def memory(d):
    """The hemisphere test's memory along one trajectory (`hemisphere.hemisphere_test`)."""
    return np.zeros(d), np.zeros(d + 3, dtype=np.int64)


@njit(nogil=True, cache=True)
def _record_overlaps(x, g, beta, delta, eps, out, r, c, memo):
    """Every output of checkpoint c of trajectory r from the state x (n, d) and its overlaps g;
    memo: `memory(d)` of this trajectory."""
    lo, hi, lo_abs, clusters, close = pair_statistics(g, eps, delta)
    out.overlap_min[r, c] = lo
    out.overlap_max[r, c] = hi
    out.cluster_class[r, c] = outcomes.classify(lo, lo_abs, eps)
    out.n_clusters[r, c] = clusters
    out.frac_close[r, c] = close
    gmin, gmax = (lo, hi) if g.shape[0] > 1 else (np.inf, -np.inf)
    for i in range(g.shape[0]):  # the extremes over all entries: with the diagonal
        gmin, gmax = min(gmin, g[i, i]), max(gmax, g[i, i])
    out.energy[r, c] = _energy(g, beta, gmin, gmax)
    out.in_hemisphere[r, c] = hemisphere_test(x, 1e-9, memo[0], memo[1])


@njit(nogil=True, cache=True, inline="always")
def record(x, beta, delta, eps, g, out, r, c, memo):
    """All per-checkpoint outcomes of trajectory r's state x (n, d) at checkpoint c, into the
    `SphereFlowOutcomes` record out; g: (n, n) scratch; memo: `memory(d)` of the trajectory."""
    outcomes.gram(x, g)
    _record_overlaps(x, g, beta, delta, eps, out, r, c, memo)


@njit(nogil=True, cache=True)
def record_t(xt, beta, delta, eps, g, xt64, x, out, r, c, memo):
    """`record` of the state xt (d, n) (float64 or float32); g (n, n), xt64 (d, n), x (n, d):
    float64 scratch (x is left holding the state as rows)."""
    d, n = xt.shape
    for k in range(d):
        for i in range(n):
            xt64[k, i] = xt[k, i]
    for i in range(n):
        for k in range(d):
            x[i, k] = xt64[k, i]
    gram_t(xt64, g)
    _record_overlaps(x, g, beta, delta, eps, out, r, c, memo)
