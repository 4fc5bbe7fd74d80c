"""Report section of a random-weight network cube (`law: random | resampled`): the network beside
the deep stochastic transformer [F26] with the same n and d (`models.network.stochastic`: a
report-time simulation through the project's own kernel, at the beta of the sphere-flow fit, its
clock matched to the network's mean-overlap curve), and whether the random weights land on [F26]'s
antipodal side: the network's pairs with cosine near -1 at the last checkpoint against two
tokens' P(antipodal | rho0) of the stochastic model's limit (`theory`).

* `network_stochastic.png`: mean pairwise cosine over layers: the network, its fitted sphere flow,
  the stochastic transformer on the matched clock;
* a table per cell (at most `MAX_CELLS`): beta, beta_c(d), the matched time per layer, the curves'
  rms distance, the fractions of pairs near -1 and the closed form.
"""

from __future__ import annotations

import numpy as np

from ..models.network.fit import fit_particle, particle_curve
from ..models.network.stochastic import SIM_TRAJECTORIES, match_clock, stochastic_overlaps
from ..plugin import Part, ReportInput
from ..theory import antipodal_probability_given_overlap, beta_c
from .figures import figure_title, save, subplots
from .network import grid_dims
from .observables import cell_label, shown_cells
from .tables import fmt, rows_table

__all__ = ["stochastic_section", "beside_stochastic", "near_minus_one", "table_rows"]

MAX_CELLS = 2  # each costs a simulation at report time
NEAR = -0.9  # a pair is near -1 below this cosine (the histogram's nearest edge at or below it)


def near_minus_one(hist, edges) -> tuple[float, float]:
    """(fraction of pairs in the bins below the cutoff, the cutoff): the cutoff is the largest bin
    edge <= NEAR; `hist` (..., bins) pair counts, the fraction of their sum over every axis."""
    hist = np.asarray(hist, float)
    cut = max(e for e in edges if e <= NEAR + 1e-12)
    below = np.asarray(edges[1:]) <= cut + 1e-12
    total = hist.sum()
    return (float(hist[..., below].sum() / total) if total > 0 else float("nan")), float(cut)


def beside_stochastic(ds, sweep, sel: dict) -> dict:
    """The numbers of one cell: the network's mean curve, the fitted sphere flow, the stochastic
    transformer's simulation on the matched clock, the antipodal fractions and closed form."""
    sub = ds.isel(sel)
    n, d = int(sub["n"].values), sweep.shape.width
    layers = np.concatenate([[0.0], ds["t"].values])
    starts = sub["start_overlap"].values.astype(float)
    curves = np.column_stack([starts, sub["mean_overlap"].transpose("traj", "t").values.astype(float)])
    keep = np.isfinite(curves).all(axis=1)
    curve, gamma0 = curves[keep].mean(0), float(starts[keep].mean())
    beta, tau, _ = fit_particle(layers, curve, gamma0, n)
    sim = stochastic_overlaps(n, d, beta, gamma0, seed=sweep.seed, reach=float(curve[-1]))
    clock, rms = match_clock(layers, curve, sim["t"], sim["mean_overlap"])
    edges = ds["bin"].attrs.get("bin_edges", np.linspace(-1, 1, sub.sizes["bin"] + 1).tolist())
    network, cut = near_minus_one(sub["overlap_hist"].isel(t=-1).where(lambda h: h >= 0, 0).values, edges)
    return {"n": n, "d": d, "beta": beta, "tau": tau, "gamma0": gamma0, "layers": layers, "curve": curve,
            "sim": sim, "clock": clock, "rms": rms, "cut": cut, "network_near": network,
            "sim_near": float(np.interp(clock * layers[-1], sim["t"], sim["pairs_near_minus_one"])),
            "beta_c": float(beta_c(d)),
            "closed_form": float(antipodal_probability_given_overlap(float(np.clip(gamma0, -1, 1)), beta, d))}


def plot(rows, labels, attrs, path):
    fig, axes = subplots(len(rows), width=5.0, height=3.8)
    for ax, row, label in zip(axes, rows, labels):
        layers = row["layers"]
        fine = np.linspace(0, layers[-1], 200)
        ax.plot(layers, row["curve"], "o-", ms=3, label="network (mean over prompts)")
        ax.plot(fine, particle_curve(fine, row["gamma0"], row["beta"], row["tau"], row["n"]), "--",
                label=f"sphere flow, beta = {row['beta']:.3g}")
        ax.plot(fine, np.interp(row["clock"] * fine, row["sim"]["t"], row["sim"]["mean_overlap"]), ":",
                label=f"stochastic transformer, {row['clock']:.3g} per layer")
        ax.set(xlabel="layer", ylabel="mean pairwise cosine", title=label, ylim=(-1, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, figure_title(attrs, "Random weights beside the stochastic transformer [F26]"))


def table_rows(rows, labels) -> list[list[str]]:
    """The table's rows (`beside_stochastic`'s numbers): the network is on the antipodal side when
    any of its pairs ends near -1; -1 attracts the stochastic model's pairs above beta_c(d)."""
    table = []
    for row, label in zip(rows, labels):
        side = "yes" if row["network_near"] > 0 else "no"
        theory_side = "attracts" if row["beta"] > row["beta_c"] else "does not attract"
        table.append([label, fmt(row["beta"], 3), fmt(row["beta_c"], 3), f"{row['clock']:.3g}", fmt(row["rms"], 3),
                      fmt(row["network_near"], 4), fmt(row["sim_near"], 4), fmt(row["closed_form"], 4),
                      f"{side}; -1 {theory_side} at this beta"])
    return table


def stochastic_section(report: ReportInput) -> Part:
    ds, sweep = report.ds, report.sweep
    if sweep.law == "pretrained":
        return Part([], {})
    cells = shown_cells(ds["mean_overlap"], grid_dims(ds), most=MAX_CELLS)
    rows = [beside_stochastic(ds, sweep, sel) for sel in cells]
    labels = [cell_label(ds["mean_overlap"], sel) for sel in cells]
    attrs = {k: v for k, v in ds.attrs.items() if k not in ("T", "layers")}
    figure = plot(rows, labels, attrs, report.out / "network_stochastic.png")
    lines = ["## Random weights beside the stochastic transformer", "",
             f"The deep stochastic transformer [F26] (x_i <- N(x_i + sqrt(h) V_k A_i), a fresh Gaussian V_k per "
             f"layer) with the network's n and width d, the beta of the sphere-flow fit above, value_std 1, "
             f"started with every pair at the network's layer-0 mean cosine; simulated here ({SIM_TRAJECTORIES} "
             "trajectories, the project's kernel), its time per layer matched to the network's mean-overlap "
             "curve (least squares; the limit's law depends on value_std^2 t only). [F26]'s antipodal side: "
             f"the fraction of the network's pairs with cosine below {fmt(rows[0]['cut'] if rows else NEAR, 2)} at "
             "the last checkpoint (all prompts), the simulation's at the matched time, and two tokens' "
             "P(antipodal | rho0 = the layer-0 mean cosine) of the limit SDE, positive only above "
             "beta_c(d) = arccosh(d - 2) / 2.", "",
             rows_table(["cell", "beta", "beta_c(d)", "time per layer", "rms", "network pairs near -1",
                         "stochastic pairs near -1", "P(antipodal), closed form", "antipodal side"],
                        table_rows(rows, labels)), "",
             "![stochastic](network_stochastic.png)", ""]
    return Part(lines, {"network_stochastic": figure})
