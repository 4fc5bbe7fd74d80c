"""Open-hemisphere certificate (the in_hemisphere output of the sphere flow, docs/models.md 2.3).

Wendel: n i.i.d. uniform points on S^{d-1} lie in an open hemisphere with probability
2^{-(n-1)} sum_{k<d} C(n-1, k); with full attention and V = I such a start collapses to one
cluster.

x_1..x_n lie in an open hemisphere  <=>  some w has <w, x_i> > 0 for all i  <=>  0 is not in
conv{x_i}. Wolfe's min-norm-point algorithm (Math. Programming 11, 1976) finds p* = the point of
the hull nearest 0 exactly in finitely many steps (active-set method: corrals of affinely
independent points, affine min-norm solves). Since min_i <p*, x_i> = |p*|^2, the answer is
certified either way: True when a p with min_i <p, x_i> > tol |p| is found (p/|p| is a strict
separating direction with margin tol); False when |p| <= tol (0 within tol of the hull), or at an
optimum p with min_i <p, x_i> <= tol |p|. So the answer is "distance from 0 to the hull > tol",
up to rounding; the tests compare it with a margin-maximising LP. Before Wolfe, two cheap
certificates of True (any w with min_i <w, x_i> > tol |w| proves a distance > tol): the
centroid (a clustered state), and the least-squares solution of <w, x_i> = 1 (linearly
independent tokens, e.g. n <= d: Wolfe takes O(n) major cycles of O(d^3) there).
`hemisphere_test` keeps a memory along a trajectory: after a True the last certificate is tried
first, after a False Wolfe starts from the last corral (a state that stays out of every
hemisphere is certified by one affine solve). Either reaches the answer of a cold start, up to
rounding (tested along trajectories).
"""

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)


@njit(nogil=True, cache=True)
def _affine_min_norm(x, idx, k, gram, alpha):
    """alpha[:k] minimising |sum_a alpha_a x[idx[a]]| subject to sum alpha = 1.

    Solves the bordered system [G 1; 1^T 0] [alpha; mu] = [0; 1] by Gaussian elimination with
    partial pivoting. gram: (>= k+1, >= k+2) scratch. False if singular (affinely dependent corral).
    """
    d = x.shape[1]
    size = k + 1
    for a in range(k):
        for b in range(k):
            acc = 0.0
            for c in range(d):
                acc += x[idx[a], c] * x[idx[b], c]
            gram[a, b] = acc
        gram[a, k] = 1.0
        gram[k, a] = 1.0
        gram[a, size] = 0.0
    gram[k, k] = 0.0
    gram[k, size] = 1.0
    for col in range(size):
        piv = col
        for r in range(col + 1, size):
            if abs(gram[r, col]) > abs(gram[piv, col]):
                piv = r
        if abs(gram[piv, col]) < 1e-14:
            return False
        if piv != col:
            for c in range(size + 1):
                tmp = gram[col, c]
                gram[col, c] = gram[piv, c]
                gram[piv, c] = tmp
        for r in range(col + 1, size):
            fac = gram[r, col] / gram[col, col]
            for c in range(col, size + 1):
                gram[r, c] -= fac * gram[col, c]
    for r in range(size - 1, -1, -1):
        acc = gram[r, size]
        for c in range(r + 1, size):
            acc -= gram[r, c] * gram[c, size]
        gram[r, size] = acc / gram[r, r]
    for a in range(k):
        alpha[a] = gram[a, size]
    return True


@njit(nogil=True, cache=True)
def _cholesky_solve(a, b):
    """b <- a^{-1} b for a symmetric positive definite a (m, m) (overwritten by its Cholesky
    factor); False where a pivot is <= 1e-12 of the largest diagonal entry (singular)."""
    m = a.shape[0]
    scale = 0.0
    for i in range(m):
        scale = max(scale, a[i, i])
    for j in range(m):
        piv = a[j, j]
        for k in range(j):
            piv -= a[j, k] * a[j, k]
        if not piv > 1e-12 * scale:
            return False
        piv = np.sqrt(piv)
        a[j, j] = piv
        for i in range(j + 1, m):
            acc = a[i, j]
            for k in range(j):
                acc -= a[i, k] * a[j, k]
            a[i, j] = acc / piv
    for i in range(m):  # L y = b
        acc = b[i]
        for k in range(i):
            acc -= a[i, k] * b[k]
        b[i] = acc / a[i, i]
    for i in range(m - 1, -1, -1):  # L^T x = y
        acc = b[i]
        for k in range(i + 1, m):
            acc -= a[k, i] * b[k]
        b[i] = acc / a[i, i]
    return True


@njit(nogil=True, cache=True)
def _least_squares_direction(x, w):
    """w (d,) <- the least-squares solution of x w = 1 (the one of least norm when n <= d), by
    the normal equations of the smaller Gram matrix; False if it is numerically singular."""
    n, d = x.shape
    ones = np.ones(n)
    if n <= d:
        alpha = ones
        if not _cholesky_solve(np.dot(x, x.T), alpha):
            return False
        w[:] = np.dot(x.T, alpha)
        return True
    rhs = np.dot(x.T, ones)
    if not _cholesky_solve(np.dot(x.T, x), rhs):
        return False
    w[:] = rhs
    return True


@njit(nogil=True, cache=True)
def _certifies(x, w, tol):
    """min_i <x_i, w> > tol |w|: w is a strict separating direction with margin tol."""
    wn = np.sqrt(np.sum(w * w))
    lo = np.inf
    for i in range(x.shape[0]):
        lo = min(lo, np.dot(x[i], w))
    return lo > tol * wn


@njit(nogil=True, cache=True)
def in_open_hemisphere(x, tol):
    """True iff the rows of x (n, d) lie in an open hemisphere with margin tol (see above)."""
    n, d = x.shape
    return hemisphere_test(x, tol, np.zeros(d), np.zeros(d + 3, dtype=np.int64))


@njit(nogil=True, cache=True)
def hemisphere_test(x, tol, w, corral):
    """`in_open_hemisphere` with a memory, for a sequence of nearby point sets (the checkpoints
    of one trajectory): w (d,) the last certificate (zeros: the last answer was False, or none);
    corral (d + 3,) int64, corral[0] = k and corral[1:k + 1] the last corral of Wolfe's
    algorithm (k = 0: none). Start a sequence with zeros. After a True the last certificate is
    tried first; after a False, Wolfe from the last corral (one affine solve where the hull
    still holds 0)."""
    n, d = x.shape
    if np.any(w != 0.0) and _certifies(x, w, tol):
        return True
    p = np.zeros(d)
    if corral[0] == 0:
        # quick certificate: the centroid (a clustered state passes here)
        for i in range(n):
            for c in range(d):
                p[c] += x[i, c]
        if _certifies(x, p, tol):
            w[:] = p
            return True
        # second certificate: the least-squares solution of <w, x_i> = 1 (always one when the
        # x_i are linearly independent, e.g. n <= d at random; Wolfe needs many steps there)
        if _least_squares_direction(x, p) and _certifies(x, p, tol):
            w[:] = p
            return True
    cap = d + 2
    idx = np.empty(cap, dtype=np.int64)
    lam = np.empty(cap)
    alpha = np.empty(cap)
    gram = np.empty((cap + 1, cap + 2))
    k = np.int64(0)  # int64, not a literal (kernels/__init__.py)
    for a in range(min(corral[0], cap - 1)):  # warm start: the last corral, uniform weights
        if corral[1 + a] < n:
            idx[k] = corral[1 + a]
            lam[k] = 1.0
            k += 1
    if k > 1:
        for a in range(k):
            lam[a] = 1.0 / k
        k = minor_cycles(x, idx, lam, alpha, gram, k)
    if k < 1:
        idx[0] = 0
        lam[0] = 1.0
        k = 1
    answer = _wolfe(x, tol, p, idx, lam, alpha, gram, k, corral)
    if answer:
        w[:] = p
        corral[0] = 0
    else:
        w[:] = 0.0
    return answer


@njit(nogil=True, cache=True)
def _wolfe(x, tol, p, idx, lam, alpha, gram, k, corral):
    """Wolfe's major cycles from the corral idx[:k] with weights lam[:k]; the answer of
    `in_open_hemisphere`, p the last point (a certificate on True); the corral saved in corral."""
    n, d = x.shape
    cap = idx.shape[0]
    answer = False
    for _ in range(50 * (n + d)):
        for c in range(d):
            p[c] = 0.0
        for a in range(k):
            for c in range(d):
                p[c] += lam[a] * x[idx[a], c]
        pp = np.dot(p, p)
        pn = np.sqrt(pp)
        if pn <= tol:
            break
        jbest = 0
        lo = np.inf
        for i in range(n):
            v = np.dot(x[i], p)
            if v < lo:
                lo = v
                jbest = i
        if lo > tol * pn:
            answer = True
            break
        if lo >= pp - 1e-13 or k == cap:
            break  # optimal (or stalled): distance <= tol
        known = False
        for a in range(k):
            if idx[a] == jbest:
                known = True
        if known:
            break  # no progress possible at this precision
        idx[k] = jbest
        lam[k] = 0.0
        k = minor_cycles(x, idx, lam, alpha, gram, k + 1)
        if k < 1:
            k = np.int64(0)
            break
    corral[0] = k
    for a in range(k):
        corral[1 + a] = idx[a]
    return answer


@njit(nogil=True, cache=True)
def minor_cycles(x, idx, lam, alpha, gram, k):
    """Wolfe's minor cycles: from the convex weights lam[:k] of the points idx[:k], move towards
    their affine minimiser, dropping points, until it has positive weights; the new k (0 where
    an affine system is singular)."""
    while True:
        if not _affine_min_norm(x, idx, k, gram, alpha):
            return 0
        positive = True
        for a in range(k):
            if alpha[a] <= 1e-15:
                positive = False
        if positive:
            for a in range(k):
                lam[a] = alpha[a]
            return k
        theta = 1.0
        for a in range(k):
            if alpha[a] <= 1e-15 and lam[a] - alpha[a] > 0.0:
                theta = min(theta, lam[a] / (lam[a] - alpha[a]))
        kept = 0
        for a in range(k):
            val = theta * alpha[a] + (1.0 - theta) * lam[a]
            if val > 1e-15:
                idx[kept] = idx[a]
                lam[kept] = val
                kept += 1
        if kept == k:  # rounding: drop the smallest weight to guarantee progress
            worst = 0
            for a in range(k):
                if lam[a] < lam[worst]:
                    worst = a
            for a in range(worst, k - 1):
                idx[a] = idx[a + 1]
                lam[a] = lam[a + 1]
            kept = k - 1
        k = kept
        total = 0.0
        for a in range(k):
            total += lam[a]
        for a in range(k):
            lam[a] /= total