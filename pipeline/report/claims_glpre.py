r"""The claims of [GLPR-E] (Geshkovski et al., "The emergence of clusters in self-attention
dynamics") per catalog entry (`claims`): the flow in R^d's leaders and polytopes (Thm 3.1, Figs. 4-6,
8), Boolean attention in d = 1 (Thm 2.1) and the collapse of V = -I (Thm C.5). Each statement about
the final state is judged on every trajectory. Line 199's share of real Ginibre V at d = 128 that meet
Definition 1 (`theory.good_triple`) is a Monte Carlo on matrices, not on the cube: a row of
glpre-fig6 (Thm 4.1's figure), with `GINIBRE_DRAWS` draws per scale from the spec's seed.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..analysis.boolean_rate import rate_table
from ..analysis.geometry import hull_growth, spread_exponent
from ..analysis.stats import closed_form as model_form
from ..analysis.stats import done_finite
from ..plugin import ReportInput
from ..spec.scales import SCALES
from ..theory.good_triple import GINIBRE_D, GINIBRE_SHARE, ginibre_leading_share, good_triple
from .claims import CELL_LEVEL, FAILS, HOLDS, NOT_MET, Claim, binomial_claim, cells_claim, every_trajectory, not_checked
from .claims_common import fixed, per_trajectory
from .tables import fmt

__all__ = ["CLAIMS", "GINIBRE_DRAWS", "share_verdict", "ginibre_good_share"]

# matrices drawn by line 199's row per scale: ~5-10 ms each at d = 128 on one core; the small
# scale's interval is wide (+-0.06), the paper scale's resolves the stated percent (+-0.007)
GINIBRE_DRAWS = {"small": 200, "paper": 20000}


def final(name: str, claim: str, source: str, expected: str, test, what: str, largest_is_worst=True):
    """A statement about a per-trajectory output at T, judged on every trajectory."""
    def judge(values):
        v = values.reshape(values.shape[0], -1)[:, -1]
        return test(v), v
    return per_trajectory(claim, source, expected, name, judge, what, largest_is_worst=largest_is_worst)


def boolean_slope(report: ReportInput) -> Claim:
    """Thm 2.1: log(-log D(t)) is a straight line of slope V: the locked trajectories' mean slope's
    t-interval meets the derived range for the finite window."""
    claim, source = "P(t) turns Boolean doubly exponentially: log(-log D) has slope V", "[GLPR-E] Thm 2.1"
    rate = model_form(report.ds, "boolean_rate")
    table = None if rate is None else rate_table(report.ds, rate, report.level)
    if table is None:
        return Claim(claim, source, "—", "slope V", not_checked("no d = 1 cell or too few checkpoints"))
    ok = ((table.hi >= table.bound_lo) & (table.lo <= table.bound_hi)).values
    parts = [f"{int(c.n_locked)} of {int(c.n_traj)} locked, slope {fmt(float(c.slope))} "
             f"[{fmt(float(c.lo))}, {fmt(float(c.hi))}] vs [{fmt(float(c.bound_lo), 3)}, {fmt(float(c.bound_hi), 3)}]"
             for c in (table.isel(cell=k) for k in range(table.sizes["cell"]))]
    return cells_claim(claim, source, "the locked trajectories' mean slope (95 % t) meets the derived range",
                       ok, parts, "cells", "; ".join(parts))


def collapse_rate(report: ReportInput) -> Claim:
    """Thm C.5: V = -I collapses to 0 at the rate t^-1/2: every trajectory's spread exponent
    log(spread(T) / spread(T/2)) / log 2 lies within 0.05 of -1/2."""
    ds = report.ds
    exponent = spread_exponent(ds)
    keep = done_finite(ds, exponent)
    values = exponent.values[keep.values]
    ok = np.abs(values + 0.5) <= 0.05
    return every_trajectory("V = -I collapses every token to 0 at the rate t^-1/2", "[GLPR-E] Thm C.5",
                            "spread exponent over [T/2, T] within 0.05 of -1/2", ok, np.abs(values + 0.5),
                            "|exponent + 1/2|", worst_fmt=lambda x: f"{x:.3g}")


# an Euler (or discrete-transformer) step with h <= 1 is a convex combination of the tokens: the
# hull's growth in the kernel is rounding only, ~1e-15 of the radius per step
HULL_TOL = 1e-9


def hull_shrinks(report: ReportInput) -> Claim:
    """Prop. C.2: for V = I the hull of the rescaled tokens never grows: on every trajectory no
    recorded z(t_c) lies beyond conv z(t_{c-1}) by more than rounding (`HULL_TOL` of the radius).
    Exact for the Euler and discrete steps with h <= 1 (convex combinations); RK4's are not."""
    claim, source = "V = I: the convex hull of the rescaled tokens shrinks", "[GLPR-E] Prop. C.2"
    expected = f"z(t_c) in conv z(t_(c-1)) at every checkpoint: growth <= {HULL_TOL:g} of the radius"
    ds, sweep = report.ds, report.sweep
    if "states" not in ds:
        return Claim(claim, source, "—", expected, not_checked("the cube has no states: add record: [states]"))
    if sweep.V != "identity":
        return Claim(claim, source, "—", expected, NOT_MET, f"V = {sweep.V}, not I")
    if sweep.integrator == "rk4" or sweep.time.h > 1:
        return Claim(claim, source, "—", expected, not_checked(
            f"{sweep.integrator} with h = {sweep.time.h:g}: exact only for euler or discrete steps with h <= 1"))
    growth = hull_growth(ds)
    keep = done_finite(ds, growth).broadcast_like(growth).transpose(*growth.dims) & growth.notnull()
    values = growth.values[keep.values]
    return every_trajectory(claim, source, expected, values <= HULL_TOL, values, "growth / radius",
                            worst_fmt=lambda x: f"{x:.2g}")


def mostly_two(source: str, what: str = "lines"):
    def check(report: ReportInput) -> Claim:
        ds = report.ds
        values = ds["n_psi1_values"].where(done_finite(ds, ds["n_psi1_values"])).values.ravel()
        values = values[np.isfinite(values)]
        return binomial_claim(f"mostly 2 parallel {what}", source, int((values == 2).sum()), values.size,
                              "more than half of the trajectories", 0.5, 1.0)
    return check


def on_good_triple(check):
    """Thm 4.1's conclusion `check`, judged where the spec's one (Q, K, V) is a good triple (Def. 1,
    `theory.good_triple`); `hypothesis not met` where it is not (a complex leading pair, a negative
    or repeated leading eigenvalue, <Q φ_1, K φ_1> <= 0). A V drawn per trajectory is left to the
    cube (the model stores -1 for a draw that is no good triple)."""
    def judged(report: ReportInput) -> Claim:
        claim, sweep = check(report), report.sweep
        if isinstance(sweep.V, str) or sweep.heads != 1:
            return claim
        if good_triple(sweep.V, sweep.Q, sweep.K):
            return claim
        values = ", ".join(f"{v:.3g}" for v in sorted(np.linalg.eigvals(np.asarray(sweep.V, float)), key=abs)[::-1])
        return replace(claim, verdict=NOT_MET,
                       detail=f"Def. 1 fails for the spec's (Q, K, V): eigenvalues of V {values}")
    return judged


def share_verdict(k: int, n: int, share: float, precision: float = 0.005, level: float = CELL_LEVEL):
    """(verdict, low, high): `holds` when the Clopper-Pearson interval of k in n at `level` meets
    [share - precision, share + precision], a percentage read at its stated precision.

    >>> share_verdict(28, 200, 0.14)[0], share_verdict(28, 200, 0.30)[0]
    ('holds', 'fails')
    """
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(level, method="exact")
    meets = ci.high >= share - precision and ci.low <= share + precision
    return (HOLDS if meets else FAILS), float(ci.low), float(ci.high)


def ginibre_good_share(report: ReportInput) -> Claim:
    """Line 199: about 14 % of real Ginibre V at d = 128 meet Definition 1's condition on V (the
    leading eigenvalue real, positive, simple), judged by `share_verdict` to the percent."""
    stem, _, scale = report.sweep.name.rpartition("-")
    draws = GINIBRE_DRAWS[scale if stem and scale in SCALES else "small"]
    k = ginibre_leading_share(GINIBRE_D, draws, report.sweep.seed)
    verdict, low, high = share_verdict(k, draws, GINIBRE_SHARE)
    return Claim(f"about {GINIBRE_SHARE:.0%} of real Ginibre V at d = {GINIBRE_D} have a real, positive, "
                 "simple leading eigenvalue (Def. 1's condition on V)", "[GLPR-E] §4, line 199 / Def. 1",
                 f"{k} of {draws} = {fmt(k / draws, 3)}, {CELL_LEVEL:.0%} Clopper-Pearson "
                 f"[{fmt(low, 3)}, {fmt(high, 3)}]", "13.5 % to 14.5 % (about 14 %, to the percent)",
                 verdict, f"V with i.i.d. N(0, 1) entries, seed {report.sweep.seed}, {draws} draws at this "
                 "scale; with Q, K Ginibre too, <Q φ_1, K φ_1> > 0 with probability 1/2 (independent Gaussian "
                 "vectors), so good triples are half as many; a Monte Carlo on matrices, not on the cube")


def remark3(report: ReportInput) -> Claim:
    """Remark 3: how many layers clustering takes depends on the starts' typical modulus (the flow
    is not scale invariant): the settle times differ across the start_scale axis, a Kruskal-Wallis
    test at 1 % per value of the other axes (`report.start_scale`)."""
    from .start_scale import scale_test, settle_table

    claim = "how fast the tokens cluster depends on the typical modulus of the starts"
    source, expected = "[GLPR-E] Remark 3", "settle times differ across start_scale: Kruskal-Wallis p < 0.01"
    table = settle_table(report.ds)
    if table is None:
        return Claim(claim, source, "—", expected, not_checked("no start_scale axis (or no n_clusters)"))
    tests = scale_test(table)
    medians = "; ".join(f"{label or 'grid'}: median t " + ", ".join(
        f"{fmt(float(np.median(t)), 3)} (×{s:g})" for s, t in series) for label, _, series in tests)
    ps = [p for _, p, _ in tests]
    verdict = HOLDS if ps and all(p < 0.01 for p in ps) else FAILS
    return Claim(claim, source, medians, expected, verdict, "p = " + ", ".join(f"{p:.2g}" for p in ps))


CLAIMS = {
    "glpre-remark3": (remark3,),
    "glpre-conj42": (final("codim_values", "the tokens end near at most 3 parallel subspaces of codimension k "
                           "(k = 2 positive eigenvalues: lines along e3)", "[GLPR-E] Conj. 4.2 / Fig. 7a",
                           "1 to 3 distinct projections of z(T) onto V's positive eigenspace on every trajectory",
                           lambda v: (v >= 1) & (v <= 3), "count"),
                     fixed("the same at n = 256, d = 128 with a symmetric random V", "[GLPR-E] Conj. 4.2 / Figs. 7b, 15",
                           "per-eigen-coordinate variance over tokens -> 0",
                           "its smallest positive eigenvalues are near 0 and set the rate (measured: no "
                           "projection merged by T = 100 at d = 16, GOE); Fig. 15's coordinates over t "
                           "need z per checkpoint (record: [states]) at d = 128, not run here")),
    "glpre-hull": (hull_shrinks,),
    "glpre-polytope": (final("centres_on_hull", "V = I: the rescaled tokens converge to the vertices of a polytope",
                             "[GLPR-E] Thm 3.1 / Fig. 5", "every cluster centre of z(T) a hull vertex",
                             lambda v: v.astype(bool), "on hull (0/1)", largest_is_worst=False),),
    "glpre-fig6": (final("n_psi1_values", "tokens end on 2, at most 3, lines normal to ψ_1", "[GLPR-E] Fig. 6",
                         "2 or 3 distinct ψ_1 values on every trajectory", lambda v: (v >= 2) & (v <= 3),
                         "count"), mostly_two("[GLPR-E] Fig. 6"), ginibre_good_share),
    "glpre-fig13": (on_good_triple(final("n_psi1_values", "R^3: tokens end on at most 3 planes normal to ψ_1",
                                         "[GLPR-E] Thm 4.1 / Figs. 13-14", "1 to 3 distinct ψ_1 values on "
                                         "every trajectory", lambda v: (v >= 1) & (v <= 3), "count")),
                    on_good_triple(mostly_two("[GLPR-E] Thm 4.1 / Figs. 13-14", "planes"))),
    "glpre-fig8": (final("codim_on_boundary", "the (x1, x2) projections of z end on the boundary of a polytope, "
                         "or at 0", "[GLPR-E] Thm 5.1 / Fig. 8", "every projection onto V's positive eigenspace "
                         "within eps of the boundary of their hull, or of 0, on every trajectory",
                         lambda v: v.astype(bool), "on the boundary (0/1)", largest_is_worst=False),),
    "glpre-boolean-d1": (final("attention_rank", "d = 1: P(t) tends to a Boolean matrix of rank ≤ 3",
                               "[GLPR-E] Thm 2.1 / Fig. 3", "rank of P(T) ≤ 3 on every trajectory",
                               lambda v: v <= 3, "rank"), boolean_slope),
    "glpre-leaders": (final("attention_rank", "leaders: the rank of P(T) is at most 2 (d = 2, V > 0, Q > 0)",
                            "[GLPR-E] Fig. 4", "rank of P(T) ≤ 2 on every trajectory", lambda v: v <= 2, "rank"),),
    "glpre-collapse": (collapse_rate,
                       fixed("sqrt(t) times the rms norm tends to sqrt(d / 2β)", "[GLPR-E] Thm C.5",
                             "sqrt(d / 2β)", "the cube stores the largest norm (spread), not the rms")),
    "glpre-heads": (fixed("two-head discrete-time transformer", "[GLPR-E] §6", "—",
                          "an open question: no theorem; the counts, rank and Booleanness are tabulated"),),
}
