"""The model registry: every model tokensweep can run.

Built from the plug-in modules of this package (each defines a module-level ``model``, an
instance of `pipeline.plugin.Model`) and from the entry-point group ``tokensweep.models`` of any
installed package, whose entries name such an object (or its class). Nothing here names a model:
the spec union, `tokensweep models`, the store, the executor and the report ask this registry.

>>> from tokensweep.pipeline.spec.load import load_sweep
>>> model = get_model(load_sweep("quickstart").model)
>>> model.spec.__name__, model in registry().values()
('StochasticTransformerSweep', True)
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import typing
import warnings
from importlib.metadata import entry_points
from typing import Annotated, Union

from pydantic import Field, TypeAdapter

from ..errors import SpecError
from ..plugin import Model

ENTRY_POINT_GROUP = "tokensweep.models"

__all__ = ["ENTRY_POINT_GROUP", "registry", "get_model", "sweep_adapter"]


def _as_model(obj, where: str) -> Model:
    model = obj() if isinstance(obj, type) else obj
    if not isinstance(model, Model):
        raise TypeError(f"{where} is {type(model).__name__}, not a tokensweep.pipeline.plugin.Model")
    for attribute in ("name", "summary", "spec", "outputs"):
        if not hasattr(model, attribute):
            raise TypeError(f"{where}: the model declares no `{attribute}`")
    fields = model.spec.model_fields
    if "model" not in fields or typing.get_args(fields["model"].annotation) != (model.name,):
        raise TypeError(f"{where}: its spec's `model` field must be Literal[{model.name!r}]")
    if "grid" not in fields:
        raise TypeError(f"{where}: its spec declares no `grid` (a tokensweep.pipeline.spec.base.Grid subclass)")
    unknown = set(model.report_facts) - set(fields)
    if unknown:
        raise TypeError(f"{where}: report_facts {sorted(unknown)} are not fields of its spec")
    return model


def _builtin() -> list[Model]:
    return [_as_model(importlib.import_module(f"{__name__}.{info.name}").model, f"{__name__}.{info.name}")
            for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]


def _installed() -> list[Model]:
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.append(_as_model(ep.load(), f"entry point {ep.name!r} ({ep.value})"))
        except Exception as err:  # a broken plug-in must not take the others down
            warnings.warn(f"tokensweep model plug-in {ep.name!r} ({ep.value}) failed to load: {err}",
                          RuntimeWarning, stacklevel=2)
    return found


@functools.cache
def registry() -> dict[str, Model]:
    """Every model by name: the built-in plug-ins, then installed ones (a name is taken once)."""
    models: dict[str, Model] = {}
    for model in _builtin() + _installed():
        if model.name in models:
            warnings.warn(f"two tokensweep models are named {model.name!r}: keeping "
                          f"{type(models[model.name]).__module__}, ignoring {type(model).__module__}",
                          RuntimeWarning, stacklevel=2)
            continue
        models[model.name] = model
    return models


def get_model(name: str) -> Model:
    try:
        return registry()[name]
    except KeyError:
        raise SpecError(f"model: unknown model {name!r}: choose one of {', '.join(registry())} "
                        "(`tokensweep models` lists them)") from None


@functools.cache
def sweep_adapter() -> TypeAdapter:
    """The union of every model's spec class, discriminated by its `model` field."""
    specs = tuple(model.spec for model in registry().values())
    return TypeAdapter(Annotated[Union[specs], Field(discriminator="model")])
