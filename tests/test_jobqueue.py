"""Batch-cluster options, profiles and the worker job scripts, with no batch daemon needed.

The job scripts are dask-jobqueue's own (`SLURMCluster.job_script()`, `PBSCluster.job_script()`,
their scheduler started in this process); the real SLURM run is
tests/integration/slurm/test_slurm.py (`pytest -m slurm`).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace

import dask.config
import pytest

from tokensweep.flows.jobqueue import (
    JobqueueError,
    JobqueueOptions,
    build_cluster,
    check_submit_command,
    fit_to_work,
    resolve_options,
)

API = "http://10.0.0.5:4200/api"
PROFILES = {"tokensweep.clusters": {
    "short": {"cluster": "slurm", "queue": "short", "account": "proj7", "walltime": "01:00:00",
              "memory": "8GB", "jobs": 4, "cores": 2,
              "job-extra-directives": ["--constraint=avx2"],
              "job-script-prologue": ["source /opt/venv/bin/activate"]},
    "pbs-long": {"cluster": "pbs", "queue": "long", "walltime": "48:00:00", "cores": 4},
    "typo": {"cluster": "slurm", "wallclock": "01:00:00"},
}}


@pytest.fixture
def profiles():
    with dask.config.set(PROFILES):
        yield


def test_command_line_overrides_the_profile(profiles):
    options = resolve_options(None, "short", walltime="02:30:00", jobs=None, cores=None, queue=None,
                              account=None, memory=None)
    assert options == JobqueueOptions(
        kind="slurm", queue="short", account="proj7", walltime="02:30:00", memory="8GB", jobs=4,
        cores=2, extra={"job-extra-directives": ["--constraint=avx2"],
                        "job-script-prologue": ["source /opt/venv/bin/activate"]},
        profile="short")
    assert resolve_options("slurm", None, jobs=3).jobs == 3
    assert resolve_options(None, None, jobs=None) is None
    assert resolve_options("local", None) is None


@pytest.mark.parametrize("kind, profile, given, message", [
    (None, "nope", {}, "--cluster-profile 'nope' is not in dask's config `tokensweep.clusters` "
                       "(defined: pbs-long, short, typo)"),
    ("slurm", None, {"walltime": "4h"}, "--walltime '4h' is not a SLURM time limit"),
    ("pbs", None, {"walltime": "1-00:00:00"}, "--walltime '1-00:00:00' is not a PBS time limit"),
    ("slurm", None, {"memory": "lots"}, "--memory 'lots' is not an amount of memory"),
    ("sge", None, {}, "--cluster 'sge' is not known: use local, slurm or pbs"),
    (None, None, {"queue": "short"}, "are for a batch cluster: add --cluster slurm"),
    ("slurm", "pbs-long", {}, "profile 'pbs-long' is for cluster 'pbs', not 'slurm'"),
    (None, "typo", {}, "profile 'typo': unknown setting(s) wallclock"),
])
def test_bad_options_are_refused_naming_the_option(profiles, kind, profile, given, message):
    with pytest.raises(JobqueueError, match=re.escape(message)):
        resolve_options(kind, profile, **given)


@pytest.mark.skipif(shutil.which("qsub") is not None, reason="qsub is installed here")
def test_no_submit_command_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobqueueError, match="`qsub` is not on PATH: run tokensweep on a PBS login"):
        check_submit_command(resolve_options("pbs", None))


@pytest.mark.parametrize("jobs, cores, partitions, expected", [
    (4, 2, 100, (4, 2)),  # enough work for every worker
    (4, 2, 5, (2, 2)),    # 5 partitions: 2 jobs of 2 workers, never 6 workers
    (4, 8, 3, (1, 3)),    # fewer partitions than one job's cores: one smaller job
    (4, 2, 0, (0, 2)),    # nothing to run: no job
])
def test_never_more_workers_than_partitions(jobs, cores, partitions, expected):
    fitted = fit_to_work(JobqueueOptions(kind="slurm", jobs=jobs, cores=cores), partitions)
    assert (fitted.jobs, fitted.cores) == expected
    assert fitted.jobs * fitted.cores <= max(partitions, 0) or partitions == 0


ENVIRONMENT = ["export NUMBA_NUM_THREADS=1",
               'export NUMBA_CACHE_DIR="${TMPDIR:-/tmp}/${USER:-tokensweep}/numba-cache"',
               f"export PREFECT_API_URL={API}", "export PREFECT_SERVER_ANALYTICS_ENABLED=false",
               "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s "
               "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL=5s"]


def job_script(options: JobqueueOptions, **kwargs) -> str:
    quiet = {**options.extra, "scheduler-options": {"dashboard_address": ":0"}}
    cluster = build_cluster(replace(options, extra=quiet), API, **kwargs)
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def test_slurm_job_script_sets_the_worker_environment(profiles, tmp_path):
    options = resolve_options(None, "short")
    script = job_script(options, job_name="tokensweep-fig3", log_directory=str(tmp_path / "jobs"))
    lines = script.splitlines()
    for directive in ("#SBATCH -J tokensweep-fig3", "#SBATCH -p short", "#SBATCH -A proj7",
                      "#SBATCH -t 01:00:00", "#SBATCH -n 1", "#SBATCH --cpus-per-task=2",
                      "#SBATCH --constraint=avx2", f"#SBATCH -e {tmp_path / 'jobs'}/tokensweep-fig3-%J.err"):
        assert directive in lines, (directive, script)
    assert any(line.startswith("#SBATCH --mem=") for line in lines), script
    # the environment first, then the user's own prologue, then the worker
    for line in ENVIRONMENT:
        assert line in script, (line, script)
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert lines.index(ENVIRONMENT[-1]) < lines.index("source /opt/venv/bin/activate") < lines.index(worker)
    # one single-threaded worker process per core
    assert "--nthreads 1" in worker and "--nworkers 2" in worker, worker


def test_pbs_job_script_sets_the_worker_environment(profiles):
    script = job_script(resolve_options(None, "pbs-long", account="proj7"))
    for directive in ("#PBS -q long", "#PBS -A proj7", "#PBS -l walltime=48:00:00",
                      "#PBS -l select=1:ncpus=4:mem="):
        assert directive in script, (directive, script)
    for line in ENVIRONMENT:
        assert line in script, (line, script)
    worker = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
    assert "--nthreads 1" in worker and "--nworkers 4" in worker, worker


@pytest.mark.parametrize("args, message", [
    (["--cluster-profile", "nope"], "error: --cluster-profile 'nope' is not in dask's config"),
    (["--cluster-profile", "typo"], "error: profile 'typo': unknown setting(s) wallclock"),
    (["--cluster", "slurm", "--walltime", "4h"], "error: --walltime '4h' is not a SLURM time limit"),
    (["--cluster", "slurm", "--workers", "2"], "error: --cluster slurm starts its own workers"),
])
def test_command_line_exits_2_with_one_line(args, message, cli, tmp_path, write_spec, tiny_spec):
    """A profile read from a dask config file (DASK_CONFIG), as on a login node."""
    import yaml

    (tmp_path / "dask").mkdir()
    (tmp_path / "dask" / "tokensweep.yaml").write_text(yaml.safe_dump(
        {"tokensweep": {"clusters": {k: v for k, v in PROFILES["tokensweep.clusters"].items()}}}))
    store = tmp_path / "never.zarr"
    result = cli("run", write_spec(tiny_spec), "--store", store, *args,
                 env_extra={"DASK_CONFIG": str(tmp_path / "dask")})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert not store.exists()


def test_ctrl_c_stays_a_keyboard_interrupt():
    """dask_jobqueue installs a SIGINT handler calling sys.exit() on import: tokensweep undoes it,
    so that Ctrl-C still stops a run with exit 130 and its resume line."""
    import subprocess
    import sys

    # the child starts as from a terminal: a shell's background job (`cmd &`) would start it with
    # SIGINT ignored, which Python then keeps instead of installing its default handler
    code = ("import signal\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from tokensweep.flows.jobqueue import resolve_options\n"
            "resolve_options('slurm', None)\n"
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_cuda_specs_workers_each_declare_one_gpu(profiles):
    # flows/gpus.py: the tasks of a cuda spec ask for the resource GPU = 1; the jobs' workers
    # declare it, one per worker process, after the profile's own worker arguments
    with dask.config.set({"jobqueue.slurm.worker-extra-args": ["--lifetime", "55m"]}):
        gpu = job_script(resolve_options(None, "short"), gpu=True)
        cpu = job_script(resolve_options(None, "short"))
    worker = next(line for line in gpu.splitlines() if "distributed.cli.dask_worker" in line)
    assert "--lifetime 55m --resources GPU=1 --preload tokensweep.flows.preload" in worker, worker
    # one GPU per worker process (cores = GPUs per job), each its own: preload.use_one_gpu
    assert "--nworkers 2" in worker and "export TOKENSWEEP_WORKER_GPUS=2" in gpu, gpu
    assert "--resources" not in cpu and "--lifetime 55m" in cpu and "GPUS" not in cpu, cpu
