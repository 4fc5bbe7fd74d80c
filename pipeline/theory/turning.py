r"""A value matrix that turns ([RST] Thm 5.3; docs/models.md section 2.5): V(t) = R(wt) V R(wt)^T,
R(s) the rotation by the angle s in the (e_1, e_2) plane.

Causal attention leaves token 1 alone with itself: x' = V(t) x - <x, V(t) x> x. In the turning
frame y = R(wt)^T x this is autonomous, y' = M y - <y, M y> y with M = V - w J (J e_1 = e_2,
J e_2 = -e_1; <y, J y> = 0), the projection of a linear flow onto the sphere, so

    x_1(t) = R(wt) N(e^{(t - s) M} R(ws)^T x_1(s))        (N: divide by the norm)

from any time s. M's dominant eigenvalues decide what the theorem's ball is: a real simple one
locks token 1 onto R(wt) u (u its eigenvector), lagging the top eigenvector v_1(t) of V(t) by the
angle between u and v_1; a complex pair a +- ib makes it slip, turning against v_1(t) at the mean
rate b (one turn of y per 2 pi / b). With V = diag(l_1, l_2, ...) and gap D = l_1 - l_2 in the
plane: the lag is arcsin(2 w / D) / 2 for w < D / 2 and the slip rate sqrt(w^2 - D^2 / 4) above.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rotation", "top_eigen", "turning_frame_matrix", "turning_first_token", "lock_or_slip"]


def rotation(d: int, angle) -> np.ndarray:
    """R(angle): the rotation by `angle` in the (e_1, e_2) plane of R^d (shape angle.shape + (d, d))."""
    angle = np.asarray(angle, float)
    out = np.broadcast_to(np.eye(d), angle.shape + (d, d)).copy()
    c, s = np.cos(angle), np.sin(angle)
    out[..., 0, 0], out[..., 0, 1], out[..., 1, 0], out[..., 1, 1] = c, -s, s, c
    return out


def top_eigen(V) -> tuple[float, np.ndarray]:
    """The top eigenvalue of the symmetric V and its eigenvector v_1, its largest entry positive (the
    sign the claims and the measurements of a turning V share)."""
    values, vectors = np.linalg.eigh(np.asarray(V, float))
    v = vectors[:, -1]
    return float(values[-1]), v if v[np.argmax(np.abs(v))] > 0 else -v


def turning_frame_matrix(V, omega: float) -> np.ndarray:
    """M = V - omega J: token 1's linear field in the turning frame."""
    M = np.array(V, dtype=float)
    M[1, 0] -= omega  # -omega J, J = e_2 e_1^T - e_1 e_2^T
    M[0, 1] += omega
    return M


def turning_first_token(x_s, V, omega: float, s: float, t):
    """x_1 at the times `t` from x_1(s) = x_s (causal attention, one head; module docstring).
    x_s may hold many starts (..., d): each e^{(u - s)M} is computed once for all of them.
    Returns shape x_s.shape[:-1] + t.shape + (d,).

    >>> V = np.diag([1.0, 0.3, -0.5])
    >>> x = turning_first_token([1.0, 0.0, 0.0], V, 0.0, 0.0, [0.0, 5.0])
    >>> np.round(x, 12).tolist()   # omega = 0: e_1 is a fixed point
    [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """
    from scipy import linalg

    x_s, t = np.asarray(x_s, float), np.asarray(t, float)
    d = x_s.shape[-1]
    M = turning_frame_matrix(V, omega)
    y_s = x_s @ rotation(d, omega * s)  # R(ws)^T x_s, row by row
    flows = np.array([linalg.expm((u - s) * M) for u in t.ravel()])  # (nt, d, d)
    ys = np.einsum("kij,...j->...ki", flows, y_s)
    ys /= np.linalg.norm(ys, axis=-1, keepdims=True)
    xs = np.einsum("kij,...kj->...ki", rotation(d, omega * t.ravel()), ys)
    return xs.reshape(x_s.shape[:-1] + t.shape + (d,))


def lock_or_slip(V, omega: float) -> tuple[str, float, float]:
    """('lock', lag, 0) or ('slip', nan, rate) for token 1 under the turning V (module docstring):
    the lag is the angle (radians) between the locked direction u and the top eigenvector v_1 of V,
    the rate the imaginary part of M's dominant complex pair (radians per unit time).

    >>> kind, lag, _ = lock_or_slip(np.diag([1.0, 0.3, -0.5]), 0.2)
    >>> kind, round(lag, 12) == round(float(np.arcsin(2 * 0.2 / 0.7) / 2), 12)
    ('lock', True)
    >>> kind, _, rate = lock_or_slip(np.diag([1.0, 0.3, -0.5]), 0.5)
    >>> kind, round(rate, 12) == round(float(np.sqrt(0.5 ** 2 - 0.35 ** 2)), 12)
    ('slip', True)
    """
    values, vectors = np.linalg.eig(turning_frame_matrix(V, omega))
    top = int(np.argmax(values.real))
    ties = np.isclose(values.real, values.real[top], rtol=0.0, atol=1e-12)
    if abs(values[top].imag) > 1e-12:
        return "slip", float("nan"), float(abs(values[top].imag))
    if ties.sum() > 1:  # a real double eigenvalue (omega = D / 2 exactly): neither, say so
        return "boundary", float("nan"), 0.0
    u, v1 = vectors[:, top].real, top_eigen(V)[1]
    cos = abs(float(u @ v1)) / float(np.linalg.norm(u))
    return "lock", float(np.arccos(min(cos, 1.0))), 0.0
