"""The options and arguments the `tokensweep` commands share (flows/cli.py, flows/looking.py)."""

import typer

# Defaults that are not plain values are shown with show_default: typer's help renders text
# like "[default: x]" inside a help string as rich markup, i.e. drops it.
StoreArg = typer.Argument(..., help="path or URL (s3://bucket/x.zarr) of a tokensweep zarr store",
                          show_default=False)
SpecArg = typer.Argument(..., help="YAML spec file, or the name of a catalog entry",
                         show_default=False)
StoreOpt = typer.Option(None, help="zarr store path, or URL (s3://bucket/x.zarr)",
                        show_default="the spec's `store`")
WorkersOpt = typer.Option(None, min=1, help="local Dask worker processes",
                          show_default="one per core")
ScaleOpt = typer.Option(None, help="small: the quick version (a minute or two on 2 cores); paper: the "
                        "paper's sizes (the spec's `scales` block)", show_default="small")
PartitionOpt = typer.Option(None, min=1, help="trajectories per partition",
                            show_default="the spec's, or the existing store's")
SchedulerOpt = typer.Option(None, help="address of an existing Dask scheduler (tcp://HOST:PORT)",
                            show_default="a new local cluster")
SchedulerFileOpt = typer.Option(None, help="scheduler file of an existing Dask cluster",
                                show_default="a new local cluster")
# A batch cluster (flows/jobqueue.py): options override the profile, which overrides jobqueue.yaml
ClusterOpt = typer.Option(None, help="where the workers run: local, slurm or pbs (batch jobs "
                          "through dask-jobqueue)", show_default="local, or the profile's")
ProfileOpt = typer.Option(None, help="batch-cluster settings named NAME in dask's config, "
                          "`tokensweep.clusters.NAME` (see docs/cluster.md)", show_default="none")
QueueOpt = typer.Option(None, help="batch queue (SLURM partition)",
                        show_default="the profile's, or the batch system's")
AccountOpt = typer.Option(None, help="account the jobs are charged to",
                          show_default="the profile's, or your default")
WalltimeOpt = typer.Option(None, help="time limit of each job, e.g. 04:00:00",
                           show_default="the profile's, or jobqueue.yaml's")
MemoryOpt = typer.Option(None, help="memory of each job, e.g. 8GB",
                         show_default="the profile's, or 2GiB per core")
JobsOpt = typer.Option(None, min=1, help="worker jobs (fewer if fewer partitions are left)",
                       show_default="the profile's, or 1")
CoresOpt = typer.Option(None, min=1, help="cores per job, one single-threaded worker each",
                        show_default="the profile's, or 1")
ProgressOpt = typer.Option(True, help="show a progress bar over partitions")
QuietOpt = typer.Option(False, "--quiet", "-q", help="print only errors")
VerboseOpt = typer.Option(False, "--verbose", "-v",
                          help="show Prefect's and Dask's logs here (instead of the progress bar) "
                               "rather than only in STORE.log")
