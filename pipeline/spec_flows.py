"""Specs of the deterministic attention flows: on the sphere [GLPR-P, RST] and in R^d [GLPR-E].

Their options mirror the kernels' keywords (kernels/sphere_flow.py, kernels/euclidean_flow.py);
combinations a kernel cannot run (an equiangular start with d < n, an explicit matrix whose size
is not grid.d, an ensemble and an explicit matrix for the same slot) are refused here, before
compute, naming the field and the fix.
"""

from __future__ import annotations

import math
from typing import Literal, Optional, Union

import numpy as np
from pydantic import Field, field_validator, model_validator


from .spec_fields import EuclideanGrid, Grid, SweepBase

# names and constraints of the kernels' options, kept here so that parsing a spec does not import
# numba; tests/test_models_pipeline.py checks them against kernels/sphere_flow.py and ensembles.py
SPHERE_ATTENTIONS = ("sa", "usa", "causal_sa", "causal_usa")
QK_ENSEMBLES = ("identity", "ginibre", "goe", "wigner", "wishart")
VALUE_ENSEMBLES = ("identity", "minus_identity", "ginibre", "goe", "wigner", "wishart", "qk")
# preset -> (heads, d, fixes Q^T K, fixes V); None: any
TIME_VARYING_PRESETS = {
    "rst_two_head_hemisphere": (2, 3, True, False),
    "rst_causal": (1, 3, True, True),
    "rst_random_frequencies": (None, None, False, False),
}
Matrix = tuple[tuple[float, ...], ...]
MATRIX_KEYS = ("Q", "K", "V")  # the kernel's `matrices` keys (sphere_flow._resolve_weights)


def _refuse(field: str, text: str):
    """A cross-field error from a model validator, attributed to `field` by _format_errors."""
    return ValueError(f"{field}: {text}")


class SphereFlowSweep(SweepBase):
    """Deterministic attention flow on the sphere [GLPR-P, RST]: dx_i/dt = P_{x_i}(A_i(X)).

    Defaults are the kernel's (kernels/sphere_flow.py): SA, retraction Euler, one head,
    Q = K = V = I, uniform start, frac_close threshold delta = 1e-3.

    `matrices` fixes Q, K and/or V explicitly (never drawn): each one d x d matrix (every head)
    or a list of `heads` of them, normalised to (heads, d, d); it fixes grid.d, and a matrix it
    gives cannot also come from `qk` / `value` / a `time_varying` preset.

    >>> s = parse_sweep({"name": "f", "model": "sphere_flow", "grid": {"beta": 1, "d": 8, "n": 4},
    ...     "time": {"T": 3.0, "layers": 30}, "trajectories": 2, "init": "equiangular"})
    >>> s.attention, s.integrator, s.init, s.delta
    ('sa', 'euler', 'equiangular', 0.001)
    """

    model: Literal["sphere_flow"]
    attention: Literal[SPHERE_ATTENTIONS] = "sa"
    grid: Grid
    integrator: Literal["euler", "heun", "rk4"] = "euler"
    heads: int = Field(default=1, ge=1)
    qk: Literal[QK_ENSEMBLES] = "identity"
    value: Literal[VALUE_ENSEMBLES] = "identity"
    period: int = Field(default=0, ge=0)
    time_varying: Optional[Literal[tuple(TIME_VARYING_PRESETS)]] = None
    init: Literal["uniform_sphere", "hemisphere", "equiangular"] = "uniform_sphere"
    delta: float = Field(default=1e-3, gt=0, lt=1)
    rst_scaling: bool = False
    matrices: Optional[dict[Literal[MATRIX_KEYS], tuple[Matrix, ...]]] = None

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
        return {k: _per_head_matrices(value[k], f"matrices.{k}", heads)
                for k in MATRIX_KEYS if k in value} or None

    @model_validator(mode="after")
    def _consistent_options(self):
        if self.init == "equiangular":
            bad = [(d, n) for d in self.grid.d for n in self.grid.n if d < n]
            if bad:
                d, n = bad[0]
                raise _refuse("init", f"'equiangular' needs d >= n orthonormal tokens in every cell, "
                              f"but the grid pairs d = {d} with n = {n}: raise grid.d, lower grid.n "
                              "or use init: uniform_sphere")
        random_weights = self.qk != "identity" or self.value in ("ginibre", "goe", "wigner", "wishart")
        if self.period and not random_weights:
            raise _refuse("period", f"{self.period} redraws random matrices, but qk = {self.qk!r} and "
                          f"value = {self.value!r} are fixed: remove period or choose an ensemble")
        if self.time_varying is not None:
            heads, d, fixes_qk, fixes_v = TIME_VARYING_PRESETS[self.time_varying]
            name = repr(self.time_varying)
            if heads is not None and self.heads != heads:
                raise _refuse("heads", f"time_varying {name} has {heads} head(s), got heads = "
                              f"{self.heads}: set heads: {heads}")
            if d is not None and self.grid.d != (d,):
                raise _refuse("grid.d", f"time_varying {name} is defined in d = {d}, got "
                              f"{list(self.grid.d)}: set grid.d: {d}")
            if fixes_qk and self.qk != "identity":
                raise _refuse("qk", f"time_varying {name} fixes Q^T K = P', got qk = {self.qk!r}: "
                              "leave qk: identity")
            if fixes_v and self.value != "identity":
                raise _refuse("value", f"time_varying {name} fixes V, got value = {self.value!r}: "
                              "leave value: identity")
        for key, mats in (self.matrices or {}).items():
            field = f"matrices.{key}"
            _check_fixes_d(field, len(mats[0]), self.grid.d)
            if key in ("Q", "K") and self.qk != "identity":
                raise _refuse(field, f"an explicit {key} fixes the query-key pair, but qk = {self.qk!r} "
                              f"draws it: remove {field} or set qk: identity")
            if key == "V" and self.value != "identity":
                raise _refuse(field, f"an explicit V fixes the value matrix, but value = {self.value!r} "
                              f"sets it: remove {field} or set value: identity")
            if self.time_varying is not None:
                _, _, fixes_qk, fixes_v = TIME_VARYING_PRESETS[self.time_varying]
                if (fixes_qk and key in ("Q", "K")) or (fixes_v and key == "V"):
                    raise _refuse(field, f"time_varying {self.time_varying!r} fixes "
                                  f"{'Q^T K' if key in ('Q', 'K') else 'V'}: remove {field}")
        return self


def _square_matrix(value, field: str, names: tuple[str, ...] = ()):
    """A named choice, or a list of d lists of d finite numbers (returned as nested tuples)."""
    if isinstance(value, str) and names:
        if value not in names:
            raise ValueError(f"{value!r} is not a known matrix: use one of {', '.join(names)} "
                             f"or an explicit d x d list")
        return value
    if not isinstance(value, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in value):
        raise ValueError(f"got {value!r}: give {field} as a list of d lists of d numbers"
                         + (f" or one of {', '.join(names)}" if names else ""))
    rows = len(value)
    if rows == 0 or any(len(r) != rows for r in value):
        raise ValueError(f"is not a square matrix (row lengths {[len(r) for r in value]}): "
                         f"give {field} as a list of d lists of d numbers")
    try:
        matrix = tuple(tuple(float(x) for x in r) for r in value)
    except (TypeError, ValueError):
        raise ValueError(f"has entries that are not numbers: {value!r}") from None
    if not all(math.isfinite(x) for r in matrix for x in r):
        raise ValueError(f"has non-finite entries: give finite numbers in {field}")
    return matrix


def _check_fixes_d(field: str, size: int, grid_d: tuple[int, ...], alternative: str = ""):
    """An explicit size x size matrix fixes d: refuse a grid.d that is not exactly (size,)."""
    if grid_d != (size,):
        raise _refuse(field, f"an explicit {size} x {size} matrix fixes d = {size}, but grid.d is "
                      f"{list(grid_d)}: set grid.d: {size}" + alternative)


def _per_head_matrices(value, field: str, heads: Optional[int]) -> tuple:
    """One d x d matrix (for every head) or a list of `heads` of them -> `heads` matrices (nested
    tuples); heads None (itself invalid): no count check, a single matrix is kept once."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):  # a list of per-head arrays
        value = [m.tolist() if isinstance(m, np.ndarray) else m for m in value]
    per_head = (isinstance(value, list) and len(value) > 0 and isinstance(value[0], (list, tuple))
                and len(value[0]) > 0 and isinstance(value[0][0], (list, tuple)))
    items = list(enumerate(value)) if per_head else [(None, value)]
    mats = []
    for h, m in items:
        name = field if h is None else f"{field}.{h}"
        try:
            mats.append(_square_matrix(m, name))
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    if per_head:
        if heads is not None and len(mats) != heads:
            raise ValueError(f"{field}: is a list of {len(mats)} matrices, but heads = {heads}: give "
                             f"one d x d matrix per head, or a single one for every head")
        sizes = [len(m) for m in mats]
        if len(set(sizes)) > 1:
            raise ValueError(f"{field}: the heads' matrices have sizes {sizes}: every head needs a "
                             "d x d matrix of the same d")
        return tuple(mats)
    return tuple(mats) * (heads or 1)


class EuclideanFlowSweep(SweepBase):
    """Unnormalised attention flow in R^d [GLPR-E]: dx_i/dt = sum_j P_ij V x_j.

    V is "identity", "minus_identity" or an explicit d x d list (which fixes grid.d); Q, K are
    optional explicit matrices (default I). Tokens start in the box U[-box, box]^d by default.

    >>> s = parse_sweep({"name": "e", "model": "euclidean_flow", "grid": {"beta": 1, "d": 2, "n": 5},
    ...     "time": {"T": 1.0, "layers": 10}, "trajectories": 2, "V": [[1, 0], [0, -0.5]]})
    >>> s.V, s.init, s.box
    (((1.0, 0.0), (0.0, -0.5)), 'box', 5.0)
    """

    model: Literal["euclidean_flow"]
    grid: EuclideanGrid
    V: Union[Literal["identity", "minus_identity"], Matrix] = "identity"
    Q: Optional[Matrix] = None
    K: Optional[Matrix] = None
    integrator: Literal["euler", "rk4"] = "euler"
    init: Literal["box", "gaussian", "uniform_sphere"] = "box"
    box: float = Field(default=5.0, gt=0, allow_inf_nan=False)

    @field_validator("V", "Q", "K", mode="before")
    @classmethod
    def _square(cls, value, info):
        names = ("identity", "minus_identity") if info.field_name == "V" else ()
        return None if value is None else _square_matrix(value, info.field_name, names)

    @model_validator(mode="after")
    def _matrices_fix_d(self):
        for name in ("V", "Q", "K"):
            m = getattr(self, name)
            if m is not None and not isinstance(m, str):
                _check_fixes_d(name, len(m), self.grid.d,
                               " or use V: identity / minus_identity" if name == "V" else "")
        return self

