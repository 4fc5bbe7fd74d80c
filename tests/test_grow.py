"""Cubes that grow: a spec that only adds (trajectories, grid values, a description) is accepted on
an existing store, computes only the new partitions, and equals a fresh run of the final spec bit
for bit; anything that would change stored numbers is refused naming the fields; a grow that is
interrupted leaves the old or the new cube whole; two runs started at once on one new store: one
wins, the other is refused by the lock. Real stores, real kernels."""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from conftest import TINY, output_cube, reference_cube

from tokensweep.pipeline.errors import StoreError
from tokensweep.pipeline.execute import pending_partitions, run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store import grow
from tokensweep.pipeline.store.cube import read_partition_table, read_status, stored_sweep
from tokensweep.pipeline.store.layout import DONE
from tokensweep.pipeline.store.lifecycle import prepare_store

pytestmark = pytest.mark.slow  # grows real stores, kills real processes: `pytest -m slow`

GROWN = {
    "trajectories 12 -> 24": {"trajectories": 24},
    "beta in the middle": {"grid": {**TINY["grid"], "beta": [0.5, 1.0, 2.0]}},
    "description only": {"description": "the same cube, described again"},
}


def _spec(**changes) -> dict:
    return {**copy.deepcopy(TINY), **changes}


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + f.read_bytes() + str(f.stat().st_mtime_ns).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def finished_tiny(tmp_path_factory) -> Path:
    """TINY computed once by the real pipeline; tests grow copies of it."""
    path = tmp_path_factory.mktemp("grow") / "tiny.zarr"
    reference_cube(TINY, path)
    return path


@pytest.fixture
def old_store(finished_tiny, tmp_path) -> Path:
    path = tmp_path / "cube.zarr"
    shutil.copytree(finished_tiny, path)
    return path


def run_pending(spec: dict, store: Path) -> int:
    sweep = parse_sweep(spec)
    todo = pending_partitions(sweep, store)
    for index in todo:
        run_partition(sweep, store, index)
    return len(todo)


def new_partitions(old: dict, new: dict) -> int:
    """Partitions of `new` that are not a partition of `old` (cell and trajectory range)."""
    def keys(spec):
        plan = Plan(parse_sweep(spec))
        return {(tuple(plan.coords(p).values()), p.traj_start, p.traj_stop) for p in plan}
    return len(keys(new) - keys(old))


@pytest.mark.parametrize("case", sorted(GROWN))
def test_a_spec_that_only_adds_computes_only_new_partitions_and_equals_a_fresh_run(
        case, old_store, finished_tiny, tmp_path):
    final = _spec(**GROWN[case])
    old_started = xr.open_zarr(old_store).started.load()
    assert prepare_store(parse_sweep(final), old_store) == "grown"

    assert stored_sweep(old_store) == parse_sweep(final)  # the stored spec is the final one
    with xr.open_zarr(old_store) as ds:
        assert "grown" in ds.attrs["history"]
        at_old = dict(beta=old_started.beta, block=old_started.block)
        copied = (ds.status.sel(at_old) == DONE).load()
        # copied partitions keep their timing: they were not computed again
        xr.testing.assert_equal(ds.started.sel(at_old).where(copied).load(), old_started.where(copied))
    n_new = new_partitions(TINY, final)
    assert int(copied.sum()) == len(Plan(parse_sweep(final))) - n_new
    assert run_pending(final, old_store) == n_new
    assert (read_status(old_store) == DONE).all()

    grown = output_cube(old_store)
    fresh = reference_cube(final, tmp_path / "fresh.zarr")
    xr.testing.assert_identical(grown, fresh)
    old = output_cube(finished_tiny)
    xr.testing.assert_identical(grown.sel(beta=old.beta, d=old.d, n=old.n, traj=old.traj), old)
    assert not grow.interrupted(old_store)


@pytest.mark.parametrize("change, field", [
    ({"seed": 12}, "seed: 11 -> 12"),
    ({"time": {**TINY["time"], "T": 3.0}}, "time: "),
    ({"model": "hybrid", "grid": {**TINY["grid"], "sigma": 0.5}}, "model: 'stochastic_transformer' -> 'hybrid'"),
    ({"trajectories": 10}, "trajectories: 12 -> 10"),
    ({"grid": {**TINY["grid"], "beta": [0.5, 1.0]}}, "grid.beta: [0.5, 2.0] -> [0.5, 1.0] (drops [2.0])"),
    ({"partition_traj": 4}, "partition_traj: 5 -> 4"),
    ({"eps": 0.01, "trajectories": 24}, "eps: 0.001 -> 0.01"),
])
def test_a_change_of_stored_numbers_is_refused_naming_the_fields(change, field, old_store):
    before = tree_digest(old_store)
    with pytest.raises(StoreError) as err:
        prepare_store(parse_sweep(_spec(**change)), old_store)
    assert "holds a different spec (" in str(err.value) and field in str(err.value)
    assert "a store only grows" in str(err.value)
    if "trajectories" in change and "eps" in change:
        assert "trajectories" not in str(err.value).split("(")[1]  # only what cannot grow is named
    assert tree_digest(old_store) == before and not grow.interrupted(old_store)


def test_a_grow_that_dies_before_its_commit_leaves_the_old_cube_untouched(old_store, monkeypatch):
    final = parse_sweep(_spec(trajectories=24))
    before = tree_digest(old_store)
    copy_done = grow.copy_done_partitions

    def copy_then_die(*args):
        copy_done(*args)
        raise KeyboardInterrupt("killed while copying")

    monkeypatch.setattr(grow, "copy_done_partitions", copy_then_die)
    with pytest.raises(KeyboardInterrupt):
        prepare_store(final, old_store)
    assert tree_digest(old_store) == before and grow.interrupted(old_store) == ["cube.zarr.grow-new"]
    assert stored_sweep(old_store) == parse_sweep(TINY)
    monkeypatch.undo()
    assert prepare_store(final, old_store) == "grown"  # the partial build is dropped, then redone
    assert not grow.interrupted(old_store)
    assert run_pending(_spec(trajectories=24), old_store) == new_partitions(TINY, _spec(trajectories=24))


def test_a_grow_that_dies_between_the_renames_is_finished_by_the_next_run(old_store, monkeypatch):
    final = parse_sweep(_spec(trajectories=24))

    def first_rename_then_die(path):
        path.rename(grow.sibling(path, grow.OLD))
        raise KeyboardInterrupt("killed in the swap")

    monkeypatch.setattr(grow, "_swap", first_rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        prepare_store(final, old_store)
    assert not old_store.exists()
    assert sorted(grow.interrupted(old_store)) == ["cube.zarr.grow-new", "cube.zarr.grow-old",
                                                   "cube.zarr.grow-ready"]
    with pytest.raises(StoreError, match="interrupted grow left .* run the spec again .* to finish the grow"):
        stored_sweep(old_store)
    monkeypatch.undo()
    assert prepare_store(final, old_store) == "resumed"  # recovered: the store is the grown one
    assert not grow.interrupted(old_store) and stored_sweep(old_store) == final
    assert (read_partition_table(old_store, "status") == DONE).sum() == 8  # 4 cells x 2 whole blocks


KILLED_GROW = """
import sys, time
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import stored_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store

sweep = parse_sweep({spec!r})
stored_sweep({store!r})  # the imports a grow needs, done before the clock starts
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
prepare_store(sweep, {store!r})
print(time.monotonic() - start, flush=True)
"""
KILLED_FINAL = _spec(grid={**TINY["grid"], "beta": [0.5, 1.0, 2.0]}, trajectories=24)


def start_grow(store: Path, folder: Path) -> subprocess.Popen:
    """A process about to grow `store` to KILLED_FINAL; it starts when sent a line."""
    script = folder / "grow.py"
    script.write_text(KILLED_GROW.format(spec=KILLED_FINAL, store=str(store)))
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture(scope="module")
def grow_seconds(finished_tiny, tmp_path_factory) -> float:
    """How long an uninterrupted grow to KILLED_FINAL takes here, now."""
    folder = tmp_path_factory.mktemp("timed")
    shutil.copytree(finished_tiny, folder / "cube.zarr")
    proc = start_grow(folder / "cube.zarr", folder)
    out, _ = proc.communicate("go\n", timeout=120)
    return float(out.strip())


@pytest.mark.parametrize("fraction", [0.3, 0.7, 0.9, 0.97, 1.03, 2.0])
def test_a_grow_killed_at_any_moment_leaves_one_whole_cube(fraction, grow_seconds, old_store,
                                                           finished_tiny, tmp_path):
    before = tree_digest(old_store)
    proc = start_grow(old_store, tmp_path)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    time.sleep(fraction * grow_seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    grow.recover(old_store)  # what the next run does first, under the lock
    assert not grow.interrupted(old_store)
    held = stored_sweep(old_store)
    if held == parse_sweep(TINY):  # killed before the commit
        assert tree_digest(old_store) == before  # not a byte, not a time stamp changed
    else:  # killed after it: the whole grown cube
        assert held == parse_sweep(KILLED_FINAL)
        assert (read_status(old_store) == DONE).sum() == 8  # 4 old cells x 2 whole blocks
        cube, old = output_cube(old_store), output_cube(finished_tiny)
        xr.testing.assert_identical(cube.sel(beta=old.beta, traj=slice(0, 9)), old.sel(traj=slice(0, 9)))
    assert prepare_store(parse_sweep(KILLED_FINAL), old_store) in ("grown", "resumed")
    assert len(pending_partitions(parse_sweep(KILLED_FINAL), old_store)) == \
        new_partitions(TINY, KILLED_FINAL)


def test_two_runs_started_at_once_on_a_new_store_one_wins_the_other_is_refused(
        prefect_server, slow_spec, slow_reference, write_spec, tmp_path):
    store = tmp_path / "new" / "race.zarr"  # its folder does not exist either
    spec = write_spec(slow_spec)
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).parent / "tokensweep"), "run", str(spec), "--store", str(store),
           "--workers", "1", "--no-progress", "--no-report"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    results = [(p.wait(timeout=400), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], "\n".join(out + err[-3000:] for _, out, err in results)
    _, loser_out, loser_err = next(r for r in results if r[0] == 2)
    assert f"{store} is being written by another sweep (pid" in loser_err
    assert "FileExistsError" not in loser_err + loser_out
    xr.testing.assert_identical(output_cube(store), slow_reference)
    assert (read_status(store) == DONE).all()
    assert not Path(str(store) + ".lock").exists()
    assert not np.isnan(read_partition_table(store, "finished")).any()


def test_cli_run_grows_a_store(prefect_server, cli, old_store, write_spec):
    final = _spec(trajectories=24)
    spec = write_spec(final)
    result = cli("run", spec, "--store", old_store, "--workers", "1", "--no-progress", "--no-report")
    assert result.returncode == 0, result.stdout + result.stderr
    # what it says it will do counts the partitions the grow adds (it said 0 before)
    assert f": {new_partitions(TINY, final)} of 20 partitions to run into" in result.stdout
    assert f"computed {new_partitions(TINY, final)} of 20 partitions" in result.stdout
