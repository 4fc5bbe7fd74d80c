r"""The claims of [RST] (Rodríguez Abella, Silvestre, Tabuada, "The asymptotic behavior of attention
in transformers") per catalog entry (`claims`): Thm 4.1's hemisphere collapse and its Lyapunov
function, Thm 5.2's causal convergence to the top eigenvector (its hypotheses: lambda > 0 and a start
in the hemisphere of v, checked on the spec first), the causal token-2 ODE and Thm 5.1's consensus
error E(t) along every trajectory.
"""

from __future__ import annotations

import numpy as np

from ..analysis.overlaps import token2_table
from ..plugin import ReportInput
from .claims import NOT_MET, Claim, cells_claim, not_checked
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


def top_eigen(V) -> tuple[float, np.ndarray]:
    values, vectors = np.linalg.eigh(np.asarray(V, float))
    return float(values[-1]), vectors[:, -1]


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
    start_v = getattr(init, "v", None)
    if init.kind != "hemisphere" or start_v is None or isinstance(start_v, str) or \
            float(np.dot(np.asarray(start_v, float), v)) <= 0:
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


CLAIMS = {
    "rst-hemisphere": (one_cluster("two heads, hemisphere start: one cluster", "[RST] Thm 4.1"), hemisphere_kept,
                       non_increasing("hemisphere_margin", "the Lyapunov function max_i (1 - <v, x_i>) is "
                                      "non-increasing on every trajectory", "[RST] Thm 4.1 / [GLPR-P] Lemma 6.4",
                                      sign=-1.0)),
    "rst-causal": (thm52, one_or_two),
    "rst-causal-identity": (token2,),
    "rst-causal-positive": (thm52,),
    "rst-causal-negative": (thm52,),
    "rst-random-frequencies": (non_increasing("consensus_error", "E(t) decreases over t on every trajectory",
                                              "[RST] Fig. 4"), consensus_to_zero),
}
