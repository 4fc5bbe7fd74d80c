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
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store import location
from tokensweep.pipeline.store.cube import read_status
from tokensweep.pipeline.store.failures import clear_error, read_error, write_error
from tokensweep.pipeline.store.layout import DONE
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.store.lock import read_lock, store_lock

BUCKET = "tokensweep"
# 2 cells x 2 blocks: each partition is tens of requests to the server, so few of them
SMALL = {**TINY, "grid": {"beta": [0.5, 2.0], "d": 3, "n": 2}, "trajectories": 6, "partition_traj": 3}
runner = CliRunner()


pytestmark = pytest.mark.slow  # a moto server for the module


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


def test_partitions_on_s3_resume_read_and_equal_a_local_store_bit_for_bit(s3, url, tmp_path):
    import tokensweep

    sweep = parse_sweep(SMALL, store=url)
    local = tmp_path / "local.zarr"
    assert prepare_store(sweep, url) == "created"
    prepare_store(parse_sweep(SMALL, store=str(local)), local)
    assert f"{_key(url)}/zarr.json" in s3.keys(BUCKET)
    partitions = len(Plan(sweep))
    for index in range(0, partitions, 2):  # half of them: a partial store
        run_partition(sweep, url, index)
        run_partition(sweep, local, index)
    remote, here = tokensweep.open(url), tokensweep.open(local)  # masked the same way
    assert remote.attrs["pending"] == here.attrs["pending"] > 0
    for name in OUTPUT_VARS:
        np.testing.assert_array_equal(remote[name].values, here[name].values)
    assert prepare_store(sweep, url) == "resumed"  # the same spec resumes, writing nothing
    for index in range(1, partitions, 2):
        run_partition(sweep, url, index)
    assert (read_status(url) == DONE).all()
    xr.testing.assert_identical(_cube(url), reference_cube(SMALL, tmp_path / "fresh.zarr"))
    result = runner.invoke(app, ["status", url])
    assert result.exit_code == 0, result.output
    assert f"tiny: {partitions} partitions: {partitions} done, 0 pending, 0 failed" in result.output


def test_lock_is_an_object_in_the_bucket_and_refuses_a_second_writer(s3, url, tmp_path):
    key = _key(url) + ".lock"
    with store_lock(url, flow_run_id=None) as owner:
        assert key in s3.keys(BUCKET)
        assert read_lock(url) == owner
        with pytest.raises(Exception, match="is being written by another sweep"):
            with store_lock(url):  # the conditional PUT refuses: the object exists
                pass
        spec = tmp_path / "small.json"  # YAML is a superset of JSON
        spec.write_text(json.dumps(SMALL))
        result = runner.invoke(app, ["run", str(spec), "--store", url])
        assert result.exit_code == 2, result.output
        assert (f"{url} is being written by another sweep (pid {os.getpid()} on "
                f"{socket.gethostname()}") in result.output
    assert key not in s3.keys(BUCKET)
    # a lock left by a dead process: reported, then broken by `tokensweep unlock`
    sweep = parse_sweep(SMALL, store=url)
    prepare_store(sweep, url)
    dead = subprocess.Popen(["true"])
    dead.wait()
    location.write_text(url + ".lock", json.dumps({"host": socket.gethostname(), "pid": dead.pid,
                                                   "since": "2026-01-01T00:00:00Z"}))
    assert "that process is gone, so the lock is stale" in runner.invoke(app, ["status", url]).output
    result = runner.invoke(app, ["unlock", url])
    assert result.exit_code == 0 and f"broke the lock held by pid {dead.pid}" in result.output
    assert key not in s3.keys(BUCKET)


def test_error_records_are_objects_beside_the_store(s3, url):
    key = _key(url) + ".errors/3.json"
    write_error(url, 3, {"error": "RuntimeError: boom", "host": "h"})
    assert key in s3.keys(BUCKET)
    assert read_error(url, 3) == {"partition": 3, "error": "RuntimeError: boom", "host": "h"}
    clear_error(url, 3)
    assert key not in s3.keys(BUCKET) and read_error(url, 3) is None
    clear_error(url, 3)  # nothing there is fine


def test_growing_an_s3_store_is_refused_with_the_fix(s3, url, tmp_path):
    prepare_store(parse_sweep(SMALL, store=url), url)
    before = sorted(s3.keys(BUCKET, _key(url)))
    spec = tmp_path / "more.json"
    spec.write_text(json.dumps({**SMALL, "trajectories": 20}))
    result = runner.invoke(app, ["run", str(spec), "--store", url])
    assert result.exit_code == 2, result.output
    assert "cannot grow a store in an object store (trajectories: 6 -> 20)" in result.output
    assert "aws s3 sync" in result.output and "new --store" in result.output
    assert sorted(s3.keys(BUCKET, _key(url))) == before  # nothing written


def test_bad_urls_endpoints_and_credentials_exit_2_in_one_line(s3, tmp_path, monkeypatch):
    spec = tmp_path / "small.json"
    spec.write_text(json.dumps(SMALL))
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    no_credentials = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
                      "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                      "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    cases = [
        (["run", str(spec), "--store", "nosuch://b/x.zarr"], {}, "Protocol not known: nosuch"),
        (["run", str(spec), "--store", "s3://no-such-bucket/x.zarr"], {},
         "there is no bucket 'no-such-bucket'"),
        (["run", str(spec), "--store", f"s3://{BUCKET}/x.zarr"], {"AWS_ENDPOINT_URL": closed},
         "check that the endpoint"),
        (["status", f"s3://{BUCKET}/x.zarr"], no_credentials, "set AWS_ACCESS_KEY_ID"),
        (["status", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
        (["report", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
        (["rerun", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
        (["unlock", f"s3://{BUCKET}/never-written.zarr"], {}, "no store at s3://"),
    ]
    for args, env, message in cases:
        with monkeypatch.context() as patch:
            for key, value in env.items():
                if value is None:
                    patch.delenv(key, raising=False)
                else:
                    patch.setenv(key, value)
            start = time.monotonic()
            result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, (args, result.output)
        assert time.monotonic() - start < 30, args  # no long retries against a dead endpoint


def _tokensweep(*args, cwd, env_extra=None, popen=False):
    """`tokensweep ARGS` in `cwd` (where a remote store's log and report go)."""
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", **(env_extra or {})}
    command = [TOKENSWEEP, *map(str, args)]
    if popen:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_sweep_on_s3_through_the_command_line_fails_resumes_and_matches_a_local_run(
        s3, url, tmp_path, prefect_server):
    import tokensweep

    spec = tmp_path / "small.json"
    spec.write_text(json.dumps(SMALL))
    name = url.rsplit("/", 1)[-1]
    lock, record = _key(url) + ".lock", _key(url) + ".errors/1.json"

    # a run with partition 1 failing; its lock is an object in the bucket while it runs
    run = _tokensweep("run", spec, "--store", url, "--workers", "2", "--no-progress", cwd=tmp_path,
                      env_extra={"TOKENSWEEP_FAIL_PARTITIONS": "1"}, popen=True)
    seen_lock = False
    while run.poll() is None:
        seen_lock = seen_lock or lock in s3.keys(BUCKET, _key(url))
        time.sleep(0.2)
    out, err = run.communicate()
    assert run.returncode == 1, out + err
    assert "1 partition(s) failed" in err
    assert seen_lock, "the lock never appeared in the bucket during the run"
    keys = s3.keys(BUCKET, _key(url))
    assert lock not in keys and record in keys  # released; the error kept beside the store
    assert (tmp_path / f"{name}.log").stat().st_size > 0  # logs stay local, in the current folder
    status = _tokensweep("status", url, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "4 partitions: 3 done, 0 pending, 1 failed" in status.stdout
    assert "RuntimeError: injected failure in partition 1" in status.stdout

    # the resume: only the failed partition is computed
    rerun = _tokensweep("rerun", url, "--workers", "2", "--no-progress", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "computed 1 of 4 partitions" in rerun.stdout
    assert record not in s3.keys(BUCKET, _key(url))
    assert (tmp_path / name.replace(".zarr", ".report") / "phase.png").is_file()
    report = _tokensweep("report", url, "--out", tmp_path / "again", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "again" / "report.md").is_file()

    # the same numbers, bit for bit, as the same spec run into a local store
    local = tmp_path / "local.zarr"
    xr.testing.assert_identical(_cube(url), reference_cube(SMALL, local))
    remote, here = tokensweep.open(url), tokensweep.open(local)
    assert remote.attrs["pending"] == here.attrs["pending"] == 0
    xr.testing.assert_identical(remote[OUTPUT_VARS].drop_attrs(), here[OUTPUT_VARS].drop_attrs())

    # the real entry point: an endpoint that does not answer is one line, exit 2, soon
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    dead = _tokensweep("status", url, cwd=tmp_path, env_extra={"AWS_ENDPOINT_URL": closed})
    assert dead.returncode == 2 and dead.stdout == "", dead.stdout + dead.stderr
    assert dead.stderr.startswith(f"error: store {url}: cannot reach it (EndpointConnectionError")
    assert len(dead.stderr.strip().splitlines()) == 1 and time.monotonic() - start < 60
