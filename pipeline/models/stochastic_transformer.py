"""Plug-in: the deep stochastic transformer [F26] (docs/models.md section 4).

x_i <- N(x_i + sqrt(h) V_k A_i(X)), V_k a fresh Gaussian d x d matrix each layer, shared by all
tokens. Two tokens with Q = K = I have a closed-form P(antipodal) (a scale-function integral,
`theory.antipodal_probability`), with a transition at beta_c(d) = arccosh(d - 2) / 2.

>>> from tokensweep.pipeline.spec import parse_sweep
>>> s = parse_sweep({"name": "q", "model": "stochastic_transformer", "grid": {"beta": [1.0, 2.0],
...     "d": 4, "n": 2}, "time": {"T": 1.0, "layers": 10}, "trajectories": 2})
>>> model.antipodal_probability(s, {"beta": np.array([1.0, 2.0]), "d": np.array([4, 4]),
...                                 "n": np.array([2, 2])}).round(3)
array([0.12 , 0.281])
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ...kernels import vocabulary
from .. import theory
from ..plugin import Model
from ..recording import RecordingSweep, record_arguments
from ..report import antipodal
from ..spec import Grid
from ._common import CLOSED_FORM_ATTENTIONS, sphere_cell, time_arguments, two_token_cells


class StochasticTransformerSweep(RecordingSweep):
    """Deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i(X))."""

    model: Literal["stochastic_transformer"]
    attention: Literal[vocabulary.STOCHASTIC_ATTENTIONS] = "sa"
    grid: Grid
    value_std: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    noise: Literal[vocabulary.NOISES] = "gaussian"
    # early stopping (kernels/stochastic.py docstring): a trajectory with one resolved class at
    # resolved_window consecutive checkpoints stops; later checkpoints repeat that checkpoint
    stop_when_resolved: bool = False
    resolved_window: int = Field(default=2, ge=1)
    threads: int = Field(default=1, ge=1)  # a partition's trajectories on this many threads

    def canonical(self) -> dict:
        """As SweepBase's, without `threads`: it changes how a partition runs, not its numbers."""
        return {k: v for k, v in super().canonical().items() if k != "threads"}


class StochasticTransformer(Model):
    name = "stochastic_transformer"
    summary = ("deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i), V_k Gaussian, "
               "fresh each layer, shared by all tokens")
    spec = StochasticTransformerSweep
    outputs = vocabulary.STOCHASTIC_OUTPUTS

    def simulate(self, sweep, coords, rngs):
        from ...kernels.stochastic import simulate_stochastic_transformer

        return simulate_stochastic_transformer(
            rngs, **sphere_cell(coords), value_std=sweep.value_std, attention=sweep.attention,
            noise=sweep.noise, stop_when_resolved=sweep.stop_when_resolved,
            resolved_window=sweep.resolved_window, threads=sweep.threads, **time_arguments(sweep),
            **record_arguments(sweep))

    def antipodal_probability(self, sweep, cells: dict) -> np.ndarray:
        """P(antipodal) of two tokens started uniformly (SA and USA alike); NaN where none applies."""
        beta, d, _, mask = two_token_cells(cells)
        out = np.full(beta.shape, np.nan)
        if sweep.attention in CLOSED_FORM_ATTENTIONS:
            for idx in zip(*np.nonzero(mask)):
                out[idx] = theory.antipodal_probability(beta[idx], int(d[idx]))
        return out

    def critical_beta(self, sweep, d) -> float:
        """beta_c(d): -1 attracts above it (-inf for d = 2, where both ends always attract)."""
        return float(theory.beta_c(d)) if sweep.attention in CLOSED_FORM_ATTENTIONS else np.nan

    def sections(self, sweep):
        return [antipodal.probability_section, antipodal.any_pair_section]


model = StochasticTransformer()
