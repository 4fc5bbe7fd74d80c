"""Deterministic (and noisy) attention flows on the sphere [GLPR-P, RST] (docs/models.md 1, 2, 6).

- `flow`: the entry point `simulate_sphere_flow` (allocate, dispatch) and the general
  per-trajectory integration;
- `symmetric`: the fast path for Q = K = I, V = +-I, one head, Euler (the same bits);
- `gpu`: the Euler, Heun and RK4 configurations in PyTorch on a CUDA GPU, in batches: `gpu_starts` (Philox
  starts on the device), `gpu_general` (weights, heads, schedules, noise), `gpu_outcomes`
  (the checkpoints' outcomes, batched), `gpu_host` (what the host still decides);
- `drift`: the attention drift and the integrators' steps; `noise`: Brownian noise (projected
  Euler-Maruyama); `norms`: the layer-norm variants (pre, peri, nGPT);
- `options`: the options of a run (`SphereFlowOptions`), checked and resolved, and `Steps`, the
  record of what every trajectory shares that the numba kernels take;
- `arguments`: names of weights and time-varying schedules resolved to codes and matrices;
- `checkpoints`: what a trajectory records at each checkpoint (frac_close, energy, hemisphere).

Imports nothing: each module is imported by name.
"""
