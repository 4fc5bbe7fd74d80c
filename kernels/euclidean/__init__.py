"""Unnormalised attention dynamics of tokens in R^d [GLPR-E] (docs/models.md section 3).

- `flow`: the entry point `simulate_euclidean_flow` and the block integration;
- `schemes`: the frames e^{tV} / R^k and the steps (euler, rk4, the discrete transformer);
- `reductions`: what a checkpoint records (cluster count, spread, Boolean defect).

Imports nothing: each module is imported by name.
"""
