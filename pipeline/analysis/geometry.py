"""Geometry of final states of the unnormalised flow in R^d [GLPR-E] (docs/models.md section 3).

Post-processing of `z_final` (n, d) and `P_final` (n, n) from `tokensweep.kernels.euclidean_flow`
(they need scipy, which kernels may not import), and `geometry_table`, their summary per cell.

- Clusters: components of the graph with an edge where |z_i - z_j| <= eps * scale (the kernel's
  rule); scale defaults to the radius max_i |z_i - mean z| of the given state (1 when it is 0).
  A centre is the mean of its cluster.
- V = I, Q^T K > 0: the cluster centres are vertices of the polytope conv{z(T)}. Centre c_k is a
  vertex of conv{centres} iff some direction w separates it strictly from the others:
      s_k = max_{|w|_inf <= 1} min_{j != k} <w, c_k - c_j> > tol,
  a small linear programme (scipy.optimize.linprog); d = 1 reduces to "c_k is the min or the max".
- lambda_1(V) > 0 simple: psi_1 is the left eigenvector of V (eigenvector of V^T) for the
  eigenvalue of largest modulus (real, positive, simple, <Q phi_1, K phi_1> > 0), unit norm, first non-zero entry positive; the coordinates
  psi_1^T z_i converge to at most 3 values (typically 2).
- V symmetric with k positive eigenvalues ([GLPR-E] Conj. 4.2, Thm 5.1): the projections of the
  z_i onto their eigenspace F. `positive_values`: how many distinct points they make (the
  conjecture: at most 3 parallel subspaces of codimension k); `on_projected_boundary`: whether every
  one lies within eps * (their radius) of the boundary of their convex hull, or of 0 (Thm 5.1:
  dist(z_i, (boundary of K or 0) x G) -> 0 for a polytope K in F).
- V = I: the hull of z(t) shrinks ([GLPR-E] Prop. C.2; an Euler step with h <= 1 is a convex
  combination, so in the kernel up to rounding). `hull_growth`: per trajectory, the largest
  excess of z(t_c) beyond conv z(t_{c-1}) over the recorded checkpoints (`record: [states]`),
  in units of the first one's radius.
- Rates: the spread exponent log(spread(T) / spread(t_m)) / log(T / t_m), t_m the checkpoint
  nearest T/2 (t_m > 0): -1/2 for V = -I ([GLPR-E] Thm C.5, docs/models.md section 3).
- d = 1: P(t) converges to a Boolean matrix of rank <= 3. Booleanness defect
      min over Boolean B of sum_ij |P_ij - B_ij| = sum_ij min(P_ij, 1 - P_ij);
  numerical rank = number of singular values > rtol * largest.
"""

import numpy as np
import xarray as xr
from scipy.optimize import linprog
from scipy.sparse.csgraph import connected_components
from scipy.spatial import ConvexHull, QhullError
from scipy.spatial.distance import pdist, squareform

from .stats import done_finite, done_mask, flag


def radius(z):
    """max_i |z_i - mean_j z_j| (1 where it is 0): the scale the clusters of z are counted at, as
    the kernel's `initial_radius` on the start."""
    r = np.max(np.linalg.norm(z - z.mean(axis=0), axis=1)) if len(z) else 0.0
    return r if r > 0 else 1.0


def _as_state(z):
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"z has shape {z.shape}, but one state (n, d) is expected: "
                         f"pass z_final[r] for trajectory r")
    return z


def cluster_labels(z, eps=1e-3, scale=None):
    """Cluster label of each token of z (n, d): components of |z_i - z_j| <= eps * scale.

    Returns (labels (n,) int, number of clusters).
    """
    z = _as_state(z)
    thr = eps * (radius(z) if scale is None else scale)
    adjacency = squareform(pdist(z)) <= thr
    count, labels = connected_components(adjacency, directed=False)
    return labels, count


def cluster_centres(z, eps=1e-3, scale=None):
    """Means of the clusters of z (n, d) (see `cluster_labels`): (n_clusters, d)."""
    z = _as_state(z)
    labels, count = cluster_labels(z, eps, scale)
    return np.array([z[labels == c].mean(axis=0) for c in range(count)])


def vertex_margins(points):
    """s_k = max_{|w|_inf <= 1} min_{j != k} <w, p_k - p_j> for each row of points (m, d).

    s_k > 0 iff p_k is a vertex of conv{points} (and differs from every other point).
    A single point gets +inf. The LP runs on the points centred and scaled to unit size (being a
    vertex is affine invariant; the margins are scaled back), so tokens that collapse to a point
    or diverge (V = -I gives z = e^{t} x ~ 1e43 at t = 100) stay within the solver's range.

    >>> (vertex_margins([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.25, 0.25]]) + 0.0).round(3).tolist()
    [0.5, 1.0, 1.0, 0.0]
    >>> (vertex_margins(1e43 * np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])) > 0).tolist()
    [True, True, True]
    """
    points = np.asarray(points, dtype=np.float64)
    m, d = points.shape
    margins = np.full(m, np.inf)
    if m < 2:
        return margins
    size = np.abs(points - points.mean(axis=0)).max()
    if size == 0:
        return np.zeros(m)  # all points coincide: none is a distinct vertex
    points = (points - points.mean(axis=0)) / size
    for k in range(m):
        diffs = points[k] - np.delete(points, k, axis=0)  # (m-1, d)
        # variables (w, s): maximise s subject to s - <w, diffs_j> <= 0, -1 <= w <= 1
        c = np.zeros(d + 1)
        c[-1] = -1.0
        a_ub = np.hstack([-diffs, np.ones((m - 1, 1))])
        res = linprog(c, A_ub=a_ub, b_ub=np.zeros(m - 1),
                      bounds=[(-1.0, 1.0)] * d + [(None, None)], method="highs")
        if res.status != 0:
            raise RuntimeError(f"vertex LP for point {k} failed: {res.message}")
        margins[k] = -res.fun * size
    return margins


def centres_are_hull_vertices(z, eps=1e-3, scale=None, tol=None):
    """Whether every cluster centre of z (n, d) is a vertex of the hull of the centres.

    Equivalently of conv{z(T)} once clusters have collapsed. tol: margin (see module docstring)
    below which a centre counts as not a vertex; default eps * scale. d = 1: whether there are at
    most two clusters (the extremes).
    """
    z = _as_state(z)
    scale = radius(z) if scale is None else scale
    tol = eps * scale if tol is None else tol
    centres = cluster_centres(z, eps, scale)
    if z.shape[1] == 1:
        return len(centres) <= 2
    return bool(np.all(vertex_margins(centres) > tol))


def hull_excess(outer, inner) -> float:
    """How far the points `inner` (m, d) lie outside conv(outer) (n, d): the largest signed distance
    of one beyond a facet's hyperplane (<= 0: every one inside). d = 1: beyond the interval. A flat
    hull (the points on a lower-dimensional set) is measured by a linear programme instead: the
    largest L-infinity distance to the hull (0 inside).

    >>> square = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    >>> hull_excess(square, [[0.5, 0.5], [0.0, 0.0]]), hull_excess(square, [[1.5, 0.5]])
    (0.0, 0.5)
    >>> hull_excess([[0.0, 0.0], [2.0, 0.0]], [[1.0, 0.25]])  # a segment: the LP
    0.25
    """
    outer, inner = np.asarray(outer, dtype=np.float64), np.asarray(inner, dtype=np.float64)
    if outer.shape[1] == 1:
        return float(max(inner.max() - outer.max(), outer.min() - inner.min(), 0.0))
    if len(outer) > outer.shape[1]:
        try:
            eq = ConvexHull(outer).equations  # rows (unit normal, offset): normal . p + offset <= 0 inside
            return float(max(np.max(inner @ eq[:, :-1].T + eq[:, -1]), 0.0))
        except QhullError:
            pass  # flat: below
    n, d = outer.shape
    # variables (lambda (n), s): minimise s with |outer^T lambda - p|_inf <= s, lambda in the simplex
    a_ub = np.vstack([np.hstack([outer.T, -np.ones((d, 1))]), np.hstack([-outer.T, -np.ones((d, 1))])])
    excess = 0.0
    for p in inner:
        res = linprog(np.r_[np.zeros(n), 1.0], A_ub=a_ub, b_ub=np.r_[p, -p],
                      A_eq=np.r_[np.ones(n), 0.0][None], b_eq=[1.0],
                      bounds=[(0.0, None)] * n + [(None, None)], method="highs")
        if res.status != 0:
            raise RuntimeError(f"hull LP failed: {res.message}")
        excess = max(excess, float(res.fun))
    return excess


def hull_growth(ds: xr.Dataset) -> xr.DataArray:
    """Per trajectory (grid..., traj): the largest `hull_excess` of z(t_c) beyond conv z(t_{c-1})
    over consecutive recorded checkpoints, divided by the radius of z at the first one; NaN where
    a state is not finite. Needs `states` (`record: [states]`)."""
    z = ds["states"].transpose(..., "t", "traj", "token", "component")
    values = np.asarray(z.values)
    out = np.full(values.shape[:-4] + values.shape[-3:-2], np.nan)
    for index in np.ndindex(*out.shape):
        states = values[index[:-1] + (slice(None), index[-1])]  # (t, token, component)
        if np.all(np.isfinite(states)):
            steps = (hull_excess(a, b) for a, b in zip(states[:-1], states[1:]))
            out[index] = max(steps, default=0.0) / radius(states[0])
    dims = z.dims[:-4] + ("traj",)
    return xr.DataArray(out, dims=dims, coords={k: z.coords[k] for k in dims})


def top_left_eigenvector(V):
    """psi_1: unit left eigenvector of V for its eigenvalue of largest modulus ([GLPR-E]; sign fixed).

    Raises ValueError when that eigenvalue is not real.
    """
    V = np.atleast_2d(np.asarray(V, dtype=np.float64))
    vals, vecs = np.linalg.eig(V.T)
    top = int(np.argmax(np.abs(vals)))
    if abs(vals[top].imag) > 1e-12 * max(1.0, abs(vals[top])):
        raise ValueError(f"the top eigenvalue of V is {vals[top]}, not real: psi_1 is undefined")
    psi = np.real(vecs[:, top])
    psi = psi / np.linalg.norm(psi)
    first = psi[np.nonzero(np.abs(psi) > 1e-12)[0][0]]
    return psi * np.sign(first)


def psi1_values(z, V, eps=1e-3, scale=None):
    """Distinct values of the coordinate psi_1^T z_i over the tokens of z (n, d), sorted.

    Sorted coordinates are split where consecutive ones differ by more than eps * scale
    (scale: default the radius of z); each value is the mean of its group.
    """
    z = _as_state(z)
    coords = np.sort(z @ top_left_eigenvector(V))
    tol = eps * (radius(z) if scale is None else scale)
    breaks = np.nonzero(np.diff(coords) > tol)[0] + 1
    return np.array([g.mean() for g in np.split(coords, breaks)])


def attention_rank_and_booleanness(P, rtol=1e-6):
    """Numerical rank and Booleanness defect of attention matrices P (..., n, n).

    rank: singular values > rtol * largest. defect: sum_ij min(P_ij, 1 - P_ij), the l1 distance
    to the nearest Boolean matrix. Returns (rank, defect), arrays of the leading shape (scalars
    for one matrix).
    """
    P = np.asarray(P, dtype=np.float64)
    s = np.linalg.svd(P, compute_uv=False)
    rank = np.sum(s > rtol * s[..., :1], axis=-1)
    defect = np.minimum(P, 1.0 - P).sum(axis=(-2, -1))
    if P.ndim == 2:
        return int(rank), float(defect)
    return rank, defect


def geometry_table(ds: xr.Dataset) -> xr.Dataset:
    """Per cell: geometric outcomes at T of the flow in R^d, over counted trajectories."""
    last = ds["n_clusters"].isel(t=-1)
    keep = done_finite(ds, last)
    done = done_mask(ds)
    nonfinite = flag(ds["nonfinite"]) & (xr.ones_like(last, dtype=bool) if done is None else done)
    psi = ds["n_psi1_values"].where(keep & (ds["n_psi1_values"] >= 0))
    t_end = float(ds["t"].values[-1])
    table = xr.Dataset({
        "n_traj": keep.sum("traj"),
        "n_nonfinite": nonfinite.sum("traj"),
        "clusters_mean": last.where(keep).mean("traj"),
        "clusters_max": last.where(keep).max("traj"),
        "p_on_hull": ds["centres_on_hull"].where(keep).mean("traj"),
        "psi1_mean": psi.mean("traj"),
        "p_psi1_le3": (psi <= 3).where(psi.notnull()).mean("traj"),
        "rank_mean": ds["attention_rank"].where(keep).mean("traj"),
        "rank_max": ds["attention_rank"].where(keep).max("traj"),
        "booleanness_max": ds["booleanness"].where(keep).max("traj"),
        "spread_mean": ds["spread"].isel(t=-1).where(keep).mean("traj"),
    }).compute()
    table["sqrtT_spread"] = np.sqrt(t_end) * table.spread_mean
    table["spread_exponent"] = spread_exponent(ds).where(keep).mean("traj").compute()
    table.attrs = {"T": t_end}
    return table


def spread_exponent(ds: xr.Dataset) -> xr.DataArray:
    """Per trajectory, log(spread(T) / spread(t_m)) / log(T / t_m), t_m the checkpoint nearest
    T/2 among those with 0 < t_m < T; NaN when there is none."""
    t = ds["t"].values
    inner = np.flatnonzero((t > 0) & (t < t[-1]))
    if inner.size == 0:
        return xr.full_like(ds["spread"].isel(t=-1), np.nan)
    m = inner[np.argmin(np.abs(t[inner] - t[-1] / 2))]
    ratio = ds["spread"].isel(t=-1) / ds["spread"].isel(t=m)
    return np.log(ratio) / np.log(t[-1] / t[m])


def positive_projection(z, V) -> np.ndarray:
    """The tokens z (n, d) in the coordinates of the eigenvectors of the symmetric V with positive
    eigenvalue: (n, k), k = 0 where there is none."""
    values, vectors = np.linalg.eigh(np.asarray(V, dtype=np.float64))
    return _as_state(z) @ vectors[:, values > 0]


def positive_values(z, V, eps=1e-3) -> int:
    """How many distinct points the projections make (clusters at eps times their radius); -1
    where V has no positive eigenvalue."""
    p = positive_projection(z, V)
    return -1 if p.shape[1] == 0 else int(cluster_labels(p, eps)[1])


def on_projected_boundary(z, V, eps=1e-3) -> bool:
    """Does every projection lie within eps * r of the boundary of their convex hull or of 0
    (r: their largest norm)? A hull with empty interior in R^k is all boundary. False where V has
    no positive eigenvalue.

    >>> square = np.array([[1, 1, 5], [1, -1, 0], [-1, 1, 2], [-1, -1, 7], [0, 0, 1], [1, 0, 3]])
    >>> on_projected_boundary(square, np.diag([1.0, 2.0, -1.0]))   # (0, 0) and an edge point
    True
    >>> on_projected_boundary(np.vstack([square, [0.5, 0.2, 0]]), np.diag([1.0, 2.0, -1.0]))
    False
    """
    from scipy.spatial import ConvexHull, QhullError

    p = positive_projection(z, V)
    if p.shape[1] == 0:
        return False
    tol = eps * max(float(np.max(np.linalg.norm(p, axis=1))), 1e-300)
    if p.shape[1] == 1:
        distance = np.minimum(p[:, 0] - p[:, 0].min(), p[:, 0].max() - p[:, 0])
    else:
        try:
            hull = ConvexHull(p)
        except QhullError:  # the points span less than F: no interior
            return True
        # a x + b <= 0 inside, |a| = 1: a point's distance to the boundary is its smallest |a x + b|
        distance = np.min(np.abs(p @ hull.equations[:, :-1].T + hull.equations[:, -1]), axis=1)
    return bool(np.all((distance <= tol) | (np.linalg.norm(p, axis=1) <= tol)))
