"""The claims of the real-network catalog entries (pipeline/report/claims_network.py), each judged on a
tiny cube whose answer is known by construction: histograms whose pairs move to cosine >= 0.9 or stay,
E(t) falling to 0 or stopping short (or rising on one prompt), heads with a real leading eigenvalue
in most or in half of the heads; and the registry routes the entries (and their paper scale) to them."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.claims import FAILS, HOLDS
from tokensweep.pipeline.report.claims_network import (
    concentrates_at_one,
    energy_falls,
    energy_to_zero,
    lead_real_for_most,
)
from tokensweep.pipeline.report.claims_table import check_claims
from tokensweep.pipeline.spec.load import parse_sweep

pytest.importorskip("transformers", reason="real networks need transformers (the integration extra)")


def sweep(name="t", passes=3):
    """A tiny GPT-2 (2 layers): t = 1 .. 2 passes, a pass ending at every even t."""
    return parse_sweep({"name": name, "model": "network", "architecture": "gpt2", "size": "tiny",
                        "passes": passes, "grid": {"n": 6}, "trajectories": 3, "seed": 1})


def report(ds, name="t", passes=3):
    return ReportInput(ds, sweep(name, passes), None)


def cube(**variables):
    dims = {"overlap_hist": ("n", "traj", "t", "bin"), "energy": ("n", "traj", "t"),
            "value_lead_re": ("n", "traj", "head"), "value_lead_im": ("n", "traj", "head")}
    ds = xr.Dataset({k: (dims[k], np.asarray(v)[None]) for k, v in variables.items()}, coords={"n": [6]})
    ds["status"] = xr.DataArray([[1]], dims=("n", "block"),  # one partition, done (as a stored cube has)
                                attrs={"flag_values": [0, 1, 2], "flag_meanings": "pending done failed"})
    return ds.assign_coords(t=np.arange(1.0, ds.sizes["t"] + 1)) if "t" in ds.dims else ds


def test_histogram_concentrating_at_one_holds_and_one_that_stays_fails():
    hist = np.zeros((3, 4, 20), dtype=np.int32)
    hist[:, :, 12] = 15  # 15 pairs at cosine ~0.25 on every prompt, every layer
    hist[:, -1, 12], hist[:, -1, 19] = 5, 10  # ... until the last layer moves 10 of them above 0.9
    claim = concentrates_at_one(report(cube(overlap_hist=hist)))
    assert claim.verdict == HOLDS and claim.measured.startswith("3 of 3") and "0.667" in claim.measured
    hist[1, -1, 12], hist[1, -1, 19] = 15, 0  # prompt 1 stays where it was
    claim = concentrates_at_one(report(cube(overlap_hist=hist)))
    assert claim.verdict == FAILS and claim.measured.startswith("2 of 3") and "0.000" in claim.measured


def test_energy_falling_to_zero_holds_and_a_finite_stop_or_a_rise_fails():
    e = np.array([0.9, 0.7, 0.5, 0.2, 0.1, 0.01]) * np.ones((3, 1))
    assert energy_falls(report(cube(energy=e))).verdict == HOLDS
    assert energy_to_zero(report(cube(energy=e))).verdict == HOLDS
    short = e + 0.19  # ends at E = 0.2: it falls, but not to 0
    assert energy_falls(report(cube(energy=short))).verdict == HOLDS
    claim = energy_to_zero(report(cube(energy=short)))
    assert claim.verdict == FAILS and claim.measured == "0 of 3 trajectories; worst E(T) 0.200"
    rise = e.copy()
    rise[2] = [0.9, 0.3, 0.2, 0.3, 0.25, 0.25]  # pass ends t = 2, 6: 0.3 -> 0.25 falls; t = 4 is not judged
    assert energy_falls(report(cube(energy=rise))).verdict == HOLDS
    rise[2, -1] = 0.35  # now above the first pass end's 0.3
    claim = energy_falls(report(cube(energy=rise)))
    assert claim.verdict == FAILS and claim.measured.startswith("2 of 3") and "+0.05" in claim.measured
    assert energy_falls(report(cube(energy=e[:, :2]), passes=1)).verdict.startswith("not checked")


def test_leading_eigenvalue_real_for_most_heads_holds_at_three_of_four_and_fails_at_half():
    re = np.array([[1.0, -2.0, 0.5, 0.3]] * 2)
    im = np.array([[0.0, 0.0, 0.0, 0.4]] * 2)
    claim = lead_real_for_most(report(cube(value_lead_re=re, value_lead_im=im)))
    assert claim.verdict == HOLDS and claim.measured == "3 of 4 heads real"
    im[:, 2] = 1e-3  # 0.5 + 0.001i: complex
    claim = lead_real_for_most(report(cube(value_lead_re=re, value_lead_im=im)))
    assert claim.verdict == FAILS and claim.measured == "2 of 4 heads real"


def test_the_registry_gives_the_network_entries_their_claims():
    e = np.array([0.9, 0.7, 0.5, 0.2, 0.1, 0.01]) * np.ones((3, 1))
    for name in ("rst-passes-gpt2", "rst-random-minilm-paper"):
        claims = check_claims(report(cube(energy=e), name=name))
        assert [c.verdict for c in claims] == [HOLDS, HOLDS], claims
        assert claims[1].claim.startswith("E(t) = 1 - mean_i cos(y_1, y_i) → 0")
