"""The pipeline's two-token outcomes against the exact scale-function probability.

Every trajectory goes through the real path (spec -> plan -> seeds -> kernel -> zarr ->
xarray), and each cell's empirical P(antipodal) must hold the closed form within its
99 % Wilson interval widened by the documented step-size bias (models.md: the discrete
model at h = 0.01 is low by up to ~0.007 at d = 8; smaller d is closer). The seed is fixed,
so the test is deterministic; with four independent cells at 99 % a correct pipeline
fails for some seed about 4 % of the time, a wrong probability (e.g. the d = 8 law in a
d = 3 cell) essentially always.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from tokensweep.pipeline.analysis.stats import wilson_interval
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.theory import antipodal_probability

STEP_BIAS = 0.01  # O(h) discretisation bias at h = 0.01 (models.md, section 4)
CELLS = [(2, 1.0), (3, 1.0), (4, 2.0), (5, 2.0)]  # (d, beta): theory 0.5, 0.268, 0.281, 0.224


@pytest.fixture(scope="module")
def final_classes(tmp_path_factory):
    store = tmp_path_factory.mktemp("agreement") / "cube.zarr"
    sweep = parse_sweep({
        "name": "agreement", "model": "stochastic_transformer", "attention": "sa",
        "grid": {"beta": [1.0, 2.0], "d": [2, 3, 4, 5], "n": 2},
        "time": {"T": 30.0, "layers": 3000, "checkpoints": 3},
        "trajectories": 600, "partition_traj": 300, "seed": 20261122,
    })
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    with xr.open_zarr(store, consolidated=False) as ds:
        return ds.cluster_class.isel(t=-1, n=0).load()


@pytest.mark.parametrize("d, beta", CELLS)
def test_antipodal_probability_matches_theory(final_classes, d, beta):
    classes = final_classes.sel(d=d, beta=beta).values
    assert (classes == 0).mean() < 0.01  # T = 30 resolves almost every trajectory here
    k, n = int((classes == 2).sum()), classes.size
    lo, hi = wilson_interval(k, n, level=0.99)
    theory = float(antipodal_probability(beta, d))
    assert lo - STEP_BIAS <= theory <= hi + STEP_BIAS, (k / n, (lo, hi), theory)


def test_the_check_can_fail(final_classes):
    """A cell compared with another dimension's law is rejected: the test has power."""
    classes = final_classes.sel(d=3, beta=1.0).values
    lo, hi = wilson_interval(int((classes == 2).sum()), classes.size, level=0.99)
    wrong = float(antipodal_probability(1.0, 8))
    assert not lo - STEP_BIAS <= wrong <= hi + STEP_BIAS
    assert np.isfinite(lo) and hi > lo
