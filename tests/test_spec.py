"""Specs: normalisation of convenient spellings, and refusal of bad input before any compute."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokensweep.flows.cli import app
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.spec.load import load_sweep, parse_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store

SPECS = Path(__file__).parent / "specs"
runner = CliRunner()

BAD = {  # file -> text the one-line error must contain (the field, then why)
    "bad_d1.yaml": "grid.d: contains [1], but the sphere needs d >= 2",
    "bad_n0.yaml": "grid.n: contains [0]",
    "bad_T0.yaml": "time.T: Input should be greater than 0",
    "bad_T_negative.yaml": "time.T: Input should be greater than 0",
    "bad_layers0.yaml": "time.layers: Input should be greater than or equal to 1",
    "bad_beta_nan.yaml": "grid.beta: contains [nan]",
    "bad_unknown_key.yaml": "trajectorys: unknown key 'trajectorys'",
    "bad_model.yaml": "model: unknown model 'stochastic_transfomer'",
}


def test_axis_spellings_normalise_to_sorted_tuples():
    sweep = parse_sweep({"name": "a", "model": "stochastic_transformer",
                         "grid": {"beta": [2.0, 0.5], "d": {"start": 3, "stop": 5, "num": 3}, "n": 2},
                         "time": {"T": 2, "layers": 8, "checkpoints": [0.5, 2.0]}, "trajectories": 3})
    assert sweep.grid.beta == (0.5, 2.0)
    assert sweep.grid.d == (3, 4, 5)
    assert sweep.grid.n == (2,)
    assert sweep.time.checkpoint_layers == (2, 8)
    assert sweep.partition_traj == 3  # default: one block per cell
    assert sweep.store == "results/a.zarr"


def test_checkpoint_off_the_layer_grid_is_refused():
    with pytest.raises(SpecError, match="not a whole number of layers"):
        parse_sweep({"name": "a", "model": "stochastic_transformer",
                     "grid": {"beta": 1, "d": 3, "n": 2},
                     "time": {"T": 1, "layers": 10, "checkpoints": [0.33, 1.0]}, "trajectories": 3})


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_spec_is_refused_with_its_field(name):
    with pytest.raises(SpecError) as err:
        load_sweep(SPECS / name)
    assert BAD[name] in str(err.value)


def _tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
        h.update(str(f.stat().st_mtime_ns).encode())
    return h.hexdigest()


@pytest.fixture
def existing_store(tmp_path):
    store = tmp_path / "kept.zarr"
    prepare_store(load_sweep(SPECS / "good.yaml"), store)
    return store


@pytest.mark.parametrize("name", sorted(BAD))
def test_cli_exits_2_naming_the_field_and_leaves_the_store_untouched(name, existing_store):
    before = _tree_digest(existing_store)
    result = runner.invoke(app, ["run", str(SPECS / name), "--store", str(existing_store)])
    assert result.exit_code == 2, result.output
    assert BAD[name] in result.output
    assert _tree_digest(existing_store) == before


def test_store_holding_a_different_spec_is_refused(existing_store, write_spec):
    spec = load_sweep(SPECS / "good.yaml").model_dump(mode="json")
    spec["seed"] = 9  # a store grows by trajectories, grid values, description; never a new seed
    before = _tree_digest(existing_store)
    result = runner.invoke(app, ["run", str(write_spec(spec)), "--store", str(existing_store)])
    assert result.exit_code == 2
    assert "holds a different spec (seed: 0 -> 9" in result.output
    assert "use --store" in result.output
    assert _tree_digest(existing_store) == before


@pytest.mark.parametrize("args, message", [
    (["status", "nowhere.zarr"], "no store at nowhere.zarr"),
    (["report", "nowhere.zarr"], "no store at nowhere.zarr"),
    (["run", "no-such-spec.yaml"], "spec file 'no-such-spec.yaml' not found"),
])
def test_cli_bad_paths_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_a_foreign_zarr_store_is_refused(tmp_path):
    import zarr

    zarr.open_group(tmp_path / "other.zarr", mode="w", zarr_format=3).attrs["made_by"] = "someone"
    result = runner.invoke(app, ["status", str(tmp_path / "other.zarr")])
    assert result.exit_code == 2
    assert "not a tokensweep cube" in result.output


def test_catalog_specs_validate():
    from conftest import validates_here

    for path in sorted((Path(__file__).parent.parent / "catalog").glob("*.yaml")):
        if not validates_here(path):
            continue
        sweep = load_sweep(path)
        assert sweep.n_cells >= 1 and math.isfinite(sweep.time.h)


def test_catalog_name_resolves_without_a_path():
    assert load_sweep("quickstart").name == "quickstart"
