"""The model registry: how a validated sweep calls each kernel.

Each entry pairs a model name with the description of what it stores (``outputs``, which
shapes the store) and an adapter that turns (sweep, cell coordinates, Generators) into
the kernel's keyword arguments, plus an optional ``finish`` step that reduces the kernel's
arrays to what is stored. The kernels know nothing of specs; the specs know nothing of
kernels; this module is the only place the two meet.

Every stored output has dims (grid..., [t,] traj) only: n and d vary over the grid, so an
(n, d) state per trajectory cannot be a variable of the cube. The euclidean flow's final
states z_final (ntraj, n, d) and attention matrices P_final (ntraj, n, n) are therefore
reduced here, with pipeline/geometry.py, to per-trajectory scalars (`EUCLIDEAN_REDUCTIONS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .spec import SweepBase


@dataclass(frozen=True)
class ModelEntry:
    name: str
    summary: str
    load: Callable[[], tuple[dict, Callable]]  # -> (stored outputs, simulate); lazy: numba import
    kwargs: Callable[[SweepBase, dict], dict]
    # (sweep, coords, kernel outputs) -> stored outputs; None: the kernel's arrays are stored as is
    finish: Optional[Callable[[SweepBase, dict, dict], dict]] = None

    @property
    def outputs(self) -> dict:
        """OutputSpec per stored variable: exactly the keys `simulate` returns."""
        return self.load()[0]

    def simulate(self, sweep: SweepBase, coords: dict, rngs: list) -> dict[str, np.ndarray]:
        _, simulate = self.load()
        out = simulate(rngs, **self.kwargs(sweep, coords))
        return out if self.finish is None else self.finish(sweep, coords, out)


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


def _load_sphere_flow():
    from ..kernels import sphere_flow

    return sphere_flow.OUTPUTS, sphere_flow.simulate_sphere_flow


def _sphere_flow_kwargs(s, c) -> dict:
    return dict(
        n=int(c["n"]), d=int(c["d"]), beta=float(c["beta"]), attention=s.attention,
        integrator=s.integrator, heads=s.heads, qk=s.qk, value=s.value, period=s.period,
        time_varying=s.time_varying, init=s.init, delta=s.delta, rst_scaling=s.rst_scaling,
        matrices=_head_matrices(s.matrices), **_time_kwargs(s),
    )


def _head_matrices(matrices) -> Optional[dict]:
    """The spec's explicit {Q, K, V} (heads, d, d) nested tuples as the kernel's float64 arrays."""
    if not matrices:
        return None
    return {key: np.asarray(m, dtype=np.float64) for key, m in matrices.items()}


def _matrix(spec, d: int, default=None):
    """A spec's matrix field as a (d, d) array: named choice, explicit list, or default."""
    if spec is None:
        return default
    if spec == "identity":
        return np.eye(d)
    if spec == "minus_identity":
        return -np.eye(d)
    return np.asarray(spec, dtype=np.float64)


def _euclidean_kwargs(s, c) -> dict:
    d = int(c["d"])
    return dict(
        n=int(c["n"]), d=d, beta=float(c["beta"]), T=s.time.T, layers=s.time.layers,
        checkpoint_layers=np.asarray(s.time.checkpoint_layers, dtype=np.int64),
        V=_matrix(s.V, d), Q=_matrix(s.Q, d), K=_matrix(s.K, d), integrator=s.integrator,
        init=s.init, box=s.box, eps=s.eps,
    )


# stored per trajectory in place of z_final / P_final; the -1 / NaN / False of a trajectory that
# is non-finite (or where psi_1 is undefined) are documented in the long names
EUCLIDEAN_REDUCTIONS = {
    "centres_on_hull": ("bool", "every cluster centre of z(T) is a vertex of the hull of the centres"),
    "n_psi1_values": ("int16", "distinct values of psi_1^T z_i(T) (psi_1 left top eigenvector of V; "
                               "-1 if the top eigenvalue of V is not real and simple)"),
    "attention_rank": ("int16", "numerical rank of P(T) (singular values > 1e-6 of the largest)"),
    "booleanness": ("float64", "distance sum_ij min(P_ij, 1 - P_ij) of P(T) to a Boolean matrix"),
}


def _top_eigenvalue_simple(V: np.ndarray) -> bool:
    """psi_1 is only defined when the eigenvalue of largest real part is real and simple."""
    vals = np.linalg.eigvals(V)
    order = np.argsort(-vals.real)
    top = vals[order[0]]
    if abs(top.imag) > 1e-12 * max(1.0, abs(top)):
        return False
    return len(vals) == 1 or vals[order[1]].real < top.real - 1e-9 * max(1.0, abs(top))


def _finish_euclidean(s, c, out: dict) -> dict:
    """z_final, P_final -> per-trajectory geometric outcomes (pipeline/geometry.py)."""
    from . import geometry

    z, P, bad = out.pop("z_final"), out.pop("P_final"), out["nonfinite"]
    ntraj = z.shape[0]
    V = _matrix(s.V, int(c["d"]))
    psi1_defined = _top_eigenvalue_simple(V)
    hull = np.zeros(ntraj, bool)
    n_psi1 = np.full(ntraj, -1, np.int16)
    rank = np.zeros(ntraj, np.int16)
    boolean = np.full(ntraj, np.nan)
    for r in np.flatnonzero(~bad):
        hull[r] = geometry.centres_are_hull_vertices(z[r], s.eps)
        if psi1_defined:
            n_psi1[r] = len(geometry.psi1_values(z[r], V, s.eps))
        rank[r], boolean[r] = geometry.attention_rank_and_booleanness(P[r])
    return {**out, "centres_on_hull": hull, "n_psi1_values": n_psi1, "attention_rank": rank,
            "booleanness": boolean}


def _load_euclidean():
    from ..kernels import euclidean_flow
    from ..kernels.outcomes import OutputSpec

    outputs = {k: v for k, v in euclidean_flow.OUTPUTS.items() if k not in ("z_final", "P_final")}
    for name, (dtype, long_name) in EUCLIDEAN_REDUCTIONS.items():
        outputs[name] = OutputSpec(False, dtype, long_name, "1")
    return outputs, euclidean_flow.simulate_euclidean_flow


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
    "sphere_flow": ModelEntry(
        name="sphere_flow",
        summary="deterministic attention flow on the sphere [GLPR-P, RST]: dx_i/dt = P_x(A_i), "
        "SA/USA/causal, Q/K/V ensembles, heads, time-varying presets, Euler/Heun/RK4",
        load=_load_sphere_flow,
        kwargs=_sphere_flow_kwargs,
    ),
    "euclidean_flow": ModelEntry(
        name="euclidean_flow",
        summary="unnormalised attention flow in R^d [GLPR-E]: dx_i/dt = sum_j P_ij V x_j; final "
        "states reduced to hull / hyperplane / Boolean-P outcomes",
        load=_load_euclidean,
        kwargs=_euclidean_kwargs,
        finish=_finish_euclidean,
    ),
}


def model_entry(name: str) -> ModelEntry:
    return REGISTRY[name]
