r"""The claims of [GLPR-P] about how long clustering takes (`claims`): one cluster for every beta in
d >= 3 (Thm 6.1), the exponential rate of a start in an open hemisphere (Thm 6.3 / Lemma 6.4), the
USA equiangular ODE (6.10) with its late rate 2 e^beta (Thm 6.8; `claims_glprp`'s checks, named for
USA) and the escape from the beta = 0 antipodal saddle in a time log(1/eps) / 2 (Thm 4.1 / App. A;
`saddle_escape`); with `claims_glprp_regions`' checks (Thm 5.1's tau*_beta and Fig. 6's g on two
USA tokens, Fig. 2's proven regions).

Thm 6.1 ([MTG17, CRMB24]): for SA or USA with Q = K = V = I, n >= 2, d >= 3 and any beta >= 0,
almost every start converges to one cluster. Judged on every trajectory of the cells with d >= 3:
`n_clusters` = 1 at T (a finite T can only fail it: a trajectory still in metastable clusters
at T counts against it, the worst count is shown); cells with d = 2 are outside the hypothesis.

Thm 6.3 / Lemma 6.4: a start in an open hemisphere (almost sure for uniform starts with d >= n)
converges to one point exponentially fast, ||x_i(t) - x*|| <= C e^{-lambda t}. The proof's
(6.7)-(6.8) bound the rate of 1 - alpha(t), alpha = min_i <x_i, x*>, from below by
`rate_bound` = 1 / (2 n e^{2 beta}) once alpha >= 1/2. The cube's gauge of the same decay is
g(t) = 1 - overlap_min(t) (1 - <x_i, x_j> = |x_i - x_j|^2 / 2, within a factor 4 of 1 - alpha):
per trajectory, log g is fitted linearly in t (scipy's linregress) over the late regime
`LATE` (all pairs within overlap 1 - 0.1 = 0.9, where alpha >= 1/2, and above the float64 floor
1e-12), and the rate's 99 % t-interval must lie above the bound. The hypothesis is checked on the
cube's own starts: `in_hemisphere` at the first checkpoint (one step when it is t = h; the flow
is autonomous, so a configuration in a hemisphere there is itself a start of Lemma 6.4), and only
those trajectories are judged. The detail shows the rates beside the linearisation's at the
collapse, 2 (SA) or 2 e^beta (USA) (`theory.equiangular_rate`; retraction Euler of step h gives
-2 log(1 - h) / h, 2.107 at h = 0.1).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..analysis.clustering import crossing_time
from ..analysis.overlaps import MIN_GAP
from ..models import get_model
from ..plugin import ReportInput
from .claims import FAILS, HOLDS, NOT_MET, Claim, every_trajectory, not_checked, number
from .claims_common import cell_labels, trajectories
from .claims_glprp import equiangular, equiangular_rate
from .claims_glprp_regions import CLAIMS as REGIONS
from .tables import fmt

__all__ = ["CLAIMS", "rate_bound", "late_rate", "saddle_escape", "LATE", "RATE_LEVEL"]

LATE = (MIN_GAP, 0.1)  # g = 1 - overlap_min in (1e-12, 0.1]: the late, linear regime of log g
RATE_LEVEL = 0.99  # the level of each trajectory's rate interval
MIN_POINTS = 3  # checkpoints a fit needs (two for the line, one for its error)


def plain_flow(report: ReportInput) -> str | None:
    """'sa' or 'usa' where the cube is the plain flow of Thms 6.1 / 6.3 (Q = K = V = I, nothing
    time-varying or noisy, not causal), else None."""
    attention = getattr(get_model(report.sweep.model), "closed_form_attention", None)
    return None if attention is None else attention(report.sweep)


def cells(ds, name: str):
    """(label, coords, counted trajectories of `name`) per grid cell of the cube."""
    dims = [d for d in ds[name].dims if d not in ("traj", "t")]
    labels = cell_labels(ds[name], dims)
    for label, idx in zip(labels, np.ndindex(*[ds.sizes[d] for d in dims])):
        coords = {d: ds[d].values[i].item() for d, i in zip(dims, idx)}
        yield label, coords, trajectories(ds, name, coords)


def one_cluster_every_beta(report: ReportInput) -> Claim:
    """Thm 6.1 on every trajectory of the cells with d >= 3 (module docstring)."""
    ds = report.ds
    claim, source = "one cluster for every β in d ≥ 3 (almost every start)", "[GLPR-P] Thm 6.1"
    expected = "n_clusters = 1 at T on every trajectory of every cell with d ≥ 3"
    attention = plain_flow(report)
    if attention is None:
        return Claim(claim, source, f"model {report.sweep.model}, not the plain flow", expected, NOT_MET,
                     "the theorem is for SA or USA with Q = K = V = I")
    ok, counts, parts = [], [], []
    for label, coords, values in cells(ds, "n_clusters"):
        if int(coords.get("d", ds.d.values.max())) < 3:
            continue
        final = values[:, -1]
        ok.append(final == 1)
        counts.append(final)
        parts.append(f"{label}: {int((final == 1).sum())}/{final.size}")
    if not ok:
        return Claim(claim, source, f"d = {ds.d.values.tolist()}", expected, NOT_MET, "no cell with d ≥ 3")
    out = every_trajectory(claim, source, expected, np.concatenate(ok), np.concatenate(counts),
                           "cluster count at T")
    return out.with_detail(f"T = {float(report.sweep.time.T):g}; one cluster at T per cell: {'; '.join(parts)}; "
                           + out.detail)


def rate_bound(beta: float, n: int) -> float:
    """The proof's lower bound on the rate of 1 - alpha(t): 1 / (2 n e^{2 beta}) ((6.7)-(6.8)).

    >>> round(rate_bound(1.0, 8), 6)
    0.008458
    """
    return float(1.0 / (2.0 * n * np.exp(2.0 * beta)))


def late_rate(times, gap, level: float = RATE_LEVEL) -> tuple[float, float, float, int]:
    """(rate, low, high, points): -slope of log(gap) against t over the checkpoints in `LATE`, with
    its t-interval at `level`; NaN where fewer than MIN_POINTS lie there.

    >>> t = np.arange(10.0); rate, lo, hi, m = late_rate(t, 0.05 * np.exp(-2 * t))
    >>> round(rate, 9), m
    (2.0, 10)
    """
    from scipy import stats

    t, gap = np.asarray(times, float), np.asarray(gap, float)
    use = np.isfinite(gap) & (gap > LATE[0]) & (gap <= LATE[1])
    m = int(use.sum())
    if m < MIN_POINTS:
        return float("nan"), float("nan"), float("nan"), m
    fit = stats.linregress(t[use], np.log(gap[use]))
    half = float(stats.t.ppf(0.5 + level / 2, m - 2)) * float(fit.stderr)
    return -float(fit.slope), -float(fit.slope) - half, -float(fit.slope) + half, m


def hemisphere_rate(report: ReportInput) -> Claim:
    """Thm 6.3 / Lemma 6.4 on the trajectories whose start lies in an open hemisphere."""
    from ..theory import equiangular_rate

    ds = report.ds
    claim = "a start in an open hemisphere clusters exponentially fast"
    source = "[GLPR-P] Thm 6.3 / Lemma 6.4"
    expected = (f"1 - overlap_min decays exponentially: its fitted rate's {RATE_LEVEL:.0%} interval above the "
                "proof's bound 1/(2n e^{2β}) on every trajectory started in a hemisphere")
    attention = plain_flow(report)
    if attention is None or "in_hemisphere" not in ds:
        return Claim(claim, source, f"model {report.sweep.model}, not the plain flow", expected, NOT_MET,
                     "the theorem is for SA or USA with Q = K = V = I")
    times = ds.t.values
    ok, lows, parts, started, total = [], [], [], 0, 0
    for label, coords, gap_min in cells(ds, "overlap_min"):
        hemi = trajectories(ds, "in_hemisphere", coords)[:, 0] == 1
        total += hemi.size
        started += int(hemi.sum())
        if not hemi.any():
            continue
        beta, n = float(coords.get("beta", ds.beta.values[0])), int(coords.get("n", ds.n.values[0]))
        bound = rate_bound(beta, n)
        fits = np.array([late_rate(times, 1.0 - row) for row in gap_min[hemi]])
        ok.append(np.isfinite(fits[:, 1]) & (fits[:, 1] > bound))
        lows.append(np.where(np.isfinite(fits[:, 1]), fits[:, 1], -np.inf))
        finite = fits[np.isfinite(fits[:, 0]), 0]
        rates = (f"rate median {fmt(float(np.median(finite)), 4)} ({fmt(float(finite.min()), 4)}-"
                 f"{fmt(float(finite.max()), 4)})" if finite.size else "no late regime")
        parts.append(f"{label}: {rates}, {int((~np.isfinite(fits[:, 0])).sum())} never in it; bound {bound:.3g}; "
                     f"linearised {fmt(equiangular_rate(beta, n, attention), 4)}")
    h = float(report.sweep.time.h)
    euler = f"; retraction Euler's linearised rate -2 log(1 - h)/h = {fmt(-2 * np.log1p(-h) / h, 4)} (SA)" \
        if report.sweep.integrator == "euler" and h < 1 else ""
    first = f"t = {float(times[0]):g}"
    if not ok:
        return Claim(claim, source, f"0 of {total} starts in an open hemisphere at {first}", expected, NOT_MET,
                     "no start meets the hypothesis")
    out = every_trajectory(claim, source, expected, np.concatenate(ok), np.concatenate(lows),
                           "lower end of the rate", worst_fmt=number, largest_is_worst=False)
    return out.with_detail(f"{started} of {total} starts in an open hemisphere at {first} (judged); late regime "
                           f"1e-12 < 1 - overlap_min ≤ {LATE[1]:g}; " + "; ".join(parts) + euler + "; " + out.detail)


def usa_overlaps(report: ReportInput) -> Claim:
    """Thm 6.8 for USA: every overlap of an equiangular start equals gamma(t) of (6.10)
    (`claims_glprp.equiangular`, the model's USA closed form)."""
    return replace(equiangular(report), source="[GLPR-P] Thm 6.8, (6.10) (USA)")


def usa_rate(report: ReportInput) -> Claim:
    """Thm 6.8 for USA: 1 - gamma(t) decays at the late rate 2 e^beta (`claims_glprp.equiangular_rate`
    judges against the model's rate, 2 e^beta for USA)."""
    out = equiangular_rate(report)
    return replace(out, claim="1 - γ(t) decays at the late-time rate 2 e^β (USA)",
                   source="[GLPR-P] Thm 6.8, (6.10) (USA)",
                   expected="measured = the ODE's rate over the window (0.1 %), the ODE's within 1 % of 2 e^β")


def saddle_escape(report: ReportInput) -> Claim:
    """Thm 4.1 / App. A (beta = 0): the antipodal pair is a strict saddle of E_0; two tokens started at
    overlap -1 + eps leave it after ~ log(1/eps) / lambda, lambda = 2 its unstable rate (the overlap
    solves a' = 1 - a^2 at beta = 0: a(t) = tanh(artanh(rho0) + t), which crosses 0 at -artanh(rho0)
    = (1/2) log((2 - eps)/eps)). Measured: the time the overlap crosses 0 (interpolated), fitted
    linearly in log(1/eps) over the rho0 cells (scipy's linregress, a 99 % t-interval widened by the
    checkpoint spacing over the range of log(1/eps)): holds when it meets 1/lambda = 1/2."""
    from scipy import stats

    ds, sweep = report.ds, report.sweep
    claim, source = "escape from the β = 0 saddle (antipodal pair) takes log(1/ε)/λ, λ = 2", "[GLPR-P] Thm 4.1 / App. A"
    expected = "crossing time of overlap 0 linear in log(1/ε) with slope 1/λ = 1/2 (99 % interval ± spacing / range)"
    rho0 = ds.rho0.values if "rho0" in ds.dims else np.atleast_1d(getattr(sweep.init, "rho0", None))
    if plain_flow(report) is None or sweep.init.kind != "overlap" or not (ds.beta.values == 0).any() \
            or (ds.n.values != 2).any() or rho0[0] is None or not (np.asarray(rho0, float) > -1).all():
        return Claim(claim, source, f"β = {ds.beta.values.tolist()}, init {sweep.init.kind}", expected, NOT_MET,
                     "needs the plain flow at β = 0, two tokens started at overlap ρ0 = -1 + ε > -1")
    x, y, parts = [], [], []
    for value in np.asarray(rho0, float):
        sel = {"beta": 0.0, **({"rho0": value} if "rho0" in ds.dims else {})}
        times = [crossing_time(row, ds.t.values, 0.0) for row in trajectories(ds, "overlap_min", sel)]
        eps = 1.0 + value
        x += [np.log(1.0 / eps)] * len(times)
        y += times
        parts.append(f"ε = {eps:.3g}: {fmt(float(np.nanmedian(times)), 4)} (closed form {fmt(-np.arctanh(value), 4)})")
    x, y = np.asarray(x), np.asarray(y)
    use = np.isfinite(y)
    if np.unique(x[use]).size < 2:
        return Claim(claim, source, "fewer than two ε escaped by T", expected,
                     not_checked("T too short for two ε"), "; ".join(parts))
    fit = stats.linregress(x[use], y[use])
    spacing = float(np.diff(ds.t.values).max()) / float(np.ptp(x[use]))
    half = float(stats.t.ppf(0.995, max(int(use.sum()) - 2, 1))) * float(fit.stderr) + spacing
    ok = abs(float(fit.slope) - 0.5) <= half
    return Claim(claim, source, f"slope {fmt(float(fit.slope), 4)} ± {fmt(half, 3)} over {int(use.sum())} trajectories",
                 expected, HOLDS if ok else FAILS, "; ".join(parts) + f"; {int((~use).sum())} not escaped by T")


def random_matrices_rate(report: ReportInput) -> Claim:
    """Problem 2 (open): do Thms 6.8-6.9 carry over to random Q, K, V as d grows? Per trajectory the
    late rate of 1 - overlap_min (`late_rate`); judged: what carrying over needs, the rates
    concentrating as d grows (their spread at the largest d below the smallest d's, Brown-Forsythe's
    test at 1 %); the medians beside Thm 6.8's 2 are shown, not judged (no theorem says what they tend to)."""
    from scipy import stats

    ds, sweep = report.ds, report.sweep
    claim = "Problem 2 (open): with random Q, K, V the late rate concentrates as d grows, as Thms 6.8-6.9's do"
    source = "[GLPR-P] Problem 2"
    expected = ("spread of the per-draw late rate of 1 - overlap_min smaller at the largest d than at the smallest "
                "(Brown-Forsythe, p < 0.01); no limit is known: the medians beside Thm 6.8's 2 are measured")
    if "d" not in ds.dims or ds.sizes["d"] < 2 or sweep.qk == "identity" or sweep.value == "identity":
        return Claim(claim, source, f"d = {np.atleast_1d(ds.d.values).tolist()}, qk {sweep.qk}, value {sweep.value}",
                     expected, NOT_MET, "needs random Q, K, V over several d")
    rates, parts = {}, []
    for label, coords, gap_min in cells(ds, "overlap_min"):
        fits = np.array([late_rate(ds.t.values, 1.0 - row) for row in gap_min])
        finite = fits[np.isfinite(fits[:, 0]), 0]
        rest = tuple((k, v) for k, v in coords.items() if k != "d")  # beta, n: compared over d within each
        rates.setdefault(rest, {}).setdefault(int(coords["d"]), []).append(finite)
        q1, q2, q3 = np.percentile(finite, [25, 50, 75]) if finite.size else (np.nan,) * 3
        parts.append(f"{label}: median {fmt(q2, 4)}, IQR {fmt(q3 - q1, 3)}, sd {fmt(np.std(finite, ddof=1), 3)} "
                     f"over {finite.size} draws ({int(fits.shape[0] - finite.size)} never in the late regime)")
    ok, measured = [], []
    for rest, by_d in rates.items():
        low, high = (np.concatenate(by_d[d]) for d in (min(by_d), max(by_d)))
        if low.size < 3 or high.size < 3:
            return Claim(claim, source, "fewer than 3 draws in the late regime", expected,
                         not_checked("T too short for the late regime"), "; ".join(parts))
        p_value = float(stats.levene(low, high, center="median").pvalue)
        spread = (float(np.std(low, ddof=1)), float(np.std(high, ddof=1)))
        ok.append(spread[1] < spread[0] and p_value < 0.01)
        measured.append(", ".join(f"{k} = {v:g}" for k, v in rest) + f": sd of the rate {fmt(spread[0], 3)} at d = "
                        f"{min(by_d)}, {fmt(spread[1], 3)} at d = {max(by_d)} (Brown-Forsythe p = {p_value:.2g})")
    return Claim(claim, source, "; ".join(measured), expected, HOLDS if all(ok) else FAILS,
                 "; ".join(parts) + "; an open problem: concentration is what carrying over needs, not a proof of it")


CLAIMS = {
    "geshkovski2023-problem2": (random_matrices_rate,),
    "geshkovski2023-one-cluster": (one_cluster_every_beta,),
    "geshkovski2023-saddle-escape": (saddle_escape,),
    "geshkovski2023-equiangular-usa": (usa_overlaps, usa_rate),
    "geshkovski2023-hemisphere-rate": (hemisphere_rate,),
    **REGIONS,  # Thm 5.1's tau*, Fig. 2's proven regions (claims_glprp_regions)
}
