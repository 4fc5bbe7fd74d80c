"""Plug-in: the hybrid noise model [F26, Prop. 1] (docs/models.md section 5).

x_i <- N(x_i + (h + sigma sqrt(h) xi_k) A_i), one scalar xi_k per layer shared by all tokens. Two
tokens have a closed-form P(antipodal) (`theory.hybrid_antipodal_probability`) with noise
thresholds: USA one sharp sigma_c = sqrt(2 e^-beta), SA a bistable window. `layers` may be a grid
axis (h = T / layers per cell), as for the stochastic transformer: at sigma = 0 the scheme is O(h)
from the deterministic flow ([F26] Lemma 2).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...kernels import vocabulary
from ..plugin import Model
from ..spec.base import nonnegative_axis
from ..spec.device import DeviceSweep, refuse_on_device
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


class HybridGrid(LayersGrid):
    """The hybrid noise model adds the noise amplitude sigma (and may have a `layers` axis)."""

    sigma: tuple[float, ...]

    @field_validator("sigma")
    @classmethod
    def _noise_amplitude(cls, values):
        return nonnegative_axis(values, "sigma")


class HybridSweep(DeviceSweep, RecordingSweep, StartSweep):
    """Hybrid noise model [F26, Prop. 1]: x_i <- N(x_i + h A_i + sigma sqrt(h) xi_k A_i).
    `device: cuda` runs it on a GPU (docs/models.md 4.6)."""

    model: Literal["hybrid"]
    attention: Literal[vocabulary.HYBRID_ATTENTIONS] = "sa"
    grid: HybridGrid
    # early stopping and threads: as for the stochastic transformer
    stop_when_resolved: bool = False
    resolved_window: int = Field(default=2, ge=1)
    threads: int = Field(default=1, ge=1)
    init: Start = Start()  # initial condition (pipeline/spec/starts.py)

    @model_validator(mode="before")
    @classmethod
    def _implied_layers(cls, data):
        return implied_layers(data)

    @model_validator(mode="after")
    def _on_device(self):
        check_layers_axis(self)
        refuse_on_device(self, {"init": self.init != Start() and "a start other than uniform"})
        return self

    def canonical(self) -> dict:
        """As SweepBase's, without `threads` (it changes how a partition runs, not its numbers) and,
        with a layers axis, without time.layers."""
        return without_axis_layers(self, {k: v for k, v in super().canonical().items() if k != "threads"})


class Hybrid(Model):
    name = "hybrid"
    summary = ("hybrid noise model [F26, Prop. 1]: x_i <- N(x_i + h A_i + sigma sqrt(h) xi_k A_i), "
               "one scalar xi_k per layer")
    spec = HybridSweep
    outputs = vocabulary.HYBRID_OUTPUTS

    def local_problem(self, sweep):
        """device: cuda where this machine has neither a CUDA GPU nor numba-cuda's simulator."""
        if sweep.device != "cuda":
            return None
        from ...kernels.stochastic.cuda import device_ready

        return device_ready()

    def simulate(self, sweep, coords, rngs):
        if sweep.device == "cuda":  # kernels/stochastic/cuda.py (docs/models.md 4.6)
            from ...kernels.lowlevel.philox import device_key
            from ...kernels.stochastic.cuda import simulate_hybrid_cuda
            from ..seeds import cell_key
            from ..spec.starts import trajectory_index

            return simulate_hybrid_cuda(
                device_key(sweep.seed, cell_key(coords)), [trajectory_index(g) for g in rngs],
                **sphere_cell(coords), sigma=float(coords["sigma"]), attention=sweep.attention,
                stop_when_resolved=sweep.stop_when_resolved, resolved_window=sweep.resolved_window,
                **cell_time_arguments(sweep, coords), **record_arguments(sweep))
        from ...kernels.hybrid import simulate_hybrid

        return simulate_hybrid(rngs, **sphere_cell(coords), sigma=float(coords["sigma"]),
                               attention=sweep.attention, stop_when_resolved=sweep.stop_when_resolved,
                               resolved_window=sweep.resolved_window, threads=sweep.threads,
                               **cell_time_arguments(sweep, coords), **start_argument(sweep, coords, rngs),
                               **record_arguments(sweep))

    def antipodal_probability(self, sweep, cells: dict) -> np.ndarray:
        """P(antipodal) of two tokens started uniformly, or conditional on the initial overlap of an
        overlap start; NaN where none applies."""
        from .. import theory  # scipy: imported where a closed form is asked for
        beta, d, _, mask = two_token_cells(cells)
        sigma = np.broadcast_to(np.asarray(cells.get("sigma", np.nan), float), beta.shape)
        rho0 = initial_overlap(sweep, cells, beta.shape)
        out = np.full(beta.shape, np.nan)
        if sweep.attention in CLOSED_FORM_ATTENTIONS:
            for idx in zip(*np.nonzero(mask & ~np.isnan(sigma))):
                given = None if rho0 is None else rho0[idx]
                if given is None or np.isfinite(given):
                    out[idx] = theory.hybrid_antipodal_probability(
                        beta[idx], sigma[idx], sweep.attention, int(d[idx]), rho0=given)
        return out

    def finite_time_outcomes(self, sweep, cells: dict, t: float) -> np.ndarray:
        """(P(antipodal), P(single), P(unresolved)) of two tokens at time(s) t, shape
        (3, cells..., t's shape), from the backward equation (`theory.finite`); NaN where none
        applies or sigma = 0."""
        from ..theory import finite as theory_finite  # scipy: imported where a closed form is asked for

        beta, d, _, mask = two_token_cells(cells)
        sigma = np.broadcast_to(np.asarray(cells.get("sigma", np.nan), float), beta.shape)
        rho0 = initial_overlap(sweep, cells, beta.shape)
        t = np.asarray(t, float)  # a scalar, or an array of times: one solve for all
        # every section of a report asks within these: one solve per cell serves them all
        along = theory_finite.report_times(sweep.time.T, sweep.time.checkpoint_times)
        out = np.full((3, *beta.shape, *t.shape), np.nan)
        if sweep.attention in CLOSED_FORM_ATTENTIONS:
            for idx in zip(*np.nonzero(mask & (sigma > 0))):
                given = None if rho0 is None else float(rho0[idx])
                if given is None or np.isfinite(given):
                    out[(slice(None), *idx)] = theory_finite.hybrid_outcomes(
                        t, float(beta[idx]), float(sigma[idx]), sweep.attention, int(d[idx]),
                        sweep.eps, given, along=along)
        return out

    def threshold_curves(self, sweep, beta: np.ndarray) -> list:
        """(label, matplotlib style, sigma values) of the noise thresholds over beta."""
        from .. import theory  # scipy: imported where a closed form is asked for
        if sweep.attention not in CLOSED_FORM_ATTENTIONS:
            return []
        lo, hi = theory.hybrid_sigma_c(beta, sweep.attention)
        if sweep.attention == "usa":
            return [("σ_c(β) = sqrt(2 e^-β)", "w-", lo)]
        return [("σ_lo(β) = sqrt(1 + e^-2β)", "w--", lo), ("σ_hi = sqrt(2)", "w-", hi)]

    def sections(self, sweep):
        from ..report import antipodal, dominant, horizon  # here, not above: workers never draw

        return [antipodal.probability_section, horizon.horizon_section, antipodal.step_bias_section,
                antipodal.heatmap_section, dominant.dominant_section, antipodal.any_pair_section]


model = Hybrid()
