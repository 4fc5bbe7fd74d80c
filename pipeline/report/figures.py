"""What every figure of a report shares: the Agg backend, resolution, panel grids, titles, saving.

One panel per combination of the grid axes that are not on the panel's own axes (d, n, ...).
matplotlib runs on the Agg backend (files only, no display needed), except in a Jupyter kernel, whose
inline backend stays for the user's own plots (figures here are saved and closed either way).
"""

from __future__ import annotations

import itertools
import sys
import textwrap

import matplotlib

if "ipykernel" not in sys.modules:  # a notebook that imports a model keeps its inline plots
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

__all__ = ["plt", "DPI", "N_DENSE", "figure_title", "subplots", "panels", "facets", "with_dims",
           "scalar", "save", "value_colours", "key_lines"]

DPI = 150
# zlib level 1 for the PNGs: the same pixels, ~1.3x bigger files, a quarter less time per figure
# than Pillow's default level 6 (`benchmarks/bench_report.py`)
PNG = {"compress_level": 1}
N_DENSE = 200  # points of a closed-form curve drawn between grid values
MAX_KEYED = 12  # lines of a panel that a legend lists; beyond, a colour bar (90 betas at [GLPR-P] scale)


def _value_norm(values):
    return matplotlib.colors.Normalize(float(np.min(values)), float(np.max(values)))


def value_colours(values, cmap=plt.cm.viridis):
    """A colour per value of a coordinate drawn as one line each (beta): the colour map over the
    values' range, the one `key_lines` shows as a colour bar (one value: the map's first)."""
    norm = _value_norm(values)
    return [cmap(norm(float(v))) for v in values]


def key_lines(ax, values, name="β", cmap=plt.cm.viridis, **legend):
    """The key of lines coloured by `value_colours`: a legend for up to MAX_KEYED of them, else a
    colour bar of `name` (a legend of 90 entries covers its panel)."""
    if len(values) <= MAX_KEYED:
        ax.legend(**legend)
        return
    norm = _value_norm(values)
    ax.figure.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=name)


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


def subplots(n_panels: int, width=6.0, height=4.2, share=False):
    """A grid of at most 3 columns holding n_panels axes (the spare ones hidden); (fig, axes)."""
    ncols = min(3, n_panels)
    nrows = int(np.ceil(n_panels / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             sharex=share, sharey=share)
    for ax in axes.ravel()[n_panels:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def panels(da: xr.DataArray, fixed):
    """(label, selection) per combination of the dims of da not in `fixed` (one panel if none)."""
    others = [d for d in da.dims if d not in fixed]
    for values in itertools.product(*[da[d].values for d in others]):
        sel = dict(zip(others, values))
        yield ", ".join(f"{k} = {v:g}" for k, v in sel.items()), sel


def facets(table: xr.Dataset, fixed):
    """(label, sub-table) per combination of the other grid axes of size > 1."""
    others = [dim for dim in table.n_traj.dims if dim not in fixed and table.sizes[dim] > 1]
    for values in itertools.product(*[table[dim].values for dim in others]):
        sel = dict(zip(others, values))
        label = ", ".join(f"{k} = {v:g}" for k, v in sel.items())
        yield label, table.sel(sel)


def with_dims(table: xr.Dataset, names) -> xr.Dataset:
    """Scalar coordinates (a fixed parameter) as length-1 dimensions, so one code path fits."""
    for name in names:
        if name not in table.dims:
            if name not in table.coords:
                raise ValueError(f"the table has no '{name}' coordinate (coords: {sorted(table.coords)}); "
                                 f"the plot needs '{name}' as a grid axis or a scalar coordinate")
            table = table.expand_dims(name)
    return table


def scalar(sub: xr.Dataset, name: str, default):
    """A parameter fixed on this panel: its scalar coordinate, else an attribute, else default."""
    if name in sub.coords and sub[name].size == 1:
        return sub[name].values.item()
    return sub.attrs.get(name, default)


def save(fig, path, title):
    """Title the figure (wrapped to its width), write it to `path` and close it; returns the path.
    With path None the figure is returned titled and open instead (a test reads back the numbers
    its axes draw, a notebook shows it): every `plot_*` of the report passes its path through."""
    # wrapped to the figure's width (about 13 characters per inch at 10 pt), never cut at its edges
    width = max(20, int(fig.get_figwidth() * 13))
    title = "\n".join(textwrap.fill(line, width) for line in str(title).splitlines())
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine, and with any engine set, savefig lays out
    # every text of the figure once more before drawing it: a third of its time, same pixels
    fig.set_layout_engine(None)
    if path is None:
        return fig
    fig.savefig(path, dpi=DPI, pil_kwargs=PNG)
    plt.close(fig)
    return str(path)
