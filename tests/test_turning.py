"""[RST] Thm 5.3, a turning value matrix (theory.turning, analysis.turning, the report's section and
claims): token 1's closed form against the real kernel, from any start and in both regimes; the lune
of starts in the open hemisphere of v_1(0) that end at -v_1(t), which makes the theorem's basin fail;
the grid axis omega; and the numbers the table, the figure and the claims show, on a real store."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_record_pipeline import write_cube

import tokensweep
from tokensweep.kernels.sphere.flow import simulate_sphere_flow
from tokensweep.pipeline.analysis.turning import turning_table
from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.theory.turning import lock_or_slip, rotation, turning_first_token

V = np.diag([1.0, 0.3, -0.5])  # gap delta = 0.7 in the turning plane: the lock ends at omega = 0.35
SPEC = {"name": "turning", "model": "sphere_flow", "attention": "causal_sa", "integrator": "rk4",
        "init": {"kind": "hemisphere", "v": [1.0, 0.0, 0.0]}, "matrices": {"V": V.tolist()},
        "grid": {"beta": 1.0, "d": 3, "n": 4, "omega": [0.0, 0.25, 0.5]},
        "time": {"T": 30.0, "layers": 600, "checkpoints": 60}, "record": ["states"],
        "trajectories": 40, "partition_traj": 20, "seed": 11}


def kernel_token1(x0, omega, T=20.0, layers=2000, checkpoints=40):
    """Token 1 of the real kernel (causal SA, n = 3, RK4) from the start x0 (n, d), at each checkpoint."""
    marks = np.linspace(layers // checkpoints, layers, checkpoints).astype(np.int64)
    out = simulate_sphere_flow([np.random.Generator(np.random.PCG64(0))], n=x0.shape[0], d=3, beta=1.0, T=T,
                               layers=layers, checkpoint_layers=marks, attention="causal_sa", integrator="rk4",
                               matrices={"V": V[None]}, value_rotation=omega, x0=x0[None],
                               record=("states",))
    return marks * (T / layers), out["states"][0, :, 0]  # (t,), (t, d)


@pytest.mark.parametrize("omega", [0.1, 0.3, 0.5])
def test_token1_is_the_projected_linear_flow_of_the_turning_frame(omega):
    rng = np.random.Generator(np.random.PCG64(3))
    x0 = rng.standard_normal((3, 3))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    times, x1 = kernel_token1(x0, omega)
    exact = turning_first_token(x0[0], V, omega, 0.0, times)
    assert np.abs(x1 - exact).max() < 20.0 * (20.0 / 2000) ** 4  # RK4's T h^4
    # from a later time s too (the flow property the report's table uses)
    later = turning_first_token(x1[9], V, omega, times[9], times[9:])
    assert np.abs(x1[9:] - later).max() < 20.0 * (20.0 / 2000) ** 4


def test_lock_lag_and_slip_rate_are_the_closed_forms():
    for omega in (0.05, 0.2, 0.34):
        kind, lag, _ = lock_or_slip(V, omega)
        assert kind == "lock" and lag == pytest.approx(np.arcsin(2 * omega / 0.7) / 2, abs=1e-12)
    for omega in (0.36, 0.5, 2.0):
        kind, _, rate = lock_or_slip(V, omega)
        assert kind == "slip" and rate == pytest.approx(np.sqrt(omega ** 2 - 0.35 ** 2), abs=1e-12)
    assert lock_or_slip(V, 0.35)[0] == "boundary"


def test_a_start_in_the_lune_ends_at_minus_v1_and_one_outside_at_plus_v1():
    """Thm 5.3's basin fails: a start in the open hemisphere of v_1(0) = e1, inside the lune of
    dihedral angle lag between the hemisphere's edge (-e2) and the separatrix, ends on the far side."""
    omega = 0.25
    _, lag, _ = lock_or_slip(V, omega)
    ends = {}
    for name, angle in (("inside", -np.pi / 2 + lag / 2), ("outside", -np.pi / 2 + 1.5 * lag)):
        x0 = np.array([[np.cos(angle), np.sin(angle), 0.1]])
        x0 /= np.linalg.norm(x0)
        assert x0[0, 0] > 0  # in the open hemisphere of v_1(0)
        times, x1 = kernel_token1(x0, omega, T=60.0, layers=3000, checkpoints=2)
        v1_T = rotation(3, omega * times[-1]) @ np.array([1.0, 0.0, 0.0])
        ends[name] = float(np.arccos(np.clip(x1[-1] @ v1_T, -1, 1)))
    assert ends["inside"] == pytest.approx(np.pi - lag, abs=1e-6)
    assert ends["outside"] == pytest.approx(lag, abs=1e-6)


def test_the_omega_axis_refusals():
    with pytest.raises(SpecError, match="grid.omega"):
        parse_sweep({**SPEC, "value_rotation": 0.1})
    with pytest.raises(SpecError, match="grid.omega"):
        parse_sweep({**SPEC, "matrices": None, "grid": {**SPEC["grid"], "omega": [0.1]}})
    with pytest.raises(SpecError, match="grid.omega"):
        parse_sweep({**SPEC, "grid": {**SPEC["grid"], "omega": [float("inf")]}})
    assert parse_sweep(SPEC).axes["omega"] == (0.0, 0.25, 0.5)


@pytest.fixture(scope="module")
def turning_cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("turning") / "turning.zarr"
    sweep = write_cube(SPEC, path)
    return sweep, path


def test_table_report_and_claims_show_the_closed_forms(turning_cube, tmp_path):
    sweep, path = turning_cube
    ds = open_cube(path)  # as `tokensweep report` reads it: every grid axis a dimension
    table = turning_table(ds, sweep).squeeze(drop=True)
    assert list(table.kind.values) == ["lock", "lock", "slip"]
    assert (table.dev < 30.0 * 0.05 ** 4).all()
    locked = table.sel(omega=[0.0, 0.25])
    np.testing.assert_allclose(locked.lag, locked.lag_theory, atol=1e-6)  # converged at T = 30
    slip = table.sel(omega=0.5)
    assert abs(float(slip.rate - slip.rate_theory)) <= table.attrs["rate_bound"]
    # the far side: none at omega = 0; lag/pi at 0.25 (a binomial count of 40, generous 4-sigma)
    assert float(table.far.sel(omega=0.0)) == 0.0
    p = float(table.far_theory.sel(omega=0.25))
    assert abs(float(table.far.sel(omega=0.25)) - p) <= 4 * np.sqrt(p * (1 - p) / 40)
    out = tmp_path / "report"
    write_report(ds, out)
    page = (out / "report.md").read_text()
    assert "## A turning value matrix ([RST] Thm 5.3)" in page and (out / "turning.png").stat().st_size > 0
    section = page.split("## A turning value matrix")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| 1 | 3 | 4 | 0.25 |"))
    assert f"| {float(table.lag_theory.sel(omega=0.25)):.4f} | {float(table.lag.sel(omega=0.25)):.4f} |" in row


def test_claims_of_a_turning_cube(turning_cube, tmp_path):
    """Registered for the catalog entry: the same checks on this cube under its name."""
    from tokensweep.pipeline.plugin import ReportInput
    from tokensweep.pipeline.report.claims_rst import CLAIMS

    sweep, path = turning_cube
    ds = tokensweep.open(path)
    report = ReportInput(ds=ds, sweep=sweep, out=tmp_path, level=0.99)
    token1, ball, lune, slip = (check(report) for check in CLAIMS["rst-turning-value"])
    assert token1.verdict == "holds" and slip.verdict == "holds" and lune.verdict == "holds"
    table = turning_table(ds, sweep)
    far = int(np.nansum((table.angle >= np.pi / 2).where(table.kind == "lock").values))
    assert ball.verdict == ("fails" if far else "holds")
    assert f"{int(table.n_traj.where(table.kind == 'lock').sum()) - far} of" in ball.measured
    # the hypothesis is checked first: a start not about v_1(0) is not judged
    other = parse_sweep({**SPEC, "init": {"kind": "hemisphere", "v": [-1.0, 0.0, 0.0]}})
    report = ReportInput(ds=ds, sweep=other, out=tmp_path, level=0.99)
    assert CLAIMS["rst-turning-value"][1](report).verdict == "hypothesis not met"
    assert json.loads(json.dumps(ball.as_dict()))["source"] == "[RST] Thm 5.3"


def test_turning_png_draws_the_measured_lag_and_rate_on_their_closed_forms(turning_cube):
    from tokensweep.pipeline.report.figures import plt
    from tokensweep.pipeline.report.turning import plot_turning

    _, path = turning_cube
    ds = open_cube(path)
    table = turning_table(ds)
    fig = plot_turning(table, V, 0.0, ds.attrs, None)
    try:
        lag_axes, rate_axes = fig.axes[:2]
        lag_curve, lag_points = lag_axes.get_lines()
        w = lag_curve.get_xdata()
        locked = w < 0.35
        np.testing.assert_allclose(lag_curve.get_ydata()[locked], np.arcsin(2 * w[locked] / 0.7) / 2, atol=1e-12)
        np.testing.assert_allclose(lag_points.get_xdata(), [0.0, 0.25])
        np.testing.assert_allclose(lag_points.get_ydata(), table.lag.sel(omega=[0.0, 0.25]).values.ravel())
        rate_curve, rate_points = rate_axes.get_lines()
        w = rate_curve.get_xdata()
        slipping = w > 0.35
        np.testing.assert_allclose(rate_curve.get_ydata()[slipping], np.sqrt(w[slipping] ** 2 - 0.35 ** 2),
                                   atol=1e-12)
        assert np.isnan(rate_curve.get_ydata()[~slipping]).all()
        np.testing.assert_allclose(rate_points.get_xdata(), [0.5])
        np.testing.assert_allclose(rate_points.get_ydata(), table.rate.sel(omega=[0.5]).values.ravel())
    finally:
        plt.close(fig)
