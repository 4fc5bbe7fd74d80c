"""Which sphere-flow specs `device: cuda` covers (`kernels/sphere/gpu.py`): the first option off
the GPU path, as a refusal that names the field and the fix (docs/models.md section 2.10)."""

from __future__ import annotations

__all__ = ["GPU_PATH", "gpu_refusal"]

GPU_PATH = ("device: cuda runs retraction Euler (with or without noise), Heun or RK4 with SA "
            "or USA, weights drawn once per trajectory or given, any heads and time_varying, V "
            "not turning, post-LN")


def gpu_refusal(sweep):
    """(field, text) of the first option `device: cuda` does not cover, or None (beta >= 0 is
    every spec's rule already)."""
    if sweep.device == "cpu":
        return None
    s = sweep
    checks = (  # field, its value, off the GPU path, the fix
        ("attention", s.attention, s.attention.endswith("hardmax"),
         "choose sa, usa, causal_sa or causal_usa"),
        ("period", s.period, s.period != 0, "remove period (draw the weights once)"),
        ("value_rotation", s.value_rotation, bool(s.value_rotation), "remove value_rotation"),
        ("grid.omega", s.grid.omega, s.grid.omega is not None, "remove grid.omega"),
        ("layer_norm", s.layer_norm, s.layer_norm != "post", "use layer_norm: post"))
    for field, value, off_path, fix in checks:
        if off_path:
            return field, f"got {value!r}, but {GPU_PATH}: {fix}, or set device: cpu"
    return None
