"""Initial conditions drawn from a trajectory's Generator (no I/O; the spec field is
`pipeline/starts.py`). Every model's start comes from here, or from its kernel for the uniform
start it always drew (`attention.uniform_start`, `ensembles.draw_start`: the same stream as
``uniform`` below).

Random stream of one start (x: (n, d), tokens are rows), always the first numbers the trajectory's
Generator gives; the model's kernel continues with the layers' noise from the same Generator:

- uniform: ``g = rng.standard_normal((n, d))``; x = radius * g / |g_i| row by row (NumPy's norm,
  as the R^d flow always scaled it; the sphere models draw their uniform start in the kernel).
- hemisphere: with v ``random``, first ``rng.standard_normal(d)``, normalised (v uniform on the
  sphere); ``e1`` is (1, 0, ..., 0); a given v is normalised. Then n*d normals, each row
  normalised as the kernels do (`attention.normalize_rows`: x is the kernels' uniform start); every
  x_i with <x_i, v> < 0 is reflected, x_i - 2 <x_i, v> v: uniform on the half sphere {<x, v> > 0}
  (for v = e1 this is x_i1 <- |x_i1|, bit for bit the sphere flow's old ``hemisphere``).
- overlap (n = 2): ``g = rng.standard_normal((2, d))``; x_1 = g_1 / |g_1|, u = the part of g_2
  orthogonal to x_1, normalised; x_2 = rho0 x_1 + sqrt(1 - rho0^2) u. x_1 is uniform and u is
  uniform on the great sphere orthogonal to x_1, so the pair is uniform among pairs with
  <x_1, x_2> = rho0 (its law is invariant under every rotation).
- equiangular: n*d normals, Gram-Schmidt twice (`ensembles.shape_start`): a Haar-random
  orthonormal n-frame (d >= n).
- box: ``rng.uniform(-a, a, size=(n, d))``, rows normalised when `normalise`.
- gaussian: ``std * rng.standard_normal((n, d))``.

>>> import numpy as np
>>> x = draw_start(np.random.default_rng(0), "overlap", 2, 5, rho0=-0.3)
>>> round(float(x[0] @ x[1]), 12), np.linalg.norm(x, axis=1).round(12).tolist()
(-0.3, [1.0, 1.0])
"""

import numpy as np

KINDS = ("uniform", "hemisphere", "overlap", "equiangular", "box", "gaussian")


def _rows_normalised(g):
    """Rows onto the unit sphere, by the kernels' own `normalize_rows` (the same bits)."""
    from .attention import normalize_rows

    normalize_rows(g)
    return g


def _hemisphere(rng, n, d, v):
    if isinstance(v, str) and v == "random":
        v = rng.standard_normal(d)
    elif isinstance(v, str):  # "e1"
        v = np.eye(d)[0]
    v = np.asarray(v, np.float64)
    v = v / np.linalg.norm(v)
    x = _rows_normalised(rng.standard_normal((n, d)))
    dots = x @ v
    below = dots < 0
    x[below] -= 2.0 * dots[below, None] * v
    return x


def _overlap(rng, d, rho0):
    g = rng.standard_normal((2, d))
    x1 = g[0] / np.linalg.norm(g[0])
    w = g[1] - (g[1] @ x1) * x1
    u = w / np.linalg.norm(w)
    return np.stack([x1, rho0 * x1 + np.sqrt(1.0 - rho0 * rho0) * u])


def draw_start(rng, kind, n, d, *, v="e1", rho0=None, half_width=1.0, normalise=False, radius=1.0,
               std=1.0):
    """One trajectory's start (n, d), float64, drawn from rng (module docstring)."""
    if kind == "uniform":
        g = rng.standard_normal((n, d))
        return radius * g / np.linalg.norm(g, axis=1, keepdims=True)
    if kind == "hemisphere":
        return _hemisphere(rng, n, d, v)
    if kind == "overlap":
        if n != 2 or rho0 is None or not -1.0 <= rho0 <= 1.0:
            raise ValueError(f"an overlap start needs n = 2 and rho0 in [-1, 1], got n = {n}, rho0 = {rho0!r}")
        return _overlap(rng, d, float(rho0))
    if kind == "equiangular":
        from .ensembles import EQUIANGULAR, shape_start

        if d < n:
            raise ValueError(f"an equiangular start needs d >= n, got n = {n}, d = {d}")
        x = rng.standard_normal((n, d))
        shape_start(EQUIANGULAR, x)
        return x
    if kind == "box":
        x = rng.uniform(-half_width, half_width, size=(n, d))
        return _rows_normalised(x) if normalise else x
    if kind == "gaussian":
        return std * rng.standard_normal((n, d))
    raise ValueError(f"start kind {kind!r} is unknown: use one of {KINDS}")


def draw_starts(rngs, kind, n, d, **parameters):
    """(len(rngs), n, d): draw_start from each Generator in turn."""
    out = np.empty((len(rngs), n, d))
    for r, rng in enumerate(rngs):
        out[r] = draw_start(rng, kind, n, d, **parameters)
    return out
