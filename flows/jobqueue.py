"""Sweeps on a batch system: a dask-jobqueue cluster (SLURM or PBS) sized to the work.

``tokensweep run SPEC --cluster slurm`` builds a ``dask_jobqueue.SLURMCluster`` (``pbs``: a
``PBSCluster``) whose scheduler runs in the tokensweep process and whose workers are batch
jobs, each of ``cores`` single-threaded worker processes. The flow then runs on it as on any
existing cluster (by address), and the jobs are cancelled when the sweep ends, however it ends.

Settings come, lowest first, from dask-jobqueue's own config (``jobqueue.slurm`` /
``jobqueue.pbs`` in any dask config file), a named profile ``tokensweep.clusters.NAME`` in
dask's config (e.g. ``~/.config/dask/tokensweep.yaml``), and the command line. A profile holds
``cluster`` (slurm | pbs), ``queue``, ``account``, ``walltime``, ``memory``, ``jobs``, ``cores``
and any other key of dask-jobqueue's config for that cluster (``job-extra-directives``,
``job-script-prologue``, ``interface``, ``log-directory``, ...), passed on as is.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

from ..pipeline.store import location
from .clusters import IDLE_CONFIG, LOCAL_CLUSTER_CONFIG, WORKER_PRELOAD, dask_environment
from .gpus import GPU, GPU_COUNT_ENV, on_gpu

KINDS = {  # --cluster NAME: dask_jobqueue's class, submit command, walltime format
    "slurm": ("SLURMCluster", "sbatch",
              re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$"), "[D-]HH:MM:SS, HH:MM or minutes"),
    "pbs": ("PBSCluster", "qsub", re.compile(r"^\d+(:\d{1,2}){0,2}$"), "HH:MM:SS"),
}
OWN_KEYS = ("cluster", "queue", "account", "walltime", "memory", "jobs", "cores")
DEFAULT_CORES, DEFAULT_MEMORY_PER_CORE = 1, "2GiB"
# Replace jobs that ended (walltime, scancel, a lost node) this often; a sweep outlives its jobs.
KEEP_SCALED_S = 2.0


def import_dask_jobqueue():
    """dask_jobqueue, imported without the SIGINT handler it installs (dask_jobqueue.runner calls
    sys.exit() on SIGINT, which would turn Ctrl-C into a silent exit 0 instead of
    KeyboardInterrupt: tokensweep's exit 130 and its resume line)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        import dask_jobqueue
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGINT, previous)
    return dask_jobqueue


class JobqueueError(ValueError):
    """Options a batch cluster cannot be built from; the message names the option and the fix."""


@dataclass(frozen=True)
class JobqueueOptions:
    """One batch cluster as asked: where (kind, queue, account), how big and how long."""

    kind: str
    queue: str | None = None
    account: str | None = None
    walltime: str | None = None
    memory: str | None = None
    jobs: int = 1
    cores: int = DEFAULT_CORES
    extra: dict = field(default_factory=dict)  # other dask-jobqueue settings, from a profile
    profile: str | None = None

    def describe(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in (("queue", self.queue), ("account", self.account),
                                                  ("walltime", self.walltime)) if v)
        return (f"{self.kind.upper()}: {self.jobs} job(s) x {self.cores} core(s)"
                + (f" ({where})" if where else "") + (f", profile {self.profile}" if self.profile else ""))


def profiles() -> dict:
    """The named profiles in dask's config: ``tokensweep.clusters``."""
    import dask.config

    return dict(dask.config.get("tokensweep.clusters", default=None) or {})


def resolve_options(kind: str | None, profile: str | None = None, **given) -> JobqueueOptions | None:
    """The batch cluster asked for on the command line (None: not a batch cluster), its values
    checked. `given` are the command-line values (None: not given). (`check_submit_command`
    checks that jobs can be submitted from here.)"""
    settings: dict = {}
    if profile is not None:
        known = profiles()
        if profile not in known:
            names = ", ".join(sorted(known)) or "none"
            raise JobqueueError(f"--cluster-profile {profile!r} is not in dask's config "
                                f"`tokensweep.clusters` (defined: {names}): add it to a dask config "
                                "file such as ~/.config/dask/tokensweep.yaml (see docs/cluster.md)")
        settings = {str(k).replace("_", "-"): v for k, v in dict(known[profile] or {}).items()}
    kind = kind or settings.get("cluster")
    if kind in (None, "local"):
        if profile is not None or any(v is not None for v in given.values()):
            raise JobqueueError("--cluster-profile, --queue, --account, --walltime, --memory, --jobs "
                                "and --cores are for a batch cluster: add --cluster slurm or "
                                "--cluster pbs (or `cluster:` in the profile)")
        return None
    if kind not in KINDS:
        raise JobqueueError(f"--cluster {kind!r} is not known: use local, slurm or pbs")
    if settings.get("cluster", kind) != kind:
        raise JobqueueError(f"profile {profile!r} is for cluster {settings['cluster']!r}, not "
                            f"{kind!r}: drop --cluster or use another profile")
    settings.update({k: v for k, v in given.items() if v is not None})
    return _checked(kind, settings, profile)


def _checked(kind: str, settings: dict, profile: str | None) -> JobqueueOptions:
    import dask.config
    from dask.utils import parse_bytes

    import_dask_jobqueue()  # registers its `jobqueue.*` defaults in dask's config
    _, _, walltime_format, walltime_hint = KINDS[kind]
    source = f"profile {profile!r}" if profile else "the command line"
    allowed = set(dask.config.get(f"jobqueue.{kind}")) - {"cores", "memory", "processes"}
    unknown = sorted(set(settings) - set(OWN_KEYS) - allowed)
    if unknown:
        raise JobqueueError(f"{source}: unknown setting(s) {', '.join(unknown)}: use "
                            f"{', '.join(OWN_KEYS)} or a key of dask-jobqueue's `jobqueue.{kind}` config")
    walltime = settings.get("walltime")
    if walltime is not None and not walltime_format.match(str(walltime)):
        raise JobqueueError(f"--walltime {walltime!r} is not a {kind.upper()} time limit: give "
                            f"{walltime_hint}, e.g. 04:00:00")
    for name in ("jobs", "cores"):
        value = settings.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise JobqueueError(f"{source}: {name} must be a whole number >= 1, not {value!r}")
    cores = settings.get("cores", DEFAULT_CORES)
    memory = settings.get("memory")
    try:
        if memory is not None and parse_bytes(str(memory)) <= 0:
            raise ValueError
    except ValueError:
        raise JobqueueError(f"--memory {memory!r} is not an amount of memory per job: give e.g. "
                            "4GB or 500MiB") from None
    extra = {k: v for k, v in settings.items() if k not in OWN_KEYS}
    return JobqueueOptions(
        kind=kind, queue=settings.get("queue"), account=settings.get("account"),
        walltime=None if walltime is None else str(walltime),
        memory=None if memory is None else str(memory), jobs=settings.get("jobs", 1), cores=cores,
        extra=extra, profile=profile)


def check_submit_command(options: JobqueueOptions) -> None:
    """The batch system's submit command must be here: this is a login node."""
    submit = KINDS[options.kind][1]
    if shutil.which(submit) is None:
        raise JobqueueError(f"--cluster {options.kind}: `{submit}` is not on PATH: run tokensweep "
                            f"on a {options.kind.upper()} login node (or one that can submit jobs)")


def fit_to_work(options: JobqueueOptions, partitions: int) -> JobqueueOptions:
    """Never more worker processes than partitions to run: fewer jobs, or one smaller job."""
    if partitions == 0:
        return replace(options, jobs=0)
    if partitions < options.cores:
        return replace(options, jobs=1, cores=max(partitions, 1))
    return replace(options, jobs=min(options.jobs, partitions // options.cores))


def job_script_prologue(api_url: str) -> list[str]:
    """What every worker job sets before its Python starts (docs/cluster.md): one thread per
    kernel, a node-local numba cache (a shared one races), one Prefect API, no analytics, none of
    distributed's idle profiling (`clusters.IDLE_CONFIG`)."""
    idle = " ".join(f"{name}={value}" for name, value in dask_environment(IDLE_CONFIG).items())
    return [
        "export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1",
        'export NUMBA_CACHE_DIR="${TMPDIR:-/tmp}/${USER:-tokensweep}/numba-cache"',
        f"export PREFECT_API_URL={api_url}",
        "export PREFECT_SERVER_ANALYTICS_ENABLED=false",
        f"export {idle}",
    ]


def cluster_kwargs(options: JobqueueOptions, api_url: str, *, job_name: str = "tokensweep",
                   log_directory: str | None = None, gpu: bool = False) -> dict:
    """Keyword arguments of the dask-jobqueue class: one single-threaded process per core; with
    `gpu` (a cuda spec's jobs) each process declares one GPU (`gpus.py`) and uses the one its
    index picks among the job's (`preload.use_one_gpu`), so a job should have as many cores as
    GPUs (the profile's job-extra-directives asking the batch system for them)."""
    extra = {k.replace("-", "_"): v for k, v in options.extra.items()}
    prologue = job_script_prologue(api_url) + list(extra.pop("job_script_prologue", None) or [])
    if gpu:
        import dask

        given = extra.get("worker_extra_args", dask.config.get(f"jobqueue.{options.kind}.worker-extra-args"))
        extra["worker_extra_args"] = [*(given or []), "--resources", f"{GPU}=1", "--preload", WORKER_PRELOAD]
        prologue.append(f"export {GPU_COUNT_ENV}={options.cores}")
    memory = options.memory or _default_memory(options.cores)
    kwargs = dict(cores=options.cores, processes=options.cores, memory=memory,
                  job_script_prologue=prologue, job_name=job_name, **extra)
    kwargs.update({k: v for k, v in (("queue", options.queue), ("account", options.account),
                                     ("walltime", options.walltime)) if v is not None})
    if log_directory and "log_directory" not in kwargs:
        kwargs["log_directory"] = log_directory
    return kwargs


def _default_memory(cores: int) -> str:
    from dask.utils import format_bytes, parse_bytes

    return format_bytes(cores * parse_bytes(DEFAULT_MEMORY_PER_CORE)).replace(" ", "")


def build_cluster(options: JobqueueOptions, api_url: str, **kwargs):
    """The dask-jobqueue cluster (its scheduler starts here; no job is submitted yet)."""
    import dask

    dask.config.set(LOCAL_CLUSTER_CONFIG)  # the scheduler runs in this process
    cluster_class = getattr(import_dask_jobqueue(), KINDS[options.kind][0])
    return cluster_class(**cluster_kwargs(options, api_url, **kwargs))


async def _replace_ended_jobs(cluster, jobs: int, seen: set, stop: threading.Event) -> None:
    """Resubmit jobs that ended (walltime, scancel, a lost node), then keep `jobs` jobs.

    A job has ended when every worker it started has left the scheduler. (dask's SpecCluster
    notices that only for one-worker jobs; a job of several processes would never come back.)
    """
    if stop.is_set():  # the sweep is over: its jobs are being cancelled
        return
    alive = [str(w["name"]) for w in cluster.scheduler_info["workers"].values()]
    for name, job in list(cluster.workers.items()):
        if any(w == str(name) or w.startswith(f"{name}-") for w in alive):
            seen.add(job)
        elif job in seen:
            seen.discard(job)
            cluster.worker_spec.pop(name, None)
            cluster.workers.pop(name, None)
            await job.close()  # cancels the job, in case it is only unreachable
    await _submit(cluster, jobs)


async def _submit(cluster, jobs: int) -> None:
    """Scale to `jobs` jobs and wait for the submissions, so that a refused one raises here."""
    cluster.scale(jobs=jobs)
    await cluster._correct_state()


async def _cancel_jobs(cluster) -> None:
    """Cancel every job this cluster submitted (dask-jobqueue's Job.close runs scancel / qdel).

    Job.close leaves the job's status "running", which distributed's SpecCluster.close then
    asserts against (dask-jobqueue 0.9 with distributed 2026): so the status is set here."""
    from distributed.core import Status

    jobs = list(cluster._created)
    await asyncio.gather(*(job.close() for job in jobs if job.status != Status.closed))
    for job in jobs:
        job.status = Status.closed


@contextmanager
def jobqueue_cluster(options: JobqueueOptions, partitions: int, *, job_name: str = "tokensweep",
                     log_directory: str | None = None, gpu: bool = False):
    """Submit the worker jobs, yield the scheduler's address, cancel every job at the end
    (success, failure or Ctrl-C). Jobs that end early are replaced while the sweep runs."""
    from .server import ensure_server

    options = fit_to_work(options, partitions)
    cluster = build_cluster(options, ensure_server(), job_name=job_name,
                            log_directory=log_directory, gpu=gpu)
    stop, seen = threading.Event(), set()

    def keep_scaled():
        while not stop.wait(KEEP_SCALED_S):
            cluster.loop.add_callback(_replace_ended_jobs, cluster, options.jobs, seen, stop)

    keeper = threading.Thread(target=keep_scaled, name="tokensweep-jobqueue", daemon=True)
    try:
        try:
            cluster.sync(_submit, cluster, options.jobs)
        except RuntimeError as err:  # sbatch / qsub refused the job: a bad queue, account, ...
            said = str(err).split("stderr:", 1)[-1]  # dask-jobqueue quotes the command's stderr
            raise JobqueueError(f"{KINDS[options.kind][1]} refused the worker job: "
                                f"{' '.join(said.split())[:300]}") from None
        keeper.start()
        yield cluster.scheduler_address
    finally:
        stop.set()
        # a second Ctrl-C must not leave jobs queued: cancelling them takes a moment
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            if keeper.is_alive():
                keeper.join()
            cluster.sync(_cancel_jobs, cluster)
            cluster.close()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def batch_cluster(options: JobqueueOptions | None, partitions: int, sweep):
    """`jobqueue_cluster` for a sweep: jobs named after it (``squeue -n tokensweep-NAME``), their
    logs in ``STORE.jobs/`` (NAME.jobs/ here for a remote store); a context yielding None when there is no batch cluster."""
    if options is None:
        return nullcontext(None)
    return jobqueue_cluster(options, partitions,
                            job_name="tokensweep-" + re.sub(r"[^\w.-]", "_", sweep.name),
                            log_directory=str(location.local_sibling(sweep.store, ".jobs").absolute()),
                            gpu=on_gpu(sweep))
