"""Reading a cube cannot mislead: fill values that are never data, `tokensweep.open`'s masking by
status, its `pending` count, squeezed axes and CF labels, and the accessor's reductions, on real
stores written by real kernels (some of them half done)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import xarray as xr
from conftest import OUTPUT_VARS, TINY, reference_cube

import tokensweep
from tokensweep.pipeline.execute import run_partition, simulate_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec.load import load_sweep, parse_sweep
from tokensweep.pipeline.store.chunks import write_outputs, write_status
from tokensweep.pipeline.store.layout import FAILED
from tokensweep.pipeline.store.lifecycle import prepare_store

DONE_PARTS = (0, 1, 2, 5, 7, 11)  # of TINY's 12: (beta, d) cells 0 and 1 partly, 2 and 3 sparsely
WRITTEN_NOT_DONE = 4  # outputs written, then killed before its status: must read as pending
FAILED_PART = 9


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(half-done store, finished store) of TINY, written by the real pipeline."""
    folder = tmp_path_factory.mktemp("reading")
    full = folder / "full.zarr"
    reference_cube(TINY, full)
    half = folder / "half.zarr"
    sweep = parse_sweep(TINY)
    plan = Plan(sweep)
    prepare_store(sweep, half)
    for index in DONE_PARTS:
        run_partition(sweep, half, index)
    write_outputs(half, plan, plan[WRITTEN_NOT_DONE], simulate_partition(sweep, plan[WRITTEN_NOT_DONE]))
    write_outputs(half, plan, plan[FAILED_PART], simulate_partition(sweep, plan[FAILED_PART]))
    write_status(half, plan, plan[FAILED_PART], FAILED)
    return half, full


def done_traj(sweep) -> np.ndarray:
    """Bool over (beta, d, n, traj): the trajectories of DONE_PARTS."""
    plan = Plan(sweep)
    done = np.zeros((*plan.grid_shape, sweep.trajectories), bool)
    for index in DONE_PARTS:
        part = plan[index]
        done[(*part.cell, slice(part.traj_start, part.traj_stop))] = True
    return done


def test_integer_outputs_have_a_fill_value_that_is_never_data(stores):
    half, _ = stores
    for name, fill in (("cluster_class", -128), ("n_clusters", -32768)):
        meta = json.loads((half / name / "zarr.json").read_text())
        assert meta["fill_value"] == fill and meta["attributes"]["_FillValue"] == fill
    raw = xr.open_zarr(half)  # what the README's users did: no masking by status
    assert raw.cluster_class.dtype.kind == "f"
    # the last cell: partition 9 written but failed, 10 never written, 11 done. Raw, only 10 is
    # NaN: a failed or killed partition's numbers need the status (tokensweep.open) to be left out
    cell = raw.cluster_class.isel(beta=1, d=1, n=0).values
    assert np.isnan(cell[:, 5:10]).all() and not np.isnan(cell[:, :5]).any()
    assert not np.isnan(cell[:, 10:]).any()


def test_open_masks_every_output_outside_done_partitions(stores):
    half, full = stores
    ds, ref = tokensweep.open(half), xr.open_zarr(full)
    sweep = parse_sweep(TINY)
    done = done_traj(sweep)[:, :, 0]  # n is squeezed
    assert ds.attrs["pending"] == int((~done).sum()) == 12 * 4 - sum(
        Plan(sweep)[i].traj_stop - Plan(sweep)[i].traj_start for i in DONE_PARTS)
    for name in OUTPUT_VARS:
        got = ds[name].transpose("beta", "d", ..., "traj").values
        want = ref[name].isel(n=0).transpose("beta", "d", ..., "traj").values.astype(float)
        mask = done if got.ndim == 3 else done[:, :, None, :]
        mask = np.broadcast_to(mask, got.shape)
        assert np.isnan(got[~mask]).all(), name  # pending, failed, and written-but-not-done
        np.testing.assert_array_equal(got[mask], want[mask], err_msg=name)
    assert ds.nonfinite.dtype == np.float32  # a bool output: 1.0 / 0.0, NaN where not done


def test_readme_expression_on_a_half_done_cube_is_the_finished_cube_restricted_to_done(stores):
    half, full = stores
    p = tokensweep.open(half).tokensweep.probability("antipodal")
    ref = xr.open_zarr(full).load()
    done = done_traj(parse_sweep(TINY))[:, :, 0] & ~ref.nonfinite.isel(n=0).values
    cc = ref.cluster_class.isel(n=0, t=-1).values
    k, N = ((cc == 2) & done).sum(-1), done.sum(-1)
    np.testing.assert_array_equal(p.k.values, k)
    np.testing.assert_array_equal(p.N.values, N)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(p.p.values, k / np.where(N > 0, N, np.nan))
    assert (p.lo <= p.p).all() and (p.p <= p.hi).all()
    # a finished cube gives the same as the raw one-liner did when it was complete
    finished = tokensweep.open(full)
    assert finished.attrs["pending"] == 0
    np.testing.assert_array_equal(finished.tokensweep.probability("antipodal").p.values,
                                  (ref.cluster_class.isel(n=0, t=-1) == 2).mean("traj").values)


def test_axes_of_length_one_are_scalar_coordinates_with_cf_labels(stores):
    import matplotlib

    matplotlib.use("Agg")
    ds = tokensweep.open(stores[1])
    assert "n" not in ds.dims and float(ds.n) == 2
    for name in ("beta", "d", "n", "t", "traj"):
        assert {"long_name", "units"} <= set(ds[name].attrs), name
    assert ds.beta.attrs["long_name"] == "inverse temperature"
    assert ds.d.attrs["long_name"] == "dimension of the ambient space"
    assert ds.n.attrs["long_name"] == "number of tokens"
    assert ds.t.attrs["long_name"] == "checkpoint time"
    raw = xr.open_zarr(stores[1])  # the labels are in the store too
    assert raw.beta.attrs["long_name"] == "inverse temperature"
    lines = ds.tokensweep.probability("antipodal").p.plot.line(x="beta", hue="d")
    assert len(lines) == 2


def test_accessor_reductions(stores):
    ds = tokensweep.open(stores[0])
    theory = ds.tokensweep.theory()
    assert theory.dims == ("beta", "d") and float(theory.n) == 2
    assert float(theory.sel(beta=0.5, d=4)) == 0.0 and 0 < float(theory.sel(beta=2.0, d=3)) < 1
    table = ds.tokensweep.agreement(level=0.99, widen=0.01)
    assert {"p_antipodal", "lo", "hi", "theory", "z", "agrees"} <= set(table.data_vars)
    assert table.n_pending.sum() == ds.attrs["pending"]
    counts = ds.tokensweep.cluster_counts()
    assert counts["mean"].dims == ("beta", "d", "t")
    assert int(counts.N.sel(beta=2.0, d=4).isel(t=0)) == 2  # partition 11: trajectories 10, 11
    assert ((counts["min"] >= 1) | counts["min"].isnull()).all()
    probabilities = sum(ds.tokensweep.probability(c).p for c in ("antipodal", "single", "unresolved"))
    np.testing.assert_allclose(probabilities.values[counts.N.isel(t=-1).values > 0], 1.0)
    with pytest.raises(ValueError, match="choose one of unresolved, single, antipodal"):
        ds.tokensweep.probability("both")


def test_analysis_reads_masked_and_raw_cubes_alike(stores):
    from tokensweep.pipeline.analysis.antipodal import antipodal_table, any_antipodal_table

    raw, masked = xr.open_zarr(stores[0]), tokensweep.open(stores[0])
    a, b = antipodal_table(raw), antipodal_table(masked)
    for name in ("n_antipodal", "n_single", "n_unresolved", "n_nonfinite", "n_pending"):
        np.testing.assert_array_equal(a[name].isel(n=0).values, b[name].values)
    c, d = any_antipodal_table(raw), any_antipodal_table(masked)
    np.testing.assert_array_equal(c.n_any.isel(n=0).values, d.n_any.values)


def test_open_by_catalog_name_opens_its_default_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tokensweep.StoreError, match="no store at results/quickstart.zarr"):
        tokensweep.open("quickstart")
    sweep = load_sweep("quickstart")
    prepare_store(sweep, sweep.store)  # created, nothing computed
    ds = tokensweep.open("quickstart")
    assert ds.attrs["pending"] == sweep.n_cells * sweep.trajectories
    assert ds.cluster_class.isnull().all()
    assert tokensweep.open(tokensweep.load_spec("quickstart")).attrs["pending"] == ds.attrs["pending"]
    shutil.rmtree(sweep.store)
