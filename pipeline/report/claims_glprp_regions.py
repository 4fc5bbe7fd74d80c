r"""The claims of [GLPR-P] about where one cluster is proven (`CLAIMS`, registered through
`claims_glprp_rates`): Thm 5.1's tau*_beta and Fig. 6's g(tau) (App. B), on two USA tokens.

Two USA tokens tau apart close at the speed f(tau) = sin tau e^{beta cos tau} (`theory.regions`), and
f' = g, Fig. 6's function (d = 2), so f peaks at tau*_beta, the root of beta sin^2 tau = cos tau
where g changes sign. A cube of two tokens started at an overlap rho0 (init: overlap) records their
angle tau(t) = arccos(overlap) at checkpoints dt apart; the central difference
v_k = (tau_{k-1} - tau_{k+1}) / (2 dt) is f(tau_k) to (dt^2 / 6) |tau'''|, tau''' = -f (g^2 + f g').

* `two_token_speed_claim`: |v_k - f(tau_k)| within `SPEED_MARGIN` times that remainder, bounded by
  its largest value over tau in [0, pi/2] (`speed_bound`), at every checkpoint with tau_k in
  [`MIN_TAU`, tau0) (a deterministic bound: every one);
* `tau_star_claim`: per beta, the slope of v along tau between neighbouring checkpoints has the sign
  of g wherever the interval does not hold tau*_beta, and the largest v is at one of the two
  checkpoints around tau*_beta (the parabola through the largest and its neighbours is shown); a beta
  whose tokens move more than `MAX_STEP` in tau between two checkpoints is not judged.
"""

from __future__ import annotations

import numpy as np

from ..analysis.stats import grid_dims
from ..models import get_model
from ..plugin import ReportInput
from ..theory.regions import hessian_g, tau_star, thm51_beta, two_token_speed
from .claims import FAILS, HOLDS, NOT_MET, Claim, cells_claim, every_trajectory, not_checked
from .claims_common import trajectories
from .regions import proven_table, region_hypothesis
from .tables import fmt

__all__ = ["CLAIMS", "measured_speeds", "speed_bound", "SPEED_MARGIN", "MIN_TAU"]

SPEED_MARGIN = 2.0  # the central difference's leading remainder, doubled for the higher orders
MAX_STEP = 0.05  # the largest step in tau between checkpoints at which the peak is judged
MIN_TAU = 0.05  # below, arccos of an overlap near 1 loses digits (the square root of the rounding)
SOURCE = "[GLPR-P] Thm 5.1 / App. B, Fig. 6"


def two_token_cube(report: ReportInput) -> str | None:
    """Why the cube is not two USA tokens of the plain flow started at an overlap (None if it is)."""
    sweep, ds = report.sweep, report.ds
    attention = getattr(get_model(sweep.model), "closed_form_attention", None)
    if attention is None or attention(sweep) != "usa":
        return "the speed sin τ e^{β cos τ} is USA's with Q = K = V = I"
    if sweep.init.kind != "overlap" or (ds.n.values != 2).any():
        return "needs two tokens started at an overlap (init: overlap, n = 2)"
    if ds.sizes["t"] < 5 or not np.allclose(np.diff(ds.t.values), ds.t.values[0], rtol=1e-6):
        return "needs equally spaced checkpoints from t = dt on"
    return None


def start_angle(report: ReportInput) -> float:
    """tau0 = arccos(rho0) of the cube's first rho0 cell (grid.rho0) or of init.rho0."""
    ds = report.ds
    rho0 = float(ds.rho0.values.ravel()[0]) if "rho0" in ds.coords else float(report.sweep.init.rho0)
    return float(np.arccos(rho0))


def measured_speeds(report: ReportInput, beta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(tau_k, v_k, dt) at `beta`, tau ascending: the angle at the checkpoints with tau_k in
    [MIN_TAU, tau0) and the central-difference speed there (the median over the counted
    trajectories of the first rho0 cell)."""
    ds = report.ds
    sel = {"beta": beta, **({"rho0": ds.rho0.values[0]} if "rho0" in ds.dims else {})}
    overlaps = trajectories(ds, "overlap_min", sel)
    tau0, dt = start_angle(report), float(ds.t.values[0])
    tau = np.concatenate([[tau0], np.median(np.arccos(np.clip(overlaps, -1.0, 1.0)), axis=0)])  # t = 0, dt, ...
    v, mid = (tau[:-2] - tau[2:]) / (2 * dt), tau[1:-1]
    use = (mid >= MIN_TAU) & (mid < tau0)
    order = np.argsort(mid[use])
    return mid[use][order], v[use][order], dt


def speed_bound(beta: float, dt: float) -> float:
    """SPEED_MARGIN x (dt^2 / 6) max over [0, pi/2] of |f (g^2 + f g')| (g' by central differences
    on a grid of 4001 points), plus the rounding of arccos over 2 dt (1e-9)."""
    tau = np.linspace(0.0, np.pi / 2, 4001)
    f, g = two_token_speed(tau, beta), hessian_g(tau, beta, 2)
    third = np.abs(f * (g ** 2 + f * np.gradient(g, tau)))
    return SPEED_MARGIN * float(third.max()) * dt ** 2 / 6.0 + 1e-9


def on_two_tokens(claim: str, expected: str):
    """A check `judge(report, claim, expected) -> Claim` run only on a cube of `two_token_cube`'s
    kind; else the hypothesis is not met."""
    def wrap(judge):
        def check(report: ReportInput) -> Claim:
            why = two_token_cube(report)
            if why is not None:
                return Claim(claim, SOURCE, "—", expected, NOT_MET, why)
            return judge(report, claim, expected)
        check.__qualname__ = judge.__qualname__
        return check
    return wrap


@on_two_tokens("two USA tokens τ apart close at sin τ e^{β cos τ}, whose τ-derivative is Fig. 6's g(τ)",
               f"|v - sin τ e^{{β cos τ}}| within the central difference's remainder at every checkpoint "
               f"with τ ≥ {MIN_TAU:g}")
def two_token_speed_claim(report: ReportInput, claim: str, expected: str) -> Claim:
    ok, labels, parts = [], [], []
    for beta in report.ds.beta.values.astype(float):
        taus, v, dt = measured_speeds(report, beta)
        if not taus.size:
            continue
        f = two_token_speed(taus, beta)
        err, bound = np.abs(v - f), speed_bound(beta, dt)
        ok += list(err <= bound)
        labels += [f"β = {beta:g}, τ = {x:.3g}" for x in taus]
        parts.append(f"β = {beta:g}: {taus.size} checkpoints, τ {taus.min():.3g}..{taus.max():.3g}, largest "
                     f"|v - f| {err.max():.2g} (relative {np.max(err / f):.2g}) against the bound {bound:.2g}")
    return cells_claim(claim, SOURCE, expected, ok, labels, "checkpoints", "; ".join(parts), chance=False)


@on_two_tokens("the closing speed peaks at τ*_β (β sin² τ* = cos τ*), where g changes sign",
               "the speed's slope along τ has g's sign between every two checkpoints not around τ*_β, "
               "its largest value at a checkpoint next to τ*_β")
def tau_star_claim(report: ReportInput, claim: str, expected: str) -> Claim:
    ok, parts, measured = [], [], []
    for beta in report.ds.beta.values.astype(float):
        taus, v, _ = measured_speeds(report, beta)
        star = float(tau_star(beta))
        if taus.size < 3 or np.diff(taus).max() > MAX_STEP:
            measured.append(f"β = {beta:g}: not judged, {taus.size} checkpoints" + (
                f", τ steps up to {np.diff(taus).max():.3g} > {MAX_STEP:g} (the tokens outrun the checkpoints)"
                if taus.size > 1 else ""))
            continue
        mids = 0.5 * (taus[1:] + taus[:-1])
        judged = (taus[1:] < star) | (taus[:-1] > star)  # intervals without tau*
        signs = np.sign(np.diff(v)) == np.sign(hessian_g(mids, beta, 2))
        top = int(np.argmax(v))
        below = int(np.searchsorted(taus, star)) - 1  # the checkpoints around tau*: below, below + 1
        near = 0 <= below < taus.size - 1 and top in (below, below + 1)
        vertex = np.nan
        if 0 < top < taus.size - 1:
            a, b, _ = np.polyfit(taus[top - 1:top + 2], v[top - 1:top + 2], 2)
            vertex = -b / (2 * a)
        ok.append(bool(signs[judged].all()) and near)
        measured.append(f"β = {beta:g}: peak at τ = {taus[top]:.4f} (parabola {fmt(vertex, 4)}) vs τ* = {star:.4f}")
        parts.append(f"β = {beta:g}: slope sign = g's on {int(signs[judged].sum())} of {int(judged.sum())} "
                     f"intervals, checkpoints around τ* {fmt(taus[max(below, 0)], 4)} and "
                     f"{fmt(taus[min(below + 1, taus.size - 1)], 4)}; τ* √β = {star * np.sqrt(beta):.3f} "
                     f"(1 + o(1) as β → ∞); the proof's (n - 1) τ* < π/2 covers n ≤ {int(np.ceil(np.pi / (2 * star)))}")
    if not ok:
        return Claim(claim, SOURCE, "; ".join(measured), expected,
                     not_checked("checkpoints too sparse along τ for every β"))
    return Claim(claim, SOURCE, "; ".join(measured), expected, HOLDS if all(ok) else FAILS,
                 "; ".join(parts) + f"; Thm 5.1 in d = 2 from β = {float(thm51_beta(3)):.3g} for n = 3, "
                 f"{float(thm51_beta(4)):.3g} for n = 4 (theory.regions.thm51_beta)")


def proven_region_claim(report: ReportInput) -> Claim:
    """Fig. 2: every start in a cell of a proven region ends in one cluster (`regions.proven_table`);
    judged on every trajectory of those cells at T (a finite T can only fall short), the cells outside
    every region shown beside."""
    claim = "one cluster inside Fig. 2's proven regions (Thms 4.1, 4.3, 5.1, 6.1)"
    source = "[GLPR-P] Fig. 2"
    expected = "n_clusters = 1 at T on every trajectory of every cell a theorem covers"
    why = region_hypothesis(report)
    if why is not None:
        return Claim(claim, source, "—", expected, NOT_MET, why)
    table = proven_table(report.ds)
    ok, counts, inside, outside = [], [], {}, []
    for label, coords, values in cells(report.ds):
        theorems = str(table.theorems.sel(coords).item())
        one = values == 1
        if theorems:
            ok.append(one)
            counts.append(values)
            for name in theorems.split(", "):
                k, m = inside.get(name, (0, 0))
                inside[name] = (k + int(one.sum()), m + one.size)
        else:
            outside.append(f"{label}: {int(one.sum())}/{one.size}")
    if not ok:
        return Claim(claim, source, "no cell in a proven region", expected, NOT_MET,
                     "the grid has no cell a theorem covers")
    out = every_trajectory(claim, source, expected, np.concatenate(ok), np.concatenate(counts), "cluster count at T")
    return out.with_detail(f"T = {table.attrs['T']:g}; per theorem: " +
                           "; ".join(f"{name} {k}/{m}" for name, (k, m) in sorted(inside.items())) +
                           f"; outside every region: {'; '.join(outside) if outside else 'none'}; " + out.detail)


def cells(ds):
    """(label, coords over beta, d, n, the counted trajectories' final cluster counts) per cell."""
    dims = grid_dims(ds)
    for idx in np.ndindex(*[ds.sizes[d] for d in dims]):
        coords = {d: ds[d].values[i].item() for d, i in zip(dims, idx)}
        label = ", ".join(f"{d} = {v:g}" for d, v in coords.items())
        full = {a: coords.get(a, np.atleast_1d(ds[a].values)[0].item()) for a in ("beta", "d", "n")}
        yield label, full, trajectories(ds, "n_clusters", coords)[:, -1]


CLAIMS = {
    "geshkovski2023-tau-star": (two_token_speed_claim, tau_star_claim),
    "geshkovski2023-fig2": (proven_region_claim,),
}
