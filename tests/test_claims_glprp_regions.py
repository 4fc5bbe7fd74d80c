"""[GLPR-P] Thm 5.1's tau*_beta and Fig. 6's g(tau) (pipeline/report/claims_glprp_regions.py,
pipeline/theory/regions.py), on tiny cubes computed by the real kernels:

* two USA tokens started 1.5 apart at beta = 2 (a checkpoint every 2e-3 to t = 0.6) close at
  sin tau e^{beta cos tau} to the central difference's remainder, and the speed peaks at the checkpoint
  next to tau*_2 = 0.6749;
* the same overlaps read as beta = 6 (a wrong beta) fail both: the speed is not beta = 6's, and its
  peak near 0.675 is not next to tau*_6 = 0.4024;
* SA is outside the claim (the speed is USA's).

Fig. 2's proven regions on a (beta, n) grid in d = 2: beta = 1 is Thm 4.3's, beta = 2 Thm 5.1's for
n = 3 only; every start of the 4 per cell in one cluster by T = 100 (holds), none by T = 0.5 (fails);
V = -I is outside the theorems.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from test_claims import cube, entry
from test_claims_f26_flow import checked

from tokensweep.pipeline.analysis.stats import stored_spec
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.claims import FAILS, HOLDS, NOT_MET
from tokensweep.pipeline.report.claims_glprp_regions import proven_region_claim, tau_star_claim, two_token_speed_claim
from tokensweep.pipeline.report.figures import plt
from tokensweep.pipeline.report.regions import plot_proven, proven_section, proven_table
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.theory.regions import hessian_g, tau_star, thm51_beta, two_token_speed

SMALL = {"trajectories": 1, "grid": {"beta": 2.0, "d": 2, "n": 2, "rho0": float(np.cos(1.5))},
         "time": {"T": 0.6, "layers": 600, "checkpoints": 300}}


def test_tau_star_solves_its_equation_and_thm51_beta_is_the_proof_threshold():
    for beta in (0.5, 2.0, 6.0, 40.0):
        star = float(tau_star(beta))
        assert abs(beta * np.sin(star) ** 2 - np.cos(star)) < 1e-12 and 0 < star < np.pi / 2
        # g is the speed's derivative, positive below tau*, negative above
        tau = np.linspace(0.05, 1.5, 50)
        slope = (two_token_speed(tau + 1e-6, beta) - two_token_speed(tau - 1e-6, beta)) / 2e-6
        assert np.allclose(slope, hessian_g(tau, beta), rtol=0, atol=1e-6 * np.exp(beta))
        assert (hessian_g(tau[tau < star], beta) > 0).all() and (hessian_g(tau[tau > star], beta) < 0).all()
    for n in (3, 4, 8, 32):
        b = float(thm51_beta(n))
        assert abs((n - 1) * float(tau_star(b)) - np.pi / 2) < 1e-9  # the threshold of (n - 1) tau* < pi/2
    # d = 4, beta = 3: 3 sin^2 = 3 cos, cos tau* = (sqrt 5 - 1) / 2
    assert abs(float(np.cos(tau_star(3.0, d=4))) - (np.sqrt(5) - 1) / 2) < 1e-12


def test_speed_and_tau_star_hold_at_their_beta_and_fail_at_a_wrong_one(tmp_path):
    with open_cube(cube(entry("geshkovski2023-tau-star", **SMALL), tmp_path)) as ds:
        ds = ds.compute()
    report = ReportInput(ds, stored_spec(ds), tmp_path, 0.95)
    speed, peak = two_token_speed_claim(report), tau_star_claim(report)
    assert speed.verdict == HOLDS and speed.measured.endswith("checkpoints agree") and speed.measured.split()[0] == speed.measured.split()[2]
    assert peak.verdict == HOLDS and abs(float(peak.measured.split("peak at τ = ")[1].split()[0]) - 0.6749) < 0.007 and "τ* = 0.6749" in peak.measured
    wrong = replace(report, ds=ds.assign_coords(beta=[6.0]))  # the same overlaps read as beta = 6
    wrong_speed, wrong_peak = two_token_speed_claim(wrong), tau_star_claim(wrong)
    assert wrong_speed.verdict == FAILS and wrong_peak.verdict == FAILS and "τ* = 0.4024" in wrong_peak.measured


def test_sa_is_outside_the_claim(tmp_path):
    spec = entry("geshkovski2023-tau-star", **{**SMALL, "attention": "sa"})
    assert checked(tau_star_claim, spec, tmp_path).verdict == NOT_MET


# ---------------------------------------------------------------------------------------------
# Fig. 2's proven regions (pipeline/report/regions.py) on a (beta, n) diagram in d = 2


def fig2(tmp_path, T: float, **changes):
    spec = entry("geshkovski2023-fig2", **{"trajectories": 4, "grid": {"beta": [1.0, 2.0], "d": 2, "n": [3, 4]},
                                           "time": {"T": T, "layers": int(round(10 * T)), "checkpoints": 1}, **changes})
    with open_cube(cube(spec, tmp_path)) as ds:
        ds = ds.compute()
    return ReportInput(ds, stored_spec(ds), tmp_path, 0.95)


def test_proven_regions_table_figure_and_claim(tmp_path):
    # beta = 1: Thm 4.3 (d = 2, beta <= 1) for n = 3, 4; beta = 2: Thm 5.1 for n = 3 (2 > 1.41), none for n = 4 (< 3.46)
    report = fig2(tmp_path, 100.0)
    table = proven_table(report.ds)
    assert table.theorems.sel(d=2).values.tolist() == [["Thm 4.3", "Thm 4.3"], ["Thm 5.1", ""]]
    assert (table.one == 4).all() and (table.n_traj == 4).all()  # at T = 100 every start has merged
    claim = proven_region_claim(report)
    assert claim.verdict == HOLDS and claim.measured.startswith("12 of 12")  # the three proven cells
    assert "Thm 4.3 8/8; Thm 5.1 4/4" in claim.detail and "beta = 2, d = 2, n = 4: 4/4" in claim.detail
    fig = plot_proven(table, report.ds.attrs, None)
    ax = fig.axes[0]
    framed = sorted((round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in ax.patches)
    assert framed == [(0, 0), (0, 1), (1, 0)]  # (beta index, n index) of the proven cells
    assert sorted(t.get_text() for t in ax.texts) == ["1.00", "1.00\n4.3", "1.00\n4.3", "1.00\n5.1"]
    plt.close(fig)
    part = proven_section(report)
    assert "## Proven single-cluster regions ([GLPR-P] Fig. 2)" in part.lines and "proven_regions" in part.figures


def test_proven_regions_fail_before_the_merge_and_need_the_plain_flow(tmp_path):
    early = proven_region_claim(fig2(tmp_path, 0.5))  # half a unit: no uniform start of 3 or 4 points has merged
    assert early.verdict == FAILS and early.measured.startswith("0 of 12")
    repelling = proven_region_claim(fig2(tmp_path, 0.5, value="minus_identity"))
    assert repelling.verdict == NOT_MET


def test_tau_star_not_judged_where_the_tokens_outrun_the_checkpoints(tmp_path):
    # a checkpoint every 0.05 at beta = 2: near tau* the angle moves ~0.15 between checkpoints
    spec = entry("geshkovski2023-tau-star", **{**SMALL, "time": {"T": 0.6, "layers": 600, "checkpoints": 12}})
    sparse = checked(tau_star_claim, spec, tmp_path)
    assert sparse.verdict.startswith("not checked") and "outrun the checkpoints" in sparse.measured
