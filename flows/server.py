"""One local Prefect server for a sweep, all of its Dask workers and every tokensweep command.

Without an API URL every Prefect client process (the flow, each Dask worker, a bare
``prefect deployment run``) starts its own temporary server, which costs ~15 s per process and,
two at a time on one SQLite file, fails with "database is locked". So, unless the user has
configured Prefect (``PREFECT_API_URL`` in the environment or the active profile), tokensweep
starts one ``prefect server start`` on loopback, leaves it running for the next command to
reuse, and hands its URL to every process it starts. ``tokensweep server env`` prints it for
the bare ``prefect`` commands (``eval "$(tokensweep server env)"``).

Where the server lives: ``TOKENSWEEP_HOME`` when set, else ``var/tokensweep`` under the
active environment (``sys.prefix``), so two checkouts with their own venvs keep two servers
and never stop each other's. Its PREFECT_HOME (the SQLite database, unless the server is
given a database URL) is the ``prefect`` folder inside it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .redact import redact

QUIET_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "true"}
DATABASE_ENV = "PREFECT_API_DATABASE_CONNECTION_URL"
DATABASE_SCHEMES = ("postgresql+asyncpg://", "sqlite+aiosqlite://")
START_TIMEOUT_S = 90.0
START_ATTEMPTS = 3


class ServerError(ValueError):
    """A server that cannot be started or used as asked; the message says why and what to do."""


def state_dir() -> Path:
    """Where the local server keeps its URL, pid, log and (SQLite) database."""
    home = os.environ.get("TOKENSWEEP_HOME")
    return Path(home) if home else Path(sys.prefix) / "var" / "tokensweep"


def state_file() -> Path:
    return state_dir() / "prefect-server.json"


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def configured_api_url() -> str | None:
    """The API URL the user configured, if any (environment first, then profile)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


PREFERRED_PORT = 4200  # Prefect's own default: the UI where users expect it, when free


def _free_port(preferred: int | None = PREFERRED_PORT) -> int:
    for port in (preferred, 0):
        if port is None:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError("no free port on 127.0.0.1")


def _listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` (or a child of it) is the one listening on `port`.

    A free port can be taken between choosing it and the server binding it (two commands
    starting servers at once). The loser's server exits, but the health check at its URL is
    answered by the winner's; without this check both commands would record one server."""
    import psutil

    try:
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                   for c in process.net_connections("tcp")):
                return True
    except psutil.Error:
        return False
    return False


def recorded_server() -> dict | None:
    """The server tokensweep started here ({api_url, pid, database}), if it still answers."""
    try:
        record = json.loads(state_file().read_text())
        url = record["api_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if healthy(url) else None


def redacted(database: str | None) -> str:
    """A database URL without its password (what is recorded and printed: `redact.redact`).
    The URL itself reaches the server only through its environment, never a file."""
    return redact(database) if database else "sqlite (PREFECT_HOME)"


def check_database(database: str) -> None:
    if not database.startswith(DATABASE_SCHEMES):
        raise ServerError(f"--database {redacted(database)!r} is not a database URL Prefect can use: "
                          "give postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB "
                          "(or sqlite+aiosqlite:///PATH)")


@contextmanager
def _start_lock():
    """Serialize check-and-start: two commands at once must not start two servers on one database."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "prefect-server.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def start_server(database: str | None = None) -> str:
    """Start a detached ``prefect server start`` on loopback and wait until it is healthy.

    `database` (else ``PREFECT_API_DATABASE_CONNECTION_URL`` from the environment, else SQLite
    under this server's PREFECT_HOME) is the server's database. Port 4200 when free, else
    another; a port taken by someone else meanwhile is given up for a new one."""
    database = database or os.environ.get(DATABASE_ENV) or None
    if database:
        check_database(database)
    preferred = PREFERRED_PORT
    for _attempt in range(START_ATTEMPTS):
        port = _free_port(preferred)
        proc = _launch(port, database)
        api_url = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if healthy(api_url) and _listens_on(proc.pid, port):
                state_file().write_text(json.dumps(
                    {"api_url": api_url, "pid": proc.pid, "database": redacted(database)}))
                return api_url
            time.sleep(0.5)
        lost_the_port = proc.poll() is not None and healthy(api_url)
        _kill_group(proc)
        if not lost_the_port:
            break
        preferred = None  # another process took it: any free port now
    raise RuntimeError(
        f"the Prefect server did not become healthy at {api_url} within {START_TIMEOUT_S:.0f} s; "
        f"see {state_dir() / 'prefect-server.log'}"
    )


def _launch(port: int, database: str | None) -> subprocess.Popen:
    home = state_dir()
    (home / "prefect").mkdir(parents=True, exist_ok=True)
    prefect = shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"
    env = {**os.environ, **QUIET_ENV, "PREFECT_HOME": str(home / "prefect"),
           # the UI must call this server, not the default port's (another server may be there)
           "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api"}
    env.pop("PREFECT_API_URL", None)
    env.pop(DATABASE_ENV, None)
    if database:
        env[DATABASE_ENV] = database
    with open(home / "prefect-server.log", "ab") as log:
        return subprocess.Popen(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def stop_server() -> bool:
    """Stop the server this tool started, if it is still running."""
    try:
        pid = json.loads(state_file().read_text())["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    state_file().unlink(missing_ok=True)
    try:
        os.killpg(pid, 15)
    except ProcessLookupError:
        return False
    return True


def local_server(database: str | None = None) -> str:
    """The URL of tokensweep's local server, started now unless one is running.

    A running one on another database than `database` (default: PREFECT_API_DATABASE_CONNECTION_URL
    from the environment) is refused: stop it first."""
    database = database or os.environ.get(DATABASE_ENV) or None
    if database:
        check_database(database)
    with _start_lock():
        record = recorded_server()
        if record is None:
            return start_server(database=database)
        if database and redacted(database) != record.get("database"):
            raise ServerError(f"tokensweep's server at {record['api_url']} uses "
                              f"{record.get('database')}, not {redacted(database)}: "
                              "`tokensweep server stop` first")
        return record["api_url"]


def ensure_server() -> str:
    """Point this process (and the workers it will start) at one Prefect API; return its URL."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    url = configured_api_url() or local_server()
    os.environ["PREFECT_API_URL"] = url
    return url


@contextmanager
def prefect_api(url: str):
    """This process's Prefect clients talk to `url` during the block.

    Setting the environment variable is not enough once Prefect is imported: its settings
    were read then, and a client would start a temporary server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield url
