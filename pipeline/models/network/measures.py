"""What one layer's tokens and attention show, in numpy: the outputs of a network sweep per
checkpoint ([GLPR-P] Fig. 1's overlap histogram, [RST]'s two E(t), clusters, effective rank,
[GLPR-E]'s Boolean attention) and, per weight set, the heads' value spectra ([GLPR-E] Fig. 10).

Overlaps are cosines <y_i, y_j> / (|y_i| |y_j|) of the hidden states y (a LayerNorm's output is
not on a sphere; the cosine is what the papers plot).

>>> y = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
>>> m = layer_measures(y, np.eye(3)[None], eps=1e-3, edges=np.linspace(-1, 1, 5), rank_tol=1e-3)
>>> m["mean_overlap"], m["n_clusters"], m["energy"], m["attention_max"], m["attention_rank"]
(0.3333333333333333, 2, 0.33333333333333337, 1.0, 3.0)
"""

from __future__ import annotations

import numpy as np

from ....kernels.vocabulary import OutputSpec

__all__ = ["OUTPUTS", "PER_LAYER", "layer_measures", "value_spectra"]

PER_LAYER = {
    "mean_overlap": "mean pairwise cosine <y_i, y_j> over i < j",
    "overlap_min": "minimum pairwise cosine over i < j",
    "overlap_max": "maximum pairwise cosine over i < j",
    "energy": "E = 1 - mean_i cos(y_1, y_i) ([RST] later version)",
    "abs_cos_first": "mean_i |cos(y_1, y_i)| ([RST] earlier version)",
    "effective_rank": "exp(entropy of the normalised singular values) of the unit tokens",
    "attention_max": "mean over heads and rows of the largest attention weight (1: Boolean)",
    "attention_rank": "mean over heads of the attention matrix's numerical rank",
}
OUTPUTS = {
    **{name: OutputSpec(True, "float32", text, "1") for name, text in PER_LAYER.items()},
    "n_clusters": OutputSpec(True, "int16", "number of clusters (components of the graph cosine >= 1 - eps)",
                             "1", missing=-1),
    "overlap_hist": OutputSpec(True, "int32", "number of token pairs i < j with cosine in the bin", "1",
                               missing=-1, extra_dims=("bin",)),
    "start_overlap": OutputSpec(False, "float32", "mean pairwise cosine of the embedding output (layer 0)", "1"),
    "value_lead_re": OutputSpec(False, "float32", "real part of the leading (largest modulus) eigenvalue "
                                "of the head's value matrix, pass 1's weights", "1", extra_dims=("head",)),
    "value_lead_im": OutputSpec(False, "float32", "imaginary part of that eigenvalue (>= 0)", "1",
                                extra_dims=("head",)),
    "value_gap": OutputSpec(False, "float32", "modulus gap 1 - |lambda_2| / |lambda_1| of the head's value "
                            "matrix", "1", extra_dims=("head",)),
    "decoded": OutputSpec(False, "int32", "token id the final hidden state decodes to after the pass "
                          "(decode_passes; 0: the prompt) at each position ([RST] Table 3; `decode`); -1 past "
                          "the prompt", "1", missing=-1, extra_dims=("decode_pass", "position")),
}


def cosines(y: np.ndarray) -> np.ndarray:
    """The n x n matrix of cosines of the rows of y."""
    u = y / np.linalg.norm(y, axis=1, keepdims=True)
    return u @ u.T


def layer_measures(y: np.ndarray, attention: np.ndarray, *, eps: float, edges: np.ndarray,
                   rank_tol: float) -> dict:
    """The per-layer outputs of tokens y (n x d) and attention weights (heads x n x n)."""
    from scipy.sparse.csgraph import connected_components  # here: the registry imports OUTPUTS

    y = np.asarray(y, dtype=np.float64)
    g = cosines(y)
    pairs = g[np.triu_indices(len(y), 1)]
    _, labels = connected_components(g >= 1 - eps, directed=False)
    s = np.linalg.svd(y / np.linalg.norm(y, axis=1, keepdims=True), compute_uv=False)
    p = s[s > 0] / s.sum()
    a = np.asarray(attention, dtype=np.float64)
    return {
        "mean_overlap": float(pairs.mean()), "overlap_min": float(pairs.min()),
        "overlap_max": float(pairs.max()), "energy": float(1 - g[0].mean()),
        "abs_cos_first": float(np.abs(g[0]).mean()), "effective_rank": float(np.exp(-(p * np.log(p)).sum())),
        "attention_max": float(a.max(axis=-1).mean()),
        "attention_rank": float(np.linalg.matrix_rank(a, rtol=rank_tol).mean()),
        "n_clusters": int(labels.max() + 1),
        "overlap_hist": np.histogram(np.clip(pairs, -1, 1), bins=edges)[0],
    }


def start_overlap(y: np.ndarray) -> float:
    g = cosines(np.asarray(y, dtype=np.float64))
    return float(g[np.triu_indices(len(g), 1)].mean())


def value_spectra(circuits: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per head (layers x heads, flattened): the leading eigenvalue of each value circuit (real and
    imaginary part, the latter >= 0: a complex pair's upper member) and its modulus gap."""
    lead_re, lead_im, gap = [], [], []
    for layer in circuits:
        for m in layer:
            ev = np.linalg.eigvals(m)
            ev = ev[np.lexsort((-ev.imag, -np.abs(ev)))]  # by modulus, then the upper of a pair
            lead_re.append(ev[0].real)
            lead_im.append(abs(ev[0].imag))
            gap.append(1 - abs(ev[1]) / abs(ev[0]) if len(ev) > 1 and abs(ev[0]) > 0 else np.nan)
    return {k: np.asarray(v, dtype=np.float32) for k, v in
            (("value_lead_re", lead_re), ("value_lead_im", lead_im), ("value_gap", gap))}
