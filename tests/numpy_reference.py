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


def ref_log_boolean_defect(logits):
    """log D of the attention matrix softmax(logits) (n, n), by logsumexp rather than the kernel's
    loop: delta_i = 1 - max_j P_ij = sum over the row's non-leaders, D the second largest delta_i
    (the set of [GLPR-E] Fig. 2 leaves one row free); -inf for n = 1."""
    from scipy.special import logsumexp

    logits = np.asarray(logits, dtype=np.float64)
    n = logits.shape[0]
    if n < 2:
        return -np.inf
    lead = logits.argmax(axis=1)
    off = np.where(np.arange(n)[None, :] == lead[:, None], -np.inf, logits)
    log_delta = logsumexp(off, axis=1) - logsumexp(logits, axis=1)
    return np.sort(log_delta)[-2]
