"""A warm `tokensweep` process: each command a fork of one that has imported everything already.

A `tokensweep` command spends ~3.5 s of one core importing Prefect, xarray, zarr and Dask,
then ~1 s loading numba's cached kernels and ~1 s importing the report's matplotlib and
scipy, before and around a tiny sweep's tenth of a second of work. So, after a sweep
command (`run`, `rerun`, `boundary`), tokensweep leaves one process behind in TOKENSWEEP_HOME
(beside the Prefect server it already leaves) that has made those imports and loaded the
default kernels, and waits on a Unix socket. The next command connects (the client below
imports only the standard library and the package's root), hands over its arguments, working
directory, environment and standard streams (their file descriptors: the terminal itself, so
progress bars, colours and Ctrl-C behave as before), and the host forks a child that runs the
command and reports its exit code. The client forwards SIGINT, SIGTERM and SIGHUP to it.

The host is not used (the command runs cold, as without this module) when:
- `TOKENSWEEP_WARM=0`;
- its code or installed packages changed since it started (it then exits, and the next sweep
  command leaves a fresh one): the fingerprint below;
- the command's environment differs in a variable that a module reads once on import
  (`import_env.py`: thread counts, Python's, Dask's, zarr's and matplotlib's settings);
  Prefect's settings are read again in the child, whatever the environment says.
It exits after `IDLE_S` without a command, and with `tokensweep server stop`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import warm_kernels
from .import_env import read_on_import
from .server import state_dir

IDLE_S = 3600.0
SWEEP_COMMANDS = ("run", "rerun", "boundary")  # after these, a cold command leaves a host
LAST_SPEC = "TOKENSWEEP_WARM_SPEC"  # the leaving command's last sweep, for the warm-up
REQUEST_TIMEOUT_S = 10.0  # a client that connects and sends nothing holds the host no longer
_PACKAGE = Path(__file__).resolve().parents[1]
_SOURCES = ("__init__.py", "kernels", "pipeline", "flows")  # what the host imported from


def socket_path() -> Path:
    return state_dir() / "warm-cli.sock"


def enabled() -> bool:
    return os.environ.get("TOKENSWEEP_WARM", "1") != "0" and hasattr(socket, "SO_PEERCRED") \
        and len(str(socket_path())) < 100  # Linux; AF_UNIX paths are short


def fingerprint() -> str:
    """The environment and its interpreter (`python` or `python3` alike), the newest source file
    of the package and the newest change to the import path's folders (an install or removal
    there): a host made before either is stale."""
    newest = 0
    for name in _SOURCES:
        for folder, dirs, files in os.walk(_PACKAGE / name):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            newest = max([newest] + [os.stat(os.path.join(folder, f)).st_mtime_ns
                                     for f in files if f.endswith(".py")])
    newest = max([newest, os.stat(_PACKAGE / "__init__.py").st_mtime_ns]
                 # sys.path[0]: the script's folder, or the working one (`-m`): not the install
                 + [os.stat(p).st_mtime_ns for p in sys.path[1:] if p and os.path.isdir(p)])
    return f"{sys.prefix} {os.path.realpath(sys.executable)} {sys.version} {newest}"


# --- the client: standard library only ------------------------------------------------------

def handoff(argv: list[str]) -> int | None:
    """Run the command `argv` in the warm host; its exit code, or None where no host took it
    (none runs, or it refused: stale code, another environment), so the caller runs it cold."""
    if not enabled():
        return None
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(socket_path()))
    except OSError:
        return None
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                          "fingerprint": fingerprint()}).encode()
    with conn, conn.makefile("rb") as replies:
        try:
            socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, 1, 2])
            conn.sendall(request)
            reply = json.loads(replies.readline() or b"{}")
        except (OSError, ValueError):
            return None
        if "pid" not in reply:  # refused: the caller runs the command itself
            return None
        return _wait(reply["pid"], replies)


def _wait(pid: int, replies) -> int:
    """Forward the terminal's signals to the child until it reports its exit code."""
    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    line = replies.readline()
    try:
        return int(json.loads(line)["code"])
    except (ValueError, KeyError, TypeError):
        print("error: the warm tokensweep process ended without an exit code (killed?); "
              "TOKENSWEEP_WARM=0 runs commands without it", file=sys.stderr)
        return 1


def leave_host(argv: list[str], env: dict) -> None:
    """After a cold sweep command: start a host in the background (`env`: the command's own
    environment as it began) unless one answers, or warm processes are off."""
    if not enabled() or len(argv) < 2 or argv[1] not in SWEEP_COMMANDS or _answers():
        return
    state_dir().mkdir(parents=True, exist_ok=True)
    spec = warm_kernels.last_spec and warm_kernels.as_variable(warm_kernels.last_spec)
    env = {**env, LAST_SPEC: spec} if spec else env
    with open(state_dir() / "warm-cli.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "tokensweep.flows.warm_cli"], env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def _answers() -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(socket_path()))
        return True
    except OSError:
        return False


def stop_host() -> bool:
    """Stop this TOKENSWEEP_HOME's host, if one runs (`tokensweep server stop`)."""
    try:
        pid = int((state_dir() / "warm-cli.pid").read_text())
        if b"tokensweep.flows.warm_cli" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False  # a host killed outright left its file, and the pid went to another
        os.kill(pid, signal.SIGTERM)
        return True
    except (OSError, ValueError):
        return False


# --- the host ---------------------------------------------------------------------------------

def serve() -> None:
    """Warm up, then fork a child per command until IDLE_S pass without one."""
    import fcntl

    lock = open(state_dir() / "warm-cli.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another host runs, or starts, in this TOKENSWEEP_HOME
    started_env, stamp = read_on_import(os.environ), fingerprint()
    spec = warm_kernels.from_variable(LAST_SPEC) or warm_kernels.DEFAULT
    socket_path().unlink(missing_ok=True)  # one a host killed outright left
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path()))  # first: where sockets cannot be (some network file
    os.chmod(socket_path(), 0o600)     # systems) fail before the warm-up; this user's only
    _warm_up(spec)  # meanwhile a command finds the socket not listening, and runs cold
    listener.listen(16)
    listener.settimeout(IDLE_S)
    (state_dir() / "warm-cli.pid").write_text(str(os.getpid()))  # ready
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    signal.signal(signal.SIGTERM, lambda *_: _leave(listener))
    while True:
        try:
            conn, _ = listener.accept()
        except (TimeoutError, socket.timeout):
            _leave(listener)
        try:
            if _peer_uid(conn) != os.getuid():
                raise PermissionError("another user")
            conn.settimeout(REQUEST_TIMEOUT_S)
            request, fds = _read_request(conn)
            conn.settimeout(None)
        except (OSError, ValueError):
            conn.close()
            continue
        refusal = ("stale" if request["fingerprint"] != stamp else
                   "environment" if read_on_import(request["env"]) != started_env
                   else None)
        if refusal:
            why = f" (its code: {request['fingerprint']}; mine: {stamp})" if refusal == "stale" else ""
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} refused, {refusal}{why}: "
                  f"{' '.join(request['argv'])}", flush=True)
            conn.sendall(json.dumps({"refused": refusal}).encode() + b"\n")
            conn.close()
            for fd in fds:
                os.close(fd)
            if refusal == "stale":
                _leave(listener)
            continue
        child = os.fork()
        if child == 0:
            listener.close()
            _run_child(conn, request, fds)  # never returns
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {child}: {' '.join(request['argv'])}",
              flush=True)  # warm-cli.log: which commands ran here
        conn.close()
        for fd in fds:
            os.close(fd)


def _peer_uid(conn) -> int:
    """The user of the process at the other end (Linux's SO_PEERCRED: pid, uid, gid)."""
    import struct

    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                               struct.calcsize("3i")))[1]


def _leave(listener) -> None:
    listener.close()
    socket_path().unlink(missing_ok=True)
    (state_dir() / "warm-cli.pid").unlink(missing_ok=True)
    os._exit(0)


def _read_request(conn) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size, body = int.from_bytes(header, "big"), b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("short request")
        body += chunk
    request = json.loads(body)
    if len(fds) != 3 or not isinstance(request, dict) or \
            not {"argv", "cwd", "env", "fingerprint"} <= set(request):
        for fd in fds:
            os.close(fd)
        raise ValueError("not a tokensweep command")
    return request, fds


def _warm_up(spec: dict) -> None:
    """What a command would import and load: the CLI, the flow, Prefect's engines, the report's
    modules and the cached kernels of the default model and of `spec` (the last sweep of the
    command that started this process); and a forkserver for local workers that has them too
    (`forkserver.adopt`). No thread may be left running: each command is a fork of this
    process."""
    from .run import start_worker_imports

    start_worker_imports(spec)  # with the thread caps a cold `run` sets
    import matplotlib

    matplotlib.use("Agg")
    import dask.array  # noqa: F401  (a new store's template)
    import prefect.flow_engine  # noqa: F401
    import prefect.task_engine  # noqa: F401
    import scipy.stats  # noqa: F401
    import xarray.backends.zarr  # noqa: F401

    from ..pipeline import report  # noqa: F401
    from . import cli, in_process, sweep  # noqa: F401

    warm_kernels.load(warm_kernels.DEFAULT)
    if spec is not warm_kernels.DEFAULT:
        warm_kernels.load(spec)
    _draw_a_figure()


def _draw_a_figure() -> None:
    """Load matplotlib's fonts and renderer once: a report's first figure costs ~0.5 s more."""
    import io

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="warm-up")
    ax.set(xlabel="beta", ylabel="p", title="warm-up")
    ax.legend()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


def _run_child(conn, request: dict, fds: list[int]) -> None:
    """In the fork: become the client's command (its streams, folder, environment, arguments),
    run it, and send its exit code back as the command ends."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command waits for its own children
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()  # apart from the host: a Ctrl-C the client forwards reaches this child only
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout, sys.stderr = (open(fd, "w", buffering=1 if os.isatty(fd) else -1,
                                       closefd=False) for fd in (1, 2))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()  # TZ
        _settings_from_environment()
        from . import fast_exit, forkserver

        forkserver.adopt()  # this host's, for the command's local workers
        sys.argv = request["argv"]

        fast_exit.before_exit(lambda code: conn.sendall(json.dumps({"code": code}).encode() + b"\n"))
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        from .cli import main

        main()  # ends in fast_exit.exit_now, which reports the code
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - the client must hear of it, whatever it was
        code = 1
    try:
        conn.sendall(json.dumps({"code": code}).encode() + b"\n")
    finally:
        os._exit(code)


def _settings_from_environment() -> None:
    """Read Prefect's and Dask's settings again from the command's environment."""
    import dask.config
    from prefect.context import refresh_global_settings_context

    dask.config.refresh()
    refresh_global_settings_context()


if __name__ == "__main__":
    serve()
