"""The lanes path (`stochastic.lanes`, 3 <= n <= 8, one token per SIMD lane) against the general
path bit for bit, against the plain-numpy reference, and its dispatch.

The lanes path must reproduce `stochastic.general.trajectory` exactly: the same operations in the
same order per lane, including the degenerate branches of the Householder step (coincident tokens,
sub-columns exactly zero), the exponents of beta = 1e3 (np.exp's own path), USA's log-scales,
the overflow stop (value_std = 1e308), the sign of zeros and early stopping.
"""

import numpy as np
import pytest
from covering import names, tiered
from test_kernel_stochastic import ref_stochastic

from tokensweep.kernels.lowlevel import fast_exp
from tokensweep.kernels.stochastic import transformer as stochastic
from tokensweep.kernels.stochastic.transformer import OUTPUTS, simulate_stochastic_states

pytestmark = pytest.mark.skipif(not fast_exp.matches_libm(),
                                reason="fast_exp does not reproduce this machine's libm exp: "
                                       "the lanes path is never taken")


def starts(kind, ntraj, n, d):
    """(ntraj, n, d) starts, or None for drawn ones."""
    if kind == "drawn":
        return None
    u = np.random.default_rng(1).standard_normal((ntraj, 1, d))
    if kind == "coincident":  # collapsed: every weight 1, A of rank 1, later columns ~0
        return np.repeat(u, n, axis=1)
    if kind == "antipodal":  # two opposite clusters
        signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)[None, :, None]
        return np.repeat(u, n, axis=1) * signs
    x0 = np.zeros((ntraj, n, d))  # on the axes: sub-columns exactly zero (no reflection)
    x0[:, np.arange(n), np.arange(n) % d] = 1.0
    return x0


def both_paths(monkeypatch, **kw):
    rngs = lambda: [np.random.default_rng([5, i]) for i in range(3)]  # noqa: E731
    lanes = simulate_stochastic_states(rngs(), **kw)
    monkeypatch.setattr(stochastic, "_LANES", False)
    general = simulate_stochastic_states(rngs(), **kw)
    monkeypatch.setattr(stochastic, "_LANES", True)
    return lanes, general


def assert_same(lanes, general):
    np.testing.assert_array_equal(lanes[0].view(np.int64), general[0].view(np.int64))
    for name in OUTPUTS:
        np.testing.assert_array_equal(lanes[1][name], general[1][name])


LANES_AXES = [("n, d", [(3, 2), (3, 7), (5, 4), (6, 33), (8, 3), (8, 16)]),
              ("attention", ["sa", "usa"]),
              ("beta, value_std", [(0.0, 1.0), (1.7, 0.8), (1e3, 1.0), (1.0, 1e308)]),
              ("start", ["drawn", "coincident", "antipodal", "axis"])]


@pytest.mark.parametrize(names(LANES_AXES), tiered(LANES_AXES))  # pairs quick, all slow
def test_lanes_path_is_bit_identical_to_general_path(monkeypatch, n, d, attention, beta,
                                                     value_std, start):
    kw = dict(n=n, d=d, beta=beta, value_std=value_std, T=1.0, layers=40,
              checkpoint_layers=np.arange(1, 41), attention=attention,
              x0=starts(start, 3, n, d), draw_batch=7)
    assert_same(*both_paths(monkeypatch, **kw))


@pytest.mark.parametrize("n, d", [(4, 3), (8, 8)])
def test_lanes_path_early_stopping_and_threads_are_bit_identical(monkeypatch, n, d):
    kw = dict(n=n, d=d, beta=3.0, T=30.0, layers=3000, checkpoint_layers=np.arange(100, 3001, 100),
              stop_when_resolved=True, resolved_window=2)
    lanes, general = both_paths(monkeypatch, **kw)
    assert_same(lanes, general)
    assert (lanes[1]["cluster_class"][:, -1] != 0).any()  # some trajectory resolved (and stopped)
    threads = simulate_stochastic_states([np.random.default_rng([5, i]) for i in range(3)],
                                         threads=2, **kw)
    assert_same(threads, lanes)


@pytest.mark.parametrize("attention", ["sa", "usa"])
@pytest.mark.parametrize("n, d", [(8, 16), (6, 4), (3, 5)])
def test_lanes_path_matches_numpy_reference(n, d, attention):
    kw = dict(n=n, d=d, beta=1.7, value_std=0.8, T=0.6, layers=6, attention=attention)
    got, _ = simulate_stochastic_states([np.random.default_rng(11)], checkpoint_layers=np.arange(1, 7),
                                        **kw)
    want = ref_stochastic(np.random.default_rng(11), n, d, 1.7, 0.8, 0.1, 6, attention, "gaussian")
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-12)


def test_lanes_path_dispatch(monkeypatch):
    """3 <= n <= 8, SA or USA, gaussian noise and law, Q = K = I: the lanes path; else general."""
    calls = []
    lanes = stochastic.trajectory_lanes

    def spy(*args):
        calls.append(args[1].shape)
        return lanes(*args)

    monkeypatch.setattr(stochastic, "trajectory_lanes", spy)
    kw = dict(d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[10])
    run = lambda **more: stochastic.simulate_stochastic_transformer(  # noqa: E731
        [np.random.default_rng(0)], **(kw | more))
    for n in (3, 8):
        run(n=n)
        run(n=n, attention="usa")
    assert calls == [(3, 3), (3, 3), (8, 3), (8, 3)]
    for more in (dict(n=2), dict(n=9), dict(n=4, attention="causal_sa"), dict(n=4, noise="literal"),
                 dict(n=4, qk="ginibre"), dict(n=4, scheme="sde")):
        run(**more)
    monkeypatch.setattr(stochastic, "_FAST_EXP", False)
    run(n=4)
    assert len(calls) == 4


def pairs_and_one(monkeypatch, ntraj, **kw):
    """Outputs with two trajectories side by side (`stochastic.pairs`) and one at a time."""
    rngs = lambda: [np.random.default_rng([6, i]) for i in range(ntraj)]  # noqa: E731
    pairs = simulate_stochastic_states(rngs(), **kw)
    monkeypatch.setattr(stochastic, "_PAIRS", False)
    one = simulate_stochastic_states(rngs(), **kw)
    monkeypatch.setattr(stochastic, "_PAIRS", True)
    return pairs, one


@pytest.mark.parametrize("beta", [1.7, 1e3])
@pytest.mark.parametrize("attention", ["sa", "usa"])
@pytest.mark.parametrize("n, d", [(3, 2), (4, 5), (7, 16), (8, 3), (8, 17)])
def test_pairs_of_unlike_trajectories_are_bit_identical(monkeypatch, n, d, attention, beta):
    """Pairs whose trajectories take different branches: an axis start (at beta = 1e3 A = X,
    columns exactly zero below the diagonal: one trajectory reflects, the other not) beside a
    random one, coincident
    beside axis, antipodal beside random, a zero token (the start fails) beside a random one;
    an odd last trajectory runs alone."""
    kinds = ["axis", "random", "coincident", "axis", "antipodal", "random", "zero", "random", "random"]
    x0 = np.concatenate([starts(k, 1, n, d) if k not in ("random", "zero") else
                         np.random.default_rng(q).standard_normal((1, n, d))
                         for q, k in enumerate(kinds)])
    x0[6, 1] = 0.0
    kw = dict(n=n, d=d, beta=beta, attention=attention, T=1.0, layers=40,
              checkpoint_layers=np.arange(1, 41), x0=x0, draw_batch=3)
    pairs, one = pairs_and_one(monkeypatch, len(kinds), **kw)
    assert_same(pairs, one)
    assert pairs[1]["nonfinite"][6] and not pairs[1]["nonfinite"][7]


def test_pairs_when_one_trajectory_fails_or_stops_first(monkeypatch):
    """One trajectory of a pair ends (overflow at its own layer; early stop at its own
    checkpoint) and the other goes on alone: the same bits, and the Generators end in the same
    states (the same draws)."""
    kw = dict(n=5, d=4, beta=1.0, value_std=1e308, T=1.0, layers=40, checkpoint_layers=np.arange(1, 41))
    pairs, one = pairs_and_one(monkeypatch, 8, **kw)
    assert_same(pairs, one)
    fail = np.isnan(pairs[0][:, :, 0, 0]).argmax(axis=1)
    assert pairs[1]["nonfinite"].all() and fail[0] != fail[1]  # pair (0, 1) fails at two layers
    kw = dict(n=6, d=4, beta=3.0, T=30.0, layers=3000, checkpoint_layers=np.arange(100, 3001, 100),
              stop_when_resolved=True, resolved_window=2)
    pairs, one = pairs_and_one(monkeypatch, 8, **kw)
    assert_same(pairs, one)
    later = [np.random.default_rng([6, i]) for i in range(8)]
    simulate_stochastic_states(later, **kw)
    monkeypatch.setattr(stochastic, "_PAIRS", False)
    alone = [np.random.default_rng([6, i]) for i in range(8)]
    simulate_stochastic_states(alone, **kw)
    assert [g.bit_generator.state for g in later] == [g.bit_generator.state for g in alone]
    t_hit = pairs[1]["t_hit"]
    assert np.isfinite(t_hit).any() and len(set(t_hit[np.isfinite(t_hit)])) > 1
