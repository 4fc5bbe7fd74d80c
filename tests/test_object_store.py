"""Stores in an object store (``s3://bucket/x.zarr``), against a real S3 server on loopback.

The server is moto's standalone server (`integration/s3.py`), started by this module: a separate
process speaking HTTP, reached the way any S3 endpoint is (``AWS_ENDPOINT_URL`` and credentials
in the environment), never a mock inside this process. The quick tests write stores and run
partitions in this process and drive the command line in-process; the slow one runs sweeps end to
end through ``tokensweep run`` (Prefect + Dask) with an injected failure, then status, rerun,
report and ``tokensweep.open``, and compares the cube with a local run bit for bit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import numpy as np
import pytest
import xarray as xr
from conftest import OUTPUT_VARS, TINY, TOKENSWEEP, reference_cube
from integration.s3 import MotoServer, S3Unavailable
from typer.testing import CliRunner

from tokensweep.flows.cli import app
from tokensweep.pipeline import location
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.failures import read_error, write_error, clear_error
from tokensweep.pipeline.lock import read_lock, store_lock
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec import parse_sweep
from tokensweep.pipeline.store import DONE, prepare_store, read_status

BUCKET = "tokensweep"
runner = CliRunner()


@pytest.fixture(scope="module")
def s3():
    """A moto server for this module, its endpoint and credentials exported (the workers and
    the command line inherit them), and one bucket."""
    try:
        server = MotoServer.start()
    except S3Unavailable as why:  # moto is in the `test` extra: CI has it
        pytest.skip(f"no S3 server could be started: {why}")
    old = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    server.create_bucket(BUCKET)
    yield server
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture
def url(s3, request):
    """A store URL of its own per test."""
    return f"s3://{BUCKET}/{request.node.name.replace('[', '-').rstrip(']')}.zarr"


def _key(url: str) -> str:
    """The key of a store URL inside its bucket."""
    return url[len(f"s3://{BUCKET}/"):]


def _cube(store):
    with xr.open_zarr(location.zarr_store(store, read_only=True), consolidated=False) as ds:
        cube = ds[OUTPUT_VARS].load()
    cube.attrs = {}
    return cube


def test_partitions_written_to_s3_equal_a_local_store_bit_for_bit(s3, url, tmp_path):
    sweep = parse_sweep(TINY, store=url)
    assert prepare_store(sweep, url) == "created"
    assert f"{_key(url)}/zarr.json" in s3.keys(BUCKET)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, url, index)
    assert (read_status(url) == DONE).all()
    assert prepare_store(sweep, url) == "resumed"  # the same spec resumes, writing nothing
    xr.testing.assert_identical(_cube(url), reference_cube(TINY, tmp_path / "local.zarr"))
    result = runner.invoke(app, ["status", url])
    assert result.exit_code == 0, result.output
    assert f"tiny: {len(Plan(sweep))} partitions: {len(Plan(sweep))} done, 0 pending, 0 failed" \
        in result.output


def test_lock_is_an_object_in_the_bucket_and_refuses_a_second_writer(s3, url):
    key = _key(url) + ".lock"
    with store_lock(url, flow_run_id=None) as owner:
        assert key in s3.keys(BUCKET)
        assert read_lock(url) == owner
        with pytest.raises(Exception, match="is being written by another sweep"):
            with store_lock(url):  # the conditional PUT refuses: the object exists
                pass
        result = runner.invoke(app, ["run", _spec_file(url), "--store", url])
        assert result.exit_code == 2, result.output
        assert (f"{url} is being written by another sweep (pid {os.getpid()} on "
                f"{socket.gethostname()}") in result.output
    assert key not in s3.keys(BUCKET)
    # a lock left by a dead process: reported, then broken by `tokensweep unlock`
    sweep = parse_sweep(TINY, store=url)
    prepare_store(sweep, url)
    dead = subprocess.Popen(["true"])
    dead.wait()
    location.write_text(url + ".lock", json.dumps({"host": socket.gethostname(), "pid": dead.pid,
                                                   "since": "2026-01-01T00:00:00Z"}))
    assert "that process is gone, so the lock is stale" in runner.invoke(app, ["status", url]).output
    result = runner.invoke(app, ["unlock", url])
    assert result.exit_code == 0 and f"broke the lock held by pid {dead.pid}" in result.output
    assert key not in s3.keys(BUCKET)


def _spec_file(url) -> str:
    path = f"/tmp/tokensweep-s3-spec-{os.getpid()}.json"  # YAML is a superset of JSON
    with open(path, "w") as f:
        json.dump(TINY, f)
    return path


def test_error_records_are_objects_beside_the_store(s3, url):
    key = _key(url) + ".errors/3.json"
    write_error(url, 3, {"error": "RuntimeError: boom", "host": "h"})
    assert key in s3.keys(BUCKET)
    assert read_error(url, 3) == {"partition": 3, "error": "RuntimeError: boom", "host": "h"}
    clear_error(url, 3)
    assert key not in s3.keys(BUCKET) and read_error(url, 3) is None
    clear_error(url, 3)  # nothing there is fine


def test_growing_an_s3_store_is_refused_with_the_fix(s3, url, tmp_path):
    prepare_store(parse_sweep(TINY, store=url), url)
    before = sorted(s3.keys(BUCKET, _key(url)))
    spec = tmp_path / "more.json"
    spec.write_text(json.dumps({**TINY, "trajectories": 20}))
    result = runner.invoke(app, ["run", str(spec), "--store", url])
    assert result.exit_code == 2, result.output
    assert "cannot grow a store in an object store (trajectories: 12 -> 20)" in result.output
    assert "aws s3 sync" in result.output and "new --store" in result.output
    assert sorted(s3.keys(BUCKET, _key(url))) == before  # nothing written


def _one_line_exit_2(args, env):
    """`tokensweep ARGS` as a user runs it: exit 2, one line on stderr, nothing on stdout."""
    full = {**os.environ, **env}
    for key in [k for k, v in env.items() if v is None]:
        full.pop(key)
    start = time.monotonic()
    result = subprocess.run([TOKENSWEEP, *args], capture_output=True, text=True, env=full,
                            timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr, time.monotonic() - start


def test_bad_urls_endpoints_and_credentials_exit_2_in_one_line(s3, tmp_path):
    spec = tmp_path / "tiny.json"
    spec.write_text(json.dumps(TINY))
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    no_credentials = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
                      "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                      "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    cases = [
        (["run", str(spec), "--store", "nosuch://b/x.zarr"], {}, "Protocol not known: nosuch"),
        (["run", str(spec), "--store", f"s3://no-such-bucket/x.zarr"], {},
         "there is no bucket 'no-such-bucket'"),
        (["run", str(spec), "--store", f"s3://{BUCKET}/x.zarr"], {"AWS_ENDPOINT_URL": closed},
         "check that the endpoint"),
        (["status", f"s3://{BUCKET}/x.zarr"], no_credentials, "set AWS_ACCESS_KEY_ID"),
        (["status", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
        (["report", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
        (["rerun", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
    ]
    for args, env, message in cases:
        stderr, seconds = _one_line_exit_2(args, env)
        assert message in stderr, (args, stderr)
        assert seconds < 60, (args, seconds)  # no long retries against a dead endpoint


def test_open_reads_an_s3_store_masked_like_a_local_one(s3, url, tmp_path):
    import tokensweep

    sweep = parse_sweep(TINY, store=url)
    prepare_store(sweep, url)
    for index in range(0, len(Plan(sweep)), 2):  # half the partitions: the rest pending
        run_partition(sweep, url, index)
    local = tmp_path / "half.zarr"
    prepare_store(parse_sweep(TINY, store=str(local)), local)
    for index in range(0, len(Plan(sweep)), 2):
        run_partition(sweep, local, index)
    remote, here = tokensweep.open(url), tokensweep.open(local)
    assert remote.attrs["pending"] == here.attrs["pending"] > 0
    for name in OUTPUT_VARS:
        np.testing.assert_array_equal(remote[name].values, here[name].values)
