"""Report section of a real network's cube (`model: network`, pipeline/models/network/).

* `network_overlaps.png`: per cell, the mean pairwise cosine over layers (layer 0: the embedding
  output) beside the particle model with the same n: the high-d SA flow's gamma(t) at the fitted
  beta and time per layer (`models.network.fit`);
* a table per cell of that fit, with bootstrap intervals over prompts, and what it says: the
  network clusters faster than its idealisation at its own beta when it needs fewer layers for
  the same overlap (a time per layer above 1), and random weights land on [F26]'s two-cluster
  side when pairs end antipodal (the minimum cosine near -1);
* `network_energy.png`: [RST]'s two E(t) over layers (1 - mean_i cos(y_1, y_i), and
  mean_i |cos(y_1, y_i)|), mean over prompts;
* `overlap_hist.png`: [GLPR-P] Fig. 1's histograms of the pairwise cosines layer by layer;
* a table of the per-layer means (overlaps, E, clusters at eps, effective rank, the attention's
  Booleanness and rank) at up to 12 checkpoints;
* the heads' value spectra ([GLPR-E] Fig. 10): how many leading eigenvalues are real, their
  modulus gap, and `network_spectra.png`, the leading eigenvalues in the complex plane.
"""

from __future__ import annotations

import numpy as np

from ..models.network.fit import fit_with_interval, particle_curve
from ..plugin import Part, ReportInput
from .figures import figure_title, plt, save, subplots
from .observables import cell_label, plot_overlap_hist, shown_cells
from .tables import fmt, rows_table

__all__ = ["network_section", "cell_fits", "layer_table", "real_leading", "grid_dims", "spectra_lines"]

GRID = ("n", "beta", "scale", "weights_seed")  # models.network.spec.NetworkGrid's axes
LAYER_COLUMNS = ("mean_overlap", "overlap_min", "overlap_max", "energy", "abs_cos_first", "n_clusters",
                 "effective_rank", "attention_max", "attention_rank")
MAX_ROWS = 12


def grid_dims(ds) -> list[str]:
    return [d for d in GRID if d in ds.dims]


def _cells(ds):
    dims = grid_dims(ds)
    return dims, shown_cells(ds["mean_overlap"], dims, most=6)


def cell_fits(ds, level: float = 0.95) -> list[tuple[dict, dict]]:
    """[(cell selection, fit)] of the shown cells (`fit.fit_with_interval`)."""
    dims, cells = _cells(ds)
    layers = np.concatenate([[0.0], ds["t"].values])
    out = []
    for sel in cells:
        sub = ds.isel(sel)
        curves = np.column_stack([sub["start_overlap"].values, sub["mean_overlap"].transpose("traj", "t").values])
        n = int(sub["n"].values)
        out.append((sel, fit_with_interval(layers, curves, curves[:, 0], n, level)))
    return out


def layer_table(ds, sel: dict) -> list[list[str]]:
    """Rows (checkpoint, means over prompts of LAYER_COLUMNS) at up to MAX_ROWS checkpoints."""
    sub = ds.isel(sel)
    picks = np.unique(np.linspace(0, sub.sizes["t"] - 1, min(MAX_ROWS, sub.sizes["t"])).round().astype(int))
    means = {c: sub[c].astype("float64").mean("traj").values for c in LAYER_COLUMNS}
    return [[f"{sub['t'].values[k]:g}"] + [fmt(means[c][k], 3) for c in LAYER_COLUMNS] for k in picks]


def real_leading(re, im) -> np.ndarray:
    """Which leading eigenvalues are real: imaginary part within 1e-6 of the modulus (float32)."""
    re, im = np.asarray(re, float), np.asarray(im, float)
    return im <= 1e-6 * np.maximum(np.abs(re), 1e-12)


def spectra_lines(ds) -> list[str]:
    """The value spectra of the first cell's weights ([GLPR-E] Fig. 10)."""
    first = {d: 0 for d in grid_dims(ds)}
    sub = ds.isel(first).isel(traj=0)
    re, im, gap = (sub[k].values.astype(float) for k in ("value_lead_re", "value_lead_im", "value_gap"))
    real = real_leading(re, im)
    heads = len(re)
    return [
        "## Value spectra per head", "",
        f"Leading eigenvalue (largest modulus) of each head's value matrix W_O[:, h] W_V[h], {heads} heads "
        f"(layers x heads) of the first cell's weights ([GLPR-E] Fig. 10; its analysis assumes V has a "
        "real top eigenvalue):", "",
        rows_table(["", "heads", "mean modulus gap", "mean |lambda_1|"], [
            ["real, positive", str(int((real & (re > 0)).sum())), fmt(np.nanmean(gap[real & (re > 0)]), 3)
             if (real & (re > 0)).any() else "—", fmt(np.abs(re[real & (re > 0)]).mean(), 3) if (real & (re > 0)).any() else "—"],
            ["real, negative", str(int((real & (re < 0)).sum())), fmt(np.nanmean(gap[real & (re < 0)]), 3)
             if (real & (re < 0)).any() else "—", fmt(np.abs(re[real & (re < 0)]).mean(), 3) if (real & (re < 0)).any() else "—"],
            ["complex pair", str(int((~real).sum())), fmt(np.nanmean(gap[~real]), 3) if (~real).any() else "—",
             fmt(np.hypot(re, im)[~real].mean(), 3) if (~real).any() else "—"],
        ]), "", "![spectra](network_spectra.png)", ""]


def plot_overlaps(ds, fits, attrs, path):
    fig, axes = subplots(len(fits), width=5.0, height=3.8)
    layers = np.concatenate([[0.0], ds["t"].values])
    fine = np.linspace(0, layers[-1], 200)
    for ax, (sel, fit) in zip(axes, fits):
        sub = ds.isel(sel)
        curve = np.concatenate([[float(sub["start_overlap"].mean())], sub["mean_overlap"].mean("traj").values])
        ax.plot(layers, curve, "o-", ms=3, label="network (mean over prompts)")
        ax.plot(fine, particle_curve(fine, curve[0], fit["beta"], fit["tau"], int(sub["n"].values)), "--",
                label=f"particle model, beta = {fit['beta']:.3g}, {fit['tau']:.3g} per layer")
        ax.set(xlabel="layer", ylabel="mean pairwise cosine", title=cell_label(ds["mean_overlap"], sel), ylim=(-1, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, figure_title(attrs, "Mean overlap over layers beside the fitted particle model"))


def plot_energy(ds, cells, attrs, path):
    fig, axes = subplots(2, width=5.5)
    for ax, name in zip(axes, ("energy", "abs_cos_first")):
        for i, sel in enumerate(cells):
            mean = ds[name].isel(sel).mean("traj")
            ax.plot(ds["t"].values, mean.values, "-", color=plt.cm.tab10(i % 10), label=cell_label(ds[name], sel))
        ax.set(xlabel="layer (passes x layers)", ylabel=name, title=ds[name].attrs.get("long_name", name)[:60])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, figure_title(attrs, "[RST] E(t) over layers, mean over prompts"))


def plot_spectra(ds, attrs, path):
    sub = ds.isel({d: 0 for d in grid_dims(ds)}).isel(traj=0)
    re, im = sub["value_lead_re"].values, sub["value_lead_im"].values
    fig, axes = subplots(1, width=5.0, height=4.2)
    axes[0].scatter(re, im, s=12)
    axes[0].scatter(re, -im, s=12, color="C0", alpha=0.4)
    axes[0].axhline(0, color="k", lw=0.5)
    axes[0].set(xlabel="Re lambda_1", ylabel="Im lambda_1")
    return save(fig, path, figure_title(attrs, "Leading eigenvalue of each head's value matrix"))


def network_section(report: ReportInput) -> Part:
    ds, out, level = report.ds, report.out, report.level
    attrs = {k: v for k, v in ds.attrs.items() if k not in ("T", "layers")}
    dims, cells = _cells(ds)
    fits = cell_fits(ds, level)
    figures = {"network_overlaps": plot_overlaps(ds, fits, attrs, out / "network_overlaps.png"),
               "network_energy": plot_energy(ds, cells, attrs, out / "network_energy.png"),
               "overlap_hist": plot_overlap_hist(ds["overlap_hist"].astype("float64").mean("traj"), dims, attrs,
                                                 out / "overlap_hist.png"),
               "network_spectra": plot_spectra(ds, attrs, out / "network_spectra.png")}
    rows = []
    for sel, fit in fits:
        last = ds.isel(sel).isel(t=-1)
        pace = "faster" if fit["tau_lo"] > 1 else "slower" if fit["tau_hi"] < 1 else "undecided"
        rows.append([cell_label(ds["mean_overlap"], sel), str(fit["prompts"]),
                     f"{fmt(fit['beta'], 3)} [{fmt(fit['beta_lo'], 3)}, {fmt(fit['beta_hi'], 3)}]"
                     + (" (at the bound: not identified)" if fit["beta"] <= 1.01e-3 or fit["beta"] >= 49.5 else ""),
                     f"{fmt(fit['tau'], 3)} [{fmt(fit['tau_lo'], 3)}, {fmt(fit['tau_hi'], 3)}]",
                     fmt(fit["rms"], 3), pace, fmt(float(last["overlap_min"].mean()), 3),
                     fmt(float((last["overlap_min"] < -0.9).mean()), 3)])
    lines = ["## The network beside its particle model", "",
             "Mean pairwise cosine of the tokens over layers (layer 0: the embedding output), and the "
             "particle model with the same n (the SA flow on the sphere in high dimension, whose overlaps "
             "follow gamma(t), [GLPR-P] Thm 6.9) started at the same overlap, at the beta and time per layer "
             f"that fit best; intervals: {level:.0%} percentile bootstrap over prompts. Pace: faster than the "
             "idealisation at its own time scale when a layer is worth more than one unit of time (the "
             "interval above 1). Antipodal: fraction of prompts whose minimum cosine ends below -0.9 "
             "([F26]'s two-cluster side).", "",
             rows_table(["cell", "prompts", "fitted beta", "time per layer", "rms", "pace",
                         "final min cosine", "antipodal"], rows), "",
             "![overlaps](network_overlaps.png)", "", "## E(t) over layers and passes", "",
             "![energy](network_energy.png)", "", "## Pairwise overlaps layer by layer", "",
             "[GLPR-P] Fig. 1: histograms of the pairwise cosines at every checkpoint (colour: fraction of "
             "pairs, mean over prompts).", "", "![histograms](overlap_hist.png)", ""]
    for sel in cells[:3]:
        lines += [f"Per-layer means over prompts, {cell_label(ds['mean_overlap'], sel)}:", "",
                  rows_table(["layer", *LAYER_COLUMNS], layer_table(ds, sel)), ""]
    return Part(lines + spectra_lines(ds), figures)
