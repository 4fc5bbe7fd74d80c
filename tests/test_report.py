"""write_report on small synthetic cubes round-tripped through a zarr store."""

import matplotlib.image
import numpy as np
import pytest
import xarray as xr

import itertools
import json

from tokensweep.pipeline import report, theory
from tokensweep.pipeline.analysis import antipodal as phase
from tokensweep.pipeline.analysis import stats
from tokensweep.pipeline.report import figures as plots
from tokensweep.pipeline.spec import parse_sweep


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
