"""The numbers did not change: every catalog entry's first and last partition against the
fingerprints recorded before the lean-layout refactor (tests/fingerprints.py). Here the first
trajectories of each; the whole partitions, and the quickstart's whole cube, are compared by
test_catalog's run of the small entries, which computes them.

On the CPU type the fingerprints were taken on, the check is exact (SHA-256 of every output).
On another CPU type, or for an entry added since (`python tests/fingerprints.py --new`), whose BLAS and vector code may round differently, the quick tier compares
the heads' arrays within fingerprints.ROUNDING and the catalog's test per-output summaries.
"""

from __future__ import annotations

import fingerprints as fp
import numpy as np
import pytest

import tokensweep

RECORD = fp.load()
NAMES = fp.catalog_names()
HASHES = RECORD["by_cpu"].get(fp.cpu_key(), {})  # none on a CPU type the hashes were not taken on


def test_every_catalog_entry_has_fingerprints():
    recorded = {slot.split("/")[0] for slot in RECORD["summaries"] if not slot.startswith("cube/")}
    assert recorded == set(NAMES), "run `python tests/fingerprints.py --write` for new entries"


# Entries whose kernels compile variants no other quick test needs (recorded observables,
# literal value matrices, equiangular starts...): 15-60 s each on a cold numba cache
OWN_COMPILATION = {"geshkovski2023-energy", "fedorov2026-fig6", "geshkovski2023-equiangular",
                   "geshkovski2023-fig5", "fedorov2026-value-laws", "geshkovski2023-problem2"}
# Real networks (torch, transformers, the packaged MiniLM loaded): seconds of import each
NETWORKS = {entry.name for entry in tokensweep.catalog() if entry.model == "network"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow)
                                  if name in OWN_COMPILATION | NETWORKS else name for name in NAMES])
def test_first_and_last_partitions_heads_unchanged(name):
    outputs = fp.entry_outputs(name, fp.HEAD)
    for label, out in outputs.items():
        slot = f"{name}/{label}/head"
        if slot in HASHES:
            assert fp.digest(out) == HASHES[slot], slot
            continue
        with np.load(fp.ARRAYS) as stored:
            for key, value in out.items():
                problem = fp.close_enough(np.asarray(value), stored[f"{slot}/{key}"], fp.rounding_of(name))
                assert problem is None, f"{slot}/{key}: {problem}"


def test_digest_sees_one_changed_bit():
    """The fingerprint is not blind: one ulp anywhere changes it; the rounding bound does not."""
    out = {"x": np.linspace(0.0, 1.0, 7), "k": np.arange(5, dtype=np.int8)}
    moved = {"x": out["x"].copy(), "k": out["k"]}
    moved["x"][3] = np.nextafter(moved["x"][3], 2.0)
    assert fp.digest(out) != fp.digest(moved)
    assert fp.close_enough(moved["x"], out["x"]) is None
    assert fp.close_enough(out["x"] + 1e-3, out["x"]) is not None


def test_a_stored_partition_reads_back_as_the_kernel_gave_it(tmp_path, tiny_spec):
    """What the catalog's test compares: each partition of a store read back in the kernel's layout
    (its last block shorter, per-checkpoint outputs transposed in the store) is what was written."""
    from tokensweep.pipeline.execute import simulate_partition
    from tokensweep.pipeline.plan import Plan
    from tokensweep.pipeline.spec.load import parse_sweep
    from tokensweep.pipeline.store.chunks import write_outputs
    from tokensweep.pipeline.store.lifecycle import prepare_store

    sweep = parse_sweep(tiny_spec)
    store, plan = str(tmp_path / "tiny.zarr"), Plan(sweep)
    prepare_store(sweep, store)
    written = {}
    for part in plan:
        written[part] = simulate_partition(sweep, part, plan)
        write_outputs(store, plan, part, written[part])
    assert {p.traj_stop - p.traj_start for p in plan} == {5, 2}  # full and short blocks
    for part, outputs in written.items():
        back = fp.stored_partition(store, sweep, part, plan)
        assert fp.digest(back) == fp.digest(outputs), part
