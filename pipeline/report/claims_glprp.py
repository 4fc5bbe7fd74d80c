r"""The claims of [GLPR-P] (Geshkovski et al., "A mathematical perspective on Transformers") per
catalog entry (`claims`): the sphere flow's clustering (Figs. 1, 3-5), the equiangular ODE (Thm 6.8),
random starts in high d (Thm 6.9), Wendel's certificate (Thm 6.7), the gradient-flow energy (section 3,
Prop. 3.4), the sharp configurations of V = -I (section 9), hardmax (9.3) and noise (Problem 7).

Tolerances: a closed form is met to the integrator's error, an order-p scheme of step h over [0, T]
being `integrator_bound` = T h^p from the exact flow (a unit constant per unit time); a monotonicity
is the discrete scheme's own (a gradient step small enough keeps it), so only rounding may break it:
`ROUNDING` = 1e-10, relative (float64 sums of n^2 terms round at ~n^2 1e-16).
"""

from __future__ import annotations

import numpy as np

from ..analysis import clustering
from ..analysis.overlaps import log_gap_rate, sharp_table, tracking_table
from ..analysis.stats import closed_form as model_form
from ..plugin import ReportInput
from .claims import FAILS, HOLDS, NOT_MET, Claim, cells_claim, every_trajectory, not_checked
from .claims_common import cell_labels, fixed, per_trajectory, trajectories
from .tables import fmt

__all__ = ["CLAIMS", "integrator_bound"]

ORDER = {"euler": 1, "rk2": 2, "heun": 2, "rk4": 4}
ROUNDING = 1e-10


def integrator_bound(report: ReportInput) -> float:
    """T h^p: the allowance of an order-p integrator with step h over [0, T]."""
    sweep = report.sweep
    T, h = float(sweep.time.T), float(sweep.time.T) / float(sweep.time.layers)
    return T * h ** ORDER.get(str(getattr(sweep, "integrator", "euler")), 1)


def energy_monotone(report: ReportInput) -> Claim:
    """Section 3 / Prop. 3.4: SA (V = I) is a gradient ascent of E_beta: E non-decreasing over t on
    every trajectory (no decrease beyond rounding between checkpoints)."""
    bound = ROUNDING

    def judge(e):
        drop = np.max(np.maximum(-np.diff(e, axis=1), 0.0), axis=1) / np.abs(e).max(axis=1)
        return drop <= bound, drop
    return per_trajectory("E_β = (1/2βn²) Σ e^{β<x_i,x_j>} is non-decreasing on every trajectory",
                          "[GLPR-P] §3 / Prop. 3.4", f"no relative decrease beyond rounding ({bound:.0e})",
                          "energy", judge, "relative decrease", worst_fmt=lambda x: f"{x:.2g}")(report)


def energy_at_collapse(report: ReportInput) -> Claim:
    """Prop. 3.4: the energy's maximum, one cluster, is e^beta / (2 beta); at T on each trajectory
    in one cluster the energy is that value (to the cluster's width eps)."""
    ds = report.ds
    rows_ok, worst = [], []
    for beta in ds.beta.values:
        e = trajectories(ds, "energy", {"beta": beta})[:, -1]
        one = trajectories(ds, "n_clusters", {"beta": beta})[:, -1] == 1
        target = np.exp(beta) / (2 * beta)
        rel = np.abs(e - target) / target
        rows_ok.append(rel[one] <= beta * float(report.sweep.eps))
        worst.append(rel[one])
    ok, dev = np.concatenate(rows_ok), np.concatenate(worst)
    return every_trajectory("at collapse the energy is its maximum e^β / (2β)", "[GLPR-P] Prop. 3.4",
                            "|E(T) / (e^β/2β) - 1| ≤ β eps on every trajectory in one cluster at T", ok, dev,
                            "relative gap", worst_fmt=lambda x: f"{x:.2g}")


def equiangular(report: ReportInput) -> Claim:
    table = clustering.equiangular_table(report.ds)
    claim, source = "every overlap of an equiangular start equals γ(t), the ODE's solution", "[GLPR-P] Thm 6.8"
    bound = integrator_bound(report)
    if table is None:
        return Claim(claim, source, "—", "—", not_checked("no equiangular closed form for this cube"))
    dev = table.dev.max("t")
    dims = list(dev.dims)
    return cells_claim(claim, source, f"max |overlap - γ| ≤ T h^p = {bound:.2g} in every cell",
                       (dev <= bound).values.ravel(), cell_labels(dev, dims), "cells",
                       f"largest deviation {float(dev.max()):.2g}", chance=False)


def equiangular_rate(report: ReportInput) -> Claim:
    """Thm 6.8: the late-time rate of 1 - gamma(t) is 2 (SA): the measured rate over the last window
    against the ODE's own over it, and the ODE's against 2."""
    ds = report.ds
    overlap, rate = model_form(ds, "equiangular_overlap"), model_form(ds, "equiangular_rate")
    table = clustering.equiangular_table(ds)
    claim, source = "1 - γ(t) decays at the late-time rate 2 (SA)", "[GLPR-P] Thm 6.8"
    if table is None or rate is None:
        return Claim(claim, source, "—", "2", not_checked("no equiangular closed form"))
    dims = [d for d in table.dev.dims if d != "t"]
    parts, ok = [], []
    for idx in np.ndindex(*[table.sizes[d] for d in dims]):
        cell = table[dict(zip(dims, idx))]
        coords = {d: cell[d].item() for d in dims}
        measured, t0, t1 = log_gap_rate(cell.t.values, cell.overlap_min.values)
        ode = log_gap_rate([t0, t1], overlap(np.array([t0, t1]), coords))[0] if np.isfinite(t0) else np.nan
        late = float(rate(coords))
        # the cube's rate is the ODE's to the integrator's error; the ODE's approaches the late rate
        ok.append(abs(measured - ode) <= 1e-3 * late and abs(ode - late) <= 0.01 * late)
        parts.append(f"{', '.join(f'{k} = {v:g}' for k, v in coords.items())}: {fmt(measured)} (ODE {fmt(ode)}, "
                     f"t {fmt(t0, 2)}-{fmt(t1, 2)})")
    return cells_claim(claim, source, "measured = the ODE's rate over the window (0.1 %), the ODE's within 1 % of 2",
                       ok, parts, "cells", "; ".join(parts), chance=False)


def high_d(report: ReportInput) -> Claim:
    table = tracking_table(report.ds)
    claim, source = "random starts in high d track γ(t): γ inside the 1-99 % band of the overlaps", "[GLPR-P] Thm 6.9"
    if table is None:
        return Claim(claim, source, "—", "—", not_checked("no recorded overlap histogram"))
    half, q = table.attrs["half_bin"], table.quantiles
    inside = ((q.sel(quantile=0.01) - half <= table.gamma) & (table.gamma <= q.sel(quantile=0.99) + half)).all("t")
    dims = list(inside.dims)
    return cells_claim(claim, source, "γ(t) inside the pooled 1-99 % band at every checkpoint, every cell",
                       inside.values.ravel(), cell_labels(inside, dims), "cells",
                       f"max |mean - γ| {float(table.dev.max()):.3g}")


def wendel(report: ReportInput) -> Claim:
    table = clustering.hemisphere_table(report.ds, report.level)
    dims = list(table.n_traj.dims)
    return cells_claim("P(start in an open hemisphere) = 2^-(n-1) Σ_{k<d} C(n-1, k)", "[GLPR-P] Thm 6.7 (Wendel)",
                       "Wendel's probability in every cell", table.agrees.values.ravel(),
                       cell_labels(table.n_traj, dims), "cells")


def hemisphere_one_cluster(report: ReportInput) -> Claim:
    """Thm 6.7's conclusion on the starts that meet its hypothesis: a start in an open hemisphere
    ends in one cluster."""
    ds = report.ds
    hemi = trajectories(ds, "in_hemisphere")[:, 0].astype(bool)
    one = trajectories(ds, "n_clusters")[:, -1] == 1
    claim = "a start in an open hemisphere ends in one cluster (V = I, SA)"
    if not hemi.any():
        return Claim(claim, "[GLPR-P] Thm 6.7", "no start in a hemisphere", "one cluster", NOT_MET)
    return every_trajectory(claim, "[GLPR-P] Thm 6.7", "n_clusters = 1 at T on every start in a hemisphere",
                            one[hemi], trajectories(ds, "n_clusters")[:, -1][hemi], "cluster count")


def sharp(report: ReportInput) -> Claim:
    claim, source = "V = -I settles on the sharp configuration (simplex n = d + 1, cross-polytope n = 2d)", \
        "[GLPR-P] §9.1"
    ds = report.ds
    if (ds.beta.values <= 0).any():
        return Claim(claim, source, f"β grid {ds.beta.values.tolist()}",
                     "β > 0 (at β = 0 every zero-mean configuration minimises the energy)", NOT_MET)
    table = sharp_table(ds)
    if table is None:
        return Claim(claim, source, "—", "—", not_checked("no sharp configuration for these n, d"))
    eps = float(table.attrs["eps"])
    within = table.within.values.ravel()
    n = table.n_traj.values.ravel()
    ok = np.concatenate([np.r_[[True] * int(round(w * m)), [False] * (int(m) - int(round(w * m)))]
                         for w, m in zip(within, n)])
    return every_trajectory(claim, source, f"extreme overlaps within eps = {eps:g} of the configuration's at T",
                            ok, table.dev_T.values.ravel(), "deviation (max over cells)",
                            worst_fmt=lambda x: f"{x:.2g}")


def fig4_counts(report: ReportInput) -> Claim:
    """Fig. 4: ~2 clusters at beta = 4, ~3 at beta = 9 for t in 18..30 (d = 2): the mean count over
    those checkpoints and trajectories, a t-interval, within half a cluster of the figure's."""
    from scipy import stats

    ds = report.ds
    ok, parts = [], []
    for beta, target in ((4.0, 2.0), (9.0, 3.0)):
        if beta not in ds.beta.values:
            continue
        counts = trajectories(ds, "n_clusters", {"beta": beta})
        use = (ds.t.values >= 18) & (ds.t.values <= 30)
        per = counts[:, use].mean(axis=1)
        half = stats.t.ppf(0.995, per.size - 1) * per.std(ddof=1) / np.sqrt(per.size)
        lo, hi = per.mean() - half, per.mean() + half
        ok.append(hi >= target - 0.5 and lo <= target + 0.5)
        parts.append(f"β = {beta:g}: {fmt(per.mean(), 3)} [{fmt(lo, 3)}, {fmt(hi, 3)}] vs ~{target:g}")
    return cells_claim("metastable clusters in d = 2: ~2 at β = 4, ~3 at β = 9, t in 18..30", "[GLPR-P] Fig. 4",
                       "mean count's 99 % t-interval meets figure's value ± 0.5", ok, parts, "β values",
                       "; ".join(parts))


def merge_front(report: ReportInput) -> Claim:
    """Fig. 3: the merge front t_cross(beta) follows t*(beta), closer as d grows."""
    table = clustering.crossing_table(report.ds)
    rel = abs(table.t_cross - table.t_star) / table.t_star
    if "d" not in rel.dims or rel.sizes["d"] < 2:
        return Claim("the merge front follows t*(β), closer as d grows", "[GLPR-P] Fig. 3", "—", "—",
                     not_checked("one d"))
    by_d = rel.mean([dim for dim in rel.dims if dim != "d"], skipna=True)
    closer = bool(by_d.isel(d=-1) < by_d.isel(d=0))
    parts = [f"d = {int(d)}: {fmt(float(v), 3)}" for d, v in zip(by_d.d.values, by_d.values)]
    return Claim("the merge front t_cross(β) follows t*(β), ever closer as d grows", "[GLPR-P] Fig. 3",
                 "mean |t_cross - t*| / t* over β: " + "; ".join(parts),
                 "smaller at the largest d than at the smallest", "holds" if closer else "fails",
                 "t_cross: the mean fraction of close pairs reaches 1/2; t*: γ(t) reaches 1 - δ")


def overlaps_to_one(report: ReportInput) -> Claim:
    """Fig. 1: the overlaps' mass moves to 1: on every trajectory the top bin holds more pairs at T
    than at the first checkpoint."""
    def judge(hist):
        top = hist[:, :, -1]
        return top[:, -1] > top[:, 0], top[:, -1] - top[:, 0]
    return per_trajectory("the overlaps' mass moves to 1 over t", "[GLPR-P] Fig. 1",
                          "pairs in the top bin at T > at the first checkpoint, every trajectory",
                          "overlap_hist", judge, "gain of the top bin (pairs)", largest_is_worst=False)(report)


def both_ends(report: ReportInput) -> Claim:
    hist = trajectories(report.ds, "overlap_hist")[:, -1]
    bottom, top = int(hist[:, 0].clip(min=0).sum()), int(hist[:, -1].clip(min=0).sum())
    return Claim("under the stochastic transformer the overlaps' mass sits at both ends, 1 and -1",
                 "[GLPR-P] Fig. 1 / [F26]", f"pairs at T in the bottom bin {bottom}, top bin {top}",
                 "both > 0", "holds" if bottom > 0 and top > 0 else "fails")


def noise_one_cluster(report: ReportInput) -> Claim:
    def judge(values):
        return values[:, -1] == 1, values[:, -1]
    return per_trajectory("one cluster at σ = 0 (V = I, SA)", "[GLPR-P] Problem 7", "n_clusters = 1 at T",
                          "n_clusters", judge, "cluster count", sel={"sigma": 0.0})(report)


def noise_monotone(report: ReportInput) -> Claim:
    """Problem 7 (as the catalog reads it): clustering falls as sigma grows: per beta and each pair of
    neighbouring sigma values, the one-cluster fraction at T at the larger sigma is not above the
    smaller's (their 99 % Wilson intervals compared: higher only when the larger's lower end
    exceeds the smaller's upper end)."""
    from ..analysis.stats import wilson_interval

    ds = report.ds
    sigmas = sorted(float(x) for x in ds.sigma.values)
    ok, parts = [], []
    for beta in ds.beta.values:
        fractions = []
        for sigma in sigmas:
            one = trajectories(ds, "n_clusters", {"beta": beta, "sigma": sigma})[:, -1] == 1
            fractions.append((int(one.sum()), one.size))
        for (k0, n0), (k1, n1) in zip(fractions, fractions[1:]):
            lo1 = float(wilson_interval(k1, n1, 0.99)[0])
            hi0 = float(wilson_interval(k0, n0, 0.99)[1])
            ok.append(lo1 <= hi0)
        parts.append(f"β = {beta:g}: " + ", ".join(f"σ = {s:g}: {k}/{n}" for s, (k, n) in zip(sigmas, fractions)))
    return cells_claim("clustering falls as σ grows: the one-cluster fraction at T does not rise with σ",
                       "[GLPR-P] Problem 7", "no rise between neighbouring σ beyond the 99 % intervals", ok, parts,
                       "σ steps", "; ".join(parts))


def ginibre_flat(report: ReportInput) -> Claim:
    """Fig. 5 (a): with Ginibre Q, K, V the merging depends little on beta (logits of order
    beta / sqrt(d)): the merge time's relative range over the grid's beta against the one the
    identity flow's t*(beta) (theory.t_star, the same n and delta) has over those beta."""
    from ..theory.deterministic import t_star

    table = clustering.crossing_table(report.ds)
    cross = table.t_cross.mean([d for d in table.t_cross.dims if d != "beta"])
    betas = cross.beta.values.astype(float)
    spread = float((cross.max() - cross.min()) / cross.mean())
    n = int(np.atleast_1d(report.ds.n.values)[0])
    star = np.asarray(t_star(betas, n, float(report.sweep.delta)), float)
    identity = float((star.max() - star.min()) / star.mean())
    return Claim("Ginibre Q, K, V: merging depends little on β", "[GLPR-P] Fig. 5 (a)",
                 f"t_cross {fmt(float(cross.min()), 3)}..{fmt(float(cross.max()), 3)} over β = "
                 f"{betas.min():g}..{betas.max():g}: relative range {spread:.3g}",
                 f"well below the identity flow's t*(β) relative range over the same β ({identity:.3g})",
                 "holds" if spread < identity / 4 else "fails",
                 "well below: under a quarter of it; t_cross: the mean fraction of close pairs reaches 1/2")


NO_FORM = "no closed form: the figure's picture is the claim"
EXAMPLE_93 = ((1.0, 1.0), (-1.0, 1.0), (0.0, 0.0))  # z1, z2, z3 at t = 0


def hardmax_selection(report: ReportInput) -> Claim:
    """Section 9.3 / Example 9.3: Q = K = V = I in R^2 from z1 = (1, 1), z2 = (-1, 1), z3 = 0, the
    hardmax limit (9.5) admits three branches for z3; the softmax flow selects, as beta grows, the
    averaged one z3 = (z1 + z2)/2 (1 - e^-t) = (0, 1 - e^-t) (z3 stays on the symmetry axis, where
    its own logit <z3, z3> falls behind <z3, z1> = <z3, z2>): sup_t |z3(t) - that branch| falls
    strictly along beta, and from t = 1 on z3 is nearer it than either other branch. The flow
    simulated is (9.3), whose logits carry e^{2t}: its beta -> infinity limit is the same (9.5)."""
    claim = "β → ∞: the softmax solution selects the averaged Filippov branch ż3 = (z1 + z2)/2 - z3"
    source = "[GLPR-P] §9.3 / Example 9.3"
    expected = "sup_t |z3 - (0, 1 - e^-t)| strictly decreasing along β; z3 nearer it than the other branches (t ≥ 1)"
    ds, sweep = report.ds, report.sweep
    if "states" not in ds:
        return Claim(claim, source, "—", expected, not_checked("the cube has no states: add record: [states]"))
    start = getattr(sweep, "init", None)
    if (sweep.V != "identity" or sweep.Q is not None or sweep.K is not None or start is None
            or start.kind != "points" or start.x != EXAMPLE_93):
        return Claim(claim, source, "—", expected, NOT_MET, "Example 9.3 is Q = K = V = I from z1 = (1, 1), "
                     "z2 = (-1, 1), z3 = 0 (init: {kind: points, x: [[1, 1], [-1, 1], [0, 0]]})")
    if ds.sizes.get("beta", 1) < 2 or float(ds.t.max()) < 1.0:
        return Claim(claim, source, "—", expected, not_checked("the limit needs a beta axis and T >= 1"))
    z = ds["states"]
    z = z.isel({dim: 0 for dim in z.dims if dim not in ("beta", "t", "traj", "token", "component")})
    z = z.transpose("beta", "t", "traj", "token", "component").values  # (beta, t, traj, 3, 2)
    t, start = ds.t.values, np.asarray(EXAMPLE_93)
    growth = (1 - np.exp(-t))[None, :, None, None]
    z3 = z[:, :, :, 2]  # (beta, t, traj, 2)
    averaged = np.linalg.norm(z3 - growth * (start[0] + start[1]) / 2, axis=-1).max(axis=(1, 2))
    # nearer the averaged branch than either other at every checkpoint from t = 1 (where they
    # are 1 - e^-1 = 0.63 apart) on, for every beta
    late = t >= 1.0
    near = np.linalg.norm(z3[:, late] - growth[:, late] * (start[0] + start[1]) / 2, axis=-1)
    far = np.min([np.linalg.norm(z3[:, late] - growth[:, late] * p, axis=-1) for p in start[:2]], axis=0)
    moved = float(np.abs(z[:, :, :, :2] - start[:2]).max())
    betas = ds.beta.values
    slope = float(np.polyfit(np.log(betas), np.log(averaged), 1)[0])
    ok = bool(np.all(np.diff(averaged) < 0) and np.all(near < far))
    measured = (", ".join(f"β = {b:g}: {float(a):.3g}" for b, a in zip(betas, averaged))
                + f"; log-log slope {slope:.2f}; the other branches ≥ {fmt(float(far.min()), 3)} away from t = 1 on")
    return Claim(claim, source, measured, expected, HOLDS if ok else FAILS,
                 f"z1, z2 move by at most {fmt(moved, 3)}; the flow of (9.3) (logits β e^2t <z_i, z_j>)")


CLAIMS = {
    "geshkovski2023-example93": (hardmax_selection,),
    "geshkovski2023-fig1": (overlaps_to_one,),
    "geshkovski2023-fig1-stochastic": (both_ends,),
    "geshkovski2023-fig3": (merge_front,),
    "geshkovski2023-fig4": (fig4_counts,),
    "geshkovski2023-fig5": (ginibre_flat,),
    **{f"geshkovski2023-fig5{x}-authors": (fixed(f"Fig. 5 ({x}) in the authors' scaling", f"[GLPR-P] Fig. 5 ({x})",
                                                 "the figure's clustering over (β, t)", NO_FORM),)
       for x in "abcd"},
    "geshkovski2023-equiangular": (equiangular, equiangular_rate),
    "geshkovski2023-high-d": (high_d,),
    "geshkovski2023-wendel": (wendel, hemisphere_one_cluster),
    "geshkovski2023-energy": (energy_monotone, energy_at_collapse),
    "geshkovski2023-sharp": (sharp,),
    "sphere-flow-hardmax": (fixed("hardmax: clustering with uniform weights on the maximal keys", "[GLPR-P] §9.3",
                                  "clustering over t", "no theorem on these Q, K: drawn, not judged"),),
    "sphere-flow-noise": (noise_one_cluster, noise_monotone),
    "sphere-flow-explicit": (fixed("explicit matrices: a syntax example", "—", "—", "no paper claim"),),
}
