"""Models are plug-ins (pipeline/plugin.py): the contract every registered model meets, and a
model from a separate package, found through a real entry point, run end to end.

* `test_model_contract[NAME]`, one per model of `registry()`: the declarations (name, summary,
  spec, outputs, report_facts), a numba-free import of its module, `simulate` on a tiny cell
  returning exactly the declared outputs, `sections`, and one tiny sweep through the store and
  the report (prepare_store, run_partition, write_report).
* The external package `tokensweep_coin` is written into a temporary `site` folder: a module and
  a ``tokensweep_coin-0.1.dist-info`` with ``entry_points.txt`` (group ``tokensweep.models``),
  which `importlib.metadata` finds on sys.path. Nothing of tokensweep is edited. Each trajectory
  ends antipodal (class 2) with probability beta / (1 + beta), single (class 1) otherwise, and the
  model's closed form `antipodal_probability` says so; its report is the built-in
  `antipodal.probability_section`.
  - `test_external_model_meets_the_contract`: the same contract, in this process, with `site`
    on sys.path (the registry's caches are cleared before and after);
  - `test_external_model_runs_end_to_end`: `tokensweep models` lists it; `tokensweep run` on a
    real two-process Dask LocalCluster and the session's real Prefect server, PYTHONPATH=site
    inherited by the CLI and its workers; the store, report.md (theory column = beta/(1+beta))
    and phase.png; the empirical P(antipodal) inside a 99.9 % Wilson interval of the closed form;
  - `test_unknown_model_is_refused`: without `site` on PYTHONPATH the same spec exits with code 2
    and a message naming every model a spec can name;
  - `test_broken_plugin_warns_and_the_others_load`: an entry point whose import fails is a
    warning, not the end of the registry.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import typing
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from conftest import run_tokensweep, the_flow_run_of_store, wait_for_task_runs
from pydantic import BaseModel
from scipy import stats

from tokensweep.pipeline.models import ENTRY_POINT_GROUP, get_model, registry, sweep_adapter
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.plugin import Model, check_outputs
from tokensweep.pipeline.seeds import trajectory_rngs
from tokensweep.pipeline.spec.base import SweepBase
from tokensweep.pipeline.spec.load import parse_sweep

pytestmark = pytest.mark.timeout(600)

TINY_TIME = {"T": 1.0, "layers": 8, "checkpoints": 2}
# the smallest valid sweep of each built-in model: one cell, two trajectories, a few layers
MINIMAL = {
    "stochastic_transformer": {"grid": {"beta": 1.0, "d": 3, "n": 2}},
    "hybrid": {"grid": {"beta": 1.0, "d": 3, "n": 2, "sigma": 0.5}},
    "sphere_flow": {"grid": {"beta": 1.0, "d": 3, "n": 2}},
    "euclidean_flow": {"grid": {"beta": 1.0, "d": 2, "n": 3}},
    "coin": {"grid": {"beta": 1.0, "d": 3, "n": 2}},  # the external model below
    "network": {"architecture": "gpt2", "size": "tiny", "grid": {"n": 4},
                "time": {"T": 2.0, "layers": 2, "checkpoints": 2}},
}


def minimal_spec(name: str) -> dict:
    if name not in MINIMAL:
        pytest.fail(f"model {name!r} is registered but tests/test_plugins.py has no minimal spec for "
                    "it: add one to MINIMAL (a one-cell grid)")
    return {"name": f"contract-{name}", "model": name, "time": TINY_TIME, "trajectories": 2,
            **MINIMAL[name]}


# ---------------------------------------------------------------------------------------------
# the contract


def check_declarations(model: Model) -> None:
    """What a model declares, checked without running anything."""
    assert isinstance(model, Model), type(model)
    assert isinstance(model.name, str) and model.name, model.name
    assert isinstance(model.summary, str) and model.summary.strip(), f"{model.name}: empty summary"
    assert "\n" not in model.summary, "`tokensweep models` prints the summary on one line"

    spec = model.spec
    assert isinstance(spec, type) and issubclass(spec, SweepBase), spec
    tag = spec.model_fields["model"].annotation
    assert typing.get_origin(tag) is typing.Literal and typing.get_args(tag) == (model.name,), \
        f"{spec.__name__}.model is {tag}, expected Literal[{model.name!r}]"
    # SweepBase.axes, the plan, the seeds and the store all read `sweep.grid`
    grid = spec.model_fields.get("grid")
    assert grid is not None and isinstance(grid.annotation, type) and issubclass(grid.annotation, BaseModel), \
        f"{spec.__name__} has no pydantic `grid` field"
    assert set(model.report_facts) <= set(spec.model_fields), \
        f"report_facts {sorted(set(model.report_facts) - set(spec.model_fields))} are not spec fields"

    assert isinstance(model.outputs, Mapping) and model.outputs, f"{model.name}: no outputs"
    for name, out in model.outputs.items():
        where = f"{model.name}.outputs[{name!r}]"
        assert isinstance(name, str) and name.isidentifier(), where
        assert name not in ("status", "started", "finished", "t", "traj", "block"), \
            f"{where}: the name is the store's own"
        assert isinstance(out.per_checkpoint, bool), where
        dtype = np.dtype(out.dtype)  # raises for an invalid dtype
        assert dtype.kind in "biuf", f"{where}: dtype {dtype} is not bool, integer or float"
        for attr in ("long_name", "units"):
            value = getattr(out, attr)
            assert isinstance(value, str) and value.strip(), f"{where}: empty CF {attr}"
        values, meanings = getattr(out, "flag_values", None), getattr(out, "flag_meanings", None)
        assert (values is None) == (meanings is None), f"{where}: flag_values without flag_meanings"
        if values is not None:
            words = meanings.split()
            assert len(words) == len(values) == len(set(values)) == len(set(words)), \
                f"{where}: flag_values {values} do not match flag_meanings {meanings!r}"
            assert dtype.kind in "iu" and all(int(v) == v for v in values), where
            assert np.array_equal(np.asarray(values).astype(dtype), np.asarray(values)), \
                f"{where}: flag_values {values} do not fit {dtype}"


def check_numba_free_import(model: Model, env: dict | None = None) -> None:
    """Specs and store shapes come from the plug-in module: importing it must not import numba."""
    module = type(model).__module__
    code = f"import sys, {module}; assert 'numba' not in sys.modules, 'numba imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"importing {module}: {done.stderr[-2000:]}"


def check_simulate_and_sections(model: Model, sweep: SweepBase) -> None:
    plan = Plan(sweep)
    part = plan[0]
    coords = plan.coords(part)
    rngs = trajectory_rngs(sweep.seed, coords, range(part.traj_start, part.traj_stop))
    outputs = model.simulate(sweep, coords, rngs)
    nt = len(sweep.time.checkpoint_layers)
    check_outputs(model, outputs, len(rngs), nt, sweep)  # exact names, shapes, castable dtypes
    for name, out in model.outputs.items():
        value = np.asarray(outputs[name])
        assert value.dtype == np.dtype(out.dtype), f"{name}: returned {value.dtype}, declared {out.dtype}"
    sections = model.sections(sweep)
    assert isinstance(sections, (list, tuple)), sections
    assert all(callable(s) for s in sections), sections


def check_store_and_report(model: Model, sweep: SweepBase, folder: Path) -> str:
    """A full tiny run in this process: store, every partition, report. Returns report.md."""
    from tokensweep.pipeline.execute import run_partition
    from tokensweep.pipeline.report import write_report
    from tokensweep.pipeline.store.cube import open_cube
    from tokensweep.pipeline.store.layout import DONE
    from tokensweep.pipeline.store.lifecycle import prepare_store

    store = folder / f"{sweep.name}.zarr"
    assert prepare_store(sweep, store) == "created"
    for index in range(len(Plan(sweep))):
        result = run_partition(sweep, store, index)
        assert not result.skipped, result
    ds = open_cube(store)
    assert (ds.status.values == DONE).all()
    axes = tuple(sweep.axes)
    for name, out in model.outputs.items():
        dims = ((*axes, "t", "traj") if out.per_checkpoint else (*axes, "traj")) + tuple(out.extra_dims)
        assert ds[name].dims == dims, (name, ds[name].dims)
        assert ds[name].attrs["long_name"] == out.long_name
    paths = write_report(ds, folder / "report")
    text = Path(paths["report"]).read_text()
    assert text.startswith(f"# tokensweep report: {sweep.name}"), text[:200]
    assert f"- **model**: {model.name}" in text, text[:800]
    for figure in (v for k, v in paths.items() if k != "report"):
        assert Path(figure).is_file(), figure
    return text


def check_contract(model: Model, spec: dict, folder: Path, env: dict | None = None) -> str:
    check_declarations(model)
    sweep = parse_sweep(spec)  # through the registry's union of every model's spec
    assert type(sweep) is model.spec and get_model(sweep.model) is model
    check_numba_free_import(model, env)
    check_simulate_and_sections(model, sweep)
    return check_store_and_report(model, sweep, folder)


@pytest.mark.parametrize("name", sorted(registry()))
def test_model_contract(name, tmp_path):
    check_contract(get_model(name), minimal_spec(name), tmp_path)


# ---------------------------------------------------------------------------------------------
# an external package: tokensweep_coin

COIN_MODULE = '''\
"""A trivial tokensweep model plug-in: each trajectory is a biased coin."""

from typing import Literal

import numpy as np

from tokensweep.kernels.vocabulary import OutputSpec
from tokensweep.pipeline.plugin import Model
from tokensweep.pipeline.report import antipodal
from tokensweep.pipeline.spec.base import Grid, SweepBase


class CoinSweep(SweepBase):
    model: Literal["coin"]
    grid: Grid


class Coin(Model):
    name = "coin"
    summary = "a biased coin per trajectory: antipodal with probability beta / (1 + beta)"
    spec = CoinSweep
    outputs = {"cluster_class": OutputSpec(True, "int8", "cluster configuration class", "1",
                                           flag_values=(0, 1, 2),
                                           flag_meanings="unresolved single_cluster antipodal")}

    def simulate(self, sweep, coords, rngs):
        beta = float(coords["beta"])
        p = beta / (1 + beta)
        nt = len(sweep.time.checkpoint_layers)
        ends = np.array([2 if rng.random() < p else 1 for rng in rngs], dtype=np.int8)
        return {"cluster_class": np.repeat(ends[:, None], nt, axis=1)}

    def antipodal_probability(self, sweep, cells):
        beta = np.asarray(cells["beta"], float)
        return beta / (1 + beta)

    def sections(self, sweep):
        return [antipodal.probability_section]


model = Coin()
'''


def write_site(root: Path, package: str, dist: str, entry: str, source: str) -> Path:
    """A folder that, on sys.path, holds `package` and a dist-info registering `entry`."""
    site = root / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")
    return site


@pytest.fixture(scope="module")
def coin_site(tmp_path_factory) -> Path:
    return write_site(tmp_path_factory.mktemp("coin"), "tokensweep_coin", "tokensweep-coin",
                      "coin = tokensweep_coin:model", COIN_MODULE)


def _clear_registry() -> None:
    registry.cache_clear()
    sweep_adapter.cache_clear()


@pytest.fixture
def on_sys_path(monkeypatch):
    """Put a site folder on this process's sys.path, with fresh registry caches; undo both."""
    added = []

    def add(site: Path) -> None:
        monkeypatch.syspath_prepend(str(site))
        added.extend(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
        _clear_registry()

    yield add
    monkeypatch.undo()
    for name in added:
        sys.modules.pop(name, None)
    _clear_registry()
    assert "coin" not in registry()


def test_external_model_meets_the_contract(coin_site, on_sys_path, tmp_path):
    from importlib.metadata import distribution, entry_points

    on_sys_path(coin_site)
    assert distribution("tokensweep-coin").version == "0.1"
    (ep,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "coin"]
    assert ep.value == "tokensweep_coin:model"
    model = get_model("coin")
    assert type(model).__module__ == "tokensweep_coin" and model is ep.load()
    assert list(registry())[-1] == "coin"  # after the built-ins
    text = check_contract(model, minimal_spec("coin"), tmp_path, env={"PYTHONPATH": str(coin_site)})
    assert "## P(antipodal) per grid cell" in text and "![phase](phase.png)" in text


def markdown_table(text: str, first: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the markdown table whose header starts with column `first`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {first} |")), None)
    assert start is not None, f"no table starting with {first!r} in the report:\n{text}"
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[0], rows[2:]


def wilson(k: int, n: int, level: float) -> tuple[float, float]:
    z = stats.norm.ppf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


COIN_BETAS = (0.25, 1.0, 4.0)
COIN_SPEC = {
    "name": "coin-e2e",
    "model": "coin",
    "grid": {"beta": list(COIN_BETAS), "d": 3, "n": 2},
    "time": {"T": 1.0, "layers": 4, "checkpoints": 2},
    "trajectories": 400,
    "partition_traj": 100,
    "seed": 2024,
}


@pytest.mark.slow
def test_external_model_runs_end_to_end(prefect_server, coin_site, write_spec, tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(coin_site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    found = subprocess.run(
        [sys.executable, "-c", "from importlib.metadata import entry_points; "
         f"print(sorted(f'{{e.name}}={{e.value}}' for e in entry_points(group={ENTRY_POINT_GROUP!r})))"],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert found.returncode == 0 and "'coin=tokensweep_coin:model'" in found.stdout, found

    listed = run_tokensweep("models", env_extra=env)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert names == [*registry(), "coin"], listed.stdout
    assert "biased coin" in listed.stdout

    store = tmp_path / "coin.zarr"
    done = run_tokensweep("run", write_spec(COIN_SPEC), "--store", store, "--workers", 2, "--no-progress",
                          env_extra=env, timeout=540)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "computed 12 of 12 partitions" in done.stdout, done.stdout
    # the partitions ran as task runs of one flow run on the session's Prefect server
    run = the_flow_run_of_store(prefect_server, store)
    assert run["name"] == f"coin-e2e @ {store}" and run["state_type"] == "COMPLETED", run
    labels = {f"beta={beta:g} d=3 n=2 traj={i}:{i + 100}" for beta in COIN_BETAS for i in range(0, 400, 100)}

    def partitions(task_runs):
        return {r["name"] for r in task_runs if r["state_type"] == "COMPLETED"} & labels

    assert partitions(wait_for_task_runs(prefect_server, run["id"], lambda ts: partitions(ts) == labels)) \
        == labels

    ds = xr.open_zarr(store).load()
    assert set(ds.data_vars) == {"cluster_class", "status", "started", "finished"}, list(ds.data_vars)
    cc = ds.cluster_class
    assert cc.dims == ("beta", "d", "n", "t", "traj"), cc.dims
    assert dict(ds.sizes) == {"beta": 3, "d": 1, "n": 1, "t": 2, "traj": 400, "block": 4}
    assert cc.attrs["flag_meanings"] == "unresolved single_cluster antipodal"
    assert (ds.status.values == 1).all()
    assert set(np.unique(cc.values)) <= {1, 2}  # every entry written: no fill value (NaN)
    assert (cc.isel(t=0) == cc.isel(t=-1)).all()

    report = store.with_suffix(".report")
    assert (report / "phase.png").stat().st_size > 10_000
    text = (report / "report.md").read_text()
    assert text.startswith("# tokensweep report: coin-e2e") and "- **model**: coin" in text, text[:500]
    header, rows = markdown_table(text, "d")
    assert header[:3] == ["d", "n", "beta"], header
    col = {name: header.index(name) for name in ("N", "p_antipodal", "theory")}
    assert [float(r[2]) for r in rows] == list(COIN_BETAS), rows
    for beta, row in zip(COIN_BETAS, rows):
        p_th = beta / (1 + beta)
        assert float(row[col["theory"]]) == pytest.approx(p_th, abs=5e-5), row
        final = cc.sel(beta=beta).isel(t=-1).values.ravel()
        k, n = int((final == 2).sum()), final.size
        assert int(row[col["N"]]) == n == 400, row
        assert float(row[col["p_antipodal"]]) == pytest.approx(k / n, abs=5e-5), row
        lo, hi = wilson(k, n, 0.999)
        assert lo <= p_th <= hi, f"beta = {beta}: {k}/{n} antipodal, 99.9 % Wilson [{lo:.4f}, {hi:.4f}] " \
                                 f"misses beta/(1+beta) = {p_th:.4f}"
    assert "![phase](phase.png)" in text


def test_unknown_model_is_refused(write_spec, tmp_path, cli):
    store = tmp_path / "never.zarr"
    spec = write_spec(COIN_SPEC)
    refused = cli("run", spec, "--store", store, "--workers", "2", "--no-progress")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = refused.stderr
    assert "unknown model 'coin'" in message, message
    assert all(name in message for name in registry()), message
    assert "Traceback" not in message and not store.exists()


BROKEN_MODULE = 'raise ImportError("this plug-in is broken on purpose")\n'


def test_broken_plugin_warns_and_the_others_load(on_sys_path, tmp_path):
    site = write_site(tmp_path, "tokensweep_broken", "tokensweep-broken",
                      "broken = tokensweep_broken:model", BROKEN_MODULE)
    builtins = set(registry())
    on_sys_path(site)
    with pytest.warns(RuntimeWarning, match="'broken'.*failed to load.*broken on purpose"):
        assert set(registry()) == builtins
