"""The overlap sections of the sphere flow's report against their closed forms, on real small cubes
(real kernels, real zarr stores) of the catalog entries, with smaller grids where that keeps the
suite quick:

* geshkovski2023-high-d ([GLPR-P] Thm 6.9): random starts track gamma(t);
* geshkovski2023-equiangular ([GLPR-P] Thm 6.8): the late-time rate of 1 - gamma;
* rst-causal-identity ([RST]): the token-2 overlap ODE;
* geshkovski2023-sharp ([GLPR-P] section 9.1): simplex and cross-polytope.

Every tolerance is derived from the discretisation (the integrator's step, the histogram's bins)
or from the theorem's own scale, as each test says; the theory is always the package's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_report_html import CHROMIUM, NO_CHROMIUM, assert_self_contained, browse

from tokensweep.pipeline import theory
from tokensweep.pipeline.analysis.overlaps import log_gap_rate, sharp_table, token2_table, tracking_table
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.spec.load import parse_sweep, read_spec
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.theory.sharp import sharp_overlaps


def entry(name: str, **changes) -> dict:
    """The small scale of catalog entry `name`, with `changes` (a smaller grid) applied."""
    data = read_spec(name, "small")
    return {**data, **changes, "name": name}


def cube_and_report(spec: dict, root: Path):
    sweep = parse_sweep(spec)
    store = root / f"{sweep.name}.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    with open_cube(store) as ds:
        paths = write_report(ds, root / f"{sweep.name}.report")
    return sweep, store, paths


def section(paths: dict, heading: str) -> str:
    text = Path(paths["report"]).read_text()
    assert heading in text, heading
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ")]
    return rows[1:]  # the header off


def test_random_starts_track_gamma_ever_closer_as_d_grows(tmp_path):
    # beta = 1, d = 64 and 256, T = 6 (gamma ~ 1 - 1e-5 by then); RK4, whose O(h^4) ~ 1e-4 error
    # is far below the finite-d deviation (Euler's O(h) ~ 1e-2 at h = 0.1 would hide it at d = 256)
    spec = entry("geshkovski2023-high-d", grid={"beta": 1.0, "d": [64, 256], "n": 16}, integrator="rk4",
                 time={"T": 6.0, "layers": 60, "checkpoints": 12}, trajectories=8)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    assert Path(paths["tracking"]).stat().st_size > 1000
    with open_cube(store) as ds:
        table = tracking_table(ds)
    half = table.attrs["half_bin"]
    assert half == pytest.approx(1 / sweep.record_bins)
    gamma = theory.equiangular_gamma(table.t.values, 1.0, 16, "sa")
    np.testing.assert_allclose(table.gamma.isel(beta=0, n=0).values, np.stack([gamma, gamma]), rtol=1e-12)
    q = table.quantiles
    # gamma inside the 1-99 % band of the overlaps (quantiles exact to half a bin) at every checkpoint
    assert bool(((q.sel(quantile=0.01) - half <= table.gamma) & (table.gamma <= q.sel(quantile=0.99) + half)).all())
    # Thm 6.9: the deviation is O(sqrt(log d / d)); from d = 64 to 256 that scale shrinks by 1.7:
    # the mean's worst deviation must shrink too, and the spread of the start by ~ sqrt(256 / 64) = 2
    dev = table.dev.max("t").isel(beta=0, n=0).values
    assert dev[1] < dev[0], dev
    width = (q.sel(quantile=0.95) - q.sel(quantile=0.05)).isel(t=0, beta=0, n=0).values
    assert 1.5 < width[0] / width[1] < 2.7, width  # 2 within the sampling error of 8 x 120 pairs
    rows = table_rows(section(paths, "## Random starts against gamma(t)"))
    assert [r[-1] for r in rows] == ["12 of 12", "12 of 12"]
    assert float(rows[0][4]) == pytest.approx(dev[0], rel=1e-2)


def test_equiangular_late_time_rate_matches_the_ode_and_thm_6_8(tmp_path):
    spec = entry("geshkovski2023-equiangular", grid={"beta": [1.0, 4.0], "d": 8, "n": 4},
                 time={"T": 10.0, "layers": 200, "checkpoints": 20}, trajectories=2)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    rows = table_rows(section(paths, "## Equiangular start"))
    h = sweep.time.T / sweep.time.layers
    with open_cube(store) as ds:
        omin = ds.overlap_min.mean("traj").squeeze(["d", "n"]).values
        times = ds.t.values
    for row, beta, measured_path in zip(rows, (1.0, 4.0), omin):
        max_dev = float(row[3])
        assert max_dev < h ** 4  # RK4: the global error is O(h^4); here its constant is below 1
        rate, t0, t1 = log_gap_rate(times, measured_path)
        ode = log_gap_rate([t0, t1], theory.equiangular_gamma(np.array([t0, t1]), beta, 4))[0]
        # |d log gap| <= dev / gap at each end: the measured rate is the ODE's to 2 dev / (gap (t1 - t0))
        gap = 1 - theory.equiangular_gamma(t1, beta, 4)
        assert abs(rate - ode) <= 2 * max_dev / (gap * (t1 - t0)), (rate, ode)
        assert float(row[8]) == pytest.approx(rate, abs=1e-4) and float(row[9]) == pytest.approx(ode, abs=1e-4)
        # the ODE's rate at T is Thm 6.8's late-time rate 2 to within its own approach (SA: O(gap))
        assert float(row[10]) == theory.equiangular_rate(beta, 4, "sa") == 2.0
        assert abs(ode - 2.0) < 0.01


def test_causal_token2_overlap_follows_its_ode(tmp_path):
    spec = entry("rst-causal-identity", trajectories=2)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    assert Path(paths["token2"]).stat().st_size > 1000
    h = sweep.time.T / sweep.time.layers
    with open_cube(store) as ds:
        table = token2_table(ds)
        assert table.dev.max() < h ** 4  # RK4 on a smooth two-body flow: O(h^4) with a constant below 1
        for rho0 in ds.rho0.values:
            for beta in ds.beta.values:
                expected = theory.causal_token2_overlap(rho0, beta, ds.t.values)
                np.testing.assert_allclose(table.a.sel(rho0=rho0, beta=beta).squeeze().values, expected)
    rows = table_rows(section(paths, "## Causal token-2 overlap against its ODE"))
    assert len(rows) == 6 and all(float(r[5]) < h ** 4 for r in rows)


def test_sharp_configurations_reached_at_the_catalog_horizon(tmp_path):
    spec = entry("geshkovski2023-sharp", trajectories=8)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    with open_cube(store) as ds:
        table = sharp_table(ds).squeeze()
    assert table.expected_max.values.tolist() == [sharp_overlaps(4, 3)[0], 0.0]
    assert table.expected_min.values.tolist() == [-1 / 3, -1.0]
    # a fixed point of the integrator as of the flow: only the approach is left, and it shrinks
    assert bool((table.dev_T <= table.dev_before).all()) and bool((table.dev_T <= sweep.eps).all())
    assert table.within.values.tolist() == [1.0, 1.0]
    rows = table_rows(section(paths, "## Sharp configurations of V = -I"))
    assert [r[3] for r in rows] == ["simplex", "cross-polytope"]
    assert re.fullmatch(r"-0\.333\d", rows[0][7]) and rows[1][5] == "-1.0000"


def test_no_overlap_section_where_no_closed_form_applies(tmp_path):
    # V = -I with n = 5 in d = 3: no sharp configuration in closed form; a uniform start records nothing
    spec = entry("geshkovski2023-sharp", grid={"beta": 1.0, "d": 3, "n": 5},
                 time={"T": 1.0, "layers": 10, "checkpoints": 2}, trajectories=2)
    _, _, paths = cube_and_report(spec, tmp_path)
    text = Path(paths["report"]).read_text()
    assert "## Sharp" not in text and "## Random starts" not in text and "## Causal" not in text


@pytest.mark.slow  # starts a browser
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_overlap_figures_load_in_chromium(tmp_path):
    spec = entry("rst-causal-identity", grid={"beta": 1.0, "d": 3, "n": 2, "rho0": [-0.5, 0.5]}, trajectories=1)
    _, _, paths = cube_and_report(spec, tmp_path)
    figures = [name for name in paths if name not in ("report", "html", "summary")]
    assert "token2" in figures
    assert_self_contained(browse(Path(paths["html"]), tmp_path), len(figures))
