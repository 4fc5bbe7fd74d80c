"""The sphere flow's options of issue 8 as spec fields: refused by name with the fix (exit 2 from
the command line), absent by default (the stored spec and the seeds' axes stay as before), and
passed to the kernel per cell."""


import pytest
import yaml

from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.spec.load import load_sweep, parse_sweep

BASE = {"name": "f", "model": "sphere_flow", "grid": {"beta": 1.0, "d": 3, "n": 4},
        "time": {"T": 1.0, "layers": 10}, "trajectories": 2}


def spec(**fields):
    grid = {**BASE["grid"], **fields.pop("grid", {})}
    return {**BASE, "grid": grid, **fields}


BAD = {
    "noise without sigma": (spec(noise="common"), "grid.sigma: noise and grid.sigma go together"),
    "sigma without noise": (spec(grid={"sigma": [0.1]}), "noise: noise and grid.sigma go together"),
    "unknown noise": (spec(noise="white", grid={"sigma": [0.1]}), "noise: Input should be"),
    "negative sigma": (spec(noise="common", grid={"sigma": [-1]}), "grid.sigma: contains [-1.0]"),
    "noise with rk4": (spec(noise="common", integrator="rk4", grid={"sigma": [1]}),
                       "integrator: noise is integrated by Euler-Maruyama"),
    "rotation of V = I": (spec(value_rotation=0.5), "value_rotation: turns V's eigenvectors"),
    "infinite rotation": (spec(value="wishart", value_rotation=float("inf")), "value_rotation:"),
    "hardmax over beta": (spec(attention="hardmax", grid={"beta": [1, 2]}),
                          "grid.beta: attention 'hardmax' is the beta -> infinity limit"),
    "authors scaling, nothing drawn": (spec(ensemble_scaling="authors"),
                                       "ensemble_scaling: 'authors' rescales drawn matrices"),
    "unknown scaling": (spec(qk="ginibre", ensemble_scaling="paper"), "ensemble_scaling: Input"),
    "pre-LN with rk4": (spec(layer_norm="pre", integrator="rk4"), "layer_norm: 'pre' is one Euler"),
    "unknown layer norm": (spec(layer_norm="rms"), "layer_norm: Input should be"),
    "ngpt alpha 0": (spec(layer_norm="ngpt", ngpt_alpha=0), "ngpt_alpha:"),
    "negative tie tolerance": (spec(attention="hardmax", hardmax_tol=-1), "hardmax_tol:"),
    "unknown device": (spec(device="gpu"), "device: Input should be 'cpu' or 'cuda'"),
    "gpu with redrawn weights": (spec(device="cuda", qk="ginibre", period=10),
                                 "period: got 10, but device: cuda"),
    "gpu with hardmax": (spec(device="cuda", attention="hardmax"), "attention: got 'hardmax'"),
    "gpu with pre-LN": (spec(device="cuda", layer_norm="pre"), "layer_norm: got 'pre'"),
    "gpu with a turning V": (spec(device="cuda", value="goe", value_rotation=0.5),
                             "value_rotation: got 0.5, but device: cuda"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_are_refused_by_field_with_the_fix(case):
    data, message = BAD[case]
    with pytest.raises(SpecError) as err:
        parse_sweep(data)
    assert str(err.value).startswith(message) or message in str(err.value), str(err.value)


def test_defaults_add_no_axis_and_no_stored_key():
    sweep = load_sweep("geshkovski2023-fig3")
    assert list(sweep.axes) == ["beta", "d", "n"]
    assert "sigma" not in sweep.model_dump(mode="json")["grid"]


def test_noise_sigma_is_a_grid_axis_passed_per_cell():
    sweep = parse_sweep(spec(noise="independent", grid={"sigma": [0.5, 0.0]}))
    assert sweep.axes["sigma"] == (0.0, 0.5)
    kw = get_model("sphere_flow").kernel_arguments(sweep, {"beta": 1.0, "d": 3, "n": 4, "sigma": 0.5})
    assert kw["noise"] == "independent" and kw["sigma"] == 0.5
    plain = get_model("sphere_flow").kernel_arguments(load_sweep("geshkovski2023-fig4"),
                                                      {"beta": 4.0, "d": 2, "n": 32})
    assert "noise" not in plain and "sigma" not in plain


def test_value_rotation_and_hardmax_reach_the_kernel():
    model = get_model("sphere_flow")
    cell = {"beta": 1.0, "d": 3, "n": 4}
    kw = model.kernel_arguments(parse_sweep(spec(value="wishart", value_rotation=0.5)), cell)
    assert kw["value_rotation"] == 0.5
    kw = model.kernel_arguments(parse_sweep(spec(attention="causal_hardmax", qk="ginibre")), cell)
    assert kw["attention"] == "causal_hardmax" and kw["hardmax_tol"] == 1e-9
    kw = model.kernel_arguments(parse_sweep(spec(layer_norm="ngpt", ngpt_alpha=0.5)), cell)
    assert kw["layer_norm"] == "ngpt" and kw["ngpt_alpha"] == 0.5
    for name in ("sphere-flow-noise", "sphere-flow-hardmax"):  # the catalog specs parse
        assert load_sweep(name).model == "sphere_flow"


def test_device_reaches_the_kernel_only_when_cuda():
    model, cell = get_model("sphere_flow"), {"beta": 1.0, "d": 3, "n": 4}
    assert "device" not in model.kernel_arguments(parse_sweep(spec()), cell)
    sweep = parse_sweep(spec(device="cuda", attention="causal_usa", value="minus_identity",
                             precision="float32", rst_scaling=True, record=["gram"]))
    assert model.kernel_arguments(sweep, cell)["device"] == "cuda"
    drawn = parse_sweep(spec(device="cuda", heads=2, qk="ginibre", value="qk",
                             ensemble_scaling="authors"))  # [GLPR-P] Fig. 5's weights
    assert model.kernel_arguments(drawn, cell)["device"] == "cuda"
    assert model.local_problem(parse_sweep(spec())) is None


def test_cuda_on_a_machine_without_one_is_refused_before_computing(tmp_path, cli):
    """`run` on local workers and `plan` (its calibration computes here) exit 2 with one line;
    `plan --no-calibrate` plans."""
    from tokensweep.kernels.sphere.gpu import cuda_problem

    if cuda_problem() is None:
        pytest.skip("this machine has PyTorch with a CUDA GPU")
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(spec(device="cuda")))
    store = str(tmp_path / "gpu.zarr")
    for command in (["run", str(path), "--store", store], ["plan", str(path), "--store", store]):
        result = cli(*command, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: device: cuda needs PyTorch with a CUDA GPU on "
                                        "the worker: "), result.stderr
    assert not (tmp_path / "gpu.zarr").exists()
    result = cli("plan", path, "--store", store, "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_command_line_exits_2_with_one_line(tmp_path, cli):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec(noise="common", grid={"sigma": [-1]})))
    result = cli("run", path, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "grid.sigma" in result.stderr and "remove them" in result.stderr
