"""Figures of the deterministic flows (pipeline/phase_flows.py) and of n > 2 stochastic runs.

* `plot_frac_close_heatmap`: mean fraction of close pairs over (beta, t) with the theory curve
  t*(beta) drawn over it ([GLPR-P] Fig. 3); with a single beta, curves over t and t* as a line.
* `plot_cluster_counts`: mean cluster count against t, one line per beta ([GLPR-P] Fig. 4).
* `plot_equiangular`: overlaps of the equiangular start against gamma(t).
* `plot_any_antipodal`: P(at least one antipodal pair) against beta per n, Wilson bars ([F26] Fig.
  6), and its persistence over the checkpoints ([F26] Fig. 7).

One panel per combination of the grid axes other than those on the panel's axes (d, n, ...).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import xarray as xr

from . import theory
from .phase_flows import closed_form_attention, time_factor
from .plots import DPI, N_DENSE, _subplots, figure_title, plt

__all__ = ["plot_frac_close_heatmap", "plot_cluster_counts", "plot_equiangular", "plot_any_antipodal"]


def panels(da: xr.DataArray, fixed):
    """(label, selection) per combination of the dims of da not in `fixed` (one panel if none)."""
    others = [d for d in da.dims if d not in fixed]
    for values in itertools.product(*[da[d].values for d in others]):
        sel = dict(zip(others, values))
        yield ", ".join(f"{k} = {v:g}" for k, v in sel.items()), sel


def _save(fig, path, title) -> str:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return str(path)


N_CURVE = 80  # t*(beta) costs one ODE solve per beta


@functools.lru_cache(maxsize=64)
def _t_star_theory(betas: tuple, n: int, delta: float, attention: str) -> np.ndarray:
    return theory.t_star(np.asarray(betas, float), n, delta, attention)


def _t_star(spec: dict, betas, n, d):
    """t*(beta) in simulated time, or None where the closed form does not apply."""
    attention = closed_form_attention(spec)
    if attention is None:
        return None
    base = _t_star_theory(tuple(np.asarray(betas, float).tolist()), int(n),
                          float(spec.get("delta", 1e-3)), attention)
    return base * time_factor(spec, d)


def plot_frac_close_heatmap(mean: xr.DataArray, spec: dict, attrs: dict, path) -> str:
    """Heatmap of mean frac_close over (beta, t), t*(beta) over it; one panel per (d, n, ...)."""
    facets = list(panels(mean, ("beta", "t")))
    fig, axes = _subplots(len(facets), width=5.5)
    betas, times = mean.beta.values, mean.t.values
    for ax, (label, sel) in zip(axes, facets):
        sub = mean.sel(sel).transpose("t", "beta")
        n, d = sel.get("n", mean.n.values[0]), sel.get("d", mean.d.values[0])
        if betas.size > 1:
            mesh = ax.pcolormesh(betas, times, sub.values, shading="nearest", vmin=0, vmax=1,
                                 cmap="viridis")
            fig.colorbar(mesh, ax=ax, label="fraction of close pairs")
            dense = np.linspace(betas.min(), betas.max(), N_CURVE)
            curve = _t_star(spec, dense, n, d)
            if curve is not None:
                ax.plot(dense, curve, "w-", lw=2, label="t*(β): γ(t*) = 1 - δ")
                ax.legend(fontsize=7, loc="upper left", facecolor="0.3", labelcolor="w")
            ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="time t (dimensionless)",
                   ylim=(times.min(), times.max()), title=label)
        else:
            ax.plot(times, sub.values[:, 0], "o-", ms=3, label=f"β = {betas[0]:g}")
            star = _t_star(spec, betas, n, d)
            if star is not None:
                ax.axvline(float(star[0]), ls="--", color="k", lw=1, label="t*(β)")
            ax.set(xlabel="time t (dimensionless)", ylabel="fraction of close pairs", ylim=(-0.02, 1.02),
                   title=label)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    what = f"Fraction of pairs with <x_i, x_j> ≥ 1 - δ (δ = {spec.get('delta', 1e-3):g}), mean over trajectories"
    return _save(fig, path, figure_title(attrs, what))


def plot_cluster_counts(mean: xr.DataArray, attrs: dict, path) -> str:
    """Mean number of clusters against t, one line per beta; one panel per (d, n, ...)."""
    facets = list(panels(mean, ("beta", "t")))
    fig, axes = _subplots(len(facets))
    for ax, (label, sel) in zip(axes, facets):
        sub = mean.sel(sel)
        for i, beta in enumerate(sub.beta.values):
            ax.plot(sub.t.values, sub.sel(beta=beta).values, "o-", ms=3, color=plt.cm.viridis(
                i / max(1, sub.beta.size - 1)), label=f"β = {beta:g}")
        ax.set(xlabel="time t (dimensionless)", ylabel="mean number of clusters", title=label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, path, figure_title(attrs, f"Cluster counts (overlap ≥ 1 - eps, eps = "
                                                f"{attrs.get('eps', 1e-3):g}) over time"))


def plot_equiangular(table: xr.Dataset, spec: dict, attrs: dict, path) -> str:
    """Mean overlap_min / overlap_max of an equiangular start against gamma(t), per beta."""
    facets = list(panels(table.gamma, ("beta", "t")))
    fig, axes = _subplots(len(facets))
    attention = closed_form_attention(spec)
    times = table.t.values
    dense = np.linspace(0.0, times.max(), N_DENSE)
    for ax, (label, sel) in zip(axes, facets):
        sub = table.sel(sel)
        n, d = sel.get("n", table.n.values[0]), sel.get("d", table.d.values[0])
        for i, beta in enumerate(sub.beta.values):
            colour = plt.cm.tab10(i % 10)
            cell = sub.sel(beta=beta)
            gamma = theory.equiangular_gamma(dense / time_factor(spec, d), float(beta), int(n), attention)
            ax.plot(dense, gamma, "-", color=colour, lw=1.2, label=f"β = {beta:g}: γ(t)")
            ax.plot(times, cell.overlap_min.values, "v", ms=4, color=colour, label="min overlap")
            ax.plot(times, cell.overlap_max.values, "^", ms=4, mfc="none", color=colour, label="max overlap")
        ax.set(xlabel="time t (dimensionless)", ylabel="pairwise overlap <x_i, x_j>", title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, path, figure_title(attrs, "Equiangular start: overlaps against γ(t)"))


def plot_any_antipodal(table: xr.Dataset, path, persistence_path=None) -> dict:
    """P(any antipodal pair) vs beta per n at the last checkpoint; persistence over t per n."""
    attrs = table.attrs
    last = table.isel(t=-1)
    facets = list(panels(last.p_any, ("beta", "n")))
    fig, axes = _subplots(len(facets), share=True)
    for ax, (label, sel) in zip(axes, facets):
        sub = last.sel(sel)
        for i, n in enumerate(sub.n.values):
            cell = sub.sel(n=n)
            p, lo, hi = cell.p_any.values, cell.lo.values, cell.hi.values
            ax.errorbar(cell.beta.values, p, yerr=np.maximum([p - lo, hi - p], 0), fmt="o-", ms=4,
                        capsize=2, color=plt.cm.tab10(i % 10), label=f"n = {n:g}")
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="P(at least one antipodal pair)",
               ylim=(-0.01, 1.01), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    level = attrs.get("level", 0.95)
    out = {"any_antipodal": _save(fig, path, figure_title(
        {**attrs, "t": float(last.t)}, f"P(some pair within eps of antipodal), Wilson {level:.0%} intervals"))}
    if persistence_path is not None and table.sizes["t"] > 1:
        facets = list(panels(table.p_any.isel(t=0, drop=True), ("beta",)))
        fig, axes = _subplots(len(facets), share=True)
        betas = table.beta.values
        shown = betas if betas.size <= 6 else betas[np.linspace(0, betas.size - 1, 6).round().astype(int)]
        for ax, (label, sel) in zip(axes, facets):
            for i, beta in enumerate(shown):
                cell = table.sel(sel).sel(beta=beta)
                colour = plt.cm.viridis(i / max(1, len(shown) - 1))
                ax.plot(cell.t.values, cell.p_any.values, "o-", ms=3, color=colour, label=f"β = {beta:g}")
                ax.plot(cell.t.values, cell.p_persist.values, "--", color=colour)
            ax.set(xlabel="checkpoint t (dimensionless)", ylabel="probability", ylim=(-0.01, 1.01),
                   title=label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
        out["persistence"] = _save(fig, persistence_path, figure_title(
            attrs, "P(antipodal pair at t) (solid) and P(present from t to T) (dashed)"))
    return out
