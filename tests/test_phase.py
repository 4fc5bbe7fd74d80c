"""antipodal.py on synthetic cubes whose counts are known exactly, and the Wilson interval."""

import json

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from tokensweep.pipeline import theory
from tokensweep.pipeline.analysis import antipodal
from tokensweep.pipeline.analysis import stats as tstats
from tokensweep.pipeline.spec.load import parse_sweep


def make_cube(counts, coords, model="stochastic_transformer", attention="sa", n_traj=40,
              n_bad=None, seed=0):
    """Cube with cluster_class over (*grid, t, traj): at the last checkpoint each cell holds
    counts[..., 0] antipodal, counts[..., 1] single and the rest unresolved finite trajectories,
    plus n_bad[...] nonfinite ones (classed antipodal, to show they are excluded); at the first
    checkpoint everything is unresolved."""
    rng = np.random.default_rng(seed)
    grid = tuple(len(v) for v in coords.values())
    n_bad = np.zeros(grid, int) if n_bad is None else n_bad
    cc = np.zeros(grid + (2, n_traj), np.int8)
    bad = np.zeros(grid + (n_traj,), bool)
    for idx in np.ndindex(grid):
        k2, k1 = counts[idx]
        row = np.zeros(n_traj, np.int8)
        row[:k2], row[k2:k2 + k1] = 2, 1
        row[n_traj - n_bad[idx]:] = 2
        flags = np.zeros(n_traj, bool)
        flags[n_traj - n_bad[idx]:] = True
        perm = rng.permutation(n_traj)
        cc[idx + (1,)], bad[idx] = row[perm], flags[perm]
    dims = tuple(coords)
    return xr.Dataset(
        {"cluster_class": (dims + ("t", "traj"), cc), "nonfinite": (dims + ("traj",), bad)},
        coords={**coords, "t": [1.0, 20.0]},
        attrs={"model": model, "attention": attention, "T": 20.0, "layers": 2000, "seed": 7,
               "tokensweep_spec": spec_json(model, attention, coords, n_traj)},
    )


def spec_json(model, attention, coords, n_traj):
    """The spec a cube over `coords` would have been written with (its closed form is the model's)."""
    return json.dumps(parse_sweep({
        "name": "synthetic", "model": model, "attention": attention,
        "grid": {k: list(map(float if k in ("beta", "sigma") else int, v)) for k, v in coords.items()},
        "time": {"T": 20.0, "layers": 2000, "checkpoints": [1.0, 20.0]}, "trajectories": n_traj,
        "seed": 7}).model_dump(mode="json"))


@pytest.fixture
def cube():
    coords = {"beta": [0.5, 1.0, 2.0], "d": [3, 4], "n": [2, 3]}
    counts = np.zeros((3, 2, 2, 2), int)
    counts[..., 0] = np.arange(12).reshape(3, 2, 2)  # antipodal
    counts[..., 1] = 30 - np.arange(12).reshape(3, 2, 2)  # single
    n_bad = np.zeros((3, 2, 2), int)
    n_bad[2, 1, 0] = 3
    return make_cube(counts, coords, n_bad=n_bad), counts, n_bad


@pytest.mark.parametrize("k, N", [(0, 10), (3, 10), (10, 10), (17, 250), (1, 1)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(k, N, level):
    ci = stats.binomtest(k, N).proportion_ci(confidence_level=level, method="wilson")
    lo, hi = tstats.wilson_interval(k, N, level)
    assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)


def test_wilson_known_value_and_empty():
    lo, hi = tstats.wilson_interval(50, 100)  # textbook: [0.4038, 0.5962]
    assert (round(float(lo), 4), round(float(hi), 4)) == (0.4038, 0.5962)
    lo, hi = tstats.wilson_interval([0, 4], [0, 8])
    assert np.isnan(lo[0]) and np.isnan(hi[0]) and lo[1] < 0.5 < hi[1]
    with pytest.raises(ValueError, match="level"):
        tstats.wilson_interval(1, 2, level=95)


def test_wilson_coverage_property():
    # 4000 binomial draws at p = 0.3, N = 200: coverage 0.95 +- 0.015 (about 4.4 sd of the
    # coverage estimate, plus the small discreteness oscillation of Wilson's coverage)
    rng = np.random.default_rng(11)
    p, N = 0.3, 200
    k = rng.binomial(N, p, size=4000)
    lo, hi = tstats.wilson_interval(k, N)
    assert abs(np.mean((lo <= p) & (p <= hi)) - 0.95) < 0.015


def test_counts_probabilities_and_intervals(cube):
    ds, counts, n_bad = cube
    table = antipodal.antipodal_table(ds)
    assert set(table.n_traj.dims) == {"beta", "d", "n"}
    np.testing.assert_array_equal(table.n_antipodal.transpose("beta", "d", "n"), counts[..., 0])
    np.testing.assert_array_equal(table.n_single.transpose("beta", "d", "n"), counts[..., 1])
    np.testing.assert_array_equal(table.n_nonfinite.transpose("beta", "d", "n"), n_bad)
    np.testing.assert_array_equal(table.n_traj.transpose("beta", "d", "n"), 40 - n_bad)
    np.testing.assert_array_equal(table.n_unresolved.transpose("beta", "d", "n"),
                                  40 - n_bad - counts.sum(-1))
    p = counts[..., 0] / (40 - n_bad)
    np.testing.assert_allclose(table.p_antipodal.transpose("beta", "d", "n"), p)
    lo, hi = tstats.wilson_interval(counts[..., 0], 40 - n_bad)
    np.testing.assert_allclose(table.lo.transpose("beta", "d", "n"), lo)
    np.testing.assert_allclose(table.hi.transpose("beta", "d", "n"), hi)
    assert table.attrs["t"] == 20.0 and table.attrs["model"] == "stochastic_transformer"


def test_theory_and_z(cube):
    ds, counts, n_bad = cube
    table = antipodal.antipodal_table(ds)
    for beta in (0.5, 1.0, 2.0):
        for d in (3, 4):
            cell = table.sel(beta=beta, d=d)
            expected = theory.antipodal_probability(beta, d)
            assert float(cell.theory.sel(n=2)) == pytest.approx(expected, abs=1e-12)
            assert np.isnan(float(cell.theory.sel(n=3)))  # no closed form for n = 3
            p, N, z = float(cell.p_antipodal.sel(n=2)), int(cell.n_traj.sel(n=2)), float(cell.z.sel(n=2))
            if expected == 0:  # beta = 0.5 < beta_c(4): degenerate binomial, z left out
                assert np.isnan(z)
            else:
                assert z == pytest.approx((p - expected) / np.sqrt(expected * (1 - expected) / N))


def test_checkpoint_selection(cube):
    ds, counts, _ = cube
    early = antipodal.antipodal_table(ds, t=1.2)  # nearest checkpoint: t = 1, all unresolved
    assert early.attrs["t"] == 1.0 and int(early.n_antipodal.sum()) == 0
    assert int(early.n_unresolved.sum()) == int(early.n_traj.sum())


def test_lazy_dask_cube_gives_same_table(cube):
    ds = cube[0].chunk({"beta": 1, "traj": 16})
    assert ds.cluster_class.chunks is not None
    xr.testing.assert_identical(antipodal.antipodal_table(ds), antipodal.antipodal_table(cube[0].load()))


def test_no_theory_for_causal_or_other_qk(cube):
    ds = cube[0]
    causal = ds.assign_attrs(tokensweep_spec=spec_json("stochastic_transformer", "causal_sa",
                                                       {k: ds[k].values for k in ("beta", "d", "n")}, 40))
    assert antipodal.antipodal_table(causal).theory.isnull().all()


def test_hybrid_uses_sigma_coordinate():
    coords = {"beta": [1.0], "d": [3], "n": [2], "sigma": [0.5, np.sqrt(1.4), 2.0]}
    counts = np.zeros((1, 1, 1, 3, 2), int)
    counts[..., 0] = [0, 27, 40]
    ds = make_cube(counts, coords, model="hybrid", attention="sa")
    table = antipodal.antipodal_table(ds)
    np.testing.assert_allclose(table.theory.squeeze().values,
                               [0.0, theory.hybrid_antipodal_probability(1.0, np.sqrt(1.4), "sa", 3), 1.0])
    assert antipodal.agrees(table).squeeze().values.tolist() == [True, True, True]


def test_agrees_and_chi_square():
    coords = {"beta": [1.0, 2.0], "d": [4], "n": [2]}
    th = theory.antipodal_probability(np.array([1.0, 2.0]), 4)  # 0.120, 0.281
    counts = np.zeros((2, 1, 1, 2), int)
    counts[:, 0, 0, 0] = [5, 60]  # of 200: 0.025 (far below 0.120) and 0.30 (close to 0.281)
    counts[:, 0, 0, 1] = [195, 140]
    table = antipodal.antipodal_table(make_cube(counts, coords, n_traj=200))
    assert antipodal.agrees(table).squeeze().values.tolist() == [False, True]
    z = (np.array([0.025, 0.30]) - th) / np.sqrt(th * (1 - th) / 200)
    summary = tstats.chi_square_summary(table)
    assert summary["dof"] == 2 and summary["chi2"] == pytest.approx(np.sum(z**2))
    assert summary["p_value"] == pytest.approx(stats.chi2.sf(np.sum(z**2), 2))


def test_pending_partitions_are_not_counted(cube):
    # store layout: status over (grid..., block), block b = trajectories [b P, (b + 1) P)
    ds, counts, n_bad = cube
    status = np.ones((3, 2, 2, 4), np.int8)  # 40 trajectories, P = 10 -> 4 blocks
    status[0, 0, 0, 1] = 0  # pending
    status[1, 1, 1, 3] = 2  # failed
    ds = ds.assign(status=(("beta", "d", "n", "block"), status,
                           {"flag_values": [0, 1, 2], "flag_meanings": "pending done failed"}))
    ds.attrs["tokensweep_spec"] = json.dumps({**json.loads(ds.attrs["tokensweep_spec"]), "partition_traj": 10})
    table = antipodal.antipodal_table(ds.chunk({"traj": 10}))
    classes = ds.cluster_class.isel(t=-1).values
    for idx, block in ((( 0, 0, 0), 1), ((1, 1, 1), 3)):
        cell = table.isel(beta=idx[0], d=idx[1], n=idx[2])
        kept = np.ones(40, bool)
        kept[block * 10:(block + 1) * 10] = False
        kept &= ~ds.nonfinite.values[idx]
        assert int(cell.n_pending) == 10 and int(cell.n_traj) == kept.sum()
        assert int(cell.n_antipodal) == int((classes[idx][kept] == 2).sum())
    assert int(table.n_pending.sum()) == 20


def test_any_antipodal_counts_and_persistence():
    """Per checkpoint: trajectories with overlap_min <= -1 + eps, and those that keep a pair to T.

    traj 0: pair from t = 1 on (persists from every t); traj 1: pair only at t = 1 (comes apart);
    traj 2: never; traj 3: pair at every t but non-finite, so never counted.
    """
    om = np.array([[-1.0, -1.0, -0.9995], [-1.0, 0.2, 0.3], [0.1, 0.5, 0.9], [-1.0, -1.0, -1.0]]).T
    ds = xr.Dataset({"overlap_min": (("n", "t", "traj"), om[None]),
                     "nonfinite": (("n", "traj"), [[False, False, False, True]])},
                    coords={"n": [4], "t": [1.0, 2.0, 3.0]}, attrs={"eps": 1e-3})
    table = antipodal.any_antipodal_table(ds).sel(n=4)
    assert table.n_traj.values.tolist() == [3, 3, 3]
    assert table.n_any.values.tolist() == [2, 1, 1]
    assert table.n_persist.values.tolist() == [1, 1, 1]
    np.testing.assert_allclose(table.p_any, [2 / 3, 1 / 3, 1 / 3])
    lo, hi = tstats.wilson_interval(2, 3)
    assert (float(table.lo[0]), float(table.hi[0])) == pytest.approx((float(lo), float(hi)))
    assert antipodal.any_antipodal_table(ds, eps=1e-4).n_any.values.tolist() == [[2, 1, 0]]
