"""The flow in R^d through spec -> store -> report: integrator (RK4 by default, stated in the stored
spec and in the report), heads, drawn V, the discrete transformer; bad values exit 2 naming the field.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import yaml

from tokensweep.kernels.euclidean.flow import simulate_euclidean_flow
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.models.euclidean_flow import good_triple
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.geometry import geometry_section
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.base import SPEC_ATTR
from tokensweep.pipeline.spec.load import parse_sweep, sweep_from_json
from tokensweep.pipeline.store.compat import spec_differences
from tokensweep.pipeline.store.lifecycle import prepare_store

BASE = {"name": "e", "model": "euclidean_flow", "grid": {"beta": 1.0, "d": 2, "n": 6},
        "time": {"T": 2.0, "layers": 20, "checkpoints": 4}, "trajectories": 4, "seed": 3}


def run_sync(spec: dict, store):
    sweep = parse_sweep(spec)
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    return sweep, xr.open_zarr(store, consolidated=False)


@pytest.mark.parametrize("changes, message", [
    ({"heads": 0}, "heads: Input should be greater than or equal to 1"),
    ({"V": "gue"}, "V: 'gue' is not a known matrix: use one of identity, minus_identity, ginibre"),
    ({"V": [[[1, 0], [0, 1]], [[0, 1], [1, 0]]], "heads": 3},
     "V: is a list of 2 matrices, but heads = 3: give one d x d matrix per head"),
    ({"Q": [[[1, 0], [0, 1]], [[0, 1], [1, "x"]]], "heads": 2}, "Q.1: has entries that are not numbers"),
    ({"integrator": "leapfrog"}, "integrator: Input should be 'euler', 'rk4' or 'discrete'"),
    ({"integrator": "discrete", "V": "minus_identity", "time": {"T": 10.0, "layers": 10}},
     "integrator: 'discrete' rescales by R = I + hV ([GLPR-E] Remark 4), which is singular for h = 1"),
])
def test_bad_values_are_refused_naming_the_field(changes, message):
    with pytest.raises(SpecError) as err:
        parse_sweep({**BASE, **changes})
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_cli_exits_2_with_one_line_before_any_compute(tmp_path, cli):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "integrator": "discrete", "V": "minus_identity",
                                    "time": {"T": 10.0, "layers": 10},
                                    "store": str(tmp_path / "s.zarr")}))
    result = cli("run", spec, env_extra={"COLUMNS": "400"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "integrator: 'discrete' rescales by R = I + hV" in result.stderr
    assert not (tmp_path / "s.zarr").exists()


def test_default_is_rk4_and_a_store_keeps_the_integrator_it_ran(tmp_path):
    """New specs get RK4; the stored spec names its integrator, so a store made with Euler
    resumes with Euler, and a spec that omits it (now RK4) is refused, not mixed in. A stored
    spec from before `heads` existed parses to one head, the same spec."""
    euler = parse_sweep({**BASE, "integrator": "euler"})
    assert parse_sweep(BASE).integrator == "rk4"
    prepare_store(euler, tmp_path / "s.zarr")
    stored = json.loads(json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())
                        ["attributes"][SPEC_ATTR])
    assert stored["integrator"] == "euler"
    assert spec_differences(euler, parse_sweep(BASE)) == ["integrator: 'euler' -> 'rk4'"]
    old = {k: v for k, v in stored.items() if k != "heads"}
    assert sweep_from_json(json.dumps(old)).heads == 1
    assert spec_differences(sweep_from_json(json.dumps(old)), euler) == []


def test_drawn_values_reduce_per_trajectory_and_heads_have_no_hyperplane_claim():
    """V: ginibre draws one V per trajectory; n_psi1_values is computed for the draws that are
    good triples (-1 for the others), from the same draws as the kernel's. Several heads: -1."""
    sweep = parse_sweep({**BASE, "V": "ginibre", "trajectories": 12,
                         "time": {"T": 6.0, "layers": 60, "checkpoints": 2}})
    model = get_model("euclidean_flow")
    coords = {"beta": 1.0, "d": 2, "n": 6}
    out = model.simulate(sweep, coords, trajectory_rngs(sweep.seed, coords, range(12)))
    values = simulate_euclidean_flow(trajectory_rngs(sweep.seed, coords, range(12)), n=6, d=2,
                                     T=6.0, layers=60, checkpoint_layers=[60], V="ginibre",
                                     keep_values=True)["V"]
    good = np.array([good_triple(v[0], np.eye(2), np.eye(2)) for v in values])
    assert 0 < good.sum() < 12, good  # both kinds of draw occur at this seed
    assert np.all((out["n_psi1_values"] >= 1) == good), (out["n_psi1_values"], good)
    heads = parse_sweep({**BASE, "V": [[0.647, 0.819], [0.612, 0.633]], "heads": 2})
    out = model.simulate(heads, coords, trajectory_rngs(heads.seed, coords, range(4)))
    assert np.all(out["n_psi1_values"] == -1)
    assert "no theorem" in model.geometry_claims(heads, 2)


@pytest.mark.parametrize("integrator, said", [("rk4", "classical RK4"), ("euler", "biases rates"),
                                              ("discrete", "discrete-time transformer")])
def test_report_states_the_integrator_and_the_spread_exponent(tmp_path, integrator, said):
    """The geometry section names the scheme and h, and gives the spread exponent over [T/2, T]:
    for V = -I with RK4 it is near -1/2 (within 0.1 by T = 8), Euler's is steeper."""
    spec = {**BASE, "V": "minus_identity", "integrator": integrator, "trajectories": 8,
            "grid": {"beta": 1.0, "d": 2, "n": 12}, "time": {"T": 8.0, "layers": 80, "checkpoints": 4}}
    sweep, ds = run_sync(spec, tmp_path / "s.zarr")
    part = geometry_section(ReportInput(ds, sweep, tmp_path))
    text = "\n".join(part.lines)
    assert "Integrator: " in text and said in text and "h = 0.1" in text, text
    row = [line for line in text.splitlines() if line.startswith("| 1 | 2 | 12 |")][0]
    exponent = float(row.split("|")[-3])
    if integrator == "rk4":
        assert abs(exponent + 0.5) < 0.1, row
    if integrator == "euler":
        assert exponent < -0.55, row
