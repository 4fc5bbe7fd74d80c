"""The deep stochastic transformer [F26] (docs/models.md section 4): x_i <- N(x_i + sqrt(h) V_k A_i).

- `transformer`: the entry points `simulate_stochastic_transformer` / `simulate_stochastic_states`,
  the choice of path, and the two-token path;
- `general`: the general path (any n, law, attention, Q K); `options`: value laws, schemes, Q K;
- `lanes`: one trajectory's tokens in eight SIMD lanes; `pairs`: two trajectories in sixteen;
  `householder`: the R of the values' QR in those lanes;
- `sde`: the limit SDE by geodesic Euler-Maruyama.

Imports nothing: each module is imported by name.
"""
