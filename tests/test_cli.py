"""The command line as a user meets it, through `tokensweep.flows.cli.main(argv)` in this process.

Bad input exits 2 with one line `error: ...` naming the problem and the fix, no traceback, and
touches nothing; `--version`, `catalog`, `plan` and every `--help` (with its defaults) tell
before anything runs; `run` prints what it will do and its results, keeping Prefect's and Dask's
logs in STORE.log; Ctrl-C exits 130 with one line saying how to resume, and resuming works.
Only what needs a process of its own (the console script, its logs on fd 2, Ctrl-C) runs the real
`tokensweep` as a subprocess, in the slow tier.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from importlib.metadata import version
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import yaml
from conftest import SPECS, TINY, TOKENSWEEP, validates_here

from tokensweep.flows.cli import main
from tokensweep.pipeline.errors import StoreError
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.spec.load import CATALOG, load_sweep
from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.layout import DONE

pytestmark = pytest.mark.timeout(600)
QUICKSTART = yaml.safe_load((CATALOG / "quickstart.yaml").read_text())


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def tokensweep(capsys, monkeypatch):
    """`tokensweep ARGS...` in this process (`main`), in folder `cwd`: its code and output."""
    def call(*args, cwd: Path) -> Result:
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("COLUMNS", "400")  # help rows on one line each
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return call


def subprocess_tokensweep(*args, cwd: Path, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "COLUMNS": "400"}
    return subprocess.run([TOKENSWEEP, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def snapshot(*folders: Path) -> dict:
    """Every file and folder under `folders`, with its size and modification time."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for folder in folders for p in [folder, *folder.rglob("*")]}


def assert_one_error_line(result, *fragments: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    assert result.stdout == "", output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, output
    for fragment in fragments:
        assert fragment in result.stderr, output


def _spec_with(path, value):
    spec = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    parent = spec
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return yaml.safe_dump(spec, allow_unicode=True).encode()


# name -> (files to create {relative path: bytes, or None for a folder}, arguments, fragments of
# the one error line). The fragments name the field or path, and the fix.
BAD_INPUT = {
    "binary spec": ({"spec.yaml": b"\xff\xfe\x00\x01\x02binary"}, ["run", "spec.yaml"],
                    ["spec.yaml: not UTF-8 text (byte 0xff at offset 0)", "save"]),
    "Latin-1 spec": ({"spec.yaml": "name: café\n".encode("latin-1")}, ["run", "spec.yaml"],
                     ["spec.yaml: not UTF-8 text (byte 0xe9 at offset 9)", "UTF-8"]),
    "directory as spec": ({"specs": None}, ["run", "specs"],
                          ["specs is a directory, not a spec file", "give a YAML file"]),
    "empty spec": ({"spec.yaml": b""}, ["run", "spec.yaml"],
                   ["spec.yaml: the file is empty", "write a spec in it"]),
    "spec of only comments": ({"spec.yaml": b"# nothing yet\n"}, ["run", "spec.yaml"],
                              ["spec.yaml: the file is empty"]),
    "YAML syntax error": ({"spec.yaml": b"name: [unclosed\nmodel: x\n"}, ["run", "spec.yaml"],
                          ["spec.yaml: not valid YAML at line", "fix the syntax there"]),
    "YAML list": ({"spec.yaml": b"- 1\n- 2\n"}, ["run", "spec.yaml"],
                  ["spec.yaml: a spec is a mapping of fields", "holds a list"]),
    "--store is a file": ({"store.zarr": b"not a store"},
                          ["run", SPECS / "good.yaml", "--store", "store.zarr"],
                          ["store store.zarr is a file, not a store folder", "give --store a new path"]),
    "--store inside a file": ({"file": b"x"}, ["run", SPECS / "good.yaml", "--store", "file/s.zarr"],
                              ["file is a file, not a folder", "give --store a path inside a folder"]),
    "option out of range": ({}, ["run", SPECS / "good.yaml", "--workers", "0"],
                            ["Invalid value for '--workers'", "see `tokensweep run --help`"]),
    "-q with -v": ({}, ["run", SPECS / "good.yaml", "-q", "-v"],
                   ["give either -q/--quiet or -v/--verbose, not both"]),
    "unknown command": ({}, ["rnu", "quickstart"], ["No such command 'rnu'", "see `tokensweep --help`"]),
    # the four tracebacks of the fuzz of issue 10, and the store-size limit
    "grid.beta.start: null": ({"spec.yaml": _spec_with(("grid", "beta", "start"), None)},
                              ["run", "spec.yaml"],
                              ["grid.beta: start must be a finite number, got None"]),
    "grid.beta.stop: []": ({"spec.yaml": _spec_with(("grid", "beta", "stop"), [])},
                           ["run", "spec.yaml"], ["grid.beta: stop must be a finite number, got []"]),
    "grid.beta.stop: {range}": ({"spec.yaml": _spec_with(("grid", "beta", "stop"),
                                                         {"start": 3, "stop": 1, "num": 0})},
                                ["run", "spec.yaml"], ["grid.beta: stop must be a finite number",
                                                       "write e.g. {start: 0, stop: 3, num: 7}"]),
    "trajectories: 10^12": ({"spec.yaml": _spec_with(("trajectories",), 10**12)},
                            ["run", "spec.yaml"], ["trajectories: 1000000000000 per cell is more than",
                                                   "lower it"]),
    "store over the size limit": ({"spec.yaml": _spec_with(("trajectories",), 10**8)},
                                  ["run", "spec.yaml"], ["spec: the store would need 240.", "GiB",
                                                         "lower trajectories or the grid"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_exits_2_with_one_line_and_touches_nothing(case, tmp_path, tokensweep):
    files, args, fragments = BAD_INPUT[case]
    for name, content in files.items():
        (tmp_path / name).mkdir() if content is None else (tmp_path / name).write_bytes(content)
    home = Path(os.environ["TOKENSWEEP_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    before = snapshot(tmp_path, home)
    result = tokensweep(*args, cwd=tmp_path)
    assert_one_error_line(result, *fragments)
    assert snapshot(tmp_path, home) == before  # no store, lock, log or server state


def test_version_is_the_installed_distributions(tmp_path, tokensweep):
    result = tokensweep("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == f"tokensweep {version('tokensweep')}\n"


OFF_FLAGS = {"--help", "--version", "--quiet", "--verbose", "--failed-only"}  # off unless given


@pytest.mark.parametrize("command", ["", "run", "rerun", "plan", "status", "report", "unlock",
                                     "catalog", "models", "serve", "server start", "cluster start"])
def test_every_help_shows_the_defaults(command, tmp_path, tokensweep):
    result = tokensweep(*command.split(), "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line.strip("│ ") for line in result.stdout.splitlines()
            if re.match(r"│ (\*\s+)?-", line)]
    for row in rows:
        option = row.split()[0]
        assert option in OFF_FLAGS or "[default: " in row or "[required]" in row, row
    if command == "run":
        text = "\n".join(rows)
        assert "[default: (one per core)]" in text and "[default: (the spec's `store`)]" in text
        assert "[default: progress]" in text


def test_catalog_lists_every_entry_with_its_claim_model_and_cost(tmp_path, tokensweep):
    result = tokensweep("catalog", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    entries = sorted(CATALOG.glob("*.yaml"))
    assert len(lines) == len(entries)
    for line, path in zip(lines, entries):
        if not validates_here(path):
            continue
        sweep = load_sweep(path)
        name, model, rest = line.split(maxsplit=2)
        assert (name, model) == (path.stem, sweep.model)
        cells, traj, layers = sweep.n_cells, sweep.trajectories, sweep.time.layers
        cost = f"{cells} cells x {traj} traj x {layers} layers = {cells * traj * layers:.2g}"
        assert rest.startswith(cost), line
        assert len(rest[len(cost):].strip()) > 10, line  # the figure or claim
    quickstart = next(line for line in lines if line.startswith("quickstart "))
    assert "[F26] Fig. 3 in miniature" in quickstart


@pytest.mark.slow
def test_plan_counts_sizes_and_times_the_quickstart_without_writing(tmp_path, tokensweep):
    before = snapshot(tmp_path)
    result = tokensweep("plan", "quickstart", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # 21 cells (7 beta x 3 d x 1 n), 400 trajectories in partitions of 200, 6 checkpoints
    assert "quickstart: stochastic_transformer, 21 cells x 400 trajectories x 3000 layers, " \
           "6 checkpoints" in out
    assert "partitions: 42 (200 trajectories each), 42 to run" in out
    outputs = get_model("stochastic_transformer").outputs.values()
    per_traj = sum(np.dtype(o.dtype).itemsize * (6 if o.per_checkpoint else 1) for o in outputs)
    size = 21 * 400 * per_traj + 42 * (1 + 8 + 8)  # outputs, then status/started/finished
    assert f"store: results/quickstart.zarr: {size} bytes" in out
    timing = re.search(r"core time: ~([\d.e+-]+) (ms|s|min|h) \(([\d.e+-]+) us per trajectory and "
                       r"layer, the mean of 5 partitions from beta=0 d=3 n=2 traj=0:200 to beta=3 "
                       r"d=8 n=2 traj=200:400\); "
                       r"wall time: ~([\d.e+-]+) (ms|s|min|h) on 2 local workers", out)
    assert timing, out
    unit = {"ms": 1e-3, "s": 1, "min": 60, "h": 3600}
    core, per_layer = float(timing[1]) * unit[timing[2]], float(timing[3]) * 1e-6
    wall = float(timing[4]) * unit[timing[5]]
    assert core == pytest.approx(per_layer * 21 * 400 * 3000, rel=0.06)
    assert wall == pytest.approx(math.ceil(42 / 2) * per_layer * 200 * 3000, rel=0.06)
    assert snapshot(tmp_path) == before


def test_plan_times_whole_trajectories_where_they_are_short(monkeypatch):
    """glpre-hull: 10 layers with 40 tokens still apart cost most of a trajectory (one LP per
    cluster centre at the end), so a few layers' rate would inflate the plan ~25x (measured): the
    calibration times trajectories over all 100 layers. A long spec keeps the short calls. A tiny
    target stops the first calls at 10 layers on any machine."""
    from tokensweep.flows.cli import look
    from tokensweep.pipeline.plan import Plan

    calls = []
    model = get_model("euclidean_flow")
    simulate = model.simulate

    def timed(sweep, cell, rngs):
        calls.append((len(rngs), sweep.time.layers))
        return simulate(sweep, cell, rngs)

    monkeypatch.setattr(model, "simulate", timed)
    sweep = load_sweep("glpre-hull")
    plan = Plan(sweep)
    look._seconds_per_layer(sweep, model, plan, plan[0], 1e-6)
    assert calls == [(1, 1), (1, 10), (1, sweep.time.layers)], calls
    calls.clear()
    # a million layers (V = -I: nothing overflows): minutes a trajectory at the rate of 10 layers
    long = load_sweep("glpre-hull", V="minus_identity", time={"T": 1e5, "layers": 10**6, "checkpoints": 20})
    look._seconds_per_layer(long, model, Plan(long), Plan(long)[0], 1e-6)
    assert calls == [(1, 1), (1, 10)], calls


@pytest.mark.slow
def test_plan_of_a_long_rd_spec_is_near_what_it_computes():
    """glpre-conj42: 3000 layers of 40 tokens whose final reductions (~55 ms a trajectory) used
    to be counted once per 10 probed layers: planned 4.0 min for 6.7 s of compute (36x). The
    planned core time and the CPU time of computing the partition, in one process: within 3x."""
    import time

    from tokensweep.flows.cli import look
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan

    sweep = load_sweep("glpre-conj42")
    plan = Plan(sweep)
    rate, _ = look._calibrate(sweep)
    planned = rate * sweep.trajectories * sweep.time.layers
    start = time.process_time()
    for index in range(len(plan)):
        simulate_partition(sweep, plan[index], plan)
    computed = time.process_time() - start
    assert computed / 3 < planned < 3 * computed, (planned, computed)


@pytest.mark.slow
def test_run_says_what_it_does_and_keeps_the_logs_in_a_file(prefect_server, tiny_spec, write_spec,
                                                           tmp_path):
    """The console script itself: its exit code, its output, Prefect's and Dask's logs (fd 2,
    the workers' too) in STORE.log."""
    store = tmp_path / "tiny.zarr"
    result = subprocess_tokensweep("run", write_spec(tiny_spec), "--store", store, "--workers", "2",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = [line for line in result.stdout.splitlines() if not line.startswith("compiling kernels")]
    assert lines[0] == f"tiny: 12 of 12 partitions to run into {store} on 2 local workers " \
                       f"(logs: {store}.log)"
    assert f"computed 12 of 12 partitions into {store}" in lines
    assert "INFO" not in result.stdout and len(lines) <= 6, result.stdout  # bar, results, report
    log = Path(f"{store}.log").read_text()
    assert "INFO" in log and f"Flow run 'tiny @ {store}'" in log and "Completed" in log


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_resume_line_and_the_same_command_resumes(
        prefect_server, slow_spec, write_spec, tmp_path):
    store, spec = tmp_path / "slow.zarr", write_spec(slow_spec)
    command = ["run", spec, "--store", store, "--workers", "2", "--no-report"]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.Popen([TOKENSWEEP, *map(str, command)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if (read_status(store) == DONE).any():
                    break
            except StoreError:  # not created yet
                pass
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before a partition was seen done"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = int((read_status(store) == DONE).sum())
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err, out + err
    assert err.splitlines() == [f"interrupted: {done} of 12 partitions done; "
                                "run the same command to resume"], err
    assert done >= 1
    assert not Path(f"{store}.lock").exists()

    resumed = subprocess_tokensweep(*command, "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout == "" and resumed.stderr == ""  # -q: only errors
    assert (read_status(store) == DONE).all()
    log = Path(f"{store}.log").read_text()
    assert log.count("\n=== ") == 2 and "INFO" in log  # both runs' headers and their logs


def test_ctrl_c_inside_a_pydantic_serializer_counts_as_ctrl_c():
    # pydantic-core turns whatever a serializer function raises, KeyboardInterrupt included, into
    # its own error: a Ctrl-C striking while a spec is dumped must still exit 130 with the resume line
    from pydantic import BaseModel, model_serializer

    from tokensweep.flows.cli.common import interrupted

    class Struck(BaseModel):
        @model_serializer
        def _ser(self):
            raise KeyboardInterrupt

    try:
        Struck().model_dump()
    except BaseException as err:  # noqa: B036 (the point of the test)
        wrapped = err
    assert type(wrapped).__name__ == "PydanticSerializationError" and interrupted(wrapped)
    assert interrupted(KeyboardInterrupt()) and not interrupted(ValueError("KeyboardInterrupt"))


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # zarr's, on its own call
def test_a_store_lacking_an_output_the_model_records_now_is_refused(tmp_path, tokensweep):
    """A store written before its model recorded an output (here the R^d flow's
    log_boolean_defect, which a later tokensweep added) is refused, not resumed with that output
    missing for its done partitions: exit 2, one line naming it, the store untouched."""
    import shutil

    import zarr

    from tokensweep.pipeline.store.cube import create_store
    from tokensweep.pipeline.store.lifecycle import prepare_store

    spec = {"name": "older", "model": "euclidean_flow", "grid": {"beta": 1.0, "d": 1, "n": 4},
            "time": {"T": 1.0, "layers": 10, "checkpoints": 2}, "trajectories": 2}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    store = tmp_path / "older.zarr"
    sweep = load_sweep(str(tmp_path / "spec.yaml"), store=str(store))
    create_store(sweep, store)
    shutil.rmtree(store / "log_boolean_defect")  # as the earlier tokensweep wrote it
    zarr.consolidate_metadata(str(store))
    before = snapshot(store)
    result = tokensweep("run", "spec.yaml", "--store", store, cwd=tmp_path)
    assert_one_error_line(result, "older.zarr was written by an earlier tokensweep",
                          "lacks log_boolean_defect", "give a new --store")
    assert snapshot(store) == before
    with pytest.raises(StoreError, match="lacks log_boolean_defect"):  # the API's path too
        prepare_store(sweep, store)


def test_help_and_errors_name_the_tokensweep_command(tmp_path, tokensweep):
    """However it was started (the console script, ``python -m``, a test), the command is
    `tokensweep`: not ``python -m tokensweep.flows...`` nor the runner's name."""
    for args in (["--help"], ["run", "--help"], ["server", "start", "--help"]):
        result = tokensweep(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"Usage: tokensweep {' '.join(args[:-1])}".rstrip() in result.stdout, result.stdout
        assert "python -m" not in result.stdout and "pytest" not in result.stdout
    wrong = tokensweep("status", cwd=tmp_path)  # STORE missing
    assert wrong.returncode == 2 and "see `tokensweep status --help`" in wrong.stderr, wrong.stderr
    assert "python -m" not in wrong.stderr


def _done_store(spec: dict, store: Path) -> None:
    """A store of `spec` whose partitions are all done (numbers left unwritten: what is counted
    here is the status)."""
    import zarr

    from tokensweep.pipeline.store.cube import create_store

    create_store(load_sweep_dict(spec, store), store)
    status = zarr.open_group(str(store), mode="r+", use_consolidated=False)["status"]
    status[...] = DONE


def load_sweep_dict(spec: dict, store: Path):
    from tokensweep.pipeline.spec.load import parse_sweep

    return parse_sweep(spec, store=str(store))


def test_plan_on_a_store_the_spec_grows_counts_the_partitions_the_grow_adds(tmp_path, tokensweep):
    """12 trajectories in blocks of 5 (0:5, 5:10, 10:12) over 4 cells, all done, grown to 24
    trajectories and a third beta: every partition of the new cells, and in the old ones those
    after 10 (10:12 grows to 10:15, computed whole), are to run; plan said "0 to run"."""
    store = tmp_path / "tiny.zarr"
    _done_store(TINY, store)
    grown = {**TINY, "trajectories": 24, "grid": {**TINY["grid"], "beta": [0.5, 1.0, 2.0]}}
    (tmp_path / "grown.yaml").write_text(yaml.safe_dump(grown))
    result = tokensweep("plan", "grown.yaml", "--store", store, "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # 6 cells x 5 blocks; carried: blocks 0:5 and 5:10 of the 4 old cells
    assert "partitions: 30 (5 trajectories each, the last of each cell 4), 22 to run" in result.stdout
    same = tokensweep("plan", SPECS / "good.yaml", "--no-calibrate", cwd=tmp_path)
    assert "partitions: 4 (8 trajectories each), 4 to run" in same.stdout, same.stdout
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(TINY))
    nothing = tokensweep("plan", "same.yaml", "--store", store, "--no-calibrate", cwd=tmp_path)
    assert "partitions: 12 (5 trajectories each, the last of each cell 2), 0 to run" in nothing.stdout


def test_durations_read_as_a_person_writes_them():
    from tokensweep.flows.cli.look import duration

    assert [duration(s) for s in (0.0004, 0.97, 4.24, 38.4, 204, 7560)] == \
        ["0 ms", "970 ms", "4.2 s", "38 s", "3.4 min", "2.1 h"]


def test_compiling_notice_is_decided_per_model(tmp_path, monkeypatch):
    """A model's kernels are cold until numba's cache holds an index file of one of them: a
    second model's first run is announced too (it was not once the cache held anything)."""
    import hashlib

    import numba

    import tokensweep.kernels.cache  # noqa: F401 (sets numba's folder as it is imported: first)
    from tokensweep.flows.cli.compiling import kernel_sources, kernels_cold
    from tokensweep.pipeline.models import registry

    for name in registry():
        if name != "network":  # torch's, not numba's: nothing of its own to compile
            assert kernel_sources(name), name  # each model's kernels are found in its plug-in
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    assert kernels_cold("stochastic_transformer") and kernels_cold("sphere_flow")
    source = kernel_sources("stochastic_transformer")[0]
    folder = source if source.is_dir() else source.parent
    sub = tmp_path / "cache" / f"{folder.name}_{hashlib.sha1(str(folder).encode()).hexdigest()}"
    sub.mkdir(parents=True)
    stem = "general" if source.is_dir() else source.stem
    (sub / f"{stem}.kernel-10.py311.nbi").write_bytes(b"")
    assert not kernels_cold("stochastic_transformer")
    others = [name for name in registry() if set(kernel_sources(name)).isdisjoint({source})]
    assert others and all(kernels_cold(name) for name in others if kernel_sources(name))
    assert not kernels_cold("network")  # torch's, not numba's: it never announces a compilation


def test_boundary_help_lists_the_outcomes_the_search_counts():
    """`boundary --outcome`'s help names them without importing the search (scipy, xarray)."""
    from tokensweep.flows.cli.boundary import OUTCOME_NAMES
    from tokensweep.pipeline.search import OUTCOMES

    assert OUTCOME_NAMES == tuple(OUTCOMES)
