"""[GLPR-E] Remark 3, clustering time against the starts' scale (grid axis start_scale of the flow in
R^d, pipeline/report/start_scale.py): the axis reaches the kernel as scaled starts, the section's
numbers and the claim's test are the cube's settle times read directly, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from test_record_pipeline import write_cube

from tokensweep.kernels.euclidean.flow import simulate_euclidean_flow
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.models._common import sphere_cell, time_arguments
from tokensweep.pipeline.models.euclidean_flow import matrix_arguments
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.spec.starts import starts_of
from tokensweep.pipeline.store.cube import open_cube

SPEC = {"name": "scaled", "model": "euclidean_flow", "V": "identity", "init": {"kind": "box", "half_width": 1.0},
        "grid": {"beta": 1.0, "d": 2, "n": 12, "start_scale": [0.3, 3.0]},
        "time": {"T": 6.0, "layers": 120, "checkpoints": 24}, "trajectories": 24, "seed": 5}


def settled_by_hand(ds, scale):
    """Per trajectory of a cell, the first checkpoint after the cluster count's last change."""
    t = ds.t.values
    counts = ds.n_clusters.sel(start_scale=scale).squeeze(drop=True).transpose("traj", "t").values
    return np.array([t[max([j + 1 for j in range(len(r) - 1) if r[j + 1] != r[j]] or [0])] for r in counts])


def test_the_axis_scales_the_starts_the_kernel_gets():
    sweep = parse_sweep(SPEC)
    coords = {"beta": 1.0, "d": 2, "n": 12, "start_scale": 3.0}
    got = get_model("euclidean_flow").simulate(sweep, coords, trajectory_rngs(5, coords, range(3)))
    rngs = trajectory_rngs(5, coords, range(3))
    x0 = starts_of(sweep, coords, rngs) * 3.0
    want = simulate_euclidean_flow(rngs, **sphere_cell(coords), **matrix_arguments(sweep, 2),
                                   integrator=sweep.integrator, x0=x0, **time_arguments(sweep))
    np.testing.assert_array_equal(got["spread"], want["spread"])
    assert np.abs(x0).max() <= 3.0 and np.abs(x0).max() > 1.0  # U[-1, 1]^2 times 3


@pytest.mark.parametrize("bad", [[0.0], [-1.0, 2.0], [float("inf")]])
def test_a_scale_must_be_positive_and_finite(bad):
    with pytest.raises(SpecError, match="grid.start_scale"):
        parse_sweep({**SPEC, "grid": {**SPEC["grid"], "start_scale": bad}})


def test_section_and_claim_read_the_settle_times_of_the_cube(tmp_path):
    path = tmp_path / "scaled.zarr"
    write_cube(SPEC, path)
    ds = open_cube(path)
    by_hand = {s: settled_by_hand(ds, s) for s in (0.3, 3.0)}
    out = tmp_path / "report"
    write_report(ds, out)
    page = (out / "report.md").read_text()
    section = page.split("## Clustering time against the start's scale")[1].split("\n## ")[0]
    for s, times in by_hand.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| 1 | 2 | 12 | {s:g} |"))
        assert f"| 24 | {np.median(times):.3f} |" in row
    p = stats.kruskal(by_hand[0.3], by_hand[3.0]).pvalue
    assert f"p = {p:.2g}" in section and (out / "start_scale.png").stat().st_size > 0
    from tokensweep.pipeline.plugin import ReportInput
    from tokensweep.pipeline.report.claims_glpre import remark3

    claim = remark3(ReportInput(ds, parse_sweep(SPEC), tmp_path, 0.95))
    assert claim.verdict == ("holds" if p < 0.01 else "fails") and claim.detail == f"p = {p:.2g}"
    assert json.loads((out / "summary.json").read_text())["name"] == "scaled"


def test_start_scale_png_draws_the_median_settle_time_per_scale(tmp_path):
    from tokensweep.pipeline.report.figures import plt
    from tokensweep.pipeline.report.start_scale import plot_scale, scale_test, settle_table

    write_cube(SPEC, tmp_path / "scaled.zarr")
    ds = open_cube(tmp_path / "scaled.zarr")
    medians = [np.median(settled_by_hand(ds, s)) for s in (0.3, 3.0)]
    fig = plot_scale(scale_test(settle_table(ds)), ds.attrs, None)
    try:
        (line,) = fig.axes[0].get_lines()
        np.testing.assert_allclose(line.get_xdata(), [0.3, 3.0])
        np.testing.assert_allclose(line.get_ydata(), medians)
    finally:
        plt.close(fig)


def test_a_configuration_shrunk_to_one_cluster_has_its_centre_on_the_hull():
    """At a small start scale the tokens shrink to one point (radius ~1e-7 at T = 30): the kernel
    counts one cluster, and its one centre is a vertex of the hull. The geometry's own clustering,
    relative to the final radius, had split the point into n "centres", none a vertex."""
    spec = {**SPEC, "grid": {**SPEC["grid"], "start_scale": 0.3}, "time": {"T": 30.0, "layers": 600, "checkpoints": 2}}
    sweep = parse_sweep(spec)
    coords = {"beta": 1.0, "d": 2, "n": 12, "start_scale": 0.3}
    got = get_model("euclidean_flow").simulate(sweep, coords, trajectory_rngs(5, coords, range(6)))
    one = got["n_clusters"][:, -1] == 1
    assert one.all()
    assert got["centres_on_hull"][one].all()
