"""The warm process (flows/warm_cli.py): commands forked from one process that has imported
everything, with the numbers, messages, exit codes and Ctrl-C of a cold command.

A real host (`python -m tokensweep.flows.warm_cli`) in the test's own TOKENSWEEP_HOME, real
`tokensweep` commands as subprocesses against the session's Prefect server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr
import yaml

from conftest import TINY, TOKENSWEEP, output_cube, reference_cube

ONE = {**TINY, "name": "one", "grid": {"beta": [1.5], "d": [3], "n": 2}, "trajectories": 4,
       "partition_traj": 4}


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(0.2)


def _served(home: Path) -> str:
    """The commands the host ran, from its log (one line each: "... pid N: ARGV")."""
    path = home / "warm-cli.log"
    return "".join(line for line in (path.read_text() if path.exists() else "").splitlines(True)
                   if " pid " in line)


@pytest.fixture
def warm(prefect_server, tmp_path):
    """A warm host in a TOKENSWEEP_HOME of its own: yields the environment commands use it with."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "TOKENSWEEP_HOME": str(home), "TOKENSWEEP_WARM": "1",
           "NUMBA_NUM_THREADS": "1"}
    with open(home / "warm-cli.log", "ab") as log:
        host = subprocess.Popen([sys.executable, "-m", "tokensweep.flows.warm_cli"], env=env,
                                stdout=log, stderr=log, start_new_session=True)
    _wait_for(lambda: (home / "warm-cli.pid").exists() or host.poll() is not None, 120,
              "the warm process did not listen")
    assert host.poll() is None, _served(home)
    yield env
    host.terminate()
    host.wait(timeout=30)
    _stop_any_host(home)


def _stop_any_host(home: Path) -> None:
    """Stop a host a cold command may have left in `home` (none should: the test says so)."""
    try:
        os.kill(int((home / "warm-cli.pid").read_text()), signal.SIGTERM)
    except (OSError, ValueError):
        return
    pytest.fail(f"a second warm process was left in {home}: {(home / 'warm-cli.log').read_text()}")


def _run(env, *args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([TOKENSWEEP, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_the_command_only_imports_the_standard_library_before_its_hand_off():
    code = ("import sys, tokensweep.flows.command; "
            "print(sorted(m for m in ('numpy', 'xarray', 'pandas', 'typer', 'prefect') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"]


def test_a_sweep_in_the_warm_process_writes_a_cold_runs_numbers(warm, tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY))
    store = tmp_path / "tiny.zarr"
    done = _run(warm, "run", spec, "--store", store, "--workers", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "computed 12 of 12 partitions" in done.stdout and "html:" in done.stdout
    home = Path(warm["TOKENSWEEP_HOME"])
    assert f"run {spec} --store {store} --workers 2" in _served(home)
    # the workers, forks of the warm process's forkserver, log to the run's STORE.log
    assert "Task run 'beta=0.5 d=3" in Path(f"{store}.log").read_text()
    assert "distributed" not in (home / "warm-cli.log").read_text()
    xr.testing.assert_identical(output_cube(store), reference_cube(TINY, tmp_path / "ref.zarr"))


def test_bad_input_in_the_warm_process_is_one_line_and_exit_2(warm, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**ONE, "trajectories": 0}))
    bad = _run(warm, "run", spec, "--store", tmp_path / "bad.zarr", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.splitlines()) == 1 and "trajectories" in bad.stderr, bad.stderr
    assert f"run {spec}" in _served(Path(warm["TOKENSWEEP_HOME"]))
    assert not (tmp_path / "bad.zarr").exists()


def test_ctrl_c_reaches_the_command_in_the_warm_process(warm, tmp_path):
    spec = tmp_path / "one.yaml"  # one partition of ~10 s, in the command's own process
    spec.write_text(yaml.safe_dump({**ONE, "time": {"T": 2.0, "layers": 25_000_000,
                                                    "checkpoints": 2}}))
    store = tmp_path / "one.zarr"
    command = [TOKENSWEEP, "run", str(spec), "--store", str(store)]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=warm, cwd=tmp_path, start_new_session=True)
    try:
        log = Path(f"{store}.log")
        _wait_for(lambda: log.exists() and "partitions to run" in log.read_text(), 120,
                  "the partition did not start")
        time.sleep(1.0)  # inside the partition
        assert client.poll() is None, "the run ended before it was interrupted"
        os.killpg(client.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the client only
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 130, out + err
    assert err.splitlines() == ["interrupted: 0 of 1 partitions done; run the same command to "
                                "resume"], err
    resumed = _run(warm, *command[1:], "-q", cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout == resumed.stderr == "", resumed.stderr
    assert _served(Path(warm["TOKENSWEEP_HOME"])).count(f"run {spec}") == 2


def test_another_import_time_environment_runs_cold(warm, tmp_path):
    other = {**warm, "NUMBA_NUM_THREADS": "2"}  # read by numba on import: the host's is 1
    listed = _run(other, "catalog", cwd=tmp_path)
    assert listed.returncode == 0 and "quickstart" in listed.stdout
    home = Path(warm["TOKENSWEEP_HOME"])
    assert "catalog" not in _served(home)
    assert "refused, environment: " in (home / "warm-cli.log").read_text()
    assert _run(warm, "catalog", cwd=tmp_path).stdout == listed.stdout
    assert "catalog" in _served(home)


def test_a_host_older_than_the_code_refuses_and_leaves(warm):
    home = Path(warm["TOKENSWEEP_HOME"])
    request = json.dumps({"argv": ["tokensweep", "catalog"], "cwd": str(home), "env": warm,
                          "fingerprint": "code of another day"}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(home / "warm-cli.sock"))
        socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, 1, 2])
        conn.sendall(request)
        assert json.loads(conn.makefile("rb").readline()) == {"refused": "stale"}
    _wait_for(lambda: not (home / "warm-cli.sock").exists(), 30, "the stale host did not leave")


def test_a_cold_sweep_leaves_a_host_that_server_stop_stops(prefect_server, tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "TOKENSWEEP_HOME": str(home), "TOKENSWEEP_WARM": "1",
           "NUMBA_NUM_THREADS": "1"}
    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump(ONE))
    first = _run(env, "run", spec, "--store", tmp_path / "a.zarr", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    _wait_for(lambda: (home / "warm-cli.pid").exists(), 120, "no host was left")
    second = _run(env, "run", spec, "--store", tmp_path / "b.zarr", "-q", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"run {spec} --store {tmp_path / 'b.zarr'}" in _served(home)
    xr.testing.assert_identical(output_cube(tmp_path / "a.zarr"), output_cube(tmp_path / "b.zarr"))
    pid = int((home / "warm-cli.pid").read_text())
    # the host warmed up on the first command's sweep (its kernels, in it and its forkserver)
    started_with = dict(line.split("=", 1) for line in
                        Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in line)
    assert json.loads(started_with["TOKENSWEEP_WARM_SPEC"])["name"] == ONE["name"]
    assert _run(env, "server", "stop", cwd=tmp_path).returncode == 0
    _wait_for(lambda: not (home / "warm-cli.sock").exists(), 30, "server stop left the host")
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or
              Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 30, "the host lives on")


def test_a_terminal_gets_the_progress_bar_from_the_warm_process(warm, tmp_path):
    import pty

    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump(ONE))
    terminal, side = pty.openpty()  # the command's streams are a terminal, as in a shell
    client = subprocess.Popen([TOKENSWEEP, "run", str(spec), "--store", str(tmp_path / "t.zarr")],
                              stdin=side, stdout=side, stderr=side, env=warm, cwd=tmp_path)
    os.close(side)
    shown = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # EIO: every end of the terminal's other side is closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(terminal)
    assert client.wait(timeout=60) == 0, shown
    text = shown.decode(errors="replace")
    assert "━" in text and "\x1b[" in text, text  # rich's bar, drawn with escape codes
    assert "computed 1 of 1 partitions" in text
    assert f"run {spec}" in _served(Path(warm["TOKENSWEEP_HOME"]))
