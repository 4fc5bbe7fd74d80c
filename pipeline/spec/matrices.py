"""Explicit d x d matrices in specs: one matrix, or one per attention head, as nested tuples.

Shared by the models that accept explicit weights (the sphere flow's `matrices`, the flow in R^d's
V, Q, K). An explicit matrix fixes d, so a grid with another d is refused, naming the field.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import refuse

Matrix = tuple[tuple[float, ...], ...]


def as_array(matrix, d: int) -> np.ndarray:
    """A spec's matrix field as a (d, d) float64 array: 'identity', 'minus_identity' or explicit."""
    if matrix == "identity":
        return np.eye(d)
    if matrix == "minus_identity":
        return -np.eye(d)
    return np.asarray(matrix, dtype=np.float64)


def square_matrix(value, field: str, names: tuple[str, ...] = ()):
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


def check_fixes_d(field: str, size: int, grid_d: tuple[int, ...], alternative: str = ""):
    """An explicit size x size matrix fixes d: refuse a grid.d that is not exactly (size,)."""
    if grid_d != (size,):
        raise refuse(field, f"an explicit {size} x {size} matrix fixes d = {size}, but grid.d is "
                      f"{list(grid_d)}: set grid.d: {size}" + alternative)


def per_head_matrices(value, field: str, heads: Optional[int]) -> tuple:
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
            mats.append(square_matrix(m, name))
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
