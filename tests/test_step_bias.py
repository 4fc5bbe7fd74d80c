"""The h -> 0 extrapolation of P(antipodal) (pipeline/analysis/step_bias.py).

- the weighted least-squares fit: its 99 % interval covers a known intercept ~99 % of the time
  on binomial draws from a known line (a calibration check of the weights and the variance);
- a real sweep with `layers` as a grid axis (the fig3 agreement test's cells, the real kernel):
  the extrapolated interval holds the limit diffusion's probability at T (finite-T theory) and
  the closed form where T resolves the pair, with no widening, while the coarsest step's own
  interval does not.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from tokensweep.pipeline import theory
from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.analysis.stats import wilson_interval
from tokensweep.pipeline.analysis.step_bias import zero_step_fit, zero_step_table
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store


def test_interval_covers_the_intercept_at_its_level():
    """400 replications of binomial counts on p(h) = 0.3 - 0.8 h: the 99 % interval misses the
    intercept Binomial(400, 0.01) times, <= 10 with probability 0.997; the linear fit's chi-square
    p-values are uniform (mean 1/2)."""
    rng = np.random.default_rng(7)
    h, N = np.array([0.1, 0.05, 0.02, 0.01]), np.array([2000, 2000, 3000, 4000])
    misses, p_values = 0, []
    for _ in range(400):
        fit = zero_step_fit(h, rng.binomial(N, 0.3 - 0.8 * h), N, degree=1, level=0.99)
        misses += not fit["lo"] <= 0.3 <= fit["hi"]
        p_values.append(fit["p_value"])
    assert misses <= 10
    assert abs(np.mean(p_values) - 0.5) < 0.05  # SE of the mean of 400 uniforms: 0.014


def test_quadratic_fit_sees_a_curvature_and_the_edges_are_handled():
    h, N = np.array([0.2, 0.1, 0.05, 0.02]), np.full(4, 10**6)
    p = 0.4 - 0.5 * h + 3.0 * h**2
    fit = zero_step_fit(h, np.round(p * N), N, degree=2)
    assert abs(fit["p0"] - 0.4) < 2e-3 and fit["z_top"] > 10
    assert zero_step_fit(h, np.round(p * N), N, degree=1)["p_value"] < 1e-6  # linear is rejected
    zero = zero_step_fit(h, np.zeros(4), N)  # no antipodal pair at all: a finite fit near 0
    assert np.isfinite(zero["p0"]) and abs(zero["p0"]) < 1e-5
    assert np.isnan(zero_step_fit([0.1], [3], [10])["p0"])  # one step: nothing to extrapolate


def test_table_without_layers_is_refused():
    table = xr.Dataset({"n_antipodal": ("beta", [1]), "n_traj": ("beta", [2])}, coords={"beta": [1.0]})
    with pytest.raises(ValueError, match="layers"):
        zero_step_table(table, 1.0)


@pytest.mark.slow
def test_extrapolated_sweep_agrees_with_the_closed_form_without_widening(tmp_path):
    """tests/test_agreement.py's cells need the 99 % Wilson interval widened by 0.01 at h = 0.01;
    here such cells at h = 0.1, 0.05, 0.02 are extrapolated to h = 0 and the 99 % interval holds
    the theory as it is: the limit diffusion's P(antipodal) at T = 20 (backward equation) in every
    cell, and the closed form where T = 20 resolves the pair (within 1e-3 of it)."""
    T = 20.0
    sweep = parse_sweep({
        "name": "zero-step", "model": "stochastic_transformer", "attention": "sa",
        "grid": {"beta": [1.0, 2.0], "d": [3, 5], "n": 2, "layers": [200, 400, 1000]},
        "time": {"T": T, "checkpoints": 1}, "trajectories": 3000, "partition_traj": 3000,
        "seed": 20261125,
    })
    store = tmp_path / "cube.zarr"
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    with xr.open_zarr(store, consolidated=False) as ds:
        table = antipodal_table(ds, level=0.99)
    fit = zero_step_table(table, T, level=0.99)
    for d, beta in [(3, 1.0), (3, 2.0), (5, 1.0), (5, 2.0)]:
        f = fit.sel(d=d, beta=beta).squeeze()
        closed = theory.antipodal_probability(beta, d)
        # the h -> 0 limit at T is the diffusion's probability at T, the finite-T theory
        assert float(f.lo) <= float(f.theory_t) <= float(f.hi), (d, beta, float(f.p0), float(f.theory_t))
        if abs(float(f.theory_t) - closed) < 1e-3:  # resolved by T = 20 (not d = 3, 5 at beta = 1)
            assert float(f.lo) <= closed <= float(f.hi), (d, beta, float(f.p0), closed)
        assert float(f.p_value) > 1e-3  # the linear form holds over h <= 0.1
    # power: at the coarsest step the bias puts the theory outside some cell's own interval
    coarse = table.isel(layers=0).squeeze()
    lo, hi = wilson_interval(coarse.n_antipodal, coarse.n_traj, 0.99)
    assert bool(((coarse.theory < lo) | (coarse.theory > hi)).any())
