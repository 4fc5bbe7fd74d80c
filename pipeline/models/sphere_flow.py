"""Plug-in: deterministic attention flows on the sphere [GLPR-P, RST] (docs/models.md sections 1, 2).

dx_i/dt = P_{x_i}(A_i(X)) with SA/USA/causal attention, Q/K/V ensembles or explicit matrices, heads,
time-varying P(t) presets, integrated by retraction Euler, Heun or RK4. Closed forms where
Q = K = V = I, no time-varying P(t), SA or USA: the equiangular overlap gamma(t), its merge time
t*(beta) (gamma(t*) = 1 - delta, the curve of [GLPR-P] Fig. 3), and Wendel's probability that the
start lies in an open hemisphere.

Time units: with `heads` identical heads the field is `heads` times larger, with `rst_scaling` it
is divided by sqrt(d); so a theory time t_th is simulated at t = t_th * sqrt(d)^rst / heads.
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...kernels import vocabulary
from ..plugin import Model
from ..spec.base import Grid, nonnegative_axis, refuse
from ..spec.matrices import Matrix, check_fixes_d, per_head_matrices
from ..spec.recording import RecordingSweep, record_arguments
from ..spec.starts import Start, StartSweep, starts_of
from ._common import CLOSED_FORM_ATTENTIONS, sphere_cell, time_arguments
from ._sphere_gpu import gpu_refusal

MATRIX_KEYS = ("Q", "K", "V")  # the kernel's `matrices` keys
NOISES = ("independent", "common")  # `kernels.sphere_noise`


class SphereFlowGrid(Grid):
    """beta, d, n and, with `noise`, the noise strength sigma; omega, the turning speed of V's
    eigenvectors (`value_rotation` as an axis). An optional axis left out is no axis, no key."""

    sigma: Optional[tuple[float, ...]] = None
    omega: Optional[tuple[float, ...]] = None

    @field_validator("sigma")
    @classmethod
    def _noise_strength(cls, values):
        return nonnegative_axis(values, "sigma")

    @field_validator("omega")
    @classmethod
    def _finite_speed(cls, values):
        bad = [v for v in values if not math.isfinite(v)]
        if bad:
            raise ValueError(f"contains {bad}, but a turning speed must be finite: remove them")
        return values


class SphereFlowSweep(RecordingSweep, StartSweep):
    """Deterministic attention flow on the sphere [GLPR-P, RST]: dx_i/dt = P_{x_i}(A_i(X)).

    Defaults are the kernel's (kernels/sphere/flow.py): SA, retraction Euler, one head,
    Q = K = V = I, uniform start, frac_close threshold delta = 1e-3. `init`: the shared start field
    (`pipeline/spec/starts.py`); the old names uniform_sphere, hemisphere (about e1), equiangular are
    read as before and give the same numbers.

    `matrices` fixes Q, K and/or V explicitly (never drawn): each one d x d matrix (every head)
    or a list of `heads` of them, normalised to (heads, d, d); it fixes grid.d, and a matrix it
    gives cannot also come from `qk` / `value` / a `time_varying` preset.

    `precision`: float32 runs the state and the drift in single precision (1.6-1.8 times the
    speed at large n d; statistics agree with float64 within sampling error). `threads`: integrate a
    partition's trajectories on that many threads (same results, bit for bit).

    `device: cuda` integrates a partition's trajectories on a CUDA GPU with PyTorch
    (`kernels/sphere/gpu.py`; the `gpu` extra) for Euler, Heun and RK4: SA / USA (causal or
    not), weights drawn once per trajectory or given, any heads, time_varying, noise, post-LN;
    hardmax, period, value_rotation and other layer norms are refused here, naming the
    field. Starts, weights, noise and outcomes come from the device (Philox streams keyed by
    each trajectory's Generator); from the same starts and weights states agree with the CPU
    kernel to ~1e-13 in float64 (tests; docs/models.md section 2.10). A store holds one
    device's numbers: it is part of the spec.
    `tokensweep run` on local workers, and `plan` when it calibrates, refuse before computing
    where this machine's torch sees no CUDA GPU; on a remote or batch cluster nothing local
    can tell, so a partition whose worker lacks one fails with one line (`device: cuda needs
    PyTorch with a CUDA GPU on the worker: ...`, in `tokensweep status`).

    >>> from tokensweep.pipeline.spec.load import parse_sweep
    >>> s = parse_sweep({"name": "f", "model": "sphere_flow", "grid": {"beta": 1, "d": 8, "n": 4},
    ...     "time": {"T": 3.0, "layers": 30}, "trajectories": 2, "init": "equiangular"})
    >>> s.attention, s.integrator, s.init.kind, s.delta
    ('sa', 'euler', 'equiangular', 0.001)
    """

    model: Literal["sphere_flow"]
    attention: Literal[vocabulary.SPHERE_FLOW_ATTENTIONS] = "sa"
    grid: SphereFlowGrid
    noise: Optional[Literal[NOISES]] = None
    value_rotation: float = Field(default=0.0, allow_inf_nan=False)
    hardmax_tol: float = Field(default=1e-9, ge=0, lt=1)
    ensemble_scaling: Literal[vocabulary.ENSEMBLE_SCALINGS] = "normalised"
    layer_norm: Literal[vocabulary.LAYER_NORMS] = "post"
    ngpt_alpha: float = Field(default=0.2, gt=0, allow_inf_nan=False)
    integrator: Literal[vocabulary.SPHERE_FLOW_INTEGRATORS] = "euler"
    heads: int = Field(default=1, ge=1)
    qk: Literal[vocabulary.QK_ENSEMBLES] = "identity"
    value: Literal[vocabulary.VALUE_ENSEMBLES] = "identity"
    period: int = Field(default=0, ge=0)
    time_varying: Optional[Literal[tuple(vocabulary.TIME_VARYING_PRESETS)]] = None
    init: Start = Start()
    delta: float = Field(default=1e-3, gt=0, lt=1)
    rst_scaling: bool = False
    matrices: Optional[dict[Literal[MATRIX_KEYS], tuple[Matrix, ...]]] = None
    precision: Literal[vocabulary.FLOW_PRECISIONS] = "float64"
    threads: int = Field(default=1, ge=1)
    device: Literal[vocabulary.SPHERE_FLOW_DEVICES] = "cpu"

    @field_validator("matrices", mode="before")
    @classmethod
    def _head_matrices(cls, value, info):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"got {value!r}: give a mapping with keys among {', '.join(MATRIX_KEYS)}, "
                             "each one d x d matrix or a list of heads of them")
        unknown = sorted(str(k) for k in value if k not in MATRIX_KEYS)
        if unknown:
            raise ValueError(f"has keys {unknown}: only {', '.join(MATRIX_KEYS)} are understood: "
                             "remove them or check their spelling")
        heads = info.data.get("heads")  # absent when heads itself is invalid (reported there)
        return {k: per_head_matrices(value[k], f"matrices.{k}", heads)
                for k in MATRIX_KEYS if k in value} or None

    @model_validator(mode="after")
    def _noise_value_rotation_hardmax_scaling(self):
        """The options of issue 8 (docs/models.md sections 2.4-2.7)."""
        if (self.noise is None) != (self.grid.sigma is None):
            raise refuse("noise" if self.noise is None else "grid.sigma",
                         "noise and grid.sigma go together: give both (noise: independent | "
                         "common, grid.sigma: [...]) or neither")
        if self.attention.endswith("hardmax") and len(self.grid.beta) > 1:
            raise refuse("grid.beta", f"attention {self.attention!r} is the beta -> infinity limit "
                          f"and does not use beta, got {list(self.grid.beta)}: give one value")
        preset_v = (self.time_varying is not None
                    and vocabulary.TIME_VARYING_PRESETS[self.time_varying][3])
        if self.value_rotation and self.grid.omega is not None:
            raise refuse("grid.omega", "and value_rotation both set the turning speed: give the "
                         "axis grid.omega or the one value value_rotation, not both")
        turning = "value_rotation" if self.value_rotation else "grid.omega" if self.turns else None
        if (turning and self.value in ("identity", "minus_identity")
                and "V" not in (self.matrices or {}) and not preset_v):
            raise refuse(turning, f"turns V's eigenvectors, but V = {self.value} has none "
                          f"to turn: choose a value ensemble or matrices.V, or remove {turning}")
        random_weights = self.qk != "identity" or self.value in ("ginibre", "goe", "wigner", "wishart")
        if self.ensemble_scaling == "authors" and not random_weights:
            raise refuse("ensemble_scaling", "'authors' rescales drawn matrices, but qk and value "
                          "draw none: remove ensemble_scaling or choose an ensemble")
        if self.noise is not None and self.integrator != "euler":
            raise refuse("integrator", f"noise is integrated by Euler-Maruyama, got integrator = "
                          f"{self.integrator!r}: set integrator: euler")
        if self.layer_norm != "post" and (self.integrator != "euler" or self.noise is not None):
            raise refuse("layer_norm", f"{self.layer_norm!r} is one Euler layer per step: set "
                          "integrator: euler and give no noise, or use layer_norm: post")
        return self

    @property
    def turns(self) -> bool:
        """Does V turn in some cell (`value_rotation`, or a nonzero value of grid.omega)?"""
        return bool(self.value_rotation) or any(self.grid.omega or ())

    @model_validator(mode="after")
    def _on_the_device(self):
        """device: cuda only where the GPU path covers the configuration (`gpu_refusal`)."""
        refusal = gpu_refusal(self)
        if refusal is not None:
            raise refuse(*refusal)
        return self

    @model_validator(mode="after")
    def _consistent_options(self):
        random_weights = self.qk != "identity" or self.value in ("ginibre", "goe", "wigner", "wishart")
        if self.period and not random_weights:
            raise refuse("period", f"{self.period} redraws random matrices, but qk = {self.qk!r} and "
                          f"value = {self.value!r} are fixed: remove period or choose an ensemble")
        if self.time_varying is not None:
            heads, d, fixes_qk, fixes_v = vocabulary.TIME_VARYING_PRESETS[self.time_varying]
            name = repr(self.time_varying)
            if heads is not None and self.heads != heads:
                raise refuse("heads", f"time_varying {name} has {heads} head(s), got heads = "
                              f"{self.heads}: set heads: {heads}")
            if d is not None and self.grid.d != (d,):
                raise refuse("grid.d", f"time_varying {name} is defined in d = {d}, got "
                              f"{list(self.grid.d)}: set grid.d: {d}")
            if fixes_qk and self.qk != "identity":
                raise refuse("qk", f"time_varying {name} fixes Q^T K = P', got qk = {self.qk!r}: "
                              "leave qk: identity")
            if fixes_v and self.value != "identity":
                raise refuse("value", f"time_varying {name} fixes V, got value = {self.value!r}: "
                              "leave value: identity")
        for key, mats in (self.matrices or {}).items():
            field = f"matrices.{key}"
            check_fixes_d(field, len(mats[0]), self.grid.d)
            if key in ("Q", "K") and self.qk != "identity":
                raise refuse(field, f"an explicit {key} fixes the query-key pair, but qk = {self.qk!r} "
                              f"draws it: remove {field} or set qk: identity")
            if key == "V" and self.value != "identity":
                raise refuse(field, f"an explicit V fixes the value matrix, but value = {self.value!r} "
                              f"sets it: remove {field} or set value: identity")
            if self.time_varying is not None:
                _, _, fixes_qk, fixes_v = vocabulary.TIME_VARYING_PRESETS[self.time_varying]
                if (fixes_qk and key in ("Q", "K")) or (fixes_v and key == "V"):
                    raise refuse(field, f"time_varying {self.time_varying!r} fixes "
                                  f"{'Q^T K' if key in ('Q', 'K') else 'V'}: remove {field}")
        return self


class SphereFlow(Model):
    name = "sphere_flow"
    summary = ("deterministic attention flow on the sphere [GLPR-P, RST]: dx_i/dt = P_x(A_i), "
               "SA/USA/causal, Q/K/V ensembles, heads, time-varying presets, Euler/Heun/RK4")
    spec = SphereFlowSweep
    outputs = vocabulary.SPHERE_FLOW_OUTPUTS
    report_facts = ("integrator", "noise", "value_rotation", "init", "heads", "qk", "value",
                    "ensemble_scaling", "layer_norm", "period", "time_varying",
                    "rst_scaling", "delta")

    def kernel_arguments(self, sweep, coords) -> dict:
        """The keywords of `kernels.sphere_flow.simulate_sphere_flow` for one cell."""
        matrices = ({key: np.asarray(m, dtype=np.float64) for key, m in sweep.matrices.items()}
                    if sweep.matrices else None)
        return dict(**sphere_cell(coords), attention=sweep.attention, integrator=sweep.integrator,
                    heads=sweep.heads, qk=sweep.qk, value=sweep.value, period=sweep.period,
                    time_varying=sweep.time_varying, delta=sweep.delta,
                    init=kernel_start(sweep.init) or "uniform_sphere",
                    rst_scaling=sweep.rst_scaling, matrices=matrices, precision=sweep.precision,
                    threads=sweep.threads, **option_arguments(sweep, coords), **time_arguments(sweep),
                    **record_arguments(sweep))

    def local_problem(self, sweep) -> Optional[str]:
        """device: cuda where this process's torch sees no CUDA GPU: why, in one line."""
        if sweep.device != "cuda":
            return None
        from ...kernels.sphere.gpu import NEEDS_CUDA, cuda_problem

        problem = cuda_problem()
        return None if problem is None else f"{NEEDS_CUDA}: {problem}"

    def simulate(self, sweep, coords, rngs):
        from ...kernels.sphere.flow import simulate_sphere_flow

        x0 = None if kernel_start(sweep.init) else starts_of(sweep, coords, rngs)
        return simulate_sphere_flow(rngs, **self.kernel_arguments(sweep, coords), x0=x0)

    @staticmethod
    def plain(sweep, value: str = "identity") -> bool:
        """Q = K = I, V = `value` ('identity' or 'minus_identity'), nothing time-varying or noisy."""
        return (sweep.qk == "identity" and sweep.value == value and sweep.time_varying is None
                and not sweep.matrices and sweep.noise is None and not sweep.turns
                and sweep.layer_norm == "post")

    @classmethod
    def closed_form_attention(cls, sweep) -> Optional[str]:
        """'sa' or 'usa' when the equiangular closed forms apply to this spec, else None."""
        fixed = cls.plain(sweep)
        return sweep.attention if fixed and sweep.attention in CLOSED_FORM_ATTENTIONS else None

    @staticmethod
    def time_factor(sweep, d) -> float:
        """Simulated time per unit of theory time: sqrt(d) with rst_scaling, divided by heads."""
        return (np.sqrt(float(d)) if sweep.rst_scaling else 1.0) / float(sweep.heads)

    def merge_time(self, sweep, cell: dict):
        """t*(beta) in simulated time for the cell (beta may be an array); None where n/a."""
        attention = self.closed_form_attention(sweep)
        if attention is None:
            return None
        betas = tuple(np.atleast_1d(np.asarray(cell["beta"], float)).tolist())
        star = _t_star(betas, int(cell["n"]), float(sweep.delta), attention)
        star = star * self.time_factor(sweep, cell["d"])
        return star if np.ndim(cell["beta"]) else float(star[0])

    def equiangular_overlap(self, sweep, times, cell: dict):
        """gamma at the simulated `times` for an equiangular start; None where n/a."""
        from .. import theory  # scipy: imported where a closed form is asked for
        attention = self.closed_form_attention(sweep)
        if sweep.init.kind != "equiangular" or attention is None:
            return None
        t_theory = np.asarray(times, float) / self.time_factor(sweep, cell["d"])
        return theory.equiangular_gamma(t_theory, float(cell["beta"]), int(cell["n"]), attention)

    def equiangular_rate(self, sweep, cell: dict):
        """Late-time rate of 1 - gamma(t) per unit of simulated time ([GLPR-P] Thm 6.8); None where n/a."""
        from .. import theory  # scipy: imported where a closed form is asked for
        attention = self.closed_form_attention(sweep)
        if sweep.init.kind != "equiangular" or attention is None:
            return None
        return theory.equiangular_rate(float(cell["beta"]), int(cell["n"]), attention) / \
            self.time_factor(sweep, cell["d"])

    def random_start_overlap(self, sweep, times, cell: dict):
        """gamma at the simulated `times`, which the overlaps of uniform starts track as d grows
        ([GLPR-P] Thm 6.9, stated for SA; Remark D.1 for USA); None where n/a."""
        attention = self.closed_form_attention(sweep)
        if sweep.init.kind != "uniform" or attention is None:
            return None
        from .. import theory  # scipy: imported where a closed form is asked for
        t_theory = np.asarray(times, float) / self.time_factor(sweep, cell["d"])
        return theory.equiangular_gamma(t_theory, float(cell["beta"]), int(cell["n"]), attention)

    def token2_overlap(self, sweep, times, cell: dict):
        """<x_1(0), x_2(t)> for two causal tokens, V = Q = K = I, started at overlap rho0 ([RST]):
        token 1 stays put (theory.causal_first_token with V = I), so it is <x_1(t), x_2(t)>."""
        if (sweep.attention != "causal_sa" or not self.plain(sweep) or int(cell["n"]) != 2
                or sweep.init.kind != "overlap"):
            return None
        from .. import theory  # scipy: imported where a closed form is asked for
        rho0 = float(cell["rho0"]) if "rho0" in cell else float(sweep.init.rho0)
        t_theory = np.asarray(times, float) / self.time_factor(sweep, cell["d"])
        return theory.causal_token2_overlap(rho0, float(cell["beta"]), t_theory)

    def sharp_overlaps(self, sweep, n, d):
        """The overlaps of the sharp configuration V = -I settles on ([GLPR-P] section 9.1), or None."""
        if (sweep.attention not in CLOSED_FORM_ATTENTIONS or not self.plain(sweep, "minus_identity")
                or int(n) < 2 or int(d) < 2):
            return None
        from ..theory.sharp import sharp_overlaps
        return sharp_overlaps(n, d)

    def hemisphere_probability(self, sweep, n, d):
        """P(the start lies in an open hemisphere): Wendel's for uniform starts, 1 for a half
        sphere, an orthonormal frame or a pair at overlap rho0 > -1; NaN (none known) otherwise."""
        from .. import theory  # scipy: imported where a closed form is asked for
        shape = np.broadcast(n, d).shape
        kind = sweep.init.kind
        if kind == "uniform":
            return theory.wendel_probability(n, d)
        if kind == "overlap" and sweep.grid.rho0 is None:
            return np.full(shape, float(sweep.init.rho0 > -1))
        return np.full(shape, 1.0 if kind in ("hemisphere", "equiangular") else np.nan)

    def sections(self, sweep):
        # here, not above: workers never draw (matplotlib, scipy.stats)
        from ..report import clustering, overlaps, regions, turning

        return [clustering.merge_section, clustering.cluster_count_section,
                clustering.hemisphere_section, clustering.equiangular_section,
                overlaps.tracking_section, overlaps.token2_section, overlaps.sharp_section,
                regions.proven_section, turning.turning_section]


def kernel_start(start: Start):
    """The kernel's own name of a start it draws itself (the old kinds, same numbers), else None."""
    if start.kind == "uniform":
        return "uniform_sphere"
    if start.kind == "hemisphere" and start.v == "e1":
        return "hemisphere"
    return "equiangular" if start.kind == "equiangular" else None


def option_arguments(sweep, coords) -> dict:
    """The kernel's keywords of the issue-8 options for one cell (noise, value_rotation,
    hardmax_tol, ensemble_scaling, layer_norm, device); with every option at its default, none
    (today's call)."""
    out = {} if sweep.noise is None else {"noise": sweep.noise, "sigma": float(coords["sigma"])}
    omega = float(coords["omega"]) if "omega" in coords else sweep.value_rotation
    if omega:
        out["value_rotation"] = omega
    if sweep.attention.endswith("hardmax"):
        out["hardmax_tol"] = sweep.hardmax_tol
    if sweep.ensemble_scaling != "normalised":
        out["ensemble_scaling"] = sweep.ensemble_scaling
    if sweep.layer_norm != "post":
        out.update(layer_norm=sweep.layer_norm, ngpt_alpha=sweep.ngpt_alpha)
    if sweep.device != "cpu":
        out["device"] = sweep.device
    return out


@functools.lru_cache(maxsize=64)
def _t_star(betas: tuple, n: int, delta: float, attention: str) -> np.ndarray:
    from .. import theory  # scipy: imported where a closed form is asked for
    return np.atleast_1d(theory.t_star(np.asarray(betas, float), n, delta, attention))


model = SphereFlow()
