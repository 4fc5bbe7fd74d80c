"""What several built-in plug-ins share: the kernels' time arguments, the two-token closed form's
applicability, and the grid coordinates of one cell as kernel arguments."""

from __future__ import annotations

import numpy as np

from ..spec import SweepBase

CLOSED_FORM_ATTENTIONS = ("sa", "usa")  # the two-token and equiangular closed forms (Q = K = I)


def time_arguments(sweep: SweepBase) -> dict:
    """T, layers, checkpoint layer counts and the clustering threshold, as every kernel takes them."""
    return {
        "T": sweep.time.T,
        "layers": sweep.time.layers,
        "checkpoint_layers": np.asarray(sweep.time.checkpoint_layers, dtype=np.int64),
        "eps": sweep.eps,
    }


def sphere_cell(coords: dict) -> dict:
    """The (n, d, beta) of a cell as the kernels take them."""
    return {"n": int(coords["n"]), "d": int(coords["d"]), "beta": float(coords["beta"])}


def two_token_cells(cells: dict, fill: float = np.nan):
    """(beta, d, n, mask) broadcast over the cells; mask: where a two-token closed form may apply."""
    beta = np.asarray(cells["beta"], float)
    d, n = np.broadcast_arrays(beta, np.asarray(cells["d"]), np.asarray(cells.get("n", 2)))[1:]
    mask = (n == 2) & (d >= 2) & ~np.isnan(beta)
    return beta, d, n, mask
