"""A throwaway PostgreSQL server for tests: Debian's binaries, a cluster in a temporary folder.

    with PostgresServer.start() as pg:        # raises PostgresUnavailable (the reason) if it cannot
        pg.url("prefect")                     # postgresql+asyncpg://postgres@127.0.0.1:PORT/prefect
        pg.sql("select 1", database="prefect")

`initdb` builds a cluster in a fresh temporary folder with `trust` authentication, `pg_ctl`
starts it on a free loopback port (its Unix socket in that folder too, so it never meets a
system cluster), and `createdb` makes the databases asked for. PostgreSQL refuses to run as
root, so as root every command runs as the `postgres` system user (`runuser`), which owns the
folder. Stopping it (`pg_ctl stop -m fast`) removes the folder. Needs the `postgresql` package
(`apt-get install postgresql`: binaries in /usr/lib/postgresql/VERSION/bin).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why (for pytest.skip)."""


def find_binaries() -> Path:
    """The folder holding initdb and pg_ctl: Debian's newest version, else the PATH's."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
                         reverse=True):
        if all((Path(folder) / name).is_file() for name in ("initdb", "pg_ctl", "createdb", "psql")):
            return Path(folder)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl", path=str(Path(initdb).parent)):
        return Path(initdb).parent
    raise PostgresUnavailable("PostgreSQL is not installed (no initdb/pg_ctl in /usr/lib/postgresql/*/bin "
                              "or on PATH): `apt-get install postgresql`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    bin: Path
    folder: Path
    port: int
    run_as: str | None  # the system user running the server (None: this one)

    @classmethod
    def start(cls, databases: tuple[str, ...] = ("prefect",), timeout: float = 60) -> "PostgresServer":
        binaries = find_binaries()
        run_as = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SUPERUSER)
            except KeyError:
                raise PostgresUnavailable("running as root and there is no `postgres` system user "
                                          "to run PostgreSQL as (the postgresql package creates it)") from None
            if not shutil.which("runuser"):
                raise PostgresUnavailable("running as root without `runuser` to start PostgreSQL "
                                          "as the postgres user")
            run_as = SUPERUSER
        folder = Path(tempfile.mkdtemp(prefix="tokensweep-pg-", dir="/tmp"))
        if run_as:
            shutil.chown(folder, run_as, run_as)
        server = cls(binaries, folder, _free_port(), run_as)
        try:
            server._run("initdb", "-D", str(folder / "data"), "-U", SUPERUSER, "-A", "trust",
                        "--no-sync", "-E", "UTF8", "--locale", "C", timeout=timeout)
            options = (f"-p {server.port} -c listen_addresses=127.0.0.1 -k {folder} "
                       "-c fsync=off -c max_connections=200")
            server._run("pg_ctl", "-D", str(folder / "data"), "-l", str(folder / "server.log"),
                        "-o", options, "-w", "-t", str(int(timeout)), "start", timeout=timeout + 10)
            for name in databases:
                server._run("createdb", "-h", "127.0.0.1", "-p", str(server.port), "-U", SUPERUSER, name)
        except Exception:
            server.stop()
            raise
        return server

    def _run(self, program: str, *args: str, timeout: float = 60) -> str:
        command = [str(self.bin / program), *args]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                cwd=self.folder)
        if result.returncode != 0:
            raise PostgresUnavailable(f"`{program}` failed ({result.returncode}): "
                                      f"{(result.stderr or result.stdout).strip()[-1500:]}")
        return result.stdout

    def url(self, database: str = "prefect") -> str:
        """The SQLAlchemy URL of `database`, for Prefect (``asyncpg`` comes with Prefect)."""
        return f"postgresql+asyncpg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def sql(self, query: str, database: str = "prefect") -> str:
        """`query`'s rows through psql, unaligned, without headers."""
        return self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                         "-d", database, "-tA", "-c", query).strip()

    def log(self) -> str:
        try:
            return (self.folder / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
            except (PostgresUnavailable, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
