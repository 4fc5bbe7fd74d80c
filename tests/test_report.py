"""write_report on small synthetic cubes round-tripped through a zarr store."""

import itertools
import json

import matplotlib.image
import numpy as np
import pytest
import xarray as xr

from tokensweep.pipeline import report, theory
from tokensweep.pipeline.analysis import antipodal as phase
from tokensweep.pipeline.analysis import stats
from tokensweep.pipeline.report import figures as plots
from tokensweep.pipeline.spec.load import parse_sweep


def synthetic_cube(model="stochastic_transformer", attention="sa", sigma=None, n_traj=300, seed=5):
    """Two tokens; each trajectory antipodal with the theory's probability (a few unresolved)."""
    rng = np.random.default_rng(seed)
    coords = {"beta": [0.5, 1.0, 1.5, 2.0], "d": [3, 4, 8], "n": [2]}
    if sigma is not None:
        coords["sigma"] = sigma
    shape = tuple(len(v) for v in coords.values())
    cc = np.ones(shape + (2, n_traj), np.int8)
    for idx in np.ndindex(shape):
        c = dict(zip(coords, (coords[k][i] for k, i in zip(coords, idx))))
        p = (theory.hybrid_antipodal_probability(c["beta"], c["sigma"], attention, c["d"])
             if sigma is not None else theory.antipodal_probability(c["beta"], c["d"]))
        p = 0.5 if np.isnan(p) else p
        u = rng.random(n_traj)
        cc[idx + (1,)] = np.where(u < p, 2, np.where(u > 0.99, 0, 1))
    cc[..., 0, :] = 0
    dims = tuple(coords)
    return xr.Dataset(
        {"cluster_class": (dims + ("t", "traj"), cc),
         "nonfinite": (dims + ("traj",), np.zeros(shape + (n_traj,), bool))},
        coords={**coords, "t": [5.0, 50.0]},
        attrs={"model": model, "attention": attention, "T": 50.0, "layers": 5000,
               "trajectories": n_traj, "seed": 20260129, "name": "synthetic",
               "tokensweep_spec": json.dumps(parse_sweep({
                   "name": "synthetic", "model": model, "attention": attention,
                   "grid": {k: list(map(float if k in ("beta", "sigma") else int, v)) for k, v in coords.items()},
                   "time": {"T": 50.0, "layers": 5000, "checkpoints": [5.0, 50.0]},
                   "trajectories": n_traj, "seed": 20260129}).model_dump(mode="json"))},
    )


def parse_markdown_table(text):
    """The first table of the report (the per-cell P(antipodal) table)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[first:]))
    rows = [line for line in rows if line.startswith("| ")]
    header = [h.strip() for h in rows[0].strip("|").split("|")]
    return header, [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]


@pytest.fixture
def zarr_cube(tmp_path):
    store = tmp_path / "cube.zarr"
    synthetic_cube().chunk({"traj": 100}).to_zarr(store, consolidated=False)
    return xr.open_zarr(store, consolidated=False)


def test_report_png_and_table_match(zarr_cube, tmp_path):
    assert zarr_cube.cluster_class.chunks is not None  # lazily opened
    paths = report.write_report(zarr_cube, tmp_path / "out")
    image = matplotlib.image.imread(paths["phase"])
    assert image.shape == (round(4.2 * plots.DPI), round(6.0 * plots.DPI), 4)
    assert image[..., :3].std() > 0.05  # not blank

    text = open(paths["report"]).read()
    assert "![phase](phase.png)" in text and "stochastic_transformer" in text and "h = T / layers" in text
    assert "**seed**: 20260129" in text and "Chi-square" in text
    header, rows = parse_markdown_table(text)
    assert header[:3] == ["d", "n", "beta"]
    table = phase.antipodal_table(zarr_cube)
    assert len(rows) == table.n_traj.size
    keys = [(int(r[0]), float(r[2])) for r in rows]
    assert keys == sorted(keys)  # ordered by d then beta
    agree = phase.agrees(table, 0.99, 0.01)
    for r in rows:
        cell = table.sel(d=int(r[0]), n=int(r[1]), beta=float(r[2]))
        assert int(r[3]) == int(cell.n_traj)
        assert float(r[4]) == pytest.approx(float(cell.p_antipodal), abs=5e-5)
        lo, hi = (float(x) for x in r[5].strip("[]").split(","))
        assert (lo, hi) == pytest.approx((float(cell.lo), float(cell.hi)), abs=5e-5)
        assert float(r[6]) == pytest.approx(float(cell.theory), abs=5e-5)
        z = float(cell.z)
        assert (r[7] == "—") if np.isnan(z) else float(r[7]) == pytest.approx(z, abs=5e-3)
        assert float(r[8]) == pytest.approx(float(cell.n_unresolved / cell.n_traj), abs=5e-5)
        assert r[10] == ("yes" if bool(agree.sel(d=int(r[0]), n=2, beta=float(r[2]))) else "no")
    chi = stats.chi_square_summary(table)
    assert f"sum z^2 = {chi['chi2']:.2f} over {chi['dof']} cells" in text


def test_hybrid_report_has_heatmap(tmp_path):
    ds = synthetic_cube("hybrid", "usa", sigma=[0.3, 0.6, 0.9, 1.2, 1.5], n_traj=60)
    ds.to_zarr(tmp_path / "h.zarr", consolidated=False)
    paths = report.write_report(xr.open_zarr(tmp_path / "h.zarr", consolidated=False), tmp_path / "out")
    assert set(paths) == {"report", "html", "summary", "phase", "horizon", "heatmap", "dominant",
                          "classes"}
    image = matplotlib.image.imread(paths["heatmap"])
    assert image.ndim == 3 and image.shape[0] > 100 and image[..., :3].std() > 0.05
    text = open(paths["report"]).read()
    assert "![heatmap](heatmap.png)" in text
    _, rows = parse_markdown_table(text)
    assert len(rows) == 4 * 3 * 5


def quickstart_cube(boundary_p=0.1, n_traj=400, seed=3):
    """catalog/quickstart.yaml's grid (beta 0..3 in 7 steps, d = 3, 4, 8, n = 2; T = 30), every cell
    antipodal with the closed form's probability, except d = 3, beta = 0 = beta_c(3): there the T =
    infinity theory says 0 but a finite T leaves `boundary_p` of the pairs still antipodal."""
    rng = np.random.default_rng(seed)
    coords = {"beta": np.linspace(0.0, 3.0, 7).tolist(), "d": [3, 4, 8], "n": [2]}
    shape = tuple(len(v) for v in coords.values())
    cc = np.zeros(shape + (2, n_traj), np.int8)
    for idx in np.ndindex(shape):
        beta, d = coords["beta"][idx[0]], coords["d"][idx[1]]
        p = boundary_p if (beta, d) == (0.0, 3) else float(theory.antipodal_probability(beta, d))
        cc[idx + (1,)] = np.where(rng.random(n_traj) < p, 2, 1)
    dims = tuple(coords)
    time = {"T": 30.0, "layers": 3000, "checkpoints": [15.0, 30.0]}
    return xr.Dataset(
        {"cluster_class": (dims + ("t", "traj"), cc),
         "nonfinite": (dims + ("traj",), np.zeros(shape + (n_traj,), bool))},
        coords={**coords, "t": [15.0, 30.0]},
        attrs={"model": "stochastic_transformer", "attention": "sa", "T": 30.0, "layers": 3000,
               "trajectories": n_traj, "seed": 20260129, "name": "quickstart",
               "tokensweep_spec": json.dumps(parse_sweep({
                   "name": "quickstart", "model": "stochastic_transformer", "attention": "sa",
                   "description": "Two tokens, SA attention: P(antipodal) against the closed form.",
                   "grid": {"beta": coords["beta"], "d": coords["d"], "n": coords["n"]}, "time": time,
                   "trajectories": n_traj, "seed": 20260129}).model_dump(mode="json"))})


def test_quickstart_boundary_cell_is_not_judged_and_says_why(tmp_path):
    """The quickstart grid puts d = 3, beta = 0 on beta_c(3) = 0, the equality case no finite T
    resolves: the report counts it apart ("20 of 20 judged cells agree; 1 boundary cell not judged")
    instead of opening in red ("20 of 21 cells agree"), and says why."""
    from tokensweep.pipeline.report.antipodal import BOUNDARY_CELL

    ds = quickstart_cube()
    table = phase.antipodal_table(ds)
    assert table.on_boundary.values.sum() == 1 and bool(table.on_boundary.sel(d=3, beta=0.0, n=2))
    assert not bool(phase.agrees(table, 0.99, 0.01).sel(d=3, beta=0.0, n=2))  # judged, it would fail
    assert np.isnan(float(table.z.sel(d=3, beta=0.0, n=2)))  # and it is left out of the chi-square
    paths = report.write_report(ds, tmp_path / "out")
    summary = json.loads(open(paths["summary"]).read())["agreement"]
    assert (summary["judged"], summary["agreed"], summary["boundary"]) == (20, 20, 1)
    assert summary["text"].startswith("20 of 20 judged cells agree; 1 boundary cell not judged "
                                      "(d = 3, n = 2, beta = 0); chi² = ")
    text = open(paths["report"]).read()
    assert "**Agreement with the closed form**: 20 of 20 judged cells agree; 1 boundary cell" in text
    assert "Boundary cells: on β = β_c(d) the T = ∞ closed form is a limit that no finite T reaches" in text
    assert "Two tokens, SA attention" in text and "tokensweep simulates the dynamics of tokens" in text
    header, rows = parse_markdown_table(text)
    column = header.index("agrees (99% ± 0.01)")
    verdicts = {(int(r[0]), float(r[2])): r[column] for r in rows}
    assert verdicts.pop((3, 0.0)) == BOUNDARY_CELL
    assert set(verdicts.values()) == {"yes"} and len(verdicts) == 20
    assert "20 of 20 cells with a closed form and data agree" in text and "1 cell on the boundary" in text
    page = open(paths["html"], encoding="utf-8").read()
    assert '<span class="ok">20 of 20 judged cells agree; 1 boundary cell not judged' in page
    assert '<p id="boundary">Boundary cells: on β = β_c(d)' in page
    assert "No cell lies outside its interval." in page


def test_a_grid_off_the_boundary_reads_as_before(zarr_cube, tmp_path):
    paths = report.write_report(zarr_cube, tmp_path / "out")
    summary = json.loads(open(paths["summary"]).read())["agreement"]
    assert summary["boundary"] == 0 and " cells agree; chi² = " in summary["text"]
    assert "judged" not in summary["text"] and "Boundary cells" not in open(paths["report"]).read()
