"""Hybrid noise kernel against a plain-numpy reference, invariants, and the USA threshold.

The reference draws the start (n*d normals) and then one scalar normal per layer with separate
`standard_normal()` calls, checking that the kernel's buffered draws consume the same stream.
"""

import numpy as np
import pytest
from numpy_reference import ref_attention

from tokensweep.kernels.hybrid import ATTENTIONS, simulate_hybrid, simulate_hybrid_states
from tokensweep.kernels.outcomes import OUTPUTS


def ref_hybrid(rng, n, d, beta, sigma, h, layers, kind):
    """States (layers, n, d) of x_i <- N(x_i + (h + sigma sqrt(h) xi) A_i)."""
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = []
    for _ in range(layers):
        ahat, c = ref_attention(x, beta, kind)
        coef = h + sigma * np.sqrt(h) * rng.standard_normal()
        big = c > 0
        fx = np.where(big, np.exp(-np.where(big, c, 0.0)), 1.0)
        fa = np.where(big, coef, coef * np.exp(np.minimum(c, 0.0)))
        y = fx[:, None] * x + fa[:, None] * ahat
        x = y / np.linalg.norm(y, axis=1, keepdims=True)
        out.append(x)
    return np.array(out)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("d", [2, 3, 7])
def test_matches_numpy_reference_step_by_step(attention, n, d):
    layers = 8
    states, _ = simulate_hybrid_states(
        [np.random.default_rng(21)], n=n, d=d, beta=2.5, sigma=1.3, T=0.4, layers=layers,
        checkpoint_layers=np.arange(1, layers + 1), attention=attention, draw_batch=3)
    want = ref_hybrid(np.random.default_rng(21), n, d, 2.5, 1.3, 0.05, layers, attention)
    np.testing.assert_allclose(states[0], want, rtol=0, atol=1e-12)


def test_outputs_batch_invariance_and_sphere():
    kw = dict(n=4, d=3, beta=1.0, sigma=0.7, T=3.0, layers=301, checkpoint_layers=[1, 150, 301])
    runs = [simulate_hybrid_states([np.random.default_rng(s) for s in (1, 2)], draw_batch=b, **kw)
            for b in (None, 1, 10, None)]
    for states, out in runs[1:]:
        np.testing.assert_array_equal(states, runs[0][0])
        for name in OUTPUTS:
            np.testing.assert_array_equal(out[name], runs[0][1][name])
    plain = simulate_hybrid([np.random.default_rng(s) for s in (1, 2)], **kw)
    assert set(plain) == set(OUTPUTS)
    for name, spec in OUTPUTS.items():
        np.testing.assert_array_equal(plain[name], runs[0][1][name])
        assert plain[name].dtype == np.dtype(spec.dtype)
    np.testing.assert_allclose(np.linalg.norm(runs[0][0], axis=-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_stable_at_beta_1e3(attention):
    states, out = simulate_hybrid_states(
        [np.random.default_rng(i) for i in range(4)], n=4, d=3, beta=1e3, sigma=2.0, T=2.0,
        layers=200, checkpoint_layers=[1, 200], attention=attention)
    assert np.isfinite(states).all() and not out["nonfinite"].any()
    np.testing.assert_allclose(np.linalg.norm(states, axis=-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["sa", "usa"])
def test_permutation_equivariance(attention):
    """Scalar noise shared by all tokens: permuting the start permutes every state."""
    x0 = np.random.default_rng(4).standard_normal((1, 6, 3))
    perm = np.array([5, 2, 0, 1, 4, 3])
    kw = dict(n=6, d=3, beta=2.0, sigma=0.9, T=1.0, layers=50, checkpoint_layers=[10, 50],
              attention=attention)
    s1, _ = simulate_hybrid_states([np.random.default_rng(9)], x0=x0, **kw)
    s2, _ = simulate_hybrid_states([np.random.default_rng(9)], x0=x0[:, perm], **kw)
    np.testing.assert_allclose(s2, s1[:, :, perm], rtol=0, atol=1e-12)


def test_sigma_zero_is_deterministic_flow():
    """sigma = 0: the Euler retraction of the attention flow, whatever the random stream."""
    x0 = np.random.default_rng(4).standard_normal((2, 3, 4))
    x0[1] = x0[0]
    kw = dict(n=3, d=4, beta=1.0, sigma=0.0, T=1.0, layers=20, checkpoint_layers=[20], x0=x0)
    states, _ = simulate_hybrid_states([np.random.default_rng(1), np.random.default_rng(2)], **kw)
    np.testing.assert_array_equal(states[0], states[1])


def test_negative_sigma_refused():
    with pytest.raises(ValueError, match="sigma = -1.0"):
        simulate_hybrid([np.random.default_rng(0)], n=2, d=3, beta=1.0, sigma=-1.0, T=1.0,
                        layers=10, checkpoint_layers=[10])


@pytest.mark.parametrize("factor, expected_class", [(0.25, 1), (4.0, 2)])
def test_usa_threshold_two_tokens(factor, expected_class):
    """USA, n = 2: sigma^2 below 2 e^-beta -> single cluster, above -> antipodal (models.md 5)."""
    beta, ntraj = 1.0, 300
    out = simulate_hybrid(
        [np.random.default_rng([3, i]) for i in range(ntraj)], n=2, d=3, beta=beta,
        sigma=np.sqrt(factor * 2 * np.exp(-beta)), T=20.0, layers=2000, checkpoint_layers=[2000],
        attention="usa")
    assert np.mean(out["cluster_class"][:, -1] == expected_class) > 0.95


@pytest.mark.parametrize("factor", [0.25, 4.0])
def test_early_stopping_and_threads(factor):
    """USA, n = 2, sigma^2 = factor * 2 e^-beta: one attracting class each side of the threshold.
    Early stopping: bit-identical up to the stop, the stop checkpoint repeated after it, the
    final class as in the full run for >= 98 % (deterministic here); threads: the same bits."""
    beta, ntraj, window = 1.0, 200, 2
    ckpt = np.arange(100, 2001, 100)
    kw = dict(n=2, d=3, beta=beta, sigma=np.sqrt(factor * 2 * np.exp(-beta)), T=20.0, layers=2000,
              checkpoint_layers=ckpt, attention="usa")
    full = simulate_hybrid([np.random.default_rng([3, i]) for i in range(ntraj)], **kw)
    early = simulate_hybrid([np.random.default_rng([3, i]) for i in range(ntraj)],
                            stop_when_resolved=True, resolved_window=window, **kw)
    threaded = simulate_hybrid([np.random.default_rng([3, i]) for i in range(ntraj)],
                               stop_when_resolved=True, resolved_window=window, threads=2, **kw)
    for name in OUTPUTS:
        np.testing.assert_array_equal(threaded[name], early[name])
    cls = early["cluster_class"]
    stopped = 0
    for r in range(ntraj):
        c = next((c for c in range(window - 1, len(ckpt) - 1)
                  if cls[r, c] != 0 and (cls[r, c - window + 1:c + 1] == cls[r, c]).all()),
                 len(ckpt) - 1)
        stopped += c < len(ckpt) - 1
        for name, spec in OUTPUTS.items():
            if spec.per_checkpoint:
                np.testing.assert_array_equal(early[name][r, :c + 1], full[name][r, :c + 1])
                assert (early[name][r, c:] == early[name][r, c]).all()
    assert stopped > ntraj // 2
    assert np.mean(cls[:, -1] != full["cluster_class"][:, -1]) <= 0.02
