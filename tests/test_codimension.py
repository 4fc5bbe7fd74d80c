"""[GLPR-E] Conj. 4.2, the codimension conjecture (`codimension: true` of the flow in R^d, the output
codim_values): the count on built states, the option's refusals, the output present only when asked
(every other cube as before), and the low-dimensional case of Fig. 7a on a real store."""

from __future__ import annotations

import numpy as np
import pytest
from test_record_pipeline import write_cube

import tokensweep
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.models.euclidean_flow import codim_values
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import open_cube

V = np.diag([1.96, 0.25, -0.22])  # [GLPR-E] Fig. 7a's eigenvalues: k = 2, lines along e3


def test_codim_values_counts_the_projections_onto_the_positive_eigenspace():
    rng = np.random.default_rng(0)
    points = np.array([[3.0, 1.0], [-2.0, 0.5], [0.0, -4.0]])
    z = np.column_stack([points[rng.integers(0, 3, 30)], rng.normal(0, 50, 30)])  # far apart along e3
    assert codim_values(z, V, 1e-3) == 3
    assert codim_values(rng.normal(size=(30, 3)), V, 1e-3) == 30
    assert codim_values(z, -np.eye(3), 1e-3) == -1  # no positive eigenvalue: no such subspace


SPEC = {"name": "codim", "model": "euclidean_flow", "V": V.tolist(), "codimension": True, "integrator": "rk4",
        "init": {"kind": "box", "half_width": 5.0}, "grid": {"beta": 1.0, "d": 3, "n": 12},
        "time": {"T": 60.0, "layers": 1500, "checkpoints": 2}, "trajectories": 6, "seed": 3}


@pytest.mark.parametrize("change", [{"heads": 2}, {"V": "ginibre"}, {"V": [[1, 2, 0], [0, 1, 0], [0, 0, -1]]}])
def test_the_option_needs_one_head_and_a_symmetric_V(change):
    with pytest.raises(SpecError, match="^codimension: "):
        parse_sweep({**SPEC, **change})


def test_fig7a_ends_on_at_most_three_lines_and_the_output_is_there_only_when_asked(tmp_path):
    write_cube(SPEC, tmp_path / "codim.zarr")
    ds = open_cube(tmp_path / "codim.zarr")
    assert ds.codim_values.dims == ("beta", "d", "n", "traj")  # int16 in the store (a fill value: float here)
    values = ds.codim_values.values.ravel()
    assert ((values >= 1) & (values <= 3)).all(), values
    plain = {k: v for k, v in SPEC.items() if k != "codimension"}
    write_cube({**plain, "time": {**SPEC["time"], "layers": 60}}, tmp_path / "plain.zarr")
    assert "codim_values" not in tokensweep.open(tmp_path / "plain.zarr")
