"""The device kernels (numba-cuda) without a GPU: numba-cuda's simulator runs them as Python.

NUMBA_ENABLE_CUDASIM is read when numba is imported; tests/conftest.py sets it for the whole
session (unless the environment already has it: on a machine with a GPU, NUMBA_ENABLE_CUDASIM=0
runs these same tests on the device) before anything imports numba: set later, numba would
re-read all its settings and lose the kernels' cache folder. No other test uses numba.cuda. Sizes are tiny: the simulator runs
about 3 ms per trajectory-step. Statistics at scale: test_kernel_cuda_stats.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

pytest.importorskip("numba_cuda")

from numba import cuda  # noqa: E402

from tokensweep.kernels.lowlevel import philox  # noqa: E402
from tokensweep.kernels.stochastic import device_steps  # noqa: E402
from tokensweep.kernels.stochastic.cuda import simulate_hybrid_cuda, simulate_stochastic_cuda  # noqa: E402

KEY = (0x12345678, 0x9ABCDEF0)
# Random123's kat_vectors, the three philox4x32 10 lines: counter, key, result
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
TINY = dict(n=2, d=3, beta=2.0, T=2.0, layers=8, checkpoint_layers=[4, 8])


def test_philox_known_answers_numpy_and_device():
    gen = philox.build(lambda f: cuda.jit(f, device=True))

    @cuda.jit
    def kernel(counters, keys, out):
        i = cuda.grid(1)
        if i < counters.shape[0]:
            c = counters[i]
            k = keys[i]
            out[i, 0], out[i, 1], out[i, 2], out[i, 3] = gen.philox(c[0], c[1], c[2], c[3], k[0], k[1])

    counters = np.array([c for c, _, _ in KAT], np.uint64)
    keys = np.array([k for _, k, _ in KAT], np.uint64)
    out = np.zeros((len(KAT), 4), np.uint64)
    kernel[1, 4](counters, keys, out)
    expected = np.array([r for _, _, r in KAT], np.uint64)
    np.testing.assert_array_equal(out, expected)
    for c, k, r in KAT:
        np.testing.assert_array_equal(philox.philox_numpy([c], k)[0], r)


def test_device_draws_equal_the_numpy_reference_bit_for_bit():
    gen = philox.build(lambda f: cuda.jit(f, device=True))

    @cuda.jit
    def kernel(trajs, first, count, law, out):
        i = cuda.grid(1)
        if i < trajs.shape[0]:
            gen.fill(out[i], count, law, KEY[0], KEY[1], trajs[i], first, 0, 1)

    trajs = np.array([0, 1, 2**32 + 5, 77], np.int64)
    for law in (0, 1, 2):
        out = np.zeros((trajs.size, 7))
        kernel[1, 4](trajs, 3, 7, law, out)
        for row, traj in zip(out, trajs):
            if law == 0:
                np.testing.assert_array_equal(row, philox.normals_numpy(KEY, int(traj), 3, 7))
            else:
                u = philox.uniforms_numpy(KEY, int(traj), 3, 7)
                want = np.where(u < 0.5, 1.0, -1.0) if law == 1 else np.sqrt(3.0) * (2.0 * u - 1.0)
                np.testing.assert_array_equal(row, want)


def test_normals_are_standard_and_streams_independent():
    """200,000 normals of one trajectory: mean within 4.5 standard errors of 0, variance within
    4.5 of 1, KS against N(0, 1) at the 1e-4 level; two trajectories' streams uncorrelated
    (4.5 standard errors); the uniforms' mean and fourth moment of the two value laws."""
    m = 200_000
    z = philox.normals_numpy(KEY, 3, 0, m)
    assert abs(z.mean()) < 4.5 / np.sqrt(m)
    assert abs(z.var() - 1.0) < 4.5 * np.sqrt(2.0 / m)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    other = philox.normals_numpy(KEY, 4, 0, m)
    assert abs(np.corrcoef(z, other)[0, 1]) < 4.5 / np.sqrt(m)
    shifted = philox.normals_numpy((KEY[0], KEY[1] + 1), 3, 0, m)  # another cell's key
    assert abs(np.corrcoef(z, shifted)[0, 1]) < 4.5 / np.sqrt(m)
    u = np.sqrt(3.0) * (2.0 * philox.uniforms_numpy(KEY, 3, 0, m) - 1.0)  # the uniform law
    assert abs(u.mean()) < 4.5 / np.sqrt(m) and abs(u.var() - 1.0) < 4.5 * np.sqrt(0.8 / m)
    assert abs(np.mean(u ** 4) - 1.8) < 4.5 * np.sqrt((27 / 7 - 1.8 ** 2) / m)


def test_householder_and_step_keep_the_model_pure_python_build():
    """The device source run as plain Python (what the simulator runs): R equals LAPACK's to
    rounding (R^T R = A^T A), a step leaves every token on the sphere, overflowing values fail."""
    parts = device_steps.build(lambda f: f)
    rng = np.random.default_rng(1)
    for n, d in ((2, 3), (5, 3), (3, 6)):
        a = rng.standard_normal((n, d))
        rf = np.zeros((n, n))
        parts.householder_r(a.copy(), rf, n, d)
        r = min(n, d)
        np.testing.assert_allclose(rf[:r], np.linalg.qr(a.T, mode="r"), atol=1e-12)
        x = rng.standard_normal((n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        logscale = np.array([0.0, 3.0, -2.0, 0.0, 0.0][:n])
        assert parts.step(x, rng.standard_normal((n, d)), logscale, n, d, 0.3, 0, 1)
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=4e-16)
        assert not parts.step(x, np.full((n, d), np.inf), np.zeros(n), n, d, 1.0, 0, 1)


@pytest.mark.parametrize("attention,noise,law", [("sa", "gaussian", "gaussian"),
                                                  ("usa", "literal", "rademacher"),
                                                  ("causal_sa", "literal", "uniform")])
def test_outcomes_are_consistent_and_a_trajectory_ignores_its_batch(attention, noise, law):
    """Each trajectory's row is the same whether it runs with five others or alone, in any order
    (Philox keyed by cell and trajectory); overlaps in [-1, 1], classes as the overlaps say."""
    kw = dict(TINY, n=3, attention=attention, noise=noise, value_law=law, eps=0.2)
    full = simulate_stochastic_cuda(KEY, range(6), **kw)
    part = simulate_stochastic_cuda(KEY, [4, 1], **kw)
    for name, values in part.items():
        np.testing.assert_array_equal(values, full[name][[4, 1]])
    lo, hi = full["overlap_min"], full["overlap_max"]
    assert np.all((-1 - 1e-12 <= lo) & (lo <= hi) & (hi <= 1 + 1e-12)) and not full["nonfinite"].any()
    cls = full["cluster_class"]
    np.testing.assert_array_equal(cls == 1, lo >= 0.8)  # single: every overlap >= 1 - eps
    anti = cls == 2  # antipodal: one pair <= -1 + eps, every |overlap| >= 1 - eps (so the extremes)
    assert np.all((lo[anti] <= -0.8) & (np.abs(hi[anti]) >= 0.8)) and (cls != 1).any()
    assert np.all((full["n_clusters"] >= 1) & (full["n_clusters"] <= 3))
    assert np.all(full["n_clusters"][full["cluster_class"] == 1] == 1)


def test_early_stop_carries_the_resolved_checkpoint():
    kw = dict(TINY, beta=4.0, layers=12, checkpoint_layers=[3, 6, 9, 12], eps=0.3)
    out = simulate_stochastic_cuda(KEY, range(4), stop_when_resolved=True, resolved_window=2, **kw)
    full = simulate_stochastic_cuda(KEY, range(4), **kw)
    cls = out["cluster_class"]
    for r in range(4):
        stop = next((c for c in range(1, 4) if cls[r, c] != 0 and cls[r, c] == cls[r, c - 1]), None)
        upto = 4 if stop is None else stop + 1
        np.testing.assert_array_equal(out["overlap_min"][r, :upto], full["overlap_min"][r, :upto])
        if stop is not None:
            assert np.all(out["overlap_min"][r, stop:] == out["overlap_min"][r, stop])
        final = cls[r, -1]
        first = 3
        while first > 0 and cls[r, first - 1] == final:
            first -= 1
        assert out["t_hit"][r] == (np.nan if final == 0 else [0.5, 1.0, 1.5, 2.0][first]) or final == 0
    assert (cls[:, -1] != 0).any()  # something stopped: the test checks a carried state


def test_hybrid_model_on_the_device():
    """The hybrid model (one xi per layer): batch independence, and sigma = 0 is the noiseless
    attention flow, whose two tokens under SA at beta = 1 always merge (overlap only grows)."""
    kw = dict(TINY, layers=40, checkpoint_layers=[20, 40], T=8.0, beta=1.0, sigma=0.5)
    full = simulate_hybrid_cuda(KEY, range(4), **kw)
    part = simulate_hybrid_cuda(KEY, [3], **kw)
    for name, values in part.items():
        np.testing.assert_array_equal(values, full[name][[3]])
    calm = simulate_hybrid_cuda(KEY, range(4), **dict(kw, sigma=0.0))
    assert np.all(calm["overlap_min"][:, 1] > calm["overlap_min"][:, 0])
    assert not np.array_equal(calm["overlap_min"], full["overlap_min"])


RECORD = ("overlap_hist", "gram", "hemisphere_margin", "consensus_error", "consensus_error_abs",
          "energy", "states")


def test_recorded_observables_agree_with_the_states_and_outcomes():
    """Every observable from the device build (the simulator; the host build runs the same
    source: test_kernel_cuda_stats.py), against what the recorded states say: gram = X X^T, the extremes of its pairs are overlap_min / max, the
    histogram counts the pairs, consensus errors and energy (`sphere.checkpoints.energy`) from
    gram, hemisphere_margin = min_i <x_i, v> about the start's own direction v (computed from
    the start's Philox normals, as the host does for the kernel)."""
    from tokensweep.kernels import observables
    from tokensweep.kernels.sphere.checkpoints import energy

    n, d, bins = 3, 4, 7
    kw = dict(TINY, n=n, d=d, attention="usa", beta=1.5, eps=0.2)
    out = simulate_stochastic_cuda(KEY, [0, 5, 9], record=RECORD, record_bins=bins, **kw)
    x, g = out["states"], out["gram"]
    np.testing.assert_allclose(np.einsum("rcik,rcjk->rcij", x, x), g, rtol=0, atol=1e-13)
    i, j = np.triu_indices(n, 1)
    np.testing.assert_array_equal(g[..., i, j].min(-1), out["overlap_min"])
    np.testing.assert_array_equal(g[..., i, j].max(-1), out["overlap_max"])
    assert np.all(out["overlap_hist"].sum(-1) == n * (n - 1) // 2)
    np.testing.assert_allclose(out["consensus_error"], 1 - g[..., 0, :].sum(-1) / n, atol=1e-14)
    np.testing.assert_allclose(out["consensus_error_abs"], 1 - np.abs(g[..., 0, :]).sum(-1) / n,
                               atol=1e-14)
    for r in range(3):
        for c in range(2):
            np.testing.assert_allclose(out["energy"][r, c], energy(g[r, c].copy(), 1.5), rtol=1e-13)
    for r, traj in enumerate([0, 5, 9]):
        start = philox.normals_numpy(KEY, traj, 0, n * d).reshape(n, d)
        start /= np.linalg.norm(start, axis=1, keepdims=True)
        v = np.empty(d)
        observables.start_direction(start, v)
        np.testing.assert_allclose(out["hemisphere_margin"][r], (x[r] @ v).min(-1), atol=1e-13)


def test_given_direction_and_early_stop_carry_the_observables():
    """A given direction is used as it is (normalised); after an early stop every observable
    repeats the resolved checkpoint's value, as the CPU kernels' `carry_observables`."""
    v = np.array([1.0, 2.0, 0.0])
    kw = dict(TINY, beta=4.0, layers=12, checkpoint_layers=[3, 6, 9, 12], eps=0.3)
    out = simulate_stochastic_cuda(KEY, range(4), stop_when_resolved=True, resolved_window=2,
                                   record=RECORD, direction=v, **kw)
    x = out["states"]
    np.testing.assert_allclose(out["hemisphere_margin"], (x @ (v / np.sqrt(5))).min(-1),
                               atol=1e-13)
    cls = out["cluster_class"]
    stopped = 0
    for r in range(4):
        stop = next((c for c in range(1, 4) if cls[r, c] != 0 and cls[r, c] == cls[r, c - 1]), None)
        if stop is None:
            continue
        stopped += 1
        for name in RECORD:
            later = out[name][r, stop:]
            np.testing.assert_array_equal(later, np.broadcast_to(later[0], later.shape), err_msg=name)
    assert stopped > 0


@pytest.mark.parametrize("noise,law,attention", [("gaussian", "gaussian", "sa"),
                                                 ("literal", "rademacher", "causal_sa"),
                                                 ("scalar", "gaussian", "usa")])
def test_a_warp_per_trajectory_gives_the_threads_numbers(noise, law, attention):
    """The warp layout (lane i: tokens i, i + 32, ...; serial parts on lane 0) computes every
    number as the thread layout does; n = 35 > 32 tokens puts two on lane 0 to 2. The
    simulator runs both bit for bit; a GPU may fuse multiply-adds differently (1e-12)."""
    kw = dict(TINY, n=35, d=3, layers=4, checkpoint_layers=[2, 4], attention=attention, eps=0.2,
              record=("gram", "energy"), stop_when_resolved=True)
    if noise == "scalar":
        kw.update(noise=noise, value_std=0.5)
    else:
        kw.update(noise=noise, value_law=law)
    import tokensweep.kernels.stochastic.cuda as device

    old = device.MAX_TOKENS
    device.MAX_TOKENS = 64  # the layouts' agreement, past the spec's 32 tokens
    try:
        thread = simulate_stochastic_cuda(KEY, [2, 7], layout="thread", **kw)
        warp = simulate_stochastic_cuda(KEY, [2, 7], layout="warp", **kw)
    finally:
        device.MAX_TOKENS = old
    for name, values in thread.items():
        if values.dtype.kind == "f":
            np.testing.assert_allclose(warp[name], values, rtol=0, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(warp[name], values, err_msg=name)
    assert not thread["nonfinite"].any()


def test_auto_layout_and_unknown_layout():
    from tokensweep.kernels.stochastic.cuda import layout_for

    assert layout_for(2, 64) == "thread" and layout_for(32, 64) == "warp"
    with pytest.raises(ValueError, match="layout = 'block'"):
        simulate_stochastic_cuda(KEY, [0], layout="block", **TINY)
