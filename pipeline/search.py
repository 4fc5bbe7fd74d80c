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
undecided, it still shrinks, and the next round re-aims. Two rules for first looks that are few
and coarse (issue 25): a round before the last raises N at most GROWTH = 2 times (the slope of a
wide bracket's line is a secant that underestimates the local slope, and the N it asks for is
mostly spent on points the next round leaves behind); and once the bracket is narrower than twice
the width, a single point of [b - 0.98 w, a + 0.98 w], the one farthest from x^, ends the search
whatever its sign, at the N that decides it there: cheaper than a pair when it is at least
SINGLE_MIN = 0.32 widths from x^ (cost ~ 1 / distance^2: one point at 0.32 w against two at
0.45 w), otherwise the pair. Before a slope is seen (both ends
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

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .analysis.stats import wilson_interval

__all__ = ["Design", "Boundary", "OUTCOMES", "search", "describe", "key"]

# outcome -> (what is counted, in words); counted at the last checkpoint (`count_outcome`)
OUTCOMES = {
    "antipodal": "P(antipodal): cluster_class = 2",
    "single": "P(single cluster): cluster_class = 1",
    "any_pair": "P(at least one antipodal pair): overlap_min <= -1 + eps",
}
SHRINK = 4  # each round aims at a bracket this many times narrower (never below the width)
FINAL_SPAN = 0.9  # the pair's distance, in spans: both decided, the bracket is narrower than aimed at
GROWTH = 2  # a round before the last raises N at most this many times (module docstring)
SINGLE_REACH = 0.98  # a single point's bracket: at most this many widths
SINGLE_MIN = 0.32  # a single point nearer x^ than this many widths costs more than a pair
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
    legacy: bool = False  # the rounds of 2026-11-26 (no single point, no cap on N): the benchmark's before

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

    points = sorted({key(x) for x in start})
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
        single = None if design.legacy or slope <= 0 else _single(x_hat, a, b, design.width)
        if single is not None:  # one point that ends the search, at the count that decides it
            c, distance = single
            n = _count_for(slope, n, design, distance)
            plan = [c]
        elif slope > 0:  # a pair about the estimated crossing, at the count that decides it
            needed = _count_for(slope, n, design, FINAL_SPAN * span / 2)
            coarse = span > design.width and not design.legacy  # not the last round yet
            n = min(needed, GROWTH * n) if coarse else needed
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


def _single(x_hat: float, a: float, b: float, width: float) -> tuple[float, float] | None:
    """The point that ends the search once decided, and its distance from x_hat: a point of
    [b - w, a + w] (either sign leaves a bracket narrower than w), the one farthest from x_hat;
    None when that interval is empty or its farthest point is nearer than SINGLE_MIN widths."""
    lo, hi = b - SINGLE_REACH * width, a + SINGLE_REACH * width
    if lo > hi:
        return None
    c = lo if abs(lo - x_hat) >= abs(hi - x_hat) else hi
    if abs(c - x_hat) < SINGLE_MIN * width or not a < key(c) < b:
        return None
    return key(c), abs(c - x_hat)


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
    pair = {key(min(max(x, a), b)) for x in (x_hat - half, x_hat + half)}
    return sorted(x for x in pair if a < x < b)


def key(x: float) -> float:
    return round(float(x), KEY_DIGITS)


def _bracket(signs: dict[float, int], low_sign: int) -> tuple[float, float]:
    """The first point with the high end's sign, and the last point before it with the low end's."""
    b = min(x for x, s in signs.items() if s == -low_sign)
    a = max(x for x, s in signs.items() if s == low_sign and x < b)
    return a, b


def _candidates(a: float, b: float, inside: set[float]) -> list[float]:
    """The midpoint of the bracket; the quarter points too once it is undecided."""
    mid = key((a + b) / 2)
    if mid not in inside:
        return [mid]
    return [mid, key(a + (b - a) / 4), key(a + 3 * (b - a) / 4)]


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


def describe(found: Boundary, axis: str = "beta") -> str:
    """One line for people."""
    where = " ".join(f"{k}={v:g}" for k, v in found.coords.items())
    if found.estimate is None:
        return f"{where}: {found.status} ({found.trajectories} trajectories)"
    text = (f"{where}: {axis} = {found.estimate:.4g} in [{found.low:.4g}, {found.high:.4g}] at level "
            f"{found.level:g} ({found.points} points, up to {found.max_n} trajectories each, "
            f"{found.trajectories} in all)")
    return text if found.status == "ok" else f"{text}; {found.status}"
