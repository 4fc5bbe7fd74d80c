"""Tables computed once per report (pipeline/analysis/once.py): same Dataset and arguments inside
`tables_once` -> one computation, each caller its own copy; outside it, every call computes."""

import numpy as np
import xarray as xr

from tokensweep.pipeline.analysis.antipodal import antipodal_table
from tokensweep.pipeline.analysis.once import once, tables_once

calls = []


@once
def column_sums(ds: xr.Dataset, scale: float = 1.0) -> xr.Dataset:
    calls.append(scale)
    return (ds * scale).sum("traj")


def cube(seed=0):
    rng = np.random.default_rng(seed)
    return xr.Dataset({"x": (("beta", "traj"), rng.normal(size=(3, 5)))}, coords={"beta": [0.5, 1.0, 2.0]})


def test_one_computation_per_dataset_and_arguments_inside_the_block():
    ds, other = cube(0), cube(1)
    calls.clear()
    with tables_once():
        first = column_sums(ds)
        first["x"][:] = -1.0  # a caller changing its table in place
        first["extra"] = first.x  # or adding a column
        again = column_sums(ds, scale=1.0)  # the default spelled out: the same call
        scaled = column_sums(ds, 2.0)
        column_sums(other)
    assert calls == [1.0, 2.0, 1.0]
    np.testing.assert_array_equal(again.x.values, ds.x.sum("traj").values)
    assert "extra" not in again
    np.testing.assert_allclose(scaled.x.values, 2 * ds.x.sum("traj").values)


def test_every_call_computes_outside_the_block():
    ds = cube()
    calls.clear()
    column_sums(ds)
    column_sums(ds)
    with tables_once():
        column_sums(ds)
    column_sums(ds)
    assert calls == [1.0] * 4


def test_antipodal_table_is_the_same_inside_and_outside():
    rng = np.random.default_rng(3)
    classes = rng.integers(0, 3, size=(2, 40)).astype("int8")
    ds = xr.Dataset({"cluster_class": (("beta", "traj"), classes)}, coords={"beta": [0.5, 1.0]})
    outside = antipodal_table(ds, theory=lambda cells: np.full(cells["beta"].shape, 0.3))
    with tables_once():
        inside = [antipodal_table(ds, level=0.95) for _ in range(2)]
    np.testing.assert_array_equal(inside[1].n_antipodal.values, (classes == 2).sum(1))
    for table in inside:
        np.testing.assert_array_equal(table.p_antipodal.values, outside.p_antipodal.values)
        np.testing.assert_array_equal(table.lo.values, outside.lo.values)
