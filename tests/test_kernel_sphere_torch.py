"""The GPU path of the sphere flow (kernels/sphere/gpu.py), run on torch's CPU device against the
numba kernel started from the same starts: the device's Philox starts, computed on the host by the
numpy reference (`philox.normals_numpy`) and shaped by the CPU's `shape_start` (a GPU machine runs
benchmarks/bench_sphere_gpu.py).

Tolerances. Both paths evaluate the same formulas in float64 but not in the same order (BLAS vs
torch products, numba's exp vs torch's): ~1e-16 apart per step. Until the tokens cluster the flow
can stretch differences (beta = 2: at most by e^{2 beta t} in theory, far less in practice);
measured: <= 3e-15 after 50 steps (T = 5, h = 0.1). We ask 1e-11 of states and overlaps, and
equal cluster classes and counts except where an overlap lies within 1e-9 of a threshold.
float32 agrees with float64 per trajectory to ~1e-6 and in its statistics within sampling error.
"""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GPU path needs PyTorch (the `gpu` extra; CI "
                                            "installs the CPU wheel)")

from tokensweep.kernels import observables  # noqa: E402
from tokensweep.kernels.ensembles import INIT_CODES  # noqa: E402
from tokensweep.kernels.sphere import gpu as sphere_torch  # noqa: E402
from tokensweep.kernels.sphere import gpu_starts  # noqa: E402
from tokensweep.kernels.sphere import symmetric as sphere_symmetric  # noqa: E402
from tokensweep.kernels.sphere.flow import SphereFlowOutcomes, simulate_sphere_flow  # noqa: E402

TORCH_CPU = torch.device("cpu")
EPS = 1e-3
BASE = dict(beta=2.0, T=5.0, layers=50, checkpoint_layers=[10, 25, 50], eps=EPS)


def rngs(count, seed=11):
    return [np.random.default_rng([seed, r]) for r in range(count)]


def both(count=12, seed=11, **kw):
    """(numba kernel, torch path on the CPU) outputs of the same trajectories: the numba
    kernel is given the device's starts."""
    kw = {**BASE, **kw}
    init = kw.pop("init", "uniform_sphere")
    x0 = gpu_starts.starts_on_host(rngs(count, seed), kw["n"], kw["d"], INIT_CODES[init])
    return (simulate_sphere_flow(rngs(count, seed), x0=x0, **kw),
            simulate_sphere_flow(rngs(count, seed), device=TORCH_CPU, init=init, **kw))


def near_threshold(out, delta=1e-3):
    """Checkpoints where an overlap extreme lies within 1e-9 of 1 - eps, -1 + eps or 1 - delta."""
    lo, hi = out["overlap_min"], out["overlap_max"]
    edges = (1 - EPS, -1 + EPS, 1 - delta)
    return np.any([np.abs(v - e) < 1e-9 for v in (lo, hi) for e in edges], axis=0)


def assert_same_outcomes(a, b, tol=1e-11):
    for name in ("overlap_min", "overlap_max", "energy"):
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=tol, err_msg=name)
    if "states" in a:
        np.testing.assert_allclose(b["states"], a["states"], rtol=0, atol=tol)
    far = ~near_threshold(a)
    for name in ("cluster_class", "n_clusters", "frac_close", "in_hemisphere"):
        np.testing.assert_array_equal(b[name][far], a[name][far], err_msg=name)
    np.testing.assert_array_equal(b["nonfinite"], a["nonfinite"])
    np.testing.assert_allclose(b["t_hit"], a["t_hit"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["sa", "usa", "causal_sa", "causal_usa"])
@pytest.mark.parametrize("value", ["identity", "minus_identity"])
@pytest.mark.parametrize("n,d", [(8, 3), (6, 20)])  # d > n: both run in the span of the start
def test_states_and_outcomes_match_the_numba_kernel(attention, value, n, d):
    a, b = both(n=n, d=d, attention=attention, value=value, return_states=True)
    assert_same_outcomes(a, b)


@pytest.mark.parametrize("options", [
    dict(attention="sa", beta=0.0, rst_scaling=True),
    dict(attention="usa", rst_scaling=True, init="hemisphere"),
    dict(attention="sa", init="equiangular", n=4, d=6),
], ids=["sa-beta0-rst", "usa-rst-hemisphere", "sa-equiangular"])
def test_options_match_the_numba_kernel(options):
    a, b = both(**{"n": 6, "d": 4, "return_states": True, **options})
    assert_same_outcomes(a, b)


def test_the_robust_normalisation_gives_the_same_states(monkeypatch):
    """Where USA's fx^2 could underflow (beta - log n > ~283 in float64) every y is divided by
    max |y_k| first: forced here at beta = 2, it must not change the result."""
    monkeypatch.setattr(sphere_torch, "UNDERFLOW_FRACTION", -np.inf)
    assert sphere_torch.needs_robust(True, 2.0, 6, 0.0, torch.float64)
    a, b = both(n=6, d=4, attention="usa", return_states=True)
    assert_same_outcomes(a, b)


def test_usa_at_beta_500_stays_finite_on_the_sphere():
    """Where fx = e^{-shift} underflows (shift ~ 498): the robust step. The effective step
    h e^{shift} is so large that the tokens jump along rounding-level increments, so the two
    paths are not compared here, only checked to stay finite and unit."""
    out = simulate_sphere_flow(rngs(8), n=6, d=4, **{**BASE, "beta": 500.0}, attention="usa",
                               return_states=True, device=TORCH_CPU)
    assert not out["nonfinite"].any() and np.isfinite(out["states"]).all()
    np.testing.assert_allclose(np.linalg.norm(out["states"], axis=-1), 1.0, atol=1e-14)


def test_recorded_observables_match_in_the_span_and_out_of_it():
    record = ("overlap_hist", "gram", "hemisphere_margin", "consensus_error", "consensus_error_abs",
              "states")
    for n, d in ((5, 12), (6, 3)):
        a, b = both(n=n, d=d, record=record)
        assert_same_outcomes(a, b)
        for name in record:
            np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-11, err_msg=name)


def test_span_basis_of_dependent_tokens():
    """CholeskyQR2 where the tokens are independent, Householder where they are not (an
    antipodal pair, a near-duplicate): orthonormal columns spanning every token."""
    x = torch.randn(4, 6, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    x[1, 3] = -x[1, 1]
    x[2, 5] = x[2, 0] + 1e-10 * x[2, 1]
    x = x / torch.linalg.vector_norm(x, dim=2, keepdim=True)
    q = sphere_torch.span_basis(x)
    eye = torch.eye(6, dtype=torch.float64)
    assert (q.transpose(1, 2) @ q - eye).abs().max() < 1e-14
    assert (x - x @ q @ q.transpose(1, 2)).abs().max() < 1e-14


def test_given_starts_with_an_antipodal_pair_match_in_the_span():
    x0 = np.random.default_rng(4).standard_normal((6, 5, 12))
    x0[:, 4] = -x0[:, 0]
    x0 /= np.linalg.norm(x0, axis=2, keepdims=True)
    kw = {**BASE, "n": 5, "d": 12, "attention": "usa", "return_states": True}
    a = simulate_sphere_flow(rngs(6), x0=x0, **kw)
    b = simulate_sphere_flow(rngs(6), x0=x0, device=TORCH_CPU, **kw)
    assert_same_outcomes(a, b)


def test_batches_and_host_threads_give_the_same_numbers():
    kw = dict(n=6, d=9, attention="usa", beta=1.0, T=3.0, layers=30, checkpoint_layers=[5, 30],
              return_states=True, eps=EPS)
    whole = simulate_sphere_flow(rngs(10), device=TORCH_CPU, **kw)
    old = sphere_torch.BATCH_ELEMENTS
    try:
        sphere_torch.BATCH_ELEMENTS = 3 * 6 * 6  # batches of 3 trajectories
        split = simulate_sphere_flow(rngs(10), device=TORCH_CPU, threads=3, **kw)
    finally:
        sphere_torch.BATCH_ELEMENTS = old
    for name in whole:
        np.testing.assert_array_equal(split[name], whole[name], err_msg=name)


def test_float32_agrees_with_float64_per_trajectory_and_in_its_statistics():
    kw = dict(n=8, d=3, beta=1.0, T=10.0, layers=100, checkpoint_layers=[50, 100], eps=EPS)
    f64 = simulate_sphere_flow(rngs(200), device=TORCH_CPU, **kw)
    f32 = simulate_sphere_flow(rngs(200), device=TORCH_CPU, precision="float32", **kw)
    assert np.abs(f32["overlap_min"] - f64["overlap_min"]).max() < 1e-4
    assert np.mean(f32["cluster_class"] == f64["cluster_class"]) > 0.95
    for name in ("overlap_min", "energy", "frac_close"):
        diff = f32[name][:, -1] - f64[name][:, -1]
        spread = f64[name][:, -1].std() / np.sqrt(len(diff))
        assert abs(diff.mean()) < 3 * spread + 1e-6, name


def test_a_state_that_turns_non_finite_stops_recording_as_on_the_cpu():
    """h = inf makes every step's increment infinite: both paths mark the trajectories
    non-finite and leave every checkpoint missing; trajectory 1's start has a zero token
    (invalid from the start)."""
    n, d, nt = 4, 3, 2
    normals = np.random.default_rng(5).standard_normal((3, n, d))
    normals[1, 2] = 0.0
    ckpt = np.array([1, 2])
    outs = []
    for run in ("numba", "torch"):
        out = observables.allocate(SphereFlowOutcomes, 3, nt, n, d)
        states = np.full((3, 0, n, d), np.nan)
        args = (np.inf, 2, ckpt, ckpt * 1.0, (1.0, False, False, 1.0, 0.0), 1e-3, EPS, out,
                states, np.empty(0))
        if run == "numba":
            sphere_symmetric.integrate_t(normals.copy(), 0, 0, *args, False)
        else:
            def starts(r0, r1, dev):  # these normals shaped on the device, no keys
                return (*gpu_starts.shape(torch.from_numpy(normals[r0:r1].copy()), 0), None)
            sphere_torch.integrate(starts, 3, n, d, *args, False, TORCH_CPU)
        outs.append(out)
    a, b = outs
    assert a.nonfinite.tolist() == b.nonfinite.tolist() == [True, True, True]
    assert np.isnan(b.overlap_min).all() and np.isnan(b.t_hit).all()
    assert (b.cluster_class == a.cluster_class).all()


def test_configurations_off_the_gpu_path_are_refused_by_argument():
    for options in (dict(attention="hardmax"), dict(layer_norm="pre"),
                    dict(value_rotation=0.5),
                    dict(qk="ginibre", period=5)):
        with pytest.raises(ValueError, match="device = .* use device = 'cpu'"):
            simulate_sphere_flow(rngs(2), n=3, d=3, **{**BASE, **options}, device=TORCH_CPU)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_fails_with_one_line():
    with pytest.raises(RuntimeError) as err:
        simulate_sphere_flow(rngs(2), n=3, d=3, **BASE, device="cuda")
    message = str(err.value)
    assert message.startswith(sphere_torch.NEEDS_CUDA + ": torch ") and "\n" not in message
    assert "set device: cpu" in message


def test_cuda_without_torch_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert sphere_torch.cuda_problem().startswith("PyTorch is not installed")
    with pytest.raises(RuntimeError, match="^device: cuda needs PyTorch .*: PyTorch is not"):
        sphere_torch.torch_device("cuda")


def test_importing_the_kernels_does_not_import_torch():
    code = ("import sys, tokensweep.kernels.sphere.flow, tokensweep.kernels.sphere.gpu; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
