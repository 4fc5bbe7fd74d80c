"""Closed forms the simulated phase diagrams are checked against (derivations in docs/models.md),
by family:

    scale          the scale function of a two-token overlap diffusion (the shared machinery)
    two_token      the deep stochastic transformer's beta_c and antipodal probability, the hybrid
                   model's sigma_c and antipodal probability (T = infinity)
    finite         the same two-token outcomes at a finite horizon T
    deterministic  the deterministic flows: equiangular ODEs, t*, Wendel's hemisphere probability,
                   the causal solutions
    sharp          the sharp configurations of n points on S^(d-1) (their overlaps)
    regions        [GLPR-P]'s proven single-cluster regions (Fig. 2) and Thm 5.1's tau*_beta, g(tau)

The T = infinity forms are re-exported here (``theory.antipodal_probability``); the others are
imported from their modules. The modules import one another directly, never this package.
"""

from __future__ import annotations

from .deterministic import (
    causal_first_token,
    causal_token2_overlap,
    equiangular_gamma,
    equiangular_rate,
    equiangular_rhs,
    t_star,
    wendel_probability,
)
from .two_token import (
    antipodal_probability,
    antipodal_probability_given_overlap,
    beta_c,
    hybrid_antipodal_probability,
    hybrid_sigma_c,
)

__all__ = ["beta_c", "antipodal_probability_given_overlap", "antipodal_probability", "hybrid_sigma_c",
           "hybrid_antipodal_probability", "equiangular_rhs", "equiangular_gamma", "equiangular_rate", "t_star",
           "wendel_probability", "causal_first_token", "causal_token2_overlap"]
