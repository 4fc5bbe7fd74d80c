"""The sphere flow's starts and outcomes on the device (kernels/sphere/gpu_starts.py,
gpu_outcomes.py), on torch's CPU device: Philox bit for bit against the numpy reference, the
batched outcomes against the CPU's record functions state by state, and the device's starts
against closed forms (Wendel's hemisphere probability, the moments of the uniform sphere)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GPU path needs PyTorch (the `gpu` extra; CI "
                                            "installs the CPU wheel)")

from tokensweep.kernels import ensembles  # noqa: E402
from tokensweep.kernels.hemisphere import in_open_hemisphere  # noqa: E402
from tokensweep.kernels.lowlevel import philox  # noqa: E402
from tokensweep.kernels.outcomes import classify, gram  # noqa: E402
from tokensweep.kernels.sphere import checkpoints, gpu_starts  # noqa: E402
from tokensweep.kernels.sphere import gpu_outcomes as found  # noqa: E402
from tokensweep.kernels.sphere.flow import simulate_sphere_flow  # noqa: E402


def keys(count, seed=3):
    return gpu_starts.generator_keys([np.random.default_rng([seed, r]) for r in range(count)],
                                     0, count)


def test_philox_words_match_the_numpy_reference_bit_for_bit():
    key = keys(1)[0]
    index = np.array([0, 1, 2, 0xFFFFFFFF, 1 << 32, (1 << 40) + 7], dtype=np.uint64)
    counter = np.stack([index & np.uint64(0xFFFFFFFF), index >> np.uint64(32),
                        np.full(6, 5, np.uint64), np.full(6, 9, np.uint64)], axis=1)
    expected = philox.philox_numpy(counter, key).astype(np.int64)
    t = torch.from_numpy(index.astype(np.int64))
    words = gpu_starts.philox(t & 0xFFFFFFFF, t >> 32, torch.tensor(5), torch.tensor(9),
                              torch.tensor(int(key[0])), torch.tensor(int(key[1])))
    for k in range(4):
        np.testing.assert_array_equal(words[k].numpy(), expected[:, k])


def test_normals_match_the_numpy_reference_and_not_the_batch():
    k = keys(7)
    z = gpu_starts.normals(torch.from_numpy(k), 11, first=4).numpy()
    expected = np.stack([philox.normals_numpy(key, 0, 4, 11) for key in k])
    np.testing.assert_allclose(z, expected, rtol=0, atol=1e-14)
    part = gpu_starts.normals(torch.from_numpy(k[2:5]), 11, first=4).numpy()
    np.testing.assert_array_equal(part, z[2:5])


@pytest.mark.parametrize("init", ["uniform_sphere", "hemisphere", "equiangular"])
def test_shaped_starts_are_the_cpu_shaping_of_the_same_normals(init):
    code = ensembles.INIT_CODES[init]
    n, d = 4, 6
    x, ok = gpu_starts.starts(torch.from_numpy(keys(9)), n, d, code)
    expected = gpu_starts.starts_on_host([np.random.default_rng([3, r]) for r in range(9)], n, d,
                                         code)
    assert ok.all()
    np.testing.assert_allclose(x.numpy(), expected, rtol=0, atol=1e-14)


def test_a_zero_row_is_a_degenerate_start():
    z = torch.ones(3, 4, 5, dtype=torch.float64)
    z[1, 2] = 0.0
    assert gpu_starts.shape(z, ensembles.INIT_CODES["uniform_sphere"])[1].tolist() == [
        True, False, True]


def mixed_states(count=300, n=12, d=3, seed=8):
    """Unit states of every kind: uniform, tight and loose clusters, antipodal pairs, chains
    along a great circle (one component, small min overlap), single points."""
    rng = np.random.default_rng(seed)
    states = []
    for r in range(count):
        kind = r % 5
        if kind == 0:
            x = rng.standard_normal((n, d))
        elif kind in (1, 2):
            centres = rng.standard_normal((1 + r % 4, d))
            x = centres[rng.integers(0, len(centres), n)] + (0.02 * kind) * rng.standard_normal((n, d))
        elif kind == 3:
            c = rng.standard_normal(d)
            x = np.where(rng.random((n, 1)) < 0.5, c, -c) + 1e-3 * rng.standard_normal((n, d))
        else:
            angles = np.cumsum(rng.uniform(0.0, 0.12, n))
            x = np.zeros((n, d))
            x[:, 0], x[:, 1] = np.cos(angles), np.sin(angles)
        states.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return np.stack(states)


@pytest.mark.parametrize("eps,delta,beta", [(0.05, 0.01, 4.0), (0.3, 0.2, 0.0), (1e-3, 1e-3, 40.0),
                                            (0.1, 0.1, -3.0)])
def test_pair_statistics_class_and_energy_match_the_cpu_state_by_state(eps, delta, beta):
    x = mixed_states()
    g = torch.from_numpy(x) @ torch.from_numpy(x).transpose(1, 2)
    lo, hi, lo_abs, clusters, close = (v.numpy() for v in found.pair_statistics(g, eps, delta))
    cls = found.classify(torch.from_numpy(lo), torch.from_numpy(lo_abs), eps).numpy()
    e = found.energy(g, beta).numpy()
    counts = set()
    for r in range(len(x)):
        gr = np.empty((x.shape[1],) * 2)
        gram(x[r], gr)
        c_lo, c_hi, c_lo_abs, c_clusters, c_close = checkpoints.pair_statistics(gr, eps, delta)
        np.testing.assert_allclose([lo[r], hi[r], lo_abs[r]], [c_lo, c_hi, c_lo_abs], atol=1e-14)
        assert (clusters[r], close[r], cls[r]) == (c_clusters, c_close, classify(c_lo, c_lo_abs, eps))
        np.testing.assert_allclose(e[r], checkpoints.energy(gr, beta), rtol=1e-13, atol=1e-15)
        counts.add(int(c_clusters))
    assert len(counts) >= 4  # the states exercise the component count, not just 1 and n


def test_hemisphere_certificates_are_right_and_leave_only_hard_states_undecided():
    x = torch.from_numpy(mixed_states(n=8, d=3))
    g = x @ x.transpose(1, 2)
    memory = torch.zeros(x.shape[0], 3, dtype=torch.float64)
    inside = found.hemisphere(x, g, memory).numpy()
    truth = np.array([in_open_hemisphere(s, found.HEMISPHERE_TOL) for s in x.numpy()])
    assert set(np.unique(inside)) <= {1.0, found.UNDECIDED}
    assert truth[inside == 1.0].all()  # a certificate proves its answer
    clustered = np.arange(len(x)) % 5 == 1
    assert (inside[clustered & truth] == 1.0).mean() > 0.95  # the centroid certifies clusters
    again = found.hemisphere(x, g, memory).numpy()  # the memory certifies the same states again
    np.testing.assert_array_equal(again, inside)
    assert (memory[torch.from_numpy(inside == found.UNDECIDED)] == 0).all()


def test_device_starts_follow_wendel_and_the_uniform_moments():
    """n = 6 uniform points on S^2 lie in an open hemisphere with probability
    2^-5 (C(5,0) + C(5,1) + C(5,2)) = 1/2 (Wendel); each coordinate has mean 0 and E x_k^2 = 1/3.
    One step of h = 1e-9 moves no token measurably. Intervals: 4 standard errors."""
    count, n, d = 4000, 6, 3
    out = simulate_sphere_flow([np.random.default_rng([17, r]) for r in range(count)], n=n, d=d,
                               beta=1.0, T=1e-9, layers=1, checkpoint_layers=[1],
                               return_states=True, device=torch.device("cpu"))
    p = out["in_hemisphere"][:, 0].mean()
    assert abs(p - 0.5) < 4 * np.sqrt(0.25 / count)
    tokens = out["states"][:, 0].reshape(-1, d)  # tokens of one start are independent
    m = len(tokens)
    assert np.all(np.abs(tokens.mean(0)) < 4 * np.sqrt(1 / 3 / m))
    second = tokens ** 2  # Var x_k^2 = E x^4 - 1/9 = 1/5 - 1/9 on S^2
    assert np.all(np.abs(second.mean(0) - 1 / 3) < 4 * np.sqrt((1 / 5 - 1 / 9) / m))
