"""Unnormalised attention dynamics of tokens in R^d [GLPR-E] (docs/models.md section 3).

Tokens x_1..x_n in R^d (no normalisation), H heads of value, query and key matrices V_h, Q_h,
K_h (d x d), inverse temperature beta:

    dx_i/dt = sum_h sum_j P^h_ij V_h x_j,   P^h_ij = exp(L^h_ij) / sum_l exp(L^h_il),
    L^h_ij = beta <Q_h x_i, K_h x_j>.

The state integrated (float64) is the rescaled tokens z, with the growth e^{tV} (V = sum_h V_h)
or, for the discrete-time transformer, R^k = (I + hV)^k taken out exactly; x = E z is recovered
where needed. Schemes, h = T / layers (`euclidean.schemes`): "euler" and "rk4" for the continuous
flow on z = e^{-tV} x, "discrete" for the transformer x^{k+1} = x^k + h sum_h sum_j P^h V_h x^k_j
([GLPR-E] (3)) on Remark 4's z^k = R^{-k} x^k. For V = I and one head an explicit Euler step
z_i + h sum_j P_ij (z_j - z_i) is a convex combination for h <= 1, so conv{z} never grows, in
discrete time as in continuous time (and so is Remark 4's step).

Draws (the Python wrapper, from each trajectory's own Generator, in this order):
1. the start, token-major C order, one call (by `kernels/starts.py`), unless given as x0 (then
   drawn before from the same Generator, by the pipeline's `init`):
    "box":            rng.uniform(-box, box, size=(n, d))     (the papers' U[-5, 5]^d, box = 5)
    "gaussian":       box * rng.standard_normal((n, d))       (i.i.d. N(0, box^2) coordinates)
    "uniform_sphere": g = rng.standard_normal((n, d)), rows scaled to norm box (d = 1: +-box);
2. only when V names a random ensemble ("ginibre", "goe", "wigner", "wishart", as
   `ensembles.draw_matrix` defines them: entries of variance 1/d), V_1, ..., V_H, one draw each.
Explicit matrices are shared by every trajectory (one block); drawn ones are integrated one
trajectory at a time.

Outcomes (`OUTPUTS`, declared in `vocabulary`), ntraj first, `t` second for per-checkpoint ones,
filled into one record of arrays (`outcomes.allocate_outputs`, z_final doubling as the state):
    n_clusters  components of the graph on tokens with an edge where |z_i - z_j| <= eps * r0,
                r0 = max_i |z_i(0) - mean_j z_j(0)| the trajectory's initial radius (1 if r0 = 0);
                z, not x, is the natural frame: for V = I the z_i converge to polytope vertices.
    spread      max_i |x_i(t)|, x = E z (for V = -I it decays like t^{-1/2}: compare
                sqrt(t) * spread).
    log_boolean_defect
                log D(t), D the distance of P(t) (first head) to the set of [GLPR-E] Fig. 2
                (every row Boolean but one): with delta_i = 1 - max_j P_ij the attention mass
                off row i's leader, D = the second largest delta_i (the largest row is the one
                the set leaves free); -inf for n = 1. Computed from the logits, never from P:
                with m, m2 the largest and second largest logit of the row (leader j*),
                    log delta_i = (m2 - m) + log sum_{k != j*} e^{L_ik - m2}
                                  - log sum_k e^{L_ik - m},
                so it stays exact where delta_i underflows (d = 1, V = 1: -log D ~ c e^t).
    nonfinite   the state became non-finite (or, for "discrete" with a drawn V, R = I + hV is
                singular: cond > 1e8); that trajectory is frozen, its later checkpoints keep the
                missing values n_clusters 0 and spread NaN, its z_final and P_final are NaN.
                Never raises.
    z_final     z(T), (ntraj, n, d).   P_final   P(T) of the first head, (ntraj, n, n).
"""

import numpy as np
from numba import njit

from .. import (
    cache,  # noqa: F401  (selects numba's cache folder before anything is decorated)
    vocabulary,
)
from ..ensembles import ENSEMBLE_CODES, draw_matrix
from ..outcomes import allocate_outputs, record_class
from .reductions import all_finite, initial_radius, record
from .schemes import (  # noqa: F401
    DISCRETE,
    INTEGRATOR_CODES,
    RK4,
    advance,
    allocate_frame,
    allocate_work,
    attention_matrix,
    continuous_frame,
    copy_frame,
    discrete_frame,
    expm,
    matmul,
)

VALUE_ENSEMBLES = vocabulary.EUCLIDEAN_VALUE_ENSEMBLES
MAX_CONDITION = vocabulary.EUCLIDEAN_MAX_CONDITION
INIT_KINDS = vocabulary.EUCLIDEAN_INITS

OUTPUTS = vocabulary.EUCLIDEAN_FLOW_OUTPUTS
EXTRA_DIMS = vocabulary.EUCLIDEAN_EXTRA_DIMS  # trailing dimensions of z_final, P_final
EuclideanFlowOutcomes = record_class("EuclideanFlowOutcomes", OUTPUTS, __name__)


# ---------------------------------------------------------------------------------------------
# numba kernels


@njit(nogil=True, cache=True)
def _power_step(m, power, work):
    """power <- m @ power."""
    matmul(m, power, work)
    power[:, :] = work


@njit(nogil=True, cache=True)
def integrate_block(out, t0, v, q, k, beta, h, checkpoints, scheme, thr, states):
    """Integrate a block of trajectories sharing V, Q, K, in place, from time t0.

    out: `EuclideanFlowOutcomes` from `allocate_outputs`. Its z_final (ntraj, n, d) is the state:
    at t0 on entry, at t0 + h * checkpoints[-1] on exit (NaN where nonfinite). t0, beta, h: float.
    v, q, k: (H, d, d). checkpoints: (nt,) int64 sorted step counts (0 = the entry state), last =
    number of steps. scheme: EULER, RK4 or DISCRETE (then R = I + hV must be invertible and t0 a
    multiple of h). thr: (ntraj,) absolute cluster thresholds (the wrapper passes eps *
    initial_radius). Fills n_clusters, spread, log_boolean_defect, nonfinite (read too: a
    trajectory flagged on entry is skipped) and P_final (first head). states: (ntraj, nt, n, d)
    NaN-filled, z at every checkpoint (NaN from a trajectory's non-finite one on), or
    (ntraj, 0, n, d) to skip. Steps run outer and trajectories inner, so each frame is computed
    once per time for the block.
    """
    z, nonfinite, p_final = out.z_final, out.nonfinite, out.P_final
    ntraj, n, d = z.shape
    layers = checkpoints[-1]
    nt = checkpoints.shape[0]
    heads = v.shape[0]
    v_sum = v[0].copy()
    for hh in range(1, heads):
        v_sum += v[hh]
    f0 = allocate_frame(heads, d)
    f_mid = allocate_frame(heads, d)
    f1 = allocate_frame(heads, d)
    work = allocate_work(n, d)
    qz, kz = work[0], work[1]
    # DISCRETE: R^k and R^{-k}, one product per step
    r_mat = np.eye(d) + h * v_sum
    rinv = np.linalg.inv(r_mat) if scheme == DISCRETE else np.eye(d)
    power = np.eye(d)
    inv_power = np.eye(d)
    tmp = np.empty((d, d))

    if scheme == DISCRETE:
        for _ in range(int(round(t0 / h))):
            _power_step(r_mat, power, tmp)
            _power_step(rinv, inv_power, tmp)
        discrete_frame(power, inv_power, rinv, v, q, k, f0)
    else:
        continuous_frame(t0, v_sum, v, q, k, f0)
    c = np.int64(0)  # int64, not a literal (kernels/__init__.py)
    if checkpoints[0] == 0:
        for r in range(ntraj):
            if not nonfinite[r]:
                record(z[r], f0, beta, thr[r], out, r, np.int64(0), work)
                if states.shape[1] > 0:
                    states[r, 0] = z[r]
        c = np.int64(1)
    for step in range(layers):
        if scheme == DISCRETE:
            _power_step(r_mat, power, tmp)
            _power_step(rinv, inv_power, tmp)
            discrete_frame(power, inv_power, rinv, v, q, k, f1)
        else:
            continuous_frame(t0 + (step + 1) * h, v_sum, v, q, k, f1)
            if scheme == RK4:
                continuous_frame(t0 + (step + 0.5) * h, v_sum, v, q, k, f_mid)
        for r in range(ntraj):
            if nonfinite[r]:
                continue
            advance(z[r], scheme, h, beta, f0, f_mid, f1, work)
            if not all_finite(z[r]):  # checkpoints c.. keep their missing values
                nonfinite[r] = True
                z[r] = np.nan
        if checkpoints[c] == step + 1:
            for r in range(ntraj):
                if not nonfinite[r]:
                    record(z[r], f1, beta, thr[r], out, r, c, work)
                    if states.shape[1] > 0:
                        states[r, c] = z[r]
            c += 1
        copy_frame(f1, f0)
    # P(T) from z(T); a non-finite P (e.g. e^{TV} overflowed) also marks the trajectory
    for r in range(ntraj):
        if nonfinite[r]:
            continue  # P_final keeps its missing NaN
        attention_matrix(z[r], f0[1][0], f0[2][0], beta, qz, kz, p_final[r])
        if not all_finite(p_final[r]):
            nonfinite[r] = True
            p_final[r] = np.nan
            z[r] = np.nan
            out.n_clusters[r, nt - 1] = 0  # the missing values, over the last checkpoint
            out.spread[r, nt - 1] = np.nan
            out.log_boolean_defect[r, nt - 1] = np.nan


# ---------------------------------------------------------------------------------------------
# Python entry point


def draw_start(rng, init, n, d, box):
    """One trajectory's start (n, d) from its Generator (order: see module docstring)."""
    from ..starts import draw_start as draw

    if init == "box":
        return draw(rng, "box", n, d, half_width=box)
    if init == "gaussian":
        return draw(rng, "gaussian", n, d, std=box)
    return draw(rng, "uniform", n, d, radius=box)


def _square(name, m, d):
    m = np.asarray(m, dtype=np.float64)
    if m.ndim == 0 and d == 1:
        m = m.reshape(1, 1)
    m = np.ascontiguousarray(m)
    if m.shape != (d, d):
        raise ValueError(f"{name} has shape {m.shape}, but d = {d} needs a ({d}, {d}) matrix: "
                         f"pass a {d} x {d} array (a scalar is accepted only for d = 1)")
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{name} contains non-finite entries: {m!r}")
    return m


def _per_head(name, m, d, heads):
    """A (d, d) matrix (every head) or (heads, d, d) ones -> a C-contiguous (heads, d, d) array."""
    arr = np.asarray(m, dtype=np.float64)
    if arr.ndim == 3:
        if arr.shape[0] != heads:
            raise ValueError(f"{name} holds {arr.shape[0]} matrices, but heads = {heads}: pass one "
                             f"({d}, {d}) matrix for every head or {heads} of them")
        return np.ascontiguousarray([_square(f"{name}[{h}]", arr[h], d) for h in range(heads)])
    # a copy, not the read-only broadcast view: numba compiles the kernel once more for every
    # read-only/writable or C/strided combination of V, Q and K it is given (~8-20 s each,
    # measured; a copy of a broadcast view keeps its strides unless asked for C order)
    return np.array(np.broadcast_to(_square(name, arr, d), (heads, d, d)), order="C")


def invertible_step(v_sum, h):
    """Whether R = I + h V is invertible well enough for Remark 4's frame (cond < MAX_CONDITION)."""
    r = np.eye(len(v_sum)) + h * np.asarray(v_sum, dtype=np.float64)
    with np.errstate(all="ignore"):
        return bool(np.linalg.cond(r) < MAX_CONDITION)


def simulate_euclidean_flow(rngs, *, n, d, beta=1.0, T, layers, checkpoint_layers, V, Q=None,
                            K=None, heads=1, integrator="euler", init="box", box=5.0, eps=1e-3,
                            keep_values=False, return_states=False, x0=None):
    """Integrate the unnormalised attention flow for one grid cell and a block of trajectories.

    rngs: sequence of numpy Generators, one per trajectory (each draws its own start, and V).
    n, d: tokens and dimension (d = 1 allowed). beta: inverse temperature. T: final time.
    layers: number of steps, h = T / layers. checkpoint_layers: sorted unique int step counts
    (0 allowed), last == layers. heads: H. V: a (d, d) matrix (every head), (H, d, d) ones, or
    the name of a random ensemble drawn per trajectory and head (`VALUE_ENSEMBLES`). Q, K: the
    same shapes, default I (scalars for d = 1). integrator: "euler" | "rk4" | "discrete".
    init: "box" | "gaussian" | "uniform_sphere"; box: its scale. eps: relative cluster threshold
    (see module docstring). x0: or the (ntraj, n, d) starts, drawn before (`kernels/starts.py`);
    then init, box are not read. keep_values: also return "V", each trajectory's (H, d, d) values.
    return_states: also return "states", z at every checkpoint (ntraj, nt, n, d), NaN from a
    trajectory's non-finite checkpoint on (its last may be finite where only P(T) was not).

    Returns {name: array} per `OUTPUTS`: n_clusters (ntraj, nt) int16, spread and
    log_boolean_defect (ntraj, nt), nonfinite (ntraj,), z_final (ntraj, n, d), P_final
    (ntraj, n, n).

    >>> import numpy as np
    >>> rngs = [np.random.default_rng(s) for s in range(2)]
    >>> out = simulate_euclidean_flow(rngs, n=8, d=2, T=10.0, layers=100,
    ...                               checkpoint_layers=[50, 100], V=np.eye(2))
    >>> out["n_clusters"].shape, out["z_final"].shape, bool(out["nonfinite"].any())
    ((2, 2), (2, 8, 2), False)
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n = {n!r}, but n must be an integer >= 1")
    if int(d) != d or d < 1:
        raise ValueError(f"d = {d!r}, but d must be an integer >= 1 (d = 1 is allowed)")
    n, d = int(n), int(d)
    if int(heads) != heads or heads < 1:
        raise ValueError(f"heads = {heads!r}, but heads must be an integer >= 1")
    heads = int(heads)
    if not (np.isfinite(T) and T > 0):
        raise ValueError(f"T = {T!r}, but T must be finite and > 0")
    if int(layers) != layers or layers < 1:
        raise ValueError(f"layers = {layers!r}, but layers must be an integer >= 1 (h = T/layers)")
    if not np.isfinite(beta):
        raise ValueError(f"beta = {beta!r} is not finite")
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps = {eps!r}, but eps must be finite and >= 0")
    if integrator not in INTEGRATOR_CODES:
        raise ValueError(f"integrator = {integrator!r}: choose one of {sorted(INTEGRATOR_CODES)}")
    if init not in INIT_KINDS:
        raise ValueError(f"init = {init!r}: choose one of {list(INIT_KINDS)}")
    if not (np.isfinite(box) and box > 0):
        raise ValueError(f"box = {box!r}, but the start scale must be finite and > 0")
    ckpt = np.asarray(checkpoint_layers, dtype=np.int64).ravel()
    given = np.asarray(checkpoint_layers).ravel()
    if (ckpt.size == 0 or ckpt[0] < 0 or np.any(np.diff(ckpt) <= 0) or ckpt[-1] != layers
            or not np.array_equal(ckpt, given)):
        raise ValueError(f"checkpoint_layers = {given.tolist()}, but "
                         f"they must be sorted unique integers in [0, layers] ending at "
                         f"layers = {layers}")
    drawn = V if isinstance(V, str) else None  # the ensemble's name
    if drawn and V not in VALUE_ENSEMBLES:
        raise ValueError(f"V = {V!r}: give a matrix or one of the ensembles {list(VALUE_ENSEMBLES)}")
    V = None if drawn else _per_head("V", V, d, heads)
    Q = _per_head("Q", np.eye(d) if Q is None else Q, d, heads)
    K = _per_head("K", np.eye(d) if K is None else K, d, heads)
    scheme = INTEGRATOR_CODES[integrator]
    h = float(T) / int(layers)
    if scheme == DISCRETE and not drawn and not invertible_step(V.sum(axis=0), h):
        raise ValueError(f"integrator = 'discrete' needs R = I + hV invertible, but it is singular "
                         f"for h = {h:g}: raise layers (smaller h)")

    rngs = list(rngs)
    ntraj = len(rngs)
    out = allocate_outputs(ntraj, ckpt.size, EuclideanFlowOutcomes,
                           shapes={"z_final": (n, d), "P_final": (n, n)})
    z = out.z_final  # the state, integrated in place
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.shape != (ntraj, n, d) or not np.all(np.isfinite(x0)):
            raise ValueError(f"x0 has shape {x0.shape}, but (ntraj, n, d) = {(ntraj, n, d)} finite "
                             "starts are needed")
    values = np.empty((ntraj, heads, d, d)) if drawn else np.broadcast_to(V, (ntraj, heads, d, d))
    for r, rng in enumerate(rngs):
        z[r] = draw_start(rng, init, n, d, float(box)) if x0 is None else x0[r]
        if drawn:
            for hh in range(heads):
                draw_matrix(rng, ENSEMBLE_CODES[drawn], values[r, hh])
    thr = np.array([eps * initial_radius(z[r]) for r in range(ntraj)])
    states = np.full((ntraj, ckpt.size if return_states else 0, n, d), np.nan)
    # one block for shared matrices, one trajectory at a time for drawn ones
    blocks = [slice(r, r + 1) for r in range(ntraj)] if drawn else [slice(0, ntraj)]
    for block in blocks:
        v = np.array(values[block.start], order="C")  # writable, C-ordered: as Q, K (`_per_head`)
        if scheme == DISCRETE and not invertible_step(v.sum(axis=0), h):
            out.nonfinite[block] = True  # R singular for this draw: no z frame (module docstring)
            z[block] = np.nan
            continue
        part = out if block == slice(0, ntraj) else EuclideanFlowOutcomes(*(a[block] for a in out))
        integrate_block(part, 0.0, v, Q, K, float(beta), h, ckpt, scheme, thr[block], states[block])
    result = out._asdict()
    if return_states:
        result["states"] = states
    if keep_values:
        result["V"] = np.array(values)
    return result
