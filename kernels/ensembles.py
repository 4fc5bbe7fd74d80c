"""Random starts, random weight matrices and time-varying schedules for the attention flows.

Every draw comes from the trajectory's own numpy Generator, through numba, which draws bit-identically
to numpy: a NumPy reference that calls `rng.standard_normal(shape)` / `rng.random(shape)` in the order
below consumes the same numbers.

Starts (x: (n, d), tokens are rows):
- "uniform_sphere": n*d standard normals, row-major, each row normalised (`attention.uniform_start`).
- "hemisphere": the same, then x_i1 <- |x_i1|: uniform on the half sphere {<x, e_1> >= 0}.
- "equiangular": n*d standard normals, row-major, orthonormalised by Gram-Schmidt (two passes):
  a Haar-random orthonormal n-frame, all overlaps 0 (needs d >= n).
- GIVEN: a start drawn before (`kernels/starts.py`, from the same Generator first), already on the
  sphere: used as it is (renormalising would move its last bits).

Matrix ensembles (d x d, entries scaled so that a draw is O(1) as an operator on typical vectors;
G below always means d*d standard normals, row-major, times 1/sqrt(d)):
- GINIBRE: G, i.i.d. N(0, 1/d) entries.
- GOE: (G + G^T)/sqrt(2): symmetric, off-diagonal variance 1/d, diagonal variance 2/d.
- WIGNER: symmetric with i.i.d. N(0, 1/d) entries on and above the diagonal; draws d(d+1)/2 normals,
  row-major over a <= b.
- WISHART: G^T G: positive semidefinite, E[W] = I.
For the query-key pair, "ginibre" draws Q then K (each GINIBRE); a symmetric ensemble ("goe",
"wigner", "wishart") is the bilinear form itself: Q = I, K = W, so Q^T K = W. Values: any ensemble,
or "qk" (V = Q^T K of the same head). Per trajectory, after the start, for head 0, 1, ...: Q (if
drawn), K (if drawn), V (if drawn); with `period` > 0 the same draws are repeated, in the same order,
before steps period, 2 period, ... Explicitly given matrices are never drawn.

Scaling (`ensemble_scaling`): the above ("normalised"), or "authors": the convention of the
scripts behind [GLPR-P] Fig. 5, unit-variance entries, applied after each draw (`authors_scaling`).

Time-varying bilinear forms [RST]: head h uses P_h(t) = D_h(t) P'_h with P'_h = Q_h^T K_h and
D_h(t) = diag(amp_hk * cos(omega_hk t + phase_hk)) (absolute value of each entry if `absolute`).
`TIME_VARYING` (`vocabulary.TIME_VARYING`) holds [RST]'s examples (docs/models.md section 6); "rst_random_frequencies" draws, after
the matrices and once per trajectory, for each head omega_h (d uniforms on (0, 1)) then phase_h
(d uniforms on (0, 2 pi)), giving |2 sin(omega t + phi)| in law.
"""

import numpy as np
from numba import njit

from tokensweep.kernels import (
    cache,  # noqa: F401  (numba's cache folder, before any decoration)
    vocabulary,
)
from tokensweep.kernels.attention import normalize_rows
from tokensweep.kernels.hemisphere import in_open_hemisphere  # noqa: F401  (re-exported)

# matrix ensemble codes (FIXED: use the given matrix; QK: V = Q^T K)
FIXED = 0
GINIBRE = 1
GOE = 2
WIGNER = 3
WISHART = 4
QK = 5
ENSEMBLE_CODES = {"ginibre": GINIBRE, "goe": GOE, "wigner": WIGNER, "wishart": WISHART}
QK_ENSEMBLES = vocabulary.QK_ENSEMBLES
VALUE_ENSEMBLES = vocabulary.VALUE_ENSEMBLES

# ensemble scalings: N(0, 1/d) entries (ours), or the authors' scripts for [GLPR-P] Fig. 5
NORMALISED = 0
AUTHORS = 1
SCALING_CODES = dict(zip(vocabulary.ENSEMBLE_SCALINGS, (NORMALISED, AUTHORS)))

# start codes
UNIFORM_SPHERE = 0
HEMISPHERE = 1
EQUIANGULAR = 2
INIT_CODES = dict(zip(vocabulary.SPHERE_FLOW_INITS, (UNIFORM_SPHERE, HEMISPHERE, EQUIANGULAR)))
GIVEN = 3  # a start given on the sphere: shape_start leaves it as it is
TIME_VARYING = vocabulary.TIME_VARYING


@njit(nogil=True, cache=True)
def shape_start(kind, x):
    """Turn x (n, d), holding n*d standard normals row-major, into a start of the given kind
    (module docstring) in place; False if degenerate."""
    n, d = x.shape
    if kind == GIVEN:
        return True
    if kind == EQUIANGULAR:
        for _ in range(2):  # second pass: orthogonality to rounding
            for i in range(n):
                for j in range(i):
                    dot = 0.0
                    for k in range(d):
                        dot += x[i, k] * x[j, k]
                    for k in range(d):
                        x[i, k] -= dot * x[j, k]
                norm2 = 0.0
                for k in range(d):
                    norm2 += x[i, k] * x[i, k]
                norm = np.sqrt(norm2)
                if not norm > 0.0:
                    return False
                for k in range(d):
                    x[i, k] /= norm
        return True
    ok = normalize_rows(x)  # as `attention.uniform_start`
    if kind == HEMISPHERE:
        for i in range(n):
            x[i, 0] = abs(x[i, 0])
    return ok


@njit(nogil=True, cache=True)
def fill_normals(rng, out):
    """out (n, d) <- n*d standard normals from rng, row-major: the numbers
    rng.standard_normal(out=out) would draw, without holding the GIL (threads draw at once)."""
    n, d = out.shape
    z = rng.standard_normal(n * d)
    for i in range(n):
        for k in range(d):
            out[i, k] = z[i * d + k]


@njit(nogil=True, cache=True)
def draw_start(rng, kind, x):
    """Fill x (n, d) with a start of the given kind (module docstring); False if degenerate.
    Draws n*d standard normals, row-major: the same numbers as rng.standard_normal((n, d))."""
    fill_normals(rng, x)
    return shape_start(kind, x)


@njit(nogil=True, cache=True)
def draw_matrix(rng, kind, out):
    """Fill out (d, d) with one draw of ensemble `kind` (GINIBRE, GOE, WIGNER or WISHART)."""
    d = out.shape[0]
    s = 1.0 / np.sqrt(d)
    if kind == WIGNER:
        for a in range(d):
            for b in range(a, d):
                v = s * rng.standard_normal()
                out[a, b] = v
                out[b, a] = v
        return
    g = rng.standard_normal((d, d))
    for a in range(d):
        for b in range(d):
            g[a, b] *= s
    if kind == GINIBRE:
        out[:, :] = g
    elif kind == GOE:
        r = 1.0 / np.sqrt(2.0)
        for a in range(d):
            for b in range(d):
                out[a, b] = (g[a, b] + g[b, a]) * r
    else:  # WISHART: G^T G
        for a in range(d):
            for b in range(d):
                acc = 0.0
                for c in range(d):
                    acc += g[c, a] * g[c, b]
                out[a, b] = acc


@njit(nogil=True, cache=True)
def qk_products(q, k, v, v_kind, m):
    """m[h] = q[h]^T k[h] for every head; v[h] = m[h] where v_kind is QK. q, k, v, m: (H, d, d)."""
    heads, d, _ = q.shape
    for h in range(heads):
        for a in range(d):
            for b in range(d):
                acc = 0.0
                for c in range(d):
                    acc += q[h, c, a] * k[h, c, b]
                m[h, a, b] = acc
        if v_kind == QK:
            v[h, :, :] = m[h]


@njit(nogil=True, cache=True)
def authors_scaling(k_kind, v_kind, m, v):
    """Rescale drawn weights to the convention of the authors' scripts for [GLPR-P] Fig. 5
    (borjanG/2023-transformers-rotf, phase-diagrams.py): unit-variance entries, so every drawn
    bilinear form m = Q^T K and every drawn V is sqrt(d) times ours (their BF = G1 G2 / sqrt(d),
    (G + G^T)/sqrt(2), Wishart V = G G^T / sqrt(d)); V = "qk" is their V = BF^T / normV (the
    row-vector product M V), normV = sqrt(d + 1) for GOE, sqrt(d) otherwise. Fixed matrices are
    left alone."""
    heads, d, _ = m.shape
    r = np.sqrt(d)
    norm_v = np.sqrt(d + 1.0) if k_kind == GOE else r
    for h in range(heads):
        if k_kind != FIXED:
            m[h] *= r
        if v_kind == QK:
            if k_kind != FIXED:
                v[h] = m[h].T / norm_v
        elif v_kind != FIXED:
            v[h] *= r


@njit(nogil=True, cache=True)
def draw_weights(rng, q_kind, k_kind, v_kind, q, k, v, m, scaling):
    """Draw the random matrices of every head in the documented order; refresh m = Q^T K.

    q_kind, k_kind: FIXED or an ensemble code; v_kind: FIXED, an ensemble code or QK.
    q, k, v: (H, d, d), updated in place where drawn; m: (H, d, d) output, m[h] = q[h]^T k[h].
    scaling: NORMALISED, or AUTHORS (then `authors_scaling` rescales m and v).
    """
    heads = q.shape[0]
    for h in range(heads):
        if q_kind != FIXED:
            draw_matrix(rng, q_kind, q[h])
        if k_kind != FIXED:
            draw_matrix(rng, k_kind, k[h])
        if v_kind != FIXED and v_kind != QK:
            draw_matrix(rng, v_kind, v[h])
    qk_products(q, k, v, v_kind, m)
    if scaling == AUTHORS:
        authors_scaling(k_kind, v_kind, m, v)


@njit(nogil=True, cache=True)
def draw_frequencies(rng, omega, phase):
    """Random [RST] schedule: for each head, omega (d uniforms on (0,1)) then phase (on (0, 2 pi))."""
    heads, d = omega.shape
    for h in range(heads):
        for k in range(d):
            omega[h, k] = rng.random()
        for k in range(d):
            phase[h, k] = 2.0 * np.pi * rng.random()
