"""The sphere flow's per-checkpoint outcomes on the device (issue 26 item 2), batched in PyTorch.

The outputs of `sphere.checkpoints.record`, from the float64 overlaps G = X X^T of a batch
(B, n, m) of states: overlap_min / overlap_max / min |overlap| over the pairs i < j, cluster_class
(`outcomes.classify`), frac_close, energy (shifted by beta max G, as `checkpoints.energy`),
n_clusters and in_hemisphere. Only these numbers cross the bus, once per batch (`Outcomes`).

n_clusters: the components of the graph G_ij >= 1 - eps, by its reachability matrix, squared
ceil(log2 n) times (R <- [R R > 0]: paths of length up to 2^k), then counted as the tokens that
are the first of their component (row i's first reachable token is i). Exact, and without a
data-dependent loop.

in_hemisphere: the cheap certificates of `hemisphere.hemisphere_test`, batched: the trajectory's
last certificate, the centroid, the least-squares solution of <w, x_i> = 1 (Cholesky of the
smaller Gram matrix); a certificate proves the answer True (min_i <w, x_i> > 1e-9 |w|). The
trajectories none certifies (0 in or near the hull, rare after the start at n <= d) are marked
UNDECIDED; the host decides them by Wolfe's algorithm (`sphere.gpu`), with their memory.

The overlaps are products on the device, not the serial-in-k sums of `outcomes.gram`: ~1e-16
apart, so only a value within rounding of a threshold can be classified differently.
"""

import math

from ..vocabulary import ANTIPODAL, SINGLE_CLUSTER, UNRESOLVED

HEMISPHERE_TOL = 1e-9  # as `sphere.checkpoints` calls `hemisphere_test`
UNDECIDED = -1  # in_hemisphere left to the host
PER_CHECKPOINT = ("overlap_min", "overlap_max", "cluster_class", "n_clusters", "frac_close",
                  "energy", "in_hemisphere")


def pair_statistics(g, eps, delta):
    """(lo, hi, lo_abs, n_clusters, frac_close) per trajectory of overlaps g (B, n, n) float64,
    as `checkpoints.pair_statistics`."""
    import torch

    batch, n = g.shape[0], g.shape[1]
    if n < 2:
        one = torch.ones(batch, dtype=g.dtype, device=g.device)
        return one, one, one, torch.ones_like(one), one
    i, j = torch.triu_indices(n, n, 1, device=g.device)
    pairs = g[:, i, j]  # (B, n (n - 1) / 2)
    lo, hi = pairs.amin(1), pairs.amax(1)
    lo_abs = pairs.abs().amin(1)
    close = (pairs >= 1.0 - delta).sum(1).to(g.dtype) / pairs.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=g.device)
    reach = ((g >= 1.0 - eps) | eye).to(torch.float32)  # counts < 2^24: exact in float32
    for _ in range(max(1, math.ceil(math.log2(n)))):
        reach = (torch.bmm(reach, reach) > 0).to(torch.float32)
    first = reach.argmax(2)  # the first maximal entry: the component's first token
    clusters = (first == torch.arange(n, device=g.device)).sum(1).to(g.dtype)
    return lo, hi, lo_abs, clusters, close


def classify(lo, lo_abs, eps):
    """`outcomes.classify`, elementwise (float64 codes)."""
    import torch

    antipodal = (lo_abs >= 1.0 - eps) & (lo <= -1.0 + eps)
    cls = torch.where(antipodal, float(ANTIPODAL), float(UNRESOLVED))
    return torch.where(lo >= 1.0 - eps, float(SINGLE_CLUSTER), cls).to(lo.dtype)


def energy(g, beta):
    """`checkpoints.energy` per trajectory of g (B, n, n) float64."""
    import torch

    n = g.shape[1]
    if beta == 0.0:
        return g.sum((1, 2)) / (2.0 * n * n)
    top = beta * (g.flatten(1).amax(1) if beta > 0.0 else g.flatten(1).amin(1))  # max beta g
    acc = torch.exp(beta * g - top[:, None, None]).sum((1, 2))
    return math.copysign(1.0, beta) * torch.exp(top + torch.log(acc / (2.0 * abs(beta) * n * n)))


def _certifies(x, w):
    """min_i <x_i, w> > tol |w| per trajectory (False where w is not finite)."""
    import torch

    lo = torch.bmm(x, w[:, :, None])[:, :, 0].amin(1)
    return lo > HEMISPHERE_TOL * torch.linalg.vector_norm(w, dim=1)


def least_squares_direction(x, g):
    """(B, m) least-squares solutions of x w = 1 (least norm where n <= m), NaN where the Gram
    matrix is numerically singular; g = x x^T (B, n, n)."""
    import torch

    n, m = x.shape[1], x.shape[2]
    if n <= m:
        gram, rhs = g, torch.ones(x.shape[0], n, 1, dtype=x.dtype, device=x.device)
    else:
        gram, rhs = torch.bmm(x.transpose(1, 2), x), x.sum(1)[:, :, None]
    low, info = torch.linalg.cholesky_ex(gram)
    low = torch.where((info == 0)[:, None, None], low, torch.eye(gram.shape[1], dtype=x.dtype,
                                                                 device=x.device))
    sol = torch.cholesky_solve(rhs, low)
    w = torch.bmm(x.transpose(1, 2), sol)[:, :, 0] if n <= m else sol[:, :, 0]
    return torch.where((info == 0)[:, None], w, torch.nan)


def hemisphere(x, g, memory):
    """in_hemisphere per trajectory: 1.0 certified, UNDECIDED where no cheap certificate holds;
    memory (B, m): each trajectory's last certificate (zeros: none), updated in place."""
    import torch

    decided = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    for w in (memory, x.sum(1), least_squares_direction(x, g)):
        new = ~decided & _certifies(x, w)
        memory[new] = w[new]
        decided |= new
    memory[~decided] = 0.0
    return torch.where(decided, 1.0, float(UNDECIDED)).to(x.dtype)


class Outcomes:
    """A batch's per-checkpoint outcomes, kept on the device until `to_host`: one (B, nt, 7)
    float64 tensor (`PER_CHECKPOINT` in order) and the mask of entries written."""

    def __init__(self, batch, nt, m, beta, delta, eps, device):
        import torch

        self.values = torch.zeros(batch, nt, len(PER_CHECKPOINT), dtype=torch.float64,
                                  device=device)
        self.written = torch.zeros(batch, nt, dtype=torch.bool, device=device)
        self.memory = torch.zeros(batch, m, dtype=torch.float64, device=device)
        self.beta, self.delta, self.eps = float(beta), float(delta), float(eps)

    def record(self, x, alive, c):
        """Checkpoint c of the float64 states x (B, n, m); alive (B,) bool: the rows recorded.
        Returns in_hemisphere (B,) (UNDECIDED: for the host)."""
        import torch

        g = torch.bmm(x, x.transpose(1, 2))
        lo, hi, lo_abs, clusters, close = pair_statistics(g, self.eps, self.delta)
        inside = hemisphere(x, g, self.memory)
        self.values[:, c] = torch.stack([lo, hi, classify(lo, lo_abs, self.eps), clusters, close,
                                         energy(g, self.beta), inside], dim=1)
        self.written[:, c] = alive
        return inside

    def to_host(self, out, r0):
        """Write the recorded entries into out's rows r0.. (in_hemisphere: the decided ones)."""
        values, written = self.values.cpu().numpy(), self.written.cpu().numpy()
        rows = slice(r0, r0 + values.shape[0])
        for k, name in enumerate(PER_CHECKPOINT):
            v = values[:, :, k]
            mask = written & (v != UNDECIDED) if name == "in_hemisphere" else written
            target = getattr(out, name)[rows]
            target[mask] = v[mask].astype(target.dtype)
