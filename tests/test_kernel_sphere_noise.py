"""Noise on the sphere flow (kernels/sphere/noise.py): independent and common Brownian noise.

- sigma = 0 is the deterministic run, bit for bit;
- a NumPy reference on the same random numbers, step by step;
- closed forms, drift switched off (V = 0), so each token is the scheme's Brownian motion:
  independent noise: E<x(t + m h), x(t)> = c^m exactly for the discrete scheme, with
  c = E[(1 + sigma^2 h chi^2_{d-1})^{-1/2}] (the step's mean is c x by symmetry);
  common noise, two tokens: rho = <x_1, x_2> solves
      d rho = sigma^2 (1 - rho)(d - 2 - rho) dt + sigma (1 - rho) sqrt(2 (1 + rho)) dB,
  for which L log(1 - rho) = -(d - 1) sigma^2 exactly: E log(1 - rho_t) falls linearly at rate
  (d - 1) sigma^2 (the common noise synchronises the tokens), up to the scheme's O(h) bias.
"""

import numpy as np
import pytest
from scipy import integrate, stats
from test_kernel_sphere_flow import normalise, ref_field, ref_weights

from tokensweep.kernels.sphere.flow import simulate_sphere_flow


def run(seeds, **kw):
    rngs = [np.random.Generator(np.random.PCG64(s)) for s in seeds]
    return simulate_sphere_flow(rngs, **kw)


BASE = dict(n=5, d=4, beta=1.5, T=0.6, layers=12, checkpoint_layers=np.array([4, 12]))


@pytest.mark.parametrize("noise", ["independent", "common"])
@pytest.mark.parametrize("kw", [{}, {"qk": "ginibre", "value": "wishart", "period": 5}])
def test_sigma_zero_is_the_deterministic_run_bit_for_bit(noise, kw):
    a = run(range(3), **BASE, **kw, return_states=True)
    b = run(range(3), **BASE, **kw, return_states=True, noise=noise, sigma=0.0)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def ref_noisy_states(seed, *, n, d, beta, T, layers, attention, qk, value, noise, sigma):
    rng = np.random.Generator(np.random.PCG64(seed))
    x = normalise(rng.standard_normal((n, d)))
    q, k, v = ref_weights(rng, 1, d, qk, value)
    m = np.einsum("hca,hcb->hab", q, k)
    h = T / layers
    out = []
    for s in range(layers):
        f = ref_field(x, s * h, beta, attention, m, v, lambda t: np.ones((1, d)), 1.0)
        z = rng.standard_normal((n, d) if noise == "independent" else d)
        z = np.broadcast_to(z, (n, d))
        x = normalise(x + h * f + sigma * np.sqrt(h) * (z - np.sum(x * z, axis=1)[:, None] * x))
        out.append(x)
    return np.array(out)


@pytest.mark.parametrize("noise", ["independent", "common"])
@pytest.mark.parametrize("attention, qk, value", [("sa", "identity", "identity"),
                                                  ("causal_usa", "ginibre", "ginibre")])
def test_matches_numpy_reference_on_the_same_random_numbers(noise, attention, qk, value):
    kw = dict(n=6, d=4, beta=1.2, T=0.5, layers=10, attention=attention, qk=qk, value=value,
              noise=noise, sigma=0.7)
    o = run([5], **kw, checkpoint_layers=np.arange(1, 11), return_states=True)
    np.testing.assert_allclose(o["states"][0], ref_noisy_states(5, **kw), rtol=0, atol=1e-12)


def test_refuses_bad_noise_arguments_by_name():
    for kw, word in [({"noise": "white", "sigma": 1.0}, "noise"), ({"sigma": 1.0}, "sigma"),
                     ({"noise": "common", "sigma": -1.0}, "sigma"),
                     ({"noise": "common", "sigma": 1.0, "integrator": "rk4"}, "integrator")]:
        with pytest.raises(ValueError, match=word):
            run([0], **{**BASE, **kw})


ZERO_V = {"V": np.zeros((1, 3, 3))}


def test_independent_noise_heat_kernel_of_the_scheme():
    """E<x(t2), x(t1)> = c^m, c = E[(1 + s^2 chi^2_{d-1})^{-1/2}], s^2 = sigma^2 h, m steps."""
    d, n, sigma, h, m = 3, 4, 1.0, 0.01, 50
    o = run(range(400), n=n, d=d, beta=1.0, T=h * 60, layers=60,
            checkpoint_layers=np.array([10, 10 + m]), matrices=ZERO_V, noise="independent",
            sigma=sigma, return_states=True)
    x1, x2 = o["states"][:, 0], o["states"][:, 1]
    per_traj = np.sum(x1 * x2, axis=2).mean(axis=1)  # tokens are independent, trajectories too
    s2 = sigma**2 * h
    c = integrate.quad(lambda q: stats.chi2.pdf(q, d - 1) / np.sqrt(1 + s2 * q), 0, np.inf)[0]
    se = per_traj.std(ddof=1) / np.sqrt(per_traj.size)
    assert abs(per_traj.mean() - c**m) < 4.5 * se, (per_traj.mean(), c**m, se)
    # the SDE's value, exp(-(d - 1) sigma^2 t / 2), is within the scheme's O(m s^4) bias of it
    assert abs(c**m - np.exp(-(d - 1) * sigma**2 * m * h / 2)) < m * s2**2 * d**2


def test_common_noise_synchronises_at_rate_d_minus_1_sigma_squared():
    """E[log(1 - rho(t2)) - log(1 - rho(t1))] = -(d - 1) sigma^2 (t2 - t1) for two tokens."""
    d, sigma, h, steps = 3, 1.0, 1e-3, 600
    o = run(range(600), n=2, d=d, beta=1.0, T=h * (steps + 100), layers=steps + 100,
            checkpoint_layers=np.array([100, 100 + steps]), matrices=ZERO_V, noise="common",
            sigma=sigma, return_states=True)
    x = o["states"]
    rho = np.sum(x[:, :, 0] * x[:, :, 1], axis=2)  # (traj, checkpoint)
    inc = np.log1p(-rho[:, 1]) - np.log1p(-rho[:, 0])
    want = -(d - 1) * sigma**2 * h * steps
    se = inc.std(ddof=1) / np.sqrt(inc.size)
    # 4.5 standard errors; the weak O(h) bias of the scheme is ~ (d sigma^2)^2 h t ~ 0.005
    assert abs(inc.mean() - want) < 4.5 * se + 0.01, (inc.mean(), want, se)
