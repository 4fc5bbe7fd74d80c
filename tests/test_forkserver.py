"""Local workers forked from a forkserver that imported their modules (flows/forkserver.py).

Each check runs in a fresh interpreter: a process has one forkserver, started once, and the
test session's own may have been started by another test under another environment.
"""

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from multiprocessing import forkserver as stdlib_forkserver
    from distributed import Client
    from tokensweep.flows import forkserver
    from tokensweep.flows.clusters import WORKER_PRELOAD, start_local_cluster

    def seen_on_worker():
        from prefect.settings import get_current_settings
        return {"api": str(get_current_settings().api.url),
                "imported": "tokensweep.pipeline.execute" in sys.modules,
                "gone": "TOKENSWEEP_TEST_GONE" in os.environ,
                "kept": os.environ.get("TOKENSWEEP_TEST_KEPT")}

    os.environ.pop("PREFECT_API_URL", None)
    os.environ["TOKENSWEEP_TEST_GONE"] = "1"
    before = forkserver.worker_start()
    forkserver.start([WORKER_PRELOAD])
    # known only after the forkserver imported Prefect: the run's server answers later
    os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    os.environ["TOKENSWEEP_TEST_KEPT"] = "2"
    del os.environ["TOKENSWEEP_TEST_GONE"]
    method, env = forkserver.worker_start()
    with start_local_cluster(2) as cluster, Client(cluster) as client:
        parents = sorted(set(client.run(os.getppid).values()))
        workers = list(client.run(seen_on_worker).values())
    server = stdlib_forkserver._forkserver._forkserver_pid
    os.environ["NUMBA_NUM_THREADS"] = "7"
    changed = forkserver.worker_start()
    print(json.dumps({"before": before, "method": method, "env": env, "parents": parents,
                      "server": server, "workers": workers, "changed": changed}))
""")


@pytest.mark.slow  # a LocalCluster in a fresh interpreter
def test_local_workers_are_forks_of_one_forkserver_and_get_the_environment_set_after_it():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == ["spawn", {}]  # no forkserver yet
    assert seen["method"] == "forkserver"
    handed = {k: v for k, v in seen["env"].items() if k not in ("TOKENSWEEP_STDOUT", "TOKENSWEEP_STDERR")}
    assert handed == {"PREFECT_API_URL": "http://127.0.0.1:9/api", "TOKENSWEEP_TEST_KEPT": "2",
                      "TOKENSWEEP_UNSET": "TOKENSWEEP_TEST_GONE"}  # the nanny exports these
    assert seen["parents"] == [seen["server"]]  # both workers forked by it
    for worker in seen["workers"]:
        assert worker["imported"]  # the pipeline came with the fork
        assert worker["api"] == "http://127.0.0.1:9/api"  # Prefect's settings read again
        assert worker["kept"] == "2" and not worker["gone"]  # set and removed since the start
    # a change that a module may have read on import in the forkserver: spawn instead
    assert seen["changed"] == ["spawn", {}]


LOADED = textwrap.dedent("""
    import json, os, sys
    from multiprocessing import forkserver as stdlib_forkserver
    from distributed import Client
    from numba.core.dispatcher import Dispatcher
    from tokensweep.flows import forkserver
    from tokensweep.flows.clusters import WORKER_PRELOAD, start_local_cluster

    def kernels_loaded():
        return sum(len(obj.overloads) for name, module in list(sys.modules.items())
                   if name.startswith("tokensweep.kernels")
                   for obj in vars(module).values() if isinstance(obj, Dispatcher))

    def to_stderr():
        print("a worker's line", file=sys.stderr, flush=True)

    spec = {"name": "k", "model": "stochastic_transformer", "grid": {"beta": [1.0], "d": [3],
            "n": 2}, "time": {"T": 1.0, "layers": 50_000_000, "checkpoints": 2}, "trajectories": 9}
    forkserver.start([WORKER_PRELOAD], spec)
    server = stdlib_forkserver._forkserver._forkserver_pid
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 2)  # as the CLI sends a run's stderr to STORE.log, after the forkserver started
    with start_local_cluster(1) as cluster, Client(cluster) as client:
        seen = {"parents": list(client.run(os.getppid).values()),
                "loaded": list(client.run(kernels_loaded).values())}
        client.run(to_stderr)
    print(json.dumps({**seen, "server": server, "here": kernels_loaded()}))
""")


@pytest.mark.slow  # a LocalCluster in a fresh interpreter
def test_workers_are_forks_with_the_sweeps_kernels_that_log_to_the_runs_stderr(tmp_path):
    """A run's workers are forks of its forkserver, with the sweep's kernels loaded by its tiny
    partition (kernel_preload.py; 50 million layers would take minutes), and they log to the run's
    stderr (STORE.log), not to the streams the forkserver started with."""
    log = tmp_path / "store.log"
    done = subprocess.run([sys.executable, "-c", LOADED, str(log)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["parents"] == [seen["server"]]
    assert seen["loaded"][0] > 0 and seen["here"] == 0  # loaded in the forkserver, not here
    assert "a worker's line" in log.read_text()
    assert "a worker's line" not in done.stderr


def test_every_catalog_sweep_cuts_to_a_tiny_one_with_its_configuration():
    """kernel_preload.tiny: the sweep the forkserver loads kernels with is each catalog sweep's
    model and options on one trajectory and a few layers."""
    from pathlib import Path

    from tokensweep.flows.kernel_preload import tiny
    from tokensweep.pipeline.spec.load import load_sweep, parse_sweep

    specs = sorted((Path(__file__).parents[1] / "catalog").glob("*.yaml"))
    assert len(specs) > 20
    from conftest import validates_here

    for path in specs:
        if not validates_here(path):
            continue
        full = load_sweep(path)
        cut = parse_sweep(tiny(full.model_dump(mode="json")))
        assert cut.model == full.model and cut.trajectories == 1, path.name
        assert cut.time.layers <= max(full.time.checkpoint_layers), path.name
        kept = {k for k in type(full).model_fields if k not in ("grid", "time", "trajectories", "threads",
                                                                  "store", "partition_traj")}
        assert {k: getattr(cut, k) for k in kept} == {k: getattr(full, k) for k in kept}, path.name


STOPPED = """
import os, sys
from multiprocessing import forkserver as stdlib
from tokensweep.flows import forkserver
forkserver.start(["os"])
pid = stdlib._forkserver._forkserver_pid
forkserver.stop()
try:
    os.kill(pid, 0)
    alive = True
except ProcessLookupError:
    alive = False
print(pid > 0, alive, forkserver.worker_start()[0], stdlib._forkserver._forkserver_pid)
"""


def test_the_command_ends_its_forkserver_before_it_returns():
    """forkserver.stop (what fast_exit calls as a command ends): the forkserver is gone, reaped,
    at once, not left tearing its interpreter down for seconds; a later cluster spawns."""
    done = subprocess.run([sys.executable, "-c", STOPPED], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False", "spawn", "None"]
