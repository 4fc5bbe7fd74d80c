"""The model registry: how a validated sweep calls each kernel.

Each entry pairs a model name with its kernel's output description (``OUTPUTS``, which
shapes the store) and an adapter that turns (sweep, cell coordinates, Generators) into
the kernel's keyword arguments. The kernels know nothing of specs; the specs know
nothing of kernels; this module is the only place the two meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .spec import SweepBase


@dataclass(frozen=True)
class ModelEntry:
    name: str
    summary: str
    load: Callable[[], tuple[dict, Callable]]  # -> (OUTPUTS, simulate); lazy: numba import cost
    kwargs: Callable[[SweepBase, dict], dict]

    @property
    def outputs(self) -> dict:
        return self.load()[0]

    def simulate(self, sweep: SweepBase, coords: dict, rngs: list) -> dict[str, np.ndarray]:
        _, simulate = self.load()
        return simulate(rngs, **self.kwargs(sweep, coords))


def _time_kwargs(sweep: SweepBase) -> dict:
    return {
        "T": sweep.time.T,
        "layers": sweep.time.layers,
        "checkpoint_layers": np.asarray(sweep.time.checkpoint_layers, dtype=np.int64),
        "eps": sweep.eps,
    }


def _load_stochastic():
    from ..kernels import stochastic

    return stochastic.OUTPUTS, stochastic.simulate_stochastic_transformer


def _load_hybrid():
    from ..kernels import hybrid

    return hybrid.OUTPUTS, hybrid.simulate_hybrid


REGISTRY: dict[str, ModelEntry] = {
    "stochastic_transformer": ModelEntry(
        name="stochastic_transformer",
        summary="deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i), "
        "V_k Gaussian, fresh each layer, shared by all tokens",
        load=_load_stochastic,
        kwargs=lambda s, c: dict(
            n=int(c["n"]), d=int(c["d"]), beta=float(c["beta"]), value_std=s.value_std,
            attention=s.attention, noise=s.noise, **_time_kwargs(s),
        ),
    ),
    "hybrid": ModelEntry(
        name="hybrid",
        summary="hybrid noise model [F26, Prop. 1]: x_i <- N(x_i + h A_i + sigma sqrt(h) xi_k A_i), "
        "one scalar xi_k per layer",
        load=_load_hybrid,
        kwargs=lambda s, c: dict(
            n=int(c["n"]), d=int(c["d"]), beta=float(c["beta"]), sigma=float(c["sigma"]),
            attention=s.attention, **_time_kwargs(s),
        ),
    ),
}


def model_entry(name: str) -> ModelEntry:
    return REGISTRY[name]
