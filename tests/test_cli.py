"""The command line as a user meets it: the real `tokensweep` as a subprocess.

Bad input exits 2 with one line `error: ...` naming the problem and the fix, no traceback, and
touches nothing; `--version`, `catalog`, `plan` and every `--help` (with its defaults) tell
before anything runs; `run` prints what it will do and its results, keeping Prefect's and Dask's
logs in STORE.log; Ctrl-C exits 130 with one line saying how to resume, and resuming works.
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

import numpy as np
import pytest
import yaml

from conftest import SPECS, TOKENSWEEP

from tokensweep.pipeline.errors import StoreError
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.spec import CATALOG, load_sweep
from tokensweep.pipeline.store import DONE, read_status

pytestmark = pytest.mark.timeout(600)
QUICKSTART = yaml.safe_load((CATALOG / "quickstart.yaml").read_text())


def tokensweep(*args, cwd: Path, env_extra=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "COLUMNS": "400", **(env_extra or {})}
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
def test_bad_input_exits_2_with_one_line_and_touches_nothing(case, tmp_path):
    files, args, fragments = BAD_INPUT[case]
    for name, content in files.items():
        (tmp_path / name).mkdir() if content is None else (tmp_path / name).write_bytes(content)
    home = Path(os.environ["TOKENSWEEP_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    before = snapshot(tmp_path, home)
    result = tokensweep(*args, cwd=tmp_path)
    assert_one_error_line(result, *fragments)
    assert snapshot(tmp_path, home) == before  # no store, lock, log or server state


def test_version_is_the_installed_distributions(tmp_path):
    result = tokensweep("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == f"tokensweep {version('tokensweep')}\n"


OFF_FLAGS = {"--help", "--version", "--quiet", "--verbose", "--failed-only"}  # off unless given


@pytest.mark.parametrize("command", ["", "run", "rerun", "plan", "status", "report", "unlock",
                                     "catalog", "models", "serve", "server start", "cluster start"])
def test_every_help_shows_the_defaults(command, tmp_path):
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


def test_catalog_lists_every_entry_with_its_claim_model_and_cost(tmp_path):
    result = tokensweep("catalog", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    entries = sorted(CATALOG.glob("*.yaml"))
    assert len(lines) == len(entries)
    for line, path in zip(lines, entries):
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
def test_plan_counts_sizes_and_times_the_quickstart_without_writing(tmp_path):
    before = snapshot(tmp_path)
    result = tokensweep("plan", "quickstart", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # 21 cells (7 beta x 3 d x 1 n), 400 trajectories in partitions of 200, 6 checkpoints
    assert "quickstart: stochastic_transformer, 21 cells x 400 trajectories x 3000 layers, " \
           "6 checkpoints" in out
    assert "partitions: 42 of 200 trajectories, 42 to run" in out
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


@pytest.mark.slow
def test_run_says_what_it_does_and_keeps_the_logs_in_a_file(prefect_server, tiny_spec, write_spec,
                                                           tmp_path):
    store = tmp_path / "tiny.zarr"
    result = tokensweep("run", write_spec(tiny_spec), "--store", store, "--workers", "2",
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
    command = ["run", spec, "--store", store, "--workers", "2"]
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

    resumed = tokensweep(*command, "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout == "" and resumed.stderr == ""  # -q: only errors
    assert (read_status(store) == DONE).all()
    log = Path(f"{store}.log").read_text()
    assert log.count("\n=== ") == 2 and "INFO" in log  # both runs' headers and their logs


def test_ctrl_c_inside_a_pydantic_serializer_counts_as_ctrl_c():
    # pydantic-core turns whatever a serializer function raises, KeyboardInterrupt included, into
    # its own error: a Ctrl-C striking while a spec is dumped must still exit 130 with the resume line
    from pydantic import BaseModel, model_serializer

    from tokensweep.flows.cli import _interrupted

    class Struck(BaseModel):
        @model_serializer
        def _ser(self):
            raise KeyboardInterrupt

    try:
        Struck().model_dump()
    except BaseException as err:  # noqa: B036 (the point of the test)
        wrapped = err
    assert type(wrapped).__name__ == "PydanticSerializationError" and _interrupted(wrapped)
    assert _interrupted(KeyboardInterrupt()) and not _interrupted(ValueError("KeyboardInterrupt"))


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # zarr's, on its own call
def test_a_store_lacking_an_output_the_model_records_now_is_refused(tmp_path):
    """A store written before its model recorded an output (here the R^d flow's
    log_boolean_defect, which a later tokensweep added) is refused, not resumed with that output
    missing for its done partitions: exit 2, one line naming it, the store untouched."""
    import shutil

    import zarr

    from tokensweep.pipeline.store import create_store, prepare_store

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
