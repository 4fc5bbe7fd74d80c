"""[GLPR-E] Conj. 4.2, the codimension conjecture (`codimension: true` of the flow in R^d, the output
codim_values): the count on built states, the option's refusals, the output present only when asked
(every other cube as before), and the low-dimensional case of Fig. 7a on a real store."""

from __future__ import annotations

import numpy as np
import pytest
from test_record_pipeline import write_cube

import tokensweep
from tokensweep.pipeline.analysis.geometry import on_projected_boundary, positive_values
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import open_cube

V = np.diag([1.96, 0.25, -0.22])  # [GLPR-E] Fig. 7a's eigenvalues: k = 2, lines along e3


def test_the_projections_onto_the_positive_eigenspace_counted_and_on_their_hull():
    rng = np.random.default_rng(0)
    points = np.array([[3.0, 1.0], [-2.0, 0.5], [0.0, -4.0]])
    z = np.column_stack([points[rng.integers(0, 3, 30)], rng.normal(0, 50, 30)])  # far apart along e3
    assert positive_values(z, V, 1e-3) == 3
    assert positive_values(rng.normal(size=(30, 3)), V, 1e-3) == 30
    assert positive_values(z, -np.eye(3), 1e-3) == -1  # no positive eigenvalue: no such subspace
    # Thm 5.1: on the boundary of the projected hull (vertices, edges) or at 0, whatever the e3 part
    assert on_projected_boundary(z, V, 1e-3)
    edge = np.array([[0.5, 0.75, -30.0], [0.0, 0.0, 9.0]])  # midpoint of an edge, and 0
    assert on_projected_boundary(np.vstack([z, edge]), V, 1e-3)
    assert not on_projected_boundary(np.vstack([z, [[0.3, -0.5, 1.0]]]), V, 1e-3)  # strictly inside
    line = np.column_stack([rng.normal(size=10), np.zeros(10), rng.normal(size=10)])
    assert on_projected_boundary(line, V, 1e-3)  # all on one line of F: no interior


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
    assert ds.codim_on_boundary.values.all()  # Thm 5.1 (two or three points are all on their hull)
    plain = {k: v for k, v in SPEC.items() if k != "codimension"}
    write_cube({**plain, "time": {**SPEC["time"], "layers": 60}}, tmp_path / "plain.zarr")
    assert "codim_values" not in tokensweep.open(tmp_path / "plain.zarr")
