"""The stochastic transformer's generalised options (docs/models.md 4.4): value laws, Q and K, schemes.

Shared by the discrete model (`stochastic.transformer`) and the SDE scheme (`stochastic.sde`): the names a spec
may use, the check that a law, a noise path and a scheme fit together, and the logits of a query-key
pair, beta <Q x_i, K x_j> = beta x_i^T M x_j with M = Q^T K, M fixed or drawn per trajectory.
"""

import numpy as np
from numba import njit

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from ..attention import VALUE_LAW_CODES

VALUE_LAWS = tuple(VALUE_LAW_CODES)  # the value entries' laws
SCHEMES = ("discrete", "sde")  # the transformer itself, or the reference integrator of its SDE

__all__ = ["VALUE_LAWS", "SCHEMES", "NO_QK", "bilinear_logits", "check_options", "query_key"]


@njit(nogil=True, cache=True)
def bilinear_logits(x, m, y, g):
    """g[i, j] = <x_i, M x_j> = <Q x_i, K x_j> for M = Q^T K; y: (n, d) scratch, y_j = M x_j."""
    n, d = x.shape
    for j in range(n):
        for a in range(d):
            acc = 0.0
            for b in range(d):
                acc += m[a, b] * x[j, b]
            y[j, a] = acc
    for i in range(n):
        for j in range(n):
            acc = 0.0
            for a in range(d):
                acc += x[i, a] * y[j, a]
            g[i, j] = acc


NO_QK = np.empty((0, 0))  # M for Q = K = I: the kernels then use the overlaps as logits


def check_options(noise, value_law, scheme):
    """The value law's code; refuses a law, a noise path and a scheme that do not fit together."""
    if value_law not in VALUE_LAWS:
        raise ValueError(f"value_law = {value_law!r} is unknown: use one of {VALUE_LAWS}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme = {scheme!r} is unknown: use one of {SCHEMES}")
    if value_law != "gaussian" and noise == "gaussian":
        raise ValueError(f"value_law = {value_law!r} needs noise = 'literal': the gaussian noise "
                         "path is exact for Gaussian entries only")
    if scheme == "sde" and (value_law != "gaussian" or noise != "gaussian"):
        raise ValueError("scheme = 'sde' integrates the limit SDE with Brownian increments: leave "
                         "value_law = 'gaussian' and noise = 'gaussian'")
    return VALUE_LAW_CODES[value_law]


def query_key(d, qk, matrices):
    """None for Q = K = I, else rng -> M = Q^T K (d, d): fixed, or drawn per trajectory after the
    start as the sphere flow draws one head's Q, K (kernels/ensembles.py)."""
    from .. import ensembles as ens
    from ..sphere.arguments import resolve_weights

    matrices = {k: v for k, v in (matrices or {}).items() if k in ("Q", "K")}
    if qk == "identity" and not matrices:  # the default: no weights to build (a trivial
        return None                        # partition paid ~0.3 ms for them)
    q, k, v, (q_kind, k_kind, _), identity, _ = resolve_weights(1, d, qk, "identity", matrices, None)
    if identity:
        return None
    m = np.empty((1, d, d))
    if q_kind == ens.FIXED and k_kind == ens.FIXED:
        ens.qk_products(q, k, v, ens.FIXED, m)
        return lambda rng: m[0]

    def draw(rng):
        qr, kr, mr = q.copy(), k.copy(), np.empty((1, d, d))
        ens.draw_weights(rng, q_kind, k_kind, ens.FIXED, qr, kr, v.copy(), mr,
                         ens.SCALING_CODES["normalised"])
        return mr[0]

    return draw
