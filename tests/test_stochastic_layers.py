"""`layers` (h = T / layers) as a grid axis of the stochastic transformer, through the real pipeline:
spec hooks and refusals, one store whose `t` stays times, each h with its own streams, growth along
the axis equal to a fresh run, and the antipodal table and report with a layers column."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import xarray as xr
from conftest import output_cube, reference_cube

from tokensweep.kernels.stochastic.transformer import simulate_stochastic_transformer
from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store

LAYERED = {
    "name": "layered",
    "model": "stochastic_transformer",
    "grid": {"beta": [0.5, 2.0], "d": 3, "n": 2, "layers": [40, 80, 160]},
    "time": {"T": 2.0, "checkpoints": 4},
    "trajectories": 6,
    "partition_traj": 3,
    "seed": 5,
}


def _spec(**changes) -> dict:
    return {**copy.deepcopy(LAYERED), **changes}


def test_time_layers_defaults_to_the_largest_and_checkpoints_stay_times():
    sweep = parse_sweep(LAYERED)
    assert sweep.time.layers == 160 and sweep.axes["layers"] == (40, 80, 160)
    np.testing.assert_allclose(sweep.time.checkpoint_times, [0.5, 1.0, 1.5, 2.0])
    assert sweep.time.layers_at(40) == (10, 20, 30, 40)
    assert "layers" not in sweep.canonical()["time"]  # so the store can grow along the axis
    assert parse_sweep(_spec(time={"T": 2.0, "layers": 80, "checkpoints": 4})).time.layers == 80
    assert "layers" not in parse_sweep({**LAYERED, "grid": {"beta": 1, "d": 3, "n": 2},
                                        "time": {"T": 1.0, "layers": 10}}).axes


@pytest.mark.parametrize("time, field, text", [
    ({"T": 2.0, "checkpoints": 3}, "time.checkpoints", "not a whole number of layers at layers = 40"),
    ({"T": 2.0, "checkpoints": [0.5, 0.5125, 2.0]}, "time.checkpoints", "checkpoint time 0.5125"),
    ({"T": 2.0, "layers": 100, "checkpoints": 4}, "time.layers", "not among grid.layers"),
])
def test_inconsistent_time_is_refused_in_one_line(time, field, text):
    with pytest.raises(SpecError) as err:
        parse_sweep(_spec(time=time))
    message = str(err.value)
    assert message.startswith(f"{field}: ") and text in message and "\n" not in message


def test_bad_layers_axis_is_refused():
    with pytest.raises(SpecError, match=r"^grid\.layers: .*from 1 to"):
        parse_sweep(_spec(grid={**LAYERED["grid"], "layers": [0, 40]}))


def test_cli_refuses_a_checkpoint_off_the_layers_with_exit_2(cli, write_spec):
    result = cli("run", write_spec(_spec(time={"T": 2.0, "checkpoints": [0.5125, 2.0]})))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "time.checkpoints" in lines[0] and "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def layered_cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("layers") / "layered.zarr"
    return path, reference_cube(LAYERED, path)


def test_each_layer_count_runs_its_own_h_and_streams(layered_cube):
    _, cube = layered_cube
    assert cube.overlap_min.dims == ("beta", "d", "n", "layers", "t", "traj")
    np.testing.assert_allclose(cube.t, [0.5, 1.0, 1.5, 2.0])
    sweep = parse_sweep(LAYERED)
    for beta in (0.5, 2.0):
        for layers in (40, 80, 160):
            coords = {"beta": beta, "d": 3, "n": 2, "layers": layers}
            direct = simulate_stochastic_transformer(
                trajectory_rngs(5, coords, range(6)), n=2, d=3, beta=beta, T=2.0, layers=layers,
                checkpoint_layers=np.asarray(sweep.time.layers_at(layers)))
            cell = cube.sel(beta=beta, d=3, n=2, layers=layers)
            np.testing.assert_array_equal(cell.overlap_min.transpose("traj", "t").values,
                                          direct["overlap_min"])
    # the streams differ between layer counts (the cell key holds layers), not only the step
    a, b = (trajectory_rngs(5, {"beta": 0.5, "d": 3, "n": 2, "layers": v}, [0])[0].random()
            for v in (40, 80))
    assert a != b


def test_growth_along_layers_equals_a_fresh_run(layered_cube, tmp_path):
    old = _spec(grid={**LAYERED["grid"], "layers": [40, 160]})
    store = tmp_path / "grown.zarr"
    reference_cube(old, store)
    sweep = parse_sweep(LAYERED)
    assert prepare_store(sweep, store) == "grown"
    todo = pending_partitions(sweep, store)
    assert len(todo) == 2 * 2  # the layers = 80 cells (two betas, two blocks each)
    for index in todo:
        run_partition(sweep, store, index)
    xr.testing.assert_identical(output_cube(store), layered_cube[1])


def test_table_and_report_have_a_layers_column(layered_cube, tmp_path):
    path, _ = layered_cube
    with xr.open_zarr(path) as ds:
        table = antipodal_table(ds)
        assert table.p_antipodal.dims == ("beta", "d", "n", "layers")
        theory = table.theory.sel(d=3, n=2)
        # the closed form is the h -> 0 limit: one value per beta, whatever the layer count
        np.testing.assert_array_equal(theory.isel(layers=0).values, theory.isel(layers=2).values)
        write_report(ds, tmp_path / "report")
    page = (tmp_path / "report" / "report.md").read_text()
    assert "| d | n | layers | beta | N |" in page
    assert "- **scheme**: discrete" in page and "- **value_law**: gaussian" in page
    bias = page.split("## P(antipodal) against the step")[1]
    assert ("| d | n | beta | h = 0.05 | h = 0.025 | h = 0.0125 | h → 0, linear fit [99%] | χ²/dof "
            "| h → 0, quadratic [99%] | theory at t = 2 | theory (t → ∞) |") in bias
    for beta in (0.5, 2.0):  # one row per cell, its closed form last
        p_th = float(table.theory.sel(beta=beta, d=3, n=2).isel(layers=0))
        assert any(line.startswith(f"| 3 | 2 | {beta:g} |") and line.endswith(f"| {p_th:.4f} |")
                   for line in bias.splitlines())
    assert (tmp_path / "report" / "step_bias.png").stat().st_size > 0
