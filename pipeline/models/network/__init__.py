"""Plug-in: real networks built with `transformers` (docs/models.md section 12), layer by layer.

A GPT-2, GPT-Neo, BERT or ALBERT (a config with random weights, or a checkpoint folder such as the
packaged trained MiniLM) run on prompts, its outputs fed back for more passes; per layer the
tokens' overlaps, [RST]'s E(t), clusters, ranks and the attention's Booleanness, per weight set
the heads' value spectra. torch and transformers are imported only when a partition runs
(`build.import_libraries`, the Hub offline); the spec is checked without them (`spec`).
"""

from __future__ import annotations

from ...plugin import Model
from .measures import OUTPUTS
from .spec import NetworkSweep

__all__ = ["model", "NetworkSweep"]


class Network(Model):
    name = "network"
    summary = ("a real Transformer (transformers: GPT-2, GPT-Neo, BERT, ALBERT; random or trained "
               "weights) run layer by layer, its outputs fed back pass after pass")
    spec = NetworkSweep
    outputs = OUTPUTS
    report_facts = ("architecture", "size", "weights", "law", "random_init", "feed_forward", "norm",
                    "passes", "final_norm_between_passes", "prompts", "device")

    def simulate(self, sweep, coords, rngs):
        from .forward import simulate_network  # torch and transformers: imported here, lazily

        return simulate_network(sweep, coords, rngs)

    def local_problem(self, sweep):
        if sweep.device == "cuda":
            from .build import import_libraries

            torch, _ = import_libraries()
            if not torch.cuda.is_available():
                return "device: cuda, but this machine's torch sees no GPU: set device: cpu"
        return None

    def sections(self, sweep):
        from ...report.network import network_section  # matplotlib, scipy: where a report is drawn
        from ...report.network_theory import stochastic_section
        from ...report.network_tokens import decoded_section

        return [network_section, stochastic_section, decoded_section]


model = Network()
