"""Report section of a turning value matrix ([RST] Thm 5.3; `analysis.turning`): per cell the lock's
lag behind v_1(t) and the slip's rate, measured against their closed forms (`theory.turning`), the
fraction of starts that end on the far side (-v_1(t)) against the lune's lag / pi, and token 1's
largest distance to its closed form; `turning.png` draws the lag and the slip rate over omega.
Empty where the cube is not such a cube (`analysis.turning.turning_inputs`).
"""

from __future__ import annotations

import numpy as np

from ..analysis.stats import grid_dims
from ..analysis.turning import turning_table
from ..plugin import Part, ReportInput
from ..theory.turning import lock_or_slip
from .figures import N_DENSE, figure_title, save, subplots
from .tables import cell_rows, fmt, rows_table

__all__ = ["turning_section"]


def turning_section(report: ReportInput) -> Part:
    table = turning_table(report.ds)  # the cube's own spec: one table for the section and the claims
    if table is None:
        return Part([], {})
    dims = [d for d in grid_dims(report.ds) if d in table.dims]
    rows = []
    for labels, sel in cell_rows(table.n_traj, dims):
        c = table[sel]
        locked = str(c.kind.values) == "lock"  # a lag and a far side only where it locks
        rows.append(labels + [str(c.kind.values), str(int(c.n_traj)), fmt(float(c.lag_theory)),
                              fmt(float(c.lag)) if locked else "—", fmt(float(c.far_theory), 3),
                              fmt(float(c.far), 3) if locked else "—", fmt(float(c.rate_theory)),
                              fmt(float(c.rate)), f"{float(c.dev):.2e}", fmt(float(c.one_cluster), 3)])
    V = np.asarray(report.sweep.matrices["V"][0], float)
    figures = {"turning": plot_turning(table, V, float(report.sweep.value_rotation), report.ds.attrs,
                                       report.out / "turning.png")}
    lines = [
        "## A turning value matrix ([RST] Thm 5.3)", "",
        "V(t) = R(ωt) V R(ωt)^T turns its top eigenvector v_1(t) at the speed ε = ω. Token 1 attends only to "
        "itself, so in the turning frame it is the projected linear flow of M = V - ωJ: x_1(t) = "
        "R(ωt) N(e^{(t-s)M} R(ωs)^T x_1(s)) (theory.turning). A real top eigenvalue of M locks it at the "
        "lag arcsin(2ε/δ)/2 behind ±v_1(t) (δ the gap of V in the turning plane); a complex pair makes it "
        "slip against v_1(t) at the rate sqrt(ε² - δ²/4). Starts in the lune between the hemisphere's edge "
        "and M's separatrix, a fraction lag/π of the hemisphere, end at -v_1(t). lag: mean angle of x_1(T) "
        "to the line ±v_1(T) (radians); far: fraction of trajectories whose token 1 ends beyond π/2 of "
        f"v_1(T); rate: |unwrapped phase of x_1 in the turning frame| / time, exact to π/(T - t_1) = "
        f"{table.attrs['rate_bound']:.3g}; dev: largest |x_1 - closed form| over checkpoints and "
        "trajectories; one cluster: fraction with n_clusters = 1 at T.", "",
        rows_table(dims + ["regime", "N", "lag (theory)", "lag", "far (lag/π)", "far", "slip rate (theory)",
                           "slip rate", "dev", "one cluster"], rows), "",
        "![turning](turning.png)", ""]
    return Part(lines, figures)


def plot_turning(table, V, omega_scalar: float, attrs: dict, path) -> str:
    """Two panels over omega: the lag (closed form and measured) and the slip rate; the lag and the
    rate do not depend on beta or n (token 1 is alone), so other axes are averaged."""
    other = [d for d in table.n_traj.dims if d != "omega"]
    first = {d: 0 for d in other}
    omegas = np.atleast_1d(table.omega.values if "omega" in table.dims else omega_scalar)
    locked = np.atleast_1d(table.kind.isel(first).values) == "lock"
    lags = np.atleast_1d(table.lag.mean(other).values if other else table.lag.values)
    rates = np.atleast_1d(table.rate.mean(other).values if other else table.rate.values)
    dense = np.linspace(0.0, max(float(np.abs(omegas).max()), 1e-9) * 1.1, N_DENSE)
    theory = [lock_or_slip(V, w) for w in dense]
    fig, axes = subplots(2)
    axes[0].plot(dense, [t[1] for t in theory], "-", lw=1, label="closed form (arcsin(2ε/δ)/2 for V diagonal)")
    axes[0].plot(omegas[locked], lags[locked], "o", ms=4, label="measured (mean over trajectories)")
    axes[0].set(xlabel="turning speed ε = ω", ylabel="lag of token 1 behind ±v_1(T) (rad)", title="lock")
    axes[1].plot(dense, [t[2] if t[0] == "slip" else np.nan for t in theory], "-", lw=1,
                 label="closed form sqrt(ε² - δ²/4)")
    axes[1].plot(omegas[~locked], rates[~locked], "o", ms=4, label="measured (mean over trajectories)")
    axes[1].set(xlabel="turning speed ε = ω", ylabel="slip rate against v_1(t) (rad per unit time)", title="slip")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path, figure_title(attrs, "Turning value matrix: lag, then slip"))
