"""Local workers forked from a forkserver that imported their modules (flows/forkserver.py).

Each check runs in a fresh interpreter: a process has one forkserver, started once, and the
test session's own may have been started by another test under another environment.
"""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from multiprocessing import forkserver as stdlib_forkserver
    from distributed import Client
    from tokensweep.flows import forkserver
    from tokensweep.flows.run import WORKER_PRELOAD, start_local_cluster

    def seen_on_worker():
        from prefect.settings import get_current_settings
        return {"api": str(get_current_settings().api.url),
                "imported": "tokensweep.pipeline.execute" in sys.modules}

    os.environ.pop("PREFECT_API_URL", None)
    before = forkserver.worker_start()
    forkserver.start([WORKER_PRELOAD])
    # known only after the forkserver imported Prefect: the run's server answers later
    os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    method, env = forkserver.worker_start()
    with start_local_cluster(2) as cluster, Client(cluster) as client:
        parents = sorted(set(client.run(os.getppid).values()))
        workers = list(client.run(seen_on_worker).values())
    server = stdlib_forkserver._forkserver._forkserver_pid
    os.environ["TOKENSWEEP_TEST_CHANGED"] = "1"
    changed = forkserver.worker_start()
    print(json.dumps({"before": before, "method": method, "env": env, "parents": parents,
                      "server": server, "workers": workers, "changed": changed}))
""")


def test_local_workers_are_forks_of_one_forkserver_and_get_the_prefect_api_set_after_it():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == ["spawn", {}]  # no forkserver yet
    assert seen["method"] == "forkserver"
    assert seen["env"] == {"PREFECT_API_URL": "http://127.0.0.1:9/api"}  # the nanny exports it
    assert seen["parents"] == [seen["server"]]  # both workers forked by it
    for worker in seen["workers"]:
        assert worker["imported"]  # the pipeline came with the fork
        assert worker["api"] == "http://127.0.0.1:9/api"  # Prefect's settings read again
    # a change that a module may have read on import in the forkserver: spawn instead
    assert seen["changed"] == ["spawn", {}]
