"""One writer per store: an exclusive lock file beside the store, with its owner and time.

The lock is created atomically (O_CREAT | O_EXCL; on S3 a conditional PUT, `location.py`) as
``STORE.lock`` (an object beside a remote store, in its bucket), holding the host,
process id and start time of the sweep that writes the store, and what the caller adds (the
Prefect flow records its flow-run id and API, see `flows.flow_lock`). A second sweep is refused
with a message naming the owner. A lock whose owner died (same host, process gone) is
reported as stale but never broken silently: ``tokensweep unlock STORE`` breaks it.

The lock is taken before the store is created, resumed or grown (`store.prepare_store`): two
sweeps started at once on one new store meet here, and the second is refused with the owner's
name, instead of finding a half-created store.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from ..errors import StoreError
from . import location


def lock_path(store: str | Path) -> str | Path:
    """Where the lock is: a Path beside a local store, a URL beside a remote one."""
    if location.is_remote(store):
        return location.sibling(store, ".lock")
    store = Path(store)
    return store.with_name(store.name + ".lock")


def read_lock(store: str | Path) -> dict | None:
    try:
        return json.loads(location.read_text(lock_path(store)))
    except (OSError, ValueError):
        return None


def is_stale(owner: dict) -> bool:
    """The lock's owner is known dead: its process is gone from this host."""
    return _alive(owner) is False


def is_running_here(owner: dict) -> bool:
    """The lock's owner is known alive: its process runs on this host."""
    return _alive(owner) is True


def _alive(owner: dict) -> bool | None:
    """True/False for a process on this host, None when it runs elsewhere (unknown)."""
    if owner.get("host") != socket.gethostname():
        return None
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def store_lock(store: str | Path, **about):
    """Hold the store's lock for the duration of the block; refuse if someone else holds it.

    `about`: more to record for whoever finds the lock (JSON values; None ones are left out)."""
    path = lock_path(store)  # taken before the store is created: the folder is made if need be
    owner = {"host": socket.gethostname(), "pid": os.getpid(),
             "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             **{k: v for k, v in about.items() if v is not None}}
    try:
        location.create_exclusive(path, json.dumps(owner))
    except FileExistsError:
        raise StoreError(f"{store} is being written by another sweep ({describe_lock(store)})") from None
    try:
        yield owner
    finally:
        release(store, owner)


RELEASE_ATTEMPTS = 5  # a bound, should something keep raising that is not an interrupt


def release(store: str | Path, owner: dict) -> None:
    """Remove the lock if `owner` still holds it, even when an interrupt strikes meanwhile.

    A sweep leaving on Ctrl-C or a signal may well get a second one during its cleanup (a second
    Ctrl-C; the parent-death signal, sent again as each thread of the dying parent ends, where
    it is not taken once as `flows.child` takes it): a lock left behind
    would refuse every later run until `tokensweep unlock`. So an interrupt (any BaseException
    that is not an Exception: KeyboardInterrupt, Prefect's TerminationSignal) is held until the
    lock is gone, then raised."""
    interrupt = None
    for _ in range(RELEASE_ATTEMPTS):
        try:
            if read_lock(store) == owner:
                location.delete(lock_path(store))
            break
        except Exception:
            raise
        except BaseException as err:
            interrupt = interrupt or err
    if interrupt is not None:
        raise interrupt


def owner_text(held: dict) -> str:
    return f"pid {held.get('pid', '?')} on {held.get('host', '?')} since {held.get('since', '?')}"


def describe_lock(store: str | Path) -> str | None:
    """Who holds the lock and what to do about it; None when the store is not locked."""
    if not location.exists(lock_path(store)):
        return None
    held = read_lock(store) or {}
    if is_stale(held):
        return (f"{owner_text(held)}; that process is gone, so the lock is stale: "
                f"break it with `tokensweep unlock {store}`")
    return f"{owner_text(held)}; wait for it to finish, or if it is dead, `tokensweep unlock {store}`"


def break_lock(store: str | Path) -> dict | None:
    """Remove the lock (explicit user action); return who held it."""
    held = read_lock(store)
    location.delete(lock_path(store))
    return held
