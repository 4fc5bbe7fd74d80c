"""The Python API (`import tokensweep`): light to import, catalog and specs, `tokensweep.run` from a
plain script without a main guard and from a notebook, errors raised as exceptions before anything
runs, growth through the API. Real Prefect server, real Dask cluster, real kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SLOW, TINY

import tokensweep
from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.layout import DONE

# stores grown through real flows, subprocesses: `pytest -m slow`; refusals (nothing runs) are quick
slow = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "example.ipynb"
SMALL = {**TINY, "name": "small", "grid": {"beta": [0.5, 2.0], "d": 3, "n": 2}, "trajectories": 10}


@slow
def test_import_is_light_and_registers_the_accessor():
    code = ("import sys, tokensweep, xarray as xr; "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numba', 'prefect', 'distributed', 'scipy', 'typer'}); "
            "print(heavy, hasattr(xr.Dataset(), 'tokensweep'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"]
    # a spec read through every model's plug-in (what each command does first) imports none of
    # scipy's heavy parts: ~0.9 s of `tokensweep status` once went to scipy.stats and integrate
    code = ("import sys, tokensweep; tokensweep.load_spec('quickstart'); "
            "print(sorted(set(sys.modules) & {'scipy.stats', 'scipy.integrate', 'scipy.optimize', "
            "'matplotlib', 'numba'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"], out.stdout


def test_catalog_and_load_spec():
    entries = {e.name: e for e in tokensweep.catalog()}
    assert entries["quickstart"].model == "stochastic_transformer"
    assert "antipodal" in entries["quickstart"].description
    assert tokensweep.load_spec("quickstart").name == "quickstart"
    assert tokensweep.load_spec(entries["quickstart"].path) == tokensweep.load_spec("quickstart")
    assert tokensweep.load_spec(SMALL).trajectories == 10
    with pytest.raises(tokensweep.SpecError, match="trajectories"):
        tokensweep.load_spec({**SMALL, "trajectories": 0})


def test_run_refuses_bad_input_before_anything_runs(tmp_path):
    store = tmp_path / "s.zarr"
    with pytest.raises(tokensweep.SpecError, match="grid.d"):
        tokensweep.run({**SMALL, "grid": {**SMALL["grid"], "d": 1}}, store=store)
    with pytest.raises(tokensweep.SpecError, match="not found"):
        tokensweep.run("no-such-spec", store=store)
    assert not store.exists()


def test_run_refuses_a_store_over_the_size_limit_before_anything_runs(tmp_path, monkeypatch):
    """The store-size limit holds for a dict and a parsed spec too (`pipeline.prepare`), not only
    for a YAML file: refused with the size and the setting that allows it, nothing written."""
    monkeypatch.setenv("TOKENSWEEP_MAX_STORE_GIB", "1e-6")  # ~1 KiB
    store = tmp_path / "big.zarr"
    for spec in (SMALL, tokensweep.load_spec(SMALL)):
        with pytest.raises(tokensweep.SpecError, match=r"store would need [\d.]+ KiB") as err:
            tokensweep.run(spec, store=store, progress=False)
        assert "TOKENSWEEP_MAX_STORE_GIB=" in str(err.value)
        assert not store.exists() and not list(tmp_path.iterdir())


SCRIPT = """
import tokensweep


spec = {spec!r}
ds = tokensweep.run(spec, store={store!r}, workers=1, progress=True)
p = ds.tokensweep.probability("antipodal")
print("RESULT", ds.attrs["pending"], p.N.values.tolist())
"""


@slow
def test_run_from_a_plain_script_without_a_main_guard(prefect_server, tmp_path):
    store = tmp_path / "script.zarr"
    script = tmp_path / "sweep_script.py"  # no `if __name__ == "__main__":` anywhere
    script.write_text(SCRIPT.format(spec=SMALL, store=str(store)))
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    assert "Nanny failed to start" not in out.stderr
    assert "RESULT 0 [10, 10]" in out.stdout  # every trajectory of both cells, nothing pending
    assert "small: 4/4 partitions done" in out.stderr  # the progress, read from the store
    assert "computed 4 of 4 partitions" in out.stdout
    assert (read_status(store) == DONE).all()


@slow
def test_run_grows_a_store_computing_only_the_new_partitions(prefect_server, tmp_path, capsys):
    store = tmp_path / "grown.zarr"
    ds = tokensweep.run(SMALL, store=store, workers=1, report=False)
    assert ds.attrs["pending"] == 0 and ds.sizes["traj"] == 10
    before = ds.cluster_class.load()
    grown = tokensweep.run({**SMALL, "trajectories": 20, "grid": {**SMALL["grid"], "beta": [0.5, 1.0, 2.0]}},
                           store=store, workers=1, report=False)
    assert not store.with_suffix(".report").exists()  # report=False: the cube only
    out = capsys.readouterr().out
    assert "computed 8 of 12 partitions" in out  # 3 cells x 4 blocks, 2 x 2 of them already there
    assert grown.attrs["pending"] == 0 and grown.sizes == {**grown.sizes, "traj": 20, "beta": 3}
    np.testing.assert_array_equal(grown.cluster_class.sel(beta=before.beta, traj=before.traj).values,
                                  before.values)
    with pytest.raises(tokensweep.StoreError, match="seed: 11 -> 12"):
        tokensweep.run({**SMALL, "trajectories": 20, "grid": {**SMALL["grid"], "beta": [0.5, 1.0, 2.0]},
                        "seed": 12}, store=store)


@slow
def test_the_example_notebook_executes(prefect_server, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the notebook's test needs the integration extra")
    NotebookClient = pytest.importorskip(
        "nbclient", reason="the notebook's test needs the integration extra").NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = json.dumps([o.get("data", {}).get("text/plain", o.get("text", "")) for o in outputs])
    assert "pending trajectories: 0" in text
    assert "partitions done" in text  # the progress display
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot
    assert (read_status(tmp_path / "results" / "example.zarr") == DONE).all()


def _family(pid: int) -> set[int]:
    """`pid` and its descendants, from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    family, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in family} - family
        family |= more
        grown = bool(more)
    return family


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


PARENT_WITH_THREADS = """
import os, subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "TOKENSWEEP_PARENT_PID": str(os.getpid())})
for stream in (child.stdout, child.stderr):  # as tokensweep.run reads its child's output
    threading.Thread(target=stream.read, daemon=True).start()
for _ in range(8):  # more threads, more hand-overs of the child as they end
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
time.sleep(600)
"""
COUNTING_CHILD = """
import sys, time
from pathlib import Path
from tokensweep.flows.child import die_with_parent
assert die_with_parent()
interrupts, out = 0, Path(sys.argv[1])
out.with_suffix(".ready").touch()
end = time.monotonic() + 60
while time.monotonic() < end and not (interrupts and time.monotonic() > first + 1):
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        interrupts, first = interrupts + 1, time.monotonic()
out.write_text(str(interrupts))
"""


@slow
@pytest.mark.parametrize("attempt", range(3))
def test_the_callers_end_interrupts_the_sweeps_process_once(tmp_path, attempt):
    """Linux signals a child again each time it is handed to the next thread of its dying
    parent; the sweep's process takes one interrupt, so its cleanup is not cut short. (With
    SIGTERM taken each time, 3 in 4 such ends gave two interrupts: three attempts.)"""
    import time

    out = tmp_path / "interrupts.txt"
    child_code = COUNTING_CHILD.replace("sys.argv[1]", repr(str(out)))
    parent = subprocess.Popen([sys.executable, "-c", PARENT_WITH_THREADS, child_code])
    deadline = time.monotonic() + 60
    while not out.with_suffix(".ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    parent.kill()
    parent.wait()
    while not out.exists() and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    assert out.read_text() == "1"


# one partition: it runs in a thread of the sweep's process (flows/in_process.py), for minutes
ONE_LONG_PARTITION = {**SLOW, "name": "long", "grid": {"beta": 0.5, "d": 3, "n": 2},
                      "time": {**SLOW["time"], "layers": 100_000_000}, "trajectories": 12,
                      "partition_traj": 12}


@slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("spec, processes", [(SLOW, 3), (ONE_LONG_PARTITION, 1)],
                         ids=["cluster", "in_process"])
def test_the_sweeps_process_ends_with_its_caller_and_releases_the_lock(
        prefect_server, tmp_path, spec, processes):
    """A caller killed outright (a timeout's SIGKILL) takes the sweep's process with it: it
    stops computing, closes its local cluster (the sweep's process, its forkserver, the worker's
    nanny ...) and releases the store's lock."""
    import signal
    import time

    store = tmp_path / "killed.zarr"
    lock = store.with_name(store.name + ".lock")
    script = tmp_path / "caller.py"
    script.write_text(f"import tokensweep\ntokensweep.run({spec!r}, store={str(store)!r}, workers=1, "
                      "progress=False)\n")
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "NUMBA_NUM_THREADS": "1"}
    caller = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and caller.poll() is None:
            if lock.exists() and (store / "zarr.json").exists():
                child = json.loads(lock.read_text())["pid"]
                family = _family(child)
                if len(family) >= processes:
                    break
            time.sleep(0.2)
        assert caller.poll() is None and len(family) >= processes, "the sweep did not start"
        time.sleep(1.0)
        family = _family(child)
        caller.kill()
        caller.wait()
        killed = time.monotonic()
        while time.monotonic() < killed + 20 and ({p for p in family if _alive(p)} or lock.exists()):
            time.sleep(0.1)
        left = {p for p in family if _alive(p)}
        assert not left, f"still running {time.monotonic() - killed:.0f} s after the caller died: {left}"
        assert not lock.exists()
        print(f"the sweep's {len(family)} processes ended {time.monotonic() - killed:.1f} s after "
              "the caller")
    finally:
        for pid in family:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

