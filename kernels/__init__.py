"""tokensweep.kernels: numba kernels of the token dynamics and their outcome reductions. No I/O.

Each model module has one entry point taking a sequence of numpy Generators (one per trajectory,
consumed in a documented order) and returning the outcome arrays that its OUTPUTS describes:

- `stochastic`: deep stochastic transformer x_i <- N(x_i + sqrt(h) V_k A_i), random V_k per layer;
- `hybrid`: x_i <- N(x_i + (h + sigma sqrt(h) xi_k) A_i), one scalar xi_k per layer;
- `attention`: SA / USA / causal SA with stable logits, the exact Gaussian noise factor;
- `outcomes`: overlaps, cluster class, cluster count, t_hit, and the OutputSpec of each output.
"""

from .cache import use_versioned_cache_dir

use_versioned_cache_dir()  # before any kernel module is imported: see cache.py

from .hybrid import simulate_hybrid, simulate_hybrid_states  # noqa: E402
from .outcomes import OUTPUTS, OutputSpec  # noqa: E402
from .stochastic import (  # noqa: E402
    ATTENTIONS,
    NOISES,
    simulate_stochastic_states,
    simulate_stochastic_transformer,
)

__all__ = [
    "ATTENTIONS", "NOISES", "OUTPUTS", "OutputSpec", "simulate_hybrid", "simulate_hybrid_states",
    "simulate_stochastic_states", "simulate_stochastic_transformer",
]
