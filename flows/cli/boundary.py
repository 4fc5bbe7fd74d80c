"""`tokensweep boundary SPEC --level p`: the adaptive boundary search (`pipeline/search.py`) on
the sweep flow.

Every round of the search is one run of the Prefect ``sweep`` flow (`run.run_sweep`) that grows the
store of one value of the other axes; all rounds share one local Dask cluster, started here once
(a cluster per round would cost seconds each). Stores: ``NAME.boundary/<cell>-N<count>.zarr`` beside the
spec's store (or under --store); at the end ``boundary.md`` / ``boundary.html`` there give each
cell's interval and cost against a dense grid (`pipeline/report/search_page.py`). Interrupted, the same command resumes: the search replays its
looks on what the stores hold and computes only what is missing.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from .common import fail, interrupted, logs_to

# what `--outcome` may count (pipeline.search.OUTCOMES' keys: its help, without importing it)
OUTCOME_NAMES = ("antipodal", "single", "any_pair")


def boundary(
    spec: str = typer.Argument(..., help="YAML spec file, or the name of a catalog entry",
                               show_default=False),
    level: float = typer.Option(..., help="the probability whose crossing is located, in (0, 1)",
                                show_default=False),
    width: float = typer.Option(0.05, help="stop when the interval is at most this wide"),
    outcome: str = typer.Option("antipodal", help=f"what is counted: {', '.join(OUTCOME_NAMES)}"),
    axis: Optional[str] = typer.Option(None, help="the axis searched (its range: the spec's smallest "
                                       "and largest value)", show_default="beta, or sigma for the "
                                       "hybrid model"),
    confidence: float = typer.Option(0.95, help="coverage of the interval"),
    max_trajectories: int = typer.Option(2**17, min=1, help="most trajectories per point"),
    store: Optional[str] = typer.Option(None, help="folder of the search's stores",
                                        show_default="NAME.boundary beside the spec's store"),
    workers: Optional[int] = typer.Option(None, min=1, help="local Dask worker processes",
                                          show_default="one per core"),
    as_json: bool = typer.Option(False, "--json", help="print the result as a JSON list"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the result"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="show Prefect's and Dask's logs"),
):
    """Locate where P(outcome) crosses --level along beta (sigma: hybrid), per other-axes value.

    To --width, with a --confidence interval; resumable."""
    from ...pipeline.errors import SpecError, StoreError
    from ...pipeline.search import OUTCOMES, Design, describe
    from ...pipeline.search_store import boundary_folder, boundary_search, check_request, default_axis
    from ...pipeline.spec.load import load_sweep

    try:
        sweep = load_sweep(spec)
        axis = axis or default_axis(sweep)
        design = Design(level=level, width=width, confidence=confidence,
                        max_trajectories=max_trajectories)
        check_request(sweep, axis, outcome, design)
    except (SpecError, StoreError) as err:
        fail(str(err))
    folder = Path(store) if store else boundary_folder(sweep)
    say = (lambda line: None) if (quiet or as_json) else typer.echo
    say(f"{sweep.name}: where {OUTCOMES[outcome].split(':')[0]} crosses {level:g} along {axis}, "
        f"to width {width:g} ({confidence:.0%}); stores in {folder} (logs: {folder}.log)")
    try:
        with logs_to(Path(f"{folder}.log"), verbose), search_cluster(workers) as address:
            results = boundary_search(sweep, design, round_runner(address), axis=axis, outcome=outcome,
                                      folder=folder, progress=say)
    except (SpecError, StoreError) as err:
        fail(str(err))
    except RuntimeError as err:  # partitions failed: the flow's message lists them
        fail(f"{err}; run the same command to resume", code=1)
    except (KeyboardInterrupt, Exception) as err:
        if not interrupted(err):
            raise
        typer.echo("interrupted: run the same command to resume", err=True)
        raise typer.Exit(130) from None
    from ...pipeline.report.search_page import write_boundary_report  # matplotlib: only once found

    page = write_boundary_report(results, sweep, design, axis, outcome, folder)
    say(f"report: {page['html']} (intervals, cost against a dense grid, looks)")
    if as_json:
        typer.echo(json.dumps([r.record() for r in results], indent=1))
    elif quiet:
        for found in results:
            typer.echo(describe(found, axis))


def round_runner(address: str):
    def run(sweep) -> None:
        from ..run import run_sweep

        # no report per round: the search reads the counts itself, and a report costs seconds
        run_sweep(sweep.model_dump(mode="json"), sweep.store, scheduler=address, progress=False,
                  report=False)
    return run


@contextmanager
def search_cluster(workers: Optional[int]):
    """One local cluster (`clusters.start_local_cluster`) for every round of the search."""
    from ..clusters import start_local_cluster
    from ..run import prepare_environment

    prepare_environment(None)  # the server URL and NUMBA_NUM_THREADS=1 before the workers start
    with start_local_cluster(workers) as cluster:
        yield cluster.scheduler_address
