"""Options of the sphere flow kernel (kernels/sphere/drift.py): a turning value matrix V(t) and
hardmax attention.

- V(t) = R(t) V R(t)^T, R(t) the rotation by omega t in the (e_1, e_2) plane ([RST] Thm 5.3):
  a NumPy reference step by step; omega = 0 is today's run bit for bit; one token in d = 2 with
  V = diag(l1, l2) lags the turning top eigenvector by the closed-form angle
  phi* = -arcsin(2 omega / (l1 - l2)) / 2 (from theta' = -((l1 - l2)/2) sin 2(theta - omega t)).
- hardmax ([GLPR-P] section 9, beta -> infinity): a NumPy reference, and SA at large beta.
"""

import numpy as np
import pytest
from test_kernel_sphere_flow import normalise, ref_field, ref_step, ref_weights

from tokensweep.kernels.sphere.flow import simulate_sphere_flow


def states(seed, **kw):
    layers = kw["layers"]
    o = simulate_sphere_flow([np.random.Generator(np.random.PCG64(seed))],
                             checkpoint_layers=np.arange(1, layers + 1), return_states=True, **kw)
    assert not o["nonfinite"][0]
    return o["states"][0]


def rotation(angle, d):
    r = np.eye(d)
    c, s = np.cos(angle), np.sin(angle)
    r[:2, :2] = [[c, -s], [s, c]]
    return r


def ref_hardmax_field(x, m, v, causal, tol):
    n = x.shape[0]
    out = np.zeros_like(x)
    for h in range(m.shape[0]):
        logits = (x @ m[h]) @ x.T
        if causal:
            logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        top = logits.max(axis=1, keepdims=True)
        w = (logits >= top - tol * (1 + np.abs(top))).astype(float)
        out += (w / w.sum(axis=1, keepdims=True)) @ x @ v[h].T
    return out - np.sum(x * out, axis=1, keepdims=True) * x


def ref_run(seed, *, n, d, beta, T, layers, attention, integrator, heads, qk, value,
            value_rotation=0.0, hardmax_tol=1e-9):
    rng = np.random.Generator(np.random.PCG64(seed))
    x = normalise(rng.standard_normal((n, d)))
    q, k, v = ref_weights(rng, heads, d, qk, value)
    m = np.einsum("hca,hcb->hab", q, k)
    h = T / layers

    def f(y, t):
        r = rotation(value_rotation * t, d)
        vt = np.einsum("ab,hbc,dc->had", r, v, r)
        if attention.endswith("hardmax"):
            return ref_hardmax_field(y, m, vt, attention.startswith("causal"), hardmax_tol)
        return ref_field(y, t, beta, attention, m, vt, lambda t: np.ones((heads, d)), 1.0)

    out = []
    for s in range(layers):
        x = ref_step(x, s * h, h, integrator, f)
        out.append(x)
    return np.array(out)


@pytest.mark.parametrize("attention, integrator, qk, value", [
    ("sa", "euler", "identity", "wishart"), ("causal_usa", "rk4", "ginibre", "goe"),
    ("usa", "heun", "wigner", "ginibre")])
def test_turning_value_matches_numpy_reference(attention, integrator, qk, value):
    kw = dict(n=5, d=4, beta=1.3, T=0.8, layers=12, attention=attention, integrator=integrator,
              heads=2, qk=qk, value=value, value_rotation=1.7)
    np.testing.assert_allclose(states(4, **kw), ref_run(4, **kw), rtol=0, atol=1e-12)


def test_value_rotation_zero_is_todays_run_bit_for_bit():
    kw = dict(n=5, d=4, beta=1.3, T=0.8, layers=12, value="wishart")
    np.testing.assert_array_equal(states(2, **kw), states(2, **kw, value_rotation=0.0))


def test_one_token_lags_the_turning_eigenvector_by_the_closed_form_angle():
    l1, l2, omega, T = 1.0, 0.0, 0.2, 40.0
    o = simulate_sphere_flow([np.random.Generator(np.random.PCG64(s)) for s in range(4)], n=1, d=2,
                             beta=1.0, T=T, layers=4000, checkpoint_layers=np.array([4000]),
                             integrator="rk4", matrices={"V": np.diag([l1, l2])[None]},
                             value_rotation=omega, return_states=True)
    phi = -0.5 * np.arcsin(2 * omega / (l1 - l2))
    axis = np.array([np.cos(omega * T + phi), np.sin(omega * T + phi)])
    x = o["states"][:, 0, 0]  # (traj, d): on the line of the lagging axis, either sign
    np.testing.assert_allclose(np.abs(x @ axis), 1.0, atol=1e-9)


@pytest.mark.parametrize("attention, integrator", [("hardmax", "euler"),
                                                    ("causal_hardmax", "rk4")])
def test_hardmax_matches_numpy_reference(attention, integrator):
    kw = dict(n=7, d=4, beta=1.0, T=1.0, layers=10, attention=attention, integrator=integrator,
              heads=2, qk="ginibre", value="ginibre")
    np.testing.assert_allclose(states(6, **kw), ref_run(6, **kw), rtol=0, atol=1e-12)


def test_hardmax_is_the_large_beta_limit_of_softmax():
    # a short run: the hardmax dynamics drives the logits towards ties, where the limit is singular
    kw = dict(n=6, d=4, T=0.3, layers=3, heads=1, qk="ginibre", value="identity")
    hard = states(9, beta=1.0, attention="hardmax", **kw)
    # the smallest gap between a row's best and second-best logit at every evaluated state
    rng = np.random.Generator(np.random.PCG64(9))
    x0 = normalise(rng.standard_normal((6, 4)))
    q, k, _ = ref_weights(rng, 1, 4, "ginibre", "identity")
    gaps = []
    for x in [x0, *hard[:-1]]:
        logits = np.sort((x @ (q[0].T @ k[0])) @ x.T, axis=1)
        gaps.append(np.min(logits[:, -1] - logits[:, -2]))
    beta = 2000.0
    assert min(gaps) > 0.02  # so softmax differs from hardmax by ~ n exp(-beta gap) < 1e-15
    soft = states(9, beta=beta, attention="sa", **kw)
    np.testing.assert_allclose(soft, hard, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# ensemble_scaling: "authors" (the scripts behind [GLPR-P] Fig. 5)


def ref_authors_weights(rng, heads, d, qk, value):
    """Our draws, then the authors' scale: unit entries, V = BF^T / normV for value = qk."""
    q, k, v = ref_weights(rng, heads, d, qk, value)
    m = np.einsum("hca,hcb->hab", q, k)
    if qk != "identity":
        m = m * np.sqrt(d)
    if value == "qk" and qk != "identity":
        v = np.transpose(m, (0, 2, 1)) / np.sqrt(d + 1.0 if qk == "goe" else d)
    elif value not in ("identity", "minus_identity", "qk"):
        v = v * np.sqrt(d)
    return m, v


@pytest.mark.parametrize("qk, value", [("ginibre", "qk"), ("goe", "qk"), ("wigner", "wishart"),
                                       ("identity", "ginibre")])
def test_authors_scaling_matches_numpy_reference(qk, value):
    n, d, beta, T, layers = 5, 4, 0.8, 0.4, 8
    kw = dict(n=n, d=d, beta=beta, T=T, layers=layers, heads=2, qk=qk, value=value)
    rng = np.random.Generator(np.random.PCG64(8))
    x = normalise(rng.standard_normal((n, d)))
    m, v = ref_authors_weights(rng, 2, d, qk, value)
    h, want = T / layers, []
    for s in range(layers):
        x = normalise(x + h * ref_field(x, s * h, beta, "sa", m, v, lambda t: np.ones((2, d)), 1.0))
        want.append(x)
    got = states(8, **kw, ensemble_scaling="authors")
    np.testing.assert_allclose(got, np.array(want), rtol=0, atol=1e-12)


def test_authors_scaling_is_ours_at_sqrt_d_beta_and_sqrt_d_time():
    """Q^T K and V both sqrt(d) times ours: an Euler step of the authors' (beta, h) is ours at
    (sqrt(d) beta, sqrt(d) h) on the same random numbers (Fig. 5 compared beta for beta)."""
    d = 9
    kw = dict(n=6, d=d, layers=10, qk="ginibre", value="wishart")
    theirs = states(3, beta=0.5, T=1.0, **kw, ensemble_scaling="authors")
    ours = states(3, beta=0.5 * np.sqrt(d), T=np.sqrt(d), **kw)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# layer_norm: post (today), pre, peri, ngpt (kernels/sphere/norms.py)


def ref_attention_output(x, beta, attention, m, v):
    """A_i = sum_h sum_j w_ij V_h x_j (not projected), plain NumPy."""
    n = x.shape[0]
    a = np.zeros_like(x)
    for h in range(m.shape[0]):
        logits = beta * (x @ m[h]) @ x.T
        if attention.startswith("causal"):
            logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        if attention.endswith("usa"):
            w = w * np.exp(logits.max(axis=1, keepdims=True)) / n
        else:
            w = w / w.sum(axis=1, keepdims=True)
        a += (w @ x) @ v[h].T
    return a


def ref_layer_norm_run(seed, *, n, d, beta, T, layers, attention, heads, qk, value, layer_norm,
                       ngpt_alpha=0.2):
    """The normalised tokens after every step (module docstring of `sphere.norms`)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    x = normalise(rng.standard_normal((n, d)))
    q, k, v = ref_weights(rng, heads, d, qk, value)
    m = np.einsum("hca,hcb->hab", q, k)
    h, r, out = T / layers, np.ones((n, 1)), []
    for _ in range(layers):
        a = ref_attention_output(x, beta, attention, m, v)
        u = a / np.linalg.norm(a, axis=1, keepdims=True)
        z = {"pre": r * x + h * a, "peri": r * x + h * u,
             "ngpt": x + h * ngpt_alpha * (u - x)}[layer_norm]
        if layer_norm != "ngpt":
            r = np.linalg.norm(z, axis=1, keepdims=True)
        x = normalise(z)
        out.append(x)
    return np.array(out)


@pytest.mark.parametrize("layer_norm", ["pre", "peri", "ngpt"])
@pytest.mark.parametrize("attention, qk, value", [("sa", "identity", "identity"),
                                                  ("causal_usa", "ginibre", "goe")])
def test_layer_norms_match_numpy_reference(layer_norm, attention, qk, value):
    kw = dict(n=6, d=4, beta=1.1, T=1.5, layers=15, attention=attention, heads=2, qk=qk,
              value=value, layer_norm=layer_norm)
    np.testing.assert_allclose(states(7, **kw, integrator="euler"), ref_layer_norm_run(7, **kw),
                               rtol=0, atol=1e-12)


def test_post_layer_norm_is_todays_run_bit_for_bit():
    kw = dict(n=5, d=4, beta=1.3, T=0.8, layers=12, value="wishart")
    np.testing.assert_array_equal(states(2, **kw), states(2, **kw, layer_norm="post"))


def test_pre_layer_norm_is_post_layer_norm_slowed_by_the_radius():
    """Q = K = V = I, SA, a hemisphere start: pre-LN moves x_i at speed |P_x A_i| / r_i, and r_i
    grows as the tokens gather (r' = <x, A> -> 1), so on the same start the pre-LN tokens are
    still more spread than the post-LN ones at T (a sanity check of the time change)."""
    kw = dict(n=4, d=3, beta=1.0, T=4.0, layers=400, integrator="euler")
    post = states(5, **kw, init="hemisphere")
    pre = states(5, **kw, init="hemisphere", layer_norm="pre")

    def spread(s):
        return 1 - np.min(s[-1] @ s[-1].T)
    assert 0 < spread(post) < spread(pre)
