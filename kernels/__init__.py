"""tokensweep.kernels: numba kernels of the token dynamics and their outcome reductions. No I/O.

Each dynamics has one entry point taking a sequence of numpy Generators (one per trajectory,
consumed in a documented order) and returning the outcome arrays that its OUTPUTS describes:

- `stochastic/` (`stochastic.transformer`): deep stochastic transformer
  x_i <- N(x_i + sqrt(h) V_k A_i), random V_k per layer: its general, lanes, pairs and SDE paths;
- `hybrid`: x_i <- N(x_i + (h + sigma sqrt(h) xi_k) A_i), one scalar xi_k per layer;
- `sphere/` (`sphere.flow`), `euclidean/` (`euclidean.flow`): deterministic attention flows on the
  sphere and in R^d;
- shared by them: `attention` (SA / USA / causal SA with stable logits), `value_noise`,
  `outcomes` (overlaps, cluster class, cluster count, t_hit, and the record a kernel fills),
  `observables`, `ensembles`, `starts`, `hemisphere`, `blocks`;
- `lowlevel/`: numba building blocks (SIMD lanes, vectorised exp, libm-exact exp, BLAS on blocks);
- `cache`: numba's cache folder, named after a digest of every kernel source;
- `vocabulary`: the OutputSpec of every output and the option names, without numba.

A counter passed to a jitted callee starts as `np.int64(0)`, not `0`: numba types the call
once with the literal (the loop's first pass) and once with int64, and compiles the callee, and
everything it calls with that counter, twice (measured: ~30 s of the quick suite's ~220 s of
compilation). `benchmarks/pytest_compile_log.py` lists any function compiled for a literal.

A jitted function with one call site on a kernel's path is `inline="always"` (the sphere flow's
`step`, `euler_step`, `drift`, `_weights`, `noisy_euler_step`, `normalised_step`, `record`): as
a dispatcher of its own it would be compiled and finalised apart, its callees' machine code
generated again with it (measured: the general sphere path's first compilation 61-69 -> 55-57 s
of CPU; the same bits, all fingerprints identical).

Importing the package loads nothing: `vocabulary` stays numba-free, and the names below are
imported from their modules on first use.
"""

import importlib

_EXPORTS = {
    "ATTENTIONS": ".stochastic.transformer",
    "NOISES": ".stochastic.transformer",
    "OUTPUTS": ".outcomes",
    "OutputSpec": ".vocabulary",
    "simulate_hybrid": ".hybrid",
    "simulate_hybrid_states": ".hybrid",
    "simulate_stochastic_states": ".stochastic.transformer",
    "simulate_stochastic_transformer": ".stochastic.transformer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
