"""The R^d flow's recorded states (`record: [states]`) and [GLPR-E] Prop. C.2 on them.

- The kernel: z at checkpoint c is the z(T) of the same run stopped there, bit for bit; recording
  leaves every other output bit-identical; a non-finite trajectory's states are NaN.
- `geometry.hull_excess`: the hull's facets and the flat-hull LP agree with a brute-force answer.
- The claim: glpre-hull's cube holds on every trajectory; the same cube with its later states
  stretched by 1 % fails; RK4 and V != I are not judged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import tokensweep
from tokensweep.kernels.euclidean.flow import simulate_euclidean_flow
from tokensweep.pipeline.analysis.geometry import hull_excess, hull_growth
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.claims import FAILS, HOLDS, NOT_MET
from tokensweep.pipeline.report.claims_glpre import HULL_TOL, hull_shrinks
from tokensweep.pipeline.report.page import write_report
from tokensweep.pipeline.store.lifecycle import prepare_store


def rngs(count, base=0):
    return [np.random.default_rng(base + s) for s in range(count)]


CELL = dict(n=7, d=2, beta=2.0, V=np.eye(2), integrator="euler")


def test_states_are_the_final_states_of_the_runs_stopped_at_each_checkpoint():
    # h = 1/8, a binary fraction: every stopped run has exactly the same step (T / layers)
    checkpoints = [0, 5, 12, 30]
    run = simulate_euclidean_flow(rngs(3), T=3.75, layers=30, checkpoint_layers=checkpoints,
                                  return_states=True, **CELL)
    assert run["states"].shape == (3, 4, 7, 2)
    for c, layers in enumerate(checkpoints[1:], start=1):
        stopped = simulate_euclidean_flow(rngs(3), T=0.125 * layers, layers=layers,
                                          checkpoint_layers=[layers], **CELL)
        np.testing.assert_array_equal(run["states"][:, c], stopped["z_final"])
    start = np.array([np.random.default_rng(s).uniform(-5.0, 5.0, size=(7, 2)) for s in range(3)])
    np.testing.assert_array_equal(run["states"][:, 0], start)  # checkpoint 0: the start (box, 5)


def test_recording_leaves_every_other_output_bit_identical():
    plain = simulate_euclidean_flow(rngs(4), T=2.0, layers=20, checkpoint_layers=[10, 20], **CELL)
    recorded = simulate_euclidean_flow(rngs(4), T=2.0, layers=20, checkpoint_layers=[10, 20],
                                       return_states=True, **CELL)
    assert set(recorded) == set(plain) | {"states"}
    for name in plain:
        np.testing.assert_array_equal(plain[name], recorded[name], err_msg=name)


def test_a_trajectory_that_overflows_has_nan_states_from_then_on():
    out = simulate_euclidean_flow(rngs(2), n=4, d=1, beta=1.0, T=400.0, layers=400,
                                  checkpoint_layers=[1, 400], V=np.eye(1) * 2, return_states=True)
    assert out["nonfinite"].all()
    assert np.isfinite(out["states"][:, 0]).all() and np.isnan(out["states"][:, 1]).all()


def brute_force_excess(outer, inner, directions):
    """max over unit directions u of max_p <u, p> - max_o <u, o>: the support functions' gap."""
    return max(0.0, float(np.max(np.max(inner @ directions.T, axis=0) - np.max(outer @ directions.T, axis=0))))


@pytest.mark.parametrize("seed", range(4))
def test_hull_excess_is_zero_inside_and_matches_the_support_gap_outside(seed):
    g = np.random.default_rng(seed)
    outer = g.normal(size=(9, 2))
    weights = g.dirichlet(np.ones(9), size=5)
    assert hull_excess(outer, weights @ outer) <= 1e-12  # convex combinations
    angles = np.linspace(0, 2 * np.pi, 20001)
    directions = np.c_[np.cos(angles), np.sin(angles)]
    outside = outer.mean(axis=0) + 3 * g.normal(size=(4, 2))
    # the largest facet distance is at most the Euclidean distance, which the support gap bounds
    # from above; where the nearest hull point is a facet's, they are equal
    assert 0 < hull_excess(outer, outside) <= brute_force_excess(outer, outside, directions) + 1e-6
    # a flat hull (collinear points) by the LP: the L-infinity distance
    line = np.c_[np.linspace(-1, 1, 5), np.zeros(5)]
    assert hull_excess(line, [[0.3, 0.0]]) == pytest.approx(0.0, abs=1e-12)
    assert hull_excess(line, [[0.3, -0.2]]) == pytest.approx(0.2, abs=1e-9)
    assert hull_excess(line, [[1.5, 0.0]]) == pytest.approx(0.5, abs=1e-9)
    assert hull_excess([[0.0], [2.0]], [[2.5], [1.0]]) == 0.5  # d = 1


@pytest.fixture(scope="module")
def hull_cube(tmp_path_factory):
    sweep = tokensweep.load_spec("glpre-hull", trajectories=6)
    store = tmp_path_factory.mktemp("hull") / "cube.zarr"
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    return sweep, xr.open_zarr(store, consolidated=False).load()


def test_glpre_hull_holds_and_its_report_and_summary_say_so(hull_cube, tmp_path):
    sweep, ds = hull_cube
    assert ds.states.dims == ("beta", "d", "n", "t", "traj", "token", "component")
    growth = hull_growth(ds)
    assert growth.shape == (3, 1, 1, 6) and float(growth.max()) <= HULL_TOL
    paths = write_report(ds, tmp_path / "report")
    claims = json.loads(Path(paths["summary"]).read_text())["claims"]
    row = next(c for c in claims if c["source"] == "[GLPR-E] Prop. C.2")
    assert row["verdict"] == HOLDS and row["measured"].startswith("18 of 18 trajectories")


def test_a_hull_that_grows_fails_and_other_settings_are_not_judged(hull_cube):
    sweep, ds = hull_cube
    stretched = ds.copy()
    stretched["states"] = ds.states * xr.where(ds.t > float(ds.t[0]), 1.01, 1.0)
    claim = hull_shrinks(ReportInput(stretched, sweep, Path(".")))
    assert claim.verdict == FAILS and claim.measured.startswith("0 of 18")
    rk4 = hull_shrinks(ReportInput(ds, sweep.model_copy(update={"integrator": "rk4"}), Path(".")))
    assert rk4.verdict.startswith("not checked") and "rk4" in rk4.verdict + rk4.detail
    other = hull_shrinks(ReportInput(ds, sweep.model_copy(update={"V": "minus_identity"}), Path(".")))
    assert other.verdict == NOT_MET
    assert hull_shrinks(ReportInput(ds.drop_vars("states"), sweep, Path("."))).verdict.startswith("not checked")


def test_states_need_one_n_and_one_d_and_are_the_only_observable():
    base = {"name": "e", "model": "euclidean_flow", "time": {"T": 1.0, "layers": 10}, "trajectories": 2}
    with pytest.raises(SpecError, match="record: states is sized by n and d, but grid.n has 2 values"):
        tokensweep.load_spec({**base, "grid": {"beta": 1, "d": 2, "n": [3, 4]}, "record": ["states"]})
    with pytest.raises(SpecError, match="record.0: Input should be 'states'"):
        tokensweep.load_spec({**base, "grid": {"beta": 1, "d": 2, "n": 3}, "record": ["gram"]})


# ---------------------------------------------------------------------------------------------
# [GLPR-P] Example 9.3 from explicit starts (init: {kind: points})

@pytest.fixture(scope="module")
def example93(tmp_path_factory):
    sweep = tokensweep.load_spec("geshkovski2023-example93")
    store = tmp_path_factory.mktemp("ex93") / "cube.zarr"
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    return sweep, xr.open_zarr(store, consolidated=False).load()


def test_points_start_every_trajectory_from_the_given_tokens(example93):
    sweep, ds = example93
    start = ds.states.isel(t=0).squeeze(drop=True)  # (beta, token, component) at t = 0.03
    assert start.sizes == {"beta": 5, "token": 3, "component": 2}
    # z3 leaves 0 along the symmetry axis, z1 and z2 barely move
    assert float(abs(start.sel(token=2, component=0)).max()) == 0.0
    np.testing.assert_allclose(start.isel(token=[0, 1]).values[-1], [[1, 1], [-1, 1]], atol=1e-12)


def test_example93_selects_the_averaged_branch_and_a_cube_on_another_branch_fails(example93):
    from tokensweep.pipeline.report.claims_glprp import hardmax_selection

    sweep, ds = example93
    claim = hardmax_selection(ReportInput(ds, sweep, Path(".")))
    assert claim.verdict == HOLDS, claim
    distances = [float(part.split(": ")[1]) for part in claim.measured.split("; ")[0].split(", ")]
    assert len(distances) == 5 and distances[-1] < distances[0] / 20  # 0.107 -> 0.0019 (measured)
    # z3 on the branch toward z1 instead: the averaged one is no longer approached
    toward_z1 = ds.copy()
    t = ds.t
    states = ds.states.copy()
    states.loc[{"token": 2, "component": 0}] = (1 - np.exp(-t)).broadcast_like(states.sel(token=2, component=0))
    states.loc[{"token": 2, "component": 1}] = (1 - np.exp(-t)).broadcast_like(states.sel(token=2, component=1))
    toward_z1["states"] = states
    assert hardmax_selection(ReportInput(toward_z1, sweep, Path("."))).verdict == FAILS
    other_start = sweep.model_copy(update={"init": sweep.init.model_copy(update={"x": ((1.0, 1.0), (-1.0, 1.0), (0.0, 0.5))})})
    assert hardmax_selection(ReportInput(ds, other_start, Path("."))).verdict == NOT_MET


@pytest.mark.parametrize("init, message", [
    ({"kind": "points"}, "init.x: missing: give the tokens, n lists of d numbers"),
    ({"kind": "points", "x": [[1, 1], [0]]}, "init.x: got ((1.0, 1.0), (0.0,)): give n tokens, each a list of d finite numbers"),
    ({"kind": "points", "x": [[1, 1, 1]] * 3}, "init.x: holds 3 tokens of 3 numbers, but grid.n is [3] and grid.d is [2]"),
    ({"kind": "box", "x": [[1, 1]]}, "init.x: is not a parameter of kind box"),
])
def test_points_that_do_not_fit_are_refused_in_one_line(init, message):
    base = {"name": "e", "model": "euclidean_flow", "grid": {"beta": 1, "d": 2, "n": 3},
            "time": {"T": 1.0, "layers": 10}, "trajectories": 1, "init": init}
    with pytest.raises(SpecError) as err:
        tokensweep.load_spec(base)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_points_on_the_sphere_are_normalised_and_a_zero_token_refused():
    from tokensweep.pipeline.spec.starts import starts_of

    spec = {"name": "s", "model": "sphere_flow", "grid": {"beta": 1, "d": 2, "n": 2}, "time": {"T": 1.0, "layers": 10},
            "trajectories": 2, "init": {"kind": "points", "x": [[3, 4], [0, -2]]}}
    sweep = tokensweep.load_spec(spec)
    x0 = starts_of(sweep, {"n": 2, "d": 2}, rngs(2))
    np.testing.assert_allclose(x0, [[[0.6, 0.8], [0.0, -1.0]]] * 2)
    with pytest.raises(SpecError, match="init.x: has a zero token"):
        tokensweep.load_spec({**spec, "init": {"kind": "points", "x": [[3, 4], [0, 0]]}})
