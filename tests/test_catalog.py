"""The catalog (catalog/*.yaml, indexed in catalog/README.md): every entry validates at every scale
it has and is indexed; every small-scale entry runs through the real pipeline (a real Prefect
server, a real two-worker Dask cluster found by its scheduler file, a real zarr store) and its
report (the flow's report task) is written with the sections its outcome needs (`-m slow`).

TOKENSWEEP_CATALOG_TIMES=FILE appends "name seconds" per entry run (run + report), the small-scale
times of catalog/README.md.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import fingerprints as fp
import pytest
import yaml

from tokensweep.flows.cli.look import catalog_claims
from tokensweep.pipeline.analysis.boolean_rate import window_size
from tokensweep.pipeline.report.horizon import MAX_CELLS as HORIZON_CELLS
from tokensweep.pipeline.spec.load import load_sweep
from tokensweep.pipeline.spec.scales import scales_of
from tokensweep.pipeline.theory.regions import proven_theorems

CATALOG = Path(__file__).parent.parent / "catalog"
ENTRIES = sorted(p.stem for p in CATALOG.glob("*.yaml"))
# a small scale is a few seconds of compute on 2 cores: a bound on cells x trajectories x layers
# (the slowest kernel per step is the stochastic one with n = 2 at ~1 us, the quickstart's 2.5e7)
SMALL_STEPS = 3e7


def _scales(name: str) -> tuple[str, ...]:
    return scales_of(yaml.safe_load((CATALOG / f"{name}.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", ENTRIES)
def test_every_entry_validates_at_every_scale(name):
    scales = _scales(name)
    assert "paper" in scales, f"{name}: give it a scales: {{paper: ...}} block with the paper's sizes"
    small = load_sweep(CATALOG / f"{name}.yaml")
    assert small.name == name
    assert small.n_cells * small.trajectories * small.time.layers <= SMALL_STEPS, name
    for scale in scales[1:]:
        sweep = load_sweep(CATALOG / f"{name}.yaml", scale)
        assert sweep.name == f"{name}-{scale}" and sweep.model == small.model
        # the larger scale is larger: more work, never less
        assert sweep.n_cells * sweep.trajectories * sweep.time.layers > \
            small.n_cells * small.trajectories * small.time.layers, (name, scale)


# The entries `device: cuda` cannot run, each refused naming its field (the rest run on a GPU
# at their paper scale as they are: docs/models.md 2.10 and 4.6)
OFF_THE_DEVICE = {"fedorov2026-rho0": "init", "rst-turning-value": "grid.omega",
                  "sphere-flow-hardmax": "attention"}


def test_every_simulated_entry_runs_with_device_cuda_but_three_that_name_their_field():
    from tokensweep.pipeline.errors import SpecError
    from tokensweep.pipeline.spec.load import parse_sweep

    refused = {}
    for name in ENTRIES:
        spec = yaml.safe_load((CATALOG / f"{name}.yaml").read_text(encoding="utf-8"))
        if spec["model"] not in ("sphere_flow", "stochastic_transformer", "hybrid"):
            continue  # the euclidean flow and real networks have no device path
        try:
            parse_sweep({**spec, "device": "cuda"})
        except SpecError as err:
            refused[name] = str(err).split(":")[0]
    assert refused == OFF_THE_DEVICE


def test_every_entry_is_indexed_and_every_row_names_a_file():
    index = (CATALOG / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+)` \|", index, re.M)
    assert sorted(rows) == sorted(f"{name}.yaml" for name in ENTRIES), "catalog/README.md's table"
    assert len(rows) == len(set(rows))
    claims = catalog_claims()  # what `tokensweep catalog` prints: the paper, figure or claim
    for name in ENTRIES:
        claim = claims[f"{name}.yaml"]
        assert re.search(r"\[(F26|GLPR-P|GLPR-E|RST)\]", claim) or name.startswith(("sphere-flow", "quick")), \
            (name, claim)
    for line in index.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == 6, line  # spec, claim, expected outcome, model, small, paper
            assert re.search(r"\d", cells[4]) and re.search(r"\d|—", cells[5]), line


# ---------------------------------------------------------------------------------------------
# every small entry through the pipeline and the report


def expected_sections(sweep) -> list[str]:
    """Headings the report of `sweep` must have, from its model and its grid."""
    from tokensweep.pipeline.models import get_model

    model = get_model(sweep.model)
    if sweep.model in ("stochastic_transformer", "hybrid"):
        out = ["## P(antipodal) per grid cell"]
        two_tokens = 2 in sweep.grid.n
        closed = (sweep.model == "hybrid" or sweep.closed_form_applies) and sweep.attention != "causal_sa"
        if two_tokens and closed:
            out.append("## Chi-square summary")  # the agreement with the closed form
        if any(n > 2 for n in sweep.grid.n):
            out.append("## P(at least one antipodal pair)")
        if getattr(sweep.grid, "layers", None):
            out.append("## P(antipodal) against the step h")
        noisy = sweep.model != "hybrid" or any(s > 0 for s in sweep.grid.sigma)  # sigma = 0: an ODE
        if two_tokens and closed and noisy and len(sweep.time.checkpoint_layers) > 1 and \
                sweep.n_cells <= HORIZON_CELLS:
            out.append("## P(antipodal) over the checkpoints against the finite-T theory")
        if sweep.model == "hybrid" and len(sweep.grid.beta) > 1 and len(sweep.grid.sigma) > 1:
            out.append("## Dominant outcome over (beta, sigma)")
        return out
    if sweep.model == "network":
        out = ["## The network beside its particle model", "## Value spectra per head"]
        if sweep.law != "pretrained":
            out.append("## Random weights beside the stochastic transformer")
        return out + ["## Decoded tokens after chosen passes"]
    if sweep.model == "euclidean_flow":
        out = ["## Geometry at T per cell"]
        if any(model.boolean_rate(sweep, {"beta": b, "d": d}) is not None
               for b in sweep.grid.beta for d in sweep.grid.d) and \
                window_size(sweep.time.checkpoint_times) >= 3:
            out.append("## Boolean attention: the doubly exponential rate")
        return out
    out = ["## Cluster counts"]
    if model.closed_form_attention(sweep):
        out.append("## Fraction of close pairs")
        if sweep.init.kind == "equiangular":
            out.append("## Equiangular start")
        if sweep.init.kind == "uniform" and "overlap_hist" in sweep.record:
            out.append("## Random starts against gamma(t)")
    if any(model.sharp_overlaps(sweep, n, d) is not None for n in sweep.grid.n for d in sweep.grid.d):
        out.append("## Sharp configurations of V = -I")
    if model.token2_overlap(sweep, [0.0], {"beta": 1.0, "d": 3, "n": 2, "rho0": 0.0}) is not None \
            and 2 in sweep.grid.n:
        out.append("## Causal token-2 overlap against its ODE")
    if sweep.init.kind == "uniform" and model.closed_form_attention(sweep):
        out.append("## Open hemisphere")
        if len(sweep.grid.beta) > 1 and sweep.grid.rho0 is None and not all(
                proven_theorems(b, d, n) for b in sweep.grid.beta for d in sweep.grid.d for n in sweep.grid.n):
            out.append("## Proven single-cluster regions")  # [GLPR-P] Fig. 2 over the measured diagram
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)  # a cold numba cache compiles each kernel variant first
@pytest.mark.parametrize("name", ENTRIES)
def test_small_entry_runs_and_reports(name, dask_cluster, tmp_path, monkeypatch):
    from tokensweep.flows.run import run_sweep
    from tokensweep.pipeline.store.cube import open_cube

    monkeypatch.setenv("TOKENSWEEP_RESULTS", str(tmp_path / "results"))
    sweep = load_sweep(name)
    assert sweep.store == f"{tmp_path}/results/{name}.zarr"  # the default store of a catalog entry
    start = time.perf_counter()
    summary = run_sweep(sweep.model_dump(mode="json"), sweep.store,
                        scheduler_file=str(dask_cluster.scheduler_file), progress=False)
    seconds = time.perf_counter() - start
    if os.environ.get("TOKENSWEEP_CATALOG_TIMES"):
        with open(os.environ["TOKENSWEEP_CATALOG_TIMES"], "a") as f:
            f.write(f"{name} {seconds:.1f}\n")

    assert summary["computed"] == summary["partitions"] > 0 and summary["failed"] == 0, summary
    paths = summary["report"]  # the flow's own report task wrote it beside the store
    text = Path(paths["report"]).read_text()
    assert f"**model**: {sweep.model}" in text
    assert re.search(r"^\| .+ \|$", text, re.M), f"{name}: no table in the report"
    for heading in expected_sections(sweep):
        assert heading in text, f"{name}: the report lacks {heading!r}"
    figures = {key: path for key, path in paths.items() if path.endswith(".png")}
    for figure, path in paths.items():
        assert Path(path).stat().st_size > 100, (name, figure)
    for figure, path in figures.items():
        assert Path(path).stat().st_size > 1000, (name, figure)
        assert f"({Path(path).name})" in text, (name, figure)
    page = Path(paths["html"]).read_text()  # the self-contained page embeds every figure
    assert page.count('src="data:image/png;base64,') >= len(figures) > 0, name
    claims = json.loads(Path(paths["summary"]).read_text())["claims"]  # its claims table, every check run
    assert claims and not any("raised" in c["verdict"] for c in claims), (name, claims)
    if "## Chi-square summary" in expected_sections(sweep):  # the agreement with the closed form
        assert re.search(r"\| theory \| z \|.*\| agrees \(", text), f"{name}: no agreement table"
        cells = re.search(r"sum z\^2 = [\d.]+ over (\d+) cells \(dof = \d+\), p-value = (\S+)\.", text)
        assert cells, f"{name}: no chi-square line"
        # z needs a theory strictly inside (0, 1): USA's hybrid dichotomy (0 or 1) has none
        assert int(cells[1]) == 0 or re.fullmatch(r"\d\.\d{3}", cells[2]), cells[0]
    record = fp.load()  # the numbers did not change: the first and last partitions, as stored
    assert fp.partitions_problem(sweep.store, name, record) is None
    if name == "quickstart":  # the whole cube a new user's first run computes, unchanged
        assert fp.cube_problem(sweep.store, name, record) is None
    with open_cube(sweep.store) as ds:
        for observable in getattr(sweep, "record", ()):
            assert observable in ds.data_vars, (name, observable)
