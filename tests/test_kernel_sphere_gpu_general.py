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
    # Heun and RK4 (`gpu_general.runge_kutta_step`): the plain flow of the catalog's rk4 entries,
    # and drawn weights
    dict(qk="identity", value="identity", attention="sa", integrator="rk4"),
    dict(qk="wigner", value="wishart", attention="causal_usa", integrator="rk4"),
    dict(qk="goe", value="minus_identity", attention="causal_sa", heads=2, integrator="heun"),
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


def assert_same_law(a, b):
    """The final overlap_min, energy and frac_close of two runs agree in mean within 4
    standard errors of the difference."""
    for name in ("overlap_min", "energy", "frac_close"):
        u, w = a[name][:, -1], b[name][:, -1]
        se = math.sqrt(u.var(ddof=1) / len(u) + w.var(ddof=1) / len(w))
        assert abs(u.mean() - w.mean()) < 4 * se + 1e-12, (name, u.mean(), w.mean(), se)


@pytest.mark.parametrize("qk,value", [("ginibre", "ginibre"), ("wigner", "qk")])
def test_the_device_ensembles_have_the_cpu_ensembles_statistics(qk, value):
    """Different streams, the same law: the final overlap_min, energy and frac_close of the
    device's draws against the numba kernel's own (its Generators' PCG64 draws)."""
    count = 300
    kw = {**BASE, "qk": qk, "value": value, "beta": 1.0, "d": 3}
    gpu = simulate_sphere_flow(rngs(count, 7), device=TORCH_CPU, **kw)
    cpu = simulate_sphere_flow(rngs(count, 8), **kw)
    assert_same_law(gpu, cpu)


def test_one_noisy_token_is_the_discrete_brownian_motion_of_the_scheme():
    """n = 1, V = I: no drift, so x_{k+1} = N(x_k + s P xi), s = sigma sqrt(h), and
    E[<x_{k+1}, x_0> | x_k] = <x_k, x_0> E[(1 + s^2 chi^2_{d-1})^{-1/2}]: E <x_T, x_0> is that
    factor to the power L exactly (-> e^{-(d-1) sigma^2 T / 2} as h -> 0). 4 standard errors."""
    from scipy import integrate, stats

    count, d, sigma, layers = 4000, 3, 0.5, 50
    kw = dict(n=1, d=d, beta=1.0, T=1.0, layers=layers, checkpoint_layers=[layers],
              noise="independent", sigma=sigma, return_states=True)
    out = simulate_sphere_flow(rngs(count, 3), device=TORCH_CPU, **kw)
    x0 = gpu_starts.starts_on_host(rngs(count, 3), 1, d, INIT_CODES["uniform_sphere"])
    overlap = np.einsum("rk,rk->r", out["states"][:, -1, 0], x0[:, 0])
    s2 = sigma ** 2 / layers
    factor = integrate.quad(lambda x: (1 + s2 * x) ** -0.5 * stats.chi2.pdf(x, d - 1), 0, np.inf)[0]
    se = overlap.std(ddof=1) / math.sqrt(count)
    assert abs(overlap.mean() - factor ** layers) < 4 * se


@pytest.mark.parametrize("noise", ["independent", "common"])
def test_noisy_runs_have_the_cpu_statistics_and_ignore_the_batch(noise, monkeypatch):
    from tokensweep.kernels.sphere import gpu

    count = 300
    kw = {**BASE, "beta": 1.0, "d": 3, "noise": noise, "sigma": 0.3}
    dev = simulate_sphere_flow(rngs(count, 7), device=TORCH_CPU, **kw)
    cpu = simulate_sphere_flow(rngs(count, 8), **kw)
    assert_same_law(dev, cpu)
    monkeypatch.setattr(gpu, "BATCH_ELEMENTS", 7 * (2 * 9 + 25 + 15))  # batches of 7 (batch_size)
    split = simulate_sphere_flow(rngs(count, 7), device=TORCH_CPU, **kw)
    for name in dev:
        np.testing.assert_array_equal(split[name], dev[name], err_msg=name)


@pytest.mark.parametrize("preset,integrator", [
    ("rst_causal", "euler"), ("rst_two_head_hemisphere", "euler"), ("rst_random_frequencies", "euler"),
    ("rst_causal", "rk4"), ("rst_random_frequencies", "heun")])
def test_time_varying_trajectories_match_the_numba_kernel(preset, integrator):
    """P_h(t) = D_h(t) Q_h^T K_h: the [RST] presets (random frequencies drawn on the device
    after the matrices, per head omega then phase: given to the numba kernel as a schedule);
    Heun and RK4 read the schedule at each stage's time (t, t + h/2, t + h)."""
    from tokensweep.kernels.ensembles import TIME_VARYING
    from tokensweep.kernels.lowlevel.philox import uniforms_numpy

    heads = {"rst_causal": 1}.get(preset, 2)
    d = 3 if preset != "rst_random_frequencies" else 4
    kw = {**BASE, "d": d, "heads": heads, "time_varying": preset, "attention": "causal_sa",
          "integrator": integrator,
          "rst_scaling": True, "qk": "ginibre" if preset == "rst_random_frequencies" else "identity"}
    count, n = 3, kw["n"]
    gpu = simulate_sphere_flow(rngs(count), device=TORCH_CPU, return_states=True, **kw)
    x0 = gpu_starts.starts_on_host(rngs(count), n, d, INIT_CODES["uniform_sphere"])
    keys = gpu_starts.generator_keys(rngs(count), 0, count)
    for r in range(count):
        cpu_kw = {k: v for k, v in kw.items() if k != "qk"}
        if preset == "rst_random_frequencies":
            m, v = host_weights(keys[r], n, d, heads, "ginibre", "identity", "normalised")
            block = blocks_for(n * d) + heads * 2 * blocks_for(d * d)
            drawn = []
            for _ in range(2 * heads):
                drawn.append(uniforms_numpy(keys[r], 0, block, d))
                block += blocks_for(d)
            cpu_kw["time_varying"] = dict(amp=2.0, omega=np.stack(drawn[0::2]),
                                          phase=2 * np.pi * np.stack(drawn[1::2]),
                                          absolute=TIME_VARYING[preset]["absolute"])
            cpu_kw["matrices"] = {"Q": np.broadcast_to(np.eye(d), m.shape), "K": m}
        cpu = simulate_sphere_flow(rngs(1), x0=x0[r:r + 1], return_states=True, **cpu_kw)
        np.testing.assert_allclose(gpu["states"][r], cpu["states"][0], rtol=0, atol=1e-11)
        for name in ("cluster_class", "n_clusters", "frac_close", "in_hemisphere"):
            np.testing.assert_array_equal(gpu[name][r], cpu[name][0], err_msg=name)
