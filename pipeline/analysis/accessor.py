"""``ds.tokensweep``: the common reductions of a cube, one call each, for notebooks and scripts.

Registered as an xarray Dataset accessor when ``tokensweep`` is imported. It works on a cube
opened by ``tokensweep.open`` (masked, squeezed) or by ``xr.open_zarr``: every reduction counts
only trajectories of done partitions that stayed finite (`stats.done_finite`), so a half-done
cube gives the statistics of its done part, never fill values.

::

    import tokensweep
    ds = tokensweep.open("quickstart")
    p = ds.tokensweep.probability("antipodal")   # p, lo, hi, k, N per cell (Wilson 95 %)
    p.p.plot.line(x="beta", hue="d")
    ds.tokensweep.agreement().to_dataframe()     # the report's table, with `agrees`

Only xarray is imported here: the analysis modules (scipy) load on first use, so that
``import tokensweep`` stays light.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

__all__ = ["TokensweepAccessor", "CLASSES"]

# cluster_class flag values by name (kernels/vocabulary.py), and the antipodal table's count of each
CLASSES = {"unresolved": (0, "n_unresolved"), "single": (1, "n_single"), "antipodal": (2, "n_antipodal")}


@xr.register_dataset_accessor("tokensweep")
class TokensweepAccessor:
    """Reductions of a tokensweep cube (see the module docstring)."""

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def spec(self):
        """The typed spec the cube was written with (None for a Dataset without one)."""
        from .stats import stored_spec

        return stored_spec(self._ds)

    @property
    def pending(self) -> int:
        """Trajectories of partitions not done: left out of every reduction."""
        from .stats import pending_count

        return pending_count(self._ds)

    def probability(self, cls: str = "antipodal", t=None, level: float = 0.95) -> xr.Dataset:
        """P(cluster class `cls`) per grid cell at checkpoint `t` (nearest; default the last).

        Returns p = k / N with its Wilson `level` interval [lo, hi], k the trajectories of that
        class and N the finite trajectories of done partitions with a class, over the grid axes.
        """
        from .antipodal import antipodal_table
        from .stats import wilson_interval

        if cls not in CLASSES:
            raise ValueError(f"cls={cls!r}: choose one of {', '.join(CLASSES)}")
        table = antipodal_table(self._ds, t=t, level=level, theory=lambda cells: np.nan)
        k, N = table[CLASSES[cls][1]], table.n_traj
        with np.errstate(invalid="ignore", divide="ignore"):
            p = k / N.where(N > 0)
        lo, hi = wilson_interval(k, N, level)
        out = xr.Dataset({"p": p, "lo": N.copy(data=lo), "hi": N.copy(data=hi), "k": k, "N": N})
        for name, text in [("p", f"P({cls})"), ("lo", f"Wilson {level:.0%} lower bound"),
                           ("hi", f"Wilson {level:.0%} upper bound"), ("k", f"trajectories {cls}"),
                           ("N", "finite trajectories of done partitions")]:
            out[name].attrs = {"long_name": text, "units": "1"}
        out.attrs = {"class": cls, "level": level, "t": table.attrs.get("t", np.nan)}
        return out

    def theory(self) -> xr.DataArray:
        """The model's closed-form P(antipodal) per grid cell; NaN where it has none."""
        from .stats import cells_of, closed_form, grid_dims

        dims = grid_dims(self._ds)
        like = xr.DataArray(np.zeros([self._ds.sizes[d] for d in dims]), dims=dims,
                            coords={d: self._ds[d] for d in dims})
        spec = self.spec
        names = list(spec.axes) if spec is not None else dims
        form = closed_form(self._ds, "antipodal_probability")
        values = np.nan if form is None else form(cells_of(self._ds, names, like))
        out = like.copy(data=np.broadcast_to(np.asarray(values, float), like.shape).copy())
        for name in names:  # squeezed axes stay as scalar coordinates
            if name in self._ds.coords and name not in dims:
                out.coords[name] = self._ds[name]
        out.attrs = {"long_name": "closed-form P(antipodal)", "units": "1"}
        return out.rename("theory")

    def agreement(self, level: float = 0.99, widen: float = 0.01) -> xr.Dataset:
        """The antipodal table (counts, p, Wilson `level` interval, theory, z) with `agrees`:
        the theory lies in the interval widened by `widen` (the O(h) step bias) on each side;
        `agrees_t` the same for the theory at the checkpoint (theory_t, docs/models.md 4.5)."""
        from .antipodal import agrees, antipodal_table

        table = antipodal_table(self._ds, level=level)
        table["agrees"] = agrees(table, level, widen)
        table["agrees"].attrs = {"long_name": f"theory within the {level:.0%} interval ± {widen}"}
        table["agrees_t"] = agrees(table, level, widen, "theory_t")  # the theory at the checkpoint
        table["agrees_t"].attrs = {"long_name": f"theory at t within the {level:.0%} interval ± {widen}"}
        return table

    def cluster_counts(self) -> xr.Dataset:
        """Number of clusters over time per grid cell: mean, min, max over counted trajectories,
        and how many trajectories count (N), over (grid..., t)."""
        from .stats import done_finite

        n = self._ds["n_clusters"]
        keep = done_finite(self._ds, n.isel(t=0, drop=True))
        kept = n.where(keep)
        out = xr.Dataset({"mean": kept.mean("traj"), "min": kept.min("traj"), "max": kept.max("traj"),
                          "N": keep.sum("traj").broadcast_like(kept.isel(traj=0, drop=True))}).compute()
        for name, text in [("mean", "mean number of clusters"), ("min", "fewest clusters"),
                           ("max", "most clusters"), ("N", "finite trajectories of done partitions")]:
            out[name].attrs = {"long_name": text, "units": "1"}
        return out
