"""Unnormalised attention dynamics of tokens in R^d [GLPR-E] (docs/models.md section 3).

Tokens x_1..x_n in R^d (no normalisation), value, query and key matrices V, Q, K (d x d), inverse
temperature beta:

    dx_i/dt = sum_j P_ij V x_j,   P_ij = exp(L_ij) / sum_l exp(L_il),   L_ij = beta <Q x_i, K x_j>.

Because the rows of P sum to one, the rescaled tokens z_i(t) = e^{-tV} x_i(t) obey

    dz_i/dt = V sum_j P_ij (z_j - z_i),    L_ij = beta <Q e^{tV} z_i, K e^{tV} z_j>,

and this is the system integrated (float64), with x_i = e^{tV} z_i recovered where needed. The form
sum_j P_ij (z_j - z_i) is kept (not P z - z, whose rounding does not vanish once tokens merge), and
for V = I an explicit Euler step z_i + h sum_j P_ij (z_j - z_i) = (1 - h) z_i + h sum_j P_ij z_j is
a convex combination for h <= 1, so conv{z} never grows, in discrete time as in continuous time.

e^{tV} is evaluated at every time the scheme needs (t_k = k h; RK4 also t_k + h/2), once per step
for the whole block of trajectories, by scaling and squaring: A = tV / 2^s with |A|_1 <= 1/2, the
Taylor polynomial of degree 18 in Horner form (truncation < 1e-22 relative), then s squarings.
Logits are computed as <(Q e^{tV}) z_i, (K e^{tV}) z_j> with the row maximum subtracted before the
exponential, so that logits of size 1e300 neither overflow nor produce NaN.

Schemes, h = T / layers: explicit Euler (the papers' h = 0.1) and classical RK4.

Initial conditions (drawn by the Python wrapper from each trajectory's own Generator, token-major
C order, one call per trajectory, by `kernels/starts.py`), or given as x0:
    "box":            rng.uniform(-box, box, size=(n, d))     (the papers' U[-5, 5]^d, box = 5)
    "gaussian":       box * rng.standard_normal((n, d))       (i.i.d. N(0, box^2) coordinates)
    "uniform_sphere": g = rng.standard_normal((n, d)), rows scaled to norm box (d = 1: +-box).

Outcomes (`OUTPUTS`, declared in `vocabulary`), ntraj first, `t` second for per-checkpoint ones,
filled into one record of arrays (`outcomes.allocate_outputs`, z_final doubling as the state):
    n_clusters  components of the graph on tokens with an edge where |z_i - z_j| <= eps * r0,
                r0 = max_i |z_i(0) - mean_j z_j(0)| the trajectory's initial radius (1 if r0 = 0);
                z, not x, is the natural frame: for V = I the z_i converge to polytope vertices.
    spread      max_i |x_i(t)|, x = e^{tV} z (for V = -I it decays like t^{-1/2}: compare
                sqrt(t) * spread).
    nonfinite   the state became non-finite; that trajectory is frozen, its later checkpoints keep
                the missing values n_clusters 0 and spread NaN, its z_final and P_final are NaN.
                Never raises.
    z_final     z(T), (ntraj, n, d).   P_final   P(T), (ntraj, n, n): O(n^2) per trajectory.
"""

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from . import vocabulary
from .outcomes import allocate_outputs, record_class, union

EULER = 0
RK4 = 1
INTEGRATOR_CODES = dict(zip(vocabulary.EUCLIDEAN_INTEGRATORS, (EULER, RK4)))
INIT_KINDS = vocabulary.EUCLIDEAN_INITS

OUTPUTS = vocabulary.EUCLIDEAN_FLOW_OUTPUTS
EXTRA_DIMS = vocabulary.EUCLIDEAN_EXTRA_DIMS  # trailing dimensions of z_final, P_final
EuclideanFlowOutcomes = record_class("EuclideanFlowOutcomes", OUTPUTS, __name__)

_TAYLOR_DEGREE = 18


# ---------------------------------------------------------------------------------------------
# numba kernels


@njit(nogil=True, cache=True)
def _matmul(a, b, out):
    """out = a @ b for square (d, d) arrays; out must not alias a or b."""
    d = a.shape[0]
    for i in range(d):
        for j in range(d):
            acc = 0.0
            for k in range(d):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc


@njit(nogil=True, cache=True)
def expm(a, out):
    """Matrix exponential by scaling and squaring with a degree-18 Taylor polynomial.

    a: (d, d) float64 (not modified). out: (d, d) output, e^a.
    """
    d = a.shape[0]
    norm1 = 0.0
    for j in range(d):
        col = 0.0
        for i in range(d):
            col += abs(a[i, j])
        norm1 = max(norm1, col)
    s = 0
    if norm1 > 0.5:
        s = int(np.ceil(np.log2(norm1 / 0.5)))
    scaled = a / 2.0**s
    work = np.empty((d, d))
    # Horner: P = I + A/m (I + A/(m-1) (... (I + A/1 ...)))
    for i in range(d):
        for j in range(d):
            out[i, j] = 1.0 if i == j else 0.0
    for k in range(_TAYLOR_DEGREE, 0, -1):
        _matmul(scaled, out, work)
        for i in range(d):
            for j in range(d):
                out[i, j] = work[i, j] / k + (1.0 if i == j else 0.0)
    for _ in range(s):
        _matmul(out, out, work)
        out[:, :] = work


@njit(nogil=True, cache=True)
def propagators(t, v, q, k, e_out, qe_out, ke_out):
    """e^{tV}, Q e^{tV} and K e^{tV}. v, q, k and outputs: (d, d)."""
    expm(t * v, e_out)
    _matmul(q, e_out, qe_out)
    _matmul(k, e_out, ke_out)


@njit(nogil=True, cache=True)
def _project(z, qe, ke, qz, kz):
    """qz_i = QE z_i, kz_i = KE z_i for the rows of z (n, d)."""
    n, d = z.shape
    for i in range(n):
        for a in range(d):
            acc_q = 0.0
            acc_k = 0.0
            for b in range(d):
                acc_q += qe[a, b] * z[i, b]
                acc_k += ke[a, b] * z[i, b]
            qz[i, a] = acc_q
            kz[i, a] = acc_k


@njit(nogil=True, cache=True)
def attention_matrix(z, qe, ke, beta, qz, kz, p):
    """Row-softmax P of L_ij = beta <QE z_i, KE z_j>, row max subtracted.

    z: (n, d). qe, ke: (d, d) = Q e^{tV}, K e^{tV}. qz, kz: (n, d) work arrays.
    p: (n, n) output.
    """
    n, d = z.shape
    _project(z, qe, ke, qz, kz)
    for i in range(n):
        m = -np.inf
        for j in range(n):
            acc = 0.0
            for a in range(d):
                acc += qz[i, a] * kz[j, a]
            p[i, j] = beta * acc
            if p[i, j] > m:
                m = p[i, j]
        total = 0.0
        for j in range(n):
            w = np.exp(p[i, j] - m)
            p[i, j] = w
            total += w
        for j in range(n):
            p[i, j] /= total


@njit(nogil=True, cache=True)
def velocity(z, qe, ke, v, beta, qz, kz, row, mix, out):
    """Right-hand side dz_i/dt = V sum_j P_ij (z_j - z_i) at the time of qe, ke.

    z: (n, d). qe, ke, v: (d, d). qz, kz, mix: (n, d) work; row: (n,) work.
    out: (n, d) output. Same arithmetic as `attention_matrix`, without storing P.
    """
    n, d = z.shape
    _project(z, qe, ke, qz, kz)
    for i in range(n):
        m = -np.inf
        for j in range(n):
            acc = 0.0
            for a in range(d):
                acc += qz[i, a] * kz[j, a]
            row[j] = beta * acc
            if row[j] > m:
                m = row[j]
        for a in range(d):
            mix[i, a] = 0.0
        total = 0.0
        for j in range(n):
            w = np.exp(row[j] - m)
            total += w
            for a in range(d):
                mix[i, a] += w * (z[j, a] - z[i, a])
        for a in range(d):
            mix[i, a] /= total
    for i in range(n):
        for a in range(d):
            acc = 0.0
            for b in range(d):
                acc += v[a, b] * mix[i, b]
            out[i, a] = acc


@njit(nogil=True, cache=True)
def _all_finite(z):
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
def record(z, e, thr, out, r, c):
    """Checkpoint c of trajectory r with state z (n, d), into the record out: n_clusters of z,
    spread = max_i |e z_i|."""
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


@njit(nogil=True, cache=True)
def integrate_block(out, t0, v, q, k, beta, h, checkpoints, scheme, thr):
    """Integrate a block of trajectories of the z system in place, from time t0.

    out: `EuclideanFlowOutcomes` from `allocate_outputs`. Its z_final (ntraj, n, d) is the state:
    at t0 on entry, at t0 + h * checkpoints[-1] on exit (NaN where nonfinite). t0, beta, h: float.
    v, q, k: (d, d). checkpoints: (nt,) int64 sorted step counts (0 = the entry state), last =
    number of steps. scheme: EULER or RK4. thr: (ntraj,) absolute cluster thresholds (the wrapper
    passes eps * initial_radius). Fills n_clusters, spread, nonfinite (read too: allocated False)
    and P_final.
    Steps run outer and trajectories inner, so e^{tV} is computed once per time for the block.
    """
    z, nonfinite, p_final = out.z_final, out.nonfinite, out.P_final
    ntraj, n, d = z.shape
    layers = checkpoints[-1]
    nt = checkpoints.shape[0]
    e0 = np.empty((d, d))
    qe0 = np.empty((d, d))
    ke0 = np.empty((d, d))
    e_mid = np.empty((d, d))
    qe_mid = np.empty((d, d))
    ke_mid = np.empty((d, d))
    e1 = np.empty((d, d))
    qe1 = np.empty((d, d))
    ke1 = np.empty((d, d))
    qz = np.empty((n, d))
    kz = np.empty((n, d))
    mix = np.empty((n, d))
    row = np.empty(n)
    k1 = np.empty((n, d))
    k2 = np.empty((n, d))
    k3 = np.empty((n, d))
    k4 = np.empty((n, d))
    stage = np.empty((n, d))

    propagators(t0, v, q, k, e0, qe0, ke0)
    c = 0
    if checkpoints[0] == 0:
        for r in range(ntraj):
            record(z[r], e0, thr[r], out, r, 0)
        c = 1
    for step in range(layers):
        propagators(t0 + (step + 1) * h, v, q, k, e1, qe1, ke1)
        if scheme == RK4:
            propagators(t0 + (step + 0.5) * h, v, q, k, e_mid, qe_mid, ke_mid)
        for r in range(ntraj):
            if nonfinite[r]:
                continue
            zr = z[r]
            velocity(zr, qe0, ke0, v, beta, qz, kz, row, mix, k1)
            if scheme == EULER:
                for i in range(n):
                    for a in range(d):
                        zr[i, a] += h * k1[i, a]
            else:
                for i in range(n):
                    for a in range(d):
                        stage[i, a] = zr[i, a] + 0.5 * h * k1[i, a]
                velocity(stage, qe_mid, ke_mid, v, beta, qz, kz, row, mix, k2)
                for i in range(n):
                    for a in range(d):
                        stage[i, a] = zr[i, a] + 0.5 * h * k2[i, a]
                velocity(stage, qe_mid, ke_mid, v, beta, qz, kz, row, mix, k3)
                for i in range(n):
                    for a in range(d):
                        stage[i, a] = zr[i, a] + h * k3[i, a]
                velocity(stage, qe1, ke1, v, beta, qz, kz, row, mix, k4)
                for i in range(n):
                    for a in range(d):
                        zr[i, a] += h / 6.0 * (k1[i, a] + 2.0 * k2[i, a] + 2.0 * k3[i, a]
                                               + k4[i, a])
            if not _all_finite(zr):  # checkpoints c.. keep their missing values
                nonfinite[r] = True
                zr[:, :] = np.nan
        if checkpoints[c] == step + 1:
            for r in range(ntraj):
                if not nonfinite[r]:
                    record(z[r], e1, thr[r], out, r, c)
            c += 1
        e0[:, :] = e1
        qe0[:, :] = qe1
        ke0[:, :] = ke1
    # P(T) from z(T); a non-finite P (e.g. e^{TV} overflowed) also marks the trajectory
    for r in range(ntraj):
        if nonfinite[r]:
            continue  # P_final keeps its missing NaN
        attention_matrix(z[r], qe0, ke0, beta, qz, kz, p_final[r])
        if not _all_finite(p_final[r]):
            nonfinite[r] = True
            p_final[r] = np.nan
            z[r] = np.nan
            out.n_clusters[r, nt - 1] = 0  # the missing values, over the last checkpoint
            out.spread[r, nt - 1] = np.nan


# ---------------------------------------------------------------------------------------------
# Python entry point


def draw_start(rng, init, n, d, box):
    """One trajectory's start (n, d) from its Generator (order: see module docstring)."""
    from .starts import draw_start as draw

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


def simulate_euclidean_flow(rngs, *, n, d, beta=1.0, T, layers, checkpoint_layers, V, Q=None,
                            K=None, integrator="euler", init="box", box=5.0, eps=1e-3, x0=None):
    """Integrate the unnormalised attention flow for one grid cell and a block of trajectories.

    rngs: sequence of numpy Generators, one per trajectory (each draws its own start).
    n, d: tokens and dimension (d = 1 allowed). beta: inverse temperature. T: final time.
    layers: number of steps, h = T / layers. checkpoint_layers: sorted unique int step counts
    (0 allowed), last == layers. V, Q, K: (d, d) (Q = K = I by default; scalars for d = 1).
    integrator: "euler" | "rk4". init: "box" | "gaussian" | "uniform_sphere"; box: its scale.
    x0: or the (ntraj, n, d) starts, drawn before (`kernels/starts.py`); then init, box are not read.
    eps: relative cluster threshold (see module docstring).

    Returns {name: array} per `OUTPUTS`: n_clusters (ntraj, nt) int16, spread (ntraj, nt),
    nonfinite (ntraj,), z_final (ntraj, n, d), P_final (ntraj, n, n).

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
    V = _square("V", V, d)
    Q = np.eye(d) if Q is None else _square("Q", Q, d)
    K = np.eye(d) if K is None else _square("K", K, d)

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
        z[:] = x0
    for r, rng in enumerate(rngs if x0 is None else ()):
        z[r] = draw_start(rng, init, n, d, float(box))
    thr = np.array([eps * initial_radius(z[r]) for r in range(ntraj)])
    integrate_block(out, 0.0, V, Q, K, float(beta), float(T) / int(layers), ckpt,
                    INTEGRATOR_CODES[integrator], thr)
    return out._asdict()
