"""tokensweep.kernels: numba kernels of the token dynamics and their outcome reductions. No I/O.

Each model module has one entry point taking a sequence of numpy Generators (one per trajectory,
consumed in a documented order) and returning the outcome arrays that its OUTPUTS describes:

- `stochastic`: deep stochastic transformer x_i <- N(x_i + sqrt(h) V_k A_i), random V_k per layer;
- `hybrid`: x_i <- N(x_i + (h + sigma sqrt(h) xi_k) A_i), one scalar xi_k per layer;
- `sphere_flow`, `euclidean_flow`: deterministic attention flows on the sphere and in R^d;
- `attention`: SA / USA / causal SA with stable logits, the exact Gaussian noise factor;
- `outcomes`: overlaps, cluster class, cluster count, t_hit, and the record a kernel fills;
- `vocabulary`: the OutputSpec of every output and the option names, without numba.

Importing the package loads nothing: `vocabulary` stays numba-free, and the names below are
imported from their modules on first use.
"""

import importlib

_EXPORTS = {
    "ATTENTIONS": ".stochastic",
    "NOISES": ".stochastic",
    "OUTPUTS": ".outcomes",
    "OutputSpec": ".vocabulary",
    "simulate_hybrid": ".hybrid",
    "simulate_hybrid_states": ".hybrid",
    "simulate_stochastic_states": ".stochastic",
    "simulate_stochastic_transformer": ".stochastic",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
