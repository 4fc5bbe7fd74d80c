"""The sphere flow's GPU path with general weights (kernels/sphere/gpu_general.py) on torch's CPU
device: trajectory by trajectory against the numba kernel given the same start and matrices
(computed on the host from the device's Philox stream by a numpy reading of `ensembles`' rules),
and in distribution against the numba kernel's own draws (two-sample, 4 standard errors).
Tolerances as tests/test_kernel_sphere_torch.py (its module docstring)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GPU path needs PyTorch (the `gpu` extra; CI "
                                            "installs the CPU wheel)")

from tokensweep.kernels.ensembles import INIT_CODES  # noqa: E402
from tokensweep.kernels.lowlevel.philox import blocks_for, normals_numpy  # noqa: E402
from tokensweep.kernels.sphere import gpu_starts  # noqa: E402
from tokensweep.kernels.sphere.flow import simulate_sphere_flow  # noqa: E402

BASE = dict(beta=2.0, T=3.0, layers=30, checkpoint_layers=[10, 30], eps=1e-3, n=5, d=4)
TORCH_CPU = torch.device("cpu")


def rngs(count, seed=5):
    return [np.random.default_rng([seed, r]) for r in range(count)]


def host_matrix(z, kind, d):
    """`ensembles.draw_matrix`'s rule, in numpy, from the normals z."""
    s = 1.0 / math.sqrt(d)
    if kind == "wigner":
        out = np.zeros((d, d))
        out[np.triu_indices(d)] = s * z
        return np.triu(out) + np.triu(out, 1).T
    g = s * z.reshape(d, d)
    return {"ginibre": g, "goe": (g + g.T) / math.sqrt(2.0), "wishart": g.T @ g}[kind]


def host_weights(key, n, d, heads, qk, value, scaling):
    """(bilinear forms M (H, d, d), V (H, d, d)) of one trajectory from its Philox key: Q then K
    then V per head (ginibre draws Q and K; a symmetric qk ensemble is K with Q = I)."""
    block = blocks_for(n * d)

    def draw(kind):
        nonlocal block
        count = d * (d + 1) // 2 if kind == "wigner" else d * d
        z = normals_numpy(key, 0, block, count)
        block += blocks_for(count)
        return host_matrix(z, kind, d)

    eye = np.eye(d)
    ms, vs = [], []
    for _ in range(heads):
        q = draw("ginibre") if qk == "ginibre" else eye
        k = draw("ginibre") if qk == "ginibre" else (eye if qk == "identity" else draw(qk))
        v = {"identity": eye, "minus_identity": -eye, "qk": None}.get(value)
        v = draw(value) if v is None and value != "qk" else v
        m = q.T @ k
        if value == "qk":
            v = m
        if scaling == "authors":
            if qk != "identity":
                m = m * math.sqrt(d)
                if value == "qk":
                    v = m.T / (math.sqrt(d + 1.0) if qk == "goe" else math.sqrt(d))
            if value not in ("identity", "minus_identity", "qk"):
                v = v * math.sqrt(d)
        ms.append(m)
        vs.append(v)
    return np.stack(ms), np.stack(vs)


CASES = [
    dict(qk="ginibre", value="ginibre", attention="sa"),
    dict(qk="wigner", value="wishart", attention="causal_usa"),
    dict(qk="ginibre", value="qk", attention="sa", ensemble_scaling="authors"),
    dict(qk="goe", value="identity", attention="usa", heads=2, rst_scaling=True),
    dict(qk="wishart", value="minus_identity", attention="causal_sa", heads=3),
    dict(qk="identity", value="ginibre", attention="usa", ensemble_scaling="authors", beta=-1.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_trajectories_match_the_numba_kernel_given_the_same_draws(case):
    kw = {**BASE, **case}
    count, n, d = 4, kw["n"], kw["d"]
    gpu = simulate_sphere_flow(rngs(count), device=TORCH_CPU, return_states=True, **kw)
    x0 = gpu_starts.starts_on_host(rngs(count), n, d, INIT_CODES["uniform_sphere"])
    keys = gpu_starts.generator_keys(rngs(count), 0, count)
    fixed = {k: v for k, v in kw.items() if k not in ("qk", "value", "ensemble_scaling")}
    for r in range(count):
        m, v = host_weights(keys[r], n, d, kw.get("heads", 1), kw["qk"], kw["value"],
                            kw.get("ensemble_scaling", "normalised"))
        eye = np.broadcast_to(np.eye(d), m.shape)
        cpu = simulate_sphere_flow(rngs(1), x0=x0[r:r + 1], return_states=True,
                                   matrices={"Q": eye, "K": m, "V": v}, **fixed)
        np.testing.assert_allclose(gpu["states"][r], cpu["states"][0], rtol=0, atol=1e-11)
        for name in ("overlap_min", "overlap_max", "energy"):
            np.testing.assert_allclose(gpu[name][r], cpu[name][0], rtol=1e-12, atol=1e-11,
                                       err_msg=name)
        for name in ("cluster_class", "n_clusters", "frac_close", "in_hemisphere", "nonfinite"):
            np.testing.assert_array_equal(gpu[name][r], cpu[name][0], err_msg=name)


@pytest.mark.parametrize("qk,value", [("ginibre", "ginibre"), ("wigner", "qk")])
def test_the_device_ensembles_have_the_cpu_ensembles_statistics(qk, value):
    """Different streams, the same law: the final overlap_min, energy and frac_close of the
    device's draws against the numba kernel's own (its Generators' PCG64 draws)."""
    count = 300
    kw = {**BASE, "qk": qk, "value": value, "beta": 1.0, "d": 3}
    gpu = simulate_sphere_flow(rngs(count, 7), device=TORCH_CPU, **kw)
    cpu = simulate_sphere_flow(rngs(count, 8), **kw)
    for name in ("overlap_min", "energy", "frac_close"):
        a, b = gpu[name][:, -1], cpu[name][:, -1]
        se = math.sqrt(a.var(ddof=1) / count + b.var(ddof=1) / count)
        assert abs(a.mean() - b.mean()) < 4 * se + 1e-12, (name, a.mean(), b.mean(), se)
