"""[GLPR-P] section 6's claims that need a long look (pipeline/report/claims_glprp_rates.py), each on
tiny cubes computed by the real kernels, where its verdict is known:

* Thm 6.1 (one cluster in d >= 3): at T = 20, beta = 1, n = 4 every start has merged (t* = 4.7);
  at T = 0.5 none has (the uniform start of 4 points in d = 3 is not one cluster after half a unit);
  a cube with d = 2 only, or with V = -I, is outside the hypothesis.
* Thm 6.3 / Lemma 6.4 (exponential rate): d = 4 >= n = 4, so every start is in a hemisphere; by
  T = 20 each reaches the late regime, where 1 - overlap_min decays at the linearised rate ~2, far
  above the bound 1/(2n e^{2 beta}) = 0.017; at T = 2 no trajectory is in the late regime yet (no
  exponential decay seen: fails); 16 points in d = 2 lie in a half circle with probability
  16 / 2^15, so none of 4 starts meets the hypothesis.
* Thm 6.8 for USA, (6.10): the overlaps of an equiangular start on gamma(t) to RK4's error; the late
  rate 2 e^beta once gamma ~ 1, not while gamma ~ 0.45 (t = 0.6 at beta = 1, n = 4).
* Problem 2 (open): with Ginibre Q, K, V the per-draw late rate concentrates from d = 8 to d = 128
  (holds), not measurably from d = 8 to 10 (fails); fixed Q = K = V = I is outside the question.
* Thm 4.1 / App. A: two tokens near the antipodal saddle at beta = 0 leave it at -artanh(rho0), slope
  1/2 in log(1/eps); the same overlaps on a clock twice as slow give slope 1 (fails); beta = 1 is
  outside the hypothesis.
"""

from __future__ import annotations

import re

import numpy as np
from test_claims import by_source, claims_of, cube, entry
from test_claims_f26_flow import checked

from tokensweep.pipeline.report.claims import FAILS, HOLDS, NOT_MET
from tokensweep.pipeline.report.claims_glprp_rates import late_rate, rate_bound, saddle_escape

ONE = "[GLPR-P] Thm 6.1"
RATE = "[GLPR-P] Thm 6.3"


def one_cluster(tmp_path, **changes):
    spec = entry("geshkovski2023-one-cluster", **{"trajectories": 4, "grid": {"beta": 1.0, "d": 3, "n": 4},
                                                  "time": {"T": 20.0, "layers": 200, "checkpoints": 4}, **changes})
    return by_source(claims_of(cube(spec, tmp_path)), ONE)


def test_one_cluster_holds_at_t20_and_fails_at_t_half(tmp_path):
    late = one_cluster(tmp_path)
    assert late.verdict == HOLDS and late.measured.startswith("4 of 4") and "worst cluster count at T 1" in late.measured
    early = one_cluster(tmp_path, time={"T": 0.5, "layers": 5, "checkpoints": 1})
    assert early.verdict == FAILS and early.measured.startswith("0 of 4")


def test_one_cluster_hypothesis_d_at_least_3_and_v_identity(tmp_path):
    flat = one_cluster(tmp_path, grid={"beta": 1.0, "d": 2, "n": 4}, time={"T": 1.0, "layers": 10, "checkpoints": 1})
    assert flat.verdict == NOT_MET and "d ≥ 3" in flat.detail
    repelling = one_cluster(tmp_path, value="minus_identity", integrator="rk4",
                            time={"T": 1.0, "layers": 10, "checkpoints": 1})
    assert repelling.verdict == NOT_MET


def test_late_rate_recovers_an_exponential_and_needs_three_points():
    t = np.arange(0.0, 20.0)
    gap = 0.09 * np.exp(-2.0 * t) * (1 + 1e-3 * np.sin(t))  # a small wiggle: the interval has width
    rate, low, high, points = late_rate(t, gap)
    assert abs(rate - 2.0) < 1e-3 and low < rate < high and high - low < 0.01
    assert points == 13  # 0.09 e^{-2t} > 1e-12 up to t = 12
    assert np.isnan(late_rate(t[:2], gap[:2])[0])
    assert abs(rate_bound(1.0, 4) - 1 / (8 * np.e ** 2)) < 1e-15


def rate_claim(tmp_path, T: float, **changes):
    time = {"T": T, "layers": int(round(10 * T)), "checkpoints": [0.1] + [float(k) for k in range(1, int(T) + 1)]}
    spec = entry("geshkovski2023-hemisphere-rate", **{"trajectories": 4, "grid": {"beta": 1.0, "d": 4, "n": 4},
                                                      "time": time, **changes})
    return by_source(claims_of(cube(spec, tmp_path)), RATE)


def test_hemisphere_rate_holds_once_clustered_and_fails_before_the_late_regime(tmp_path):
    late = rate_claim(tmp_path, 20.0)
    assert late.verdict == HOLDS and late.measured.startswith("4 of 4")
    assert "4 of 4 starts in an open hemisphere" in late.detail
    worst = float(late.measured.rsplit(" ", 1)[1])
    assert 1.9 < worst < 2.2  # the linearised rate 2 (Euler's 2.107 at h = 0.1), the bound 0.017
    early = rate_claim(tmp_path, 2.0)
    assert early.verdict == FAILS and early.measured.startswith("0 of 4") and "4 never in it" in early.detail


def test_hemisphere_rate_hypothesis_not_met_without_a_start_in_a_hemisphere(tmp_path):
    flat = rate_claim(tmp_path, 2.0, grid={"beta": 1.0, "d": 2, "n": 16})
    assert flat.verdict == NOT_MET and flat.measured.startswith("0 of 4 starts")


def usa_claims(tmp_path, T: float):
    spec = entry("geshkovski2023-equiangular-usa", trajectories=2, grid={"beta": 1.0, "d": 4, "n": 4},
                 time={"T": T, "layers": int(round(50 * T)), "checkpoints": max(int(round(5 * T)), 2)})
    claims = claims_of(cube(spec, tmp_path))
    return [c for c in claims if c.source.startswith("[GLPR-P] Thm 6.8, (6.10)")]


def test_usa_equiangular_rate_is_2_e_beta_once_late_and_not_early(tmp_path):
    # (6.10) at beta = 1, n = 4: 1 - gamma decays at its late rate 2 e = 5.44 once gamma ~ 1 (gamma(2)
    # = 0.999); at t = 0.6 (gamma 0.45) it decays at a fraction of it, so the late-rate claim fails there
    overlaps, rate = usa_claims(tmp_path, 8.0)
    assert overlaps.verdict == HOLDS and rate.verdict == HOLDS and "2 e^β (USA)" in rate.claim
    assert "5.436" in rate.detail  # 2 e = 5.43656
    overlaps, rate = usa_claims(tmp_path, 0.6)
    assert overlaps.verdict == HOLDS and rate.verdict == FAILS


def escape_claim(tmp_path, change=None, **changes):
    spec = entry("geshkovski2023-saddle-escape", **{"trajectories": 2, "time": {"T": 6.0, "layers": 120, "checkpoints": 60},
                                                    "grid": {"beta": 0.0, "d": 3, "n": 2, "rho0": [-0.9999, -0.99]},
                                                    **changes})
    return checked(saddle_escape, spec, tmp_path, change)


def test_saddle_escape_takes_log_one_over_eps_over_two_and_a_slower_clock_fails(tmp_path):
    # a(t) = tanh(artanh(rho0) + t) crosses 0 at 2.6467 (eps = 1e-2) and 4.9517 (eps = 1e-4): slope 1/2
    held = escape_claim(tmp_path)
    assert held.verdict == HOLDS and "4.9517 (closed form 4.9517)" in held.detail
    # the same overlaps on a clock running twice as slow: escape times double, slope 1, not 1/2
    slow = escape_claim(tmp_path, change=lambda ds: ds.assign_coords(t=2 * ds.t))
    assert slow.verdict == FAILS and slow.measured.startswith("slope 1.00")
    flat = escape_claim(tmp_path, grid={"beta": 1.0, "d": 3, "n": 2, "rho0": [-0.9999, -0.99]})
    assert flat.verdict == NOT_MET


def problem2(tmp_path, d, **changes):
    spec = entry("geshkovski2023-problem2", **{"grid": {"beta": 1.0, "d": d, "n": 8}, **changes})
    return by_source(claims_of(cube(spec, tmp_path)), "[GLPR-P] Problem 2")


def test_problem2_rates_concentrate_from_d_8_to_128_not_from_8_to_10(tmp_path):
    # Ginibre Q, K, V: the per-draw late rate spreads (sd ~0.4) at d = 8, far less at d = 128 (~0.1)
    wide = problem2(tmp_path, [8, 128])
    assert wide.verdict == HOLDS
    low, high = (float(x) for x in re.search(r"sd of the rate ([\d.]+) at d = 8, ([\d.]+) at d = 128", wide.measured).groups())
    assert high < low / 2
    near = problem2(tmp_path, [8, 10])  # d barely grows: no significant narrowing
    assert near.verdict == FAILS
    fixed_matrices = problem2(tmp_path, [8, 128], qk="identity", value="identity")
    assert fixed_matrices.verdict == NOT_MET
