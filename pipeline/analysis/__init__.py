"""Statistics of a cube, by outcome: `stats` (intervals, chi-square, which trajectories count),
`antipodal` (cluster classes of the stochastic models), `clustering` (merging over time in the
deterministic flows), `geometry` (final configurations of the flow in R^d).

Closed forms come from the cube's model (`stats.closed_form`): an outcome module asks the model
for a named theory and never names a model itself.
"""
