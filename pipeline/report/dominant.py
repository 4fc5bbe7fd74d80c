"""Report section of the dominant outcome over (beta, sigma), as [F26] Fig. 4 draws it.

Per cell the fractions of counted trajectories that are one cluster, antipodal or unresolved at the
last checkpoint; the colour names the largest (magenta: single cluster, violet: antipodal, as the
paper; grey: unresolved, which the paper's fixed-T picture folds into the others) and its lightness
is that fraction (`dominant.png`). The model's threshold curves are drawn over it; where it gives
two (the SA bistable window sigma_lo < sigma < sigma_hi of `theory.hybrid_sigma_c`) the band
between them is hatched.

Agreement. USA's closed form is 0 or 1 off the curve, so a z-score exists nowhere; what the figure
claims is the phase, so the section counts the cells whose dominant outcome is the theory's phase:
antipodal where the model's `antipodal_probability` exceeds 1/2, single where it is below. Cells
next to the boundary (the theory's phase differs at a neighbour in beta or sigma) are counted apart:
at finite T the slow convergence just above sigma_c leaves them unresolved. Where the model has
`finite_time_outcomes` (and at most `MAX_CELLS` cells), the dominant class at T of the backward
equation, unresolved included, is compared as well: that prediction holds near the boundary too.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.patches import Patch

from ..analysis.antipodal import CLASS_ANTIPODAL, CLASS_SINGLE, CLASS_UNRESOLVED
from ..analysis.stats import cells_of, closed_form, done_finite
from ..plugin import Part, ReportInput
from .figures import N_DENSE, figure_title, panels, save, subplots
from .tables import fmt, rows_table

__all__ = ["dominant_section", "dominant_table", "OUTCOMES", "MAX_CELLS"]

OUTCOMES = ("unresolved", "single", "antipodal")  # index = cluster class
COLOURS = {"unresolved": (0.55, 0.55, 0.55), "single": (0.85, 0.1, 0.75), "antipodal": (0.4, 0.15, 0.75)}
MAX_CELLS = 64  # backward-equation solves (one per cell) for the finite-T column
MAX_ROWS = 80


def _phase(p):
    """Theory's phase index from P(antipodal): 2 above 1/2, 1 below, -1 where undefined (NaN, 1/2)."""
    p = np.asarray(p, float)
    return np.where(np.isfinite(p) & (p > 0.5), 2, np.where(np.isfinite(p) & (p < 0.5), 1, -1))


def _near_boundary(phase: np.ndarray, axes: tuple[int, int]) -> np.ndarray:
    """True where a neighbour along either of the two axes has another phase (or none)."""
    near = phase < 0
    for axis in axes:
        moved = np.swapaxes(phase, axis, -1)
        diff = np.zeros(moved.shape, bool)
        diff[..., 1:] |= moved[..., 1:] != moved[..., :-1]
        diff[..., :-1] |= moved[..., 1:] != moved[..., :-1]
        near |= np.swapaxes(diff, axis, -1)
    return near


def dominant_table(ds: xr.Dataset) -> xr.Dataset:
    """Fractions of the three classes at the last checkpoint, the dominant one, the theory's phase,
    its dominant class at T (finite-T theory) and the near-boundary flag, per cell."""
    cc = ds["cluster_class"]
    cc = cc.isel(t=-1, drop=True) if "t" in cc.dims else cc
    keep = done_finite(ds, cc)
    n = keep.sum("traj")
    fractions = xr.concat([((cc == k) & keep).sum("traj") for k in (CLASS_UNRESOLVED, CLASS_SINGLE, CLASS_ANTIPODAL)],
                          dim="outcome").compute() / n.where(n > 0)
    dims = list(n.dims)
    table = xr.Dataset({"fraction": fractions.assign_coords(outcome=list(OUTCOMES)), "n_traj": n.compute()})
    table["dominant"] = fractions.fillna(-1).argmax("outcome").where(n > 0, -1)
    cells = cells_of(table, dims, table.n_traj)
    probability = closed_form(ds, "antipodal_probability")
    p_inf = (np.full(n.shape, np.nan) if probability is None
             else np.broadcast_to(np.asarray(probability(cells), float), n.shape))
    phase = _phase(p_inf)
    table["theory"] = n.copy(data=p_inf)
    table["phase"] = n.copy(data=phase)
    axes = tuple(dims.index(a) for a in ("beta", "sigma"))
    table["near_boundary"] = n.copy(data=_near_boundary(phase, axes))
    finite = closed_form(ds, "finite_time_outcomes")
    t_end = float(ds["t"].values[-1]) if "t" in ds.coords else np.nan
    at_t = np.full(n.shape, -1)
    if finite is not None and n.size <= MAX_CELLS and np.isfinite(t_end):
        probs = np.asarray(finite(cells, t_end), float)  # (antipodal, single, unresolved)
        ok = np.isfinite(probs).all(axis=0)
        order = np.stack([probs[2], probs[1], probs[0]])  # as OUTCOMES
        at_t = np.where(ok, np.nan_to_num(order, nan=-1).argmax(axis=0), -1)
    table["phase_t"] = n.copy(data=at_t)
    table.attrs["t"] = t_end
    return table


def dominant_section(report: ReportInput) -> Part:
    """dominant.png and the phase agreement; empty unless beta and sigma both vary."""
    ds = report.ds
    if "cluster_class" not in ds or not all(ds.sizes.get(a, 1) > 1 for a in ("beta", "sigma")):
        return Part([], {})
    table = dominant_table(ds)
    counted = (table.n_traj > 0) & (table.phase >= 0)
    match = counted & (table.dominant == table.phase)
    far = counted & ~table.near_boundary
    with_t = (table.n_traj > 0) & (table.phase_t >= 0)
    match_t = with_t & (table.dominant == table.phase_t)
    finite_line = (f" Against the finite-T theory's dominant class at t = {table.attrs['t']:g} (unresolved "
                   f"included): **{int(match_t.sum())} of {int(with_t.sum())}** cells."
                   if int(with_t.sum()) else "")
    lines = [
        "## Dominant outcome over (beta, sigma) ([F26] Fig. 4)", "",
        "Colour: the largest of the fractions single cluster (magenta), antipodal (violet) and unresolved "
        "(grey) at the last checkpoint, lightness = that fraction; the theory's threshold curves over it "
        "(hatched: both ends attract). The theory's phase: antipodal where the closed-form P(antipodal) "
        "exceeds 1/2, single below. Near the boundary: a neighbouring cell in beta or sigma has another "
        "phase.", "",
        f"**Agreement**: the dominant outcome is the theory's phase in **{int((match & far).sum())} of "
        f"{int(far.sum())}** cells away from the boundary ({int(match.sum())} of {int(counted.sum())} "
        f"overall).{finite_line}", ""]
    if table.n_traj.size <= MAX_ROWS:
        names = {-1: "—", **dict(enumerate(OUTCOMES))}
        dims = list(table.n_traj.dims)
        rows = []
        for idx in np.ndindex(table.n_traj.shape):
            cell = table[dict(zip(dims, idx))]
            rows.append([f"{cell[d].values.item():g}" for d in dims] + [
                str(int(cell.n_traj)), *[fmt(float(cell.fraction.sel(outcome=o)), 3) for o in OUTCOMES],
                names[int(cell.dominant)], fmt(float(cell.theory), 3), names[int(cell.phase)],
                "yes" if bool(cell.near_boundary) else "no", names[int(cell.phase_t)]])
        lines += [rows_table(dims + ["N", "unresolved", "single", "antipodal", "dominant", "theory P(antipodal)",
                                    "theory phase", "near boundary", f"theory at t = {table.attrs['t']:g}"],
                             rows), ""]
    figures = {"dominant": plot_dominant(table, ds.attrs, closed_form(ds, "threshold_curves"),
                                         report.out / "dominant.png")}
    lines += ["![dominant](dominant.png)", ""]
    return Part(lines, figures)


def plot_dominant(table: xr.Dataset, attrs: dict, thresholds, path) -> str:
    facet = list(panels(table.n_traj, ("beta", "sigma")))
    fig, axes = subplots(len(facet), width=5.5)
    betas, sigmas = table.beta.values, table.sigma.values
    dense = np.linspace(betas.min(), betas.max(), N_DENSE)
    curves = thresholds(dense) if thresholds is not None else []
    for ax, (label, sel) in zip(axes, facet):
        sub = table.sel(sel).transpose("sigma", "beta", "outcome")
        dominant = sub.dominant.values
        strength = np.nan_to_num(sub.fraction.max("outcome").values)
        image = np.ones(dominant.shape + (3,))
        for k, name in enumerate(OUTCOMES):
            base = np.array(COLOURS[name])
            image[dominant == k] = 1 - strength[dominant == k, None] * (1 - base)
        ax.imshow(image, origin="lower", aspect="auto", interpolation="nearest",
                  extent=_extent(betas, sigmas))
        for name, _, values in curves:
            ax.plot(dense, values, "k--", lw=1.5, label=name)
        if len(curves) == 2:
            ax.fill_between(dense, curves[0][2], curves[1][2], facecolor="none", edgecolor="k", hatch="//",
                            lw=0, label="bistable window")
        handles = [Patch(color=COLOURS[o], label=o) for o in OUTCOMES] + ax.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=6, loc="upper right")
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="noise level σ (dimensionless)",
               ylim=(sigmas.min(), sigmas.max()), xlim=(betas.min(), betas.max()), title=label)
    return save(fig, path, figure_title(attrs, "Dominant outcome over (β, σ), lightness = its fraction"))


def _extent(betas, sigmas):
    """imshow extent with each cell centred on its grid value (uniform grids)."""
    db = (betas[-1] - betas[0]) / max(1, betas.size - 1) / 2
    ds_ = (sigmas[-1] - sigmas[0]) / max(1, sigmas.size - 1) / 2
    return (betas[0] - db, betas[-1] + db, sigmas[0] - ds_, sigmas[-1] + ds_)
