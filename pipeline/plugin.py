"""The model contract: what one plug-in module declares so that tokensweep can run and report it.

A model is an instance of a `Model` subclass, defined in one module: the built-in ones in
`pipeline/models/`, others in any installed package that names it in the entry-point group
``tokensweep.models`` (as xarray finds its backends in ``xarray.backends``)::

    [project.entry-points."tokensweep.models"]
    my_dynamics = "my_package.tokensweep_model:model"

The model says

- `name`, `summary`: what a spec writes after ``model:``, and what `tokensweep models` prints;
- `spec`: its pydantic spec class, a `SweepBase` with ``model: Literal[name]`` and its options;
- `outputs`: what it stores per trajectory, ``{name: OutputSpec}`` (``kernels/vocabulary.py``:
  dtype, per checkpoint or not, trailing dimensions, CF attributes); it shapes the store, so it
  must not import numba. A spec with a `record` field (`recording.RecordingSweep`) adds the
  observables it lists (`recording.declared_outputs`);
- `simulate(sweep, coords, rngs)`: one partition's outputs, one array per declared output,
  trajectories first (the kernel is imported here, lazily);
- `sections(sweep)`: the report sections it wants, each a function of `pipeline/report/`'s outcome
  modules with this model's closed forms passed in;
- `report_facts`: spec fields the report lists in its header;
- `local_problem(sweep)`: why this machine cannot compute the sweep's partitions (a GPU it lacks),
  in one line naming the field and the fix; asked before a run on local workers;
- closed forms, as methods named after what they predict, each taking the typed spec first; the
  outcome modules ask for them by name (`analysis.stats.closed_form`) and draw no theory where a
  model has none: `CLOSED_FORMS` lists the names they ask for.

The engine (plan, seeds, store, execute, the Prefect flow) and the report page only use this
interface, so adding a model touches its kernel module, its plug-in module and a catalog spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Mapping, NamedTuple

import numpy as np

from .spec.base import SweepBase

__all__ = ["Model", "ReportInput", "Part", "Section", "CLOSED_FORMS", "check_outputs"]


@dataclass(frozen=True)
class ReportInput:
    """What a report section reads: the cube, its typed spec, the output folder, the interval level,
    and another cube to draw beside it (`tokensweep report --beside`)."""

    ds: object  # xarray.Dataset (not imported here: specs and the registry stay light)
    sweep: SweepBase
    out: Path
    level: float = 0.95
    beside: object = None  # another cube drawn beside this one (`report.beside`), or None


class Part(NamedTuple):
    """One section of a report: markdown lines, and the figures they show {name: path}."""

    lines: list[str]
    figures: dict[str, str]


Section = Callable[[ReportInput], Part]

# The closed forms the outcome modules ask a model for (a method of that name, spec first).
CLOSED_FORMS = {
    "antipodal_probability": "(sweep, cells: {axis: array}) -> P(antipodal) per cell, NaN where none",
    "critical_beta": "(sweep, d) -> beta above which antipodal states attract (dashed line)",
    "finite_time_outcomes": "(sweep, cells, t) -> (P(antipodal), P(single), P(unresolved)) at time(s) t, "
                            "shape (3, cells..., t's shape), the backward equation; NaN where none",
    "threshold_curves": "(sweep, beta array) -> [(label, style, sigma values)] over a (beta, sigma) map",
    "merge_time": "(sweep, cell) -> t* at which the merged fraction should cross, or None",
    "equiangular_overlap": "(sweep, times, cell) -> the overlap of an equiangular start, or None",
    "equiangular_rate": "(sweep, cell) -> late-time rate of 1 - gamma(t) of an equiangular start, or None",
    "random_start_overlap": "(sweep, times, cell) -> gamma(t), which the overlaps of uniform starts "
                            "track as d grows ([GLPR-P] Thm 6.9), or None",
    "token2_overlap": "(sweep, times, cell) -> <x_1(0), x_2(t)> of two causal tokens, or None",
    "sharp_overlaps": "(sweep, n, d) -> the distinct overlaps of the configuration the flow settles "
                      "on (V = -I: simplex, cross-polytope), or None",
    "hemisphere_probability": "(sweep, n, d) -> P(the start lies in an open hemisphere)",
    "geometry_claims": "(sweep, d) -> the statements a cell of the flow in R^d can be checked against",
    "boolean_rate": "(sweep, cell) -> the slope of log(-log D(t)) against t at which P(t) turns Boolean "
                    "(d = 1, [GLPR-E] Thm 2.1), or None",
}


class Model:
    """Base class of a model plug-in (see the module docstring); subclass it, then instantiate."""

    name: ClassVar[str]
    summary: ClassVar[str]
    spec: ClassVar[type[SweepBase]]
    outputs: ClassVar[Mapping[str, object]]
    report_facts: ClassVar[tuple[str, ...]] = ()

    def simulate(self, sweep: SweepBase, coords: dict, rngs: list) -> dict[str, np.ndarray]:
        """The declared outputs of len(rngs) trajectories of the cell at `coords`."""
        raise NotImplementedError(f"model {self.name!r} does not define simulate()")

    def spec_outputs(self, sweep: SweepBase) -> Mapping[str, object]:
        """Outputs a spec asks for beyond `outputs` (an option of the model's own); none by default."""
        return {}

    def local_problem(self, sweep: SweepBase) -> str | None:
        """Why this process cannot compute the sweep's partitions (one line), or None."""
        return None

    def sections(self, sweep: SweepBase) -> list[Section]:
        """The report sections of a cube of this model, in page order."""
        return []

    def __repr__(self) -> str:
        return f"<tokensweep model {self.name!r}>"


def check_outputs(model: Model, outputs: dict, ntraj: int, nt: int,
                  sweep: SweepBase | None = None) -> None:
    """Raise if `outputs` is not exactly the model's declared outputs (for `sweep`, with the
    observables it records), shaped and typed as declared."""
    from .spec.recording import declared_outputs, dimension_sizes, output_shape

    declared = model.outputs if sweep is None else declared_outputs(model, sweep)
    sizes = {} if sweep is None else dimension_sizes(sweep)
    if set(outputs) != set(declared):
        raise ValueError(f"model {model.name!r} returned outputs {sorted(outputs)} but declares "
                         f"{sorted(declared)}: return exactly the declared ones")
    for name, spec in declared.items():
        shape = ((ntraj, nt) if spec.per_checkpoint else (ntraj,)) + output_shape(spec, sizes)
        value = np.asarray(outputs[name])
        # exact dtype: a cast on write would wrap (int64 300 stored as int8 44) without a word
        if value.shape != shape or value.dtype != np.dtype(spec.dtype):
            raise ValueError(f"model {model.name!r}: output {name!r} has shape {value.shape} and dtype "
                             f"{value.dtype}, but {shape} of {spec.dtype} is declared")
