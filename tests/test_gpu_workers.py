"""`device: cuda` partitions on the workers that hold a GPU (flows/gpus.py), on real Dask clusters
without a GPU: numba-cuda's simulator stands for the device (NUMBA_ENABLE_CUDASIM=1, conftest).
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from conftest import CUDA_TINY

pytest.importorskip("numba_cuda")



@pytest.mark.slow  # a scheduler, two worker processes and a Prefect server
def test_cuda_partitions_go_only_to_the_gpu_worker(prefect_server, tmp_path):
    """A cluster of one worker with a (simulated) GPU that declares it and one CPU-only worker,
    on which the device kernel cannot run (simulator off): all 4 partitions are computed, on the
    GPU worker. Without the routing the CPU worker takes about half of them, and they fail."""
    from distributed import Nanny, Scheduler, SpecCluster

    from tokensweep.flows.run import run_sweep
    from tokensweep.pipeline.store.cube import read_status
    from tokensweep.pipeline.store.layout import DONE

    def worker(env, **options):
        return {"cls": Nanny, "options": {"nthreads": 1, "env": env, **options}}

    workers = {"gpu": worker({"NUMBA_ENABLE_CUDASIM": "1"}, resources={"GPU": 1}),
               "cpu": worker({"NUMBA_ENABLE_CUDASIM": "0"})}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    store = str(tmp_path / "routed.zarr")
    with SpecCluster(workers=workers, scheduler=scheduler) as cluster:
        summary = run_sweep({**CUDA_TINY, "store": store}, store, scheduler=cluster.scheduler_address,
                            progress=False, report=False)
    assert summary["computed"] == 4
    assert (read_status(store) == DONE).all()


@pytest.mark.slow  # a local cluster
def test_a_local_cuda_cluster_has_one_worker_per_gpu_each_on_its_own(monkeypatch):
    """start_local_cluster(gpus=2), as a cuda run on a machine with two GPUs: two workers, each
    declaring one GPU and seeing only its own (CUDA_VISIBLE_DEVICES, set before CUDA starts)."""
    from distributed import Client

    from tokensweep.flows.clusters import start_local_cluster
    from tokensweep.flows.gpus import gpu_workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with start_local_cluster(gpus=2) as cluster, Client(cluster) as client:
        assert gpu_workers(client) == 2
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
    assert sorted(seen.values()) == ["3", "5"], seen


@pytest.mark.slow  # a scheduler and a worker command with two processes
def test_a_gpu_jobs_worker_processes_each_use_their_own_gpu(tmp_path):
    """The worker command of a cuda spec's SLURM job (dask-jobqueue's own job script), run as the
    job would run it on a node given GPUs 3 and 5: two worker processes, each declaring one GPU
    and seeing only its own."""
    import shlex
    import subprocess
    import sys
    import time

    from distributed import Client

    from tokensweep.flows.gpus import gpu_workers
    from tokensweep.flows.jobqueue import build_cluster, resolve_options

    options = replace(resolve_options("slurm", cores=2),
                      extra={"scheduler-options": {"dashboard_address": ":0"}})
    cluster = build_cluster(options, "http://127.0.0.1:9/api", gpu=True)
    try:
        script = cluster.job_script()
        command = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
        argv = shlex.split(command.replace("dummy-name", "job-7"))
        argv[0] = sys.executable
        env = {**os.environ, "TOKENSWEEP_WORKER_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3,5"}
        worker = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(2, timeout=120)
                deadline = time.monotonic() + 30
                while gpu_workers(client) < 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert gpu_workers(client) == 2
                seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        finally:
            os.killpg(worker.pid, 15)
            worker.wait(timeout=60)
    finally:
        cluster.close()
    assert sorted(seen.values()) == ["3", "5"], seen
