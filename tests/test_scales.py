"""Spec scales (`scales: {paper: ...}`, `--scale`) and the default store folder."""

import pytest
import yaml

import tokensweep
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.spec.load import load_sweep
from tokensweep.pipeline.spec.scales import at_scale

SPEC = {
    "name": "tiny", "model": "stochastic_transformer",
    "grid": {"beta": {"start": 0.0, "stop": 2.0, "num": 3}, "d": 3, "n": 2},
    "time": {"T": 1.0, "layers": 100, "checkpoints": 2}, "trajectories": 8, "seed": 3,
    "scales": {"paper": {"grid": {"beta": {"num": 21}, "d": [3, 4]}, "trajectories": 2000,
                         "time": {"T": 30.0, "layers": 3000}}},
}


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def test_the_spec_as_written_is_the_small_scale(spec_file, monkeypatch, tmp_path):
    monkeypatch.setenv("TOKENSWEEP_RESULTS", str(tmp_path / "cubes"))
    small = load_sweep(spec_file)
    assert load_sweep(spec_file, "small") == small
    assert small.grid.beta == (0.0, 1.0, 2.0) and small.trajectories == 8
    assert small.store == f"{tmp_path}/cubes/tiny.zarr"


def test_paper_scale_merges_field_by_field_under_its_own_name_and_store(spec_file, monkeypatch):
    monkeypatch.delenv("TOKENSWEEP_RESULTS", raising=False)
    paper = load_sweep(spec_file, "paper")
    assert paper.name == "tiny-paper" and paper.store == "results/tiny-paper.zarr"
    assert len(paper.grid.beta) == 21 and paper.grid.beta[-1] == 2.0  # start/stop kept, num changed
    assert paper.grid.d == (3, 4) and paper.trajectories == 2000
    assert paper.time.T == 30.0 and paper.time.layers == 3000 and paper.seed == 3
    # an explicit store gets the scale too, so the two sizes never share a cube
    assert at_scale({**SPEC, "store": "x/fig.zarr"}, "paper")["store"] == "x/fig-paper.zarr"


@pytest.mark.parametrize("scale, scales, message", [
    ("huge", SPEC["scales"], "scale: 'huge' is not a scale: use one of small, paper"),
    ("paper", None, "has no paper scale (it has: small): drop --scale"),
    ("paper", {"big": {}}, "scales: a mapping from paper to the fields"),
    ("small", {"paper": 3}, "scales: a mapping from paper to the fields"),
])
def test_bad_scales_are_refused_naming_the_field(tmp_path, scale, scales, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "scales": scales}))
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_sweep(path, scale)


def test_python_api_takes_the_scale(spec_file):
    assert tokensweep.load_spec(spec_file, scale="paper").name == "tiny-paper"
    assert tokensweep.load_spec(dict(SPEC), scale="paper").trajectories == 2000
    assert tokensweep.load_spec(dict(SPEC)).trajectories == 8


def test_cli_plan_at_paper_scale_and_a_missing_scale(cli, spec_file, tmp_path):
    env = {"TOKENSWEEP_RESULTS": str(tmp_path / "r")}
    out = cli("plan", spec_file, "--scale", "paper", "--no-calibrate", env_extra=env)
    assert out.returncode == 0, out.stderr
    assert "tiny-paper: stochastic_transformer, 42 cells x 2000 trajectories x 3000 layers" in out.stdout
    assert f"store: {tmp_path}/r/tiny-paper.zarr" in out.stdout
    spec_file.write_text(yaml.safe_dump({k: v for k, v in SPEC.items() if k != "scales"}))
    bad = cli("run", spec_file, "--scale", "paper", env_extra=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "has no paper scale" in bad.stderr and not (tmp_path / "r").exists()
