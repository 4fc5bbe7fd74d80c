r"""The claims of [F26] (Fedorov et al., deep stochastic transformers) per catalog entry (`claims`).

Thm 1 (two tokens: P(antipodal) = (s(1) - s(rho0)) / (s(1) - s(-1)), 0 below beta_c(d)) is judged by
`claims_common.closed_form` on every judged cell; App. D.1's horizon by `finite_time` at every
checkpoint; Thm 1's limit (the O(h) bias) by the h -> 0 extrapolation of the step-bias section; Figs.
6-7 (n > 2: P(at least one antipodal pair)) and App. D.2 / Fig. 9 (cluster counts over t) from the
cube's overlaps and counts, each trajectory counted.
"""

from __future__ import annotations

import numpy as np

from ..analysis.antipodal import antipodal_table, any_antipodal_table
from ..analysis.clustering import settle_times
from ..analysis.stats import closed_form as model_form
from ..analysis.step_bias import zero_step_table
from ..plugin import ReportInput
from .antipodal import AGREE_LEVEL
from .claims import CELL_LEVEL, HOLDS, NOT_MET, Claim, binomial_claim, cells_claim, exact_upper, not_checked
from .claims_common import cell_labels, closed_form, finite_time, per_trajectory, trajectories
from .dominant import dominant_table
from .tables import fmt

__all__ = ["CLAIMS"]

THM1 = "P(antipodal) on Thm 1's closed form, 0 below β_c(d) = arccosh(d - 2) / 2"


def step_limit(report: ReportInput) -> Claim:
    """Thm 1's limit: the h -> 0 extrapolation of P(antipodal) per cell holds the limit diffusion's
    probability at T (the discrete model is O(h) from it)."""
    claim, source, expected = ("the discrete model tends to the limit SDE as h → 0 (an O(h) gap)", "[F26] Thm 1",
                               "h → 0 linear extrapolation's 99% interval holds P(antipodal at T) of the SDE")
    ds = report.ds
    if ds.sizes.get("layers", 1) < 2:
        return Claim(claim, source, "one step size", expected, not_checked("no `layers` axis"))
    table = antipodal_table(ds, level=report.level)
    fit = zero_step_table(table, float(ds.attrs["T"]), level=AGREE_LEVEL)
    others = [d for d in fit.p0.dims]
    ok = ((fit.theory_t >= fit.lo) & (fit.theory_t <= fit.hi)).values.ravel()
    extra = "; ".join(f"{lab}: {fmt(float(p))} [{fmt(float(lo))}, {fmt(float(hi))}] vs {fmt(float(th))}"
                      for lab, p, lo, hi, th in zip(cell_labels(fit.p0, others), fit.p0.values.ravel(),
                                                    fit.lo.values.ravel(), fit.hi.values.ravel(),
                                                    fit.theory_t.values.ravel()))
    return cells_claim(claim, source, expected, ok, cell_labels(fit.p0, others), "cells", extra)


def any_pair_positive(report: ReportInput) -> Claim:
    """Fig. 6: P(at least one antipodal pair) > 0 above beta_c(d), for every n, at T."""
    claim, source = "P(at least one antipodal pair) > 0 above β_c(d), for every n", "[F26] Fig. 6"
    expected = "at least one trajectory with an antipodal pair in every cell with β > β_c(d)"
    ds = report.ds
    table = any_antipodal_table(ds, level=report.level).isel(t=-1)
    critical = model_form(ds, "critical_beta")
    dims = [d for d in table.n_any.dims]
    labels = cell_labels(table.n_any, dims)
    beta = table.beta.broadcast_like(table.n_any).values.ravel()
    d = table.d.broadcast_like(table.n_any).values.ravel()
    above = beta > np.array([critical(int(x)) for x in d]) + 1e-9
    k, N = table.n_any.values.ravel()[above], table.n_traj.values.ravel()[above]
    labels = np.array(labels)[above]
    empty = [f"{lab}: 0 of {n} (P < {fmt(exact_upper(0, int(n)), 3)})" for lab, kk, n in zip(labels, k, N) if kk == 0]
    verdict = HOLDS if not empty else "fails"
    return Claim(claim, source, f"{int((k > 0).sum())} of {k.size} cells above β_c(d) with a pair",
                 expected, verdict, ("none at T in " + "; ".join(empty) + " (95% exact bound)") if empty else
                 "a pair seen in every such cell")


def zero_at_zero(report: ReportInput) -> Claim:
    """Fig. 6: no antipodal pair at beta = 0 in d = 5 (beta_c(5) = 0.88 > 0)."""
    table = any_antipodal_table(report.ds, level=report.level).isel(t=-1)
    if 0.0 not in table.beta.values or 5 not in table.d.values:
        return Claim("P(at least one antipodal pair) = 0 at β = 0, d = 5", "[F26] Fig. 6", "—", "0",
                     not_checked("no β = 0, d = 5 cell"))
    cell = table.sel(beta=0.0, d=5)
    return binomial_claim("P(at least one antipodal pair) = 0 at β = 0, d = 5 (below β_c(5))", "[F26] Fig. 6",
                          int(cell.n_any.sum()), int(cell.n_traj.sum()), "0 (pooled over n)", 0.0, 0.0)


def plateau(stochastic: bool):
    """App. D.2 / Fig. 9: the cluster count's last change over t. Under noise the final structure
    comes early (no metastable plateau); the deterministic flow at beta = 9 sits on plateaus."""
    def check(report: ReportInput) -> Claim:
        ds = report.ds
        source = "[F26] App. D.2 / Fig. 9"
        counts = trajectories(ds, "n_clusters", {"beta": float(ds.beta.values.max())})
        t = ds.t.values
        last = settle_times(counts, t)
        beta = float(ds.beta.values.max())
        settle = (f"the cluster count's last change (plateau statistic) at β = {beta:g}: median t = "
                  f"{np.median(last):g}, latest {last.max():g}, of T = {t[-1]:g}; count at T: mean "
                  f"{counts[:, -1].mean():.3g}")
        if stochastic:
            late = last <= t[-1] / 2
            return binomial_claim(f"no metastable plateau under noise (β = {beta:g}): the cluster count's last "
                                  "change in the first half of [0, T]", source, int(late.sum()), late.size,
                                  "most trajectories (> 1/2) settle by T/2", 0.5, 1.0).with_detail(settle)
        many = counts[:, -1] > 1
        return binomial_claim(f"metastable states persist in the deterministic flow at β = {beta:g}: more than "
                              "one cluster at T", source, int(many.sum()), many.size,
                              "most trajectories (> 1/2)", 0.5, 1.0).with_detail(settle)
    return check


def settles_earlier(report: ReportInput) -> Claim:
    """App. D.2 / Fig. 9, side by side: at the largest beta both cubes hold, the stochastic dynamics
    settles its cluster count earlier than the deterministic one beside it (`report.beside`)."""
    from .beside import beside_table, cube_name

    claim = "the stochastic dynamics settles earlier than the deterministic one at large β (no metastability)"
    source, expected = "[F26] App. D.2 / Fig. 9", "settle times earlier: one-sided Mann-Whitney p < 0.01"
    rows, why = beside_table(report.ds, report.beside)
    if why is not None:
        return Claim(claim, source, "—", expected, not_checked(why))
    row = max(rows, key=lambda r: r["cell"].get("beta", 0.0))
    mine, theirs = row["mine"], row["theirs"]
    cell = ", ".join(f"{k} = {v:g}" for k, v in row["cell"].items())
    measured = (f"{cell}: median settled t {np.median(mine['settled']):g} ({mine['name']}) against "
                f"{np.median(theirs['settled']):g} ({cube_name(report.beside)}), p = {row['p_earlier']:.2g}")
    return Claim(claim, source, measured, expected, HOLDS if row["p_earlier"] < 0.01 else "fails",
                 f"{mine['n']} and {theirs['n']} trajectories")


def one_cluster_by(t_by: float):
    """App. D.2: the deterministic flow at beta = 1 is one cluster by t_by, on every trajectory."""
    def check(report: ReportInput) -> Claim:
        ds = report.ds
        k = int(np.argmin(abs(ds.t.values - t_by)))
        t_k = float(ds.t.values[k])

        def judge(values):
            return values[:, k] == 1, values[:, k]
        return per_trajectory(f"one cluster at β = 1 by t = {t_by:g} (deterministic; the catalog's reading of Fig. 9 (a))", "[F26] App. D.2 / Fig. 9",
                              f"n_clusters = 1 at t = {t_k:g} on every trajectory", "n_clusters", judge,
                              "cluster count", sel={"beta": 1.0})(report)
    return check


def horizon_regimes(report: ReportInput) -> Claim:
    """App. D.1: the grid's beta values against beta_c(d): how many regimes the cube spans."""
    ds = report.ds
    critical = model_form(ds, "critical_beta")
    sides = {(float(b) > critical(int(d)) + 1e-9) for b in ds.beta.values for d in ds.d.values}
    per_d = [f"d = {int(d)}: β_c = {critical(int(d)):.3g}" for d in ds.d.values]
    return Claim("the grid spans the regimes below and above β_c(d)", "[F26] App. D.1",
                 f"{len(sides)} regime(s): " + "; ".join(per_d), "both sides of β_c(d) for some d",
                 HOLDS if len(sides) == 2 else NOT_MET)


def hybrid_phase(report: ReportInput) -> Claim:
    """Prop. 1: the hybrid model's phase (single cluster below sigma_c(beta) = sqrt(2 e^-beta),
    antipodal above): the dominant outcome at T in every cell away from the curve (no neighbour in
    beta or sigma of another phase; `dominant.dominant_table`, as the page's section)."""
    table = dominant_table(report.ds)
    dims = list(table.n_traj.dims)
    far = ((table.n_traj > 0) & (table.phase >= 0) & ~table.near_boundary).values.ravel()
    match = (table.dominant == table.phase).values.ravel()
    labels = np.array(cell_labels(table.n_traj, dims))[far]
    k, m = int(match[far].sum()), int(far.sum())
    missed = [str(lab) for lab, ok in zip(labels, match[far]) if not ok]
    return Claim("the dominant outcome is Prop. 1's phase: one cluster below σ_c(β) = sqrt(2 e^-β), antipodal above",
                 "[F26] Prop. 1 / Fig. 4", f"{k} of {m} cells away from the curve",
                 "the phase in every cell with no neighbour of the other phase", HOLDS if k == m else "fails",
                 ("missed: " + "; ".join(missed)) if missed else f"{int(match.sum())} of {match.size} cells overall")


def persistence(report: ReportInput) -> Claim:
    """Fig. 7: the fraction of trajectories with an antipodal pair is stable over the later
    checkpoints: per cell, the trajectories that gain a pair between the middle checkpoint and T
    against those that lose one (McNemar's exact test: under stability both are equally likely),
    each cell at CELL_LEVEL."""
    from scipy import stats

    ds = report.ds
    eps = float(report.sweep.eps)
    dims = [d for d in ds["overlap_min"].dims if d not in ("t", "traj")]
    mid = ds.sizes["t"] // 2
    ok, labels = [], []
    for label, idx in zip(cell_labels(ds["overlap_min"].isel(t=0, traj=0), dims),
                          np.ndindex(*[ds.sizes[d] for d in dims])):
        om = trajectories(ds, "overlap_min", {d: ds[d].values[i] for d, i in zip(dims, idx)})
        at_mid, at_end = om[:, mid] <= -1 + eps, om[:, -1] <= -1 + eps
        gain, loss = int((~at_mid & at_end).sum()), int((at_mid & ~at_end).sum())
        p = stats.binomtest(gain, gain + loss, 0.5).pvalue if gain + loss else 1.0
        ok.append(p >= 1 - CELL_LEVEL)
        labels.append(f"{label}: {int(at_mid.sum())} → {int(at_end.sum())} of {om.shape[0]} (p = {p:.2g})")
    t_mid = float(ds.t.values[mid])
    return cells_claim(f"the fraction with an antipodal pair is stable from t = {t_mid:g} to T", "[F26] Fig. 7",
                       "as many trajectories gain a pair as lose one (McNemar)", ok, labels, "cells",
                       "; ".join(labels))


THM1_ROW = closed_form(THM1, "[F26] Thm 1", "closed form (T = ∞) in every judged cell")
D1 = finite_time("P(antipodal) at every checkpoint on the finite-T theory", "[F26] App. D.1",
                 "backward equation's P(antipodal at t) in every (cell, t)")

CLAIMS = {
    "quickstart": (THM1_ROW,),
    "fedorov2026-fig3": (THM1_ROW, D1),
    "fedorov2026-fig3-usa": (closed_form("USA has SA's closed form and β_c(d)", "[F26] Thm 1 (USA)",
                                         "SA's closed form in every judged cell"),),
    "fedorov2026-d2": (closed_form("d = 2: β_c = -∞, P(antipodal) = 1/2 at every β", "[F26] Thm 1, d = 2",
                                   "1/2 in every cell"),),
    "fedorov2026-horizon": (D1, horizon_regimes),
    "fedorov2026-hybrid-horizon": (finite_time("the hybrid model's P(antipodal) at every checkpoint on its "
                                               "backward equation", "[F26] Prop. 1 / Fig. 4",
                                               "backward equation's value in every (cell, t)"),),
    "fedorov2026-h-bias": (step_limit,),
    "fedorov2026-rho0": (closed_form("P(antipodal | ρ0) on (s(1) - s(ρ0)) / (s(1) - s(-1))", "[F26] Thm 1",
                                     "conditional closed form in every judged cell"),),
    "fedorov2026-value-laws": (closed_form("Rademacher values give the Gaussian model's P(antipodal)",
                                           "[F26] Thm 1 (universality)", "Gaussian closed form in every judged "
                                           "cell"),),
    "fedorov2026-fig4": (hybrid_phase, finite_time("P(antipodal) at every checkpoint on the finite-T theory",
                                                   "[F26] Prop. 1", "backward equation's value in every (cell, t)")),
    "fedorov2026-fig6": (any_pair_positive, zero_at_zero),
    "fedorov2026-fig7": (persistence,),
    "fedorov2026-fig9-stochastic": (plateau(True), settles_earlier),
    "fedorov2026-fig9-deterministic": (one_cluster_by(9.0), plateau(False)),
}
