"""Report pages of the deterministic flows: sphere_flow [GLPR-P, RST] and euclidean_flow [GLPR-E].

`write_flow_report(ds, out_dir)` is what `report.write_report` calls for these models.

sphere_flow: `frac_close.png`, the mean fraction of close pairs over (beta, t) with t*(beta) over it
([GLPR-P] Fig. 3), with a table of the time at which that mean reaches 1/2 against t*; mean cluster
counts over time (`clusters.png`, [GLPR-P] Fig. 4); the open-hemisphere fraction at the first
checkpoint against Wendel's probability; for the equiangular start, the overlaps against gamma(t)
(`equiangular.png`). euclidean_flow: a table of the geometric outcomes per cell and `clusters.png`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from . import phase_flows as pf
from .plots_flows import plot_cluster_counts, plot_equiangular, plot_frac_close_heatmap
from .report import _fmt, header_lines, rows_table

__all__ = ["write_flow_report", "CROSSING_LEVEL"]

CROSSING_LEVEL = 0.5  # t_cross: the mean fraction of close pairs reaches one half
MAX_COLUMNS_T = 6  # checkpoints shown in the cluster-count table


def _cells(da: xr.DataArray, dims):
    """(coordinate labels, index dict) over every cell of the given dims, in C order."""
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        sel = dict(zip(dims, idx))
        yield [f"{da[d].values[i]:g}" for d, i in sel.items()], sel


def _pending(ds: xr.Dataset) -> int:
    from .phase import _done_mask

    done = _done_mask(ds)
    return 0 if done is None else int((~done).sum())


def _spec_facts(spec: dict, names) -> tuple:
    return tuple((k, spec[k]) for k in names if k in spec and spec[k] not in (None, ""))


def _sphere_flow(ds: xr.Dataset, out: Path, level: float) -> tuple[list[str], dict]:
    spec = pf.spec_of(ds)
    attrs = {**ds.attrs, "attention": spec.get("attention", ds.attrs.get("attention", ""))}
    dims = pf.grid_dims(ds)
    mean = pf.frac_close_mean(ds)
    paths = {"frac_close": plot_frac_close_heatmap(mean, spec, attrs, out / "frac_close.png")}
    crossing = pf.crossing_table(ds, CROSSING_LEVEL)
    theory_note = ("t* from theory.t_star (equiangular overlap reaches 1 - delta), in simulated time"
                   if pf.closed_form_attention(spec) else
                   "no t* here: the closed form needs Q = K = V = I, no time-varying P(t), SA or USA")
    rows = []
    for labels, sel in _cells(crossing.t_cross, dims):
        c, s = float(crossing.t_cross[sel]), float(crossing.t_star[sel])
        rows.append(labels + [_fmt(c, 2), _fmt(s, 2), _fmt(c / s if s else np.nan, 3)])
    lines = [
        "## Fraction of close pairs ([GLPR-P] Fig. 3)", "",
        f"Colour: mean over trajectories of the fraction of pairs with <x_i, x_j> >= 1 - delta. "
        f"t_cross: first time that mean reaches {CROSSING_LEVEL:g} (linear interpolation between "
        f"checkpoints; — if never by T). {theory_note}.", "",
        rows_table(dims + ["t_cross", "t*", "t_cross / t*"], rows), "", "![frac_close](frac_close.png)", ""]

    counts = pf.cluster_count_mean(ds)
    paths["clusters"] = plot_cluster_counts(counts, attrs, out / "clusters.png")
    shown = np.unique(np.linspace(0, counts.sizes["t"] - 1, min(MAX_COLUMNS_T, counts.sizes["t"]))
                      .round().astype(int))
    rows = [labels + [_fmt(float(v), 2) for v in counts[sel].isel(t=shown).values]
            for labels, sel in _cells(counts, dims)]
    lines += ["## Cluster counts", "",
              f"Mean number of clusters (components of overlap >= 1 - eps, eps = {ds.attrs.get('eps', 1e-3):g}).",
              "", rows_table(dims + [f"t = {counts.t.values[i]:g}" for i in shown], rows), "",
              "![clusters](clusters.png)", ""]

    hemi = pf.hemisphere_table(ds, level)
    rows = []
    for labels, sel in _cells(hemi.n_traj, dims):
        cell = hemi[sel]
        rows.append(labels + [str(int(cell.n_traj)), _fmt(float(cell.p_hemi)),
                              f"[{_fmt(float(cell.lo))}, {_fmt(float(cell.hi))}]", _fmt(float(cell.theory)),
                              "yes" if bool(cell.agrees) else "no"])
    theory_name = "Wendel" if spec.get("init", "uniform_sphere") == "uniform_sphere" else "1 (start)"
    lines += [f"## Open hemisphere at the first checkpoint (t = {hemi.attrs['t']:g})", "",
              "Fraction of trajectories whose tokens lie in an open hemisphere, against Wendel's "
              "probability 2^-(n-1) sum_{k<d} C(n-1, k) for n uniform points at t = 0 (the property is "
              "kept by full attention with V = I, and a start outside may still enter one, so the "
              f"fraction can only exceed it as t grows). Agreement: theory inside the "
              f"{pf.HEMISPHERE_LEVEL:.0%} Wilson interval"
              + ("." if hemi.attrs["two_sided"] else
                 " or below it (one-sided: the first checkpoint is after the first step)."), "",
              rows_table(dims + ["N", "p_hemisphere", f"{level:.0%} Wilson", theory_name, "agrees"], rows), ""]

    eq = pf.equiangular_table(ds)
    if eq is not None:
        paths["equiangular"] = plot_equiangular(eq, spec, attrs, out / "equiangular.png")
        rows = []
        for labels, sel in _cells(eq.dev, dims):
            cell = eq[sel]
            k = int(np.nanargmax(cell.dev.values)) if np.isfinite(cell.dev.values).any() else 0
            rows.append(labels + [f"{float(cell.dev.max()):.2e}", f"{float(cell.t[k]):g}",
                                  _fmt(float(cell.gamma[-1]), 6), _fmt(float(cell.overlap_min[-1]), 6)])
        lines += ["## Equiangular start", "",
                  "Every pairwise overlap should equal gamma(t) (theory.equiangular_gamma); max |dev| is "
                  "the largest |overlap - gamma| over trajectories, checkpoints and min/max overlaps "
                  f"(an O(h^p) integrator error; {spec.get('integrator', 'euler')} here).", "",
                  rows_table(dims + ["max dev", "at t", "gamma(T)", "mean min overlap (T)"], rows), "",
                  "![equiangular](equiangular.png)", ""]
    return lines, paths


def _euclidean_claims(spec: dict, d) -> str:
    """The [GLPR-E] statements that apply to this cell's V (models.md section 3)."""
    V = spec.get("V", "identity")
    claims = []
    if V == "identity":
        claims.append("centres on the hull (P = 1)")
    elif V == "minus_identity":
        claims.append("x -> 0 like t^-1/2 (sqrt(T) spread bounded)")
    else:
        claims.append("at most 3 psi_1 hyperplanes (typically 2) if lambda_1 > 0 is simple")
    if int(d) == 1:
        claims.append("P(T) Boolean, rank <= 3")
    return "; ".join(claims)


def _euclidean_flow(ds: xr.Dataset, out: Path, level: float) -> tuple[list[str], dict]:
    spec = pf.spec_of(ds)
    dims = pf.grid_dims(ds)
    table = pf.euclidean_table(ds)
    paths = {"clusters": plot_cluster_counts(pf.cluster_count_mean(ds), ds.attrs, out / "clusters.png")}
    head = dims + ["N", "nonfinite", "clusters (mean / max)", "P(centres on hull)", "psi_1 values (mean)",
                   "P(<= 3 psi_1 values)", "rank P(T) (mean / max)", "max Boolean defect",
                   "spread at T", "sqrt(T) spread", "applies"]
    rows = []
    for labels, sel in _cells(table.n_traj, dims):
        c = table[sel]
        d = ds["d"].values[sel["d"]] if "d" in sel else ds.attrs.get("d", 2)
        rows.append(labels + [
            str(int(c.n_traj)), str(int(c.n_nonfinite)),
            f"{_fmt(float(c.clusters_mean), 2)} / {_fmt(float(c.clusters_max), 0)}",
            _fmt(float(c.p_on_hull), 3), _fmt(float(c.psi1_mean), 2), _fmt(float(c.p_psi1_le3), 3),
            f"{_fmt(float(c.rank_mean), 2)} / {_fmt(float(c.rank_max), 0)}",
            f"{float(c.booleanness_max):.1e}", f"{float(c.spread_mean):.3g}", f"{float(c.sqrtT_spread):.3g}",
            _euclidean_claims(spec, d)])
    lines = [
        "## Geometry at T per cell ([GLPR-E])", "",
        "z = e^{-tV} x (rescaled tokens). Clusters: components of |z_i - z_j| <= eps r0. Centres on "
        "hull: every cluster centre of z(T) is a vertex of the hull of the centres. psi_1 values: "
        "distinct values of psi_1^T z_i(T) (— where the top eigenvalue of V is not real and simple). "
        "Rank and Boolean defect sum_ij min(P_ij, 1 - P_ij) of the attention matrix P(T). "
        "The last column names the statement of the paper that the cell can be checked against.", "",
        rows_table(head, rows), "", "![clusters](clusters.png)", ""]
    return lines, paths


def write_flow_report(ds: xr.Dataset, out_dir, level: float = 0.95) -> dict:
    """report.md and figures for a sphere_flow or euclidean_flow cube; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = pf.spec_of(ds)
    model = str(ds.attrs.get("model", "")).lower()
    if model == "sphere_flow":
        extra = _spec_facts(spec, ("integrator", "init", "heads", "qk", "value", "period", "time_varying",
                                   "rst_scaling", "delta"))
        body, paths = _sphere_flow(ds, out, level)
    elif model == "euclidean_flow":
        extra = _spec_facts(spec, ("V", "Q", "K", "integrator", "init", "box"))
        body, paths = _euclidean_flow(ds, out, level)
    else:
        raise ValueError(f"write_flow_report handles sphere_flow and euclidean_flow, not {model!r}: "
                         "use report.write_report")
    n_bad = int(ds["nonfinite"].sum()) if "nonfinite" in ds else 0
    lines = header_lines(ds, level, pending=_pending(ds), extra=extra + (("eps", ds.attrs.get("eps")),))
    if n_bad:
        lines += [f"**{n_bad} trajectories became non-finite** and are left out of every statistic.", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines + body))
    return {"report": str(report), **paths}
