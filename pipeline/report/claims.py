r"""A claim of a paper checked on a cube: the record every claims table shows, and the verdicts.

A `Claim` says which statement it checks (`claim`, `source`: the paper and its number), what the cube
measured (`measured`), what the statement expects (`expected`: a closed form, a bound, an invariant, a
sign, a monotonicity) and the `verdict`:

* `holds` / `fails`: the statement was judged on the cube's numbers (its statistics in `detail`);
* `hypothesis not met`: the theorem's hypotheses, checked on the cube's own starts and parameters,
  do not hold, so its conclusion is not judged (what was measured is still shown);
* `not checked: WHY`: the cube cannot judge it (why, in a few words).

The checks of one entry are functions ``(ReportInput) -> Claim`` declared per paper
(`claims_f26`, `claims_glprp`, `claims_glpre`, `claims_rst`) and collected by `claims_table`.
The helpers here turn the usual statistics into a verdict:

* `every_trajectory`: a statement made for every trajectory is judged on every trajectory: it holds
  when it holds on all of them; the detail gives the fraction, the worst trajectory and the exact
  (Clopper-Pearson) upper bound on the fraction of starts where it fails;
* `binomial_claim`: a probability against its expected value or bound, with the Wilson interval;
* `cells_claim`: one judgement per cell (each at `CELL_LEVEL`), holding when no more cells miss than
  a binomial(m, 1 - CELL_LEVEL) count would at `CELL_LEVEL` (the coverage of m intervals, honest).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from ..analysis.stats import wilson_interval
from .tables import fmt

__all__ = ["Claim", "HOLDS", "FAILS", "NOT_MET", "not_checked", "verdict_kind", "every_trajectory",
           "binomial_claim", "cells_claim", "exact_upper", "number", "CELL_LEVEL", "KINDS"]

HOLDS, FAILS, NOT_MET = "holds", "fails", "hypothesis not met"
KINDS = (HOLDS, FAILS, NOT_MET, "not checked")  # the four counts of an index row
CELL_LEVEL = 0.99  # the level of one cell's interval in `cells_claim`


def not_checked(why: str) -> str:
    """The verdict of a claim the cube cannot judge: 'not checked: why'."""
    return f"not checked: {why}"


def verdict_kind(verdict: str) -> str:
    """One of KINDS for a verdict.

    >>> verdict_kind("not checked: no such output"), verdict_kind("holds")
    ('not checked', 'holds')
    """
    return "not checked" if verdict.startswith("not checked") else verdict


@dataclass(frozen=True)
class Claim:
    """One row of a claims table (module docstring)."""

    claim: str
    source: str
    measured: str
    expected: str
    verdict: str
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def with_detail(self, detail: str) -> "Claim":
        return replace(self, detail=detail)


def exact_upper(failures: int, n: int, level: float = 0.95) -> float:
    """Exact (Clopper-Pearson) one-sided upper bound on a probability with `failures` in n.

    >>> round(exact_upper(0, 16), 4)   # no failure in 16: the probability is below 0.17
    0.1707
    """
    from scipy import stats

    if n <= 0:
        return float("nan")
    return 1.0 if failures >= n else float(stats.beta.ppf(level, failures + 1, n - failures))


def number(x) -> str:
    """A count as an integer, any other value as `tables.fmt` writes it.

    >>> number(2.0), number(0.25)
    ('2', '0.2500')
    """
    return str(int(x)) if np.isfinite(x) and float(x).is_integer() else fmt(x)


def every_trajectory(claim: str, source: str, expected: str, ok, worst, what: str,
                     worst_fmt=number, largest_is_worst: bool = True) -> Claim:
    """Judge a statement on every counted trajectory: `ok` (bool, one per trajectory), `worst`
    (the per-trajectory quantity whose extreme is reported: its largest, or smallest when
    `largest_is_worst` is False), `what` names that quantity."""
    ok, worst = np.asarray(ok, bool).ravel(), np.asarray(worst, float).ravel()
    n, k = ok.size, int(ok.sum())
    if n == 0:
        return Claim(claim, source, "no counted trajectory", expected, not_checked("no trajectory"))
    finite = worst[np.isfinite(worst)]
    extreme = (finite.max() if largest_is_worst else finite.min()) if finite.size else float("nan")
    measured = f"{k} of {n} trajectories; worst {what} {worst_fmt(extreme)}"
    detail = (f"95% upper bound (Clopper-Pearson) on the fraction of starts where it fails: "
              f"{fmt(exact_upper(n - k, n), 3)}")
    return Claim(claim, source, measured, expected, HOLDS if k == n else FAILS, detail)


def binomial_claim(claim: str, source: str, k: int, n: int, expected_text: str, low: float = 0.0,
                   high: float = 1.0, level: float = CELL_LEVEL) -> Claim:
    """A probability k / n against the range [low, high] it is expected in: holds when its Wilson
    interval at `level` meets the range."""
    if n <= 0:
        return Claim(claim, source, "no counted trajectory", expected_text, not_checked("no trajectory"))
    lo, hi = (float(v) for v in wilson_interval(k, n, level))
    verdict = HOLDS if hi >= low - 1e-12 and lo <= high + 1e-12 else FAILS
    return Claim(claim, source, f"{k} of {n} = {fmt(k / n, 3)}, {level:.0%} Wilson [{fmt(lo, 3)}, {fmt(hi, 3)}]",
                 expected_text, verdict)


def allowed_misses(m: int, level: float = CELL_LEVEL) -> int:
    """Cells that may miss their `level` interval by chance among m, at the same level.

    >>> allowed_misses(1), allowed_misses(100)
    (0, 4)
    """
    from scipy import stats

    return int(stats.binom.ppf(level, m, 1 - level)) if m > 0 else 0


def cells_claim(claim: str, source: str, expected: str, ok, labels, what: str = "cells",
                extra: str = "", chance: bool = True) -> Claim:
    """One judgement per cell (`ok`, each at CELL_LEVEL): holds when the cells that miss are no
    more than chance allows (`allowed_misses`); with `chance` False (a deterministic check: a
    bound on an integrator's error) none may miss. `labels` name the cells for the detail."""
    ok = np.asarray(ok, bool).ravel()
    m, k = ok.size, int(ok.sum())
    if m == 0:
        return Claim(claim, source, f"no {what}", expected, not_checked(f"no {what} to judge"))
    allowed = allowed_misses(m) if chance else 0
    missed = [str(label) for label, good in zip(labels, ok) if not good]
    detail = ((f"each {what[:-1] if what.endswith('s') else what} at {CELL_LEVEL:.0%}; up to {allowed} of {m} "
               "may miss by chance") if chance else "a deterministic bound: every one must meet it") + \
        (f"; missed: {'; '.join(missed[:6])}" if missed else "") + \
        (f"{'...' if len(missed) > 6 else ''}") + (f"; {extra}" if extra else "")
    return Claim(claim, source, f"{k} of {m} {what} agree", expected, HOLDS if m - k <= allowed else FAILS, detail)
