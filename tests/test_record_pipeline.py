"""Observables over time through the pipeline (`record:`, pipeline/spec/recording.py): specs that ask
for them, the cube's trailing dimensions and coordinates, what tokensweep.open returns, the store
size estimate, and the refusals (exit 2, one line) of gram/states over a grid of n or d and over
the store-size limit. Real stores written by the real kernels."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from conftest import TINY, run_in_process

import tokensweep
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.execute import run_partition, simulate_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec.load import estimated_store_bytes, parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store

RECORDED = {**TINY, "name": "recorded", "grid": {"beta": [0.5, 2.0], "d": 3, "n": 4},
            "record": ["overlap_hist", "gram", "states", "hemisphere_margin", "consensus_error",
                       "consensus_error_abs", "energy"], "record_bins": 10}


def write_cube(spec: dict, path):
    sweep = parse_sweep(spec)
    prepare_store(sweep, path)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, path, index)
    return sweep


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("record")
    plain = {k: v for k, v in RECORDED.items() if not k.startswith("record")}
    return (write_cube(RECORDED, folder / "recorded.zarr"), folder / "recorded.zarr",
            write_cube({**plain, "name": "plain"}, folder / "plain.zarr"), folder / "plain.zarr")


def test_recorded_cube_has_the_trailing_dimensions_and_their_coordinates(cubes):
    sweep, path, _, _ = cubes
    ds = tokensweep.open(path)
    assert ds.overlap_hist.dims == ("beta", "t", "traj", "bin")
    assert ds.gram.dims == ("beta", "t", "traj", "i", "j")
    assert ds.states.dims == ("beta", "t", "traj", "token", "component")
    sizes = ds.sizes
    assert (sizes["bin"], sizes["i"], sizes["token"], sizes["component"]) == (10, 4, 4, 3)
    edges = np.linspace(-1, 1, 11)
    np.testing.assert_allclose(ds.bin.attrs["bin_edges"], edges)
    np.testing.assert_allclose(ds.bin.values, (edges[1:] + edges[:-1]) / 2)
    for name in ("overlap_hist", "gram", "states", "hemisphere_margin", "consensus_error",
                 "energy"):
        assert ds[name].attrs["long_name"] and ds[name].attrs["units"] == "1"
        # one chunk per (cell, partition): one cell, every checkpoint, partition_traj trajectories
        assert ds[name].data.chunksize[:3] == (1, 4, 5)
    assert (ds.overlap_hist.sum("bin") == 6).all()  # n (n - 1) / 2 pairs at every checkpoint


def test_stored_observables_are_the_kernels_and_the_defaults_are_unchanged(cubes):
    sweep, path, plain_sweep, plain_path = cubes
    ds, plain = tokensweep.open(path), tokensweep.open(plain_path)
    plan = Plan(sweep)
    part = plan[3]
    direct = simulate_partition(sweep, part)
    cell = dict(beta=plan.coords(part)["beta"], traj=slice(part.traj_start, part.traj_stop - 1))
    for name in RECORDED["record"]:
        stored = ds[name].sel(cell).transpose("traj", "t", ...).values
        np.testing.assert_array_equal(stored, direct[name])
    for name in plain.data_vars:
        if "traj" in plain[name].dims:
            assert np.array_equal(plain[name].values, ds[name].values, equal_nan=True), name
    states = ds.states.values
    gram = np.einsum("...ik,...jk->...ij", states, states)
    np.testing.assert_allclose(ds.gram.values, gram, atol=1e-13)


def test_size_estimate_counts_the_recorded_outputs():
    sweep = parse_sweep(RECORDED)
    plain = parse_sweep({k: v for k, v in RECORDED.items() if not k.startswith("record")})
    cells, traj, nt = 2, 12, 4
    extra = cells * traj * nt * (10 * 4 + 16 * 8 + 12 * 8 + 4 * 8)  # hist, gram, states, 4 scalars
    assert estimated_store_bytes(sweep) == estimated_store_bytes(plain) + extra
    assert estimated_store_bytes(sweep, recorded=False) == estimated_store_bytes(plain)


@pytest.mark.parametrize("name, axis", [("gram", "n"), ("states", "d"), ("states", "n")])
def test_gram_and_states_over_a_grid_of_n_or_d_are_refused(name, axis):
    spec = copy.deepcopy(RECORDED)
    spec["record"] = [name]
    spec["grid"][axis] = [3, 4]
    with pytest.raises(SpecError) as err:
        parse_sweep(spec)
    message = str(err.value)
    assert message.startswith("record: ") and f"grid.{axis} has 2 values" in message
    assert f"drop {name} from record" in message and "\n" not in message


def test_other_observables_run_over_any_grid():
    spec = {**RECORDED, "grid": {"beta": 1.0, "d": [3, 4], "n": [2, 3]},
            "record": ["overlap_hist", "hemisphere_margin", "consensus_error"]}
    sweep = parse_sweep(spec)
    out = simulate_partition(sweep, Plan(sweep)[3])
    assert out["overlap_hist"].shape == (5, 4, 10)


def test_record_direction_is_checked():
    for extra, fragment in (({"record": ["gram"], "record_direction": [1, 0, 0]},
                             "add hemisphere_margin"),
                            ({"record": ["hemisphere_margin"], "record_direction": [1, 0]},
                             "has 2 numbers"),
                            ({"record": ["hemisphere_margin"], "record_direction": [0, 0, 0]},
                             "not a direction")):
        with pytest.raises(SpecError, match=fragment):
            parse_sweep({**RECORDED, **extra})


def cli(args, cwd, env_extra=None):
    return run_in_process(*args, cwd=cwd, env_extra={"COLUMNS": "400", **(env_extra or {})})


def assert_one_error_line(result, *fragments):
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and result.stdout == "", output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, output
    for fragment in fragments:
        assert fragment in result.stderr, output


def test_cli_refuses_gram_over_a_grid_and_states_over_the_size_limit(tmp_path):
    spec = copy.deepcopy(RECORDED)
    spec["grid"]["n"] = [3, 4]
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    result = cli(["run", "grid.yaml"], tmp_path)
    assert_one_error_line(result, "record: gram is sized by n and d", "drop gram from record")
    big = {**RECORDED, "record": ["states"], "trajectories": 2000, "time": {**TINY["time"],
           "checkpoints": 200}}
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big))
    result = cli(["run", "big.yaml"], tmp_path, {"TOKENSWEEP_MAX_STORE_GIB": "0.05"})
    assert_one_error_line(result, "record: the store would need 87.8 MiB with record ['states']",
                          "drop gram / states from record", "TOKENSWEEP_MAX_STORE_GIB=1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml", "grid.yaml"]


def test_a_recorded_cube_grows_and_reports(cubes, tmp_path):
    import shutil

    import xarray as xr

    from tokensweep.pipeline import report
    from tokensweep.pipeline.store.cube import open_cube

    sweep, path, _, _ = cubes
    grown = tmp_path / "grown.zarr"
    shutil.copytree(path, grown)
    more = parse_sweep({**RECORDED, "trajectories": 17})
    assert prepare_store(more, grown) == "grown"
    for index in range(len(Plan(more))):
        run_partition(more, grown, index)
    old, new = tokensweep.open(path), tokensweep.open(grown)
    for name in ("overlap_hist", "gram", "states", "hemisphere_margin"):
        xr.testing.assert_identical(old[name].drop_attrs(), new[name].isel(traj=slice(0, 12))
                                    .drop_attrs())
        assert not new[name].isel(traj=slice(12, None)).isnull().any()
    paths = report.write_report(open_cube(grown), tmp_path / "report")
    assert "stochastic_transformer" in open(paths["report"]).read()
