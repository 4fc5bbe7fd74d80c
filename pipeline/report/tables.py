"""The table toolkit every report section writes its markdown tables with: number formatting,
the row order of grid cells and the rows themselves.

A leaf of the report package: the sections (`antipodal`, `clustering`, ...) import it, and the
page composer (`page`) imports the sections; nothing here imports a section or the page.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

__all__ = ["fmt", "row_order", "rows_table", "cell_rows"]


def fmt(x, digits=4) -> str:
    """A number for a table cell; an em dash for None, NaN or inf.

    >>> fmt(0.10876), fmt(float("nan")), fmt(2.0, 2)
    ('0.1088', '—', '2.00')
    """
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def row_order(dims) -> list[str]:
    """Grid dimensions, d first and beta last, so that rows read d then (...) then beta.

    >>> row_order(["beta", "n", "d"])
    ['d', 'n', 'beta']
    """
    dims = list(dims)
    return [x for x in ["d"] if x in dims] + [x for x in dims if x not in ("d", "beta")] + \
        [x for x in ["beta"] if x in dims]


def rows_table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table from a header and rows of already formatted cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def cell_rows(da: xr.DataArray, dims):
    """(coordinate labels, index dict) over every cell of the given dims, in C order."""
    for idx in np.ndindex(*[da.sizes[d] for d in dims]):
        sel = dict(zip(dims, idx))
        yield [f"{da[d].values[i]:g}" for d, i in sel.items()], sel
