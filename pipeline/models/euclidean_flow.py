"""Plug-in: the unnormalised attention flow in R^d [GLPR-E] (docs/models.md section 3).

dx_i/dt = sum_h sum_j P^h_ij V_h x_j (one head by default), integrated by RK4 (the default, so
that rates are right), Euler, or as the discrete-time transformer of [GLPR-E] (3) / Remark 4. The
kernel returns the final rescaled tokens z(T) (n, d) and the attention matrix P(T) (n, n) per
trajectory; every stored output has dims (grid..., [t,] traj)
only, since n and d vary over the grid, so `simulate` reduces them here, with
`analysis.geometry`, to per-trajectory scalars (`REDUCTIONS`): whether the cluster centres are
hull vertices, the number of psi_1 hyperplanes, the rank and Booleanness of P(T).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal, Optional, Union

import numpy as np
from pydantic import Field, field_validator, model_validator

from ...kernels import vocabulary
from ...kernels.vocabulary import OutputSpec
from ..plugin import Model
from ..spec.base import Grid, refuse, short
from ..spec.matrices import Matrix, as_array, check_fixes_d, per_head_matrices, square_matrix
from ..spec.recording import RecordingSweep
from ..spec.starts import Start, StartSweep, legacy_euclidean, starts_of
from ..theory.good_triple import good_triple  # [GLPR-E] Def. 1: where psi_1 is defined
from ._common import sphere_cell, time_arguments

NAMED_V = ("identity", "minus_identity") + vocabulary.EUCLIDEAN_VALUE_ENSEMBLES
HeadMatrices = Union[Matrix, tuple[Matrix, ...]]  # one d x d matrix (every head) or one per head


class EuclideanGrid(Grid):
    """Tokens in R^d [GLPR-E]: d = 1 is allowed (no sphere to live on). `start_scale`: an axis of
    factors multiplying every start (the flow is not scale invariant: [GLPR-E] Remark 3)."""

    start_scale: Optional[tuple[float, ...]] = None

    @field_validator("start_scale")
    @classmethod
    def _positive_scale(cls, values):
        bad = [v for v in values if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"contains {bad}, but a start's scale must be finite and > 0: remove them")
        return values

    @field_validator("d")
    @classmethod
    def _sphere_dimension(cls, values):  # same name: replaces Grid's d >= 2 rule
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"contains {bad}, but R^d needs d >= 1: remove them from grid.d")
        return values


class EuclideanFlowSweep(RecordingSweep, StartSweep):
    """Unnormalised attention flow in R^d [GLPR-E]: dx_i/dt = sum_h sum_j P^h_ij V_h x_j.

    V is "identity", "minus_identity", an ensemble drawn per trajectory and head ("ginibre",
    "goe", "wigner", "wishart"), or explicit: one d x d list (every head) or `heads` of them,
    which fixes grid.d; Q, K are optional explicit matrices of the same shapes (default I).
    integrator: "rk4" (default; fourth order, so decay and growth rates are right), "euler" (the
    papers' first-order scheme on z = e^{-tV} x, stores written before the default changed say
    so) or "discrete" (the transformer [GLPR-E] (3) itself, step h; needs I + hV invertible).
    Tokens start in the box U[-5, 5]^d by default; `init` is the shared start field
    (`pipeline/spec/starts.py`), and the old `init: box | gaussian | uniform_sphere` with its scale `box`
    is read as before (`starts.legacy_euclidean`). `record: [states]` stores the rescaled tokens z
    at every checkpoint (one n and one d per spec), the only observable of this model.

    >>> from tokensweep.pipeline.spec.load import parse_sweep
    >>> s = parse_sweep({"name": "e", "model": "euclidean_flow", "grid": {"beta": 1, "d": 2, "n": 5},
    ...     "time": {"T": 1.0, "layers": 10}, "trajectories": 2, "V": [[1, 0], [0, -0.5]]})
    >>> s.V, str(s.init), s.integrator, s.heads
    (((1.0, 0.0), (0.0, -0.5)), 'box (half_width: 5.0, normalise: False)', 'rk4', 1)
    """

    on_sphere: ClassVar[bool] = False  # starts in R^d: any radius, box unnormalised, gaussian

    model: Literal["euclidean_flow"]
    grid: EuclideanGrid
    heads: int = Field(default=1, ge=1)
    V: Union[Literal[NAMED_V], HeadMatrices] = "identity"
    Q: Optional[HeadMatrices] = None
    K: Optional[HeadMatrices] = None
    integrator: Literal[vocabulary.EUCLIDEAN_INTEGRATORS] = "rk4"
    init: Start = Start(kind="box", half_width=5.0)
    codimension: bool = False  # codim_* outputs ([GLPR-E] Conj. 4.2, Thm 5.1): one head, V symmetric
    record: tuple[Literal["states"], ...] = ()  # `RecordingSweep`'s field, narrowed to what R^d records

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data):
        return legacy_euclidean(data)

    @field_validator("V", "Q", "K", mode="before")
    @classmethod
    def _square(cls, value, info):
        if value is None:
            return None
        if _is_per_head(value):
            try:
                return per_head_matrices(value, info.field_name, info.data.get("heads"))
            except ValueError as err:  # it names the field already: the error line adds it
                raise ValueError(str(err).removeprefix(f"{info.field_name}: ")) from None
        return square_matrix(value, info.field_name, NAMED_V if info.field_name == "V" else ())

    @model_validator(mode="after")
    def _matrices_fix_d(self):
        for name in ("V", "Q", "K"):
            m = getattr(self, name)
            if m is not None and not isinstance(m, str):
                check_fixes_d(name, len(m[0]) if _is_per_head(m) else len(m), self.grid.d,
                              " or use V: identity / minus_identity" if name == "V" else "")
        if self.integrator == "discrete" and self.V not in vocabulary.EUCLIDEAN_VALUE_ENSEMBLES:
            check_discrete_step(self)
        symmetric = self.V in ("identity", "minus_identity", "goe", "wishart") or (
            not isinstance(self.V, str) and all(np.allclose(m, np.transpose(m)) for m in
                                                np.reshape(np.asarray(self.V, float), (-1, *np.shape(self.V)[-2:]))))
        if self.codimension and (self.heads != 1 or not symmetric):
            raise refuse("codimension", f"[GLPR-E] Conj. 4.2 and Thm 5.1 are about one head and a symmetric V, got heads = "
                         f"{self.heads} and V = {short(self.V)}: set heads: 1 and V: goe | wishart | a symmetric "
                         "matrix, or remove codimension")
        return self


def _is_per_head(value) -> bool:
    """A list of matrices (depth 3), not one matrix."""
    return (isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], (list, tuple))
            and len(value[0]) > 0 and isinstance(value[0][0], (list, tuple)))


def head_arrays(matrix, d: int, heads: int) -> np.ndarray:
    """A spec's V, Q or K (None: I) as (heads, d, d) float64; not for a drawn V."""
    m = np.eye(d) if matrix is None else as_array(matrix, d)
    return np.ascontiguousarray(np.broadcast_to(m, (heads, d, d)))


def check_discrete_step(sweep) -> None:
    """The discrete transformer's rescaling needs R = I + h sum_h V_h invertible (Remark 4), in
    every cell (explicit matrices fix d; the named ones are checked in each d of the grid)."""
    h = sweep.time.h
    for d in sweep.grid.d:
        r = np.eye(d) + h * head_arrays(sweep.V, d, sweep.heads).sum(axis=0)
        with np.errstate(all="ignore"):
            cond = np.linalg.cond(r)
        if not cond < vocabulary.EUCLIDEAN_MAX_CONDITION:
            raise refuse("integrator", f"'discrete' rescales by R = I + hV ([GLPR-E] Remark 4), "
                         f"which is singular for h = {h:g} (condition number {cond:.3g}, d = {d}): "
                         "raise time.layers or use integrator: rk4")


def matrix_arguments(sweep, d: int) -> dict:
    """V, Q, K, heads as `simulate_euclidean_flow` takes them; a drawn V is named, and its draws
    come back (keep_values) for the per-trajectory reductions."""
    drawn = sweep.V in vocabulary.EUCLIDEAN_VALUE_ENSEMBLES
    return dict(V=sweep.V if drawn else head_arrays(sweep.V, d, sweep.heads),
                Q=head_arrays(sweep.Q, d, sweep.heads), K=head_arrays(sweep.K, d, sweep.heads),
                heads=sweep.heads, keep_values=drawn)


# stored per trajectory in place of z_final / P_final; the -1 / NaN / False of a trajectory that
# is non-finite (or where psi_1 is undefined) are documented in the long names
REDUCTIONS = {
    "centres_on_hull": OutputSpec(False, "bool", "every cluster centre of z(T) is a vertex of the hull "
                                                 "of the centres", "1"),
    "n_psi1_values": OutputSpec(False, "int16", "distinct values of psi_1^T z_i(T) (psi_1 left eigenvector "
                                                "of the eigenvalue of V of largest modulus; -1 unless that "
                                                "eigenvalue is real, positive, simple and <Q phi_1, K phi_1> > 0)",
                                "1"),
    "attention_rank": OutputSpec(False, "int16", "numerical rank of P(T) (singular values > 1e-6 of the "
                                                 "largest)", "1"),
    "booleanness": OutputSpec(False, "float64", "distance sum_ij min(P_ij, 1 - P_ij) of P(T) to a "
                                                "Boolean matrix", "1"),
}
FINAL_STATES = ("z_final", "P_final")
# `record: [states]`: the sphere models' observable, holding z over t in place of their x
STATES = {"states": replace(vocabulary.OBSERVABLES["states"], long_name="rescaled token z_i = exp(-tV) x_i "
                            "(the discrete transformer: R^-k x_i^k)")}
# `codimension: true` ([GLPR-E] Conj. 4.2, Thm 5.1): z(T) projected onto V's positive eigenspace
CODIMENSION = {
    "codim_values": OutputSpec(False, "int16", "distinct points among the projections of z_i(T) onto the "
                               "span of the eigenvectors of positive eigenvalue of the symmetric V, at eps "
                               "times their radius (-1 if V has no positive eigenvalue)", "1"),
    "codim_on_boundary": OutputSpec(False, "bool", "every projection of z_i(T) onto that span lies within eps "
                                    "times their largest norm of the boundary of their convex hull, or of 0", "1"),
}


def reduce_final_states(sweep, coords: dict, out: dict, x0) -> dict:
    """z_final, P_final -> the per-trajectory geometric outcomes of `REDUCTIONS`; x0: the starts."""
    from ..analysis import geometry as geo

    z, P, bad = out.pop("z_final"), out.pop("P_final"), out["nonfinite"]
    ntraj = z.shape[0]
    d = int(coords["d"])
    drawn = out.pop("V", None)  # (ntraj, heads, d, d) when V is drawn per trajectory
    Vs = drawn if drawn is not None else [head_arrays(sweep.V, d, sweep.heads)] * ntraj
    Q, K = (head_arrays(m, d, sweep.heads)[0] for m in (sweep.Q, sweep.K))
    # [GLPR-E] Thm 4.1 is about one head; several heads are an open problem (its section 6)
    psi1_defined = [sweep.heads == 1 and good_triple(v[0], Q, K) for v in Vs]
    hull = np.zeros(ntraj, bool)
    n_psi1 = np.full(ntraj, -1, np.int16)
    rank = np.zeros(ntraj, np.int16)
    boolean = np.full(ntraj, np.nan)
    for r in np.flatnonzero(~bad):
        # centres at eps times the start's radius, as the kernel's n_clusters: relative to the final
        # radius, a configuration shrunk to a point (small start scales, [GLPR-E] Remark 3) split
        # into n "centres", none a vertex
        hull[r] = geo.centres_are_hull_vertices(z[r], sweep.eps, scale=geo.radius(x0[r]))
        if psi1_defined[r]:
            n_psi1[r] = len(geo.psi1_values(z[r], Vs[r][0], sweep.eps))
        rank[r], boolean[r] = geo.attention_rank_and_booleanness(P[r])
    if sweep.codimension:
        out["codim_values"] = np.array([-1 if bad[r] else geo.positive_values(z[r], Vs[r][0], sweep.eps)
                                        for r in range(ntraj)], np.int16)
        out["codim_on_boundary"] = np.array([not bad[r] and geo.on_projected_boundary(z[r], Vs[r][0], sweep.eps)
                                             for r in range(ntraj)], bool)
    return {**out, "centres_on_hull": hull, "n_psi1_values": n_psi1, "attention_rank": rank,
            "booleanness": boolean}


class EuclideanFlow(Model):
    name = "euclidean_flow"
    summary = ("unnormalised attention flow in R^d [GLPR-E]: dx_i/dt = sum_j P_ij V x_j; final "
               "states reduced to hull / hyperplane / Boolean-P outcomes")
    spec = EuclideanFlowSweep
    outputs = {**{k: v for k, v in vocabulary.EUCLIDEAN_FLOW_OUTPUTS.items() if k not in FINAL_STATES},
               **REDUCTIONS}
    report_facts = ("V", "Q", "K", "heads", "integrator", "init")

    def spec_outputs(self, sweep) -> dict:
        return {**(CODIMENSION if sweep.codimension else {}), **(STATES if "states" in sweep.record else {})}

    def simulate(self, sweep, coords, rngs):
        from ...kernels.euclidean.flow import simulate_euclidean_flow

        d = int(coords["d"])
        x0 = starts_of(sweep, coords, rngs)
        if "start_scale" in coords:  # [GLPR-E] Remark 3: the same kind of start, scaled
            x0 = x0 * float(coords["start_scale"])
        out = simulate_euclidean_flow(
            rngs, **sphere_cell(coords), **matrix_arguments(sweep, d),
            integrator=sweep.integrator, x0=x0, return_states="states" in sweep.record, **time_arguments(sweep))
        return reduce_final_states(sweep, coords, out, x0)

    def geometry_claims(self, sweep, d) -> str:
        """The [GLPR-E] statements that apply to a cell of this spec (docs/models.md section 3)."""
        claims = []
        if sweep.heads > 1:
            return "several heads: no theorem (an open problem, [GLPR-E] section 6)"
        if sweep.V == "identity":
            claims.append("centres on the hull (P = 1)")
        elif sweep.V == "minus_identity":
            claims.append("x -> 0 like t^-1/2: spread exponent -> -1/2, sqrt(t) rms norm -> "
                          "sqrt(d / (2 beta)) (Q = K = I)")
        elif sweep.V in vocabulary.EUCLIDEAN_VALUE_ENSEMBLES:
            claims.append(f"V drawn ({sweep.V}): at most 3 psi_1 hyperplanes for the draws that "
                          "are good triples (others: —)")
        else:
            claims.append("at most 3 psi_1 hyperplanes (typically 2) if lambda_1 > 0 is simple")
        if int(d) == 1:
            claims.append("P(T) Boolean, rank <= 3")
        return "; ".join(claims)

    def boolean_rate(self, sweep, cell: dict) -> float | None:
        """The slope of log(-log D(t)) against t once P(t) has locked ([GLPR-E] Thm 2.1:
        `analysis.boolean_rate`): d = 1, one head, V > 0 and beta Q K > 0 given (not drawn);
        V for the flow (RK4), the scheme's own rate for Euler and the discrete transformer."""
        from ..analysis.boolean_rate import predicted_slope

        drawn = sweep.V in vocabulary.EUCLIDEAN_VALUE_ENSEMBLES
        if int(cell.get("d", 0)) != 1 or sweep.heads != 1 or drawn:
            return None
        V, Q, K = (float(head_arrays(m, 1, 1)[0, 0, 0]) for m in (sweep.V, sweep.Q, sweep.K))
        if not (V > 0 and float(cell.get("beta", 1.0)) * Q * K > 0):
            return None
        return predicted_slope(V, sweep.time.h, sweep.integrator)

    def sections(self, sweep):
        from ..report import boolean_rate, geometry, start_scale  # here, not above: workers never draw

        return [geometry.geometry_section, boolean_rate.boolean_rate_section, start_scale.start_scale_section]


model = EuclideanFlow()
