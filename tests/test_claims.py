"""The claims table (pipeline/report/claims*.py): the verdict of a claim on a cube where it is known to
hold and on one where it is known to fail or whose hypothesis is not met, each cube tiny and computed
by the real kernels (prepare_store + run_partition); the table in report.md, report.html and
summary.json, and the counts of `verdict_lines` (the index).

Why each cube's verdict is known: [GLPR-P] section 3: with V = I the SA flow is a gradient ascent of
E_beta (non-decreasing), with V = -I a descent (it falls, so "non-decreasing" fails); section 9.1's
sharp configurations assume beta > 0 (at beta = 0 the hypothesis is not met); [RST] Thm 5.2 assumes a
top eigenvalue lambda > 0 and a start in v's hemisphere; [F26] Thm 1 is a T = infinity law: at
T = 0.5 no pair has reached the antipodal end above beta_c(d), where the law says 0.3-0.5.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from tokensweep.pipeline.analysis.stats import stored_spec
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.report.claims import (
    FAILS,
    HOLDS,
    NOT_MET,
    allowed_misses,
    cells_claim,
    every_trajectory,
    exact_upper,
)
from tokensweep.pipeline.report.claims_table import check_claims, entry_of
from tokensweep.pipeline.report.index import verdict_lines, write_index
from tokensweep.pipeline.spec.load import parse_sweep, read_spec
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.store.lifecycle import prepare_store


def entry(name: str, **changes) -> dict:
    return {**read_spec(name, "small"), **changes, "name": name}


def cube(spec: dict, root: Path) -> Path:
    sweep = parse_sweep(spec)
    store = root / f"{sweep.name}-{abs(hash(json.dumps(spec, sort_keys=True, default=str))) % 10**8}.zarr"
    prepare_store(sweep, store)
    for index in range(len(Plan(sweep))):
        run_partition(sweep, store, index)
    return store


def claims_of(store: Path) -> list:
    with open_cube(store) as ds:
        ds = ds.compute()
        return check_claims(ReportInput(ds, stored_spec(ds), store.parent, 0.95))


def by_source(claims, source: str):
    found = [c for c in claims if c.source.startswith(source)]
    assert found, [c.source for c in claims]
    return found[0]


# ---------------------------------------------------------------------------------------------
# the statistics behind a verdict


def test_every_trajectory_holds_only_on_all_and_bounds_the_failures():
    held = every_trajectory("c", "s", "e", [True] * 16, np.arange(16.0), "x")
    assert held.verdict == HOLDS and held.measured.startswith("16 of 16") and "worst x 15" in held.measured
    # no failure in 16 starts: the failure probability is below 1 - 0.05^(1/16) = 0.17 (exact)
    assert abs(exact_upper(0, 16) - (1 - 0.05 ** (1 / 16))) < 1e-12 and "0.171" in held.detail
    missed = every_trajectory("c", "s", "e", [True] * 15 + [False], np.arange(16.0), "x")
    assert missed.verdict == FAILS and missed.measured.startswith("15 of 16")


def test_cells_claim_allows_the_misses_chance_gives_at_its_level():
    # 100 cells at 99 %: P(more than 4 miss) = P(Bin(100, 0.01) > 4) < 1 %; 5 misses fail
    assert allowed_misses(100) == 4 and allowed_misses(1) == 0
    ok = np.ones(100, bool)
    ok[:4] = False
    assert cells_claim("c", "s", "e", ok, range(100)).verdict == HOLDS
    ok[4] = False
    assert cells_claim("c", "s", "e", ok, range(100)).verdict == FAILS
    # a deterministic bound (an integrator's error) allows no miss at all
    one = np.ones(100, bool)
    one[0] = False
    assert cells_claim("c", "s", "e", one, range(100), chance=False).verdict == FAILS


def test_a_scale_of_an_entry_has_its_claims():
    assert entry_of("geshkovski2023-sharp-paper") == "geshkovski2023-sharp"
    assert entry_of("my-sweep") is None
    assert entry_of("geshkovski2023-fig1-minilm") == "geshkovski2023-fig1-minilm"  # its own, not fig1's scale


# ---------------------------------------------------------------------------------------------
# verdicts on real cubes


def test_energy_non_decreasing_holds_for_v_identity_and_fails_for_v_minus_identity(tmp_path):
    small = {"grid": {"beta": 1.0, "d": 3, "n": 8}, "time": {"T": 5.0, "layers": 50, "checkpoints": 10},
             "trajectories": 4}
    ascent = by_source(claims_of(cube(entry("geshkovski2023-energy", **small), tmp_path)), "[GLPR-P] §3")
    assert ascent.verdict == HOLDS and ascent.measured.startswith("4 of 4")
    # V = -I with RK4: the kernel variant the sharp tests compile anyway
    descent = by_source(claims_of(cube(entry("geshkovski2023-energy", value="minus_identity", integrator="rk4",
                                             **small), tmp_path)), "[GLPR-P] §3")
    assert descent.verdict == FAILS and descent.measured.startswith("0 of 4")


def test_sharp_configuration_holds_for_beta_positive_and_its_hypothesis_fails_at_beta_zero(tmp_path):
    small = {"grid": {"beta": 1.0, "d": 3, "n": 4}, "trajectories": 4,
             "time": {"T": 60.0, "layers": 600, "checkpoints": 6}}
    simplex = by_source(claims_of(cube(entry("geshkovski2023-sharp", **small), tmp_path)), "[GLPR-P] §9.1")
    assert simplex.verdict == HOLDS and simplex.measured.startswith("4 of 4")
    flat = {**small, "grid": {"beta": [0.0, 1.0], "d": 3, "n": 4}}
    zero = by_source(claims_of(cube(entry("geshkovski2023-sharp", **flat), tmp_path)), "[GLPR-P] §9.1")
    assert zero.verdict == NOT_MET and "β > 0" in zero.expected


def test_causal_theorem_judged_only_where_lambda_positive_and_the_start_in_v_hemisphere(tmp_path):
    small = {"trajectories": 4, "grid": {"beta": 1.0, "d": 3, "n": 6}}
    positive = by_source(claims_of(cube(entry("rst-causal-positive", **small), tmp_path)), "[RST] Thm 5.2")
    assert positive.verdict == HOLDS and positive.measured.startswith("4 of 4")
    negative = by_source(claims_of(cube(entry("rst-causal-negative", **small, time={
        "T": 1.0, "layers": 20, "checkpoints": 2}), tmp_path)), "[RST] Thm 5.2")
    assert negative.verdict == NOT_MET and "λ = -0.5" in negative.measured


def test_two_token_law_holds_at_t30_and_fails_at_t_half(tmp_path):
    spec = entry("fedorov2026-fig3", grid={"beta": [0.0, 2.0], "d": 3, "n": 2}, trajectories=100,
                 time={"T": 30.0, "layers": 1500, "checkpoints": 1})
    assert by_source(claims_of(cube(spec, tmp_path)), "[F26] Thm 1").verdict == HOLDS
    early = {**spec, "time": {"T": 0.5, "layers": 25, "checkpoints": 1}}
    law = by_source(claims_of(cube(early, tmp_path)), "[F26] Thm 1")
    assert law.verdict == FAILS and law.measured.startswith("0 of 1")


# ---------------------------------------------------------------------------------------------
# the table on the page, in summary.json and in the index


def test_the_claims_table_is_on_the_page_in_the_summary_and_counted_by_the_index(tmp_path):
    spec = entry("geshkovski2023-energy", value="minus_identity", integrator="rk4", grid={"beta": 1.0, "d": 3, "n": 8},
                 time={"T": 5.0, "layers": 50, "checkpoints": 10}, trajectories=4)
    store = cube(spec, tmp_path)
    with open_cube(store) as ds:
        paths = write_report(ds, Path(f"{store}.report"))
    summary = json.loads(Path(paths["summary"]).read_text())
    verdicts = [c["verdict"] for c in summary["claims"]]
    assert set(summary["claims"][0]) == {"claim", "source", "measured", "expected", "verdict", "detail"}
    assert verdicts[0] == FAILS and summary["claim_counts"][FAILS] == verdicts.count(FAILS)
    page = Path(paths["html"]).read_text()
    assert page.count('class="claim"') == len(verdicts) and 'data-verdict="fails"' in page
    assert "| fails |" in Path(paths["report"]).read_text()
    counts = summary["claim_counts"]
    index = write_index(tmp_path).read_text()  # the summary is fresh: no second report
    assert (f'class="claims"><span class="ok">{counts["holds"]}</span> / <span class="bad">{counts["fails"]}</span> / '
            f'{counts["hypothesis not met"]} / {counts["not checked"]}</td>') in index
    # per paper: this entry's claims cite [GLPR-P] only; a second copy of the store counts twice
    assert {c["source"].split("]")[0] + "]" for c in summary["claims"]} == {"[GLPR-P]"}
    line = (f"{counts['holds']} holds, {counts['fails']} fails, {counts['hypothesis not met']} hypothesis "
            f"not met, {counts['not checked']} not checked")
    assert verdict_lines(tmp_path) == [f"geshkovski2023-energy: {line}", f"[GLPR-P]: {line}"]
    assert (f'<td style="text-align:left">[GLPR-P]</td><td class="ok">{counts["holds"]}</td>'
            f'<td class="bad">{counts["fails"]}</td>') in index
    shutil.copytree(store, tmp_path / "copy" / store.name)
    shutil.copytree(f"{store}.report", tmp_path / "copy" / f"{store.name}.report")
    twice = {kind: 2 * n for kind, n in counts.items()}
    assert verdict_lines(tmp_path)[-1] == (f"[GLPR-P]: {twice['holds']} holds, {twice['fails']} fails, "
                                           f"{twice['hypothesis not met']} hypothesis not met, "
                                           f"{twice['not checked']} not checked")
