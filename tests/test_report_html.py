"""The HTML report and the index: content of the reports of small real sweeps (real kernels, real
zarr stores), and every page opened in a real headless Chromium, which must load every figure
without asking the network (or the disk) for anything.

The browser check: the page is copied with a Content-Security-Policy that allows `data:` images
and inline CSS only (and the probe's inline script), plus a probe that, once the page has loaded,
writes into the DOM the images and their naturalWidth, every resource the page fetched and every
request the policy blocked; `chromium --headless --dump-dom` prints that DOM. A figure that is not
embedded, or any external request, is then a blocked request and a figure of width 0.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from test_report import synthetic_cube

from tokensweep.pipeline.analysis.stats import chi_square_summary
from tokensweep.pipeline.execute import run_partition
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.report import write_report
from tokensweep.pipeline.report.agreement import agreement_table
from tokensweep.pipeline.report.index import write_index
from tokensweep.pipeline.spec.load import parse_sweep
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.store.lifecycle import prepare_store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = ("no chromium on PATH: install Debian's `chromium` package "
               "(apt-get install chromium; .ci/run does it as root)")

# every cell resolved by T = 20 (d = 3, 4; 0 unresolved of 40 each), with observables recorded
RESOLVED = {**TINY, "name": "resolved", "time": {"T": 20.0, "layers": 1000, "checkpoints": 4},
            "trajectories": 40, "partition_traj": 20, "record": ["overlap_hist", "consensus_error"],
            "record_bins": 20}
# T = 2: most trajectories unresolved; its last partition is left undone (an incomplete cube)
ROUGH = {**TINY, "name": "rough"}


def write_cube(spec: dict, path, skip_last: bool = False) -> None:
    sweep = parse_sweep(spec)
    prepare_store(sweep, path)
    for index in range(len(Plan(sweep)) - int(skip_last)):
        run_partition(sweep, path, index)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    write_cube(RESOLVED, root / "resolved.zarr")
    write_cube(ROUGH, root / "runs" / "rough.zarr", skip_last=True)
    return root


@pytest.fixture(scope="module")
def reports(stores):
    out = {}
    for name, store in [("resolved", stores / "resolved.zarr"), ("rough", stores / "runs" / "rough.zarr")]:
        with open_cube(store) as ds:
            out[name] = write_report(ds, store.with_suffix(".report"))
    return out


# -- the browser ---------------------------------------------------------------------------------

POLICY = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
          "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">")
PROBE = """<script>
var blocked = [];
document.addEventListener("securitypolicyviolation", function (e) { blocked.push(e.blockedURI); });
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var out = {images: images.length,
             widths: images.map(function (i) { return i.complete ? i.naturalWidth : 0; }),
             schemes: images.map(function (i) { return i.currentSrc.split(":")[0]; }),
             resources: performance.getEntriesByType("resource").map(function (r) { return r.name; }),
             blocked: blocked};
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def browse(page, tmp_path) -> dict:
    """Open a copy of `page` (policy and probe added) in headless Chromium; the probe's record."""
    text = page.read_text(encoding="utf-8")
    assert text.count("<head>") == 1
    probed = page.with_name(f"probed-{page.name}")
    probed.write_text(text.replace("<head>", "<head>\n" + POLICY + PROBE, 1), encoding="utf-8")
    profile = tmp_path / f"chromium-profile-{page.stem}"
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
         "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120)
    probed.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"no probe in the DOM (rc {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def assert_self_contained(record: dict, figures: int) -> None:
    assert record["images"] == figures, record
    assert all(w > 0 for w in record["widths"]), record["widths"]
    assert set(record["schemes"]) <= {"data"}, record["schemes"]
    assert record["resources"] == [] and record["blocked"] == [], record


@pytest.mark.slow  # starts a browser
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_every_figure_loads_in_chromium_without_a_request(reports, stores, tmp_path):
    for paths in reports.values():
        figures = [name for name in paths if name not in ("report", "html", "summary")]
        assert_self_contained(browse(Path(paths["html"]), tmp_path), len(figures))
    assert_self_contained(browse(write_index(stores), tmp_path), 0)


@pytest.mark.slow  # starts a browser
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_probe_sees_a_figure_not_embedded_and_an_external_request(tmp_path):
    page = tmp_path / "broken.html"
    (tmp_path / "local.png").write_bytes(b"not a png")
    page.write_text("<!DOCTYPE html><html><head><title>x</title></head><body>"
                    '<img src="local.png"><img src="https://example.org/figure.png"></body></html>')
    record = browse(page, tmp_path)
    assert record["images"] == 2 and record["widths"] == [0, 0]
    assert len(record["blocked"]) == 2 and any("example.org" in uri for uri in record["blocked"])


# -- content -------------------------------------------------------------------------------------

def caveat_kinds(page: str) -> list[str]:
    return re.findall(r'data-caveat="(\w+)"', page)


def test_resolved_complete_sweep_has_the_table_figures_and_no_warning(reports, stores):
    paths = reports["resolved"]
    assert {"phase", "horizon", "classes", "overlap_hist", "observables"} <= set(paths)
    page = open(paths["html"], encoding="utf-8").read()
    assert caveat_kinds(page) == []
    assert "<th>p_antipodal</th>" in page and "<th>z</th>" in page  # the agreement table
    with open_cube(stores / "resolved.zarr") as ds:
        table = agreement_table(ds, 0.95)
        chi = chi_square_summary(table)
        judged = int(table.theory.notnull().sum())
        agreed = int(table.agrees.sum())
        assert f"{agreed} of {judged} cells agree" in page
        assert f"χ² = {chi['chi2']:.2f} over {chi['dof']} cells" in page
        assert f"p-value = {chi['p_value']:.3f}" in page
        assert ds.attrs["code_version"] in page and ds.attrs["created_at"] in page
    assert "Unresolved fraction overall: 0.000" in page
    assert page.count("data:image/png;base64,") == 5 and 'src="phase.png"' not in page
    assert "Histogram of pairwise overlaps" not in page  # a figure title is in the PNG, not the text
    assert "consensus_error" in page and "name: resolved" in page  # the spec, as YAML
    summary = json.loads(open(paths["summary"]).read())
    assert summary["cells_done"] == summary["cells"] == 4 and summary["warnings"] == []
    text = open(paths["report"]).read()
    assert "## Provenance" in text and "Warning" not in text


def test_incomplete_unresolved_sweep_warns(reports):
    page = open(reports["rough"]["html"], encoding="utf-8").read()
    assert caveat_kinds(page) == ["incomplete", "unresolved"]
    assert "2 trajectories belong to partitions not done" in page and "3 of 4 cells are complete" in page
    assert "<code>tokensweep rerun STORE</code>" in page
    text = open(reports["rough"]["report"]).read()
    assert "> **Warning: incomplete cube.**" in text and "> **Warning: unresolved" in text
    summary = json.loads(open(reports["rough"]["summary"]).read())
    assert (summary["cells_done"], summary["cells"]) == (3, 4) and summary["unresolved"] > 0.5


def test_cells_outside_their_interval_are_listed(tmp_path):
    ds = synthetic_cube(n_traj=200)
    cc = ds.cluster_class.values.copy()
    cc[3, 0, 0, 1, :] = 2  # d = 3, beta = 2: every trajectory antipodal, theory 0.36
    ds["cluster_class"] = ds.cluster_class.copy(data=cc)
    paths = write_report(ds, tmp_path / "out")
    table = agreement_table(ds, 0.95)
    judged = table.theory.notnull() & (table.n_traj > 0)
    outside = (judged & ~table.agrees).transpose("d", "n", "beta")
    expected = [(int(outside.d[i]), float(outside.beta[k])) for i, _, k in np.argwhere(outside.values)]
    assert (3, 2.0) in expected
    page = open(paths["html"], encoding="utf-8").read()
    rows = re.search(r'<table id="outside">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    listed = [(int(c[0]), float(c[2])) for c in
              (re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", rows))]
    assert listed == expected


def test_index_lists_every_store_and_rewrites_only_stale_reports(reports, stores, tmp_path, cli):
    stores = shutil.copytree(stores, tmp_path / "copy")  # mtimes kept: the reports stay fresh
    index = stores / "index.html"
    result = cli("report", "--index", stores)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()  # the index, each store's claim verdicts, then each paper's
    assert printed[0] == f"index: {index}" and [line.split(":")[0] for line in printed[1:3]] == ["resolved", "rough"]
    assert all(re.fullmatch(r"\w+: 1 holds, 0 fails, 0 hypothesis not met, 0 not checked", line) or
               re.fullmatch(r"\w+: 0 holds, 1 fails, 0 hypothesis not met, 0 not checked", line) for line in printed[1:3])
    def counts(line):
        return np.array([int(n) for n in re.findall(r"(\d+) (?:holds|fails|hypothesis|not checked)", line)])
    # these sweeps are no catalog entry's: their one claim is their model's closed form, no paper's
    assert len(printed) == 4 and printed[3].startswith("no paper: ")
    np.testing.assert_array_equal(counts(printed[3]), counts(printed[1]) + counts(printed[2]))
    page = index.read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"]+)">(\w+)</a>', page)
    assert links == [("resolved.report/report.html", "resolved"), ("runs/rough.report/report.html", "rough")]
    assert all((stores / href).is_file() for href, _ in links)
    assert "4 of 4" in page and "3 of 4" in page and "incomplete cube" in page
    summary = json.loads((stores / "resolved.report" / "summary.json").read_text())
    assert html.escape(summary["agreement"]["text"]) in page
    # fresh reports are kept; a store written since gets a new one
    summaries = {name: stores / folder / "summary.json" for name, folder in
                 [("resolved", "resolved.report"), ("rough", "runs/rough.report")]}
    before = {name: os.stat(path).st_mtime_ns for name, path in summaries.items()}
    rough = stores / "runs" / "rough.zarr"
    run_partition(parse_sweep(ROUGH), rough, len(Plan(parse_sweep(ROUGH))) - 1)
    assert write_index(stores) == index
    assert os.stat(summaries["resolved"]).st_mtime_ns == before["resolved"]
    assert os.stat(summaries["rough"]).st_mtime_ns > before["rough"]
    assert "4 of 4" in index.read_text() and "3 of 4" not in index.read_text()


@pytest.mark.parametrize("args, says", [
    (["x.zarr", "--index", "."], "give either STORE (a store or a catalog name) or --index DIR"),
    (["--index", "no-such-folder"], "no-such-folder is not a folder"),
    (["quickstart"], "no store at results/quickstart.zarr"),  # a catalog name: its default store
])
def test_report_refuses_bad_arguments_in_one_line(args, says, tmp_path, cli):
    result = cli("report", *args, cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
