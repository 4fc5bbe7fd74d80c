"""tokensweep's own Prefect server: every command, bare `prefect` ones included, reuses it.

The server lives in TOKENSWEEP_HOME (else under the active environment), so a test points
TOKENSWEEP_HOME at a temporary folder and starts, uses and stops a real server there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BIN, CUDA_TINY, TINY, api, flow_runs_of_store, run_tokensweep
from typer.testing import CliRunner

from tokensweep.flows.cli import app

runner = CliRunner()


def test_default_home_is_inside_the_environment(monkeypatch):
    from tokensweep.flows.server import state_dir

    monkeypatch.delenv("TOKENSWEEP_HOME", raising=False)
    assert state_dir() == Path(sys.prefix) / "var" / "tokensweep"
    monkeypatch.setenv("TOKENSWEEP_HOME", "/somewhere/else")
    assert state_dir() == Path("/somewhere/else")


@pytest.mark.parametrize("url", ["mysql://u:secret@db/prefect", "postgresql://u:secret@db/prefect"])
def test_a_database_prefect_cannot_use_exits_2(url):
    result = runner.invoke(app, ["server", "start", "--database", url])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --database") and result.output.count("\n") == 1
    assert "postgresql+asyncpg://" in result.output and "secret" not in result.output


def test_redact_masks_every_urls_password_and_nothing_else():
    from tokensweep.flows.redact import redact
    from tokensweep.flows.server import redacted

    line = ("tokensweep server start --database postgresql+asyncpg://user:PA:SS@WORD@db:5432/prefect "
            "--port 4300")
    assert redact(line) == ("tokensweep server start --database postgresql+asyncpg://user:***@db:5432/"
                            "prefect --port 4300")
    assert redact("s3://bucket/a.zarr https://:token@host/x") == "s3://bucket/a.zarr https://:***@host/x"
    for plain in ("postgresql+asyncpg://user@db/prefect", "results/q.zarr", "a@b.c", "mail me: x@y"):
        assert redact(plain) == plain
    assert redacted("postgresql+asyncpg://u:secret@db/prefect") == "postgresql+asyncpg://u:***@db/prefect"
    assert redacted(None) == "sqlite (PREFECT_HOME)"


@pytest.fixture
def home(tmp_path):
    """A fresh TOKENSWEEP_HOME, no API URL configured: what a new user has."""
    env = {**os.environ, "TOKENSWEEP_HOME": str(tmp_path / "home"), "NUMBA_NUM_THREADS": "1"}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_HOME", None)
    yield env
    subprocess.run([str(BIN / "tokensweep"), "server", "stop"], env=env, capture_output=True)


def launch_and_wait(url: str, env: dict, spec: dict, store: Path, serve_log: Path):
    """Launch the served deployment on `spec` with the bare `prefect` command and wait for its
    flow run to end: (the flow runs of `store`, the command's result); the run must complete."""
    params = json.dumps({"spec": spec, "store": str(store)})
    launched = sh(f"eval \"$(tokensweep server env)\" && prefect deployment run "
                  f"sweep/tokensweep --params '{params}'", env)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        runs = flow_runs_of_store(url, store)
        if runs and runs[0]["state_type"] in ("COMPLETED", "FAILED", "CRASHED"):
            break
        time.sleep(2)
    assert [r["state_type"] for r in runs] == ["COMPLETED"], serve_log.read_text()
    return runs, launched


def sh(command: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"PATH={BIN}:$PATH; {command}"], env=env, text=True,
                          capture_output=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_serve_and_bare_prefect_commands_use_one_server(home, tmp_path):
    url = run_tokensweep("server", "start", env_extra=home).stdout.strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/api")
    state = Path(home["TOKENSWEEP_HOME"])
    assert json.loads((state / "prefect-server.json").read_text())["api_url"] == url
    assert (state / "prefect" / "prefect.db").is_file()  # its PREFECT_HOME is inside the home
    assert f"export PREFECT_API_URL={url}" in sh("tokensweep server env", home).stdout

    serve = subprocess.Popen([str(BIN / "tokensweep"), "serve", "--workers", "1"], env=home,
                             stdout=open(tmp_path / "serve.log", "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not api(url, "/deployments/filter", {}) and time.monotonic() < deadline:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(1)
        # as docs/cluster.md says: the bare `prefect` command, with tokensweep's server exported
        store = tmp_path / "served.zarr"
        runs, launched = launch_and_wait(url, home, TINY, store, tmp_path / "serve.log")
        for text in (launched.stdout + launched.stderr, (tmp_path / "serve.log").read_text()):
            assert "temporary server" not in text.lower() and "database is locked" not in text
        assert runs[0]["name"] == f"tiny @ {store}"
        # a cuda spec served from the same deployment runs on GPU workers, as `tokensweep run`
        # would start them: one per GPU seen (the simulator's one), its tasks asking for it
        runs, _ = launch_and_wait(url, home, CUDA_TINY, tmp_path / "served-cuda.zarr", tmp_path / "serve.log")
        logs = [entry["message"] for entry in api(url, "/logs/filter", {
            "logs": {"flow_run_id": {"any_": [runs[0]["id"]]}}, "limit": 200})]
        assert "device cuda: each task on one of the cluster's 1 GPU workers" in logs, logs
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
    assert "temporary server" not in (tmp_path / "serve.log").read_text().lower()
    assert run_tokensweep("server", "stop", env_extra=home).stdout.strip() == "stopped"


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_port_taken_while_the_server_starts_is_given_up_for_another(home, monkeypatch):
    """CI's marked tiers once started two servers at once (two homes): both chose port 4200,
    one server could not bind it and exited, and its command took the other's health answer
    for its own, so two homes recorded one server on two databases. Here a Prefect-like health
    endpoint takes the chosen port first: the server must move to another port and record
    itself, not the impostor."""
    import http.server
    import threading

    from tokensweep.flows import server

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    impostor = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    taken = impostor.server_address[1]
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    real_free_port = server._free_port
    monkeypatch.setattr(server, "_free_port",
                        lambda preferred: taken if preferred else real_free_port(None))
    for key in ("TOKENSWEEP_HOME", "PREFECT_API_URL", "PREFECT_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TOKENSWEEP_HOME", home["TOKENSWEEP_HOME"])
    try:
        url = server.start_server()
        port = int(url.split(":")[-1].split("/")[0])
        assert port != taken
        record = json.loads(server.state_file().read_text())
        assert record["api_url"] == url and server._listens_on(record["pid"], port)
        assert server.stop_server()
    finally:
        impostor.shutdown()


def _lock(tmp_path, pid: int) -> Path:
    import socket

    from tokensweep.pipeline.store.lock import lock_path

    store = tmp_path / "s.zarr"
    store.mkdir()
    lock_path(store).write_text(json.dumps({
        "host": socket.gethostname(), "pid": pid, "since": "2026-01-01T00:00:00Z",
        "flow_run_id": "0b6c4bb4-0000-4000-8000-000000000000", "prefect_api": "http://127.0.0.1:9/api"}))
    return store


def test_unlock_of_a_live_owner_leaves_its_flow_run_alone(tmp_path):
    result = runner.invoke(app, ["unlock", str(_lock(tmp_path, os.getpid()))])
    assert result.exit_code == 0 and f"pid {os.getpid()} is still running" in result.output
    assert "Crashed" not in result.output


def test_unlock_says_when_the_dead_flows_server_is_gone(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    result = runner.invoke(app, ["unlock", str(_lock(tmp_path, dead.pid))])
    assert result.exit_code == 0, result.output
    assert ("not marked Crashed: no Prefect server answers at http://127.0.0.1:9/api"
            in result.output)
