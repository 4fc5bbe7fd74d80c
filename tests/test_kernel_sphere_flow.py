"""Deterministic attention flows on the sphere (kernels/sphere/flow.py, kernels/ensembles.py).

- NumPy reference: a vectorised re-implementation that consumes the same random numbers, compared
  state by state with the numba kernel (every attention, integrator, ensemble, two heads).
- Invariants: unit norms, a fixed first token under causal attention, the hemisphere barrier,
  monotone energy, permutation equivariance.
- Closed forms: equiangular overlap ODE, causal beta = 0 tanh law, Wendel's probability; the
  hemisphere certificate against an LP.
- Contract: output shapes and dtypes, non-finite handling, per-trajectory independence.
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import linprog
from scipy.special import comb

from tokensweep.kernels import ensembles as ens
from tokensweep.kernels.sphere import flow as sf
from tokensweep.kernels.sphere.flow import OUTPUTS, simulate_sphere_flow

# --------------------------------------------------------------------------------------------
# NumPy reference (same draws, same order as documented in kernels/ensembles.py)


def ref_matrix(rng, kind, d):
    s = 1.0 / np.sqrt(d)
    if kind == "wigner":
        out = np.zeros((d, d))
        for a in range(d):
            for b in range(a, d):
                out[a, b] = out[b, a] = s * rng.standard_normal()
        return out
    g = rng.standard_normal((d, d)) * s
    return {"ginibre": g, "goe": (g + g.T) / np.sqrt(2.0), "wishart": g.T @ g}[kind]


def ref_weights(rng, heads, d, qk, value):
    q, k, v = (np.array([np.eye(d)] * heads) for _ in range(3))
    for h in range(heads):
        if qk == "ginibre":
            q[h] = ref_matrix(rng, "ginibre", d)
            k[h] = ref_matrix(rng, "ginibre", d)
        elif qk != "identity":
            k[h] = ref_matrix(rng, qk, d)
        if value == "qk":
            v[h] = q[h].T @ k[h]
        elif value == "minus_identity":
            v[h] = -np.eye(d)
        elif value != "identity":
            v[h] = ref_matrix(rng, value, d)
    return q, k, v


def ref_field(x, t, beta, attention, m, v, sched, scale):
    """Ambient drift F(x) = A - <x, A> x, plain NumPy; sched(t) -> (H, d) diagonal of D(t)."""
    n = x.shape[0]
    causal = attention.startswith("causal")
    a = np.zeros_like(x)
    dt = sched(t)
    for h in range(m.shape[0]):
        p = dt[h][:, None] * m[h]
        logits = beta * (x @ p) @ x.T
        if causal:
            logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        top = logits.max(axis=1, keepdims=True)
        w = np.exp(logits - top)
        if attention.endswith("usa"):
            w = w * np.exp(top) / n
        else:
            w = w / w.sum(axis=1, keepdims=True)
        a += (w @ x) @ v[h].T
    a *= scale
    return a - np.sum(x * a, axis=1, keepdims=True) * x


def normalise(y):
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def ref_step(x, t, h, integrator, f):
    k1 = f(x, t)
    if integrator == "euler":
        return normalise(x + h * k1)
    if integrator == "heun":
        k2 = f(x + h * k1, t + h)
        return normalise(x + 0.5 * h * (k1 + k2))
    k2 = f(x + 0.5 * h * k1, t + 0.5 * h)
    k3 = f(x + 0.5 * h * k2, t + 0.5 * h)
    k4 = f(x + h * k3, t + h)
    return normalise(x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4))


def ref_states(seed, *, n, d, beta, T, layers, attention, integrator, heads, qk, value, period=0,
               time_varying=None, init="uniform_sphere", rst_scaling=False):
    """States after every step, (layers, n, d), from a fresh Generator(PCG64(seed))."""
    rng = np.random.Generator(np.random.PCG64(seed))
    x = normalise(rng.standard_normal((n, d)))
    if init == "hemisphere":
        x[:, 0] = np.abs(x[:, 0])
    q, k, v = ref_weights(rng, heads, d, qk, value)
    sched = lambda t: np.ones((heads, d))  # noqa: E731
    if time_varying is not None:
        preset = ens.TIME_VARYING[time_varying]
        q = np.array([np.eye(d)] * heads)
        k = np.array(preset["P"])
        v = np.array(preset["V"]) if preset["V"] is not None else v
        amp, om, ph = (np.array([s[i] for s in preset["schedule"]]) for i in range(3))
        sched = lambda t: amp * np.cos(om * t + ph)  # noqa: E731
    m = np.einsum("hca,hcb->hab", q, k)
    h = T / layers
    scale = 1.0 / np.sqrt(d) if rst_scaling else 1.0
    out = []
    for s in range(layers):
        if period and s and s % period == 0:
            q, k, v = ref_weights(rng, heads, d, qk, value)
            m = np.einsum("hca,hcb->hab", q, k)
        f = lambda y, t, m=m, v=v: ref_field(y, t, beta, attention, m, v, sched, scale)  # noqa: E731
        x = ref_step(x, s * h, h, integrator, f)
        out.append(x)
    return np.array(out)


def kernel_states(seed, **kw):
    layers = kw["layers"]
    o = simulate_sphere_flow([np.random.Generator(np.random.PCG64(seed))],
                             checkpoint_layers=np.arange(1, layers + 1), return_states=True, **kw)
    assert not o["nonfinite"][0]
    return o["states"][0]


# --------------------------------------------------------------------------------------------
# kernel == reference, step by step


@pytest.mark.parametrize("integrator", ["euler", "heun", "rk4"])
@pytest.mark.parametrize("attention", ["sa", "usa", "causal_sa", "causal_usa"])
def test_random_weights_match_numpy_reference(attention, integrator):
    kw = dict(n=7, d=4, beta=1.5, T=1.2, layers=12, attention=attention, integrator=integrator,
              heads=2, qk="ginibre", value="ginibre", period=5)
    np.testing.assert_allclose(kernel_states(11, **kw), ref_states(11, **kw), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "qk, value, attention, integrator, extra",
    [
        ("identity", "identity", "sa", "euler", {}),  # symmetric fast path
        ("identity", "identity", "usa", "rk4", {}),
        ("identity", "minus_identity", "causal_sa", "heun", {}),
        ("identity", "wishart", "sa", "rk4", {"rst_scaling": True}),
        ("wigner", "qk", "usa", "euler", {"period": 3}),
        ("goe", "wishart", "causal_sa", "rk4", {}),
        ("identity", "identity", "sa", "rk4", {"time_varying": "rst_two_head_hemisphere",
                                               "init": "hemisphere"}),
        ("identity", "identity", "causal_sa", "euler", {"time_varying": "rst_causal"}),
    ],
)
def test_ensembles_and_presets_match_numpy_reference(qk, value, attention, integrator, extra):
    tv = extra.get("time_varying")
    d = 3 if tv else 5
    heads = ens.TIME_VARYING[tv]["heads"] if tv else 2
    kw = dict(n=6, d=d, beta=2.0, T=0.8, layers=16, attention=attention, integrator=integrator,
              heads=heads, qk=qk, value=value, **extra)
    np.testing.assert_allclose(kernel_states(3, **kw), ref_states(3, **kw), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# invariants


def test_tokens_stay_on_the_sphere():
    st = kernel_states(5, n=9, d=3, beta=3.0, T=10.0, layers=100, attention="usa",
                       integrator="rk4", heads=2, qk="ginibre", value="goe")
    np.testing.assert_allclose(np.linalg.norm(st, axis=-1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("integrator, qk", [("euler", "ginibre"), ("rk4", "ginibre"),
                                            ("euler", "identity")])
def test_causal_first_token_is_fixed_exactly(integrator, qk):
    rng = np.random.Generator(np.random.PCG64(8))
    x0 = normalise(rng.standard_normal((6, 3)))
    st = kernel_states(8, n=6, d=3, beta=1.0, T=30.0, layers=300, attention="causal_sa",
                       integrator=integrator, heads=2, qk=qk, value="identity")
    assert np.array_equal(st[:, 0], np.broadcast_to(x0[0], st[:, 0].shape))
    if qk == "identity":  # [RST] Thm 5.1: every token converges to x_1(0)
        assert np.max(np.abs(st[-1] @ x0[0] - 1.0)) < 1e-6


@pytest.mark.parametrize("qk, time_varying, heads, h", [
    ("identity", None, 1, 0.1),
    ("ginibre", None, 1, 0.1),
    ("identity", "rst_two_head_hemisphere", 2, 0.01),
])
def test_hemisphere_min_overlap_with_e1_is_non_decreasing(qk, time_varying, heads, h):
    # proof for Euler: the step is monotone for h * max_i <x_i, A_i> <= 1 (|A| <= heads for SA)
    layers = 300
    st = kernel_states(2, n=10, d=3, beta=2.0, T=h * layers, layers=layers, attention="sa",
                       heads=heads, qk=qk, init="hemisphere", time_varying=time_varying)
    w = st[..., 0].min(axis=1)
    assert np.all(np.diff(w) >= -1e-15)
    assert w[-1] > w[0]


def test_usa_energy_is_non_decreasing_for_small_steps():
    o = simulate_sphere_flow([np.random.default_rng(s) for s in range(4)], n=8, d=3, beta=1.0,
                             T=10.0, layers=1000, checkpoint_layers=np.arange(1, 1001),
                             attention="usa")
    assert np.all(np.diff(o["energy"], axis=1) >= -1e-13)
    np.testing.assert_allclose(o["energy"][:, -1], np.e / 2, rtol=1e-9)  # one cluster: e^beta/(2 beta)


def test_permutation_equivariance_non_causal():
    n, d, heads = 7, 4, 2
    rng = np.random.default_rng(0)
    x = normalise(rng.standard_normal((n, d)))
    m = rng.standard_normal((heads, d, d)) / np.sqrt(d)
    v = rng.standard_normal((heads, d, d)) / np.sqrt(d)
    zeros = np.zeros((heads, d))
    perm = rng.permutation(n)
    for kind in (sf.SA, sf.USA):
        for integrator in (sf.EULER, sf.RK4):
            par = (1.7, kind, False, False, sf.V_GENERAL, sf.TV_NONE, 0.0, 0.0, 0.0)
            xs = [x.copy(), x[perm].copy()]
            for y in xs:
                for s in range(20):
                    assert sf.step(y, 0.1 * s, 0.1, integrator, par, (m, v, zeros, zeros, zeros),
                                   sf.workspace(n, d, heads, np.empty(0)), np.empty((5, n, d)),
                                   np.empty(n))
            np.testing.assert_allclose(xs[0][perm], xs[1], rtol=0, atol=1e-13)


# --------------------------------------------------------------------------------------------
# closed forms


@pytest.mark.parametrize("attention", ["sa", "usa"])
def test_equiangular_start_tracks_gamma(attention):
    n, beta, T = 6, 1.5, 4.0
    if attention == "sa":
        rhs = lambda t, g: 2 * (1 - g) * ((n - 1) * g + 1) / (np.exp(beta * (1 - g)) + n - 1)  # noqa
    else:
        rhs = lambda t, g: (2 / n) * np.exp(beta * g) * (1 - g) * ((n - 1) * g + 1)  # noqa
    ckpt = np.arange(20, 401, 20)
    t = T / 400 * ckpt
    gamma = solve_ivp(rhs, (0, T), [0.0], t_eval=t, rtol=1e-12, atol=1e-14, method="DOP853").y[0]
    o = simulate_sphere_flow([np.random.default_rng(1)], n=n, d=9, beta=beta, T=T, layers=400,
                             checkpoint_layers=ckpt, attention=attention, integrator="rk4",
                             init="equiangular")
    assert np.max(np.abs(o["overlap_min"][0] - gamma)) < 1e-6
    assert np.max(np.abs(o["overlap_max"][0] - gamma)) < 1e-6


def test_causal_beta_zero_tanh_law():
    st = kernel_states(4, n=2, d=3, beta=0.0, T=5.0, layers=500, attention="causal_sa",
                       integrator="rk4")
    rng = np.random.Generator(np.random.PCG64(4))
    x0 = normalise(rng.standard_normal((2, 3)))
    t = 0.01 * np.arange(1, 501)
    expected = np.tanh(np.arctanh(x0[0] @ x0[1]) + t / 2)
    np.testing.assert_allclose(st[:, 1] @ x0[0], expected, rtol=0, atol=1e-9)


def lp_in_hemisphere(x):
    """Max margin s of <w, x_i> >= s over |w|_inf <= 1; in an open hemisphere iff s > 0."""
    n, d = x.shape
    c = np.zeros(d + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-x, np.ones((n, 1))])
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(n), bounds=[(-1, 1)] * d + [(None, 1)],
                  method="highs")
    assert res.status == 0
    return -res.fun


def test_hemisphere_certificate_agrees_with_lp():
    rng = np.random.default_rng(2024)
    checked = 0
    for n, d in [(3, 2), (5, 2), (6, 3), (9, 4), (20, 8), (40, 16), (64, 32)]:
        for _ in range(40):
            x = normalise(rng.standard_normal((n, d)))
            margin = lp_in_hemisphere(x)
            if 0 < margin < 1e-7:  # borderline for the LP's own tolerance: skip
                continue
            assert ens.in_open_hemisphere(x, 1e-9) == (margin > 0), (n, d, margin)
            checked += 1
    assert checked > 250
    # edge cases: a cluster, an exactly antipodal pair, a point set surrounding 0 in the plane
    e = np.eye(3)
    assert ens.in_open_hemisphere(np.array([e[0], e[0], normalise(e[:1] + 1e-3 * e[1:2])[0]]), 1e-9)
    assert not ens.in_open_hemisphere(np.array([e[0], -e[0], e[1]]), 1e-9)
    assert not ens.in_open_hemisphere(np.array([e[0], e[1], -normalise(e[:1] + e[1:2])[0]]), 1e-9)


@pytest.mark.parametrize("n, d", [(5, 2), (6, 3), (10, 4)])
def test_wendel_probability(n, d):
    # 4000 uniform starts, fixed seed; tolerance 4 binomial standard errors (<= 0.032)
    wendel = sum(comb(n - 1, k) for k in range(d)) / 2 ** (n - 1)
    rng = np.random.default_rng(77)
    hits = sum(ens.in_open_hemisphere(normalise(rng.standard_normal((n, d))), 1e-9)
               for _ in range(4000))
    assert abs(hits / 4000 - wendel) < 4 * np.sqrt(wendel * (1 - wendel) / 4000)


# --------------------------------------------------------------------------------------------
# contract


def test_outputs_shapes_dtypes_and_independence():
    kw = dict(n=5, d=3, beta=1.0, T=20.0, layers=200, checkpoint_layers=np.array([10, 100, 200]),
              qk="ginibre", value="wishart", period=50)
    seeds = [np.random.SeedSequence(9, spawn_key=(i,)) for i in range(3)]
    o = simulate_sphere_flow([np.random.Generator(np.random.PCG64(s)) for s in seeds], **kw)
    assert set(o) == set(OUTPUTS)
    for name, spec in OUTPUTS.items():
        assert o[name].dtype == np.dtype(spec.dtype)
        assert o[name].shape == ((3, 3) if spec.per_checkpoint else (3,))
    alone = simulate_sphere_flow([np.random.Generator(np.random.PCG64(seeds[2]))], **kw)
    for name in OUTPUTS:
        np.testing.assert_array_equal(o[name][2], alone[name][0])


def test_overflow_is_reported_not_raised():
    # USA at beta = 1e3: Euler keeps the scale e^{beta} on the safe side, RK4 overflows
    kw = dict(n=6, d=3, beta=1e3, T=1.0, layers=10, checkpoint_layers=np.array([5, 10]),
              attention="usa")
    ok = simulate_sphere_flow([np.random.default_rng(0)], **kw)
    assert not ok["nonfinite"][0] and np.isfinite(ok["overlap_min"]).all()
    bad = simulate_sphere_flow([np.random.default_rng(0)], integrator="rk4", **kw)
    assert bad["nonfinite"][0]
    assert np.isnan(bad["overlap_min"]).all() and (bad["cluster_class"] == 0).all()
    assert np.isnan(bad["t_hit"][0]) and not bad["in_hemisphere"].any()


def test_bad_arguments_are_refused_by_name():
    kw = dict(n=4, d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[10])
    rngs = [np.random.default_rng(0)]
    with pytest.raises(ValueError, match="integrator = 'rk5'"):
        simulate_sphere_flow(rngs, integrator="rk5", **kw)
    with pytest.raises(ValueError, match="qk = 'gue'"):
        simulate_sphere_flow(rngs, qk="gue", **kw)
    with pytest.raises(ValueError, match="equiangular"):
        simulate_sphere_flow(rngs, **{**kw, "n": 5}, init="equiangular")
    with pytest.raises(ValueError, match=r"matrices\['V'\] has shape"):
        simulate_sphere_flow(rngs, matrices={"V": np.eye(2)}, **kw)
    with pytest.raises(ValueError, match="needs heads = 2"):
        simulate_sphere_flow(rngs, time_varying="rst_two_head_hemisphere", **kw)


# --------------------------------------------------------------------------------------------
# fast paths: the symmetric path, the span reduction, float32, threads, the hemisphere memory

SYMMETRIC_CASES = [  # (attention, value, extra): Q = K = I, one head, Euler
    ("sa", "identity", dict(n=7, d=4, beta=1.5)),
    ("usa", "identity", dict(n=7, d=4, beta=2.0)),
    ("causal_sa", "identity", dict(n=6, d=3, beta=1.0)),
    ("causal_usa", "minus_identity", dict(n=6, d=3, beta=1.0)),
    ("sa", "minus_identity", dict(n=9, d=9, beta=0.0)),
    ("sa", "identity", dict(n=32, d=2, beta=9.0)),
    ("usa", "identity", dict(n=5, d=3, beta=400.0)),  # the clamped exponential
    ("sa", "identity", dict(n=8, d=5, beta=2.0, rst_scaling=True)),
    ("usa", "identity", dict(n=8, d=5, beta=2.0, rst_scaling=True, init="hemisphere")),
]


def run_flow(seeds, **kw):
    return simulate_sphere_flow([np.random.default_rng(s) for s in seeds], **kw)


@pytest.mark.parametrize("attention, value, extra", SYMMETRIC_CASES)
def test_symmetric_path_is_the_general_euler_step(attention, value, extra, monkeypatch):
    # sphere_symmetric: the formulas of sphere_drift.euler_step (d <= n: no span reduction).
    # Bit for bit where OpenBLAS sums both layouts' products in one order (seen on Intel CPUs);
    # on others (AMD EPYC) some shapes' products differ by an ulp, so floats are held to a few
    # ulp per step over the 30 steps (rtol 1e-13; |x| <= 1: atol 1e-14), counts and classes exactly
    assert extra["d"] <= extra["n"]
    kw = dict(T=3.0, layers=30, checkpoint_layers=np.arange(3, 31, 3), attention=attention,
              value=value, return_states=True, **extra)
    fast = run_flow(range(5), **kw)
    monkeypatch.setattr(sf.symmetric, "applies", lambda *args: False)
    general = run_flow(range(5), **kw)
    for name in fast:
        if np.asarray(fast[name]).dtype.kind == "f":
            np.testing.assert_allclose(fast[name], general[name], rtol=1e-13, atol=1e-14,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(fast[name], general[name], err_msg=name)


def test_span_reduction_agrees_with_the_full_dimension(monkeypatch):
    # d > n: integrated in an n-dimensional orthonormal basis of the start's span (an isometry)
    kw = dict(n=6, d=20, beta=2.0, T=10.0, layers=100, checkpoint_layers=np.arange(10, 101, 10),
              return_states=True)
    reduced = run_flow(range(4), **kw)
    monkeypatch.setattr(sf.symmetric, "SPAN_REDUCTION", False)
    full = run_flow(range(4), **kw)
    np.testing.assert_allclose(reduced["states"], full["states"], rtol=0, atol=1e-12)
    for name in ("overlap_min", "overlap_max", "energy", "frac_close"):
        np.testing.assert_allclose(reduced[name], full[name], rtol=0, atol=1e-12, err_msg=name)
    for name in ("n_clusters", "cluster_class", "in_hemisphere", "nonfinite"):
        np.testing.assert_array_equal(reduced[name], full[name], err_msg=name)


# float32 is a second compilation of every kernel (~14 s for the symmetric path, ~30 s for the
# general one on a cold cache) for these tests alone: the float32 checks are in the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("kw", [
    dict(d=2, beta=4.0), dict(d=8, beta=9.0), dict(d=32, beta=1.0),  # symmetric path
    dict(d=48, beta=4.0),  # span reduction
    dict(d=16, beta=2.0, qk="ginibre", value="ginibre"),
    dict(d=3, beta=1.0, integrator="rk4", heads=2),
])
def test_float32_statistics_agree_with_float64(kw):
    # catalog-like (n = 32, h = 0.1, T = 30, a checkpoint every 0.5), 32 trajectories from the same
    # starts. These flows contract: measured, the float32 means equal the float64 ones (cluster
    # counts per trajectory too, but for 1 in 2000 at d = 32, beta = 9); tolerances: a few
    # trajectories of 32 changing their class
    full = dict(n=32, T=30.0, layers=300, checkpoint_layers=np.arange(5, 301, 5), **kw)
    a = run_flow(range(100, 132), **full)
    b = run_flow(range(100, 132), precision="float32", **full)
    assert not b["nonfinite"].any()
    assert np.max(np.abs(a["frac_close"].mean(0) - b["frac_close"].mean(0))) <= 0.03
    assert np.max(np.abs(a["n_clusters"].mean(0) - b["n_clusters"].mean(0))) <= 0.1
    assert np.max(np.abs(a["in_hemisphere"].mean(0) - b["in_hemisphere"].mean(0))) <= 2 / 32
    assert np.max(np.abs(a["overlap_max"] - b["overlap_max"])) < 1e-3


@pytest.mark.parametrize("kw", [
    dict(n=32, d=32),  # symmetric path
    dict(n=8, d=5, qk="ginibre", value="wishart", period=7),  # one call per trajectory
    dict(n=8, d=5, integrator="rk4", heads=2),  # blocks from the starts' normals
    dict(n=16, d=24),  # span reduction
    pytest.param(dict(n=16, d=24, precision="float32"), marks=pytest.mark.slow),  # (float32: above)
])
def test_threads_give_bitwise_the_same_results(kw):
    full = dict(beta=1.0, T=3.0, layers=30, checkpoint_layers=[10, 30], return_states=True, **kw)
    one = run_flow(range(37), **full)
    for threads in (2, 3):
        more = run_flow(range(37), threads=threads, **full)
        for name in one:
            np.testing.assert_array_equal(one[name], more[name], err_msg=f"{name}, {threads}")


def test_hemisphere_memory_gives_the_cold_answer():
    # along trajectories (nearby point sets, in and out of hemispheres), the test with the last
    # certificate and the last corral as start answers as a cold start
    from tokensweep.kernels.hemisphere import hemisphere_test

    checked = 0
    for n, d, beta in [(12, 2, 4.0), (32, 2, 9.0), (20, 3, 1.0), (32, 8, 4.0), (8, 16, 1.0)]:
        o = run_flow(range(3), n=n, d=d, beta=beta, T=8.0, layers=80,
                     checkpoint_layers=np.arange(1, 81), return_states=True)
        for traj in o["states"]:
            w, corral = np.zeros(d), np.zeros(d + 3, dtype=np.int64)
            for x in traj:
                assert hemisphere_test(x, 1e-9, w, corral) == ens.in_open_hemisphere(x, 1e-9)
                checked += 1
    assert checked == 5 * 3 * 80


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gram_blocks_are_the_full_product(dtype):
    # kernels/lowlevel/gemm.py: the Gram's upper blocks by BLAS on sub-blocks against the full np.dot.
    # Bit for bit where OpenBLAS accumulates every entry as one fma chain over k whatever the
    # block (Intel CPUs; float64 on AMD EPYC too); elsewhere (float32 on AMD EPYC) within the
    # error bound of two evaluations of a d-term dot product: 2 d eps sum_k |x_ki| |x_kj|
    from numba import njit

    from tokensweep.kernels.lowlevel.gemm import BLOCK, gram_upper

    @njit
    def full(xt, g):
        np.dot(xt.T, xt, g)

    rng = np.random.default_rng(11)
    for n, d in [(1, 1), (2, 3), (7, 2), (8, 8), (9, 4), (16, 33), (31, 5), (32, 32), (33, 128),
                 (64, 7), (100, 3)]:
        xt = rng.standard_normal((d, n)).astype(dtype)
        blocks, ref = np.full((n, n), np.nan, dtype), np.empty((n, n), dtype)
        gram_upper(xt, blocks)
        full(xt, ref)
        for r in range(n):
            c0 = r - r % BLOCK
            bound = 2 * d * np.finfo(dtype).eps * (np.abs(xt[:, r]) @ np.abs(xt[:, c0:]))
            assert (np.abs(blocks[r, c0:] - ref[r, c0:]) <= bound).all(), (n, d, r)
            assert np.isnan(blocks[r, :c0]).all()  # below the blocks: not written


def test_scratch_arrays_start_on_a_cache_line():
    # kernels/lowlevel/aligned.py: whatever the allocator returns, each array starts a 64-byte
    # line, C-contiguous, of the prototype's dtype, and owns its entries (no two share memory)
    from numba import njit

    from tokensweep.kernels.lowlevel.aligned import empty_lines

    @njit
    def many(rows, cols, proto, count):
        out = []
        for _ in range(count):
            out.append(empty_lines(rows, cols, proto))
        return out

    for proto in (np.empty(1), np.empty(1, np.float32)):
        for rows, cols in [(1, 1), (3, 5), (33, 32), (8, 7)]:
            arrays = many(rows, cols, proto, 16)
            for a in arrays:
                assert a.shape == (rows, cols) and a.dtype == proto.dtype and a.flags.c_contiguous
                assert a.ctypes.data % 64 == 0
            for i, a in enumerate(arrays):
                a[...] = i
            assert [int(a[-1, -1]) for a in arrays] == list(range(16))


def test_vectorised_exponentials():
    from numba import njit

    from tokensweep.kernels.lowlevel import vecmath

    @njit
    def apply(x):
        out = np.empty((3, x.shape[0]))
        for i in range(x.shape[0]):
            out[0, i] = vecmath.exp_vec(x[i])
            out[1, i] = vecmath.exp_unclamped(x[i])
            out[2, i] = vecmath.exp32_vec(np.float32(max(-87.0, min(88.0, x[i]))))
        return out

    x = np.random.default_rng(5).uniform(-708, 708, 200_000)
    out = apply(x)
    np.testing.assert_array_equal(out[0], out[1])  # no clamp acts inside [-708, 708]
    np.testing.assert_allclose(out[0], np.exp(x), rtol=2.3e-16, atol=0)
    x32 = np.clip(x, -87, 88).astype(np.float32)
    np.testing.assert_allclose(out[2], np.exp(x32.astype(np.float64)), rtol=2.5e-7, atol=0)


def test_precision_and_threads_are_checked_by_name():
    kw = dict(n=4, d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[10])
    with pytest.raises(ValueError, match="precision = 'float16'"):
        run_flow([0], precision="float16", **kw)
    with pytest.raises(ValueError, match="threads = 0"):
        run_flow([0], threads=0, **kw)
