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

    before = forkserver.start_method()
    forkserver.start([WORKER_PRELOAD])
    with start_local_cluster(2) as cluster, Client(cluster) as client:
        parents = sorted(set(client.run(os.getppid).values()))
        imported = all(client.run(lambda: "tokensweep.pipeline.execute" in sys.modules).values())
    server = stdlib_forkserver._forkserver._forkserver_pid
    unchanged = forkserver.start_method()
    os.environ["TOKENSWEEP_TEST_CHANGED"] = "1"
    changed = forkserver.start_method()
    print(json.dumps({"before": before, "parents": parents, "server": server,
                      "imported": imported, "unchanged": unchanged, "changed": changed}))
""")


def test_local_workers_are_forks_of_one_forkserver_only_while_the_environment_is_unchanged():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == "spawn"  # no forkserver yet
    assert seen["parents"] == [seen["server"]]  # both workers forked by it
    assert seen["imported"]  # the pipeline came with the fork
    assert seen["unchanged"] == "forkserver"
    assert seen["changed"] == "spawn"  # a fork would not see the new variable
