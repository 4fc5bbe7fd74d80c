"""Plain-numpy references shared by the kernel tests (no numba): the same arithmetic, vectorised."""

import numpy as np


def ref_attention(x, beta, kind):
    """(ahat (n, d), logscale (n,)) with A_i = exp(logscale_i) ahat_i."""
    n = x.shape[0]
    s = beta * x @ x.T
    if kind == "causal_sa":
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    m = s.max(axis=1)
    w = np.exp(s - m[:, None])
    ahat = w @ x
    if kind == "usa":
        return ahat, m - np.log(n)
    return ahat / w.sum(axis=1, keepdims=True), np.zeros(n)
