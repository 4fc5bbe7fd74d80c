"""Phase-diagram figures from an `antipodal_table` (pipeline/phase.py), as PNG files.

* `plot_antipodal_vs_beta`: P(antipodal) against beta, one colour per d, Wilson error bars, the
  closed form drawn densely (200 betas, not only the grid points) and beta_c(d) as a dashed
  vertical line of the same colour.  Other grid axes of size > 1 (n, sigma, ...) become facets.
* `plot_hybrid_heatmap`: P(antipodal) over (beta, sigma) with the noise thresholds sigma_c(beta)
  drawn over it (USA: one curve; SA: the bistable window between two curves).

matplotlib runs on the Agg backend (files only, no display needed).
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from . import theory  # noqa: E402
from .phase import TRANSFORMER_MODELS, theory_probability  # noqa: E402

__all__ = ["plot_antipodal_vs_beta", "plot_hybrid_heatmap", "figure_title"]

DPI = 150
N_DENSE = 200


def figure_title(attrs: dict, what: str) -> str:
    """'what' followed by model, attention, checkpoint, T and h = T / layers when known."""
    parts = [f"{attrs.get('model', '?')} ({attrs.get('attention', '?')})"]
    if np.isfinite(attrs.get("t", np.nan)):
        parts.append(f"t = {attrs['t']:g}")
    if "T" in attrs:
        parts.append(f"T = {float(attrs['T']):g}")
        if attrs.get("layers"):
            parts.append(f"h = {float(attrs['T']) / float(attrs['layers']):.3g}")
    return f"{what}\n" + ", ".join(parts)


def _with_dims(table: xr.Dataset, names) -> xr.Dataset:
    # scalar coordinates (a fixed parameter) become length-1 dimensions, so that one code path fits
    for name in names:
        if name not in table.dims:
            if name not in table.coords:
                raise ValueError(f"the table has no '{name}' coordinate (coords: {sorted(table.coords)}); "
                                 f"the plot needs '{name}' as a grid axis or a scalar coordinate")
            table = table.expand_dims(name)
    return table


def _facets(table: xr.Dataset, fixed):
    """(label, sub-table) per combination of the other grid axes of size > 1."""
    others = [dim for dim in table.n_traj.dims if dim not in fixed and table.sizes[dim] > 1]
    for values in itertools.product(*[table[dim].values for dim in others]):
        sel = dict(zip(others, values))
        label = ", ".join(f"{k} = {v:g}" for k, v in sel.items())
        yield label, table.sel(sel)


def _scalar(sub: xr.Dataset, name: str, default):
    if name in sub.coords and sub[name].size == 1:
        return sub[name].values.item()
    return sub.attrs.get(name, default)


def _subplots(n_panels: int, width=6.0, height=4.2, share=False):
    ncols = min(3, n_panels)
    nrows = int(np.ceil(n_panels / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             sharex=share, sharey=share)
    for ax in axes.ravel()[n_panels:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def plot_antipodal_vs_beta(table: xr.Dataset, path) -> str:
    """P(antipodal) vs beta with Wilson bars, dense theory curves and beta_c(d); returns path."""
    table = _with_dims(table, ("beta", "d"))
    attrs = table.attrs
    model, attention = attrs.get("model", ""), attrs.get("attention", "")
    facets = list(_facets(table, ("beta", "d")))
    fig, axes = _subplots(len(facets), share=True)
    colours = {d: plt.cm.tab10(i % 10) for i, d in enumerate(table.d.values)}
    betas = table.beta.values
    # the dense curve also reaches back to the thresholds beta_c(d), where the transition starts
    critical = [float(theory.beta_c(d)) for d in table.d.values if d >= 2] if model in TRANSFORMER_MODELS else []
    start = min([betas.min()] + [b for b in critical if np.isfinite(b) and b >= 0])
    dense = np.linspace(start, betas.max(), N_DENSE)
    for ax, (label, sub) in zip(axes, facets):
        for d in sub.d.values:
            cell = sub.sel(d=d).squeeze()  # keep n, sigma as scalar coordinates
            colour = colours[d]
            p, lo, hi = (np.ravel(cell[v].values) for v in ("p_antipodal", "lo", "hi"))
            # clip: at k = 0 or k = N the Wilson bound may differ from p by a rounding error
            ax.errorbar(np.ravel(cell.beta.values), p, yerr=np.maximum([p - lo, hi - p], 0), fmt="o", ms=4,
                        capsize=2, color=colour, label=f"d = {d} (simulation)")
            curve = theory_probability(model, attention, dense, d, _scalar(cell, "n", -1),
                                       _scalar(cell, "sigma", None))
            if np.isfinite(curve).any():
                ax.plot(dense, curve, "-", color=colour, lw=1.2, label=f"d = {d} (theory)")
                if model in TRANSFORMER_MODELS and np.isfinite(theory.beta_c(d)):
                    ax.axvline(float(theory.beta_c(d)), ls="--", lw=1, color=colour)
        top = min(1.02, max(0.55, float(np.nanmax(sub.hi.values, initial=0.0)) + 0.05))
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="P(antipodal) (probability)",
               ylim=(-0.01, top), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    level = attrs.get("level", 0.95)
    fig.suptitle(figure_title(attrs, f"P(antipodal) vs β, Wilson {level:.0%} intervals; "
                                     "dashed: β_c(d) = arccosh(d-2)/2"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return str(path)


def plot_hybrid_heatmap(table: xr.Dataset, path) -> str:
    """Heatmap of P(antipodal) over (beta, sigma), thresholds sigma_c(beta) drawn over it."""
    table = _with_dims(table, ("beta", "sigma"))
    attrs = table.attrs
    attention = str(attrs.get("attention", "usa")).lower()
    facets = list(_facets(table, ("beta", "sigma")))
    fig, axes = _subplots(len(facets), width=5.5)
    betas, sigmas = table.beta.values, table.sigma.values
    dense = np.linspace(betas.min(), betas.max(), N_DENSE)
    for ax, (label, sub) in zip(axes, facets):
        p = sub.p_antipodal.squeeze(drop=True).transpose("sigma", "beta")
        mesh = ax.pcolormesh(betas, sigmas, p.values, shading="nearest", vmin=0, vmax=1, cmap="viridis")
        if attention in ("sa", "usa"):
            lo, hi = theory.hybrid_sigma_c(dense, attention)
            if attention == "usa":
                ax.plot(dense, lo, "w-", lw=2, label="σ_c(β) = sqrt(2 e^-β)")
            else:
                ax.plot(dense, lo, "w--", lw=2, label="σ_lo(β) = sqrt(1 + e^-2β)")
                ax.plot(dense, hi, "w-", lw=2, label="σ_hi = sqrt(2)")
            ax.legend(fontsize=7, loc="upper right", facecolor="0.3", labelcolor="w")
        ax.set(xlabel="inverse temperature β (dimensionless)", ylabel="noise level σ (dimensionless)",
               ylim=(sigmas.min(), sigmas.max()), title=label)
        fig.colorbar(mesh, ax=ax, label="P(antipodal)")
    fig.suptitle(figure_title(attrs, "Hybrid model: P(antipodal) over (β, σ)"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return str(path)
