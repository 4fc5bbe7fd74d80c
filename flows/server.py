"""One local Prefect server for a sweep and all of its Dask workers.

Without an API URL every Prefect client process (the flow and each Dask worker) starts
its own temporary server, which costs ~15 s per process. So, unless the user has
configured Prefect (``PREFECT_API_URL`` in the environment or the active profile), we
start one ``prefect server start`` on loopback (SQLite under PREFECT_HOME), leave it
running for the next sweep to reuse, and export its URL *before* any worker starts.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STATE_DIR = Path(os.environ.get("TOKENSWEEP_HOME", Path.home() / ".tokensweep"))
STATE_FILE = STATE_DIR / "prefect-server.json"
QUIET_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "true"}
START_TIMEOUT_S = 90.0


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def configured_api_url() -> str | None:
    """The API URL the user configured, if any (environment first, then profile)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def _free_port(preferred: int = 4200) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError("no free port on 127.0.0.1")


def _recorded_server() -> str | None:
    try:
        url = json.loads(STATE_FILE.read_text())["api_url"]
    except (OSError, ValueError, KeyError):
        return None
    return url if healthy(url) else None


def start_server(port: int | None = None) -> str:
    """Start a detached ``prefect server start`` on loopback and wait until healthy."""
    port = port or _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    prefect = shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"
    log = open(STATE_DIR / "prefect-server.log", "ab")
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        # the UI must call this server, not the default port's (another server may be there)
        env={**os.environ, **QUIET_ENV, "PREFECT_UI_API_URL": api_url}, start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if healthy(api_url):
            STATE_FILE.write_text(json.dumps({"api_url": api_url, "pid": proc.pid}))
            return api_url
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(
        f"the Prefect server did not become healthy at {api_url} within {START_TIMEOUT_S:.0f} s; "
        f"see {STATE_DIR / 'prefect-server.log'}"
    )


def stop_server() -> bool:
    """Stop the server this tool started, if it is still running."""
    try:
        pid = json.loads(STATE_FILE.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    STATE_FILE.unlink(missing_ok=True)
    try:
        os.killpg(pid, 15)
    except ProcessLookupError:
        return False
    return True


def ensure_server() -> str:
    """Point this process (and the workers it will start) at one Prefect API; return its URL."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    url = configured_api_url() or _recorded_server() or start_server()
    os.environ["PREFECT_API_URL"] = url
    return url
