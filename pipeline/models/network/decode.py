"""The tokens a network's hidden states decode to ([RST] Table 3: the tokens after 1, 5, 10, 100,
1000 passes).

Two ways, by architecture (`METHODS`):

* `lm_head` (GPT-2, GPT-Neo: their language-model head is the word embedding, tied): argmax over
  the vocabulary of the head's logits ln_f(y) W_E^T at every position, as
  `GPT2LMHeadModel(...).logits.argmax(-1)` gives them (y: the last layer's raw output);
* `nearest_embedding` (BERT, ALBERT: encoders without a head): the input word embedding nearest to
  each final hidden state by cosine (ALBERT's embeddings taken through its
  embedding_hidden_mapping_in, the width the layers see).

Ids only; the report turns them into text with a tokenizer where the spec has one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["METHODS", "decode_method", "nearest_embedding", "decode_ids"]

METHODS = {
    "lm_head": "argmax of the language-model head's logits (the tied word embeddings after the final LayerNorm)",
    "nearest_embedding": "the input word embedding nearest to each final hidden state (cosine); "
                         "the encoder has no language-model head",
}
BY_ARCHITECTURE = {"gpt2": "lm_head", "gpt_neo": "lm_head", "bert": "nearest_embedding",
                   "albert": "nearest_embedding"}


def decode_method(architecture: str) -> str:
    """`lm_head` or `nearest_embedding` (module docstring) for an architecture."""
    return BY_ARCHITECTURE[architecture]


def nearest_embedding(hidden, embeddings):
    """Per row of `hidden` (n x d torch tensor), the index of the row of `embeddings` (V x d) with
    the largest cosine (a zero row, such as BERT's padding embedding, has cosine 0 with all)."""
    from torch.nn.functional import normalize

    return (normalize(hidden, dim=-1) @ normalize(embeddings, dim=-1).T).argmax(dim=-1)


def decode_ids(net, hidden) -> np.ndarray:
    """The decoded token ids (int32) of one prompt's last-layer output `hidden` (n x d tensor) in
    the built network `net` (`build.Network`)."""
    model, torch = net.model, net.torch
    embeddings = model.get_input_embeddings().weight
    with torch.no_grad():
        if decode_method(net.architecture) == "lm_head":
            y = net.parts.final(hidden) if net.parts.final is not None else hidden
            ids = (y @ embeddings.T).argmax(dim=-1)
        else:
            if net.architecture == "albert":
                embeddings = model.encoder.embedding_hidden_mapping_in(embeddings)
            ids = nearest_embedding(hidden, embeddings)
    return ids.cpu().numpy().astype(np.int32)
