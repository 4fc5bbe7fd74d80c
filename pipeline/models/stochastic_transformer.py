"""Plug-in: the deep stochastic transformer [F26] (docs/models.md section 4).

x_i <- N(x_i + sqrt(h) V_k A_i(X)), V_k a fresh Gaussian d x d matrix each layer, shared by all
tokens. Two tokens with Q = K = I have a closed-form P(antipodal) (a scale-function integral,
`theory.antipodal_probability`), with a transition at beta_c(d) = arccosh(d - 2) / 2.

>>> from tokensweep.pipeline.spec.load import parse_sweep
>>> s = parse_sweep({"name": "q", "model": "stochastic_transformer", "grid": {"beta": [1.0, 2.0],
...     "d": 4, "n": 2}, "time": {"T": 1.0, "layers": 10}, "trajectories": 2})
>>> model.antipodal_probability(s, {"beta": np.array([1.0, 2.0]), "d": np.array([4, 4]),
...                                 "n": np.array([2, 2])}).round(3)
array([0.12 , 0.281])
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...kernels import vocabulary
from ..plugin import Model
from ..spec.base import refuse
from ..spec.device import DeviceSweep, refuse_on_device
from ..spec.matrices import Matrix, check_fixes_d, square_matrix
from ..spec.recording import RecordingSweep, record_arguments
from ..spec.starts import Start, StartSweep, initial_overlap
from ._common import (
    CLOSED_FORM_ATTENTIONS,
    LayersGrid,
    cell_time_arguments,
    check_layers_axis,
    implied_layers,
    sphere_cell,
    start_argument,
    two_token_cells,
    without_axis_layers,
)

VALUE_LAWS = ("gaussian", "rademacher", "uniform")  # = kernels.stochastic.VALUE_LAWS (no numba here)
SCHEMES = ("discrete", "sde")  # = kernels.stochastic.SCHEMES


class StochasticGrid(LayersGrid):
    """beta, d, n, and optionally `layers` (h = T / layers per cell: the O(h) bias in one sweep)."""


class StochasticTransformerSweep(DeviceSweep, RecordingSweep, StartSweep):
    """Deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i(X)).

    Generalised ([F26] Thm 1's assumptions; docs/models.md 4.4): `value_law` (entries' law; a
    non-Gaussian law needs `noise: literal`, chosen for it when noise is not given), `qk` /
    `matrices` (Q, K: random ensembles or explicit; no closed form then), `grid.layers` (h as an
    axis; time.layers may then be left out: it becomes the largest value) and `scheme` (the
    discrete transformer, or the reference integrator of its limit SDE). `device: cuda` runs the
    numba-cuda kernel (`kernels/stochastic/cuda.py`, its own random stream; docs/models.md 4.6).
    """

    model: Literal["stochastic_transformer"]
    attention: Literal[vocabulary.STOCHASTIC_ATTENTIONS] = "sa"
    grid: StochasticGrid
    value_law: Literal[VALUE_LAWS] = "gaussian"
    qk: Literal[vocabulary.QK_ENSEMBLES] = "identity"
    matrices: Optional[dict[Literal["Q", "K"], Matrix]] = None
    scheme: Literal[SCHEMES] = "discrete"
    value_std: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    noise: Literal[vocabulary.NOISES] = "gaussian"
    # early stopping (kernels/stochastic/transformer.py docstring): a trajectory with one resolved class at
    # resolved_window consecutive checkpoints stops; later checkpoints repeat that checkpoint
    stop_when_resolved: bool = False
    resolved_window: int = Field(default=2, ge=1)
    threads: int = Field(default=1, ge=1)  # a partition's trajectories on this many threads
    init: Start = Start()  # initial condition (pipeline/spec/starts.py)

    @model_validator(mode="before")
    @classmethod
    def _implied_fields(cls, data):
        """A non-Gaussian law picks the literal path; a layers axis supplies time.layers."""
        if not isinstance(data, dict):
            return data
        if data.get("value_law", "gaussian") != "gaussian" and "noise" not in data:
            data = {**data, "noise": "literal"}
        return implied_layers(data)

    @field_validator("matrices", mode="before")
    @classmethod
    def _query_key_matrices(cls, value):
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) - {"Q", "K"}:
            raise ValueError(f"got {value!r}: give a mapping with keys Q and/or K, each a list of d "
                             "lists of d numbers")
        return {k: square_matrix(m.tolist() if isinstance(m, np.ndarray) else m, f"matrices.{k}")
                for k, m in value.items()} or None

    @model_validator(mode="after")
    def _consistent_generalisation(self):
        if self.value_law != "gaussian" and self.noise == "gaussian":
            raise refuse("noise", f"'gaussian' is exact for Gaussian entries only, but value_law = "
                          f"{self.value_law!r}: set noise: literal (or leave noise out)")
        if self.scheme == "sde" and (self.value_law != "gaussian" or self.noise != "gaussian"):
            raise refuse("scheme", "'sde' integrates the limit SDE with Brownian increments: leave "
                          "value_law and noise at 'gaussian' (or use scheme: discrete)")
        for key, matrix in (self.matrices or {}).items():
            check_fixes_d(f"matrices.{key}", len(matrix), self.grid.d)
            if self.qk != "identity":
                raise refuse(f"matrices.{key}", f"an explicit {key} fixes the query-key pair, but qk = "
                              f"{self.qk!r} draws it: remove matrices.{key} or set qk: identity")
        check_layers_axis(self)
        refuse_on_device(self, {"qk": self.qk != "identity" and "a drawn Q, K",
                                "matrices": bool(self.matrices) and "an explicit Q, K",
                                "scheme": self.scheme != "discrete" and "scheme: sde",
                                "init": self.init != Start() and "a start other than uniform"})
        return self

    @property
    def closed_form_applies(self) -> bool:
        """Q^T K = I (the two-token closed form's assumption); value_law and scheme keep the limit."""
        if self.qk != "identity":
            return False
        if not self.matrices:
            return True
        d = self.grid.d[0]  # explicit matrices fix d
        q, k = (np.asarray(self.matrices.get(key, np.eye(d))) for key in ("Q", "K"))
        return bool(np.array_equal(q.T @ k, np.eye(d)))

    def canonical(self) -> dict:
        """As SweepBase's, without `threads` (it changes how a partition runs, not its numbers)
        and, with a layers axis, without time.layers (the grid's largest value by default, so a
        store may grow along the axis)."""
        return without_axis_layers(self, {k: v for k, v in super().canonical().items() if k != "threads"})


class StochasticTransformer(Model):
    name = "stochastic_transformer"
    summary = ("deep stochastic transformer [F26]: x_i <- N(x_i + sqrt(h) V_k A_i), V_k Gaussian, "
               "fresh each layer, shared by all tokens")
    spec = StochasticTransformerSweep
    outputs = vocabulary.STOCHASTIC_OUTPUTS
    report_facts = ("scheme", "noise", "value_law", "qk")  # which variant ran (docs/models.md 4.4)

    def local_problem(self, sweep):
        """device: cuda where this machine has neither a CUDA GPU nor numba-cuda's simulator."""
        if sweep.device != "cuda":
            return None
        from ...kernels.stochastic.cuda import device_ready

        return device_ready()

    def simulate(self, sweep, coords, rngs):
        if sweep.device == "cuda":
            return simulate_on_device(sweep, coords, rngs)
        from ...kernels.stochastic.transformer import simulate_stochastic_transformer

        return simulate_stochastic_transformer(
            rngs, **sphere_cell(coords), value_std=sweep.value_std, attention=sweep.attention,
            noise=sweep.noise, stop_when_resolved=sweep.stop_when_resolved,
            resolved_window=sweep.resolved_window, threads=sweep.threads,
            **generalised_arguments(sweep, coords), **start_argument(sweep, coords, rngs),
            **record_arguments(sweep))

    def antipodal_probability(self, sweep, cells: dict) -> np.ndarray:
        """P(antipodal) of two tokens (SA and USA alike) started uniformly, or conditional on the
        initial overlap rho0 of an overlap start (a grid axis or init.rho0); NaN where none applies."""
        from .. import theory  # scipy: imported where a closed form is asked for
        beta, d, _, mask = two_token_cells(cells)
        rho0 = initial_overlap(sweep, cells, beta.shape)
        out = np.full(beta.shape, np.nan)
        if sweep.attention in CLOSED_FORM_ATTENTIONS and sweep.closed_form_applies:
            for idx in zip(*np.nonzero(mask)):
                if rho0 is None:
                    out[idx] = theory.antipodal_probability(beta[idx], int(d[idx]))
                elif np.isfinite(rho0[idx]):
                    out[idx] = theory.antipodal_probability_given_overlap(rho0[idx], beta[idx], int(d[idx]))
        return out

    def finite_time_outcomes(self, sweep, cells: dict, t: float) -> np.ndarray:
        """(P(antipodal), P(single), P(unresolved)) of two tokens at time(s) t, shape
        (3, cells..., t's shape): the backward Kolmogorov equation of the limit diffusion
        (`theory.finite`); NaN where the closed form does not apply."""
        from ..theory import finite as theory_finite  # scipy: imported where a closed form is asked for

        beta, d, _, mask = two_token_cells(cells)
        rho0 = initial_overlap(sweep, cells, beta.shape)
        t = np.asarray(t, float)  # a scalar, or an array of times: one solve for all
        # every section of a report asks within these: one solve per cell serves them all
        along = theory_finite.report_times(sweep.time.T, sweep.time.checkpoint_times)
        out = np.full((3, *beta.shape, *t.shape), np.nan)
        if sweep.attention in CLOSED_FORM_ATTENTIONS and sweep.closed_form_applies:
            for idx in zip(*np.nonzero(mask)):
                given = None if rho0 is None else float(rho0[idx])
                if given is None or np.isfinite(given):
                    out[(slice(None), *idx)] = theory_finite.stochastic_outcomes(
                        t, float(beta[idx]), int(d[idx]), sweep.attention, sweep.eps, given,
                        sweep.value_std, along=along)
        return out

    def critical_beta(self, sweep, d) -> float:
        """beta_c(d): -1 attracts above it (-inf for d = 2, where both ends always attract)."""
        from .. import theory  # scipy: imported where a closed form is asked for
        applies = sweep.attention in CLOSED_FORM_ATTENTIONS and sweep.closed_form_applies
        return float(theory.beta_c(d)) if applies else np.nan

    def sections(self, sweep):
        from ..report import antipodal, horizon  # here, not above: workers never draw (matplotlib, scipy.stats)

        return [antipodal.probability_section, horizon.horizon_section, antipodal.step_bias_section,
                antipodal.any_pair_section]


def generalised_arguments(sweep, coords: dict) -> dict:
    """Time arguments (at the cell's layer count when layers is an axis) and the options of
    docs/models.md 4.4, as `simulate_stochastic_transformer` takes them."""
    args = cell_time_arguments(sweep, coords)
    matrices = ({k: np.asarray(m, dtype=np.float64) for k, m in sweep.matrices.items()}
                if sweep.matrices else None)
    return dict(args, value_law=sweep.value_law, qk=sweep.qk, matrices=matrices,
                scheme=sweep.scheme)


def simulate_on_device(sweep, coords: dict, rngs: list) -> dict:
    """A partition on the GPU (`kernels.stochastic.cuda`): the cell's Philox key from (seed, cell),
    the trajectories' indices from their Generators (the device draws nothing from those)."""
    from ...kernels.lowlevel.philox import device_key
    from ...kernels.stochastic.cuda import simulate_stochastic_cuda
    from ..seeds import cell_key
    from ..spec.starts import trajectory_index

    args = generalised_arguments(sweep, coords)
    return simulate_stochastic_cuda(
        device_key(sweep.seed, cell_key(coords)), [trajectory_index(rng) for rng in rngs],
        **sphere_cell(coords), value_std=sweep.value_std, T=args["T"], layers=args["layers"],
        checkpoint_layers=args["checkpoint_layers"], attention=sweep.attention,
        noise=sweep.noise, value_law=sweep.value_law, eps=args["eps"],
        stop_when_resolved=sweep.stop_when_resolved, resolved_window=sweep.resolved_window,
        **record_arguments(sweep))


model = StochasticTransformer()
