"""A network as a sweep asks for it: built with `transformers` (imported here, lazily, with the Hub
offline: nothing reaches for the network), its weights drawn by the spec's law, then modified.

Weights (`law`): `pretrained` loads the checkpoint folder; `random` draws once per cell (the
architecture's own initialisation, or every weight matrix N(0, scale^2) with `random_init:
gaussian`, biases and LayerNorm affine as the architecture initialises them); `resampled` draws
afresh before every pass. A draw is seeded by (spec seed, weights_seed, pass) only, so every
partition of a cell sees the same weights.

Modifications, in this order after every draw: `feed_forward: false` zeroes the feed-forward's
output projection (the sublayer then adds nothing to its residual); `norm: sphere` replaces every
LayerNorm by the projection on the sphere of radius sqrt(d) (RMSNorm without affine:
x sqrt(d) / |x|); beta != 1 multiplies the query projection (weight and bias), so every attention
logit is multiplied by beta.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .spec import EXTRA_HINT, NetworkSweep, weights_folder

__all__ = ["import_libraries", "Parts", "parts_of", "Network", "build_network"]

# per architecture: the class of one layer, and the parameter names (relative to a layer) of the
# query, value and output projections, the feed-forward's output projection; whether its
# linear maps are Conv1D (y = x W) rather than Linear (y = x W^T); the final LayerNorm
ADAPTERS = {
    "gpt2": dict(layer="GPT2Block", query="attn.c_attn", value="attn.c_attn", out="attn.c_proj",
                 ff_out="mlp.c_proj", conv1d=True, final="ln_f"),
    "gpt_neo": dict(layer="GPTNeoBlock", query="attn.attention.q_proj", value="attn.attention.v_proj",
                    out="attn.attention.out_proj", ff_out="mlp.c_proj", conv1d=False, final="ln_f"),
    "bert": dict(layer="BertLayer", query="attention.self.query", value="attention.self.value",
                 out="attention.output.dense", ff_out="output.dense", conv1d=False, final=None),
    "albert": dict(layer="AlbertLayer", query="attention.query", value="attention.value",
                   out="attention.dense", ff_out="ffn_output", conv1d=False, final=None),
}


def import_libraries():
    """(torch, transformers), the Hub kept offline; RuntimeError naming the extra when missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers
    except ImportError as err:
        raise RuntimeError(f"model network: {err}: {EXTRA_HINT}") from None
    transformers.utils.logging.disable_progress_bar()  # no bar per checkpoint loaded in a worker's log
    return torch, transformers


@dataclass
class Parts:
    """The modules of one built network a sweep touches."""

    layers: list  # the layer modules, in the order they run (ALBERT: its shared layers)
    final: object  # the final LayerNorm, or None
    query: list  # per layer: the query projection module
    value: list
    out: list
    ff_out: list
    conv1d: bool


def _get(module, dotted: str):
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def parts_of(model, architecture: str) -> Parts:
    """The layers and projections of a built `transformers` model of `architecture`."""
    a = ADAPTERS[architecture]
    layers = [m for m in model.modules() if type(m).__name__ == a["layer"]]
    final = _get(model, a["final"]) if a["final"] else None
    return Parts(layers, final, *([_get(layer, a[k]) for layer in layers] for k in ("query", "value", "out", "ff_out")),
                 a["conv1d"])


@dataclass
class Network:
    """A built model, its parts, and what a sweep needs to rebuild its weights per pass."""

    model: object
    parts: Parts
    architecture: str
    config: object
    torch: object
    transformers: object
    device: str


def _config(sweep: NetworkSweep, transformers):
    architecture, _, fields = NetworkSweep.resolve(sweep.model_dump(
        include={"weights", "architecture", "size", "config"}))
    fields = {k: v for k, v in fields.items() if k not in ("model_type", "architectures", "transformers_version",
                                                           "_name_or_path")}
    config = transformers.AutoConfig.for_model(architecture, **fields)
    config._attn_implementation = "eager"  # attention weights are an output
    return architecture, config


def build_network(sweep: NetworkSweep, weights_seed: int, scale: float, beta: float) -> Network:
    """The network of one cell at pass 0 (`draw` redraws it for a later pass)."""
    torch, transformers = import_libraries()
    architecture, config = _config(sweep, transformers)
    if sweep.law == "pretrained":
        model = transformers.AutoModel.from_pretrained(weights_folder(sweep.weights), config=config,
                                                       attn_implementation="eager")
    else:
        model = _random_model(config, weight_seed(sweep, weights_seed, 0), torch, transformers)
    model = model.to(torch.float32).eval()
    if sweep.norm == "sphere":
        _sphere_norms(model, torch)
    net = Network(model, parts_of(model, architecture), architecture, config, torch, transformers, sweep.device)
    draw(net, sweep, weights_seed, scale, beta, 0, first=True)
    model.to(sweep.device)
    return net


def _random_model(config, seed: int, torch, transformers):
    """The architecture's own random initialisation under torch seed `seed` (global RNG kept)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.AutoModel.from_config(config, attn_implementation="eager").to(torch.float32)


def weight_seed(sweep: NetworkSweep, weights_seed: int, pass_index: int) -> int:
    """The torch seed of the weights of (cell's weights_seed, pass): the same in every partition."""
    words = np.random.SeedSequence([sweep.seed, weights_seed, pass_index]).generate_state(2, np.uint32)
    return (int(words[0]) | (int(words[1]) << 32)) >> 1  # 63 bits


def draw(net: Network, sweep: NetworkSweep, weights_seed: int, scale: float, beta: float,
         pass_index: int, first: bool = False) -> None:
    """Set the weights of `pass_index` (redrawn for `resampled`; Gaussian ones for random_init:
    gaussian), then apply the spec's modifications. A no-op after the first pass unless resampled."""
    torch = net.torch
    if not first and sweep.law != "resampled":
        return
    with torch.no_grad():
        if sweep.law != "pretrained":
            seed = weight_seed(sweep, weights_seed, pass_index)
            if sweep.random_init == "gaussian":
                generator = torch.Generator(device="cpu").manual_seed(seed)
                for _, p in net.model.named_parameters():
                    if p.ndim >= 2:
                        p.copy_(torch.normal(0.0, scale, p.shape, generator=generator).to(p.device))
            elif not first:  # the architecture's own initialisation, redrawn: a fresh model's weights
                fresh = _random_model(net.config, seed, torch, net.transformers)
                net.model.load_state_dict(fresh.state_dict(), strict=False)  # RMSNorm has none
        parts = net.parts
        if not sweep.feed_forward:
            for proj in parts.ff_out:
                proj.weight.zero_()
                if proj.bias is not None:
                    proj.bias.zero_()
        if beta != 1.0:
            width = net.config.hidden_size
            for proj in dict.fromkeys(parts.query):  # ALBERT's shared layer once
                if parts.conv1d:  # fused q, k, v: the first `width` outputs are the query
                    proj.weight[:, :width] *= beta
                    proj.bias[:width] *= beta
                else:
                    proj.weight *= beta
                    if proj.bias is not None:
                        proj.bias *= beta


def _sphere_norms(model, torch) -> None:
    """Replace every LayerNorm by x sqrt(d) / |x| (torch's RMSNorm without affine)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.LayerNorm):
                setattr(parent, name, torch.nn.RMSNorm(child.normalized_shape, eps=child.eps,
                                                       elementwise_affine=False))


def value_matrices(net: Network) -> list[np.ndarray]:
    """Per layer, the heads' value circuits W_V[h] W_O[:, h] (heads x dh x dh, float64): their
    eigenvalues are the nonzero ones of the d x d value matrix W_O[:, h] W_V[h] of head h."""
    parts, width = net.parts, net.config.hidden_size
    heads = net.config.num_attention_heads
    dh = width // heads
    out = []
    for value, proj in zip(parts.value, parts.out):
        wv = value.weight.detach().double().cpu().numpy()
        wo = proj.weight.detach().double().cpu().numpy()
        if parts.conv1d:  # y = x W: as Linear's (out, in)
            wv, wo = wv[:, 2 * width:].T, wo.T
        wv = wv.reshape(heads, dh, width)  # (h, dh, d): rows of W_V per head
        wo = wo.reshape(width, heads, dh).transpose(1, 0, 2)  # (h, d, dh): columns of W_O per head
        out.append(np.einsum("hid,hdj->hij", wv, wo))
    return out
