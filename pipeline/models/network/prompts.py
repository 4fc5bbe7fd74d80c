"""The prompts of a network sweep: random token ids, or text (a file's lines, or the [RST] papers'
prompts shipped here) through a tokenizer, cut or padded to the cell's n (the papers padded
with zeros: the tokenizer's pad id here, 0 where it has none).

Trajectory j of a cell uses prompt line j modulo the number of lines; random prompts draw n ids
uniformly from the vocabulary with the trajectory's own Generator, so a prompt depends on
(seed, cell, j) alone, not on how the cell is partitioned.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["SHIPPED", "prompt_lines", "trajectory_index", "random_prompt", "text_prompt"]

# [RST] earlier version (shared/papers/004), Table 2: five sentences from the CSS magazine column
RST_TABLE2 = (
    "A few colleagues and I amused ourselves at a previous IEEE conference on Decision and Control "
    "(CDC) with having ChatGPT try to handle all sorts of things, including a failed attempt at "
    "having it find Lyapunov function.",
    "The instructions that we gave to ChatGPT were, \"Write a presidential column for the Control "
    "Systems Magazine on the future of control,\" and the resulting column is given verbatim here:",
    "Spearheaded by (CSS) Vice-President for Conference Activities Carolyn Beck and Prof. Philip E. "
    "Paré, we arrived at a temporary policy, for now, large-scale language models are not allowed "
    "as coauthors.",
    "Imagine the absurdity of having to agree that \"By uploading this manuscript, I certify that the "
    "computations in this submission are made by hand and no calculator was used to perform any of "
    "the computations.\"",
    "I have no doubt that our warning message will seem as quaint and obsolete as this statement "
    "about calculators within a few years.",
)
# the same paper, Table 3's prompt (decoded after 1, 5, 10, 100, 1000 passes)
RST_TABLE3 = (
    "After endless years lost in the shadows of Shakespeare's sonnets and the melancholic musings of "
    "Pessoa, I have glimpsed enlightenment's elusive light. Now, on the precipice of my final hour, "
    "as the weight of mortality presses upon me, I must reveal to you the one truth that transcends "
    "all others\u2014the meaning of life is...",
)
SHIPPED = {"rst_table2": RST_TABLE2, "rst_table3": RST_TABLE3}


def prompt_lines(prompts: str) -> tuple[str, ...]:
    """The text prompts a spec's `prompts` names: shipped ones, or a file's non-empty lines."""
    if prompts in SHIPPED:
        return SHIPPED[prompts]
    lines = tuple(line.strip() for line in Path(prompts).read_text(encoding="utf-8").splitlines())
    return tuple(line for line in lines if line)


def trajectory_index(rng: np.random.Generator) -> int:
    """The trajectory index j a Generator of `seeds.trajectory_rngs` was made for (its spawn key's
    last entry)."""
    return int(rng.bit_generator.seed_seq.spawn_key[-1])


def random_prompt(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    """n token ids drawn uniformly from range(vocab)."""
    return rng.integers(0, vocab, size=n, dtype=np.int64)


def text_prompt(tokenizer, line: str, n: int) -> np.ndarray:
    """The ids of `line` (the tokenizer's special tokens included), cut or padded to n."""
    ids = list(tokenizer(line)["input_ids"])[:n]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return np.asarray(ids + [pad] * (n - len(ids)), dtype=np.int64)
