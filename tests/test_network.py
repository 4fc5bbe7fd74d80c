"""The network plug-in (pipeline/models/network/): tiny GPT-2 and BERT checkpoints written with
save_pretrained and loaded as a user's checkpoint, checked against transformers' own forward pass
layer by layer; the same numbers however a cell is partitioned; beta against transformers' own
logit scaling; the value spectra against the d x d value matrices; the fit; bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.models.network.fit import fit_with_interval, particle_curve
from tokensweep.pipeline.models.network.measures import cosines
from tokensweep.pipeline.models.network.spec import SIZES
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.load import parse_sweep

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CELL = {"n": 6, "beta": 1.0, "scale": 0.02, "weights_seed": 0}


def spec(**fields):
    base = {"name": "t", "model": "network", "grid": {"n": 6}, "trajectories": 4, "seed": 3}
    return parse_sweep({**base, **fields})


def simulate(sweep, trajectories, cell=CELL):
    from tokensweep.pipeline.models.network.forward import simulate_network

    return simulate_network(sweep, cell, trajectory_rngs(sweep.seed, cell, trajectories))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Tiny BERT and GPT-2 folders as save_pretrained writes them (random weights, seed 0)."""
    folders = {}
    for arch in ("bert", "gpt2"):
        config = transformers.AutoConfig.for_model(arch, **SIZES[arch]["tiny"])
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(config)
        folder = tmp_path_factory.mktemp(arch)
        model.save_pretrained(folder)
        folders[arch] = folder
    return folders


def reference_mean_overlaps(folder, ids, drop_final=False):
    """Mean pairwise cosine after every layer, from transformers' own forward pass."""
    model = transformers.AutoModel.from_pretrained(folder).eval()
    if drop_final:  # GPT-2's last hidden state is after ln_f: the raw layer output without it
        model.ln_f = torch.nn.Identity()
    with torch.no_grad():
        states = model(input_ids=torch.as_tensor(ids[None]), output_hidden_states=True).hidden_states
    out = []
    for h in states:
        g = cosines(h[0].double().numpy())
        out.append(g[np.triu_indices(len(g), 1)].mean())
    return np.asarray(out)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_checkpoint_folder_matches_transformers_layer_by_layer(checkpoints, arch):
    from tokensweep.pipeline.models.network.forward import prompt_ids

    sweep = spec(weights=str(checkpoints[arch]), law="pretrained", trajectories=2)
    out = simulate(sweep, range(2))
    rngs = trajectory_rngs(sweep.seed, CELL, range(2))
    for j, ids in enumerate(prompt_ids(sweep, 6, rngs, None)):
        ref = reference_mean_overlaps(checkpoints[arch], ids, drop_final=arch == "gpt2")
        np.testing.assert_allclose(out["start_overlap"][j], ref[0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["mean_overlap"][j], ref[1:], rtol=0, atol=1e-6)
    assert out["n_clusters"].min() >= 1 and out["overlap_hist"].sum(-1).tolist() == [[15, 15]] * 2


def test_same_numbers_however_partitioned():
    sweep = spec(architecture="gpt2", size="tiny", law="resampled", passes=2, feed_forward=False)
    whole = simulate(sweep, range(4))
    parts = [simulate(sweep, range(0, 1)), simulate(sweep, range(1, 4))]
    for name, value in whole.items():
        np.testing.assert_array_equal(value, np.concatenate([p[name] for p in parts]), err_msg=name)
    # resampled weights change every pass; fixed ones do not: pass 2 differs between the laws
    fixed = simulate(spec(architecture="gpt2", size="tiny", law="random", passes=2, feed_forward=False), range(1))
    assert np.array_equal(fixed["mean_overlap"][0, :2], whole["mean_overlap"][0, :2])
    assert not np.array_equal(fixed["mean_overlap"][0, 2:], whole["mean_overlap"][0, 2:])


def test_beta_multiplies_the_attention_logits(checkpoints):
    """beta = 3 through the plug-in (query scaled) equals transformers' GPT-2 with its own logit
    scale multiplied by 3 (GPT2Attention.scaling)."""
    from tokensweep.pipeline.models.network.forward import prompt_ids

    sweep = spec(weights=str(checkpoints["gpt2"]), law="pretrained", trajectories=1)
    out = simulate(sweep, range(1), {**CELL, "beta": 3.0})
    ids = prompt_ids(sweep, 6, trajectory_rngs(sweep.seed, {**CELL, "beta": 3.0}, range(1)), None)[0]
    model = transformers.AutoModel.from_pretrained(checkpoints["gpt2"], attn_implementation="eager").eval()
    for block in model.h:
        block.attn.scaling *= 3.0
    with torch.no_grad():
        att = model(input_ids=torch.as_tensor(ids[None]), output_attentions=True).attentions
    expected = [a[0].double().numpy().max(-1).mean() for a in att]
    np.testing.assert_allclose(out["attention_max"][0], expected, rtol=0, atol=1e-5)


def test_value_spectra_are_the_heads_value_matrices(checkpoints):
    out = simulate(spec(weights=str(checkpoints["bert"]), law="pretrained", trajectories=1), range(1))
    model = transformers.AutoModel.from_pretrained(checkpoints["bert"])
    heads, width = 4, 32
    dh = width // heads
    expected = []
    for layer in model.encoder.layer:
        wv = layer.attention.self.value.weight.detach().double().numpy()
        wo = layer.attention.output.dense.weight.detach().double().numpy()
        for h in range(heads):
            full = wo[:, h * dh:(h + 1) * dh] @ wv[h * dh:(h + 1) * dh]  # d x d, rank dh
            ev = np.linalg.eigvals(full)
            expected.append(np.abs(ev).max())
    lead = np.hypot(out["value_lead_re"][0], out["value_lead_im"][0])
    np.testing.assert_allclose(lead, expected, rtol=1e-4)
    assert out["value_lead_re"].shape == (1, 2 * heads)


@pytest.mark.parametrize("beta, tau, n", [(2.0, 0.3, 16), (10.0, 2.0, 48), (40.0, 0.01, 10), (0.5, 5.0, 2)])
def test_particle_curve_is_the_equiangular_flow(beta, tau, n):
    """The fit's fast ODE (odeint, its right-hand side on floats) against the theory's solution
    from gamma = 0 (`equiangular_gamma`, DOP853 to 1e-12), at unsorted and repeated layers."""
    from tokensweep.pipeline.theory.deterministic import equiangular_gamma

    layers = np.array([3.0, 0.0, 12.0, 3.0, 7.5, 1.0])
    np.testing.assert_allclose(particle_curve(layers, 0.0, beta, tau, n),
                               equiangular_gamma(tau * layers, beta, n), rtol=0, atol=1e-6)
    assert (particle_curve(np.zeros(3), 0.4, beta, tau, n) == 0.4).all()


def test_fit_recovers_the_particle_model():
    """Curves of the particle model itself (beta 2, 0.3 per layer) plus noise per prompt: the fit's
    interval holds the truth."""
    layers = np.arange(0, 13, dtype=float)
    rng = np.random.default_rng(1)
    truth = particle_curve(layers, 0.1, 2.0, 0.3, 16)
    curves = truth + rng.normal(0, 0.02, (24, layers.size))
    fit = fit_with_interval(layers, curves, curves[:, 0], 16, resamples=10)
    assert fit["tau_lo"] <= 0.3 <= fit["tau_hi"] and fit["beta_lo"] <= 2.0 <= fit["beta_hi"], fit
    assert fit["tau_hi"] - fit["tau_lo"] < 0.2


@pytest.mark.parametrize("fields, words", [
    ({"architecture": "llama"}, "architecture: 'llama' is not an architecture"),
    ({"weights": "/nonexistent/folder", "law": "pretrained"}, "is not a folder"),
    ({"architecture": "gpt2", "size": "tiny", "grid": {"n": 500}}, "longer than the network's 128 positions"),
    ({"architecture": "gpt2", "size": "huge"}, "size 'huge' is not a preset"),
    ({"architecture": "gpt2", "size": "tiny", "law": "pretrained"}, "pretrained needs weights"),
    ({"architecture": "gpt2", "size": "tiny", "prompts": "rst_table2"}, "text prompts need a tokenizer"),
    ({"architecture": "gpt2", "size": "tiny", "decode_passes": [5, 1]}, "decode_passes: got [5, 1]: give"),
    ({"architecture": "albert", "size": "tiny", "passes": 2}, "passes: ALBERT's layers output 32 wide states"),
    ({"architecture": "gpt2", "size": "tiny", "passes": 2, "decode_passes": [3]}, "decode_passes: none of [3]"),
])
def test_bad_input_is_one_line_naming_the_fix(fields, words):
    with pytest.raises(SpecError) as err:
        spec(**fields)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_sphere_norm_puts_every_post_norm_output_on_the_sphere():
    """norm: sphere in BERT (post-LayerNorm): every layer's output rows have norm sqrt(d), and no
    LayerNorm is left; feed_forward: false zeroes the feed-forward's output projection."""
    from tokensweep.pipeline.models.network.build import build_network

    net = build_network(spec(architecture="bert", size="tiny", norm="sphere", feed_forward=False), 0, 0.02, 1.0)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in net.model.modules())
    assert all(float(p.weight.detach().abs().max()) == 0 for p in net.parts.ff_out)
    with torch.no_grad():
        states = net.model(input_ids=torch.arange(6)[None], output_hidden_states=True).hidden_states
    for h in states:
        np.testing.assert_allclose(h[0].norm(dim=-1).numpy(), np.sqrt(32), rtol=1e-5)


def test_malformed_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SpecError, match="not a readable JSON config"):
        spec(weights=str(tmp_path), law="pretrained")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", **SIZES["bert"]["tiny"]}))
    with pytest.raises(SpecError, match="has no model.safetensors or pytorch_model.bin"):
        spec(weights=str(tmp_path), law="pretrained")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(SpecError, match="model_type 't5' is not one tokensweep runs"):
        spec(weights=str(tmp_path), law="pretrained")


def test_value_spectra_table_counts_and_means_the_cube_holds():
    """The report's spectra table ([GLPR-E] Fig. 10) reads the first cell's first weight draw:
    heads split by a real positive, real negative or complex leading eigenvalue, with their mean
    modulus gap and mean |lambda_1|, as the cube holds them."""
    import xarray as xr

    from tokensweep.pipeline.report.network import spectra_lines

    re_, im = np.array([2.0, 1.0, -3.0, 0.5]), np.array([0.0, 0.0, 0.0, 0.5])
    gap = np.array([0.2, 0.4, 0.1, 0.3])
    other = np.full(4, 9.0)  # a second cell and prompt the table must not read
    ds = xr.Dataset({name: (("n", "traj", "head"), np.array([[first, other], [other, other]]))
                     for name, first in (("value_lead_re", re_), ("value_lead_im", im), ("value_gap", gap))},
                    coords={"n": [4, 8]})
    rows = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:]
            for line in "\n".join(spectra_lines(ds)).splitlines()
            if line.startswith("| real") or line.startswith("| complex")}
    assert rows == {"real, positive": ["2", "0.300", "1.500"], "real, negative": ["1", "0.100", "3.000"],
                    "complex pair": ["1", "0.300", f"{np.hypot(0.5, 0.5):.3f}"]}
    assert "4 heads" in spectra_lines(ds)[2]


def test_decoded_tokens_are_gpt2_lm_heads_argmax(checkpoints):
    """[RST] Table 3 on a GPT-2 checkpoint: pass 0 is the prompt; pass 1's ids are
    GPT2LMHeadModel's own logits' argmax; pass 2's are its argmax on pass 1's final hidden state
    (after ln_f, as fed back) given as inputs_embeds."""
    from tokensweep.pipeline.models.network.forward import prompt_ids

    sweep = spec(weights=str(checkpoints["gpt2"]), law="pretrained", passes=2, trajectories=2)
    assert sweep.kept_decode_passes == (0, 1)  # the default's passes up to 2
    sweep = spec(weights=str(checkpoints["gpt2"]), law="pretrained", passes=2, trajectories=2,
                 decode_passes=[0, 1, 2])
    out = simulate(sweep, range(2))
    lm = transformers.GPT2LMHeadModel.from_pretrained(checkpoints["gpt2"]).eval()
    for j, ids in enumerate(prompt_ids(sweep, 6, trajectory_rngs(sweep.seed, CELL, range(2)), None)):
        with torch.no_grad():
            first = lm(input_ids=torch.as_tensor(ids[None]), output_hidden_states=True)
            second = lm(inputs_embeds=first.hidden_states[-1])
        np.testing.assert_array_equal(out["decoded"][j, 0], ids)
        np.testing.assert_array_equal(out["decoded"][j, 1], first.logits[0].argmax(-1).numpy())
        np.testing.assert_array_equal(out["decoded"][j, 2], second.logits[0].argmax(-1).numpy())
    assert out["decoded"].dtype == np.int32 and out["decoded"].shape == (2, 3, 6)


def test_nearest_embedding_decodes_the_input_embeddings_to_their_ids(checkpoints):
    """An encoder without a head (BERT) decodes a hidden state to the nearest input word embedding:
    the embeddings of the prompt's ids decode back to those ids; the plug-in uses that method."""
    from tokensweep.pipeline.models.network.decode import decode_method, nearest_embedding

    model = transformers.AutoModel.from_pretrained(checkpoints["bert"])
    table = model.get_input_embeddings().weight.detach()
    ids = torch.as_tensor([5, 999, 1, 17, 17, 512])  # not 0: BERT's padding embedding is zero
    np.testing.assert_array_equal(nearest_embedding(table[ids] * 3.0, table).numpy(), ids.numpy())
    assert decode_method("bert") == "nearest_embedding" and decode_method("gpt_neo") == "lm_head"
    out = simulate(spec(weights=str(checkpoints["bert"]), law="pretrained", passes=1, trajectories=1), range(1))
    assert out["decoded"].shape == (1, 2, 6) and ((out["decoded"] >= 0) & (out["decoded"] < 1000)).all()


def test_decoded_table_shows_the_cubes_tokens():
    """The report's Table 3 reads the first cell's first prompt: its first tokens per decoded pass
    (ids as #id without a tokenizer, words with the packaged MiniLM's), and the mean number of
    distinct tokens over the cell's prompts; -1 (past a shorter prompt) is not a token."""
    import xarray as xr

    from tokensweep.pipeline.models.network.spec import packaged_folder
    from tokensweep.pipeline.report.network_tokens import decoded_rows, load_tokenizer

    first = [[101, 7592, 2088, -1], [2088, 2088, 2088, -1]]  # cell n = 3 (padded to 4), prompt 0
    other = [[1, 2, 3, -1], [5, 6, 5, -1]]
    ds = xr.Dataset({"decoded": (("n", "traj", "decode_pass", "position"),
                                 np.array([[first, other], [other, other]]))}, coords={"n": [3, 4]})
    assert decoded_rows(ds, (0, 7), None) == [["0 (prompt)", "#101 #7592 #2088", "3.0 of 3"],
                                               ["7", "#2088 #2088 #2088", "1.5 of 3"]]
    tokenizer, why = load_tokenizer(spec(architecture="gpt2", size="tiny"))
    assert tokenizer is None and "no tokenizer" in why
    if packaged_folder("minilm") is not None:
        tokenizer, _ = load_tokenizer(spec(architecture="gpt2", size="tiny", tokenizer="minilm"))
        assert decoded_rows(ds, (0, 7), tokenizer, shown=2)[0][1] == "[CLS] hello"


def test_equiangular_starts_and_the_clock_match():
    """The stochastic transformer's starts have every pairwise cosine gamma0; the clock match
    recovers the time scale of a curve that is the simulated one on another clock."""
    from tokensweep.pipeline.models.network.stochastic import equiangular_starts, match_clock

    x = equiangular_starts(np.random.default_rng(0), 3, 5, 8, 0.3)
    for k in range(3):
        g = x[k] @ x[k].T
        np.testing.assert_allclose(np.diag(g), 1.0, atol=1e-12)
        np.testing.assert_allclose(g[np.triu_indices(5, 1)], 0.3, atol=1e-12)
    sim_t = np.linspace(0, 2.0, 401)
    layers = np.arange(0, 21, dtype=float)
    clock, rms = match_clock(layers, 1 - 0.7 * np.exp(-3 * 0.05 * layers), sim_t, 1 - 0.7 * np.exp(-3 * sim_t))
    assert abs(clock - 0.05) < 0.05 * 0.02 and rms < 1e-3


def test_random_weights_beside_the_stochastic_transformer_table():
    """The section's row shows what `beside_stochastic` computed for the cell: the fitted beta,
    beta_c(d) of the width, the network's fraction of pairs below -0.9 at the last checkpoint (from
    the histogram: 3 of 4 prompts x 45 pairs hold one such pair here), the closed form
    P(antipodal | rho0) at that beta and d, and the verdict (no pair near -1: not on the antipodal side);
    a pretrained cube gets no section."""
    import re

    import xarray as xr

    from tokensweep.pipeline.plugin import ReportInput
    from tokensweep.pipeline.report.network_theory import (
        beside_stochastic,
        near_minus_one,
        stochastic_section,
        table_rows,
    )
    from tokensweep.pipeline.theory import antipodal_probability_given_overlap, beta_c

    sweep = spec(architecture="gpt2", size="tiny", passes=2, grid={"n": 10})  # d = 32, 4 layers
    t = np.arange(1.0, 5.0)
    mean = np.array([0.2, 0.35, 0.5, 0.6]) + np.array([[0.0], [0.01], [-0.01], [0.02]])
    hist = np.zeros((4, 4, 20), dtype=np.int32)
    hist[..., 10] = 45
    hist[:3, -1, 10], hist[:3, -1, 0] = 44, 1  # prompts 0-2 end with one pair below -0.9
    ds = xr.Dataset({"mean_overlap": (("n", "traj", "t"), mean[None]),
                     "start_overlap": (("n", "traj"), np.full((1, 4), 0.1)),
                     "overlap_hist": (("n", "traj", "t", "bin"), hist[None])},
                    coords={"n": [10], "t": t, "bin": np.linspace(-0.95, 0.95, 20)})
    assert near_minus_one(hist[:, -1], np.linspace(-1, 1, 21)) == (3 / 180, -0.9)
    row = beside_stochastic(ds, sweep, {"n": 0})
    assert row["network_near"] == 3 / 180 and row["beta_c"] == float(beta_c(32))
    assert row["closed_form"] == float(antipodal_probability_given_overlap(0.1, row["beta"], 32))
    assert row["sim"]["mean_overlap"][0] == pytest.approx(0.1) and row["rms"] < 0.1
    cells = table_rows([row], ["cell"])[0]
    assert cells[1:8] == [f"{row['beta']:.3f}", f"{row['beta_c']:.3f}", f"{row['clock']:.3g}", f"{row['rms']:.3f}",
                          "0.0167", f"{row['sim_near']:.4f}", f"{row['closed_form']:.4f}"]
    assert re.match(r"yes; -1 (attracts|does not attract) at this beta", cells[8])
    assert table_rows([{**row, "network_near": 0.0}], ["cell"])[0][8].startswith("no; ")
    assert stochastic_section(ReportInput(ds, sweep.model_copy(update={"law": "pretrained"}), None)).lines == []


def test_random_weights_figure_draws_the_rows_numbers():
    """network_stochastic.png draws, per cell, the network's mean curve over prompts (layer 0: the
    starts), the fitted sphere flow and the stochastic transformer read on the matched clock."""
    import xarray as xr

    from tokensweep.pipeline.models.network.fit import particle_curve
    from tokensweep.pipeline.report.network_theory import beside_stochastic, plot

    sweep = spec(architecture="gpt2", size="tiny", passes=2, grid={"n": 10})
    mean = np.array([[0.2, 0.35, 0.5, 0.6], [0.22, 0.33, 0.52, 0.58]])
    hist = np.zeros((2, 4, 20), dtype=np.int32)
    hist[..., 10] = 45
    ds = xr.Dataset({"mean_overlap": (("n", "traj", "t"), mean[None]),
                     "start_overlap": (("n", "traj"), np.full((1, 2), 0.1)),
                     "overlap_hist": (("n", "traj", "t", "bin"), hist[None])},
                    coords={"n": [10], "t": np.arange(1.0, 5.0), "bin": np.linspace(-0.95, 0.95, 20)})
    row = beside_stochastic(ds, sweep, {"n": 0})
    fig = plot([row], ["n = 10"], {}, None)
    network, flow, stochastic = fig.axes[0].get_lines()
    np.testing.assert_array_equal(network.get_xdata(), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(network.get_ydata(), [0.1, 0.21, 0.34, 0.51, 0.59])
    fine = flow.get_xdata()
    np.testing.assert_allclose(flow.get_ydata(), particle_curve(fine, 0.1, row["beta"], row["tau"], 10))
    np.testing.assert_allclose(stochastic.get_ydata(),
                               np.interp(row["clock"] * fine, row["sim"]["t"], row["sim"]["mean_overlap"]))
    assert fine[0] == 0 and fine[-1] == 4
