"""Finite-T class probabilities of the two-token diffusions (pipeline/theory/finite.py).

- discretisation: grid refinement shows second-order convergence and a small error;
- T -> infinity: the solver's limit is the scale-function closed form (`theory`), within the
  solver's own error estimate (the refinement difference);
- the start law at t = 0: P(rho_0 <= -1 + eps) of the Beta law;
- a long simulation through the real pipeline (spec -> store -> numba kernel -> antipodal_table)
  at checkpoints where many trajectories are still unresolved: the three class fractions against
  the backward equation, within 99.9 % Wilson intervals widened by the documented O(h) bias only.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import special

from tokensweep.pipeline import theory as th
from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.analysis.stats import wilson_interval
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.theory import finite as tf

# (solver, args): stochastic SA/USA across beta_c and d = 2; hybrid SA bistable, USA above sigma_c
CASES = [
    (tf.stochastic_outcomes, dict(beta=2.0, d=4)),
    (tf.stochastic_outcomes, dict(beta=1.5, d=8)),
    (tf.stochastic_outcomes, dict(beta=1.0, d=2)),
    (tf.stochastic_outcomes, dict(beta=2.0, d=5, attention="usa")),
    (tf.hybrid_outcomes, dict(beta=1.0, sigma=np.sqrt(1.4), attention="sa", d=3)),
    (tf.hybrid_outcomes, dict(beta=1.0, sigma=1.2, attention="usa", d=4)),
]


def closed_form(solver, args, rho0=None):
    if solver is tf.stochastic_outcomes:  # SA and USA share the limit (models.md 4.3)
        if rho0 is not None:
            return float(th.antipodal_probability_given_overlap(rho0, args["beta"], args["d"]))
        return th.antipodal_probability(args["beta"], args["d"])
    return th.hybrid_antipodal_probability(args["beta"], args["sigma"], args["attention"], args["d"], rho0)


@pytest.mark.parametrize("solver, args", CASES)
def test_grid_refinement_is_second_order(solver, args):
    """Halving the grid step divides the change by ~4 (observed order >= 1.8 over the resolutions
    48, 96, 192) and the default grid's error, ~(4/3) |u(48) - u(96)|, is below 1.5e-3 at times
    where the fractions still move."""
    t = [1.0, 5.0]
    mid, fine, finest = (solver(t, **args, resolution=r) for r in (48, 96, 192))
    for field in ("antipodal", "single"):
        a, b, c = (np.asarray(getattr(o, field)) for o in (mid, fine, finest))
        d1, d2 = np.abs(a - b), np.abs(b - c)
        assert d1.max() < 1e-3, (field, d1)
        moving = d2 > 1e-7  # below that both are converged to rounding and the ratio is noise
        assert np.all(d1[moving] / d2[moving] > 2 ** 1.8), (field, d1, d2)


@pytest.mark.parametrize("solver, args", CASES)
def test_long_time_limit_is_the_closed_form(solver, args):
    """At t = 1e4 everything is resolved and P(antipodal) is the closed form within the solver's
    error estimate (twice the refinement difference; second order makes it (4/3) x)."""
    mid, fine = (solver([1e4], **args, resolution=r) for r in (48, 96))
    limit = closed_form(solver, args)
    error = 2 * abs(float(mid.antipodal[0] - fine.antipodal[0])) + 1e-6
    assert abs(float(mid.antipodal[0]) - limit) <= error, (mid.antipodal, limit, error)
    assert float(mid.unresolved[0]) < 1e-6
    assert abs(float(mid.single[0]) - (1 - limit)) <= error


@pytest.mark.parametrize("rho0", [-0.6, 0.3, 0.9])
def test_long_time_limit_from_a_given_overlap(rho0):
    args = dict(beta=2.0, d=4)
    mid, fine = (tf.stochastic_outcomes([1e4], **args, rho0=rho0, resolution=r) for r in (48, 96))
    error = 2 * abs(float(mid.antipodal[0] - fine.antipodal[0])) + 1e-6
    assert abs(float(mid.antipodal[0]) - closed_form(tf.stochastic_outcomes, args, rho0)) <= error


def test_below_beta_c_every_pair_ends_single():
    out = tf.stochastic_outcomes([1e4], 0.3, 4)  # beta_c(4) = 0.658
    assert float(out.antipodal[0]) < 1e-6 and float(out.single[0]) > 1 - 1e-6


@pytest.mark.parametrize("d", [3, 4, 8])
def test_start_law_at_time_zero(d):
    """At t = 0 the classes are those of rho_0 ~ 2 Beta((d-1)/2, (d-1)/2) - 1: the trapezoid rule
    with the band edge on a node holding 1/2 converges at second order to the Beta law's mass."""
    eps = 1e-3
    exact = special.betainc((d - 1) / 2, (d - 1) / 2, eps / 2)
    errors = []
    for resolution in (48, 96):
        out = tf.stochastic_outcomes([0.0], 2.0, d, eps=eps, resolution=resolution)
        assert abs(float(out.antipodal[0]) - float(out.single[0])) < 1e-12  # symmetric start law
        errors.append(abs(float(out.antipodal[0]) - exact))
    assert errors[1] < 0.02 * exact and errors[0] / errors[1] > 2 ** 1.8, (errors, exact)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="sigma"):
        tf.hybrid_outcomes([1.0], 1.0, 0.0)
    with pytest.raises(ValueError, match="eps"):
        tf.stochastic_outcomes([1.0], 1.0, 3, eps=1.5)
    with pytest.raises(ValueError, match="t="):
        tf.stochastic_outcomes([-1.0], 1.0, 3)
    with pytest.raises(ValueError, match="rho0"):
        tf.stochastic_outcomes([1.0], 1.0, 3, rho0=1.5)


# ---------------------------------------------------------------------------------------------
# Against a long simulation through the real kernel
# ---------------------------------------------------------------------------------------------

# models.md 4.3: the largest measured step bias of the discrete model is 0.042 - 0.035 = 0.007 at
# h = 0.01 (d = 8, beta = 1.5), i.e. 0.7 h. models.md 5: the hybrid's at these cells and t <= 5,
# |slope| <= 4.1 per unit h (99 % upper bound, benchmarks/bench_finite_t.py)
STEP_BIAS_PER_H = 0.7
HYBRID_STEP_BIAS_PER_H = 4.2
LEVEL = 0.999


def run_cube(tmp_path, spec):
    sweep = parse_sweep(spec)
    store = tmp_path / "cube.zarr"
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    return xr.open_zarr(store, consolidated=False)


def check_classes(ds, h, times, min_unresolved, bias_per_h=STEP_BIAS_PER_H):
    checked = 0
    for t in times:
        table = antipodal_table(ds, t=t, level=LEVEL)
        assert float(table.unresolved_t.max()) > min_unresolved  # a finite-T test, not T = infinity
        for count, column in (("n_antipodal", "theory_t"), ("n_single", "single_t"),
                              ("n_unresolved", "unresolved_t")):
            lo, hi = wilson_interval(table[count], table.n_traj, LEVEL)
            widen = bias_per_h * h
            inside = (table[column] >= lo - widen) & (table[column] <= hi + widen)
            assert bool(inside.all()), (t, count, table[count].values / table.n_traj.values,
                                        table[column].values)
            checked += inside.size
    return checked


@pytest.mark.slow
def test_stochastic_classes_at_finite_t_match_the_backward_equation(tmp_path):
    T, layers = 5.0, 2000
    with run_cube(tmp_path, {
        "name": "finite-t", "model": "stochastic_transformer", "attention": "sa",
        "grid": {"beta": [1.0, 2.0], "d": [3, 4], "n": 2},
        "time": {"T": T, "layers": layers, "checkpoints": 5},
        "trajectories": 6000, "partition_traj": 3000, "seed": 20261125,
    }) as ds:
        assert check_classes(ds, T / layers, [1.0, 5.0], min_unresolved=0.25) == 24
        table = antipodal_table(ds, t=1.0)
        # the T = infinity form is far outside the intervals at t = 1: the test has power
        assert float(np.abs(table.theory - table.p_antipodal).max()) > 0.1


@pytest.mark.slow
def test_hybrid_classes_at_finite_t_match_the_backward_equation(tmp_path):
    T, layers = 5.0, 5000
    with run_cube(tmp_path, {
        "name": "finite-t-hybrid", "model": "hybrid", "attention": "sa",
        "grid": {"beta": [1.0], "sigma": [float(np.sqrt(1.4)), 1.6], "d": 3, "n": 2},
        "time": {"T": T, "layers": layers, "checkpoints": 1},
        "trajectories": 4000, "partition_traj": 2000, "seed": 20261126,
    }) as ds:
        assert check_classes(ds, T / layers, [5.0], min_unresolved=0.25,
                             bias_per_h=HYBRID_STEP_BIAS_PER_H) == 6
