r"""Adaptive boundaries: where the probability of an outcome crosses a level, found by a sequential design.

For each value of the other grid axes, P(x) = P(outcome | x) along one axis x (beta, or sigma of the
hybrid model) is assumed monotone on the searched range [x_lo, x_hi] (the spec's smallest and largest
value of that axis). The search returns x* with P(x*) = p, as a bracket [low, high] that holds x*
with probability >= `confidence`, narrowed until high - low <= `width`.

**Design: a shrinking bracket of sequential Wilson tests, new points placed where they decide.** A
point x is *decided* when the Wilson interval of its k (say antipodal) of N trajectories lies wholly
below p (sign -1) or above it (+1); otherwise it is undecided at this N. The bracket [a, b] is the
pair of decided points of opposite sign next to each other. Each round fits a line, weighted by
N, through the empirical probabilities of the points in [a, b] (its crossing x^ and slope P'),
aims at a bracket SHRINK = 4 times narrower, but never narrower than the width: span s =
max(width, (b - a) / 4), and looks at two new points x^ -+ 0.45 s, with the trajectory count
raised (doubling from the spec's) to the N that decides a point at 0.45 s from the crossing,
z sqrt(p (1 - p)) / (|P'| sqrt(N)) = 0.45 s. Both decided, the bracket is 0.9 s wide; one
undecided, it still shrinks, and the next round re-aims. Before a slope is seen (both ends
only), the round looks at the midpoint (bisection). When nothing planned can be decided at N, N
doubles (up to `max_trajectories`). Why this design:

* a look at N trajectories goes to the cell's store of N (`CountStores`: a store computes every
  point at its trajectory count, so one store for all counts would compute every earlier point
  again at each doubled N, 2.8x cheaper than a dense grid where one per count is 6x); still, a
  point costs N, so the design must need few points: two per round for a four-fold shrink, the
  rate of bisection (one point, two-fold);
* pure bisection is a poor fit for a noisy sign: once the bracket is a few noise bands wide, its
  midpoint falls inside the band around x* where nothing is decided at N, and each rescue (more
  trajectories, quarter points) adds points. Placing the pair at a chosen distance from x^ with
  the N that decides at that distance keeps points out of the band. The final N is about what
  deciding points at width/2 needs, the N a dense grid of spacing `width` needs at its two points
  next to x*; a dense grid pays it at (x_hi - x_lo) / width + 1 points, the search at about
  2 + 2 log4((x_hi - x_lo) / width) (`benchmarks/bench_boundary.py`, docs/open-problems.md);
* no shape of P is assumed for the interval (a logistic fit's interval would be biased where P
  is not logistic, e.g. the linear rise of P(antipodal) from beta_c): the line only says where
  to look, the interval rests on monotonicity and Wilson's normal approximation alone.

**The interval.** Every look (a point tested at some N) is a one-sided test at level
alpha / looks, alpha = 1 - confidence, looks = the budget of looks (`Design.looks`, default 64;
the search stops when it is spent). The bracket misses x* only if some look decided a point on the
wrong side of x*, so by the union bound (which covers the repeated looks at a point as N grows)
it holds x* with probability >= confidence. The one-sided test at alpha' is the two-sided Wilson
interval at level 1 - 2 alpha'.

**The estimate** interpolates linearly between the empirical probabilities at the bracket's ends
(clipped to the bracket; its midpoint when they are equal). `trajectories` counts every trajectory
the cell's store computed.

**Determinism and resumption.** The search is a pure function of the counts it reads, and a look at
(x, N) reads the first N trajectories of x only; a trajectory's numbers depend only on (seed, cell,
trajectory) (`seeds.py`). So rerunning the search replays the same looks on what the store holds
(computing nothing until it reaches what is missing) and reaches the same answer, whether it was
interrupted or not, and whatever the store held beyond.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .analysis.antipodal import antipodal_table, any_antipodal_table
from .analysis.stats import wilson_interval
from .errors import SpecError, StoreError
from .spec.base import SweepBase
from .spec.load import parse_sweep
from .store.cube import open_cube, stored_sweep
from .store.layout import DONE

__all__ = ["Design", "Boundary", "OUTCOMES", "search", "boundary_search", "check_request",
           "default_axis", "boundary_folder"]

# outcome -> (what is counted, in words); counted at the last checkpoint (`count_outcome`)
OUTCOMES = {
    "antipodal": "P(antipodal): cluster_class = 2",
    "single": "P(single cluster): cluster_class = 1",
    "any_pair": "P(at least one antipodal pair): overlap_min <= -1 + eps",
}
SHRINK = 4  # each round aims at a bracket this many times narrower (never below the width)
FINAL_SPAN = 0.9  # the pair's distance, in spans: both decided, the bracket is narrower than aimed at
KEY_DIGITS = 9  # design points are rounded to this many decimals: stable keys and spec values

Counts = dict[float, tuple[int, int]]  # x -> (k, N): k of the first N trajectories show the outcome
Evaluate = Callable[[list[float], int], Counts]


@dataclass(frozen=True)
class Design:
    """The search's settings (module docstring)."""

    level: float
    width: float
    confidence: float = 0.95
    max_trajectories: int = 2**17
    looks: int = 64

    @property
    def z_level(self) -> float:
        """Two-sided Wilson level whose each tail is alpha / looks."""
        return 1 - 2 * (1 - self.confidence) / self.looks

    @property
    def z(self) -> float:
        from scipy import stats  # here: the CLI imports this module, scipy.stats costs ~0.5 s

        return float(stats.norm.ppf(1 - (1 - self.confidence) / self.looks))


@dataclass
class Boundary:
    """One search's answer; `trajectories` counts every trajectory its stores computed."""

    coords: dict
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    trajectories: int = 0
    points: int = 0
    max_n: int = 0
    status: str = "ok"  # ok | width not reached (...) | no crossing in [lo, hi] | ...
    looks: list = field(default_factory=list)  # (x, N, k, sign) in order

    def record(self) -> dict:
        """The JSON record: the other axes' values, then the answer."""
        out = dict(self.coords)
        out.update({k: v for k, v in asdict(self).items() if k not in ("coords", "looks")})
        return out


def sign(k: int, n: int, design: Design) -> int:
    """+1 when P > level, -1 when P < level (each a one-sided test at alpha / looks), else 0."""
    lo, hi = wilson_interval(k, n, design.z_level)
    return 1 if lo > design.level else -1 if hi < design.level else 0


def search(evaluate: Evaluate, start: list[float], n0: int, design: Design,
           coords: dict | None = None) -> Boundary:
    """The noisy bisection of the module docstring. `evaluate(points, N)` returns the counts of the
    first N trajectories at each point (computing them when needed); `start`: the first design
    (at least the two ends of the range), looked at with n0 trajectories."""
    out = Boundary(dict(coords or {}), None, None, None, design.level)
    signs: dict[float, int] = {}
    looked: dict[float, int] = {}  # x -> the N of its last look
    counts: dict[float, tuple[int, int]] = {}
    n = n0

    def look(points: list[float]) -> None:
        for x, (k, m) in evaluate(points, n).items():
            counts[x], looked[x] = (k, m), n
            s = sign(k, m, design)
            out.looks.append((x, n, k, s))
            if s:
                signs[x] = s

    def budget_left(count: int) -> bool:
        return len(out.looks) + count <= design.looks

    points = sorted({_key(x) for x in start})
    lo, hi = points[0], points[-1]
    look(points)
    while lo not in signs or hi not in signs:  # the ends decide the direction
        if 2 * n > design.max_trajectories or not budget_left(2):
            out.status = "an end of the range is undecided at the largest trajectory count"
            return out
        n *= 2
        look([x for x in (lo, hi) if x not in signs])
    if signs[lo] == signs[hi]:
        out.status = f"no crossing in [{lo:g}, {hi:g}]: P is {'above' if signs[lo] > 0 else 'below'} " \
                     "the level at both ends"
        return _finish(out, counts, looked, lo, hi, estimate=False)
    a, b = _bracket(signs, signs[lo])
    while b - a > design.width:
        inside = {x for x in looked if a < x < b}  # all undecided: decided points move a or b
        x_hat, slope = _local_line(counts, a, b, design.level)
        span = max(design.width, (b - a) / SHRINK)
        if slope > 0:  # a pair about the estimated crossing, at the count that decides it
            n = _count_for(slope, n, design, FINAL_SPAN * span / 2)
            plan = _final_pair(x_hat, a, b, FINAL_SPAN * span)
        else:  # no slope seen yet: bisection
            plan = _candidates(a, b, inside)
        fresh = [x for x in plan if looked.get(x) != n]
        if not fresh:  # nothing planned can be decided at this N
            if 2 * n > design.max_trajectories:
                out.status = f"width not reached: nothing inside the bracket is decided at " \
                             f"{n} trajectories (raise --max-trajectories)"
                break
            n *= 2
            fresh = [x for x in plan if x in inside]
        if not budget_left(len(fresh)):
            out.status = "width not reached: the budget of looks is spent"
            break
        look(fresh)
        a, b = _bracket(signs, signs[lo])
    return _finish(out, counts, looked, a, b)


def _local_line(counts: Counts, a: float, b: float, level: float) -> tuple[float, float]:
    """The crossing and slope of the least-squares line (weights N) through the empirical
    probabilities of every point in [a, b]; the bracket's midpoint and 0 when it does not rise
    in the direction of the bracket."""
    xs = np.array([x for x in counts if a <= x <= b])
    k, m = np.array([counts[x] for x in xs], dtype=float).T
    slope, intercept = np.polyfit(xs, k / m, 1, w=np.sqrt(m))
    pa, pb = counts[a][0] / counts[a][1], counts[b][0] / counts[b][1]
    if slope * (pb - pa) <= 0:
        return (a + b) / 2, 0.0
    return float(np.clip((level - intercept) / slope, a, b)), abs(float(slope))


def _count_for(slope: float, n: int, design: Design, distance: float) -> int:
    """The count that decides points at `distance` from the crossing, z sqrt(p (1 - p)) /
    (|P'| N^1/2) = distance, as n times a power of two (at least n, at most max_trajectories)."""
    if slope <= 0:
        return n
    spread = design.z * math.sqrt(design.level * (1 - design.level))
    target = (spread / (slope * distance)) ** 2
    while n < target and 2 * n <= design.max_trajectories:
        n *= 2
    return n


def _final_pair(x_hat: float, a: float, b: float, span: float) -> list[float]:
    """Two points `span` apart about the estimated crossing, inside (a, b)."""
    half = span / 2
    pair = {_key(min(max(x, a), b)) for x in (x_hat - half, x_hat + half)}
    return sorted(x for x in pair if a < x < b)


def _key(x: float) -> float:
    return round(float(x), KEY_DIGITS)


def _bracket(signs: dict[float, int], low_sign: int) -> tuple[float, float]:
    """The first point with the high end's sign, and the last point before it with the low end's."""
    b = min(x for x, s in signs.items() if s == -low_sign)
    a = max(x for x, s in signs.items() if s == low_sign and x < b)
    return a, b


def _candidates(a: float, b: float, inside: set[float]) -> list[float]:
    """The midpoint of the bracket; the quarter points too once it is undecided."""
    mid = _key((a + b) / 2)
    if mid not in inside:
        return [mid]
    return [mid, _key(a + (b - a) / 4), _key(a + 3 * (b - a) / 4)]


def _finish(out: Boundary, counts, looked, a: float, b: float, estimate: bool = True) -> Boundary:
    out.low, out.high = a, b
    out.points = len(counts)
    out.max_n = max(looked.values())
    if estimate:
        (ka, na), (kb, nb) = counts[a], counts[b]
        pa, pb = ka / na, kb / nb
        t = 0.5 if pa == pb else (out.level - pa) / (pb - pa)
        out.estimate = a + float(np.clip(t, 0, 1)) * (b - a)
    else:
        out.low = out.high = None
    return out


# -- through the store: one store per value of the other axes, grown round by round -----------

def default_axis(sweep: SweepBase) -> str:
    """sigma for a model with a sigma axis (the hybrid model's noise), else beta."""
    return "sigma" if "sigma" in sweep.axes and len(sweep.axes["sigma"]) > 1 else "beta"


def check_request(sweep: SweepBase, axis: str, outcome: str, design: Design) -> None:
    """Refuse, with one line naming the option and the fix, what cannot be searched."""
    if not 0 < design.level < 1:
        raise SpecError(f"--level: {design.level:g} is outside (0, 1): give a probability strictly "
                        "between 0 and 1, e.g. --level 0.1")
    if not (design.width > 0 and math.isfinite(design.width)):
        raise SpecError(f"--width: {design.width:g} must be a positive number, e.g. --width 0.05")
    if not 0 < design.confidence < 1:
        raise SpecError(f"--confidence: {design.confidence:g} is outside (0, 1): e.g. --confidence 0.95")
    if axis not in sweep.axes:
        raise SpecError(f"--axis: the spec has no grid axis {axis!r} (it has {', '.join(sweep.axes)}): "
                        "search along beta, or sigma for the hybrid model")
    values = sweep.axes[axis]
    if len(values) < 2:
        raise SpecError(f"grid.{axis}: a single value {values[0]:g}; the search needs a range: give "
                        f"grid.{axis} its two ends (e.g. [0.5, 3.0])")
    if design.width >= values[-1] - values[0]:
        raise SpecError(f"--width: {design.width:g} is not narrower than the range of grid.{axis} "
                        f"[{values[0]:g}, {values[-1]:g}]: give a smaller width")
    if outcome not in OUTCOMES:
        raise SpecError(f"--outcome: unknown {outcome!r}: choose one of {', '.join(OUTCOMES)}")
    if design.max_trajectories < sweep.trajectories:
        raise SpecError(f"--max-trajectories: {design.max_trajectories} is fewer than the spec's "
                        f"{sweep.trajectories} trajectories: raise it")
    from .models import get_model
    from .spec.recording import declared_outputs

    outputs = declared_outputs(get_model(sweep.model), sweep)
    needs = "overlap_min" if outcome == "any_pair" else "cluster_class"
    if needs not in outputs:
        raise SpecError(f"--outcome: {outcome} needs the output {needs}, which model "
                        f"{sweep.model} does not write: choose another outcome")


def boundary_folder(sweep: SweepBase) -> Path:
    """Default folder of a search's stores: beside the spec's store, `NAME.boundary`."""
    store = Path(sweep.store)
    return store.with_name(store.name.removesuffix(".zarr") + ".boundary")


def other_cells(sweep: SweepBase, axis: str) -> list[dict]:
    """Every combination of the other axes' values, in grid order."""
    others = {k: v for k, v in sweep.axes.items() if k != axis}
    return [dict(zip(others, combo)) for combo in itertools.product(*others.values())]


def cell_tag(coords: dict) -> str:
    return "-".join(f"{k}{v:g}" for k, v in coords.items()) or "all"


class StoreEvaluate:
    """`Evaluate` through a store: grow it by the points and trajectories asked for, run the sweep
    (`run(sweep)`, the Prefect flow) when it does not hold them yet, and count the outcome."""

    def __init__(self, sweep: SweepBase, axis: str, coords: dict, outcome: str, path: Path,
                 run: Callable[[SweepBase], None]):
        self.sweep, self.axis, self.coords, self.outcome = sweep, axis, coords, outcome
        self.path, self.run = Path(path), run
        self.sweeps_run = 0

    def __call__(self, points: list[float], n: int) -> Counts:
        if not self._holds(points, n):
            old = stored_sweep(self.path) if (self.path / "zarr.json").is_file() else None
            values = sorted(set(points) | set(old.axes[self.axis] if old else ()))
            self.run(self.spec(values, max(n, old.trajectories if old else 0)))
            self.sweeps_run += 1
            if not self._holds(points, n):
                raise StoreError(f"{self.path}: the sweep left points of {points} at {n} "
                                 "trajectories not done: rerun the same command")
        return self.count(points, n)

    def spec(self, values: list[float], trajectories: int) -> SweepBase:
        """The base spec on this cell, with `values` on the searched axis."""
        data = self.sweep.model_dump(mode="json")
        data["grid"] = {**data["grid"], **{k: [v] for k, v in self.coords.items()},
                        self.axis: list(values)}
        data.update(name=f"{self.sweep.name}-boundary-{cell_tag(self.coords)}", store=str(self.path),
                    trajectories=int(trajectories), partition_traj=self.sweep.partition_traj)
        return parse_sweep(data)

    def _holds(self, points: list[float], n: int) -> bool:
        if not (self.path / "zarr.json").is_file():
            return False
        old = stored_sweep(self.path)
        if old.trajectories < n or not set(points) <= set(old.axes[self.axis]):
            return False
        with open_cube(self.path) as ds:
            status = ds["status"].sel({self.axis: points}).isel(
                block=slice(0, -(-n // old.partition_traj))).values
        return bool((status == DONE).all())

    def count(self, points: list[float], n: int) -> Counts:
        """(k, N) of the first n trajectories at each point, at the last checkpoint."""
        with open_cube(self.path) as ds:
            ds = ds.sel({self.axis: points}).isel(traj=slice(0, n))
            if self.outcome == "any_pair":
                table = any_antipodal_table(ds).isel(t=-1)
                k = table.n_any
            else:
                table = antipodal_table(ds, theory=lambda cells: np.nan)
                k = table.n_antipodal if self.outcome == "antipodal" else table.n_single
            other = [d for d in k.dims if d != self.axis]
            k, total = k.squeeze(other), table.n_traj.squeeze(other)
            return {_key(x): (int(k.sel({self.axis: x})), int(total.sel({self.axis: x})))
                    for x in points}

    def trajectories(self) -> int:
        """Every trajectory the store computed: points x trajectories."""
        if not (self.path / "zarr.json").is_file():
            return 0
        old = stored_sweep(self.path)
        return len(old.axes[self.axis]) * old.trajectories


class CountStores:
    """`Evaluate` through one `StoreEvaluate` store per trajectory count N, ``CELL-N{N}.zarr``:
    a look at (points, N) grows only the store of N, so a point is computed at the counts it is
    looked at, not at every count the search reaches. Trajectory j of a point has the same
    numbers in every store (`seeds.py`), so the counts, and the search, are those of one store."""

    def __init__(self, sweep: SweepBase, axis: str, coords: dict, outcome: str, folder: Path,
                 run: Callable[[SweepBase], None]):
        self.args = (sweep, axis, coords, outcome)
        self.folder, self.tag, self.run = Path(folder), cell_tag(coords), run
        self.stores: dict[int, StoreEvaluate] = {}

    def __call__(self, points: list[float], n: int) -> Counts:
        if n not in self.stores:
            self.stores[n] = StoreEvaluate(*self.args, self.folder / f"{self.tag}-N{n}.zarr",
                                           self.run)
        return self.stores[n](points, n)

    @property
    def sweeps_run(self) -> int:
        return sum(store.sweeps_run for store in self.stores.values())

    def trajectories(self) -> int:
        """Every trajectory the cell's stores computed (in this search or an earlier one)."""
        paths = self.folder.glob(f"{self.tag}-N*.zarr")
        return sum(StoreEvaluate(*self.args, path, self.run).trajectories() for path in paths)


def boundary_search(sweep: SweepBase, design: Design, run: Callable[[SweepBase], None], *,
                    axis: str = "beta", outcome: str = "antipodal", folder: Path | None = None,
                    progress: Callable[[str], None] | None = None) -> list[Boundary]:
    """One search per value of the other axes, each in its own store under `folder`."""
    check_request(sweep, axis, outcome, design)
    folder = Path(folder) if folder else boundary_folder(sweep)
    start = [_key(x) for x in sweep.axes[axis]]
    results = []
    for coords in other_cells(sweep, axis):
        evaluate = CountStores(sweep, axis, coords, outcome, folder, run)
        found = search(evaluate, start, sweep.trajectories, design, coords)
        found.trajectories = evaluate.trajectories()
        results.append(found)
        if progress:
            progress(describe(found, axis))
    return results


def describe(found: Boundary, axis: str = "beta") -> str:
    """One line for people."""
    where = " ".join(f"{k}={v:g}" for k, v in found.coords.items())
    if found.estimate is None:
        return f"{where}: {found.status} ({found.trajectories} trajectories)"
    text = (f"{where}: {axis} = {found.estimate:.4g} in [{found.low:.4g}, {found.high:.4g}] at level "
            f"{found.level:g} ({found.points} points, up to {found.max_n} trajectories each, "
            f"{found.trajectories} in all)")
    return text if found.status == "ok" else f"{text}; {found.status}"
