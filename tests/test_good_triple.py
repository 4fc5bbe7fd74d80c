"""[GLPR-E] Definition 1 on random matrices (pipeline/theory/good_triple.py) and line 199's row on
glpre-fig6 (pipeline/report/claims_glpre.py).

Why the d = 2 share is known: a 2 x 2 real Ginibre matrix has real eigenvalues with probability
1/sqrt(2) (Edelman, Kostlan, Shub 1994), and V -> -V keeps its law, so the real leading eigenvalue
is positive half of the time: the share meeting condition (i) is 1 / (2 sqrt(2)) = 0.3536.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from test_claims import claims_of, cube, entry

from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.claims import FAILS, HOLDS, NOT_MET
from tokensweep.pipeline.report.claims_glpre import GINIBRE_DRAWS, ginibre_good_share, share_verdict
from tokensweep.pipeline.spec.load import parse_sweep, read_spec
from tokensweep.pipeline.theory.good_triple import ginibre_leading_share, leading_real_positive_simple


def test_condition_i_on_known_spectra():
    V = [np.diag([1.0, -0.5, 0.2]), np.diag([-1.0, 0.5, 0.2]), np.diag([1.0, 1.0, 0.2]),
         np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.5]]),  # leading pair +-i
         np.array([[0.1, -0.3, 0.0], [0.3, 0.1, 0.0], [0.0, 0.0, 0.5]])]  # pair inside, 0.5 leads
    got = leading_real_positive_simple(np.linalg.eigvals(np.stack(V)))
    assert got.tolist() == [True, False, False, False, True]


def test_d2_share_is_one_over_two_sqrt2():
    draws = 4000
    k = ginibre_leading_share(2, draws, 7)
    ci = stats.binomtest(k, draws).proportion_ci(0.999, method="exact")
    assert ci.low <= 1 / (2 * np.sqrt(2)) <= ci.high, (k, ci)
    # and the claim's verdict tells a right share from a wrong one on the same draws
    assert share_verdict(k, draws, 0.354)[0] == HOLDS
    assert share_verdict(k, draws, 0.30)[0] == "fails"  # 0.054 off: outside ±(0.019 + 0.005)


def test_the_row_on_glpre_fig6_small():
    sweep = parse_sweep({**read_spec("glpre-fig6", "small"), "name": "glpre-fig6"})
    claim = ginibre_good_share(ReportInput(None, sweep, None))
    k, of, draws = claim.measured.split()[:3]
    assert (of, int(draws)) == ("of", GINIBRE_DRAWS["small"]) and 0 < int(k) < int(draws), claim
    assert claim.verdict == HOLDS, claim


def fig13_claims(tmp_path, **changes):
    spec = entry("glpre-fig13", **{"trajectories": 4, "grid": {"beta": 1.0, "d": 3, "n": 8},
                                   "time": {"T": 10.0, "layers": 100, "checkpoints": 2}, **changes})
    return [c for c in claims_of(cube(spec, tmp_path)) if c.source == "[GLPR-E] Thm 4.1 / Figs. 13-14"]


def test_fig13_planes_hold_on_a_good_triple(tmp_path):
    """The entry's V (a simple top eigenvalue 1 above a complex pair) is a good triple: psi_1^T z
    takes 1 to 3 values at T = 10 on every trajectory."""
    planes, mostly = fig13_claims(tmp_path)
    assert planes.verdict == HOLDS and planes.measured.startswith("4 of 4"), planes
    assert mostly.verdict in (HOLDS, FAILS)  # judged (4 draws: the Wilson interval decides)


def test_fig13_complex_leading_pair_is_outside_def_1(tmp_path):
    """V with a leading complex pair 0.3 +- 1.2i (modulus 1.24 > 1): Def. 1 fails, so Thm 4.1's
    conclusion is not judged; the cube's psi_1 count is -1 (undefined) on every trajectory."""
    V = [[0.3, -1.2, 0.0], [1.2, 0.3, 0.0], [0.0, 0.0, 1.0]]
    for claim in fig13_claims(tmp_path, V=V):
        assert claim.verdict == NOT_MET and "0.3+1.2j" in claim.detail, claim
