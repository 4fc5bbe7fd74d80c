"""What several built-in plug-ins share: the kernels' time arguments, the two-token closed form's
applicability, the grid coordinates of one cell and the starts as kernel arguments."""

from __future__ import annotations

import numpy as np

from ..spec.base import SweepBase
from ..spec.starts import drawn_by_kernel, starts_of

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


def start_argument(sweep: SweepBase, coords: dict, rngs) -> dict:
    """{} where the kernel draws its uniform start itself, else {"x0": the partition's starts}
    (`pipeline/spec/starts.py`), drawn first from each trajectory's Generator."""
    return {} if drawn_by_kernel(sweep.init) else {"x0": starts_of(sweep, coords, rngs)}
