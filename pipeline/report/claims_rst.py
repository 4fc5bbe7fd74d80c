r"""The claims of [RST] (Rodríguez Abella, Silvestre, Tabuada, "The asymptotic behavior of attention
in transformers") per catalog entry (`claims`): Thm 4.1's hemisphere collapse and its Lyapunov
function, Thm 5.2's causal convergence to the top eigenvector (its hypotheses: lambda > 0 and a start
in the hemisphere of v, checked on the spec first), the causal token-2 ODE, Thm 5.1's consensus
error E(t) along every trajectory, and Thm 5.3's turning value matrix (token 1's closed form, the
theorem's ball and basin, the far-side lune, the slip: `theory.turning`).
"""

from __future__ import annotations

import functools

import numpy as np

from ..analysis.overlaps import token2_table
from ..analysis.stats import wilson_interval
from ..analysis.turning import turning_table
from ..plugin import ReportInput
from ..theory.turning import top_eigen
from .claims import CELL_LEVEL, NOT_MET, Claim, cells_claim, every_trajectory, not_checked
from .claims_common import cell_labels, per_trajectory
from .claims_glprp import ROUNDING, integrator_bound

__all__ = ["CLAIMS"]


def one_cluster(claim: str, source: str):
    def judge(values):
        return values[:, -1] == 1, values[:, -1]
    return per_trajectory(claim, source, "n_clusters = 1 at T on every trajectory", "n_clusters", judge,
                          "cluster count")


def non_increasing(name: str, claim: str, source: str, sign: float = 1.0):
    """sign * output non-increasing over t on every trajectory: no rise beyond rounding between
    checkpoints (a monotone flow's scheme with a small step keeps it: `claims_glprp`)."""
    def check(report: ReportInput) -> Claim:
        bound = ROUNDING

        def judge(values):
            rise = np.max(np.maximum(np.diff(sign * values, axis=1), 0.0), axis=1)
            return rise <= bound, rise
        return per_trajectory(claim, source, f"no rise beyond rounding ({bound:.0e}) between checkpoints",
                              name, judge, "rise", worst_fmt=lambda x: f"{x:.2g}")(report)
    return check


def hemisphere_kept(report: ReportInput) -> Claim:
    def judge(margin):
        return (margin > 0).all(axis=1), margin.min(axis=1)
    return per_trajectory("the tokens stay in the open hemisphere of v", "[RST] Thm 4.1",
                          "min_i <v, x_i> > 0 at every checkpoint", "hemisphere_margin", judge, "margin",
                          largest_is_worst=False)(report)


def starts_about(init, v) -> bool:
    """Is the start uniform on the open hemisphere about v (`top_eigen`'s sign: the one the
    measurements of `analysis.turning` take as v_1), as Thms 5.2 and 5.3 ask?"""
    pole = getattr(init, "v", None)
    if init.kind != "hemisphere" or pole is None or pole == "random":
        return False
    pole = np.eye(len(v))[0] if pole == "e1" else np.asarray(pole, float)
    return float(pole @ v) / float(np.linalg.norm(pole)) > 1 - 1e-9


def thm52(report: ReportInput) -> Claim:
    """Thm 5.2's hypotheses on the spec (V symmetric with top eigenvalue lambda > 0; the start in the
    open hemisphere about its eigenvector v), then its conclusion: one cluster (at v) on every trajectory."""
    sweep = report.sweep
    claim, source = "causal attention converges to one cluster at the top eigenvector v", "[RST] Thm 5.2"
    matrices = getattr(sweep, "matrices", None) or {}
    V = (matrices.get("V") or (None,))[0] if isinstance(matrices, dict) else None
    init = sweep.init
    if V is None:
        hemi = "uniform start (not in the hemisphere of v)" if init.kind != "hemisphere" else "hemisphere start"
        if init.kind != "hemisphere":
            return Claim(claim, source, f"V of the preset; {hemi}",
                         "hypothesis: the start in the open hemisphere about v", NOT_MET,
                         "P(10 uniform tokens in v's hemisphere) = 2^-n: the conclusion is not judged; "
                         "the weaker count below is")
        return Claim(claim, source, "V of the preset", "—", not_checked("V not given in the spec"))
    lam, v = top_eigen(V)
    if lam <= 0:
        return Claim(claim, source, f"top eigenvalue λ = {lam:g}", "hypothesis: λ > 0", NOT_MET,
                     "with λ < 0 the tokens approach ±v in a causal cascade: not this theorem")
    if not starts_about(init, v):
        return Claim(claim, source, f"λ = {lam:g}; start {init.kind}", "hypothesis: start in v's hemisphere", NOT_MET)
    return one_cluster(claim, source)(report)


def one_or_two(report: ReportInput) -> Claim:
    def judge(values):
        return (values[:, -1] >= 1) & (values[:, -1] <= 2), values[:, -1]
    return per_trajectory("from a uniform start the tokens end at ±v: 1 or 2 clusters", "[RST] Thm 5.2 (any start)",
                          "n_clusters in {1, 2} at T on every trajectory", "n_clusters", judge,
                          "cluster count")(report)


def token2(report: ReportInput) -> Claim:
    claim, source = "token 2's overlap with token 1 solves a' = (1 - a²) e^{βa} / (e^{βa} + e^β)", "[RST] causal V = I"
    table = token2_table(report.ds)
    if table is None:
        return Claim(claim, source, "—", "—", not_checked("no closed form for this cube"))
    bound = integrator_bound(report)
    dev = table.dev.max("t")
    dims = list(dev.dims)
    return cells_claim(claim, source, f"max |overlap - a(t)| ≤ T h^p = {bound:.2g} over trajectories and t",
                       (dev <= bound).values.ravel(), cell_labels(dev, dims), "cells",
                       f"largest deviation {float(dev.max()):.2g}", chance=False)


def consensus_to_zero(report: ReportInput) -> Claim:
    def judge(e):
        return e[:, -1] < e[:, 0], e[:, -1]
    return per_trajectory("E(t) = 1 - mean_i <x_1, x_i> → 0 along all trajectories", "[RST] Thm 5.1 / Fig. 4",
                          "E(T) below E at the first checkpoint on every trajectory (a finite T cannot show 0; "
                          "the worst E(T) says how far)",
                          "consensus_error", judge, "E(T)")(report)


def turning_hypotheses(report: ReportInput):
    """None where Thm 5.3's hypotheses hold on the spec (one head, causal, V symmetric with a simple
    top eigenvalue lambda_1 > 0, the start in the open hemisphere of v_1(0)), else why not."""
    sweep = report.sweep
    V = np.asarray(sweep.matrices["V"][0], float)
    values = np.linalg.eigvalsh(V)
    lam, v = top_eigen(V)
    if sweep.heads != 1 or not sweep.attention.startswith("causal"):
        return "one head, causal attention"
    if lam <= 0 or values[-1] - values[-2] <= 0:
        return f"a simple top eigenvalue λ_1 > 0 (V's spectrum {np.round(values, 3).tolist()})"
    if not starts_about(sweep.init, v):
        return "the start in the open hemisphere of v_1(0)"
    return None


def turning(claim: str, source: str, expected: str):
    """A claim judged by `check(report, table, claim, source, expected)` on
    `analysis.turning.turning_table`: not checked without the table, hypothesis not met where
    Thm 5.3's are not."""
    return lambda check: functools.partial(_turning_claim, check, claim, source, expected)


def _turning_claim(check, claim: str, source: str, expected: str, report: ReportInput) -> Claim:
    table = turning_table(report.ds)
    if table is None:
        return Claim(claim, source, "—", expected, not_checked(
            "needs causal attention, one head, an explicit symmetric V turning at ω and `states` recorded"))
    why = turning_hypotheses(report)
    if why is not None:
        return Claim(claim, source, "—", f"hypothesis: {why}", NOT_MET)
    return check(report, table, claim, source, expected)


def _locked(table):
    """The cells whose token 1 locks and that have trajectories."""
    return (table.kind == "lock") & (table.n_traj > 0)


@turning('token 1 follows x_1(t) = R(ωt) N(e^{(t-s)(V - ωJ)} R(ωs)^T x_1(s))',
         '[RST] Thm 5.3, causal: token 1 alone (theory.turning)',
         'max |x_1 - closed form| over checkpoints and trajectories ≤ T h^p')
def turning_token1(report, table, claim, source, expected):
    bound = integrator_bound(report)
    use = (table.n_traj > 0).values.ravel()
    dims = list(table.n_traj.dims)
    return cells_claim(claim, source, expected.replace("T h^p", f"T h^p = {bound:.2g}"),
                       (table.dev <= bound).values.ravel()[use], np.array(cell_labels(table.n_traj, dims))[use],
                       "cells", f"largest deviation {float(table.dev.max()):.2g}", chance=False)


@turning('every start in the open hemisphere of v_1(0) ends within α(ε) of v_1(t), α of class K (α(0) = 0)',
         '[RST] Thm 5.3',
         'every token within π/2 of v_1(T) on every trajectory of the locked cells (ε < δ/2): the far '
         'side would need α(ε) ≥ 2, which a class-K α cannot give at small ε')
def turning_ball(report, table, claim, source, expected):
    lock = _locked(table)
    if not bool(lock.any()):
        return Claim(claim, source, "no locked cell", expected, not_checked("no cell with ε < δ/2"))
    angles = table.angle.where(lock).values.ravel()
    angles = angles[np.isfinite(angles)]
    verdict = every_trajectory(claim, source, expected, angles < np.pi / 2, angles, "angle to v_1(T) (rad)",
                               worst_fmt=lambda x: f"{x:.3f}")
    if verdict.verdict == "holds":
        return verdict
    return verdict.with_detail(
        verdict.detail + "; reading: a start in the lune between the hemisphere's edge and the separatrix of "
        "V - ωJ (dihedral angle lag(ε)) ends at -v_1(t), for every ε > 0, so no α with α(ε) → 0 bounds it: "
        "the basin is not the whole open hemisphere. The proof's ISS step fails at b = <y, v_1> = 0, where "
        "the decay δ c_1 (1 - b²) b vanishes and the turning (ε) pushes b below 0")


@turning('the starts that end at -v_1(t) are the lune of dihedral angle lag(ε): a fraction lag(ε)/π',
         'closed form (theory.turning; beyond [RST])',
         'per locked cell, the fraction of trajectories whose token 1 ends beyond π/2 of v_1(T), against lag/π (uniform start on the open hemisphere)')
def turning_lune(report, table, claim, source, expected):
    lock, dims = _locked(table).values.ravel(), list(table.n_traj.dims)
    if report.sweep.init.kind != "hemisphere" or not lock.any():
        return Claim(claim, source, "—", expected, not_checked("no locked cell from a uniform hemisphere start"))
    n = table.n_traj.values.ravel()[lock].astype(int)
    k = np.rint(table.far.values.ravel()[lock] * n).astype(int)
    p = table.far_theory.values.ravel()[lock]
    lo, hi = wilson_interval(k, n, CELL_LEVEL)
    labels = [f"{label}: {a}/{b} vs {c:.3f}"
              for label, a, b, c in zip(np.array(cell_labels(table.n_traj, dims))[lock], k, n, p)]
    return cells_claim(claim, source, expected, (lo - 1e-12 <= p) & (p <= hi + 1e-12), labels, "cells",
                       f"{int(k.sum())} of {int(n.sum())} trajectories end on the far side")


@turning('above ε = δ/2 no lock: token 1 slips against v_1(t) at the rate sqrt(ε² - δ²/4)',
         'closed form (theory.turning; beyond [RST])',
         'per slipping cell, |measured rate - rate| ≤ π/(T - t_1)')
def turning_slip(report, table, claim, source, expected):
    slip = ((table.kind == "slip") & (table.n_traj > 0)).values.ravel()
    if not slip.any():
        return Claim(claim, source, "no slipping cell", expected, not_checked("no cell with ε > δ/2"))
    bound = table.attrs["rate_bound"]
    dev = np.abs(table.rate - table.rate_theory).values.ravel()[slip]
    dims = list(table.n_traj.dims)
    return cells_claim(claim, source, expected.replace("π/(T - t_1)", f"π/(T - t_1) = {bound:.3g}"),
                       dev <= bound, np.array(cell_labels(table.n_traj, dims))[slip], "cells",
                       f"largest |rate - theory| {float(dev.max()):.3g}", chance=False)


CLAIMS = {
    "rst-hemisphere": (one_cluster("two heads, hemisphere start: one cluster", "[RST] Thm 4.1"), hemisphere_kept,
                       non_increasing("hemisphere_margin", "the Lyapunov function max_i (1 - <v, x_i>) is "
                                      "non-increasing on every trajectory", "[RST] Thm 4.1 / [GLPR-P] Lemma 6.4",
                                      sign=-1.0)),
    "rst-causal": (thm52, one_or_two),
    "rst-causal-identity": (token2,),
    "rst-causal-positive": (thm52,),
    "rst-causal-negative": (thm52,),
    "rst-turning-value": (turning_token1, turning_ball, turning_lune, turning_slip),
    "rst-random-frequencies": (non_increasing("consensus_error", "E(t) decreases over t on every trajectory",
                                              "[RST] Fig. 4"), consensus_to_zero),
}
