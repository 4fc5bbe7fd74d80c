r"""[F26] Lemma 2 (`claims`): at sigma = 0 the hybrid model (7), x_i <- N(x_i + h A_i), converges
uniformly to the deterministic attention flow dx_i/dt = P_{x_i}(A_i(X)) ([GLPR-P]'s), O(h) apart.

Measured in one cube: the hybrid at sigma = 0 with `layers` as a grid axis (h = T / layers per
cell) and `record: [states]`. A cell's starts differ between layer counts (each cell has its own
random streams) and the start itself is not a checkpoint, so each trajectory is compared with the
flow started from its own state at the first checkpoint t_1 (the flow is autonomous: the lemma
applied to that start): `reference_states` integrates the flow (SA or USA, Q = K = V = I) with
scipy's DOP853 (rtol 1e-10), and the trajectory's difference is sup over checkpoints and tokens
of |x_i^h(t) - x_i(t)|. Per cell of the other axes, log(difference) is fitted linearly in log(h)
over every (trajectory, h) (scipy's linregress, a t-interval at `ORDER_LEVEL`): the difference
shrinks like h when the slope's interval meets [1 - ORDER_TOLERANCE, 1 + ORDER_TOLERANCE] (the
allowance for the next order's share at these h; a zero-order gap, or none shrinking, fails).
"""

from __future__ import annotations

import numpy as np

from ..plugin import ReportInput
from .claims import NOT_MET, Claim, cells_claim, not_checked
from .claims_common import cell_labels, trajectories
from .tables import fmt

__all__ = ["CLAIMS", "attention_field", "reference_states", "order_fit", "ORDER_LEVEL", "ORDER_TOLERANCE"]

ORDER_LEVEL = 0.99
ORDER_TOLERANCE = 0.1
ATTENTIONS = ("sa", "usa")


def attention_field(beta: float, n: int, d: int, attention: str = "sa"):
    """The flow's right-hand side on a flat vector of (trajectories, n, d) states: P_x(A_i(X)),
    A_i = sum_j w_ij x_j with w = softmax_j(beta <x_i, x_j>) (SA) or e^{beta <x_i, x_j>} / n (USA)."""
    def rhs(_t, y):
        x = y.reshape(-1, n, d)
        logit = beta * np.einsum("kid,kjd->kij", x, x)
        if attention == "sa":
            w = np.exp(logit - logit.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
        else:
            w = np.exp(logit) / n
        a = np.einsum("kij,kjd->kid", w, x)
        return (a - np.sum(a * x, -1, keepdims=True) * x).ravel()
    return rhs


def reference_states(states: np.ndarray, times, beta: float, attention: str = "sa") -> np.ndarray:
    """The flow at `times` from states[:, 0] (trajectory, t, token, component): the same shape."""
    from scipy.integrate import solve_ivp

    k, nt, n, d = states.shape
    times = np.asarray(times, float)
    sol = solve_ivp(attention_field(beta, n, d, attention), (times[0], times[-1]), states[:, 0].ravel(),
                    method="DOP853", t_eval=times, rtol=1e-10, atol=1e-12)
    return sol.y.T.reshape(nt, k, n, d).transpose(1, 0, 2, 3)


def order_fit(h, difference, level: float = ORDER_LEVEL) -> tuple[float, float, float]:
    """(slope, low, high) of log(difference) against log(h), its t-interval at `level`.

    >>> h = np.repeat([0.1, 0.05, 0.025], 2); slope, lo, hi = order_fit(h, 3 * h * [1.1, 0.9, 1, 1, 0.9, 1.1])
    >>> round(slope, 3), lo < 1 < hi
    (1.0, True)
    """
    from scipy import stats

    x, y = np.log(np.asarray(h, float)), np.log(np.asarray(difference, float))
    use = np.isfinite(x) & np.isfinite(y)
    if use.sum() < 3 or np.unique(x[use]).size < 2:
        return float("nan"), float("nan"), float("nan")
    fit = stats.linregress(x[use], y[use])
    half = float(stats.t.ppf(0.5 + level / 2, use.sum() - 2)) * float(fit.stderr)
    return float(fit.slope), float(fit.slope) - half, float(fit.slope) + half


def first_order(slope_low: float, slope_high: float) -> bool:
    """The slope's interval meets [1 - ORDER_TOLERANCE, 1 + ORDER_TOLERANCE]."""
    return bool(slope_high >= 1 - ORDER_TOLERANCE and slope_low <= 1 + ORDER_TOLERANCE)


def lemma2(report: ReportInput) -> Claim:
    """[F26] Lemma 2 per cell of the axes other than layers (module docstring)."""
    ds, sweep = report.ds, report.sweep
    claim, source = "at σ = 0 the hybrid model is O(h) from the deterministic flow", "[F26] Lemma 2"
    expected = (f"sup_t max_i |x_i^h - x_i| shrinks like h: the {ORDER_LEVEL:.0%} interval of the slope of "
                f"log(difference) in log(h) meets [{1 - ORDER_TOLERANCE:g}, {1 + ORDER_TOLERANCE:g}] in every cell")
    if "sigma" not in ds.dims:  # what the check reads, not the model's name
        return Claim(claim, source, f"model {sweep.model}", expected, not_checked("no noise amplitude σ in the cube"))
    if not (ds.sigma.values == 0).any():
        return Claim(claim, source, f"σ = {ds.sigma.values.tolist()}", expected, NOT_MET, "no cell with σ = 0")
    if sweep.attention not in ATTENTIONS:
        return Claim(claim, source, f"attention {sweep.attention}", expected, not_checked("no reference flow here"))
    if "states" not in ds or ds.sizes.get("layers", 1) < 2:
        return Claim(claim, source, "one step h, or no recorded states", expected,
                     not_checked("needs `record: [states]` and a `layers` grid axis with two or more counts"))
    T = float(sweep.time.T)
    others = [dim for dim in ds["nonfinite"].dims if dim not in ("traj", "layers", "sigma")]
    ok, labels, parts = [], [], []
    for label, idx in zip(cell_labels(ds["nonfinite"], others), np.ndindex(*[ds.sizes[o] for o in others])):
        coords = {o: ds[o].values[i].item() for o, i in zip(others, idx)}
        hs, diffs, medians = [], [], []
        for layers in ds.layers.values:
            states = trajectories(ds, "states", {**coords, "sigma": 0.0, "layers": layers})
            if states.shape[0] == 0:
                continue
            ref = reference_states(states, ds.t.values, float(coords["beta"]), sweep.attention)
            diff = np.linalg.norm(states - ref, axis=-1).max(axis=(1, 2))
            hs += [T / float(layers)] * diff.size
            diffs.append(diff)
            medians.append(f"h = {T / float(layers):g}: {fmt(float(np.median(diff)), 3)}")
        slope, low, high = order_fit(hs, np.concatenate(diffs) if diffs else [])
        ok.append(np.isfinite(slope) and first_order(low, high))
        labels.append(label)
        parts.append(f"{label}: slope {fmt(slope, 3)} [{fmt(low, 3)}, {fmt(high, 3)}], median difference "
                     + ", ".join(medians))
    out = cells_claim(claim, source, expected, ok, labels, "cells", "; ".join(parts))
    return out.with_detail(f"each trajectory against the flow from its own state at t = {float(ds.t.values[0]):g} "
                           f"(DOP853, rtol 1e-10) over t ≤ T = {T:g}; " + out.detail)


CLAIMS = {"fedorov2026-lemma2": (lemma2,)}
