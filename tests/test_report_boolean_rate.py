"""The Boolean-rate section of a real small cube (the catalog entry glpre-boolean-d1): the fit of
log(-log D) against t per cell, against the rate and the bounds `analysis.boolean_rate` derives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_report_overlaps import cube_and_report, entry, section, table_rows

from tokensweep.pipeline.analysis.boolean_rate import rate_table, single_exponential_r2, slope_bound
from tokensweep.pipeline.analysis.stats import closed_form
from tokensweep.pipeline.store.cube import open_cube

HEADING = "## Boolean attention: the doubly exponential rate ([GLPR-E] Thm 2.1)"


def test_catalog_entry_measures_the_doubly_exponential_rate(tmp_path):
    # the entry's small scale with two betas: beta sets the intercept (it rescales the start), not
    # the slope; the d = 2 cell has no theorem and no row
    spec = entry("glpre-boolean-d1", grid={"beta": [0.5, 1.0], "d": [1, 2], "n": 20}, trajectories=16)
    sweep, store, paths = cube_and_report(spec, tmp_path)
    assert Path(paths["boolean_rate"]).stat().st_size > 1000
    with open_cube(store) as ds:
        rate = closed_form(ds, "boolean_rate")
        table = rate_table(ds, rate)
    assert rate({"beta": 1.0, "d": 2, "n": 20}) is None
    assert table.sizes["cell"] == 2 and (table.d == 1).all()
    for k in range(2):
        c = table.isel(cell=k)
        assert float(c.predicted) == rate({"beta": float(c.beta), "d": 1, "n": 20})
        assert abs(float(c.predicted) - 1.0) < 1e-6  # V = 1, RK4 at h = 0.05: V + h^4 / 120
        lo, hi = slope_bound(float(c.predicted))
        assert int(c.n_locked) >= int(c.n_traj) // 2  # most starts lock by t = 5 (not derived)
        # every locked slope lies in the derived range, so their mean and its interval do too
        assert lo * (1 - 1e-3) <= float(c.lo) <= float(c.slope) <= float(c.hi) <= hi
        assert float(c.r2) >= float(c.r2_bound)
        assert abs(float(c.r2_single) - float(c.r2_single_expected)) < 1e-3
        window = np.arange(32, 65) * 0.25  # [T/2, T] = [8, 16], a checkpoint every 0.25
        assert float(c.r2_single_expected) == single_exponential_r2(float(c.predicted), window)
    rows = table_rows(section(paths, HEADING))
    assert [r[:3] for r in rows] == [["0.5", "1", "20"], ["1", "1", "20"]]
    assert all(r[6] == "1.0000" for r in rows)  # predicted
