"""Partitions of a `device: cuda` spec on the workers that hold a GPU (Dask worker resources).

A worker that holds a GPU declares the resource ``GPU=1``: the local cluster of a cuda run (one
worker per GPU), the workers of a batch cluster for a cuda spec, or a user's own ``dask worker
--resources GPU=1`` beside CPU-only workers. Where the cluster has such workers, each task of a
cuda spec asks for one (``dask.annotate``), so a GPU runs one partition at a time and no CPU-only
worker takes one. Where it has none (a cluster that declares nothing, an adaptive one with no
worker yet), the tasks ask for nothing and run on any worker, as every task of a cpu spec does.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

from ..kernels.vocabulary import SIMULATOR_ENV

GPU = "GPU"  # the worker resource's name
# How many GPUs the worker processes of a local cluster or of a batch job share out, one each
# (`clusters.start_local_cluster`, `jobqueue.cluster_kwargs`, `preload.use_one_gpu`)
GPU_COUNT_ENV = "TOKENSWEEP_WORKER_GPUS"


def on_gpu(spec) -> bool:
    """Does the spec (plain data or a parsed sweep; None: no spec) run on a CUDA device?"""
    device = spec.get("device") if isinstance(spec, dict) else getattr(spec, "device", "cpu")
    return device == "cuda"


def gpus_for(spec) -> int:
    """The GPUs a local run of `spec` gives its workers, one each: those seen here for a cuda
    spec, else 0 (CPU workers, one per core)."""
    return local_gpus() if on_gpu(spec) else 0


def local_gpus() -> int:
    """GPUs this process sees: numba's count, or torch's where numba-cuda is missing; 1 under
    numba-cuda's simulator (it simulates one device); 0 when neither finds one."""
    if os.environ.get(SIMULATOR_ENV) == "1":
        return 1
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:  # numba-cuda missing or no driver: ask torch, where installed
        pass
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def gpu_workers(client) -> int:
    """How many workers of the client's cluster declare the GPU resource."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return sum(1 for worker in workers if worker.get("resources", {}).get(GPU, 0) >= 1)


def routed_gpu_workers(spec: dict, client) -> int:
    """The GPU workers the tasks of `spec` go to: those of the client's cluster for a cuda spec;
    0 for a cpu spec, a cluster with none, or no client (not a Dask task runner)."""
    return gpu_workers(client) if on_gpu(spec) and client is not None else 0


def gpu_tasks(routed: int):
    """A context in which the tasks submitted ask for one GPU each, where `routed` GPU workers
    take them (`routed_gpu_workers`); else nothing is asked."""
    if not routed:
        return nullcontext()
    import dask

    return dask.annotate(resources={GPU: 1})
