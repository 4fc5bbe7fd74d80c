"""Deep stochastic transformer kernel against a plain-numpy reference, plus invariants and statistics.

The reference below is vectorised numpy (no numba) and consumes the random stream exactly as the
kernel's docstring says: n*d start normals, then per layer min(n, d)*d (gaussian) or d*d (literal).
"""

import numpy as np
import pytest
from covering import names, tiered
from numpy_reference import ref_attention
from scipy.stats import ks_2samp

from tokensweep.kernels.attention import householder_r
from tokensweep.kernels.outcomes import OUTPUTS
from tokensweep.kernels.stochastic import transformer as stochastic
from tokensweep.kernels.stochastic.transformer import (
    ATTENTIONS,
    NOISES,
    simulate_stochastic_states,
    simulate_stochastic_transformer,
)


def ref_step(x, coef, logscale, direction):
    """N(x_i + coef exp(c_i) direction_i), the scale applied where it is <= 1."""
    big = logscale > 0
    fx = np.where(big, np.exp(-np.where(big, logscale, 0.0)), 1.0)
    fa = np.where(big, coef, coef * np.exp(np.minimum(logscale, 0.0)))
    y = fx[:, None] * x + fa[:, None] * direction
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def ref_stochastic(rng, n, d, beta, s, h, layers, kind, noise):
    """States (layers, n, d) after each layer."""
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = []
    for _ in range(layers):
        ahat, c = ref_attention(x, beta, kind)
        if noise == "gaussian":
            w = rng.standard_normal((min(n, d), d))
            r = np.linalg.qr(ahat.T, mode="r")  # LAPACK Householder, same signs as the kernel
            direction = s * r.T @ w
        else:
            v = rng.standard_normal((d, d))
            direction = s * ahat @ v.T
        x = ref_step(x, np.sqrt(h), c, direction)
        out.append(x)
    return np.array(out)


def run_states(seed, **kw):
    layers = kw["layers"]
    states, out = simulate_stochastic_states(
        [np.random.default_rng(seed)], checkpoint_layers=np.arange(1, layers + 1), **kw
    )
    return states[0], out


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("d", [2, 3, 7])
def test_matches_numpy_reference_step_by_step(noise, attention, n, d):
    kw = dict(n=n, d=d, beta=1.7, value_std=0.8, T=0.6, layers=6, attention=attention, noise=noise)
    got, _ = run_states(11, **kw)
    want = ref_stochastic(np.random.default_rng(11), n, d, 1.7, 0.8, 0.1, 6, attention, noise)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("noise", NOISES)
def test_outputs_follow_output_specs(noise):
    rngs = [np.random.default_rng(i) for i in range(3)]
    out = simulate_stochastic_transformer(rngs, n=3, d=4, beta=1.0, T=1.0, layers=40,
                                          checkpoint_layers=[10, 20, 40], noise=noise)
    assert set(out) == set(OUTPUTS)
    for name, spec in OUTPUTS.items():
        assert out[name].dtype == np.dtype(spec.dtype), name
        assert out[name].shape == ((3, 3) if spec.per_checkpoint else (3,)), name


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_tokens_stay_on_sphere(noise, attention):
    states, out = simulate_stochastic_states(
        [np.random.default_rng(3), np.random.default_rng(4)], n=5, d=3, beta=2.0, T=5.0,
        layers=500, checkpoint_layers=[100, 250, 500], attention=attention, noise=noise)
    np.testing.assert_allclose(np.linalg.norm(states, axis=-1), 1.0, rtol=0, atol=1e-12)
    assert not out["nonfinite"].any()


def test_householder_r_exact_for_collapsed_tokens():
    """Coinciding and antipodal tokens make G = A^T A singular; R^T R = G must still hold."""
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal(6), rng.standard_normal(6)
    a = np.array([u, u, -u, v, u + 1e-9 * v])  # rank 2 (up to 1e-9)
    r = np.zeros((5, 5))
    householder_r(a.copy(), r)  # overwrites its input
    np.testing.assert_allclose(r.T @ r, a @ a.T, rtol=0, atol=1e-13)
    # which rows carry the rank is decided by rounding (as in LAPACK); only R^T R = G matters
    assert np.all(np.linalg.svd(r, compute_uv=False)[2:] < 1e-8)


@pytest.mark.parametrize("noise", NOISES)
def test_draw_batch_invariance_and_reproducibility(noise):
    kw = dict(n=3, d=5, beta=1.0, T=2.0, layers=97, checkpoint_layers=[13, 50, 97], noise=noise)
    runs = [
        simulate_stochastic_states([np.random.default_rng(5), np.random.default_rng(6)],
                                   draw_batch=b, **kw)
        for b in (None, 1, 7, 97, 1000, None)
    ]
    for states, out in runs[1:]:
        np.testing.assert_array_equal(states, runs[0][0])
        for name in OUTPUTS:
            np.testing.assert_array_equal(out[name], runs[0][1][name])
    plain = simulate_stochastic_transformer([np.random.default_rng(5), np.random.default_rng(6)],
                                            **kw)
    for name in OUTPUTS:
        np.testing.assert_array_equal(plain[name], runs[0][1][name])


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_stable_at_beta_1e3(noise, attention):
    states, out = simulate_stochastic_states(
        [np.random.default_rng(i) for i in range(4)], n=4, d=3, beta=1e3, T=2.0, layers=200,
        checkpoint_layers=[1, 100, 200], attention=attention, noise=noise)
    assert np.isfinite(states).all()
    assert not out["nonfinite"].any()
    assert np.isfinite(out["overlap_min"]).all()
    np.testing.assert_allclose(np.linalg.norm(states, axis=-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["sa", "usa"])
def test_permutation_equivariance_literal(attention):
    """Literal V does not depend on the tokens, so permuting the start permutes every state."""
    rng = np.random.default_rng(8)
    x0 = rng.standard_normal((1, 5, 4))
    perm = np.array([3, 0, 4, 1, 2])
    kw = dict(n=5, d=4, beta=1.3, T=0.5, layers=20, checkpoint_layers=[5, 20], attention=attention,
              noise="literal")
    s1, o1 = simulate_stochastic_states([np.random.default_rng(9)], x0=x0, **kw)
    s2, o2 = simulate_stochastic_states([np.random.default_rng(9)], x0=x0[:, perm], **kw)
    np.testing.assert_allclose(s2, s1[:, :, perm], rtol=0, atol=1e-12)
    np.testing.assert_allclose(o2["overlap_min"], o1["overlap_min"], rtol=0, atol=1e-12)


def test_nonfinite_start_is_flagged_not_raised():
    x0 = np.ones((2, 3, 4))
    x0[1, 2] = np.nan
    states, out = simulate_stochastic_states(
        [np.random.default_rng(0), np.random.default_rng(1)], n=3, d=4, beta=1.0, T=1.0,
        layers=10, checkpoint_layers=[5, 10], x0=x0)
    assert out["nonfinite"].tolist() == [False, True]
    assert np.isnan(out["overlap_min"][1]).all() and np.isnan(out["overlap_max"][1]).all()
    assert (out["cluster_class"][1] == 0).all() and (out["n_clusters"][1] == 0).all()
    assert np.isnan(out["t_hit"][1]) and np.isnan(states[1]).all()
    # identical tokens: a single cluster from the first checkpoint on
    assert out["cluster_class"][0].tolist() == [1, 1] and out["t_hit"][0] == 0.5


def test_overflowing_values_stop_the_trajectory():
    """value_std = 1e308 overflows the noise to inf at some layer: the rest is NaN / class 0."""
    states, out = simulate_stochastic_states(
        [np.random.default_rng(2)], n=2, d=3, beta=1.0, value_std=1e308, T=1.0, layers=50,
        checkpoint_layers=np.arange(1, 51))
    assert out["nonfinite"][0]
    bad = np.isnan(out["overlap_min"][0])
    assert bad[-1] and np.all(np.diff(bad.astype(int)) >= 0)  # NaN from some checkpoint on
    assert (out["cluster_class"][0][bad] == 0).all() and (out["n_clusters"][0][bad] == 0).all()
    assert np.isfinite(states[0][~bad]).all()


def test_n1_outputs():
    out = simulate_stochastic_transformer([np.random.default_rng(0)], n=1, d=3, beta=1.0, T=1.0,
                                          layers=10, checkpoint_layers=[5, 10])
    assert out["overlap_min"].tolist() == [[1.0, 1.0]] and out["overlap_max"].tolist() == [[1.0, 1.0]]
    assert out["cluster_class"].tolist() == [[1, 1]] and out["n_clusters"].tolist() == [[1, 1]]
    assert out["t_hit"][0] == 0.5


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(d=1), "d = 1"),
        (dict(n=0), "n = 0"),
        (dict(noise="wishart"), "noise = 'wishart'"),
        (dict(attention="mha"), "attention = 'mha'"),
        (dict(checkpoint_layers=[5, 3]), "checkpoint_layers"),
        (dict(checkpoint_layers=[5]), "ending at layers = 10"),
        (dict(eps=0.0), "eps"),
        (dict(beta=np.nan), "beta"),
        (dict(value_std=-1.0), "value_std"),
    ],
)
def test_bad_arguments_are_refused_by_name(bad, match):
    kw = dict(n=2, d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[5, 10]) | bad
    with pytest.raises(ValueError, match=match):
        simulate_stochastic_transformer([np.random.default_rng(0)], **kw)


def pair_starts(kind, ntraj, d):
    """(ntraj, 2, d) starts for the n = 2 path, or None for drawn starts."""
    if kind == "drawn":
        return None
    u = np.random.default_rng(1).standard_normal((ntraj, d))
    if kind == "coincident":  # collapsed: G singular, the second Householder step sees ~0
        return np.stack([u, u], axis=1)
    if kind == "antipodal":  # with beta = 0 SA gives Ahat = 0 exactly
        return np.stack([u, -u], axis=1)
    x0 = np.zeros((ntraj, 2, d))  # on an axis: sub-columns exactly zero (no reflection)
    x0[:, 0, 0], x0[:, 1, 0] = 1.0, -1.0
    return x0


TWO_TOKEN_AXES = [("d", [2, 3, 4, 7, 16]), ("attention", ATTENTIONS),
                  ("beta, value_std", [(0.0, 1.0), (1.7, 0.8), (1e3, 1.0), (1.0, 1e308)]),
                  ("start", ["drawn", "coincident", "antipodal", "axis"])]


@pytest.mark.parametrize(names(TWO_TOKEN_AXES), tiered(TWO_TOKEN_AXES))  # pairs quick, all slow
def test_two_token_path_is_bit_identical_to_general_path(monkeypatch, d, attention, beta,
                                                         value_std, start):
    """n = 2 with gaussian noise runs the fused `_trajectory_pair`; it must reproduce the general
    `_trajectory` exactly (same operations in the same order), including the degenerate branches
    of the Householder step, the overflow stop (value_std = 1e308) and the sign of zeros."""
    x0 = pair_starts(start, 3, d)
    kw = dict(n=2, d=d, beta=beta, value_std=value_std, T=1.0, layers=40,
              checkpoint_layers=np.arange(1, 41), attention=attention, x0=x0, draw_batch=7)
    fused = simulate_stochastic_states([np.random.default_rng([5, i]) for i in range(3)], **kw)
    monkeypatch.setattr(stochastic, "_SPECIALISE", False)
    general = simulate_stochastic_states([np.random.default_rng([5, i]) for i in range(3)], **kw)
    np.testing.assert_array_equal(fused[0], general[0])
    np.testing.assert_array_equal(np.signbit(fused[0]), np.signbit(general[0]))
    for name in OUTPUTS:
        np.testing.assert_array_equal(fused[1][name], general[1][name])


def test_two_token_gaussian_runs_use_the_fused_path(monkeypatch):
    """The dispatch: n = 2 gaussian never reaches the general kernel; literal and n = 3 causal_sa
    do (n = 3 SA / USA take the lanes path, tests/test_kernel_stochastic_lanes.py)."""
    calls = []
    general = stochastic._trajectory

    def spy(*args):
        calls.append(args[1].shape)
        return general(*args)

    monkeypatch.setattr(stochastic, "_trajectory", spy)
    kw = dict(d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[10])
    simulate_stochastic_transformer([np.random.default_rng(0)], n=2, noise="gaussian", **kw)
    assert calls == []
    simulate_stochastic_transformer([np.random.default_rng(0)], n=2, noise="literal", **kw)
    simulate_stochastic_transformer([np.random.default_rng(0)], n=3, noise="gaussian",
                                    attention="causal_sa", **kw)
    assert calls == [(2, 3), (3, 3)]


def test_two_token_draw_batch_invariance():
    kw = dict(n=2, d=5, beta=1.0, T=2.0, layers=97, checkpoint_layers=[13, 50, 97])
    runs = [simulate_stochastic_states([np.random.default_rng(5), np.random.default_rng(6)],
                                       draw_batch=b, **kw) for b in (None, 1, 7, 97, 1000)]
    for states, out in runs[1:]:
        np.testing.assert_array_equal(states, runs[0][0])
        for name in OUTPUTS:
            np.testing.assert_array_equal(out[name], runs[0][1][name])


def final_overlaps(seed0, ntraj, n, noise, value_std=1.0):
    rngs = [np.random.default_rng([seed0, i]) for i in range(ntraj)]
    out = simulate_stochastic_transformer(rngs, n=n, d=4, beta=1.0, value_std=value_std, T=0.5,
                                          layers=50, checkpoint_layers=[50], noise=noise)
    return out["overlap_min"][:, 0]


@pytest.mark.parametrize("n", [2, 3])
def test_gaussian_and_literal_agree_in_distribution(n):
    """Two-sample KS on final overlap_min; the literal path with a 25 % too large value std (the
    same as running 56 % longer) must be rejected by the same test, so the test has power."""
    ntraj = 4000
    gauss = final_overlaps(1, ntraj, n, "gaussian")
    literal = final_overlaps(2, ntraj, n, "literal")
    wrong = final_overlaps(2, ntraj, n, "literal", value_std=1.25)
    assert ks_2samp(gauss, literal).pvalue > 1e-3
    assert ks_2samp(gauss, wrong).pvalue < 1e-6


def test_two_tokens_d2_antipodal_half():
    """d = 2: P(antipodal) = 1/2 for uniform starts and every beta (models.md section 4)."""
    ntraj = 400
    out = simulate_stochastic_transformer(
        [np.random.default_rng([7, i]) for i in range(ntraj)], n=2, d=2, beta=2.0, T=20.0,
        layers=2000, checkpoint_layers=[2000])
    cls = out["cluster_class"][:, -1]
    assert np.mean(cls == 0) < 0.05
    p = np.mean(cls == 2) / np.mean(cls != 0)
    assert abs(p - 0.5) < 4 * np.sqrt(0.25 / ntraj)


PER_CHECKPOINT = [name for name, spec in OUTPUTS.items() if spec.per_checkpoint]


def stop_checkpoints(cls, window):
    """Per trajectory, the checkpoint after which early stopping stops (nt when it never does):
    the first c with one resolved class at checkpoints c - window + 1 .. c, before the last."""
    ntraj, nt = cls.shape
    stops = np.full(ntraj, nt)
    for r in range(ntraj):
        for c in range(window - 1, nt - 1):
            run = cls[r, c - window + 1:c + 1]
            if run[0] != 0 and (run == run[0]).all():
                stops[r] = c
                break
    return stops


def check_early_stop(full, early, window, states_full=None, states_early=None):
    """Bit-identical up to the stop; afterwards the stop checkpoint repeated. Returns the stops."""
    stops = stop_checkpoints(early["cluster_class"], window)
    for r, c in enumerate(stops):
        c = min(c, len(early["cluster_class"][r]) - 1)
        for name in PER_CHECKPOINT:
            np.testing.assert_array_equal(early[name][r, :c + 1], full[name][r, :c + 1])
            assert (early[name][r, c:] == early[name][r, c]).all(), name
        if states_full is not None:
            np.testing.assert_array_equal(states_early[r, :c + 1], states_full[r, :c + 1])
            assert (states_early[r, c:] == states_early[r, c]).all()
    assert not early["nonfinite"].any()
    return stops


@pytest.mark.parametrize("n, d, beta", [(2, 3, 1.0), (2, 4, 2.0), (2, 8, 1.5)])
def test_early_stopping_matches_full_run_until_it_stops(n, d, beta):
    """Two tokens above beta_c: +1 and -1 both attract, so a class held at 2 checkpoints (1 time
    unit apart) is kept; the final class may differ from the full run's for at most 2 % of the
    trajectories (measured, deterministic for these seeds: 0.7 %, 0, 0.3 %). Up to the stop
    everything is bit-identical, after it the stop checkpoint repeats, t_hit follows the classes.
    (n = 3 is not held to this: its antipodal 2 + 1 split is not absorbing at beta = 2, d = 4,
    where 21 % of the final classes differ; see the kernel docstring.)"""
    ntraj, window = 300, 2
    kw = dict(n=n, d=d, beta=beta, T=20.0, layers=2000, checkpoint_layers=np.arange(100, 2001, 100))
    sf, full = simulate_stochastic_states([np.random.default_rng([4, i]) for i in range(ntraj)], **kw)
    se, early = simulate_stochastic_states([np.random.default_rng([4, i]) for i in range(ntraj)],
                                           stop_when_resolved=True, resolved_window=window, **kw)
    stops = check_early_stop(full, early, window, sf, se)
    assert np.mean(stops < 20) > 0.8  # most trajectories resolve well before T
    final_changed = early["cluster_class"][:, -1] != full["cluster_class"][:, -1]
    assert final_changed.mean() <= 0.02
    never = stops == 20
    for name in OUTPUTS:
        np.testing.assert_array_equal(early[name][never], full[name][never])
    times = 0.01 * np.arange(100, 2001, 100)
    for r in range(ntraj):
        cls = early["cluster_class"][r]
        c = len(cls) - 1
        while c > 0 and cls[c - 1] == cls[-1]:
            c -= 1
        assert early["t_hit"][r] == (times[c] if cls[-1] else np.nan) or cls[-1] == 0


@pytest.mark.parametrize("window", [1, 3])
def test_early_stopping_window_and_literal_path(window):
    kw = dict(n=3, d=3, beta=2.0, T=10.0, layers=1000, checkpoint_layers=np.arange(50, 1001, 50),
              noise="literal")
    full = simulate_stochastic_transformer([np.random.default_rng([6, i]) for i in range(60)], **kw)
    early = simulate_stochastic_transformer([np.random.default_rng([6, i]) for i in range(60)],
                                            stop_when_resolved=True, resolved_window=window, **kw)
    stops = check_early_stop(full, early, window)
    assert (stops < 20).any()


def test_early_stopping_off_by_default_and_refused_window():
    kw = dict(n=2, d=3, beta=1.0, T=5.0, layers=500, checkpoint_layers=np.arange(50, 501, 50))
    a = simulate_stochastic_transformer([np.random.default_rng(1)], **kw)
    b = simulate_stochastic_transformer([np.random.default_rng(1)], stop_when_resolved=False,
                                        resolved_window=1, **kw)
    for name in OUTPUTS:
        np.testing.assert_array_equal(a[name], b[name])
    with pytest.raises(ValueError, match="resolved_window = 0"):
        simulate_stochastic_transformer([np.random.default_rng(1)], stop_when_resolved=True,
                                        resolved_window=0, **kw)
    with pytest.raises(ValueError, match="threads = 0"):
        simulate_stochastic_transformer([np.random.default_rng(1)], threads=0, **kw)


@pytest.mark.parametrize("n, noise", [(2, "gaussian"), (5, "gaussian"), (4, "literal")])
@pytest.mark.parametrize("stop", [False, True])
def test_threads_are_bit_identical_to_one_thread(n, noise, stop):
    """Each trajectory owns its Generator and its rows: 1, 2 or 3 threads give the same bits."""
    kw = dict(n=n, d=4, beta=1.5, T=4.0, layers=400, checkpoint_layers=np.arange(40, 401, 40),
              noise=noise, stop_when_resolved=stop)
    runs = [simulate_stochastic_states([np.random.default_rng([9, i]) for i in range(23)],
                                       threads=t, **kw) for t in (1, 2, 3)]
    for states, out in runs[1:]:
        np.testing.assert_array_equal(states, runs[0][0])
        for name in OUTPUTS:
            np.testing.assert_array_equal(out[name], runs[0][1][name])
