"""The kernels' vocabulary: every output they return and every option name they accept. No numba.

This is the one place these are written down. The kernel modules take their names from here
(`stochastic.ATTENTIONS is STOCHASTIC_ATTENTIONS`, `sphere_flow.OUTPUTS is SPHERE_FLOW_OUTPUTS`,
...), and the pipeline reads them here to parse specs and shape stores without importing numba
or compiling anything (`tests/test_kernel_cache.py` checks that importing this module loads no
numba).

Outputs. An `OutputSpec` describes one returned array: (ntraj, nt) if per checkpoint, else
(ntraj,), then one trailing axis per name in `extra_dims` (sizes from the run: `bin`, `i`, `j`,
`token`, `component`), its dtype, its CF attributes and `missing`, the value the kernels' output
arrays are allocated with: a checkpoint that a trajectory never reaches (its state became
non-finite first) keeps it. The mathematics of each output is in the module that computes it
(`outcomes`, `sphere.flow`, `euclidean.flow`, `observables`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# cluster_class flags (outcomes.classify)
UNRESOLVED = 0
SINGLE_CLUSTER = 1
ANTIPODAL = 2


class _ByDtype:
    """Default of OutputSpec.missing: replaced by missing_for(dtype) on construction."""

    def __repr__(self):
        return "missing_for(dtype)"


_BY_DTYPE = _ByDtype()


def missing_for(dtype: str):
    """Default `missing` of a dtype: NaN for floats, False for bool, 0 for integers."""
    if dtype.startswith("float"):
        return math.nan  # one shared object: specs holding it compare (and hash) equal
    return False if dtype == "bool" else 0


@dataclass(frozen=True)
class OutputSpec:
    """One returned array: shape (ntraj, nt) if per_checkpoint else (ntraj,), then one axis per
    name in extra_dims (its size set by the run, e.g. bin: record_bins), with CF attributes.

    missing: the value of an entry no kernel wrote, e.g. the checkpoints after a state became
    non-finite; by default `missing_for(dtype)`.
    """

    per_checkpoint: bool
    dtype: str
    long_name: str
    units: str
    flag_values: tuple | None = None
    flag_meanings: str | None = None
    missing: object = _BY_DTYPE
    extra_dims: tuple = ()

    def __post_init__(self):
        if self.missing is _BY_DTYPE:
            object.__setattr__(self, "missing", missing_for(self.dtype))

    def attrs(self):
        """CF attributes for the store variable."""
        out = {"long_name": self.long_name, "units": self.units}
        if self.flag_values is not None:
            out["flag_values"] = list(self.flag_values)
            out["flag_meanings"] = self.flag_meanings
        return out


# ---------------------------------------------------------------------------------------------
# outputs

# the outcomes every sphere model shares (`outcomes`)
SPHERE_OUTCOMES = {
    "overlap_min": OutputSpec(True, "float64", "minimum pairwise overlap <x_i, x_j> over i < j", "1"),
    "overlap_max": OutputSpec(True, "float64", "maximum pairwise overlap <x_i, x_j> over i < j", "1"),
    "cluster_class": OutputSpec(
        True, "int8", "cluster configuration class", "1",
        flag_values=(UNRESOLVED, SINGLE_CLUSTER, ANTIPODAL),
        flag_meanings="unresolved single_cluster antipodal",
    ),
    "n_clusters": OutputSpec(
        True, "int16", "number of clusters (components of the graph overlap >= 1 - eps)", "1"
    ),
    "t_hit": OutputSpec(
        False, "float64", "time of the first checkpoint from which cluster_class stays constant", "1"
    ),
    "nonfinite": OutputSpec(False, "bool", "state became non-finite; integration stopped", "1"),
}
STOCHASTIC_OUTPUTS = SPHERE_OUTCOMES
HYBRID_OUTPUTS = SPHERE_OUTCOMES

SPHERE_FLOW_OUTPUTS = {
    **SPHERE_OUTCOMES,
    "frac_close": OutputSpec(
        True, "float64", "fraction of token pairs i < j with overlap >= 1 - delta", "1"
    ),
    "in_hemisphere": OutputSpec(
        True, "bool", "tokens lie in an open hemisphere (0 not in their convex hull)", "1"
    ),
    "energy": OutputSpec(
        True, "float64", "interaction energy (1/(2 beta n^2)) sum_ij exp(beta <x_i, x_j>)", "1"
    ),
}

EUCLIDEAN_FLOW_OUTPUTS = {
    "n_clusters": OutputSpec(
        True, "int16", "number of clusters of z (components of |z_i - z_j| <= eps * r0)", "1"
    ),
    "spread": OutputSpec(True, "float64", "largest token norm max_i |x_i|", "1"),
    "log_boolean_defect": OutputSpec(
        True, "float64", "log of the distance of P(t) to the Boolean set of [GLPR-E] Fig. 2: the "
        "second largest over rows i of 1 - max_j P_ij (first head; -inf: Boolean)", "1"
    ),
    "nonfinite": OutputSpec(False, "bool", "state became non-finite; integration stopped", "1"),
    "z_final": OutputSpec(False, "float64", "rescaled tokens z = exp(-TV) x at time T", "1"),
    "P_final": OutputSpec(False, "float64", "attention matrix P at time T", "1"),
}
# trailing dimensions of the kernel's final states (reduced by the plug-in, never stored)
EUCLIDEAN_EXTRA_DIMS = {"z_final": ("token", "coord"), "P_final": ("token", "token_j")}

# Observables over time, recorded on request (a spec's `record:` list; `observables`): each is
# an output of the sphere models when asked for, absent otherwise. gram and states need one n and
# one d per spec (their trailing dimensions). docs/models.md section 10.
OBSERVABLES = {
    "overlap_hist": OutputSpec(
        True, "int32", "number of token pairs i < j with overlap <x_i, x_j> in the bin", "1",
        missing=-1, extra_dims=("bin",),
    ),
    "gram": OutputSpec(True, "float64", "overlap <x_i, x_j> (Gram matrix)", "1",
                       extra_dims=("i", "j")),
    "states": OutputSpec(True, "float64", "token position x_i", "1",
                         extra_dims=("token", "component")),
    "hemisphere_margin": OutputSpec(
        True, "float64", "min_i <x_i, v>, v the hemisphere direction (record_direction, else the "
        "max-margin direction of the start)", "1",
    ),
    "consensus_error": OutputSpec(True, "float64", "1 - mean_i <x_1, x_i>", "1"),
    "consensus_error_abs": OutputSpec(True, "float64", "1 - mean_i |<x_1, x_i>|", "1"),
    "energy": SPHERE_FLOW_OUTPUTS["energy"],
}
RECORD_NAMES = tuple(OBSERVABLES)
PER_CELL_SHAPED = ("gram", "states")  # their sizes follow n and d: one n and one d per spec
DEFAULT_RECORD_BINS = 100
# the direction v of hemisphere_margin, per trajectory (not an output): given, or NaN until the
# kernel sets it from the start
HEMISPHERE_DIRECTION = OutputSpec(False, "float64", "hemisphere direction v", "1",
                                  extra_dims=("component",))


# ---------------------------------------------------------------------------------------------
# option names

STOCHASTIC_ATTENTIONS = ("sa", "usa", "causal_sa")
NOISES = ("gaussian", "literal")
HYBRID_ATTENTIONS = STOCHASTIC_ATTENTIONS

SPHERE_FLOW_ATTENTIONS = ("sa", "usa", "causal_sa", "causal_usa", "hardmax", "causal_hardmax")
SPHERE_FLOW_INTEGRATORS = ("euler", "heun", "rk4")
SPHERE_FLOW_INITS = ("uniform_sphere", "hemisphere", "equiangular")
FLOW_PRECISIONS = ("float64", "float32")  # arithmetic of the deterministic flows' state
SPHERE_FLOW_DEVICES = ("cpu", "cuda")  # the numba kernels, or `sphere.gpu` on a CUDA GPU
# numba-cuda runs its kernels in a simulator on the CPU where this is "1" (read at numba.cuda's
# import): the device path without a GPU
SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"
QK_ENSEMBLES = ("identity", "ginibre", "goe", "wigner", "wishart")
LAYER_NORMS = ("post", "pre", "peri", "ngpt")  # `sphere.norms`
ENSEMBLE_SCALINGS = ("normalised", "authors")  # `ensembles.authors_scaling`
VALUE_ENSEMBLES = ("identity", "minus_identity", "ginibre", "goe", "wigner", "wishart", "qk")

# "discrete": the discrete-time transformer [GLPR-E] (3) on Remark 4's rescaled tokens
EUCLIDEAN_INTEGRATORS = ("euler", "rk4", "discrete")
EUCLIDEAN_VALUE_ENSEMBLES = ("ginibre", "goe", "wigner", "wishart")  # V drawn per trajectory
EUCLIDEAN_MAX_CONDITION = 1e8  # of R = I + hV for "discrete": beyond it R^{-1} loses > 8 digits
EUCLIDEAN_INITS = ("box", "gaussian", "uniform_sphere")

# [RST]'s time-varying examples (docs/models.md section 6; their meaning: `ensembles`). P: the fixed
# bilinear forms P'_h = Q_h^T K_h, V: the values, schedule: (amp, omega, phase) per head.
_P1 = [[0.0805, -0.1929, 0.1991], [-0.2312, 0.3131, -0.2335], [0.1788, -0.1732, -0.1594]]
_P2 = [[-0.3067, 0.0349, 0.1107], [0.0572, -0.0557, 0.1343], [0.1375, 0.1083, 0.1018]]
_PC = [[0.3598, 0.4150, 0.1319], [0.0971, -0.0668, -0.2046], [0.1548, -0.2102, 0.1220]]
_UC = [[-0.2590, 0.4965, 0.5609], [0.4965, -0.7174, -0.5003], [0.5609, -0.5003, -0.0247]]
_PI = math.pi
# D = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t) and 2 diag(cos 6 pi t, sin 6 pi t, cos 4 pi t),
# with sin x = cos(x - pi/2)
_D1 = ([2.0, 2.0, 2.0], [10 * _PI, 10 * _PI, 6 * _PI], [0.0, -_PI / 2, 0.0])
_D2 = ([2.0, 2.0, 2.0], [6 * _PI, 6 * _PI, 4 * _PI], [0.0, -_PI / 2, 0.0])

TIME_VARYING = {
    # [RST] full attention, two heads, U = I, d = 3 (run with init="hemisphere", attention="sa")
    "rst_two_head_hemisphere": dict(
        heads=2, d=3, P=[_P1, _P2], V=None, schedule=[_D1, _D2], absolute=False, random=False
    ),
    # [RST] causal, one head, d = 3, value U with eigenvalues 0.439, -0.022, -1.419
    "rst_causal": dict(heads=1, d=3, P=[_PC], V=[_UC], schedule=[_D1], absolute=False, random=False),
    # [RST] causal, (D)_kk = |2 sin(omega t + phi)|, omega ~ U(0, 1), phi ~ U(0, 2 pi) per trajectory;
    # P' and V come from qk / value / matrices (default identity)
    "rst_random_frequencies": dict(
        heads=None, d=None, P=None, V=None, schedule=None, absolute=True, random=True
    ),
}
# preset -> (heads, d, fixes Q^T K, fixes V); None: any
TIME_VARYING_PRESETS = {
    name: (p["heads"], p["d"], p["P"] is not None, p["V"] is not None)
    for name, p in TIME_VARYING.items()
}
