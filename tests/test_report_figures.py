"""The numbers each report figure draws, read back from its matplotlib axes, and the numbers its
tables print, against the same numbers computed here with numpy from the raw arrays of a real cube.

The cube is a small real sweep (real kernels, real zarr store) of the stochastic transformer with
n = 2 and n = 3 tokens and its last partition left undone: a figure that divides by the wrong
count (classes.png once divided every fraction by the token count n), or that counts a
trajectory of a partition not done, draws numbers that differ from these.

Every `plot_*` of the report returns its figure, titled and open, when given no path.
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from conftest import TINY
from matplotlib.container import ErrorbarContainer
from scipy import stats

from tokensweep.pipeline import theory
from tokensweep.pipeline.analysis.antipodal import antipodal_table, any_antipodal_table
from tokensweep.pipeline.analysis.clustering import cluster_count_mean, equiangular_table, frac_close_mean
from tokensweep.pipeline.analysis.stats import closed_form, grid_dims
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.antipodal import (
    any_pair_section,
    plot_antipodal_vs_beta,
    plot_any_antipodal,
    plot_heatmap,
    plot_persistence,
    plot_step_bias,
)
from tokensweep.pipeline.report.class_counts import class_fractions, plot_class_fractions
from tokensweep.pipeline.report.clustering import (
    cluster_count_section,
    plot_cluster_counts,
    plot_equiangular,
    plot_frac_close_heatmap,
)
from tokensweep.pipeline.report.dominant import COLOURS, OUTCOMES, dominant_section, dominant_table, plot_dominant
from tokensweep.pipeline.report.horizon import horizon_table, plot_horizon
from tokensweep.pipeline.report.observables import counted_mean, plot_overlap_hist, plot_scalars
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.store.lifecycle import prepare_store

SPEC = {**TINY, "name": "figures", "grid": {"beta": [0.5, 2.0], "d": [3, 4], "n": [2, 3]},
        "time": {"T": 8.0, "layers": 400, "checkpoints": 4}, "trajectories": 40, "partition_traj": 20,
        "record": ["overlap_hist", "consensus_error"], "record_bins": 10}


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    sweep = parse_sweep(SPEC)
    store = tmp_path_factory.mktemp("figures") / "cube.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep)) - 1):  # the last partition left undone
        run_partition(sweep, store, index)
    with open_cube(store) as ds:
        yield ds.load()


def counted(ds: xr.Dataset, like: xr.DataArray) -> np.ndarray:
    """Over like's dims (grid..., [t,] traj): the trajectory's partition is done (status, block b
    holding trajectories [b P, (b + 1) P)) and it never went non-finite."""
    status = ds["status"]
    done_value = status.attrs["flag_values"][status.attrs["flag_meanings"].split().index("done")]
    block = np.arange(ds.sizes["traj"]) // SPEC["partition_traj"]
    done = xr.DataArray(status.values[..., block] == done_value, dims=status.dims[:-1] + ("traj",))
    keep = done & ~ds["nonfinite"].astype(bool)
    assert not keep.all() and keep.any()  # the undone partition is there to be left out
    return keep.broadcast_like(like).transpose(*like.dims).values


def panel_cell(ax, coords: dict) -> dict:
    """'d = 3, n = 2' (a panel's title) as {'d': 3.0, 'n': 2.0}."""
    cell = {k.strip(): float(v) for k, v in (p.split("=") for p in ax.get_title().split(","))}
    assert set(cell) <= set(coords)
    return cell


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]


def test_classes_png_draws_the_fraction_of_counted_trajectories(cube):
    cc = cube["cluster_class"].transpose(*grid_dims(cube), "t", "traj")
    keep = counted(cube, cc)
    values = cc.values
    antipodal = ((values == 2) & keep).sum(-1) / keep.sum(-1)
    unresolved = ((values == 0) & keep).sum(-1) / keep.sum(-1)
    assert 0 < antipodal.max() and (antipodal + unresolved <= 1).all()
    dims = list(cc.dims[:-2])
    fig = plot_class_fractions(class_fractions(cube), cube.attrs, None)
    try:
        panels = visible_axes(fig)
        assert len(panels) == cube.sizes["d"] * cube.sizes["n"]
        for ax in panels:
            cell = panel_cell(ax, cube.coords)
            lines = ax.get_lines()
            assert len(lines) == 2 * cube.sizes["beta"]  # per beta: antipodal (solid), unresolved (dashed)
            for i, beta in enumerate(cube["beta"].values):
                at = {**cell, "beta": beta}
                index = tuple(int(np.flatnonzero(cube[d].values == at[d])[0]) for d in dims)
                solid, dashed = lines[2 * i], lines[2 * i + 1]
                assert solid.get_label() == f"β = {beta:g}"
                np.testing.assert_allclose(solid.get_xdata(), cube["t"].values)
                np.testing.assert_allclose(solid.get_ydata(), antipodal[index], rtol=0, atol=1e-12)
                np.testing.assert_allclose(dashed.get_ydata(), unresolved[index], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)


def test_phase_png_draws_p_antipodal_with_its_wilson_bars(cube):
    cc = cube["cluster_class"].isel(t=-1).transpose("beta", "d", "n", "traj")
    keep = counted(cube, cc) & np.isin(cc.values, (0, 1, 2))
    k, N = ((cc.values == 2) & keep).sum(-1), keep.sum(-1)
    fig = plot_antipodal_vs_beta(antipodal_table(cube), None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["n = 2", "n = 3"]  # n varies: one panel each
        for j, ax in enumerate(panels):
            bars = {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}
            assert set(bars) == {f"d = {d} (simulation)" for d in cube["d"].values}
            for i, d in enumerate(cube["d"].values):
                points, _, (segments,) = bars[f"d = {d} (simulation)"].lines
                np.testing.assert_allclose(points.get_xdata(), cube["beta"].values)
                np.testing.assert_allclose(points.get_ydata(), k[:, i, j] / N[:, i, j], rtol=0, atol=1e-12)
                for b in range(cube.sizes["beta"]):
                    ci = stats.binomtest(int(k[b, i, j]), int(N[b, i, j])).proportion_ci(0.95, "wilson")
                    (_, lo), (_, hi) = segments.get_segments()[b]
                    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)
    finally:
        plt.close(fig)


def test_clusters_png_draws_the_mean_cluster_count_of_counted_trajectories(cube):
    nc = cube["n_clusters"].transpose(*grid_dims(cube), "t", "traj")
    keep = counted(cube, nc)
    mean = np.where(keep, nc.values, 0).sum(-1) / keep.sum(-1)
    assert (mean >= 1).all()
    fig = plot_cluster_counts(cluster_count_mean(cube), cube.attrs, None)
    try:
        panels = visible_axes(fig)
        assert len(panels) == cube.sizes["d"] * cube.sizes["n"]
        for ax in panels:
            cell = panel_cell(ax, cube.coords)
            i = int(np.flatnonzero(cube["d"].values == cell["d"])[0])
            j = int(np.flatnonzero(cube["n"].values == cell["n"])[0])
            lines = ax.get_lines()
            assert [line.get_label() for line in lines] == [f"β = {b:g}" for b in cube["beta"].values]
            for b, line in enumerate(lines):
                np.testing.assert_allclose(line.get_xdata(), cube["t"].values)
                np.testing.assert_allclose(line.get_ydata(), mean[b, i, j], rtol=1e-6)  # n_clusters: float32
    finally:
        plt.close(fig)


def test_overlap_hist_png_draws_the_fraction_of_pairs_per_bin(cube):
    hist = cube["overlap_hist"].transpose(*grid_dims(cube), "t", "traj", "bin")
    keep = counted(cube, hist.isel(bin=0))[..., None]
    mean = np.where(keep, hist.values, 0).sum(-2) / keep.sum(-2)  # (grid..., t, bin)
    fraction = mean / mean.sum(-1, keepdims=True)
    dims = grid_dims(cube)
    fig = plot_overlap_hist(counted_mean(cube, "overlap_hist"), dims, cube.attrs, None)
    try:
        panels = visible_axes(fig)
        assert len(panels) == 8  # every cell (at most MAX_CELLS = 9 are drawn)
        for ax in panels:
            cell = panel_cell(ax, cube.coords)
            index = tuple(int(np.flatnonzero(cube[d].values == cell[d])[0]) for d in dims)
            drawn = ax.collections[0].get_array()  # (t, bin), the bins holding no pair masked
            expected = fraction[index]
            assert drawn.shape == expected.shape
            np.testing.assert_array_equal(np.ma.getmaskarray(drawn), expected <= 0)
            np.testing.assert_allclose(drawn.compressed(), expected[expected > 0], rtol=1e-12)
            np.testing.assert_allclose(drawn.sum(-1), 1.0, rtol=1e-12)  # every pair in a bin
    finally:
        plt.close(fig)


def test_observables_png_draws_the_mean_of_counted_trajectories(cube):
    ce = cube["consensus_error"].transpose(*grid_dims(cube), "t", "traj")
    keep = counted(cube, ce)
    mean = np.where(keep, ce.values, 0).sum(-1) / keep.sum(-1)
    dims = grid_dims(cube)
    fig = plot_scalars({"consensus_error": counted_mean(cube, "consensus_error")}, dims, cube.attrs, None)
    try:
        (ax,) = visible_axes(fig)
        lines = ax.get_lines()
        assert len(lines) == 8  # one per cell
        for line in lines:  # labelled 'beta = 0.5, d = 3, n = 2'
            cell = {k.strip(): float(v) for k, v in (p.split("=") for p in line.get_label().split(","))}
            index = tuple(int(np.flatnonzero(cube[d].values == cell[d])[0]) for d in dims)
            np.testing.assert_allclose(line.get_xdata(), cube["t"].values)
            np.testing.assert_allclose(line.get_ydata(), mean[index], rtol=1e-6)
    finally:
        plt.close(fig)


def test_any_antipodal_png_draws_the_fraction_with_an_antipodal_pair(cube):
    om = cube["overlap_min"].isel(t=-1).transpose("beta", "d", "n", "traj")
    keep = counted(cube, om)
    eps = parse_sweep(SPEC).eps
    hit = (om.values <= -1 + eps) & keep
    p = hit.sum(-1) / keep.sum(-1)
    assert 0 < p.max()
    fig = plot_any_antipodal(any_antipodal_table(cube), None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["d = 3", "d = 4"]
        for i, ax in enumerate(panels):
            bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
            assert [c.get_label() for c in bars] == ["n = 2", "n = 3"]
            for j, bar in enumerate(bars):
                np.testing.assert_allclose(bar.lines[0].get_xdata(), cube["beta"].values)
                np.testing.assert_allclose(bar.lines[0].get_ydata(), p[:, i, j], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)


def test_heatmap_png_draws_p_antipodal_over_beta_and_sigma():
    from test_report import synthetic_cube

    ds = synthetic_cube("hybrid", "usa", sigma=[0.3, 0.9, 1.5], n_traj=60)
    cc = ds["cluster_class"].isel(t=-1).transpose("d", "n", "sigma", "beta", "traj").values
    p = (cc == 2).mean(-1)  # no nonfinite trajectory, no status: every one counts
    fig = plot_heatmap(antipodal_table(ds, finite_t=False), None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["d = 3", "d = 4", "d = 8"]
        for i, ax in enumerate(panels):
            drawn = ax.collections[0].get_array()
            np.testing.assert_allclose(np.asarray(drawn).reshape(3, 4), p[i, 0], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)


def table_rows(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the first markdown table of a section's lines."""
    table = [[c.strip() for c in row.strip().strip("|").split("|")]
             for text in lines for row in text.splitlines() if row.startswith("| ")]
    return table[0], table[1:]


def test_cluster_count_table_prints_the_mean_cluster_count(cube, tmp_path):
    nc = cube["n_clusters"].transpose(*grid_dims(cube), "t", "traj")
    keep = counted(cube, nc)
    mean = np.where(keep, nc.values, 0).sum(-1) / keep.sum(-1)
    part = cluster_count_section(ReportInput(cube, parse_sweep(SPEC), tmp_path, 0.95))
    head, rows = table_rows(part.lines)
    dims = grid_dims(cube)
    assert head == dims + [f"t = {t:g}" for t in cube["t"].values]
    assert len(rows) == 8
    for row in rows:
        index = tuple(int(np.flatnonzero(cube[d].values == float(v))[0]) for d, v in zip(dims, row))
        assert [float(v) for v in row[len(dims):]] == pytest.approx(mean[index], abs=5.1e-3)  # 2 decimals


def test_any_pair_table_prints_p_any_its_interval_and_persistence(cube, tmp_path):
    om = cube["overlap_min"].transpose("d", "n", "beta", "t", "traj")
    keep = counted(cube, om)
    hit = (om.values <= -1 + parse_sweep(SPEC).eps) & keep
    N = keep[..., 0, :].sum(-1)
    part = any_pair_section(ReportInput(cube, parse_sweep(SPEC), tmp_path, 0.95))
    head, rows = table_rows(part.lines)
    assert head[:4] == ["d", "n", "beta", "N"] and len(rows) == 8
    for row in rows:
        i, j, b = (int(np.flatnonzero(cube[d].values == float(v))[0]) for d, v in zip(("d", "n", "beta"), row))
        k_last, k_first = hit[i, j, b, -1].sum(), hit[i, j, b, 0].sum()
        persist_first = hit[i, j, b].all(axis=0).sum()  # present at t0 and every later checkpoint
        ci = stats.binomtest(int(k_last), int(N[i, j, b])).proportion_ci(0.95, "wilson")
        assert int(row[3]) == N[i, j, b]
        assert float(row[4]) == pytest.approx(k_last / N[i, j, b], abs=5e-5)
        lo, hi = (float(x) for x in row[5].strip("[]").split(","))
        assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=5e-5)
        assert float(row[6]) == pytest.approx(k_first / N[i, j, b], abs=5e-5)
        assert float(row[7]) == pytest.approx(persist_first / N[i, j, b], abs=5e-5)
        assert float(row[8]) == pytest.approx(k_last / N[i, j, b], abs=5e-5)  # from the last: present at it


def test_horizon_png_draws_p_antipodal_and_the_unresolved_fraction_at_every_checkpoint(cube):
    cc = cube["cluster_class"].transpose("d", "n", "beta", "t", "traj")
    keep = counted(cube, cc) & np.isin(cc.values, (0, 1, 2))
    N = keep.sum(-1)
    p, unresolved = ((cc.values == 2) & keep).sum(-1) / N, ((cc.values == 0) & keep).sum(-1) / N
    fig = plot_horizon(horizon_table(cube, 0.95), cube.attrs, None)
    try:
        panels = visible_axes(fig)
        assert len(panels) == 4
        for ax in panels:
            cell = panel_cell(ax, cube.coords)
            i = int(np.flatnonzero(cube["d"].values == cell["d"])[0])
            j = int(np.flatnonzero(cube["n"].values == cell["n"])[0])
            bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
            assert [c.get_label() for c in bars] == [f"β = {b:g}" for b in cube["beta"].values]
            squares = [line for line in ax.get_lines() if line.get_marker() == "s"]
            for b, (bar, square) in enumerate(zip(bars, squares, strict=True)):
                np.testing.assert_allclose(bar.lines[0].get_xdata(), cube["t"].values)
                np.testing.assert_allclose(bar.lines[0].get_ydata(), p[i, j, b], rtol=0, atol=1e-12)
                np.testing.assert_allclose(square.get_ydata(), unresolved[i, j, b], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)


SPHERE = {"name": "sphere", "model": "sphere_flow", "attention": "sa", "integrator": "euler",
          "init": "uniform_sphere", "delta": 1e-3, "grid": {"beta": [1.0, 4.0, 9.0], "d": [2, 3], "n": 8},
          "time": {"T": 10.0, "layers": 100, "checkpoints": 5}, "trajectories": 6, "partition_traj": 3,
          "seed": 5}


def test_frac_close_png_draws_the_mean_fraction_of_close_pairs(tmp_path):
    sweep = parse_sweep(SPHERE)
    store = tmp_path / "sphere.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    with open_cube(store) as ds:
        ds = ds.load()
    fc = ds["frac_close"].transpose("d", "n", "t", "beta", "traj")
    keep = ~ds["nonfinite"].astype(bool).broadcast_like(fc).transpose(*fc.dims).values
    mean = np.where(keep, fc.values, 0).sum(-1) / keep.sum(-1)  # (d, n, t, beta)
    assert 0 < mean.max() and mean.min() < 1
    fig = plot_frac_close_heatmap(frac_close_mean(ds), ds.attrs, None, None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["d = 2, n = 8", "d = 3, n = 8"]
        for i, ax in enumerate(panels):
            drawn = np.asarray(ax.collections[0].get_array()).reshape(ds.sizes["t"], ds.sizes["beta"])
            np.testing.assert_allclose(drawn, mean[i, 0], rtol=1e-6)
    finally:
        plt.close(fig)


def test_dominant_png_and_table_show_the_largest_class_and_its_fraction(tmp_path):
    from test_report import synthetic_cube

    ds = synthetic_cube("hybrid", "usa", sigma=[0.3, 0.9, 1.5], n_traj=60)
    cc = ds["cluster_class"].isel(t=-1).transpose("d", "n", "sigma", "beta", "traj").values
    fractions = np.stack([(cc == k).mean(-1) for k in (0, 1, 2)], axis=-1)  # as OUTCOMES
    dominant = fractions.argmax(-1)
    strength = fractions.max(-1)
    base = np.array([COLOURS[name] for name in OUTCOMES])
    colour = 1 - strength[..., None] * (1 - base[dominant])  # (d, n, sigma, beta, rgb)
    fig = plot_dominant(dominant_table(ds), ds.attrs, None, None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["d = 3, n = 2", "d = 4, n = 2", "d = 8, n = 2"]
        for i, ax in enumerate(panels):
            np.testing.assert_allclose(ax.images[0].get_array(), colour[i, 0], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)
    part = dominant_section(ReportInput(ds, parse_sweep(json.loads(ds.attrs["tokensweep_spec"])), tmp_path))
    head, rows = table_rows(part.lines)
    assert head[:8] == ["beta", "d", "n", "sigma", "N", "unresolved", "single", "antipodal"]
    assert len(rows) == 4 * 3 * 3
    for row in rows:
        b, i, s = (int(np.flatnonzero(ds[d].values == float(row[k]))[0]) for d, k in (("beta", 0), ("d", 1), ("sigma", 3)))
        assert int(row[4]) == 60
        assert [float(v) for v in row[5:8]] == pytest.approx(fractions[i, 0, s, b], abs=5e-4)
        assert row[8] == OUTCOMES[dominant[i, 0, s, b]]


def test_persistence_png_draws_p_any_and_its_persistence_over_the_checkpoints(cube):
    om = cube["overlap_min"].transpose("d", "n", "beta", "t", "traj")
    keep = counted(cube, om)
    hit = (om.values <= -1 + parse_sweep(SPEC).eps) & keep
    N = keep.sum(-1)
    # present from t: at t and at every later checkpoint (a reverse running "and" over t)
    persist = np.flip(np.logical_and.accumulate(np.flip(hit, axis=-2), axis=-2), axis=-2)
    p_any, p_persist = hit.sum(-1) / N, persist.sum(-1) / N
    assert (p_persist <= p_any).all() and (p_persist < p_any).any()
    fig = plot_persistence(any_antipodal_table(cube), None)
    try:
        panels = visible_axes(fig)
        assert len(panels) == 4
        for ax in panels:
            cell = panel_cell(ax, cube.coords)
            i = int(np.flatnonzero(cube["d"].values == cell["d"])[0])
            j = int(np.flatnonzero(cube["n"].values == cell["n"])[0])
            lines = ax.get_lines()
            assert len(lines) == 2 * cube.sizes["beta"]
            for b in range(cube.sizes["beta"]):
                np.testing.assert_allclose(lines[2 * b].get_ydata(), p_any[i, j, b], rtol=0, atol=1e-12)
                np.testing.assert_allclose(lines[2 * b + 1].get_ydata(), p_persist[i, j, b], rtol=0, atol=1e-12)
    finally:
        plt.close(fig)


def test_equiangular_png_draws_the_mean_overlaps_against_gamma(tmp_path):
    spec = {**SPHERE, "name": "equiangular", "init": "equiangular", "integrator": "heun",
            "grid": {"beta": [1.0, 3.0], "d": 6, "n": [3, 6]}, "trajectories": 2, "partition_traj": 2}
    sweep = parse_sweep(spec)
    store = tmp_path / "equiangular.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    with open_cube(store) as ds:
        ds = ds.load()
    dims = ("beta", "d", "n", "t", "traj")
    omin, omax = (ds[v].transpose(*dims).values for v in ("overlap_min", "overlap_max"))
    keep = ~ds["nonfinite"].astype(bool).transpose("beta", "d", "n", "traj").values[:, :, :, None, :]
    mean_min = np.where(keep, omin, 0).sum(-1) / keep.sum(-1)
    mean_max = np.where(keep, omax, 0).sum(-1) / keep.sum(-1)
    fig = plot_equiangular(equiangular_table(ds), ds.attrs, closed_form(ds, "equiangular_overlap"), None)
    try:
        panels = visible_axes(fig)
        assert [ax.get_title() for ax in panels] == ["d = 6, n = 3", "d = 6, n = 6"]
        for j, ax in enumerate(panels):
            lines = ax.get_lines()
            assert len(lines) == 3 * ds.sizes["beta"]  # per beta: gamma(t), min (v), max (^)
            for b, beta in enumerate(ds["beta"].values):
                curve, low, high = lines[3 * b: 3 * b + 3]
                n = int(ds["n"].values[j])
                np.testing.assert_allclose(curve.get_ydata(),
                                           theory.equiangular_gamma(curve.get_xdata(), beta, n, "sa"), rtol=1e-12)
                np.testing.assert_allclose(low.get_xdata(), ds["t"].values)
                np.testing.assert_allclose(low.get_ydata(), mean_min[b, 0, j], rtol=1e-12)
                np.testing.assert_allclose(high.get_ydata(), mean_max[b, 0, j], rtol=1e-12)
    finally:
        plt.close(fig)


def test_step_bias_png_draws_p_against_h_and_the_closed_form_at_h_0(tmp_path):
    spec = {**TINY, "name": "h-bias", "grid": {"beta": [1.0, 2.0], "d": 3, "n": 2, "layers": [40, 100, 200]},
            "time": {"T": 4.0, "checkpoints": 2}, "trajectories": 30, "partition_traj": 30}
    sweep = parse_sweep(spec)
    store = tmp_path / "h.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    with open_cube(store) as ds:
        ds = ds.load()
    cc = ds["cluster_class"].isel(t=-1).transpose("beta", "d", "n", "layers", "traj").values
    keep = ~ds["nonfinite"].astype(bool).transpose("beta", "d", "n", "layers", "traj").values
    keep &= np.isin(cc, (0, 1, 2))
    p = ((cc == 2) & keep).sum(-1) / keep.sum(-1)  # (beta, d, n, layers)
    hs = 4.0 / np.array([40, 100, 200])
    table = antipodal_table(ds).transpose("d", "n", "beta", "layers")
    fig = plot_step_bias(table, hs, None)
    try:
        (ax,) = visible_axes(fig) or [fig.axes[0]]
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert [c.get_label() for c in bars] == ["beta = 1", "beta = 2"]
        stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
        for b, (bar, star) in enumerate(zip(bars, stars, strict=True)):
            np.testing.assert_allclose(bar.lines[0].get_xdata(), hs)
            np.testing.assert_allclose(bar.lines[0].get_ydata(), p[b, 0, 0], rtol=0, atol=1e-12)
            assert list(star.get_xdata()) == [0.0]
            assert star.get_ydata()[0] == pytest.approx(
                float(theory.antipodal_probability(ds["beta"].values[b], 3)), rel=1e-9)
    finally:
        plt.close(fig)


def test_search_looks_png_draws_each_point_at_its_largest_n():
    from types import SimpleNamespace

    from tokensweep.pipeline.report.search_page import plot_looks

    # (x, N, k, decision): x = 1.0 looked at twice, the larger N is the one drawn
    looks = [(0.5, 100, 10, ""), (1.0, 100, 40, ""), (1.0, 400, 190, ""), (1.5, 200, 150, "")]
    found = SimpleNamespace(looks=looks, low=0.9, high=1.2, estimate=1.05, coords={"d": 3})
    design = SimpleNamespace(level=0.5, z_level=0.99)
    fig = plot_looks([found], design, "beta", 0.0, 2.0, SimpleNamespace(name="s"), None)
    try:
        (ax,) = visible_axes(fig)
        assert ax.get_title() == "d = 3"
        (bar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        np.testing.assert_allclose(bar.lines[0].get_xdata(), [0.5, 1.0, 1.5])
        np.testing.assert_allclose(bar.lines[0].get_ydata(), [0.1, 190 / 400, 0.75], rtol=0, atol=1e-15)
        for (k, n), ((_, lo), (_, hi)) in zip([(10, 100), (190, 400), (150, 200)], bar.lines[2][0].get_segments()):
            ci = stats.binomtest(k, n).proportion_ci(0.99, "wilson")
            assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)
        level = [line for line in ax.get_lines() if line.get_label() == "level 0.5"]
        assert len(level) == 1 and list(level[0].get_ydata()) == [0.5, 0.5]
    finally:
        plt.close(fig)
