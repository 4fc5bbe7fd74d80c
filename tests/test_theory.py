"""Closed forms of pipeline/theory/, each against something computed another way.

- quoted values: the numbers of design/models.md (sections 2 and 4/5);
- exit probabilities: solve_bvp of the backward equation and Euler-Maruyama Monte Carlo of the
  overlap SDE, both written here from the drift/diffusion (not from the scale function), in the
  coordinate y = artanh(rho), where the diffusion is regular on the whole line;
- thresholds: the sign change of the drift of y at the boundaries (Feller: rho = +-1 attracts iff
  y drifts outwards there, the y-diffusion being bounded);
- flows: explicit RK4 of n tokens, linprog hemisphere tests, solve_ivp of the raw ODEs.
"""

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from tokensweep.pipeline import theory as th

# ---------------------------------------------------------------------------------------------
# Overlap SDEs in y = artanh(rho).  With d rho = b dt + sqrt(a) dB, Ito gives
#   dy = [b / (1 - rho^2) + rho a / (1 - rho^2)^2] dt + sqrt(a) / (1 - rho^2) dB.
# Transformer (derived from dx_i = P_{x_i} dW A_i - (d-1)/2 |A_i|^2 x_i dt, A_1 = p x_1 + q x_2):
#   a = 2 (p^2 + q^2) (1 - rho^2)^2,  b = (1 - rho^2) [2 p q (d - 2) - (p^2 + q^2) rho].
# Hybrid: b = 2q (1 - rho^2) [1 - s^2 (p + 2 q rho)],  sqrt(a) = 2 s q (1 - rho^2).
# ---------------------------------------------------------------------------------------------


def sa_weights(rho, beta):
    p = 1 / (1 + np.exp(-beta * (1 - rho)))
    return p, 1 - p


def transformer_y_sde(y, beta, d):
    rho = np.tanh(y)
    p, q = sa_weights(rho, beta)
    drift = 2 * p * q * (d - 2) - (p**2 + q**2) * rho + 2 * rho * (p**2 + q**2)
    return drift, np.sqrt(2 * (p**2 + q**2))


def hybrid_y_sde(y, beta, sigma, attention):
    rho = np.tanh(y)
    if attention == "sa":
        p, q = sa_weights(rho, beta)
    else:
        p, q = np.exp(beta) / 2 + 0 * rho, np.exp(beta * rho) / 2
    drift = 2 * q * (1 - sigma**2 * (p + 2 * q * rho)) + rho * 4 * sigma**2 * q**2
    return drift, 2 * sigma * q


def exit_probability_bvp(sde, y0, Y=30.0):
    """P(y hits -Y before +Y): (s^2/2) u'' + mu u' = 0, u(-Y) = 1, u(Y) = 0, by solve_bvp."""
    def f(y, u):
        mu, s = sde(y)
        return np.vstack([u[1], -2 * mu / s**2 * u[1]])
    y = np.linspace(-Y, Y, 2001)
    sol = integrate.solve_bvp(f, lambda ua, ub: np.array([ua[0] - 1, ub[0]]), y,
                              np.vstack([(Y - y) / (2 * Y), -np.ones_like(y) / (2 * Y)]), tol=1e-10,
                              max_nodes=200000)
    assert sol.success, sol.message
    return sol.sol(y0)[0]


def exit_probability_mc(sde, y0, n_paths=4000, dt=0.01, Y=12.0, n_steps=6000, seed=0):
    """Euler-Maruyama, absorbed at |y| = Y; returns (fraction absorbed at -Y, fraction undecided)."""
    rng = np.random.default_rng(seed)
    y = np.full(n_paths, float(y0))
    alive = np.ones(n_paths, bool)
    for _ in range(n_steps):
        mu, s = sde(y[alive])
        y[alive] += mu * dt + s * np.sqrt(dt) * rng.standard_normal(alive.sum())
        alive &= np.abs(y) < Y
        if not alive.any():
            break
    return np.mean(y <= -Y), np.mean(alive)


# --------------------------------------------------------------------------- quoted values

QUOTED = [(3, 1.0, 0.268), (3, 2.0, 0.364), (4, 1.0, 0.120), (4, 2.0, 0.281), (5, 1.5, 0.151),
          (5, 2.0, 0.224), (8, 1.5, 0.042), (8, 2.0, 0.121), (8, 3.0, 0.228)]


@pytest.mark.parametrize("d, beta, expected", QUOTED)
def test_antipodal_probability_quoted_values(d, beta, expected):
    assert th.antipodal_probability(beta, d) == pytest.approx(expected, abs=6e-4)


def test_beta_c_quoted_values():
    np.testing.assert_allclose(th.beta_c([3, 4, 5, 6, 8]), [0, 0.658, 0.881, 1.032, 1.239], atol=6e-4)
    assert th.beta_c(2) == -np.inf
    with pytest.raises(ValueError, match="d >= 2"):
        th.beta_c(1)


@pytest.mark.parametrize("d", [3, 4, 5, 8])
def test_beta_c_is_sign_change_of_boundary_drift(d):
    # y drifts to -inf at rho = -1 (y -> -inf) iff the drift there is negative
    root = optimize.brentq(lambda b: transformer_y_sde(-40.0, b, d)[0], 1e-9, 5.0) if d > 3 else 0.0
    assert th.beta_c(d) == pytest.approx(root, abs=1e-8)


@pytest.mark.parametrize("d", [3, 4, 5, 8])
def test_zero_at_and_below_beta_c(d):
    betas = np.array([0.0, th.beta_c(d) / 2, th.beta_c(d)])
    assert np.all(th.antipodal_probability(betas, d) == 0)
    assert 0 < th.antipodal_probability(th.beta_c(d) + 0.05, d) < 0.05  # continuous transition


def test_d2_is_one_half_and_arccos():
    assert np.allclose(th.antipodal_probability([0.0, 0.5, 3.0, 20.0], 2), 0.5, atol=1e-12)
    rho0 = np.linspace(-0.999, 0.999, 13)
    for beta in (0.3, 4.0):
        np.testing.assert_allclose(th.antipodal_probability_given_overlap(rho0, beta, 2),
                                   np.arccos(rho0) / np.pi, atol=1e-12)


@pytest.mark.parametrize("d, beta", [(3, 1.0), (4, 2.0), (8, 3.0), (5, 8.0)])
def test_given_overlap_matches_backward_equation(d, beta):
    rho0 = np.array([-0.9, -0.5, 0.0, 0.4, 0.8])
    expected = exit_probability_bvp(lambda y: transformer_y_sde(y, beta, d), np.arctanh(rho0))
    np.testing.assert_allclose(th.antipodal_probability_given_overlap(rho0, beta, d), expected, atol=1e-6)


def test_given_overlap_matches_monte_carlo():
    d, beta = 4, 2.0
    p_hat, undecided = exit_probability_mc(lambda y: transformer_y_sde(y, beta, d), 0.0)
    p = th.antipodal_probability_given_overlap(0.0, beta, d)
    assert undecided < 0.005
    assert abs(p_hat - p) < 4 * np.sqrt(p * (1 - p) / 4000) + 0.01  # 4 sigma + O(dt) bias


@pytest.mark.parametrize("d, beta", [(3, 1.0), (5, 1.2), (8, 2.5)])
def test_average_matches_monte_carlo_over_initial_overlap(d, beta):
    rng = np.random.default_rng(1)
    # overlap of two independent uniform points on S^(d-1), sampled as points (not as Beta)
    x = rng.standard_normal((2, 4000, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    values = th.antipodal_probability_given_overlap(np.sum(x[0] * x[1], -1), beta, d)
    se = values.std() / np.sqrt(values.size)
    assert abs(values.mean() - th.antipodal_probability(beta, d)) < 4 * se


def test_curve_computes_each_beta_once_and_is_monotone():
    # Speed is for benchmarks; what is checked here is the mechanism that makes a curve cheap:
    # the vectorised call evaluates each distinct (beta, d) once and sets up the quadrature of
    # the scale function once per beta above beta_c, repeats and later calls come from the cache.
    betas = np.linspace(0, 3, 200) + 1e-7  # offset: never served from another test's cache
    from tokensweep.pipeline.theory import two_token  # the caches live with the two-token forms

    scalar, parts = two_token._antipodal_probability_scalar, two_token._transformer_parts
    s0, q0 = scalar.cache_info(), parts.cache_info()
    p_both = th.antipodal_probability(np.concatenate([betas, betas[::-1]]), 6)  # each beta twice
    s1, q1 = scalar.cache_info(), parts.cache_info()
    assert (s1.misses - s0.misses, s1.hits - s0.hits) == (200, 200)
    above = int(np.sum(betas > th.beta_c(6)))  # below beta_c p = 0 needs no quadrature
    assert 0 < above < 200 and q1.misses - q0.misses == above
    p = p_both[:200]
    np.testing.assert_array_equal(p_both[200:], p[::-1])  # a cached value is the computed value
    np.testing.assert_array_equal(th.antipodal_probability(betas, 6), p)
    assert scalar.cache_info().misses == s1.misses and parts.cache_info().misses == q1.misses
    assert np.all(np.diff(p) >= -1e-12) and np.all((p >= 0) & (p < 0.5))
    # and what the cache serves is what the uncached function computes, point by point
    np.testing.assert_array_equal(p, [scalar.__wrapped__(float(b), 6) for b in betas])


# --------------------------------------------------------------------------- hybrid model

def test_hybrid_thresholds_are_boundary_drift_sign_changes():
    for beta in (0.0, 0.5, 1.0, 2.0):
        # USA: +1 attracts iff y drifts up at +inf, -1 iff y drifts down at -inf
        up = optimize.brentq(lambda s, beta=beta: hybrid_y_sde(40.0, beta, s, "usa")[0], 1e-3, 10)
        down = optimize.brentq(lambda s, beta=beta: hybrid_y_sde(-40.0, beta, s, "usa")[0], 1e-3, 10)
        lo, hi = th.hybrid_sigma_c(beta, "usa")
        assert lo == pytest.approx(down, rel=1e-9) and hi == pytest.approx(up, rel=1e-9)
        up = optimize.brentq(lambda s, beta=beta: hybrid_y_sde(40.0, beta, s, "sa")[0], 1e-3, 10)
        down = optimize.brentq(lambda s, beta=beta: hybrid_y_sde(-40.0, beta, s, "sa")[0], 1e-3, 10)
        lo, hi = th.hybrid_sigma_c(beta, "sa")
        assert lo == pytest.approx(down, rel=1e-9) and hi == pytest.approx(up, rel=1e-9)


def test_hybrid_quoted_value_and_regimes():
    # models.md: beta = 1, sigma^2 = 1.4, SA: 0.676 predicted (uniform start, d = 3)
    assert th.hybrid_antipodal_probability(1.0, np.sqrt(1.4), "sa", 3) == pytest.approx(0.676, abs=6e-4)
    lo, hi = th.hybrid_sigma_c(1.0, "usa")
    p = th.hybrid_antipodal_probability(1.0, [0.0, 0.9 * lo, lo, 1.1 * lo], "usa", 4)
    assert p[0] == 0 and p[1] == 0 and np.isnan(p[2]) and p[3] == 1
    lo, hi = th.hybrid_sigma_c(1.0, "sa")
    p = th.hybrid_antipodal_probability(1.0, [0.99 * lo, (lo + hi) / 2, 1.01 * hi], "sa", 4)
    assert p[0] == 0 and 0 < p[1] < 1 and p[2] == 1


# each case far enough from the thresholds that truncating y at +-Y = 200 costs < 1e-8
@pytest.mark.parametrize("beta, sigma2", [(1.0, 1.4), (0.3, 1.8), (2.0, 1.2)])
def test_hybrid_given_overlap_matches_backward_equation(beta, sigma2):
    s = np.sqrt(sigma2)
    rho0 = np.array([-0.8, 0.0, 0.7])
    expected = exit_probability_bvp(lambda y: hybrid_y_sde(y, beta, s, "sa"), np.arctanh(rho0), Y=200.0)
    got = th.hybrid_antipodal_probability(beta, s, "sa", 3, rho0=rho0)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_hybrid_average_matches_monte_carlo_over_initial_overlap():
    rng = np.random.default_rng(2)
    rho0 = 2 * stats.beta.rvs(2.0, 2.0, size=300, random_state=rng) - 1  # d = 5
    values = th.hybrid_antipodal_probability(1.0, np.sqrt(1.4), "sa", 5, rho0=rho0)
    se = values.std() / np.sqrt(values.size)
    assert abs(values.mean() - th.hybrid_antipodal_probability(1.0, np.sqrt(1.4), "sa", 5)) < 4 * se


# --------------------------------------------------------------------------- deterministic flows

def simulate_tokens_rk4(x0, beta, T, dt, attention):
    """Plain numpy RK4 of dx_i/dt = P_{x_i}(A_i(X)) with Q = K = V = I."""
    n = x0.shape[0]

    def f(x):
        logits = beta * x @ x.T
        if attention == "sa":
            w = np.exp(logits - logits.max(1, keepdims=True))
            w /= w.sum(1, keepdims=True)
        else:
            w = np.exp(logits) / n
        a = w @ x
        return a - np.sum(a * x, 1, keepdims=True) * x

    x = x0.copy()
    for _ in range(int(round(T / dt))):
        k1 = f(x)
        k2 = f(x + dt / 2 * k1)
        k3 = f(x + dt / 2 * k2)
        k4 = f(x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


@pytest.mark.parametrize("attention, beta", [("sa", 1.0), ("sa", 3.0), ("usa", 0.5)])
def test_equiangular_ode_matches_token_simulation(attention, beta):
    n, T = 5, 2.0
    x = simulate_tokens_rk4(np.eye(n), beta, T, 2e-3, attention)
    overlaps = (x @ x.T)[np.triu_indices(n, 1)]
    np.testing.assert_allclose(overlaps, th.equiangular_gamma(T, beta, n, attention), atol=1e-6)


def test_equiangular_late_rate():
    for attention, beta in [("sa", 2.0), ("usa", 1.0)]:
        # late enough that 1 - gamma ~ 1e-8 (asymptotic), early enough that 1 - gamma is exact
        rate = th.equiangular_rate(beta, 8, attention)
        t = np.array([18.0, 19.0]) / rate
        gap = 1 - th.equiangular_gamma(t, beta, 8, attention)
        slope = -np.log(gap[1] / gap[0]) / (t[1] - t[0])
        assert slope == pytest.approx(rate, rel=1e-5)


def test_t_star_quoted_values():
    np.testing.assert_allclose(th.t_star([1.0, 4.0], 32), [5.27, 6.95], atol=6e-3)
    np.testing.assert_allclose(th.t_star([6.0, 8.0], 32), [16.0, 73.4], atol=6e-2)
    np.testing.assert_allclose(th.t_star([1.0, 4.0], 32, attention="usa"), [2.90, 1.13], atol=6e-3)
    tau = th.t_star(2.0, 32)
    assert th.equiangular_gamma(tau, 2.0, 32) == pytest.approx(1 - 1e-3, abs=1e-10)


def in_open_hemisphere(x):
    """Is there w with <x_i, w> > 0 for all i?  Feasibility of X w >= 1 (scale invariance)."""
    res = optimize.linprog(np.zeros(x.shape[1]), A_ub=-x, b_ub=-np.ones(len(x)),
                           bounds=[(None, None)] * x.shape[1], method="highs")
    return res.status == 0


@pytest.mark.parametrize("n, d", [(6, 3), (5, 2)])
def test_wendel_matches_monte_carlo(n, d):
    rng = np.random.default_rng(3)
    draws = 1500
    hits = sum(in_open_hemisphere(rng.standard_normal((n, d))) for _ in range(draws))
    p = th.wendel_probability(n, d)
    assert abs(hits / draws - p) < 4 * np.sqrt(p * (1 - p) / draws)
    rst_sum_to_d = stats.binom.cdf(d, n - 1, 0.5)  # the seed's off-by-one, rejected by the data
    assert abs(hits / draws - rst_sum_to_d) > 8 * np.sqrt(p * (1 - p) / draws)


def test_wendel_edge_cases():
    assert th.wendel_probability(3, 5) == 1.0 and th.wendel_probability(4, 4) == 1.0
    assert th.wendel_probability(4, 2) == pytest.approx(0.5)


def test_causal_first_token_matches_projected_flow():
    rng = np.random.default_rng(4)
    V = rng.standard_normal((4, 4))
    x0 = rng.standard_normal(4)
    x0 /= np.linalg.norm(x0)
    ts = np.array([0.0, 0.5, 2.0])
    sol = integrate.solve_ivp(lambda t, x: V @ x - (x @ V @ x) * x, (0, 2), x0, t_eval=ts,
                              rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(th.causal_first_token(x0, V, ts), sol.y.T, atol=1e-8)
    assert th.causal_first_token(x0, V, 1.0).shape == (4,)


def test_causal_token2_overlap():
    a0, ts = np.array([-0.9, -0.2, 0.5]), np.linspace(0, 6, 7)
    np.testing.assert_allclose(th.causal_token2_overlap(a0, 0.0, ts),
                               np.tanh(np.arctanh(a0)[:, None] + ts / 2), atol=1e-10)
    beta = 2.0
    for a in a0:
        sol = integrate.solve_ivp(lambda t, y: (1 - y**2) * np.exp(beta * y) / (np.exp(beta * y) + np.exp(beta)),
                                  (0, 6), [a], t_eval=ts, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(th.causal_token2_overlap(a, beta, ts), sol.y[0], atol=1e-8)
    np.testing.assert_array_equal(th.causal_token2_overlap(np.array([-1.0, 1.0]), 1.0, ts),
                                  np.repeat([[-1.0], [1.0]], ts.size, axis=1))
