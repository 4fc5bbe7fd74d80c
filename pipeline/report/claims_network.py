r"""The claims of the real-network catalog entries (`claims`; the network plug-in, `models/network/`):

* [GLPR-P] Fig. 1 (geshkovski2023-fig1-minilm): the histogram of the pairwise cosines concentrates
  at 1 with depth: on every prompt, the fraction of pairs with cosine >= 0.9 is larger at the last
  layer than at the first;
* [RST] (rst-passes-gpt2, rst-pretrained-minilm, rst-random-minilm): E(t) = 1 - mean_i cos(y_1, y_i)
  falls over passes (lower at the end of the last pass than at the end of the first, on every
  prompt) and reaches 0 (below `E_ZERO` at the last checkpoint; a finite run shows how far);
* [GLPR-E] Fig. 10 (glpre-fig10-spectra): the leading eigenvalue of the heads' value matrices is
  real for most heads (more than half of them, in every cell's weights).

A statement about every prompt is judged on every prompt (`claims.every_trajectory`: how many hold,
the worst); the spectra are one set per cell's weights, judged per cell.
"""

from __future__ import annotations

import numpy as np

from ..plugin import ReportInput
from .claims import FAILS, HOLDS, Claim, not_checked
from .claims_common import per_trajectory
from .network import grid_dims, real_leading
from .tables import fmt

__all__ = ["CLAIMS", "NEAR_ONE", "E_ZERO"]

NEAR_ONE = 0.9  # a pair is near 1 from this cosine on (the histogram's bins from their left edge)
E_ZERO = 0.05  # E(T) below this counts as E -> 0 at a finite horizon


def bin_edges(ds) -> np.ndarray:
    edges = ds["bin"].attrs.get("bin_edges") if "bin" in ds.coords else None
    return np.asarray(edges if edges is not None else np.linspace(-1, 1, ds.sizes["bin"] + 1), float)


def concentrates_at_one(report: ReportInput) -> Claim:
    top = bin_edges(report.ds)[:-1] >= NEAR_ONE - 1e-12

    def judge(hist):  # (prompt, t, bin) pair counts
        hist = np.where(hist >= 0, hist, 0).astype(float)
        near = hist[..., top].sum(-1) / np.maximum(hist.sum(-1), 1)
        return near[:, -1] > near[:, 0], near[:, -1]
    return per_trajectory("the pairwise-cosine histogram concentrates at 1 with depth", "[GLPR-P] Fig. 1",
                          f"fraction of pairs with cosine ≥ {NEAR_ONE} larger at the last layer than at the "
                          "first, on every prompt", "overlap_hist", judge, f"last-layer fraction ≥ {NEAR_ONE}",
                          largest_is_worst=False, worst_fmt=lambda x: fmt(x, 3))(report)


def pass_ends(report: ReportInput) -> np.ndarray:
    """Indices of the checkpoints at the end of a pass (t a multiple of the network's depth)."""
    t = np.asarray(report.ds["t"].values, float)
    return np.flatnonzero(np.isclose(np.mod(t, report.sweep.shape.layers), 0))


def energy_falls(report: ReportInput) -> Claim:
    claim, source = "E(t) falls over passes", "[RST] (outputs fed back)"
    ends = pass_ends(report)
    expected = "E at the end of the last pass below E at the end of the first, on every prompt"
    if len(ends) < 2:
        return Claim(claim, source, f"{len(ends)} pass end recorded", expected, not_checked("one pass: nothing to fall"))

    def judge(e):
        return e[:, ends[-1]] < e[:, ends[0]], e[:, ends[-1]] - e[:, ends[0]]
    return per_trajectory(claim, source, expected, "energy", judge, "change of E",
                          worst_fmt=lambda x: f"{x:+.3g}")(report)


def energy_to_zero(report: ReportInput) -> Claim:
    def judge(e):
        return e[:, -1] < E_ZERO, e[:, -1]
    return per_trajectory("E(t) = 1 - mean_i cos(y_1, y_i) → 0 over passes", "[RST] Figs. (E over passes)",
                          f"E below {E_ZERO} at the last checkpoint on every prompt (a finite run cannot show 0; "
                          "the worst E(T) says how far)", "energy", judge, "E(T)",
                          worst_fmt=lambda x: fmt(x, 3))(report)


def lead_real_for_most(report: ReportInput) -> Claim:
    claim, source = "the leading eigenvalue of a head's value matrix is real for most heads", "[GLPR-E] Fig. 10"
    expected = "more than half of the heads with a real leading eigenvalue, in every cell's weights"
    ds = report.ds
    if "value_lead_re" not in ds:
        return Claim(claim, source, "—", expected, not_checked("the cube has no value spectra"))
    re = ds["value_lead_re"].isel(traj=0)  # one spectrum per cell: every prompt sees the same weights
    im = ds["value_lead_im"].isel(traj=0)
    dims = grid_dims(ds)
    re, im = (a.transpose(*dims, "head").values.reshape(-1, a.sizes["head"]) for a in (re, im))
    real = real_leading(re, im)
    share = real.mean(axis=1)
    worst = int(np.argmin(share))
    measured = (f"{int(real[worst].sum())} of {real.shape[1]} heads real"
                + (f" in the worst of {len(share)} cells" if len(share) > 1 else ""))
    return Claim(claim, source, measured, expected, HOLDS if (share > 0.5).all() else FAILS,
                 f"real: imaginary part ≤ 1e-6 |λ_1|; complex leading pairs: {int((~real[worst]).sum())}")


RST = (energy_falls, energy_to_zero)
CLAIMS = {
    "geshkovski2023-fig1-minilm": (concentrates_at_one,),
    "rst-passes-gpt2": RST,
    "rst-pretrained-minilm": RST,
    "rst-random-minilm": RST,
    "glpre-fig10-spectra": (lead_real_for_most,),
}
