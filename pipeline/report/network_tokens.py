"""Report section of a network cube: the decoded tokens after chosen passes ([RST] Table 3).

The cube's `decoded` ids (`models.network.decode`: the language-model head's argmax for GPT-2 and
GPT-Neo, the nearest input word embedding for encoders without a head) become text through the
spec's tokenizer (`tokenizer:`, else the checkpoint folder's own `tokenizer.json`, read with the
`tokenizers` library); without one the ids are shown as they are, and the section says so.
"""

from __future__ import annotations

import numpy as np

from ..models.network.decode import METHODS, decode_method
from ..models.network.spec import NetworkSweep, weights_folder
from ..plugin import Part, ReportInput
from .tables import fmt, rows_table

__all__ = ["decoded_section", "decoded_rows", "load_tokenizer"]

SHOWN = 12  # tokens per row


def load_tokenizer(sweep: NetworkSweep):
    """(tokenizers.Tokenizer or None, why none)."""
    name = sweep.tokenizer or sweep.weights
    if name is None:
        return None, "the network is built from a config with no tokenizer (give `tokenizer:` for words)"
    path = weights_folder(name) / "tokenizer.json"
    if not path.is_file():
        return None, f"{path.parent} has no tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None, "the `tokenizers` library is not installed"
    return Tokenizer.from_file(str(path)), ""


def token_text(tokenizer, i: int) -> str:
    """The tokenizer's entry for id i, or the id itself (no tokenizer, or beyond its vocabulary)."""
    word = tokenizer.id_to_token(int(i)) if tokenizer is not None else None
    return f"#{int(i)}" if word is None else word.replace("|", "\\|")


def decoded_rows(ds, passes, tokenizer, shown: int = SHOWN) -> list[list[str]]:
    """Per decoded pass: the pass, the first `shown` tokens of the first cell's first prompt, and
    the mean over that cell's prompts of the number of distinct tokens (of the prompt's n)."""
    sub = ds["decoded"].isel({d: 0 for d in ds["decoded"].dims if d not in ("traj", "decode_pass", "position")})
    ids = np.asarray(sub.transpose("traj", "decode_pass", "position").values)
    rows = []
    for k, p in enumerate(passes):
        first = ids[0, k][ids[0, k] >= 0]
        distinct = np.mean([len(np.unique(row[row >= 0])) for row in ids[:, k]])
        rows.append([f"{p} (prompt)" if p == 0 else str(p), " ".join(token_text(tokenizer, i) for i in first[:shown]),
                     f"{fmt(float(distinct), 1)} of {len(first)}"])
    return rows


def decoded_section(report: ReportInput) -> Part:
    ds, sweep = report.ds, report.sweep
    if "decoded" not in ds:
        return Part([], {})
    architecture = NetworkSweep.resolve(sweep.model_dump(include={"weights", "architecture", "size", "config"}))[0]
    method = decode_method(architecture)
    tokenizer, why = load_tokenizer(sweep)
    vocab = sweep.shape.vocab
    note = (f"Token ids shown as #id: {why}." if tokenizer is None else
            f"Words from the tokenizer of {sweep.tokenizer or sweep.weights}"
            + ("." if tokenizer.get_vocab_size() == vocab else
               f"; its vocabulary ({tokenizer.get_vocab_size()}) is not the network's ({vocab}): the words are "
               "the tokenizer's entries at the network's ids, not words the network was trained on."))
    cell = ", ".join(f"{d} = {ds[d].values[0]:g}" for d in ds["decoded"].dims
                     if d not in ("traj", "decode_pass", "position"))
    lines = ["## Decoded tokens after chosen passes", "",
             f"[RST] Table 3: the tokens the last layer's output decodes to after each pass ({method}: "
             f"{METHODS[method]}), the first {SHOWN} of the first prompt of the first cell ({cell}); pass 0 is "
             f"the prompt. Distinct: tokens of the prompt's n that differ, mean over the cell's prompts "
             f"(1: every position decodes to one token). {note}", "",
             rows_table(["pass", f"first {SHOWN} tokens", "distinct"],
                        decoded_rows(ds, sweep.kept_decode_passes, tokenizer)), ""]
    return Part(lines, {})
