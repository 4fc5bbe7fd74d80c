"""One partition of a network sweep: its prompts through the cell's network, pass after pass, the
hidden states of every layer caught by forward hooks on the layer modules (the raw output of each
layer, before any final LayerNorm), the attention weights from `transformers`' own output.

A pass after the first feeds the last layer's output back as `inputs_embeds` (the embedding layer
then adds its position embeddings again, as the [RST] scripts' calls do), after the final
LayerNorm where the model has one and `final_norm_between_passes` is set. Every prompt runs alone
(batch of one), so its numbers do not depend on which prompts share its partition. After each pass
in `decode_passes` the last layer's output is decoded to token ids (`decode`).
"""

from __future__ import annotations

import numpy as np

from .build import build_network, draw, value_matrices
from .decode import decode_ids
from .measures import OUTPUTS, layer_measures, start_overlap, value_spectra
from .prompts import prompt_lines, random_prompt, text_prompt, trajectory_index
from .spec import NetworkSweep, weights_folder

__all__ = ["simulate_network", "prompt_ids"]


def prompt_ids(sweep: NetworkSweep, n: int, rngs: list, tokenizer_factory) -> list[np.ndarray]:
    """The token ids of each trajectory's prompt (`prompts` module)."""
    if sweep.prompts == "random":
        return [random_prompt(rng, n, sweep.shape.vocab) for rng in rngs]
    lines = prompt_lines(sweep.prompts)
    tokenizer = tokenizer_factory(str(weights_folder(sweep.tokenizer or sweep.weights)))
    ids = [text_prompt(tokenizer, lines[trajectory_index(rng) % len(lines)], n) for rng in rngs]
    too_large = [int(i.max()) for i in ids if i.max() >= sweep.shape.vocab]
    if too_large:
        raise ValueError(f"tokenizer: gives id {too_large[0]}, beyond the network's vocabulary of "
                         f"{sweep.shape.vocab}: use the network's own tokenizer")
    return ids


def simulate_network(sweep: NetworkSweep, coords: dict, rngs: list) -> dict[str, np.ndarray]:
    """The declared outputs (`measures.OUTPUTS`) of the trajectories (prompts) of one cell."""
    n, beta = int(coords["n"]), float(coords["beta"])
    scale, weights_seed = float(coords["scale"]), int(coords["weights_seed"])
    net = build_network(sweep, weights_seed, scale, beta)
    torch, model, parts = net.torch, net.model, net.parts
    layers = sweep.shape.layers
    checkpoints = {layer: k for k, layer in enumerate(sweep.time.checkpoint_layers)}
    ntraj, nt = len(rngs), len(checkpoints)
    edges = np.linspace(-1.0, 1.0, sweep.record_bins + 1)
    out = {name: np.full((ntraj, nt) if spec.per_checkpoint else (ntraj,), spec.missing, dtype=spec.dtype)
           for name, spec in OUTPUTS.items() if not spec.extra_dims}
    out["overlap_hist"] = np.full((ntraj, nt, sweep.record_bins), -1, dtype=np.int32)
    spectra = value_spectra(value_matrices(net))
    out.update({k: np.broadcast_to(v, (ntraj, v.size)).copy() for k, v in spectra.items()})

    ids = prompt_ids(sweep, n, rngs, net.transformers.AutoTokenizer.from_pretrained)
    decoded = {p: k for k, p in enumerate(sweep.kept_decode_passes)}  # pass -> index in `decoded`
    out["decoded"] = np.full((ntraj, len(decoded), max(sweep.grid.n)), -1, dtype=np.int32)
    if 0 in decoded:
        out["decoded"][:, decoded[0], :n] = ids
    caught: list = []
    hooks = [layer.register_forward_hook(lambda _m, _a, o: caught.append(o[0] if isinstance(o, tuple) else o))
             for layer in dict.fromkeys(parts.layers)]
    states: list = [None] * ntraj
    try:
        with torch.no_grad():
            for p in range(sweep.passes):
                draw(net, sweep, weights_seed, scale, beta, p)
                for j in range(ntraj):
                    caught.clear()
                    if p == 0:
                        r = model(input_ids=torch.as_tensor(ids[j][None], device=net.device),
                                  output_attentions=True, output_hidden_states=True)
                        out["start_overlap"][j] = start_overlap(r.hidden_states[0][0].float().cpu().numpy())
                    else:
                        r = model(inputs_embeds=states[j], output_attentions=True)
                    for layer in range(layers):
                        k = checkpoints.get(p * layers + layer + 1)
                        if k is None:
                            continue
                        m = layer_measures(caught[layer][0].float().cpu().numpy(),
                                           r.attentions[layer][0].float().cpu().numpy(), eps=sweep.eps,
                                           edges=edges, rank_tol=sweep.rank_tol)
                        for name, value in m.items():
                            out[name][j, k] = value
                    last = caught[layers - 1]
                    if p + 1 in decoded:
                        out["decoded"][j, decoded[p + 1], :n] = decode_ids(net, last[0])
                    if sweep.final_norm_between_passes and parts.final is not None:
                        last = parts.final(last)
                    states[j] = last
    finally:
        for hook in hooks:
            hook.remove()
    return out
