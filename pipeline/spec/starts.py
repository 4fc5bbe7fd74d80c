"""Initial conditions: the spec field `init` every model shares (`StartSweep`), its checks against
the grid, and the starts of one partition's trajectories.

A spec writes `init` as a kind name or a mapping with `kind` and that kind's parameters:

================  ==========================================  =========================================
kind              parameters (defaults)                       start of every trajectory
================  ==========================================  =========================================
``uniform``       radius (1; other values in R^d only)        i.i.d. uniform on the sphere (the default)
``hemisphere``    v: list of d numbers | ``e1`` | ``random``   i.i.d. uniform on the open half sphere
                  (``e1``)                                    {<x, v> > 0}; ``random``: v uniform, per
                                                              trajectory
``overlap``       rho0 in [-1, 1], or the grid axis rho0      two tokens, a uniformly random pair with
                                                              <x_1, x_2> = rho0 exactly (n = 2)
``equiangular``   (none)                                      a Haar-random orthonormal n-frame (d >= n)
``box``           half_width (1), normalise (false)           i.i.d. U[-a, a]^d, rows normalised when
                                                              normalise (required on the sphere)
``gaussian``      std (1)                                     i.i.d. N(0, std^2) coordinates (R^d only)
``file``          path of a .npy file; sha256 (filled in)     an (n, d) array for every trajectory, or
                                                              row r of a (trajectories, n, d) array
                                                              (tokens normalised on the sphere)
``points``        x: n lists of d numbers                     those tokens for every trajectory (a
                                                              paper's explicit example; normalised
                                                              on the sphere)
================  ==========================================  =========================================

Older spellings are still read and mean the same numbers: ``uniform_sphere`` is ``uniform``; the
sphere flow's ``hemisphere`` is ``{kind: hemisphere, v: e1}``; the R^d flow's ``init: box |
gaussian | uniform_sphere`` with ``box: a`` (default 5) is ``{kind: box, half_width: a}``,
``{kind: gaussian, std: a}``, ``{kind: uniform, radius: a}`` (`legacy_euclidean`).

Provenance of a file start: parsing records the file's absolute path and SHA-256 digest in the
spec, so a store holding a run from one file refuses to resume from a changed file (the digest is
a field like any other), and every partition checks the digest again before it uses the array.

Random numbers: a start is the first thing drawn from its trajectory's Generator (the stream of
each kind is in `kernels/starts.py`); the model then draws its layers' noise from the same
Generator. The uniform start of every model is drawn by its kernel, as before this field existed,
and the sphere flow draws its old kinds (uniform, hemisphere about e1, equiangular) itself too: the
numbers of existing specs are unchanged.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_serializer, model_validator

from .base import Strict, SweepBase, refuse, short

KINDS = ("uniform", "hemisphere", "overlap", "equiangular", "box", "gaussian", "file", "points")
SPELLINGS = {"uniform_sphere": "uniform"}  # older names of a kind
PARAMETERS = {  # the parameters each kind takes, with their defaults (None: required or filled in)
    "uniform": {"radius": 1.0},
    "hemisphere": {"v": "e1"},
    "overlap": {"rho0": None},
    "equiangular": {},
    "box": {"half_width": 1.0, "normalise": False},
    "gaussian": {"std": 1.0},
    "file": {"path": None, "sha256": None},
    "points": {"x": None},
}
R_D_ONLY = "the sphere models put every token on the unit sphere"


class Start(Strict):
    """One initial condition (module docstring); absent parameters of its kind get their defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal[KINDS] = "uniform"
    radius: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    v: Union[Literal["e1", "random"], tuple[float, ...], None] = None
    rho0: Optional[float] = Field(default=None, ge=-1, le=1)
    half_width: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    normalise: Optional[bool] = None
    std: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    path: Optional[str] = None
    sha256: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    x: Optional[tuple[tuple[float, ...], ...]] = None

    @model_validator(mode="before")
    @classmethod
    def _spelled(cls, data):
        if isinstance(data, str):
            data = {"kind": data}
        if not isinstance(data, dict):
            raise ValueError(f"got {short(data)}: write a kind ({', '.join(KINDS)}) or a mapping "
                             "{kind: ..., parameters}")
        kind = SPELLINGS.get(data.get("kind", "uniform"), data.get("kind", "uniform"))
        if kind not in KINDS:
            raise ValueError(f"unknown kind {short(kind)}: choose one of {', '.join(KINDS)}")
        return {**data, "kind": kind}

    @field_validator("v")
    @classmethod
    def _direction(cls, value):
        if isinstance(value, tuple) and not (value and all(map(math.isfinite, value))
                                             and any(value)):
            raise ValueError(f"{list(value)} is not a direction: give d finite numbers, not all 0, "
                             "or e1 or random")
        return value

    @field_validator("x")
    @classmethod
    def _points(cls, value):
        if value is not None and not (value and len({len(row) for row in value}) == 1 and value[0]
                                      and all(math.isfinite(v) for row in value for v in row)):
            raise ValueError(f"got {short(value)}: give n tokens, each a list of d finite numbers")
        return value

    @model_validator(mode="after")
    def _parameters_of_kind(self):
        allowed = PARAMETERS[self.kind]
        for name in PARAMETERS_ALL:
            value = getattr(self, name)
            if name not in allowed and value is not None:
                raise refuse(f"init.{name}", f"is not a parameter of kind {self.kind} (it takes "
                             f"{', '.join(allowed) or 'none'}): remove it")
            if name in allowed and value is None and allowed[name] is not None:
                object.__setattr__(self, name, allowed[name])
        if self.kind == "file":
            self._pin_file()
        if self.kind == "points" and self.x is None:
            raise refuse("init.x", "missing: give the tokens, n lists of d numbers")
        return self

    def _pin_file(self):
        """Absolute path and digest, recorded at parse; a given digest is kept (a stored spec)."""
        if not self.path:
            raise refuse("init.path", "missing: give the .npy file of the starts")
        path = Path(self.path).expanduser().resolve()
        object.__setattr__(self, "path", str(path))
        if self.sha256 is None:
            object.__setattr__(self, "sha256", file_digest(path))

    @model_serializer(mode="wrap")
    def _only_set(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    def __str__(self) -> str:
        params = ", ".join(f"{k}: {getattr(self, k)}" for k in PARAMETERS[self.kind])
        return f"{self.kind} ({params})" if params else self.kind


PARAMETERS_ALL = tuple(name for name in Start.model_fields if name != "kind")


def legacy_euclidean(data):
    """The R^d flow's old ``init: box | gaussian | uniform_sphere`` with its scale ``box``
    (default 5) as the shared field; a spec without `init` starts in U[-5, 5]^d as before."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    scale = data.pop("box", None)
    if scale is not None and not (isinstance(scale, (int, float)) and not isinstance(scale, bool)
                                  and math.isfinite(scale) and scale > 0):
        raise ValueError(f"box: Input should be greater than 0 and finite, got {short(scale)}: "
                         "give the half width of the start box")
    init = data.get("init", "box")
    old = {"box": "half_width", "gaussian": "std", "uniform_sphere": "radius"}
    if isinstance(init, str) and init in old:
        kind = SPELLINGS.get(init, init)
        data["init"] = {"kind": kind, old[init]: 5.0 if scale is None else scale}
    elif scale is not None:
        raise ValueError(f"box: is the scale of the old spellings init: box | gaussian | uniform_sphere: "
                         f"write init: {{kind: box, half_width: {short(scale)}}} instead")
    return data


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes; a spec error naming init.path when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise refuse("init.path", f"{path} cannot be read ({err.strerror}): give an existing .npy file") from None


def load_file(start: Start) -> np.ndarray:
    """The array of a file start, after checking that it is still the file the spec recorded."""
    path = Path(start.path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != start.sha256:
        raise ValueError(f"init.path: {path} has changed since the spec was written (sha256 "
                         f"{digest[:12]}... is not {start.sha256[:12]}...): restore it, or run the "
                         "changed file into a new store")
    return _read_array(path)


def _read_array(path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise refuse("init.path", f"{path} is not a readable .npy array ({short(str(err))}): save "
                     "one with numpy.save") from None
    if array.dtype.kind not in "iuf" or array.ndim not in (2, 3):
        raise refuse("init.path", f"{path} holds a {array.ndim}-d {array.dtype} array: save an "
                     "(n, d) or (trajectories, n, d) array of numbers")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise refuse("init.path", f"{path} contains non-finite numbers: save finite starts")
    return array


# -- cross-field checks: the start against the grid (called from StartSweep) -------------------

def check_start(sweep) -> None:
    """Refuse a start that does not fit the grid, naming the field and the fix."""
    start, grid = getattr(sweep, "init", None), sweep.grid
    rho0_axis = getattr(grid, "rho0", None)
    on_sphere = getattr(sweep, "on_sphere", True)
    kind = start.kind if start is not None else None
    if rho0_axis is not None and not (kind == "overlap" and start.rho0 is None):
        raise refuse("grid.rho0", "is the initial overlap of two tokens: set init: overlap (without "
                     "rho0) or remove grid.rho0")
    if start is None:
        return
    if on_sphere:
        if kind == "uniform" and start.radius != 1.0:
            raise refuse("init.radius", f"{R_D_ONLY}: remove radius")
        if kind == "gaussian":
            raise refuse("init", f"kind gaussian: {R_D_ONLY}: use uniform (a normalised Gaussian)")
        if kind == "box" and not start.normalise:
            raise refuse("init.normalise", f"{R_D_ONLY}: set normalise: true")
    if kind == "overlap":
        if grid.n != (2,):
            raise refuse("init", f"kind overlap draws a pair of tokens, but grid.n is {list(grid.n)}: "
                         "set grid.n: 2")
        if min(grid.d) < 2:
            raise refuse("init", f"kind overlap needs a second direction, but grid.d has "
                         f"{min(grid.d)}: use d >= 2")
        if start.rho0 is None and rho0_axis is None:
            raise refuse("init.rho0", "missing: give init.rho0 in [-1, 1] or a grid axis grid.rho0")
    if kind == "equiangular":
        bad = [(d, n) for d in grid.d for n in grid.n if d < n]
        if bad:
            d, n = bad[0]
            raise refuse("init", f"'equiangular' needs d >= n orthonormal tokens in every cell, but the "
                         f"grid pairs d = {d} with n = {n}: raise grid.d, lower grid.n or use init: uniform")
    if kind == "hemisphere" and isinstance(start.v, tuple) and grid.d != (len(start.v),):
        raise refuse("init.v", f"a direction of {len(start.v)} numbers fixes d = {len(start.v)}, but "
                     f"grid.d is {list(grid.d)}: set grid.d: {len(start.v)} or use v: e1 | random")
    if kind == "file":
        _check_file(sweep, start, on_sphere)
    if kind == "points":
        shape = np.shape(start.x)
        if len(grid.n) != 1 or len(grid.d) != 1 or shape != (grid.n[0], grid.d[0]):
            raise refuse("init.x", f"holds {shape[0]} tokens of {shape[1]} numbers, but grid.n is "
                         f"{list(grid.n)} and grid.d is {list(grid.d)}: set grid.n: {shape[0]} and "
                         f"grid.d: {shape[1]}, or give matching tokens")
        if on_sphere and not (np.linalg.norm(start.x, axis=1) > 0).all():
            raise refuse("init.x", "has a zero token, which has no direction on the sphere: give "
                         "non-zero tokens")


def _check_file(sweep, start: Start, on_sphere: bool) -> None:
    array = _read_array(Path(start.path))
    shape, grid = array.shape, sweep.grid
    if len(grid.n) != 1 or len(grid.d) != 1 or shape[-2:] != (grid.n[0], grid.d[0]):
        raise refuse("init.path", f"{start.path} holds starts of shape {shape}, but grid.n is "
                     f"{list(grid.n)} and grid.d is {list(grid.d)}: set grid.n: {shape[-2]} and "
                     f"grid.d: {shape[-1]}, or save matching starts")
    if array.ndim == 3 and shape[0] != sweep.trajectories:
        raise refuse("init.path", f"{start.path} holds {shape[0]} starts, but trajectories is "
                     f"{sweep.trajectories}: set trajectories: {shape[0]} or save one start per trajectory")
    if on_sphere and not (np.linalg.norm(array, axis=-1) > 0).all():
        raise refuse("init.path", f"{start.path} has a zero token, which has no direction on the "
                     "sphere: save non-zero rows")


class StartSweep(SweepBase):
    """A sweep whose trajectories start from the shared field `init` (module docstring), checked
    against the grid once the whole spec is known (`check_start`). A model's spec class derives from
    it and may give `init` another default (the flow in R^d starts in a box)."""

    init: Start = Start()

    @model_validator(mode="after")
    def _start_fits_grid(self):
        check_start(self)
        return self


# -- the starts of one partition -----------------------------------------------------------------

def drawn_by_kernel(start: Start) -> bool:
    """True where the model's kernel draws the start itself (uniform on the sphere, as always)."""
    return start.kind == "uniform" and start.radius == 1.0


def starts_of(sweep, coords: dict, rngs: list) -> np.ndarray:
    """(len(rngs), n, d) starts of one partition, each the first draw of its trajectory's Generator
    (nothing is drawn for a file or points start; row r of a 3-d file goes to trajectory r, the
    tokens normalised on the sphere models)."""
    from ...kernels.starts import draw_starts

    start, n, d = sweep.init, int(coords["n"]), int(coords["d"])
    if start.kind in ("file", "points"):
        array = load_file(start) if start.kind == "file" else np.array(start.x, dtype=np.float64)
        if array.ndim == 2:
            array = np.repeat(array[None], len(rngs), axis=0)
        else:
            array = array[[trajectory_index(rng) for rng in rngs]]
        if getattr(sweep, "on_sphere", True):  # rows onto the sphere, as the kernels normalise
            array = array / np.linalg.norm(array, axis=2, keepdims=True)
        return array
    rho0 = coords.get("rho0", start.rho0)
    v = np.asarray(start.v, float) if isinstance(start.v, tuple) else start.v
    return draw_starts(rngs, start.kind, n, d, v=v, rho0=None if rho0 is None else float(rho0),
                       half_width=start.half_width, normalise=bool(start.normalise),
                       radius=start.radius, std=start.std)


def trajectory_index(rng: np.random.Generator) -> int:
    """The trajectory a Generator of `seeds.trajectory_rngs` belongs to: its spawn key's last word."""
    return int(rng.bit_generator.seed_seq.spawn_key[-1])


def initial_overlap(sweep, cells: dict, shape) -> Optional[np.ndarray]:
    """What a two-token closed form conditions on: None for a uniform start (the unconditional
    form applies), rho0 per cell for an overlap start, NaN (no closed form) for any other start."""
    start = getattr(sweep, "init", None)
    if start is None or drawn_by_kernel(start):
        return None
    if start.kind != "overlap":
        return np.full(shape, np.nan)
    rho0 = cells.get("rho0", start.rho0)
    return np.broadcast_to(np.asarray(np.nan if rho0 is None else rho0, float), shape)
