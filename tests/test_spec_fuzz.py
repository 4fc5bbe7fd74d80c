"""Fuzzing the spec parser: random mutations of catalog/quickstart.yaml, nested fields too.

Whatever the mutation, `parse_sweep` either refuses it with a `SpecError` whose message is one
line `field: problem`, or returns a sweep that runs (its plan, seeds and store size are defined);
no other exception ever. A few mutations also go through the command line (`tokensweep plan`, by
`main(argv)` in this process, which the console script calls), which exits 0 or 2 and never shows a
traceback.
"""

from __future__ import annotations

import copy
import math
import re

import pytest
import yaml
from conftest import run_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokensweep.pipeline.errors import SpecError
from tokensweep.pipeline.plan import Plan
from tokensweep.pipeline.spec.load import check_store_size, estimated_store_bytes, parse_sweep, resolve_spec_path

QUICKSTART = yaml.safe_load(resolve_spec_path("quickstart").read_text())
ONE_LINE_FIELD_PROBLEM = re.compile(r"^(spec|[A-Za-z_][\w.]*): \S[^\n]*$")


def _paths(data: dict, prefix=()) -> list[tuple]:
    """Every key of the spec, nested ones too, as a path of keys."""
    out = []
    for key, value in data.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out


PATHS = _paths(QUICKSTART) + [("unknown_key",), ("grid", "sigma"), ("time", "dt")]
ODD_VALUES = st.sampled_from([
    None, [], [1, 2], [[1]], {}, {"start": 3, "stop": 1, "num": 0}, math.nan, math.inf, -math.inf,
    10**12, -10**12, -1, 0, 1, 1e300, -1e-300, True, "", "ünïcødé ✓ 中文", "a\x00b", "sa",
    "stochastic_transformer",
])
VALUES = st.one_of(
    ODD_VALUES,
    st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.lists(st.floats(allow_nan=False, min_value=-10, max_value=10), max_size=3),
)
# (path, value) sets it; (path, DELETE) deletes it
DELETE = object()
MUTATIONS = st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(st.just(DELETE), VALUES)),
                     min_size=1, max_size=3)


def mutate(mutations) -> dict:
    spec = copy.deepcopy(QUICKSTART)
    for path, value in mutations:
        parent = spec
        for key in path[:-1]:
            if not isinstance(parent.get(key), dict):
                break  # an earlier mutation replaced the parent: nothing left to change there
            parent = parent[key]
        else:
            if value is DELETE:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = copy.deepcopy(value)
    return spec


def check_parse(spec: dict) -> None:
    try:
        sweep = parse_sweep(spec)
    except SpecError as err:
        assert ONE_LINE_FIELD_PROBLEM.match(str(err)), f"not one line `field: problem`: {err}"
        return
    # accepted: it can be planned, sized and stored, and it round-trips as stores keep it
    plan = Plan(sweep)
    assert len(plan) >= 1 and plan[len(plan) - 1].traj_stop == sweep.trajectories
    assert estimated_store_bytes(sweep) > 0
    try:
        check_store_size(sweep)
    except SpecError as err:
        assert ONE_LINE_FIELD_PROBLEM.match(str(err)), err
    assert parse_sweep(sweep.model_dump(mode="json")) == sweep


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(MUTATIONS)
def test_parse_sweep_refuses_with_one_line_or_accepts_a_runnable_sweep(mutations):
    check_parse(mutate(mutations))


@pytest.mark.parametrize("path, value, field", [
    (("grid", "beta", "start"), None, "grid.beta"),
    (("grid", "beta", "stop"), [], "grid.beta"),
    (("grid", "beta", "stop"), {"start": 3, "stop": 1, "num": 0}, "grid.beta"),
    (("trajectories",), 10**12, "trajectories"),
    (("grid", "beta", "num"), 10**12, "grid.beta"),   # would allocate 8 TB in linspace
    (("grid", "n"), 10**12, "grid.n"),                 # would allocate n x n per trajectory
    (("time", "checkpoints"), None, "time.checkpoints"),
    (("store",), "a\x00b", "store"),
])
def test_former_tracebacks_are_refused_naming_the_field(path, value, field):
    with pytest.raises(SpecError) as err:
        parse_sweep(mutate([(path, value)]))
    assert str(err.value).startswith(f"{field}: "), err.value
    assert ONE_LINE_FIELD_PROBLEM.match(str(err.value)), err.value


def test_store_size_limit_names_the_estimate_and_the_fix(monkeypatch):
    monkeypatch.delenv("TOKENSWEEP_MAX_STORE_GIB", raising=False)
    sweep = parse_sweep({**QUICKSTART, "trajectories": 100_000_000})
    with pytest.raises(SpecError) as err:
        check_store_size(sweep)
    message = str(err.value)
    assert message.startswith("spec: the store would need 240.") and "GiB" in message, message
    assert "lower trajectories or the grid" in message and "TOKENSWEEP_MAX_STORE_GIB=241" in message
    monkeypatch.setenv("TOKENSWEEP_MAX_STORE_GIB", "241")
    check_store_size(sweep)  # allowed when asked for


@pytest.mark.slow
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(MUTATIONS)
def test_cli_plan_exits_0_or_2_and_never_shows_a_traceback(tmp_path, mutations):
    spec = tmp_path / "fuzz.yaml"
    spec.write_text(yaml.safe_dump(mutate(mutations), allow_unicode=True), encoding="utf-8")
    result = run_in_process("plan", spec, "--store", tmp_path / "fuzz.zarr")  # main(argv), as the console script
    assert result.returncode in (0, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    if result.returncode == 2:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "fuzz.zarr").exists()
