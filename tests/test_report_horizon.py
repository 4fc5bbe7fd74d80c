"""The horizon section: P(antipodal) at every checkpoint of a real small cube (the catalog entry
fedorov2026-horizon on a smaller grid) against the finite-T theory of `theory.finite`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_report_overlaps import cube_and_report, entry, section, table_rows

from tokensweep.pipeline.analysis.stats import closed_form, wilson_interval
from tokensweep.pipeline.report.horizon import horizon_table
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.theory import finite as theory_finite

H_BIAS = 0.01  # the discrete model's documented O(h) bias at h = 0.01 (docs/models.md section 4)


@pytest.fixture(scope="module")
def horizon(tmp_path_factory):
    spec = entry("fedorov2026-horizon", grid={"beta": [1.5, 3.0], "d": 3, "n": 2},
                 time={"T": 30.0, "layers": 3000, "checkpoints": [5.0, 10.0, 30.0]})
    return cube_and_report(spec, tmp_path_factory.mktemp("horizon"))


def test_each_checkpoint_against_the_backward_equation(horizon):
    sweep, store, paths = horizon
    assert Path(paths["horizon"]).stat().st_size > 1000
    with open_cube(store) as ds:
        table = horizon_table(ds)
    for beta in (1.5, 3.0):
        cell = table.sel(beta=beta).squeeze()
        expected = theory_finite.stochastic_outcomes(cell.t.values, beta, 3, "sa", sweep.eps)
        np.testing.assert_allclose(cell.theory_t.values, expected.antipodal, rtol=1e-12)
        np.testing.assert_allclose(cell.unresolved_t.values, expected.unresolved, rtol=1e-12)
        # sampling (99.9 % Wilson, 6 (cell, t) pairs) plus the O(h) bias; the unresolved fraction too
        lo, hi = wilson_interval(cell.n_antipodal.values, cell.n_traj.values, 0.999)
        assert np.all((lo - H_BIAS <= cell.theory_t.values) & (cell.theory_t.values <= hi + H_BIAS)), cell
        lo, hi = wilson_interval(cell.n_unresolved.values, cell.n_traj.values, 0.999)
        assert np.all((lo - H_BIAS <= cell.unresolved_t.values) & (cell.unresolved_t.values <= hi + H_BIAS))
        # the dense curve passes through the checkpoints' values
        at = np.searchsorted(cell.t_dense.values, cell.t.values)
        np.testing.assert_array_equal(cell.curve_antipodal.values[at], cell.theory_t.values)
    rows = table_rows(section(paths, "## P(antipodal) over the checkpoints against the finite-T theory"))
    assert [r[0] for r in rows[:3]] == ["5", "10", "30"]
    assert len(rows) == 3 + 1 + 6 and all(r[-1] in ("yes", "no") for r in rows[4:])  # 2 tables


def test_finite_time_outcomes_take_an_array_of_times(horizon):
    _, store, _ = horizon
    with open_cube(store) as ds:
        form = closed_form(ds, "finite_time_outcomes")
    cells = {"beta": np.array([1.5, 3.0]), "d": np.array([3, 3]), "n": np.array([2, 2])}
    times = np.array([5.0, 30.0])
    together = form(cells, times)
    assert together.shape == (3, 2, 2)
    for k, t in enumerate(times):
        # a shorter span takes other BDF steps (rtol 1e-6, atol 1e-9 per node): equal to ~1e-8
        np.testing.assert_allclose(together[..., k], form(cells, float(t)), rtol=0, atol=1e-7)


# -- the hybrid model: the same section, its own backward equation -------------------------------

# The hybrid's O(h) bias, measured against the theory (4000 trajectories per h, USA, d = 3): it is
# largest where P(antipodal at t) rises steeply and sigma^2 h (e^beta / 2)^2 is large, beta = sigma
# = 1.5 at t = 2.5: 0.2032 at h = 0.00125, 0.1635 at h = 0.000625 against 0.1532, ~40 h; beta = 1.5,
# sigma = 1 at t = 10: 0.534 at h = 0.0025, 0.500 at h = 0.00125 against 0.451, ~27 h. At h = 0.001:
H_BIAS_HYBRID = 0.04


@pytest.fixture(scope="module")
def hybrid_horizon(tmp_path_factory):
    spec = entry("fedorov2026-hybrid-horizon",
                 time={"T": 10.0, "layers": 10000, "checkpoints": [2.5, 5.0, 10.0]})
    return cube_and_report(spec, tmp_path_factory.mktemp("hybrid_horizon"))


def test_hybrid_each_checkpoint_against_its_backward_equation(hybrid_horizon):
    """The catalog entry at T = 10: every (cell, t) against `theory_finite.hybrid_outcomes`, where
    the T = infinity closed form (0 or 1 for USA) would be wrong by up to 0.5."""
    from tokensweep.pipeline import theory

    sweep, store, paths = hybrid_horizon
    assert Path(paths["horizon"]).stat().st_size > 1000
    with open_cube(store) as ds:
        table = horizon_table(ds)
    for beta in (0.5, 1.5):
        for sigma in (1.0, 1.5):
            cell = table.sel(beta=beta, sigma=sigma).squeeze()
            expected = theory_finite.hybrid_outcomes(cell.t.values, beta, sigma, "usa", 3, sweep.eps)
            np.testing.assert_allclose(cell.theory_t.values, expected.antipodal, rtol=1e-12)
            np.testing.assert_allclose(cell.unresolved_t.values, expected.unresolved, rtol=1e-12)
            # sampling (99.9 % Wilson, 12 (cell, t) pairs) plus the measured O(h) bias
            lo, hi = wilson_interval(cell.n_antipodal.values, cell.n_traj.values, 0.999)
            assert np.all((lo - H_BIAS_HYBRID <= cell.theory_t.values)
                          & (cell.theory_t.values <= hi + H_BIAS_HYBRID)), cell
            lo, hi = wilson_interval(cell.n_unresolved.values, cell.n_traj.values, 0.999)
            assert np.all((lo - H_BIAS_HYBRID <= cell.unresolved_t.values)
                          & (cell.unresolved_t.values <= hi + H_BIAS_HYBRID)), cell
    # beta = 1.5, sigma = 1 at t = 10: half the pairs unresolved, the T = infinity form says 1
    cell = table.sel(beta=1.5, sigma=1.0, t=10.0).squeeze()
    assert float(theory.hybrid_antipodal_probability(1.5, 1.0, "usa", 3)) == 1.0
    assert 0.3 < float(cell.theory_t) < 0.6 and float(cell.hi) < 0.9
    rows = table_rows(section(paths, "## P(antipodal) over the checkpoints against the finite-T theory"))
    assert [r[0] for r in rows[:3]] == ["2.5", "5", "10"]
    assert len(rows) == 3 + 1 + 12 and all(r[-1] in ("yes", "no") for r in rows[4:])


# -- [F26] Fig. 4: the dominant outcome over (beta, sigma) ---------------------------------------

def test_dominant_outcome_is_the_theory_phase_away_from_the_boundary(tmp_path):
    from tokensweep.pipeline import theory
    from tokensweep.pipeline.report.dominant import OUTCOMES, dominant_table

    # sigma_c(0.5) = 1.10, sigma_c(1.5) = 0.67: 0.2 and 2.0 lie far from the curve, 0.3 and 1.9 next
    # to a cell of the other phase (near the boundary by the section's rule)
    spec = entry("fedorov2026-fig4", grid={"beta": [0.5, 1.5], "sigma": [0.2, 0.3, 1.9, 2.0], "d": 3, "n": 2},
                 trajectories=32)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    assert Path(paths["dominant"]).stat().st_size > 1000
    with open_cube(store) as ds:
        table = dominant_table(ds).squeeze(["d", "n"])
    for beta in (0.5, 1.5):
        for sigma in (0.2, 0.3, 1.9, 2.0):
            cell = table.sel(beta=beta, sigma=sigma)
            p = float(theory.hybrid_antipodal_probability(beta, sigma, "usa", 3))
            assert float(cell.theory) == p and OUTCOMES[int(cell.phase)] == ("antipodal" if p > 0.5 else "single")
            assert bool(cell.near_boundary) == (sigma in (0.3, 1.9))
            o = theory_finite.hybrid_outcomes(sweep.time.T, beta, sigma, "usa", 3, sweep.eps)
            assert int(cell.phase_t) == int(np.argmax([o.unresolved, o.single, o.antipodal]))
            if sigma in (0.2, 2.0):  # far from sigma_c the fraction of the phase is ~1: no sampling doubt
                assert int(cell.dominant) == int(cell.phase)
    text = section(paths, "## Dominant outcome over (beta, sigma)")
    assert "in **4 of 4** cells away from the boundary" in text
