"""The device kernel's statistics against the CPU kernel's and the two-token closed form (slow).

At these sizes (thousands of trajectories) the simulator would take hours, so the statistics run
the device source compiled by numba.njit (`simulate_stochastic_cuda(..., target="cpu")`), after a
check that it gives the simulated device's numbers bit for bit. On a machine with a GPU,
benchmarks/bench_cuda.py repeats the comparison on the device itself. Levels: 99.9 % two-sided.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

pytest.importorskip("numba_cuda")

from tokensweep.kernels.stochastic.cuda import simulate_stochastic_cuda  # noqa: E402
from tokensweep.kernels.stochastic.transformer import simulate_stochastic_transformer  # noqa: E402
from tokensweep.pipeline.theory import antipodal_probability  # noqa: E402

pytestmark = pytest.mark.slow
KEY = (2026, 1127)
Z999 = 3.29  # two-sided 99.9 %


def cpu_kernel(ntraj, **kw):
    return simulate_stochastic_transformer([np.random.default_rng([7, r]) for r in range(ntraj)], **kw)


def test_host_build_equals_the_simulated_device_bit_for_bit():
    """Outcomes and every recorded observable (the hemisphere direction from the start)."""
    record = ("overlap_hist", "gram", "hemisphere_margin", "consensus_error",
              "consensus_error_abs", "energy", "states")
    for kw in (dict(n=3, d=3, attention="sa"), dict(n=2, d=5, attention="usa", noise="literal",
                                                      value_law="rademacher"),
               dict(n=2, d=3, attention="usa", noise="scalar", value_std=0.7)):
        kw.update(beta=2.0, T=2.0, layers=6, checkpoint_layers=[3, 6], record=record)
        device = simulate_stochastic_cuda(KEY, [0, 9, 4], **kw)
        host = simulate_stochastic_cuda(KEY, [0, 9, 4], target="cpu", **kw)
        for name in device:
            np.testing.assert_array_equal(device[name], host[name])


def test_two_tokens_agree_with_the_cpu_kernel_and_the_closed_form():
    """d = 4, beta = 3, T = 10, h = 0.025, 4000 trajectories each: P(antipodal) at T of the device
    and the CPU kernel within a 99.9 % two-sample interval of each other, and each within a 99.9 %
    interval of the closed form widened by the step bias at this h (docs/models.md 4.4: 0.331 at
    h = 0.05, 0.340 at h = 0.0125 against 0.341: at most 0.01 here)."""
    m = 4000
    kw = dict(n=2, d=4, beta=3.0, T=10.0, layers=400, checkpoint_layers=[200, 400])
    p_dev = np.mean(simulate_stochastic_cuda(KEY, range(m), target="cpu", **kw)["cluster_class"][:, -1] == 2)
    p_cpu = np.mean(cpu_kernel(m, **kw)["cluster_class"][:, -1] == 2)
    pooled = (p_dev + p_cpu) / 2
    assert abs(p_dev - p_cpu) < Z999 * np.sqrt(2 * pooled * (1 - pooled) / m)
    exact = antipodal_probability(3.0, 4)
    for p in (p_dev, p_cpu):
        assert abs(p - exact) < Z999 * np.sqrt(exact * (1 - exact) / m) + 0.01


@pytest.mark.parametrize("kw", [dict(attention="sa"), dict(attention="causal_sa"),
                                dict(attention="usa", noise="literal", value_law="uniform")])
def test_three_tokens_classes_agree_with_the_cpu_kernel(kw):
    """n = 3, d = 3, beta = 1.5, T = 4, h = 0.04, 2500 trajectories each: the final classes
    (unresolved / single / antipodal) and the any-pair count (overlap_min <= -1 + eps) of the
    device and the CPU kernel, chi-square two-sample test at the 0.1 % level."""
    m = 2500
    kw = dict(kw, n=3, d=3, beta=1.5, T=4.0, layers=100, checkpoint_layers=[50, 100], eps=0.05)
    dev = simulate_stochastic_cuda(KEY, range(m), target="cpu", **kw)
    cpu = cpu_kernel(m, **kw)
    table = np.array([[np.sum(out["cluster_class"][:, -1] == c) for c in (0, 1, 2)] for out in (dev, cpu)])
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-3, table
    pairs = [np.sum(out["overlap_min"][:, -1] <= -0.95) for out in (dev, cpu)]
    if sum(pairs):  # (none in either: they agree)
        assert stats.chi2_contingency([pairs, [m - pairs[0], m - pairs[1]]]).pvalue > 1e-3, pairs


@pytest.mark.parametrize("attention,sigma", [("usa", 1.2), ("sa", 0.8)])
def test_hybrid_classes_agree_with_the_cpu_kernel(attention, sigma):
    """Hybrid model, two tokens, d = 3, beta = 1, T = 10, h = 0.01, 3000 trajectories each: the
    final classes of the device build and of `kernels/hybrid.py`, chi-square at the 0.1 % level."""
    from tokensweep.kernels.hybrid import simulate_hybrid
    from tokensweep.kernels.stochastic.cuda import simulate_hybrid_cuda

    m = 3000
    kw = dict(n=2, d=3, beta=1.0, sigma=sigma, T=10.0, layers=1000, checkpoint_layers=[500, 1000],
              attention=attention)
    dev = simulate_hybrid_cuda(KEY, range(m), target="cpu", **kw)
    cpu = simulate_hybrid([np.random.default_rng([5, r]) for r in range(m)], **kw)
    table = np.array([[np.sum(out["cluster_class"][:, -1] == c) for c in (0, 1, 2)] for out in (dev, cpu)])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 2 and stats.chi2_contingency(table).pvalue > 1e-3, table
