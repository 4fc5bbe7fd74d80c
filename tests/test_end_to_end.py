"""`tokensweep run` as a user runs it: a real Prefect server, a real two-process Dask
cluster, a real zarr store, then xarray and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from conftest import api

from tokensweep.pipeline.store import DONE

TOKENSWEEP = str(Path(sys.executable).parent / "tokensweep")
pytestmark = pytest.mark.timeout(600)


def tokensweep(*args, env_extra=None, cwd=None):
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([TOKENSWEEP, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=540)


def flow_runs(api_url: str) -> list[dict]:
    return api(api_url, "/flow_runs/filter", {})


def test_run_resume_and_report(prefect_server, tiny_spec, write_spec, tmp_path):
    store = tmp_path / "e2e.zarr"
    spec = write_spec(tiny_spec)

    first = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "computed 12 of 12 partitions" in first.stdout

    ds = xr.open_zarr(store)  # the user's one line
    assert dict(ds.sizes) == {"beta": 2, "d": 2, "n": 1, "t": 4, "traj": 12, "block": 3}
    assert (ds.status.values == DONE).all()
    final = ds.cluster_class.isel(t=-1).values
    assert set(np.unique(final)) <= {0, 1, 2}
    rho = ds.overlap_min.isel(t=-1).values
    assert np.all(np.abs(rho) <= 1 + 1e-12)
    assert json.loads(ds.attrs["tokensweep_spec"])["name"] == "tiny"

    report = store.with_suffix(".report")
    assert (report / "phase.png").stat().st_size > 10_000
    assert "| d " in (report / "report.md").read_text() or "d" in (report / "report.md").read_text()

    runs = [r for r in flow_runs(prefect_server) if r["name"] == "tiny"]
    assert runs and runs[0]["state_type"] == "COMPLETED"

    before = ds.load()
    again = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "computed 0 of 12 partitions" in again.stdout
    xr.testing.assert_identical(before.drop_vars(["started", "finished"]),
                                xr.open_zarr(store).load().drop_vars(["started", "finished"]))

    status = tokensweep("status", str(store))
    assert status.returncode == 0 and "12 done, 0 pending, 0 failed" in status.stdout


def test_failed_partition_then_rerun_computes_only_it(prefect_server, tiny_spec, write_spec, tmp_path):
    store = tmp_path / "faulty.zarr"
    spec = write_spec(tiny_spec)
    broken = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress",
                        env_extra={"TOKENSWEEP_FAIL_PARTITIONS": "7"})
    assert broken.returncode == 1
    assert "1 partition(s) failed" in broken.stderr
    status = tokensweep("status", str(store))
    assert "11 done, 0 pending, 1 failed" in status.stdout
    assert "partition 7 (beta=2 d=3 n=2 traj=5:10)" in status.stdout

    fixed = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress")
    assert fixed.returncode == 0, fixed.stderr
    assert "computed 1 of 12 partitions" in fixed.stdout
