"""Report section of the final geometry of the flow in R^d ([GLPR-E], docs/models.md section 3):
a table of the per-cell outcomes of `analysis.geometry.geometry_table` and the cluster counts."""

from __future__ import annotations

from ..analysis.clustering import cluster_count_mean
from ..analysis.geometry import geometry_table
from ..analysis.stats import closed_form, grid_dims
from ..plugin import Part, ReportInput
from .clustering import plot_cluster_counts
from .tables import cell_rows, fmt, rows_table

__all__ = ["geometry_section", "integrator_note"]

INTEGRATORS = {
    "rk4": "classical RK4 on z = e^{-tV} x (fourth order: at h = 0.1 rates are accurate to ~1e-6)",
    "euler": "explicit Euler on z = e^{-tV} x (first order; it biases rates: for V = -I at h = 0.1 "
             "the spread at t = 30 is 2.4x too small; use integrator: rk4 for rates)",
    "discrete": "the discrete-time transformer [GLPR-E] (3) with step h, on Remark 4's "
                "z = (I + hV)^{-k} x: the layer map itself, within O(h) of the flow",
}


def integrator_note(sweep) -> str:
    """One sentence: the scheme the cube was computed with, and its step."""
    return (f"Integrator: {INTEGRATORS[sweep.integrator]}; h = {sweep.time.h:g}"
            + (f"; {sweep.heads} heads" if sweep.heads > 1 else "") + ".")


def geometry_section(report: ReportInput) -> Part:
    """The table of geometric outcomes per cell, with the statements each cell can be checked against."""
    ds = report.ds
    dims = grid_dims(ds)
    table = geometry_table(ds)
    claims = closed_form(ds, "geometry_claims")
    figures = {"clusters": plot_cluster_counts(cluster_count_mean(ds), ds.attrs, report.out / "clusters.png")}
    head = dims + ["N", "nonfinite", "clusters (mean / max)", "P(centres on hull)", "psi_1 values (mean)",
                   "P(<= 3 psi_1 values)", "rank P(T) (mean / max)", "max Boolean defect",
                   "spread at T", "sqrt(T) spread", "spread exponent (T/2..T)", "applies"]
    rows = []
    for labels, sel in cell_rows(table.n_traj, dims):
        c = table[sel]
        d = int(ds["d"].values[sel["d"]]) if "d" in sel else int(ds["d"].values.ravel()[0])
        rows.append(labels + [
            str(int(c.n_traj)), str(int(c.n_nonfinite)),
            f"{fmt(float(c.clusters_mean), 2)} / {fmt(float(c.clusters_max), 0)}",
            fmt(float(c.p_on_hull), 3), fmt(float(c.psi1_mean), 2), fmt(float(c.p_psi1_le3), 3),
            f"{fmt(float(c.rank_mean), 2)} / {fmt(float(c.rank_max), 0)}",
            f"{float(c.booleanness_max):.1e}", f"{float(c.spread_mean):.3g}", f"{float(c.sqrtT_spread):.3g}",
            fmt(float(c.spread_exponent), 3), claims(d) if claims is not None else "—"])
    lines = [
        "## Geometry at T per cell ([GLPR-E])", "",
        "z = e^{-tV} x (rescaled tokens). Clusters: components of |z_i - z_j| <= eps r0. Centres on "
        "hull: every cluster centre of z(T) is a vertex of the hull of the centres. psi_1 values: "
        "distinct values of psi_1^T z_i(T) (— unless one head and (Q, K, V) a good triple). "
        "Rank and Boolean defect sum_ij min(P_ij, 1 - P_ij) of the attention matrix P(T). "
        "The last column names the statement of the paper that the cell can be checked against.", "",
        integrator_note(report.sweep), "",
        rows_table(head, rows), "", "![clusters](clusters.png)", ""]
    return Part(lines, figures)
