"""Where a store is: a local path, or an object-store URL (``s3://bucket/path.zarr``).

A store argument is a string. A plain path (or a ``file://`` URL, the same thing) is a folder on
this machine and is handled exactly as before object stores existed: the store through its path,
its lock and error records as files beside it (``STORE.lock``, ``STORE.errors/``). Any other URL
that fsspec knows (``s3://``, ``gs://``, ...) is a remote store: zarr and xarray reach it through
``zarr.storage.FsspecStore``, and the lock and error records are objects beside it in the same
bucket (``s3://bucket/path.zarr.lock``, ``s3://bucket/path.zarr.errors/INDEX.json``), so every
host that can write the store sees them. Logs, reports and job logs of a remote store are local
files, in the current folder (`local_sibling`).

Credentials and the endpoint come from the environment, as every S3 client reads them
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ...),
and any other filesystem option from fsspec's own variables (``FSSPEC_S3='{"anon": true}'``,
``FSSPEC_S3_ENDPOINT_URL=...``); workers inherit them. See docs/cluster.md, "Object stores".

The few file operations the pipeline needs besides zarr (does an object exist, read or write a
small text object, create one only if absent, delete one or a folder) are here, one function
each, with a local branch that does what the code did before and a remote one through fsspec.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import StoreError

LOCAL_PROTOCOLS = ("file", "local")
INSTALL_HINT = "pip install 'tokensweep[s3]' (or the fsspec package for that protocol)"


def is_remote(store) -> bool:
    """True for a URL other than ``file://``.

    >>> is_remote("s3://bucket/x.zarr"), is_remote("results/x.zarr"), is_remote("file:///tmp/x.zarr")
    (True, False, False)
    """
    text = str(store)
    return "://" in text and text.split("://", 1)[0] not in LOCAL_PROTOCOLS


def local_path(store) -> Path:
    """The folder of a local store (a ``file://`` URL becomes its path).

    >>> local_path("file:///tmp/x.zarr"), local_path("results/x.zarr")
    (PosixPath('/tmp/x.zarr'), PosixPath('results/x.zarr'))
    """
    text = str(store)
    return Path(text.split("://", 1)[1]) if "://" in text else Path(text)


def normalised(store) -> str:
    """A store argument as every function here takes it: a remote URL as given, a local store as
    its path (a ``file://`` URL is stripped to it).

    >>> normalised("file:///tmp/x.zarr"), normalised("s3://b/x.zarr")
    ('/tmp/x.zarr', 's3://b/x.zarr')
    """
    return str(store) if is_remote(store) else str(local_path(store))


def report_dir(store) -> Path:
    """Where a store's report goes by default: STORE with its suffix replaced by ``.report``,
    beside a local store, in the current folder for a remote one."""
    return local_sibling(store, "").with_suffix(".report")


def sibling(store, suffix: str) -> str:
    """The name `suffix` added to the store's: where its lock, errors and grow steps live."""
    if is_remote(store):
        return str(store).rstrip("/") + suffix
    path = local_path(store)
    return str(path.with_name(path.name + suffix))


def local_sibling(store, suffix: str) -> Path:
    """A local file or folder named after the store (its log, report, job logs): beside a local
    store; in the current folder for a remote one."""
    if is_remote(store):
        return Path(str(store).rstrip("/").rsplit("/", 1)[-1] + suffix)
    return Path(sibling(store, suffix))


def filesystem(target):
    """(fsspec filesystem, path inside it) of a remote URL; StoreError naming the fix if the
    protocol is unknown or its package is missing."""
    import fsspec

    try:
        # no listings cache: another process (a worker, a second sweep) changes the bucket
        return fsspec.core.url_to_fs(str(target), use_listings_cache=False)
    except ImportError as err:
        raise _refusal(f"store {target}: {err}: {INSTALL_HINT}") from None
    except ValueError as err:  # "Protocol not known: foo"
        raise _refusal(f"store {target}: {err}: give a local path or a URL fsspec knows, "
                         "e.g. s3://bucket/path.zarr") from None


def zarr_store(store, read_only: bool = False):
    """What zarr and xarray open: the path of a local store, an FsspecStore for a remote one."""
    if not is_remote(store):
        return str(local_path(store))
    import zarr

    filesystem(store)  # a clear error for an unknown protocol or a missing package
    return zarr.storage.FsspecStore.from_url(str(store), read_only=read_only,
                                             storage_options={"use_listings_cache": False})


def consolidated(store) -> bool:
    """Whether to open `store` through its consolidated metadata: yes for a remote one, where
    each metadata file is a request (a partition's writes took 260 requests without it); no for
    a local one (as always). Safe because a store's metadata is final at creation and re-
    consolidated under the lock when its attributes change (`store.record_provenance`)."""
    return is_remote(store)


# -- the few file operations besides zarr --------------------------------------------------------

def exists(target) -> bool:
    if not is_remote(target):
        return local_path(target).exists()
    fs, path = filesystem(target)
    return fs.exists(path)


def read_text(target) -> str:
    """The text of a small file or object; OSError (FileNotFoundError) when there is none."""
    if not is_remote(target):
        return local_path(target).read_text()
    fs, path = filesystem(target)
    return fs.cat_file(path).decode()


def write_text(target, text: str) -> None:
    """Replace a small file or object whole: a temporary file then a rename on disk (a reader
    never sees half of it); one PUT on an object store, which is atomic as well."""
    if is_remote(target):
        fs, path = filesystem(target)
        fs.pipe_file(path, text.encode())
        return
    path = local_path(target)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def create_exclusive(target, text: str) -> None:
    """Write `text` only if nothing is there; FileExistsError otherwise. Atomic on a local disk
    (O_CREAT | O_EXCL) and on S3 (a conditional PUT, ``If-None-Match: *``, which AWS S3, MinIO
    and moto honour); other remote filesystems check then write (fsspec's ``mode="create"``)."""
    if is_remote(target):
        fs, path = filesystem(target)
        fs.pipe_file(path, text.encode(), mode="create")
        return
    path = local_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def listdir(target) -> list[str]:
    """The names in a folder (or under a prefix); [] when there is none."""
    if not is_remote(target):
        try:
            return os.listdir(local_path(target))
        except FileNotFoundError:
            return []
    fs, path = filesystem(target)
    try:
        return [name.rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []


def delete(target) -> None:
    """Remove a file or object; nothing there is fine."""
    if not is_remote(target):
        local_path(target).unlink(missing_ok=True)
        return
    fs, path = filesystem(target)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass


def delete_tree(target) -> None:
    """Remove a folder (or every object under a prefix); nothing there is fine."""
    if not is_remote(target):
        shutil.rmtree(local_path(target), ignore_errors=True)
        return
    fs, path = filesystem(target)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def holds_anything(store) -> bool:
    """The store exists and is not empty (a store to resume or grow, or something else)."""
    if not is_remote(store):
        path = local_path(store)
        return path.is_dir() and any(path.iterdir())
    fs, path = filesystem(store)
    try:
        return bool(fs.ls(path, detail=False))
    except FileNotFoundError:
        return False


def check_reachable(store) -> None:
    """Refuse, naming the fix, a remote store that cannot be reached: unknown protocol, missing
    package, no credentials, no answer at the endpoint, no such bucket. One quick look (a
    short timeout, no retries), before anything is computed."""
    fs, path = filesystem(store)
    probe = _quick(fs)
    top = path.split("/", 1)[0]
    try:
        probe.info(f"{path}/zarr.json")
        return  # an existing store: reachable
    except FileNotFoundError:
        pass
    except Exception as err:
        raise _refusal(_unreachable(store, err)) from None
    try:
        if path != top:
            probe.info(top)
    except FileNotFoundError:
        raise _refusal(f"store {store}: there is no bucket {top!r} at the endpoint "
                         f"({_endpoint()}): create it first, or check AWS_ENDPOINT_URL") from None
    except Exception as err:
        raise _refusal(_unreachable(store, err)) from None


def _refusal(message: str):
    return StoreError(message)


def _quick(fs):
    """A copy of an S3 filesystem that gives up at once (botocore retries for ~25 s otherwise)."""
    if type(fs).__name__ != "S3FileSystem":
        return fs
    config = {**fs.storage_options.get("config_kwargs", {}), "connect_timeout": 5,
              "read_timeout": 20, "retries": {"max_attempts": 1}}
    return type(fs)(**{**fs.storage_options, "config_kwargs": config, "skip_instance_cache": True})


def _endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or \
        "AWS's default endpoint"


def _unreachable(store, err: Exception) -> str:
    kind = type(err).__name__
    first = (str(err).strip().splitlines() or [""])[0]
    if kind in ("NoCredentialsError", "PartialCredentialsError"):
        fix = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
    elif kind in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionError",
                  "ClientConnectorError", "ReadTimeoutError"):
        fix = f"check that the endpoint ({_endpoint()}) is up, or set AWS_ENDPOINT_URL"
    elif isinstance(err, PermissionError):
        fix = "check the credentials and the bucket's permissions"
    else:
        fix = "check the URL, the endpoint (AWS_ENDPOINT_URL) and the credentials"
    return f"store {store}: cannot reach it ({kind}: {first}): {fix}"
