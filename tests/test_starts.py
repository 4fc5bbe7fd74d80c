"""Initial conditions (`init`): each kind against its law, the stream they are drawn from, the
spec checks (exit 2, one line), file provenance, and P(antipodal | rho0) of the stochastic
transformer against the conditional closed form.

Law tests are Kolmogorov-Smirnov tests at level 1e-3 on a fixed seed (deterministic); each
also has a wrong law it must reject, so it has power.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import yaml
from scipy import stats

from tokensweep.kernels.starts import draw_start, draw_starts
from tokensweep.pipeline.analysis.stats import wilson_interval
from tokensweep.pipeline.errors import SpecError, StoreError
from tokensweep.pipeline.execute import pending_partitions, run_partition, simulate_partition
from tokensweep.pipeline.models import get_model
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.load import load_sweep, parse_sweep
from tokensweep.pipeline.spec.starts import load_file, starts_of
from tokensweep.pipeline.store.compat import growth
from tokensweep.pipeline.store.cube import stored_sweep
from tokensweep.pipeline.store.lifecycle import prepare_store
from tokensweep.pipeline.theory import antipodal_probability, antipodal_probability_given_overlap

KS_LEVEL = 1e-3
TIME = {"T": 1.0, "layers": 10}


def rngs(count, seed=1):
    return [np.random.default_rng([seed, r]) for r in range(count)]


def spec(model="stochastic_transformer", **fields):
    grid = {"beta": 1.0, "d": 4, "n": 2}
    grid.update(fields.pop("grid", {}))
    if model == "hybrid":
        grid.setdefault("sigma", 1.0)
    return parse_sweep({"name": "s", "model": model, "grid": grid, "time": TIME, "trajectories": 4,
                        **fields})


# -- each kind against its law --------------------------------------------------------------------

@pytest.mark.parametrize("d", [3, 6])
def test_hemisphere_is_uniform_on_the_open_half_sphere(d):
    """<x, v> > 0 for every token, and <x, v>^2 ~ Beta(1/2, (d-1)/2), the law of a squared
    coordinate of a uniform point (the reflection keeps |<x, v>|)."""
    v = np.arange(1.0, d + 1)
    x = draw_starts(rngs(400), "hemisphere", 5, d, v=v).reshape(-1, d)
    t = x @ (v / np.linalg.norm(v))
    assert (t > 0).all()
    assert np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-14)
    assert stats.kstest(t**2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > KS_LEVEL
    assert stats.kstest(t**2, stats.beta(1.0, (d - 1) / 2).cdf).pvalue < KS_LEVEL  # power


def test_hemisphere_random_v_is_drawn_first_and_uniform():
    """v random: d normals first (normalised), then the tokens; the v's are uniform directions."""
    d = 4
    starts = draw_starts(rngs(500), "hemisphere", 3, d, v="random")
    vs = np.array([g.standard_normal(d) for g in rngs(500)])
    vs /= np.linalg.norm(vs, axis=1, keepdims=True)
    assert (np.einsum("rnd,rd->rn", starts, vs) > 0).all()
    assert stats.kstest(vs[:, 0] ** 2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > KS_LEVEL


def test_hemisphere_about_e1_is_the_sphere_flows_old_start_bit_for_bit():
    from tokensweep.kernels.ensembles import HEMISPHERE
    from tokensweep.kernels.ensembles import draw_start as kernel_draw

    for g, h in zip(rngs(20), rngs(20)):
        x = np.empty((7, 3))
        kernel_draw(g, HEMISPHERE, x)
        assert np.array_equal(x, draw_start(h, "hemisphere", 7, 3, v="e1"))


@pytest.mark.parametrize("rho0", [-0.9, 0.0, 0.7])
def test_overlap_pair_has_the_overlap_and_a_uniform_orientation(rho0):
    """<x1, x2> = rho0 to 1e-12; the pair's law is rotation invariant: x1 and the mean direction
    (x1 + x2)/|x1 + x2| are each uniform (a squared coordinate ~ Beta(1/2, (d-1)/2))."""
    d = 5
    x = draw_starts(rngs(1000, seed=2), "overlap", 2, d, rho0=rho0)
    assert np.abs(np.einsum("rd,rd->r", x[:, 0], x[:, 1]) - rho0).max() < 1e-12
    assert np.abs(np.linalg.norm(x, axis=2) - 1).max() < 1e-12
    mean = x.sum(axis=1)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    law = stats.beta(0.5, (d - 1) / 2).cdf
    for direction in (x[:, 0], x[:, 1], mean):
        assert stats.kstest(direction[:, 2] ** 2, law).pvalue > KS_LEVEL
    # power: a pair built around a fixed axis is not isotropic
    assert stats.kstest(np.full(1000, 1.0), law).pvalue < KS_LEVEL


def test_equiangular_start_is_an_orthonormal_frame():
    x = draw_starts(rngs(50), "equiangular", 4, 6)
    gram = np.einsum("rid,rjd->rij", x, x)
    assert np.abs(gram - np.eye(4)).max() < 1e-12


@pytest.mark.parametrize("normalise", [False, True])
def test_box_start_within_bounds_and_uniform(normalise):
    a = 2.5
    x = draw_starts(rngs(300), "box", 4, 3, half_width=a, normalise=normalise)
    if normalise:
        assert np.abs(np.linalg.norm(x, axis=2) - 1).max() < 1e-14
        raw = draw_starts(rngs(300), "box", 4, 3, half_width=a)
        assert np.allclose(x, raw / np.linalg.norm(raw, axis=2, keepdims=True), rtol=0, atol=1e-15)
    else:
        assert (np.abs(x) <= a).all()
        assert stats.kstest(x.ravel(), stats.uniform(-a, 2 * a).cdf).pvalue > KS_LEVEL
        assert stats.kstest(x.ravel(), stats.uniform(-a, 1.9 * a).cdf).pvalue < KS_LEVEL


# -- the stream: first from the trajectory's Generator, then the model's noise ----------------------

def test_a_start_given_as_x0_continues_the_kernels_own_stream():
    """The kernels' uniform start is the first n*d normals of the Generator, normalised: drawn
    here (a gaussian start of std 1), passed as x0 (whose rows the kernel normalises) and
    continued from the same Generators, it gives the kernel's own outputs bit for bit."""
    from tokensweep.kernels.stochastic.transformer import simulate_stochastic_transformer

    args = dict(n=3, d=4, beta=1.5, T=1.0, layers=50, checkpoint_layers=[25, 50])
    own = simulate_stochastic_transformer(rngs(6), **args)
    gens = rngs(6)
    given = simulate_stochastic_transformer(gens, **args, x0=draw_starts(gens, "gaussian", 3, 4))
    for name in own:
        assert np.array_equal(own[name], given[name], equal_nan=True), name


@pytest.mark.parametrize("model, init", [
    ("stochastic_transformer", "uniform"), ("hybrid", "uniform"),
    ("sphere_flow", "uniform_sphere"), ("sphere_flow", "hemisphere"), ("sphere_flow", "equiangular")])
def test_old_starts_give_the_kernels_numbers(model, init):
    """The default and the sphere flow's old start names run the kernel's own draw, unchanged:
    the plug-in's outputs equal the kernel called as before this field existed."""
    from tokensweep.kernels.hybrid import simulate_hybrid
    from tokensweep.kernels.sphere.flow import simulate_sphere_flow
    from tokensweep.kernels.stochastic.transformer import simulate_stochastic_transformer

    sweep = spec(model, init=init, grid={"n": 3})
    coords = {"beta": 1.0, "d": 4, "n": 3, **({"sigma": 1.0} if model == "hybrid" else {})}
    got = get_model(model).simulate(sweep, coords, rngs(5))
    t = dict(T=1.0, layers=10, checkpoint_layers=[10])
    if model == "sphere_flow":
        ref = simulate_sphere_flow(rngs(5), n=3, d=4, beta=1.0, init=init, **t)
    elif model == "hybrid":
        ref = simulate_hybrid(rngs(5), n=3, d=4, beta=1.0, sigma=1.0, **t)
    else:
        ref = simulate_stochastic_transformer(rngs(5), n=3, d=4, beta=1.0, **t)
    for name in ref:
        assert np.array_equal(got[name], ref[name], equal_nan=True), name


@pytest.mark.parametrize("model", ["stochastic_transformer", "hybrid", "sphere_flow", "euclidean_flow"])
def test_every_model_starts_from_a_given_start(model, tmp_path):
    """A file start with n = 2 tokens at overlap -1 + tiny: the first checkpoint still shows the
    pair far apart, so the start was used; the same cell gives the same numbers twice."""
    x = np.array([[1.0, 0.0, 0.0], [-1.0, 1e-3, 0.0]])
    np.save(tmp_path / "x.npy", x)
    sweep = spec(model, init={"kind": "file", "path": str(tmp_path / "x.npy")}, grid={"d": 3},
                 time={"T": 0.01, "layers": 1})
    part = Plan(sweep)[0]
    a, b = simulate_partition(sweep, part), simulate_partition(sweep, part)
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True)
    if "overlap_min" in a:
        assert (a["overlap_min"][:, 0] < -0.99).all()


# -- file starts: read back exactly, per trajectory, provenance -------------------------------------

def test_file_starts_are_read_back_exactly_per_trajectory(tmp_path):
    """R^d: the array exactly, row r for trajectory r whatever the partition; on the sphere the
    same tokens, normalised."""
    starts = np.random.default_rng(0).standard_normal((6, 2, 3))
    np.save(tmp_path / "x.npy", starts)
    coords = {"beta": 1.0, "d": 3, "n": 2}
    for model in ("euclidean_flow", "stochastic_transformer"):
        sweep = spec(model, init={"kind": "file", "path": str(tmp_path / "x.npy")}, grid={"d": 3},
                     trajectories=6)
        got = starts_of(sweep, coords, trajectory_rngs(sweep.seed, coords, range(2, 5)))
        want = starts[2:5] if model == "euclidean_flow" else \
            starts[2:5] / np.linalg.norm(starts[2:5], axis=2, keepdims=True)
        assert np.array_equal(got, want)
    np.save(tmp_path / "y.npy", starts[0])
    one = spec("euclidean_flow", init={"kind": "file", "path": str(tmp_path / "y.npy")}, grid={"d": 3})
    assert np.array_equal(starts_of(one, coords, rngs(3)), np.repeat(starts[:1], 3, axis=0))


def test_a_changed_file_is_refused_on_resume_and_by_the_worker(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.eye(2, 3))
    data = {"name": "f", "model": "stochastic_transformer", "grid": {"beta": 1.0, "d": 3, "n": 2},
            "time": TIME, "trajectories": 2, "init": {"kind": "file", "path": str(path)}}
    sweep = parse_sweep(data)
    assert len(sweep.init.sha256) == 64
    store = tmp_path / "cube.zarr"
    prepare_store(sweep, store)
    assert stored_sweep(store).init == sweep.init  # the digest is kept in the stored spec
    np.save(path, -np.eye(2, 3))
    with pytest.raises(StoreError, match="init"):
        growth(stored_sweep(store), parse_sweep(data), store)
    with pytest.raises(ValueError, match="has changed since the spec was written"):
        load_file(sweep.init)


# -- the spec: old spellings, refusals ------------------------------------------------------------

def test_old_spellings_read_as_the_shared_field():
    assert spec("sphere_flow", init="hemisphere").init.model_dump() == {"kind": "hemisphere", "v": "e1"}
    assert spec("sphere_flow", init="uniform_sphere").init == spec("sphere_flow").init
    old = spec("euclidean_flow", init="gaussian", box=2.0, grid={"d": 2, "n": 5})
    assert old.init.model_dump() == {"kind": "gaussian", "std": 2.0}
    assert spec("euclidean_flow", grid={"d": 2, "n": 5}).init.model_dump() == {
        "kind": "box", "half_width": 5.0, "normalise": False}
    # the canonical form of a spec without rho0 is as before: no absent axis written
    assert "rho0" not in load_sweep("quickstart").canonical()["grid"]


BAD_INIT = [  # (changes, the start of the one-line message)
    ({"init": "bogus"}, "init: unknown kind 'bogus': choose one of uniform"),
    ({"init": {"kind": "overlap"}}, "init.rho0: missing: give init.rho0 in [-1, 1] or a grid axis"),
    ({"init": {"kind": "overlap", "rho0": 1.5}}, "init.rho0: Input should be less than or equal to 1"),
    ({"init": {"kind": "overlap", "rho0": 0.5}, "grid": {"n": 3}}, "init: kind overlap draws a pair"),
    ({"grid": {"rho0": [0.1]}}, "grid.rho0: is the initial overlap of two tokens: set init: overlap"),
    ({"init": "overlap", "grid": {"rho0": [0.1, 2]}}, "grid.rho0: contains [2.0], but an overlap lies"),
    ({"init": "equiangular", "grid": {"n": 5}}, "init: 'equiangular' needs d >= n"),
    ({"model": "euclidean_flow", "init": {"kind": "overlap", "rho0": 0.1}, "grid": {"d": 1}},
     "init: kind overlap needs a second direction"),
    ({"init": {"kind": "box", "half_width": 1}}, "init.normalise: the sphere models put every token"),
    ({"init": {"kind": "box", "half_width": -1, "normalise": True}}, "init.half_width: Input should be greater"),
    ({"init": {"kind": "hemisphere", "v": [1, 0]}}, "init.v: a direction of 2 numbers fixes d = 2"),
    ({"init": {"kind": "hemisphere", "rho0": 0.1}}, "init.rho0: is not a parameter of kind hemisphere"),
    ({"init": {"kind": "gaussian"}}, "init: kind gaussian: the sphere models"),
    ({"init": {"kind": "file", "path": "/no/such.npy"}}, "init.path: /no/such.npy cannot be read"),
]


@pytest.mark.parametrize("changes, message", BAD_INIT, ids=[m.split(":")[0] + f"-{i}" for i, (_, m)
                                                             in enumerate(BAD_INIT)])
def test_bad_init_is_refused_naming_the_field(changes, message):
    with pytest.raises(SpecError) as err:
        spec(**changes)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("shape, fields, message", [
    ((2, 4), {}, "holds starts of shape (2, 4), but grid.n is [2] and grid.d is [3]"),
    ((5, 2, 3), {}, "holds 5 starts, but trajectories is 4"),
    ((2, 3), {"grid": {"d": [3, 4]}}, "grid.d is [3, 4]"),
])
def test_a_file_that_does_not_fit_the_grid_is_refused(tmp_path, shape, fields, message):
    np.save(tmp_path / "x.npy", np.ones(shape))
    grid = {"d": 3, **fields.pop("grid", {})}
    with pytest.raises(SpecError, match="init.path: ") as err:
        spec(init={"kind": "file", "path": str(tmp_path / "x.npy")}, grid=grid, **fields)
    assert message in str(err.value)


@pytest.mark.parametrize("init, fragment", [
    ({"kind": "overlap", "rho0": -2}, "init.rho0: Input should be greater than or equal to -1"),
    ({"kind": "file", "path": "starts.npy"}, "init.path: "),
])
def test_the_cli_exits_2_with_one_line_for_a_bad_init(tmp_path, init, fragment, cli):
    (tmp_path / "starts.npy").write_bytes(b"not an array")
    data = {"name": "bad", "model": "stochastic_transformer", "grid": {"beta": 1.0, "d": 3, "n": 2},
            "time": TIME, "trajectories": 2, "init": init}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    result = cli("run", "spec.yaml", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.startswith("error: " + fragment) and result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "starts.npy"]


# -- P(antipodal | rho0) against the conditional closed form ----------------------------------------

STEP_BIAS = 0.01  # the O(h) bias of the discrete model at h = 0.01 (docs/models.md section 4)
RHO0_CELLS = [(rho0, beta, d) for rho0 in (-0.5, 0.5) for beta in (1.0, 2.0) for d in (2, 3, 4)]


@pytest.fixture(scope="module")
def rho0_cube(tmp_path_factory):
    """One cube with a rho0 axis, run through the real path (spec -> seeds -> kernel -> zarr)."""
    store = tmp_path_factory.mktemp("rho0") / "cube.zarr"
    sweep = parse_sweep({
        "name": "rho0", "model": "stochastic_transformer", "init": "overlap",
        "grid": {"beta": [1.0, 2.0], "d": [2, 3, 4], "n": 2, "rho0": [-0.5, 0.5]},
        "time": {"T": 30.0, "layers": 3000, "checkpoints": 2}, "trajectories": 400,
        "partition_traj": 200, "seed": 20261124})
    prepare_store(sweep, store)
    for i in pending_partitions(sweep, store):
        run_partition(sweep, store, i)
    with xr.open_zarr(store, consolidated=False) as ds:
        return sweep, ds.load()


@pytest.mark.slow
@pytest.mark.parametrize("rho0, beta, d", RHO0_CELLS)
def test_antipodal_given_rho0_matches_the_conditional_closed_form(rho0_cube, rho0, beta, d):
    sweep, ds = rho0_cube
    classes = ds.cluster_class.sel(rho0=rho0, beta=beta, d=d).isel(t=-1, n=0).values
    assert (classes == 0).mean() < 0.01  # resolved
    k, n = int((classes == 2).sum()), classes.size
    lo, hi = wilson_interval(k, n, level=0.999)
    theory = float(antipodal_probability_given_overlap(rho0, beta, d))
    assert lo - STEP_BIAS <= theory <= hi + STEP_BIAS, (k / n, (lo, hi), theory)
    # the model's closed form (what the report and the accessor use) is the conditional one
    form = get_model(sweep.model).antipodal_probability(
        sweep, {"beta": np.array([beta]), "d": np.array([d]), "n": np.array([2]), "rho0": np.array([rho0])})
    assert form[0] == pytest.approx(theory, abs=1e-12)
    if d == 2:
        assert theory == pytest.approx(np.arccos(rho0) / np.pi, abs=1e-6)


@pytest.mark.slow
def test_the_rho0_check_can_fail(rho0_cube):
    """The unconditional law (uniform starts) is rejected in a cell where it differs: power."""
    _, ds = rho0_cube
    classes = ds.cluster_class.sel(rho0=0.5, beta=2.0, d=4).isel(t=-1, n=0).values
    lo, hi = wilson_interval(int((classes == 2).sum()), classes.size, level=0.999)
    wrong = float(antipodal_probability(2.0, 4))
    assert not lo - STEP_BIAS <= wrong <= hi + STEP_BIAS


@pytest.mark.parametrize("qk", ["identity", "goe"])
def test_a_given_start_continues_the_sphere_flows_stream(qk):
    """A hemisphere about v = (1, 0, 0) given as a list runs as a start drawn in Python (x0),
    the same numbers as the kernel's own hemisphere start; the random matrices (goe) are drawn
    after it from the same Generator: the plug-in equals the kernel's own old path bit for bit,
    on the fixed-weight path and on the per-trajectory one."""
    from tokensweep.kernels.sphere.flow import simulate_sphere_flow

    sweep = spec("sphere_flow", init={"kind": "hemisphere", "v": [1, 0, 0]}, qk=qk, grid={"d": 3, "n": 5})
    got = get_model("sphere_flow").simulate(sweep, {"beta": 1.0, "d": 3, "n": 5}, rngs(4))
    ref = simulate_sphere_flow(rngs(4), n=5, d=3, beta=1.0, T=1.0, layers=10, checkpoint_layers=[10],
                               init="hemisphere", qk=qk)
    for name in ref:
        assert np.array_equal(got[name], ref[name], equal_nan=True), name
