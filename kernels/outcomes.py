"""Outcome reductions shared by the model kernels: overlaps, cluster class, cluster count, t_hit.

For unit tokens x_1..x_n the overlaps are G_ij = <x_i, x_j>, i < j. At each checkpoint, with
threshold eps (0 < eps < 1):

- overlap_min / overlap_max: min / max of G_ij over pairs i < j (both 1.0 when n = 1);
- cluster_class: 1 single cluster if every G_ij >= 1 - eps; 2 antipodal if every |G_ij| >= 1 - eps
  and at least one G_ij <= -1 + eps; 0 unresolved otherwise (docs/models.md section 4);
- n_clusters: connected components of the graph on tokens with an edge where G_ij >= 1 - eps
  (union-find), so a chain of near neighbours counts as one cluster.

Per trajectory, t_hit is the time of the first checkpoint from which cluster_class stays constant up
to the last checkpoint; NaN when the final class is 0 (unresolved). A trajectory whose state became
non-finite has NaN overlaps, class 0 and n_clusters 0 from the failing checkpoint on.

`OUTPUTS` (`vocabulary.SPHERE_OUTCOMES`) describes every array the sphere models return (ntraj
first, then `t` for per-checkpoint outputs); the store builder turns it into the zarr template.

A kernel receives its outputs as one record, a namedtuple of the arrays (`record_class`), and
writes trajectory r's entries, e.g. out.overlap_min[r, c]. The records of the sphere models also
hold the observables recorded on request (`RECORD_FIELDS`, `observables`), empty when not asked.
`allocate_outputs` fills every array with its spec's `missing` value, so a trajectory that fails
keeps NaN overlaps, class 0 and n_clusters 0 at the checkpoints it never reached without the
kernel writing them. Adding a
per-checkpoint outcome: declare it in `vocabulary`, write it in the record function
(`record_checkpoint`, or the model's own that calls it).
"""

import threading
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)
from .vocabulary import (
    ANTIPODAL,
    HEMISPHERE_DIRECTION,
    OBSERVABLES,
    SINGLE_CLUSTER,
    SPHERE_OUTCOMES,
    UNRESOLVED,
    OutputSpec,
)

__all__ = ["ANTIPODAL", "OUTPUTS", "OutputSpec", "SINGLE_CLUSTER", "SphereOutcomes", "UNRESOLVED"]

OUTPUTS = SPHERE_OUTCOMES
# what the sphere models' records hold beyond their default outputs, allocated empty unless
# recorded (`observables`; states live in the kernels' own states array)
RECORD_FIELDS = {**{k: s for k, s in OBSERVABLES.items() if k != "states"},
                 "direction": HEMISPHERE_DIRECTION}


def record_class(name, outputs, module, optional=None):
    """A namedtuple class with one field per output (in order), its specs in `.specs`.

    optional: further fields {name: OutputSpec} (after the outputs; one already an output is
    left out), allocated empty along t unless recorded (`allocate_outputs`).
    Assign it to `name` at the top level of `module`: numba's cache refers to the class by its
    module and name.
    """
    extra = {k: s for k, s in (optional or {}).items() if k not in outputs}
    cls = namedtuple(name, (*outputs, *extra), module=module)
    cls.specs = {**outputs, **extra}
    cls.optional = frozenset(extra)
    return cls


SphereOutcomes = record_class("SphereOutcomes", OUTPUTS, __name__, RECORD_FIELDS)


def allocate_outputs(ntraj, nt, record=SphereOutcomes, shapes=None, sizes=None, recorded=()):
    """A `record` of arrays, each filled with its spec's missing value: (ntraj, nt) per checkpoint,
    else (ntraj,); then shapes.get(name) (trailing dimensions, e.g. a final state), or one size
    per name in the spec's extra_dims from `sizes` (0 where not given). An optional field of the
    record (`record_class`) not in `recorded` gets nt = 0: nothing to write."""
    shapes, sizes = shapes or {}, sizes or {}

    def shape(name, spec):
        t = (nt if name not in record.optional or name in recorded else 0,)
        trailing = shapes.get(name, tuple(sizes.get(dim, 0) for dim in spec.extra_dims))
        return (ntraj, *(t if spec.per_checkpoint else ()), *trailing)

    return record(*(np.full(shape(name, spec), spec.missing, dtype=spec.dtype)
                    for name, spec in record.specs.items()))


@njit(nogil=True, cache=True)
def gram(x, out):
    """Overlaps of all token pairs. x: (n, d); out: (n, n) output, out[i, j] = <x_i, x_j>."""
    n, d = x.shape
    for i in range(n):
        for j in range(i, n):
            acc = 0.0
            for k in range(d):
                acc += x[i, k] * x[j, k]
            out[i, j] = acc
            out[j, i] = acc


@njit(nogil=True, cache=True)
def overlap_extremes(g):
    """(min, max, min |.|) of g[i, j] over i < j; (1, 1, 1) when n = 1. g: (n, n)."""
    n = g.shape[0]
    if n < 2:
        return 1.0, 1.0, 1.0
    lo = np.inf
    hi = -np.inf
    lo_abs = np.inf
    for i in range(n):
        for j in range(i + 1, n):
            v = g[i, j]
            lo = min(lo, v)
            hi = max(hi, v)
            lo_abs = min(lo_abs, abs(v))
    return lo, hi, lo_abs


@njit(nogil=True, cache=True)
def classify(lo, lo_abs, eps):
    """Cluster class from the minimum overlap and minimum |overlap| (see module docstring)."""
    if lo >= 1.0 - eps:
        return SINGLE_CLUSTER
    if lo_abs >= 1.0 - eps and lo <= -1.0 + eps:
        return ANTIPODAL
    return UNRESOLVED


@njit(nogil=True, cache=True)
def find_root(parent, i):
    """Union-find root of i, halving the path on the way (parent: (n,) int64, modified)."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]  # path halving
        i = parent[i]
    return i


@njit(nogil=True, cache=True)
def union(parent, i, j):
    """Merge the components of i and j; return 1 if they were apart, else 0."""
    ri = find_root(parent, i)
    rj = find_root(parent, j)
    if ri == rj:
        return 0
    parent[rj] = ri
    return 1


@njit(nogil=True, cache=True)
def count_clusters(g, eps):
    """Connected components of the graph with an edge where g[i, j] >= 1 - eps. g: (n, n)."""
    n = g.shape[0]
    parent = np.arange(n)
    count = n
    for i in range(n):
        for j in range(i + 1, n):
            if g[i, j] >= 1.0 - eps:
                count -= union(parent, i, j)
    return count


@njit(nogil=True, cache=True)
def record_checkpoint(x, eps, g_work, out, r, c):
    """Write checkpoint c of trajectory r from its state x (n, d) into the record out.

    g_work: (n, n) scratch, left holding the overlaps (callers reuse them). out: any record with
    the per-checkpoint fields of OUTPUTS, (ntraj, nt) arrays.
    """
    gram(x, g_work)
    record_overlaps(g_work, eps, out, r, c)


@njit(nogil=True, cache=True)
def record_overlaps(g, eps, out, r, c):
    """`record_checkpoint` from the overlaps g (n, n) of the state (kernels that have them)."""
    lo, hi, lo_abs = overlap_extremes(g)
    out.overlap_min[r, c] = lo
    out.overlap_max[r, c] = hi
    out.cluster_class[r, c] = classify(lo, lo_abs, eps)
    out.n_clusters[r, c] = count_clusters(g, eps)


@njit(nogil=True, cache=True)
def resolved_for(out, r, c, window):
    """True if trajectory r had one resolved class (single or antipodal) at checkpoints
    c - window + 1 .. c; always False for window = 0 (early stopping off)."""
    if window < 1 or c + 1 < window:
        return False
    cls = out.cluster_class[r, c]
    if cls == UNRESOLVED:
        return False
    for b in range(c - window + 1, c):
        if out.cluster_class[r, b] != cls:
            return False
    return True


@njit(nogil=True, cache=True)
def carry_forward(out, r, c):
    """Copy trajectory r's per-checkpoint outputs at checkpoint c to every later checkpoint."""
    for b in range(c + 1, out.cluster_class.shape[1]):
        out.overlap_min[r, b] = out.overlap_min[r, c]
        out.overlap_max[r, b] = out.overlap_max[r, c]
        out.cluster_class[r, b] = out.cluster_class[r, c]
        out.n_clusters[r, b] = out.n_clusters[r, c]


@njit(nogil=True, cache=True)
def hit_time(cls, times):
    """First checkpoint time from which cls (nt,) stays constant; NaN if cls[-1] is unresolved."""
    nt = cls.shape[0]
    final = cls[nt - 1]
    if final == UNRESOLVED:
        return np.nan
    c = nt - 1
    while c > 0 and cls[c - 1] == final:
        c -= 1
    return times[c]


@njit(nogil=True, cache=True)
def finish_trajectory(out, r, ok, times):
    """Per-trajectory outputs of trajectory r once it stopped: nonfinite, and t_hit (NaN, the
    missing value, if it failed). times: (nt,) checkpoint times."""
    out.nonfinite[r] = not ok
    if ok:
        out.t_hit[r] = hit_time(out.cluster_class[r], times)


def check_common_arguments(rngs, n, d, beta, T, layers, checkpoint_layers, attention, attentions, eps):
    """Validate the arguments every sphere model shares; return checkpoint_layers as int64 (nt,).

    Messages name the argument, echo the value and say how to fix it.
    """
    for i, rng in enumerate(rngs):
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rngs[{i}] is {type(rng).__name__}, but each trajectory needs a "
                "numpy.random.Generator: pass e.g. [np.random.default_rng(s) for s in seeds]"
            )
    if int(n) != n or n < 1:
        raise ValueError(f"n = {n!r}, but the number of tokens must be an integer >= 1")
    if int(d) != d or d < 2:
        raise ValueError(f"d = {d!r}, but the sphere S^(d-1) needs an integer d >= 2")
    if not np.isfinite(beta):
        raise ValueError(f"beta = {beta!r}, but the inverse temperature must be finite")
    if not (np.isfinite(T) and T > 0):
        raise ValueError(f"T = {T!r}, but the final time must be finite and > 0")
    if int(layers) != layers or layers < 1:
        raise ValueError(f"layers = {layers!r}, but the number of layers must be an integer >= 1")
    if attention not in attentions:
        raise ValueError(f"attention = {attention!r} is unknown: use one of {attentions}")
    if not (0.0 < eps < 1.0):
        raise ValueError(f"eps = {eps!r}, but the clustering threshold needs 0 < eps < 1")
    raw = np.asarray(checkpoint_layers)
    ckpt = raw.astype(np.int64).ravel()
    if (
        ckpt.size == 0
        or not np.array_equal(ckpt, raw.ravel())
        or np.any(np.diff(ckpt) <= 0)
        or ckpt[0] < 1
        or ckpt[-1] != layers
    ):
        raise ValueError(
            f"checkpoint_layers = {raw!r} must be sorted, unique integers in 1..layers ending at "
            f"layers = {layers}: e.g. np.linspace(0, {layers}, nt + 1)[1:].round().astype(int)"
        )
    return ckpt


def check_run_options(stop_when_resolved, resolved_window, threads):
    """Validate early stopping and threads; return (window, threads), window 0 when stopping is off."""
    if int(resolved_window) != resolved_window or resolved_window < 1:
        raise ValueError(f"resolved_window = {resolved_window!r}, but early stopping needs an integer "
                         ">= 1 (consecutive resolved checkpoints)")
    if int(threads) != threads or threads < 1:
        raise ValueError(f"threads = {threads!r}, but it must be an integer >= 1")
    return (int(resolved_window) if stop_when_resolved else 0), int(threads)


def for_each_trajectory(run_one, ntraj, threads):
    """Call run_one(r) for r in range(ntraj), on `threads` threads when > 1.

    run_one must spend its time in a nogil kernel, and each trajectory owns its Generator and
    writes only its own rows of the outputs, so the results do not depend on threads or on which
    thread ran what. Trajectories are handed out one at a time (early-stopped ones are short).
    """
    if threads <= 1 or ntraj <= 1:
        for r in range(ntraj):
            run_one(r)
        return
    lock, todo = threading.Lock(), iter(range(ntraj))

    def worker():
        while True:
            with lock:
                r = next(todo, None)
            if r is None:
                return
            run_one(r)

    with ThreadPoolExecutor(min(threads, ntraj)) as pool:
        for job in [pool.submit(worker) for _ in range(min(threads, ntraj))]:
            job.result()
