"""tokensweep: phase diagrams of token clustering in deep Transformers.

The Python API, for notebooks and scripts::

    import tokensweep
    tokensweep.catalog()                                  # the ready-to-run specs
    ds = tokensweep.run("quickstart")                     # or a YAML path, or a dict
    ds = tokensweep.open("quickstart")                    # a store, or a spec's default store
    ds.tokensweep.probability("antipodal")                # p, Wilson lo / hi per cell

`run` computes in a child process (so a script needs no ``if __name__ == "__main__"`` guard, and
a notebook shows the progress), then returns `open`'s cube: lazy, every output NaN outside done
partitions, ``attrs["pending"]`` counting what is missing, length-1 grid axes squeezed, CF
attributes on every coordinate.

Importing this package stays light: nothing beyond the standard library (the ``ds.tokensweep``
accessor is registered as xarray is imported); xarray, numba, Prefect and Dask's distributed
load only when a function needs them.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import NamedTuple

# registers ds.tokensweep once xarray is imported (now, if it is); absolute, so that a tool
# importing this file under another name (pytest imports a rootdir's __init__.py as `main`)
# does not register a second copy
_import_module("tokensweep.pipeline.when_imported").when_imported(
    "xarray", lambda: _import_module("tokensweep.pipeline.analysis.accessor"))

__all__ = ["open", "run", "catalog", "load_spec", "CatalogEntry", "SpecError", "StoreError",
           "SweepError", "ClusterError"]

_ERRORS = {"SpecError": "tokensweep.pipeline.errors", "StoreError": "tokensweep.pipeline.errors",
           "SweepError": "tokensweep.pipeline.errors", "ClusterError": "tokensweep.flows.run"}


def __getattr__(name: str):
    """The exception classes and ``__version__`` (as built), imported on first use (PEP 562)."""
    if name == "__version__":
        return _import_module("tokensweep.pipeline.store.provenance").installed_version()
    if name in _ERRORS:
        return getattr(_import_module(_ERRORS[name]), name)
    raise AttributeError(f"module 'tokensweep' has no attribute {name!r}")


class CatalogEntry(NamedTuple):
    name: str  # what `run`, `open` and `tokensweep run` accept
    model: str
    description: str
    path: str


def catalog() -> list[CatalogEntry]:
    """The catalog's specs (one per figure or claim of the papers), by name."""
    import yaml

    from .pipeline.spec.load import CATALOG as folder

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, where built: ~10x faster
    entries = []
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}  # noqa: S506 (a safe loader)
        entries.append(CatalogEntry(path.stem, str(data.get("model", "")),
                                    " ".join(str(data.get("description", "")).split()), str(path)))
    return entries


def load_spec(spec, scale=None, **overrides):
    """A validated spec from a YAML path, a catalog name, a dict or a spec, at `scale` ("small",
    the default, or "paper": the spec's `scales` block); raises SpecError."""
    from .pipeline.spec.base import SweepBase
    from .pipeline.spec.load import load_sweep, parse_sweep

    if isinstance(spec, SweepBase):
        return parse_sweep(spec.model_dump(mode="json"), **overrides)
    if isinstance(spec, dict):
        return parse_sweep(spec, scale, **overrides)
    return load_sweep(spec, scale, **overrides)


def open(store_or_name, scale=None):  # noqa: A001 (the API's name, as xarray's open_dataset)
    """The cube of a store (path), or of a spec's default store (catalog name, YAML file, spec;
    at `scale`): lazy, outputs NaN outside done partitions, attrs["pending"], squeezed, CF-labelled."""
    from .pipeline.store.reading import open_sweep

    return open_sweep(store_or_name, scale)


def run(spec, store=None, workers=None, scheduler=None, progress=True, scale=None, report=True):
    """Run (or resume, or grow) a sweep and return its cube (`open`).

    spec: a YAML path, a catalog name, a dict or a spec; scale: "small" (default) or "paper" (the
    spec's `scales` block); store: where (default: the spec's);
    workers: local Dask worker processes (default: one per core); scheduler: the address or
    scheduler file of an existing Dask cluster; report: write the report beside the store when the
    sweep ends (False: the cube only; `tokensweep report STORE` writes it later). Raises SpecError
    or StoreError before anything runs (the message names the field and the fix), SweepError
    when partitions failed.
    """
    from .flows.child import run_in_child
    from .pipeline.prepare import prepare_sweep

    sweep = prepare_sweep(spec, scale=scale, store=store)
    if scheduler is None:  # local workers have what this machine has (a GPU or not), as on the CLI
        from .pipeline.errors import SpecError
        from .pipeline.models import get_model

        problem = get_model(sweep.model).local_problem(sweep)
        if problem:
            raise SpecError(problem)
    summary = run_in_child(sweep, workers=workers, scheduler=scheduler, progress=progress,
                           report=report)
    if progress:
        print(f"computed {summary['computed']} of {summary['partitions']} partitions into {sweep.store}")
    return open(sweep.store)
