"""[F26] App. D.2 / Fig. 9 side by side (`tokensweep report STORE --beside OTHER`, pipeline/report/beside.py):
the stochastic transformer's cube and the hybrid model's at sigma = 0, two real stores of the
catalog's two entries (fewer trajectories); the numbers the section and the claim show against
the cubes read directly; the refusals of the command."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_in_process
from scipy import stats
from test_record_pipeline import write_cube

import tokensweep
from tokensweep.pipeline.analysis.clustering import settle_times
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.store.cube import open_cube


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fig9")
    paths = {}
    for side in ("stochastic", "deterministic"):
        spec = tokensweep.load_spec(f"fedorov2026-fig9-{side}").canonical()
        paths[side] = folder / f"{side}.zarr"
        write_cube({**spec, "trajectories": 24, "partition_traj": 24}, paths[side])
    return paths


def settled_by_hand(path, beta):
    """The plateau statistic of one cell, from the cube as xarray gives it: per trajectory, the
    first checkpoint after the last change of the cluster count."""
    ds = open_cube(path)
    counts = ds.n_clusters.sel(beta=beta).squeeze(drop=True).transpose("traj", "t").values
    t = ds.t.values
    out = []
    for row in counts:
        changes = [j + 1 for j in range(len(row) - 1) if row[j + 1] != row[j]]
        out.append(t[changes[-1]] if changes else t[0])
    return np.array(out)


def test_settle_times_is_the_last_change():
    counts = np.array([[5, 4, 4, 3, 3], [2, 2, 2, 2, 2], [3, 2, 3, 3, 3]])
    np.testing.assert_array_equal(settle_times(counts, np.arange(1.0, 6.0)), [4.0, 1.0, 3.0])


def test_the_section_and_the_claim_show_both_cubes_numbers(pair, tmp_path):
    out = tmp_path / "report"
    with open_cube(pair["stochastic"]) as ds, open_cube(pair["deterministic"]) as other:
        write_report(ds, out, beside=other)
    page = (out / "report.md").read_text()
    section = page.split("## Beside fedorov2026-fig9-deterministic")[1].split("\n## ")[0]
    assert (out / "beside.png").stat().st_size > 0 and "![beside](beside.png)" in section
    for beta in (1.0, 9.0):
        mine, theirs = settled_by_hand(pair["stochastic"], beta), settled_by_hand(pair["deterministic"], beta)
        rows = [line for line in section.splitlines() if line.startswith(f"| beta = {beta:g}, d = 3, n = 8 |")]
        assert len(rows) == 2
        assert f"| {np.median(mine):.3f} | {mine.max():.3f} |" in rows[0]
        assert f"| {np.median(theirs):.3f} | {theirs.max():.3f} |" in rows[1]
        p = stats.mannwhitneyu(mine, theirs, alternative="less").pvalue
        assert rows[0].endswith(f"| {p:.2g} |")
    claims = {c["claim"]: c for c in json.loads((out / "summary.json").read_text())["claims"]}
    earlier = claims["the stochastic dynamics settles earlier than the deterministic one at large β (no metastability)"]
    p9 = stats.mannwhitneyu(settled_by_hand(pair["stochastic"], 9.0), settled_by_hand(pair["deterministic"], 9.0),
                            alternative="less").pvalue
    assert earlier["verdict"] == ("holds" if p9 < 0.01 else "fails") and f"p = {p9:.2g}" in earlier["measured"]


def test_without_a_cube_beside_the_claim_is_not_checked_and_says_how(pair, tmp_path):
    with open_cube(pair["stochastic"]) as ds:
        write_report(ds, tmp_path / "alone")
    claims = json.loads((tmp_path / "alone" / "summary.json").read_text())["claims"]
    earlier = next(c for c in claims if c["claim"].startswith("the stochastic dynamics settles earlier"))
    assert earlier["verdict"].startswith("not checked: no cube beside this one") and "--beside" in earlier["verdict"]
    assert "## Beside" not in (tmp_path / "alone" / "report.md").read_text()


def test_the_command_draws_beside_and_refuses_in_one_line(pair, tmp_path):
    done = run_in_process("report", str(pair["stochastic"]), "--beside", str(pair["deterministic"]),
                          "--out", str(tmp_path / "cli"))
    assert done.returncode == 0, done.stderr
    assert "beside: " in done.stdout and (tmp_path / "cli" / "beside.png").is_file()
    for args in (("--index", str(tmp_path), "--beside", str(pair["deterministic"])),
                 (str(pair["stochastic"]), "--beside", str(tmp_path / "missing.zarr"))):
        refused = run_in_process("report", *args)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "Traceback" not in refused.stderr


def test_beside_png_draws_both_cubes_mean_cluster_counts(pair):
    from tokensweep.pipeline.report.beside import beside_table, plot_beside
    from tokensweep.pipeline.report.figures import plt

    with open_cube(pair["stochastic"]) as ds, open_cube(pair["deterministic"]) as other:
        rows, why = beside_table(ds, other)
        assert why is None
        fig = plot_beside(rows, ds.attrs, None)
        try:
            panels = [ax for ax in fig.axes if ax.get_visible()]
            assert [ax.get_title() for ax in panels] == ["beta = 1, d = 3, n = 8", "beta = 9, d = 3, n = 8"]
            for ax, beta in zip(panels, (1.0, 9.0)):
                for line, cube in zip(ax.get_lines(), (ds, other)):  # every trajectory done and finite
                    counts = cube.n_clusters.sel(beta=beta).squeeze(drop=True).transpose("t", "traj").values
                    np.testing.assert_allclose(line.get_xdata(), cube.t.values)
                    np.testing.assert_allclose(line.get_ydata(), counts.mean(axis=1), rtol=1e-6)
        finally:
            plt.close(fig)
