"""Observables over time (kernels/observables.py, `record=`), in the kernels of the sphere models.

- NumPy reference: every observable recomputed from the states the same run returns (same random
  numbers), on each kernel path (stochastic: pair and general path, early stopping; hybrid; sphere
  flow: symmetric path with and without the span reduction and in float32, general path in
  float64 and (slow tier: its own ~30 s compilation) float32).
- Recording changes nothing else: the default outputs are the same bits with and without it.
- Law: the overlap histogram of uniform starts against Beta((d-1)/2, (d-1)/2) mapped to [-1, 1]
  (chi-square).
- Invariants: energy non-decreasing along SA flows with V = I (small h), hemisphere_margin
  non-decreasing from a start in a hemisphere with V = I (exact for the retraction Euler step).
"""

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize

from tokensweep.kernels import observables
from tokensweep.kernels.hybrid import simulate_hybrid_states
from tokensweep.kernels.sphere.flow import simulate_sphere_flow
from tokensweep.kernels.stochastic.transformer import simulate_stochastic_states
from tokensweep.kernels.vocabulary import RECORD_NAMES

ALL = tuple(name for name in RECORD_NAMES)
BINS = 16


def rngs(k, seed=0):
    return [np.random.default_rng([seed, r]) for r in range(k)]


def run(path, record=ALL, bins=BINS, direction=None, seed=0):
    """(outputs, states) of one kernel path; states (ntraj, nt, n, d)."""
    kw = dict(record=record, record_bins=bins, direction=direction)
    ck = np.array([5, 10, 20, 40])
    if path == "stochastic_pair":
        st, out = simulate_stochastic_states(rngs(6, seed), n=2, d=3, beta=1.0, T=2.0, layers=40,
                                             checkpoint_layers=ck, **kw)
    elif path == "stochastic_general":
        st, out = simulate_stochastic_states(rngs(6, seed), n=5, d=4, beta=1.5, T=2.0, layers=40,
                                             checkpoint_layers=ck, noise="literal", **kw)
    elif path == "stochastic_early_stop":
        st, out = simulate_stochastic_states(rngs(6, seed), n=3, d=3, beta=4.0, T=20.0, layers=40,
                                             checkpoint_layers=ck, stop_when_resolved=True,
                                             eps=0.2, **kw)
    elif path == "hybrid":
        st, out = simulate_hybrid_states(rngs(6, seed), n=4, d=3, beta=1.0, sigma=0.7, T=2.0,
                                         layers=40, checkpoint_layers=ck, **kw)
    else:
        options = {"symmetric_span": dict(n=4, d=7), "symmetric": dict(n=6, d=3),
                   "general_rk4": dict(n=5, d=3, integrator="rk4", qk="goe"),
                   "symmetric_float32": dict(n=6, d=3, precision="float32"),
                   "general_float32": dict(n=5, d=3, value="goe", precision="float32")}[path]
        out = simulate_sphere_flow(rngs(6, seed), beta=1.0, T=2.0, layers=40, checkpoint_layers=ck,
                                   return_states=True, **options, **kw)
        st = out["states"]
    return out, st


PATHS = ("stochastic_pair", "stochastic_general", "stochastic_early_stop", "hybrid",
         "symmetric_span", "symmetric", "general_rk4",
         # float32 compiles every kernel a second time (~14 s symmetric, ~30 s general, cold), for
         # no other quick test (test_kernel_sphere_flow's float32 checks are in the slow tier too)
         pytest.param("symmetric_float32", marks=pytest.mark.slow),
         pytest.param("general_float32", marks=pytest.mark.slow))


def numpy_histogram(g, bins):
    """Counts of g[i, j], i < j, over equal bins of [-1, 1] (the right end, and rounding outside,
    in the end bins)."""
    iu = np.triu_indices(g.shape[-1], 1)
    k = np.clip(np.floor((g[iu] + 1.0) / 2.0 * bins).astype(int), 0, bins - 1)
    return np.bincount(k, minlength=bins)


@pytest.mark.parametrize("path", PATHS)
def test_observables_match_numpy_from_the_states(path):
    direction = np.array([1.0, -2.0, 0.5]) if path in ("hybrid", "symmetric") else None
    out, st = run(path, direction=direction)
    ntraj, nt, n, d = st.shape
    assert out["states"] is st or np.array_equal(out["states"], st, equal_nan=True)
    g = np.einsum("rcik,rcjk->rcij", st, st)
    np.testing.assert_allclose(out["gram"], g, rtol=0, atol=1e-13)
    for r in range(ntraj):
        for c in range(nt):
            assert out["overlap_hist"][r, c].sum() == n * (n - 1) // 2
            # the kernel's own Gram, binned by NumPy: the same counts exactly
            np.testing.assert_array_equal(out["overlap_hist"][r, c],
                                          numpy_histogram(out["gram"][r, c], BINS))
            np.testing.assert_array_equal(out["overlap_hist"][r, c], numpy_histogram(g[r, c], BINS))
    np.testing.assert_allclose(out["consensus_error"], 1 - g[..., 0, :].mean(-1), atol=1e-13)
    np.testing.assert_allclose(out["consensus_error_abs"], 1 - np.abs(g[..., 0, :]).mean(-1),
                               atol=1e-13)
    beta = 1.5 if path == "stochastic_general" else 4.0 if path == "stochastic_early_stop" else 1.0
    energy = np.exp(beta * g).sum((-1, -2)) / (2 * beta * n * n)
    np.testing.assert_allclose(out["energy"], energy, rtol=1e-12)
    for r in range(ntraj):
        if direction is not None:
            v, tol = direction / np.linalg.norm(direction), 1e-13
        else:  # the start: n*d normals of the trajectory's stream, rows normalised (all paths)
            x0 = np.random.default_rng([0, r]).standard_normal((n, d))
            v, tol = start_direction(x0 / np.linalg.norm(x0, axis=1, keepdims=True)), 1e-6
        np.testing.assert_allclose(out["hemisphere_margin"][r], (st[r] @ v).min(-1), atol=tol)


@pytest.mark.parametrize("path", PATHS)
def test_recording_leaves_the_default_outputs_bit_identical(path):
    plain, _ = run(path, record=())
    recorded, _ = run(path)
    for name, value in plain.items():
        if name != "states":
            assert np.array_equal(value, recorded[name], equal_nan=True), (path, name)
    assert set(recorded) == set(plain) | set(ALL)


def max_margin_direction(x):
    """p/|p| for p the point of conv{x_i} nearest 0, by SLSQP over the simplex (NumPy/SciPy)."""
    n = x.shape[0]
    res = minimize(lambda lam: np.sum((lam @ x) ** 2), np.full(n, 1.0 / n),
                   jac=lambda lam: 2 * x @ (lam @ x), bounds=[(0, 1)] * n, method="SLSQP",
                   constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    p = res.x @ x
    return p / np.linalg.norm(p)


def start_direction(x):
    """The documented direction of a start: max-margin where it lies in an open hemisphere, else
    its normalised mean."""
    v = max_margin_direction(x)
    if (x @ v).min() > 1e-6:
        return v
    return x.sum(0) / np.linalg.norm(x.sum(0))


def test_initial_direction_is_the_max_margin_direction_of_the_start():
    rng = np.random.default_rng(5)
    n, d, ntraj = 6, 4, 8
    x0 = rng.standard_normal((ntraj, n, d))
    x0[..., 0] = np.abs(x0[..., 0]) + 0.05  # in the open hemisphere of e_1
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    st, out = simulate_stochastic_states(rngs(ntraj), n=n, d=d, beta=1.0, T=1.0, layers=20,
                                         checkpoint_layers=[10, 20], x0=x0,
                                         record=("hemisphere_margin",))
    for r in range(ntraj):
        v = max_margin_direction(x0[r])
        # v maximises the start's margin: no unit vector does better (here: e_1 and the mean)
        assert (x0[r] @ v).min() >= (x0[r] @ np.eye(d)[0]).min() - 1e-9
        np.testing.assert_allclose(out["hemisphere_margin"][r], (st[r] @ v).min(-1), atol=1e-6)


def test_direction_of_a_start_in_no_hemisphere_is_its_normalised_mean():
    x = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.6, 0.8]])
    v = np.empty(2)
    observables.start_direction(x, v)
    np.testing.assert_allclose(v, [0.6, 0.8], atol=1e-15)


@pytest.mark.parametrize("n, d", [(2, 3), (2, 6), (4, 4)])
def test_overlap_histogram_of_uniform_starts_follows_the_beta_law(n, d):
    # T = 1e-9: one Euler step of size 1e-9 (|dx_i| <= h for SA, V = I, so an overlap moves by
    # at most 2e-9): the first checkpoint is the uniform start up to pairs within 2e-9 of a bin
    # edge (expected count < 1e-4 here). Overlaps of distinct pairs of i.i.d. uniform tokens are
    # pairwise independent, so the counts have the multinomial covariance and Pearson's
    # statistic its chi-square law; bins = 20, merged from the ends until each expects >= 20.
    ntraj, bins = 4000, 20
    out = simulate_sphere_flow(rngs(ntraj, seed=n * 100 + d), n=n, d=d, beta=1.0, T=1e-9, layers=1,
                               checkpoint_layers=[1], record=("overlap_hist",), record_bins=bins)
    counts = out["overlap_hist"][:, 0].sum(0)
    a = (d - 1) / 2
    edges = np.linspace(-1, 1, bins + 1)
    expected = np.diff(stats.beta.cdf((edges + 1) / 2, a, a)) * counts.sum()
    obs, exp = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(counts, expected):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 20:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    obs[-1] += acc_o
    exp[-1] += acc_e
    p = stats.chisquare(obs, exp).pvalue
    assert p > 1e-3, (p, counts, expected.round(1))  # a false alarm once in 1000 seeds


@pytest.mark.parametrize("options", [dict(), dict(integrator="heun", n=6, d=3)])
def test_energy_is_non_decreasing_along_sa_flows_with_v_identity(options):
    # [GLPR-P] (3.6): dE/dt = sum_i |X_i|^2 Z_i / n >= 0 along SA with V = I; an Euler step may
    # break it by O(h^2) per step, so h = 1e-3 (the tolerance is rounding only)
    kw = dict(n=8, d=4, beta=2.0, T=4.0, layers=4000, checkpoint_layers=np.arange(1, 201) * 20)
    kw.update(options)
    out = simulate_sphere_flow(rngs(4), attention="sa", **kw)
    energy = out["energy"]
    assert np.all(np.diff(energy, axis=1) >= -1e-13 * energy[:, 1:])
    assert np.all(energy[:, -1] > energy[:, 0])


@pytest.mark.parametrize("direction", [None, (1.0, 0.0, 0.0)])
def test_hemisphere_margin_is_non_decreasing_from_a_hemisphere_with_v_identity(direction):
    # retraction Euler: x' = N((1 - h a) x + h A) with a = <x, A>, |A| <= 1 (SA), so for the token
    # of least margin m >= 0 and every other, <x', v> >= m (1 + h (1 - a)) / (1 + h (1 - a)) = m:
    # exact monotonicity, up to rounding
    out = simulate_sphere_flow(rngs(8), n=10, d=3, beta=2.0, T=20.0, layers=400,
                               checkpoint_layers=np.arange(1, 401), attention="sa",
                               init="hemisphere", record=("hemisphere_margin",),
                               direction=direction)
    margin = out["hemisphere_margin"]
    assert np.all(margin[:, 0] > 0)
    assert np.all(np.diff(margin, axis=1) >= -1e-15)
    assert np.all(margin[:, -1] > margin[:, 0])


def test_bad_requests_name_the_argument():
    with pytest.raises(ValueError, match="record = .* unknown names"):
        run("hybrid", record=("gramm",))
    with pytest.raises(ValueError, match="record_bins"):
        run("hybrid", bins=0)
    with pytest.raises(ValueError, match="direction"):
        run("hybrid", direction=(0.0, 0.0, 0.0))
