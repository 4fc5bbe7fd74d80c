"""`tokensweep run` as a user runs it: a real Prefect server, a real two-process Dask
cluster, a real zarr store, then xarray and the report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from conftest import flow_runs_of_store, wait_for_task_runs

from tokensweep.pipeline.store.layout import DONE

TOKENSWEEP = str(Path(sys.executable).parent / "tokensweep")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # real servers and clusters: `pytest -m slow`


def tokensweep(*args, env_extra=None, cwd=None):
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([TOKENSWEEP, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=540)


# the tiny spec's partitions: beta in {0.5, 2} x d in {3, 4} x n = 2, 12 trajectories by 5
PARTITION_LABELS = {f"beta={beta:g} d={d} n=2 traj={traj}" for beta in (0.5, 2.0) for d in (3, 4)
                    for traj in ("0:5", "5:10", "10:12")}
# closed-form P(antipodal) of the tiny cells (d, beta): design/models.md quotes (3, 2) and (4, 2);
# at d = 4, beta = 0.5 < beta_c(4) = 0.658 it is 0; at d = 3, beta = 0.5 > beta_c(3) = 0 it is in
# (0, P(3, 2)) (increasing in beta)
QUOTED_THEORY = {(3, 2.0): 0.364, (4, 2.0): 0.281, (4, 0.5): 0.0}


def markdown_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the first markdown table in `text`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| ")), None)
    assert start is not None, f"no markdown table in the report:\n{text}"
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert set("".join(table[1])) <= set("-"), f"no separator row under the header: {table[:2]}"
    return table[0], table[2:]


def check_report(text: str, ds: xr.Dataset) -> None:
    """report.md of the tiny sweep: one row per grid cell with its counts, the closed form and
    the chi-square line, all consistent with the cube."""
    header, rows = markdown_rows(text)
    assert header[:3] == ["d", "n", "beta"], header
    col = {name: header.index(name) for name in ("N", "p_antipodal", "theory", "z")}
    assert len(rows) == 4 and all(len(r) == len(header) for r in rows), rows
    cells = [(int(r[0]), int(r[1]), float(r[2])) for r in rows]
    assert cells == [(3, 2, 0.5), (3, 2, 2.0), (4, 2, 0.5), (4, 2, 2.0)]  # d, then beta
    theory = {}
    for (d, n, beta), r in zip(cells, rows):
        cell = ds.sel(d=d, n=n, beta=beta)
        finite = ~cell.nonfinite.values
        N = int(finite.sum())
        antipodal = int(((cell.cluster_class.isel(t=-1).values == 2) & finite).sum())  # 2: antipodal
        assert int(r[col["N"]]) == N and N > 0, (r, N)
        assert float(r[col["p_antipodal"]]) == pytest.approx(antipodal / N, abs=5e-5), r
        theory[d, beta] = float(r[col["theory"]])  # a number, not a blank "—"
    for key, expected in QUOTED_THEORY.items():
        assert theory[key] == pytest.approx(expected, abs=6e-4), (key, theory)
    assert 0 < theory[3, 0.5] < theory[3, 2.0]
    # z is defined where the theory is strictly between 0 and 1: three cells
    with_z = [r for r in rows if r[col["z"]] != "—"]
    assert len(with_z) == 3 and all(np.isfinite(float(r[col["z"]])) for r in with_z), rows
    chi = re.search(r"sum z\^2 = (\d+\.\d\d) over (\d+) cells \(dof = (\d+)\), p-value = (\d\.\d{3})", text)
    assert chi, text
    assert int(chi[2]) == int(chi[3]) == 3
    z = np.array([float(r[col["z"]]) for r in with_z])  # printed to 2 decimals
    assert float(chi[1]) == pytest.approx(np.sum(z**2), abs=0.01 * np.sum(np.abs(z)) + 0.01)
    assert 0 <= float(chi[4]) <= 1
    assert "![phase](phase.png)" in text


def partitions_completed(task_runs: list[dict]) -> bool:
    return {r["name"] for r in task_runs if r["name"].startswith("beta=") and r["state_type"] == "COMPLETED"} \
        == PARTITION_LABELS


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
    assert "data:image/png;base64," in (report / "report.html").read_text()  # the flow's report task too
    check_report((report / "report.md").read_text(), ds.load())

    # this test's flow run, told from the session's other "tiny" runs by its store parameter
    runs = flow_runs_of_store(prefect_server, store)
    assert len(runs) == 1, runs
    run = runs[0]
    assert run["name"] == f"tiny @ {store}" and run["state_type"] == "COMPLETED", run
    tasks = wait_for_task_runs(prefect_server, run["id"], partitions_completed)
    partitions = [r for r in tasks if r["name"].startswith("beta=")]
    assert sorted(r["name"] for r in partitions) == sorted(PARTITION_LABELS), [r["name"] for r in tasks]
    assert all(r["state_type"] == "COMPLETED" for r in partitions), [(r["name"], r["state_type"]) for r in partitions]
    reports = [r for r in tasks if r["name"].startswith("report")]
    assert len(reports) == 1 and reports[0]["state_type"] == "COMPLETED", [(r["name"], r["state_type"]) for r in tasks]

    before = ds.load()
    again = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "computed 0 of 12 partitions" in again.stdout
    runs = flow_runs_of_store(prefect_server, store)
    assert len(runs) == 2 and runs[0]["id"] == run["id"], runs
    resumed = runs[1]
    assert resumed["state_type"] == "COMPLETED", resumed
    tasks = wait_for_task_runs(prefect_server, resumed["id"],
                               lambda ts: any(r["name"].startswith("report") and r["state_type"] == "COMPLETED"
                                              for r in ts))
    assert [r["name"] for r in tasks if r["name"].startswith("beta=")] == []  # nothing recomputed
    assert [r["state_type"] for r in tasks if r["name"].startswith("report")] == ["COMPLETED"], tasks
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

    fixed = tokensweep("run", str(spec), "--store", str(store), "--workers", "2", "--no-progress",
                       "--no-report")
    assert fixed.returncode == 0, fixed.stderr
    assert "computed 1 of 12 partitions" in fixed.stdout
    # --no-report: the cube only (test_run_resume_and_report checks the report a run writes)
    assert "report:" not in fixed.stdout and not store.with_suffix(".report").exists(), fixed.stdout
